/// \file dependency_flags.hpp
/// Work items that depend on each other, run in one kernel: the teams take items in a fixed order from
/// a ticket counter, and an item waits until the items it reads have published their results. Every
/// item an item waits on comes earlier in the ticket order, so it was taken by a team that is already
/// running or done: no team waits for one that has not started, on GPUs and on host thread pools alike
/// (the argument of the decoupled look-back in tile_scan.hpp). What it replaces: one launch per
/// dependency level (a tree's levels), each paying a launch's latency for little work.
///
/// Assumptions: teams that have started keep making progress while others wait (true of CUDA, HIP and
/// host thread pools; not promised by SYCL or OpenMP target offload); one launch at a time per
/// workspace (the ticket counter is reset by the launch's last ticket, not by prepare(): two launches
/// in flight on different execution space instances with one workspace would share tickets). Waiting
/// threads spin: on an oversubscribed host (more threads than cores) a wait can take a time slice.
///
/// Flags: one word per item holding the epoch of the launch that published it, so the array needs no
/// clearing between launches (it is cleared when the epoch counter wraps). A flag is written by a
/// release store and read by an acquire load (compat::store_release / load_acquire); readers also read
/// the item's data with coherent loads (compat::coherent_load: GPUs' L1 caches are not coherent).
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <memory>

#include "kfmm/core/error.hpp"
#include "kfmm/core/kokkos_compat.hpp"

namespace kfmm {

/// Reusable state of DependencyFlags: one flag per item, the ticket counter and the epoch counter.
/// Copies share all three.
template <class MemorySpace>
struct DependencyWorkspace {
  struct State {
    Kokkos::View<unsigned*, MemorySpace> flags;             ///< per item: epoch of its publication
    Kokkos::View<unsigned long long*, MemorySpace> ticket;  ///< next ticket to hand out (reset to 0)
    unsigned epoch = 0;                                     ///< the last epoch handed out
  };
  std::shared_ptr<State> state = std::make_shared<State>();

  /// Room for `items` flags; returns the epoch of one launch on `space`. Flags are zeroed when
  /// (re)allocated and when the epoch wraps, so no flag left by an earlier launch carries the epoch.
  template <class ExecutionSpace>
  unsigned prepare(const ExecutionSpace& space, long long items) {
    require(items >= 0, "DependencyWorkspace: negative item count ", items);
    State& s = *state;
    if (static_cast<long long>(s.flags.extent(0)) < items) {
      s.flags = Kokkos::View<unsigned*, MemorySpace>();
      s.flags = Kokkos::View<unsigned*, MemorySpace>("kfmm::dependency_flags", items + items / 4 + 64);
      s.epoch = 0;
    }
    if (s.ticket.extent(0) == 0)
      s.ticket = Kokkos::View<unsigned long long*, MemorySpace>("kfmm::dependency_flags::ticket", 1);
    if (s.epoch == UINT_MAX) {
      Kokkos::deep_copy(space, s.flags, 0u);
      s.epoch = 0;
    }
    return ++s.epoch;
  }
};

/// The device side of one launch: tickets, publication and the readiness test.
template <class MemorySpace>
struct DependencyFlags {
  Kokkos::View<unsigned*, MemorySpace> flags;
  Kokkos::View<unsigned long long*, MemorySpace> ticket;
  unsigned epoch = 0;
  long long tickets = 0;  ///< teams of the launch (the last ticket is tickets - 1)

  DependencyFlags() = default;
  DependencyFlags(const DependencyWorkspace<MemorySpace>& w, unsigned launch_epoch, long long launch_tickets)
      : flags(w.state->flags), ticket(w.state->ticket), epoch(launch_epoch), tickets(launch_tickets) {}

  /// One thread per team: the team's position in the order, in the order teams start.
  KOKKOS_INLINE_FUNCTION long long take_ticket() const {
    const long long t = static_cast<long long>(Kokkos::atomic_fetch_add(&ticket(0), 1ULL));
    if (t == tickets - 1) Kokkos::atomic_exchange(&ticket(0), 0ULL);  // every ticket is out: reset
    return t;
  }

  /// The whole team: its ticket (taken by thread 0, broadcast to all).
  template <class Team>
  KOKKOS_INLINE_FUNCTION long long team_ticket(const Team& team) const {
    long long t = 0;
    if (team.team_rank() == 0) t = take_ticket();
    team.team_broadcast(t, 0);
    return t;
  }

  /// Whether item i was published in this launch; after a true answer the item's data may be read
  /// (an acquire load of the flag: compat::load_acquire).
  KOKKOS_INLINE_FUNCTION bool published(const int i) const { return compat::load_acquire(flags(i)) == epoch; }

  /// Makes this thread's writes visible device-wide: every thread of a team that wrote part of an
  /// item calls it before the team barrier that precedes publish().
  KOKKOS_INLINE_FUNCTION static void release() { Kokkos::memory_fence(); }

  /// Publishes item i (the thread that wrote it, or one thread after release() by every writer and a
  /// team barrier): a release store of the launch's epoch (compat::store_release).
  KOKKOS_INLINE_FUNCTION void publish(const int i) const { compat::store_release(flags(i), epoch); }
};

}  // namespace kfmm
