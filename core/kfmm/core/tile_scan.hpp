/// \file tile_scan.hpp
/// Single-pass exclusive scan across the teams of one kernel: decoupled look-back (Merrill and
/// Garland, "Single-pass parallel prefix scan with decoupled look-back", NVIDIA NVR-2016-002).
///
/// A count -> scan -> write pipeline usually takes three kernels (scan.hpp). A kernel that uses
/// TileScan does it in one: each team takes the next tile index from a ticket counter (so a tile's
/// predecessors were all taken by teams that are already running: no team waits for one that has not
/// started, on GPUs and on host thread pools alike), counts its tile, publishes the tile's aggregate,
/// then looks back over the preceding tiles, up to `lookback_window` at a time on GPUs (one read per
/// thread, all in flight together, then two team reductions; one at a time in a one-thread host team),
/// adding their aggregates until it meets a published inclusive prefix, and publishes its own. The prefixes
/// are sums of the same counts in the same order as a global exclusive scan, so the offsets, and everything
/// written at them, are identical to the three-kernel pipeline's and independent of scheduling.
///
/// A tile's state is one 64-bit word, written atomically and read with coherent loads (an aligned 64-bit
/// load cannot tear, so the look-back needs no atomic read-modify-write): value << 8 | epoch << 2 |
/// status (status 1: aggregate, 2: inclusive prefix; values below 2^56). The epoch (1 .. 63) tells this
/// launch's words from older ones, so the array needs no clearing between launches; it is cleared once
/// every 63 launches, when the epoch wraps. The ticket counter resets itself: the team that takes the last
/// ticket of a launch writes it back to 0.
#pragma once

#include <Kokkos_Core.hpp>

#include <memory>
#include <string>

#include "kfmm/core/error.hpp"
#include "kfmm/core/kokkos_compat.hpp"

namespace kfmm {

/// Reusable state of TileScan: one word per tile, the ticket and the epoch counter. Copies share all
/// three (a copied workspace, e.g. inside a copied Solver, used alternately with the original must not
/// see the other's words under its own epoch numbers).
template <class MemorySpace>
struct TileScanWorkspace {
  struct State {
    Kokkos::View<unsigned long long*, MemorySpace> words;   ///< per tile: value << 8 | epoch << 2 | status
    Kokkos::View<unsigned long long*, MemorySpace> ticket;  ///< next tile index to hand out (reset to 0)
    unsigned long long epoch = 0;                           ///< the last epoch handed out (1 .. 63)
  };
  std::shared_ptr<State> state = std::make_shared<State>();

  /// Room for `tiles` tiles; returns the epoch of one launch on `space`. Words are zeroed when
  /// (re)allocated and when the epoch wraps, so no word left by an earlier launch carries the epoch.
  template <class ExecutionSpace>
  unsigned long long prepare(const ExecutionSpace& space, long long tiles) {
    require(tiles >= 0, "TileScanWorkspace: negative tile count ", tiles);
    State& s = *state;
    if (static_cast<long long>(s.words.extent(0)) < tiles) {
      s.words = Kokkos::View<unsigned long long*, MemorySpace>();
      s.words =
          Kokkos::View<unsigned long long*, MemorySpace>("kfmm::tile_scan::words", tiles + tiles / 4 + 64);
      s.epoch = 0;
    }
    if (s.ticket.extent(0) == 0)
      s.ticket = Kokkos::View<unsigned long long*, MemorySpace>("kfmm::tile_scan::ticket", 1);
    if (s.epoch == 63) {
      Kokkos::deep_copy(space, s.words, 0ULL);
      s.epoch = 0;
    }
    return ++s.epoch;
  }
};

/// The device side of one launch: tickets and look-back. Copy it into the kernel's functor and give
/// each team `scratch_bytes()` of level-0 scratch.
template <class MemorySpace>
struct TileScan {
  static constexpr int lookback_window = 256;
  static constexpr unsigned long long max_value = (1ULL << 56) - 1;
  Kokkos::View<unsigned long long*, MemorySpace> words, ticket;
  unsigned long long epoch = 0;
  long long tiles = 0;  ///< teams of the launch (the last ticket is tiles - 1)

