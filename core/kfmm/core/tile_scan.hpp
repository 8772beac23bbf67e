/// \file tile_scan.hpp
/// Single-pass exclusive scan across the teams of one kernel: decoupled look-back (Merrill and
/// Garland, "Single-pass parallel prefix scan with decoupled look-back", NVIDIA NVR-2016-002).
///
/// A count -> scan -> write pipeline usually takes three kernels (scan.hpp). A kernel that uses
/// TileScan does it in one: each team takes the next tile index from a ticket counter (so a tile's
/// predecessors were all taken by teams that are already running: no team waits for one that has not
/// started, on GPUs and on host thread pools alike), counts its tile, publishes the tile's aggregate,
/// then one thread walks back over the preceding tiles adding their aggregates until it meets a
/// published inclusive prefix, and publishes its own. The prefixes are sums of the same counts in the
/// same order as a global exclusive scan, so the offsets, and everything written at them, are
/// identical to the three-kernel pipeline's and independent of scheduling.
///
/// Flags carry an epoch (a number the caller never reuses for the same state), so the flag array
/// needs no clearing between launches: a flag from an earlier launch has a different epoch and reads
/// as "not yet published". The ticket counter resets itself: the team that takes the last ticket of
/// a launch writes it back to 0.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#include "kfmm/core/error.hpp"

namespace kfmm {

/// Reusable state of TileScan: per tile a flag, an aggregate and an inclusive prefix, and the ticket.
template <class MemorySpace>
struct TileScanWorkspace {
  Kokkos::View<unsigned long long*, MemorySpace> flags;  ///< epoch << 2 | status (1 aggregate, 2 inclusive)
  Kokkos::View<unsigned long long*, MemorySpace> aggregate;  ///< sum of the tile's counts
  Kokkos::View<unsigned long long*, MemorySpace> inclusive;  ///< sum of the counts of tiles 0 .. tile
  Kokkos::View<unsigned long long*, MemorySpace> ticket;     ///< next tile index to hand out (reset to 0)
  unsigned long long epoch = 0;                              ///< the last epoch handed out

  /// Room for `tiles` tiles; returns a fresh epoch for one launch. Flags are zeroed when (re)allocated
  /// (epoch 0 is never handed out), so stale entries never look published.
  unsigned long long prepare(long long tiles) {
    require(tiles >= 0, "TileScanWorkspace: negative tile count ", tiles);
    if (static_cast<long long>(flags.extent(0)) < tiles) {
      const long long cap = tiles + tiles / 4 + 64;
      flags = Kokkos::View<unsigned long long*, MemorySpace>("kfmm::tile_scan::flags", cap);
      aggregate = Kokkos::View<unsigned long long*, MemorySpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::tile_scan::aggregate")), cap);
      inclusive = Kokkos::View<unsigned long long*, MemorySpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::tile_scan::inclusive")), cap);
    }
    if (ticket.extent(0) == 0)
      ticket = Kokkos::View<unsigned long long*, MemorySpace>("kfmm::tile_scan::ticket", 1);
    return ++epoch;
  }
};

/// The device side of one launch: tickets and look-back. Copy it into the kernel's functor.
template <class MemorySpace>
struct TileScan {
  Kokkos::View<unsigned long long*, MemorySpace> flags, aggregate, inclusive, ticket;
  unsigned long long epoch = 0;
  long long tiles = 0;  ///< teams of the launch (the last ticket is tiles - 1)

  TileScan() = default;
  TileScan(const TileScanWorkspace<MemorySpace>& w, unsigned long long launch_epoch, long long launch_tiles)
      : flags(w.flags),
        aggregate(w.aggregate),
        inclusive(w.inclusive),
        ticket(w.ticket),
        epoch(launch_epoch),
        tiles(launch_tiles) {}

  /// One thread per team: the team's tile index, in the order teams start.
  KOKKOS_INLINE_FUNCTION long long take_ticket() const {
    const long long t = static_cast<long long>(Kokkos::atomic_fetch_add(&ticket(0), 1ULL));
    if (t == tiles - 1) Kokkos::atomic_exchange(&ticket(0), 0ULL);  // every ticket is out: reset
    return t;
  }

  /// One thread per team, after the tile's counts are summed: publishes `sum` and returns the sum of
  /// the counts of all preceding tiles (waits for them to publish at least their aggregates).
  KOKKOS_INLINE_FUNCTION unsigned long long exclusive_prefix(const long long tile,
                                                             const unsigned long long sum) const {
    unsigned long long prefix = 0;
    if (tile > 0) {
      aggregate(tile) = sum;
      Kokkos::memory_fence();
      Kokkos::atomic_exchange(&flags(tile), (epoch << 2) | 1ULL);
      for (long long p = tile - 1;;) {
        const unsigned long long f = Kokkos::atomic_fetch_add(&flags(p), 0ULL);
        if ((f >> 2) != epoch) continue;  // not published yet in this launch: spin
        Kokkos::memory_fence();
        if ((f & 3ULL) == 2ULL) {
          prefix += Kokkos::atomic_fetch_add(&inclusive(p), 0ULL);
          break;
        }
        prefix += Kokkos::atomic_fetch_add(&aggregate(p), 0ULL);
        --p;  // (tile 0 always publishes an inclusive prefix, so p never passes it)
      }
    }
    inclusive(tile) = prefix + sum;
    Kokkos::memory_fence();
    Kokkos::atomic_exchange(&flags(tile), (epoch << 2) | 2ULL);
    return prefix;
  }
};

}  // namespace kfmm