  TileScan() = default;
  TileScan(const TileScanWorkspace<MemorySpace>& w, unsigned long long launch_epoch, long long launch_tiles)
      : words(w.state->words), ticket(w.state->ticket), epoch(launch_epoch), tiles(launch_tiles) {}

  static size_t scratch_bytes() { return lookback_window * sizeof(unsigned long long) + 64; }

  /// One thread per team: the team's tile index, in the order teams start.
  KOKKOS_INLINE_FUNCTION long long take_ticket() const {
    const long long t = static_cast<long long>(Kokkos::atomic_fetch_add(&ticket(0), 1ULL));
    if (t == tiles - 1) Kokkos::atomic_exchange(&ticket(0), 0ULL);  // every ticket is out: reset
    return t;
  }

  /// The whole team, after the tile's counts are summed (`sum` < 2^56, the same on every thread):
  /// publishes `sum` and returns, on every thread, the sum of the counts of all preceding tiles
  /// (waiting for each to publish at least its aggregate).
  template <class Team>
  KOKKOS_INLINE_FUNCTION unsigned long long exclusive_prefix(const Team& team, const long long tile,
                                                             const unsigned long long sum) const {
    using Scratch = Kokkos::View<unsigned long long*, typename Team::scratch_memory_space,
                                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
    const unsigned long long tag = epoch << 2;
    if (tile == 0) {
      if (team.team_rank() == 0) Kokkos::atomic_exchange(&words(0), (sum << 8) | tag | 2ULL);
      return 0;
    }
    if (team.team_rank() == 0) Kokkos::atomic_exchange(&words(tile), (sum << 8) | tag | 1ULL);
    Scratch seen(team.team_scratch(0), lookback_window);
    // As many predecessors per step as the team has threads, up to the window (a one-thread host team
    // reads one at a time and stops at the first inclusive prefix, usually its direct predecessor's).
    // When all tiles start together (one wave), every tile publishes its aggregate at about the same
    // time and tile t sums ~t / window of them before it meets an inclusive prefix, so the window is
    // wide and each step is two team reductions, not a serial pass over the window.
    const int window = team.team_size() < lookback_window ? team.team_size() : lookback_window;
    unsigned long long prefix = 0;
    long long next = tile - 1;  // the nearest predecessor not yet added
    for (;;) {
      // One word per thread for the tiles next, next - 1, ... (tile 0 always ends the walk).
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, window), [&](const int lane) {
        const long long p = next - lane;
        seen(lane) = p >= 0 ? compat::coherent_load(words(p)) : tag | 2ULL;
      });
      team.team_barrier();
      // The nearest lane that ends this step, as 2 lane (an inclusive prefix) or 2 lane + 1 (a tile not
      // published yet); the lanes before it hold aggregates. 2 window: every lane holds an aggregate.
      int stop = 2 * window;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, window),
          [&](const int lane, int& first) {
            const unsigned long long status = seen(lane) & 0xffULL;
            const int key = status == (tag | 2ULL)   ? 2 * lane
                            : status == (tag | 1ULL) ? 2 * window
                                                     : 2 * lane + 1;
            if (key < first) first = key;
          },
          Kokkos::Min<int>(stop));
      const bool inclusive = stop < 2 * window && stop % 2 == 0;
      const int count = stop >= 2 * window ? window : stop / 2 + (inclusive ? 1 : 0);
      unsigned long long add = 0;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, count),
          [&](const int lane, unsigned long long& a) { a += seen(lane) >> 8; }, add);
      team.team_barrier();  // (all reads of `seen` done before the next step overwrites it)
      prefix += add;
      if (inclusive) break;
      next -= count;  // (count 0: the nearest tile is not published yet; read it again)
    }
    if (team.team_rank() == 0) Kokkos::atomic_exchange(&words(tile), ((prefix + sum) << 8) | tag | 2ULL);
    return prefix;
  }
};

}  // namespace kfmm
