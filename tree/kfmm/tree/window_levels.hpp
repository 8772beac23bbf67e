/// \file window_levels.hpp
/// Per sorted position i, the two levels the octree's topology is read from (octree.hpp):
///   d(i) = 1 + (deepest level at which keys i-1 and i share a cell), d(0) = 0;
///   L(i) = 1 + (deepest level whose cell around i holds more than leaf_size particles)
///        = 1 + max of G(j) over the windows j in [i - leaf_size, i],  G(j) = common level of keys j and
///          j + leaf_size (a window of leaf_size + 1 consecutive keys shares a cell exactly to G(j)),
/// packed as dl(i) = d(i) | L(i) << 8, with dl(N) = 0.
///
/// The sliding maximum in two kernels, both coalesced:
/// 1. runs: R(k) = max of G over the run of W = 2^K windows k - W + 1 .. k (K = floor(log2(
///    min(leaf_size + 1, 1024))); G = -1 outside [0, windows)). Each team loads G for its tile of runs
///    and the W - 1 windows before it into scratch and doubles the run length K times there.
/// 2. levels: L(i) from the runs that cover [i - leaf_size, i] (two for leaf_size < 1024: the run
///    starting at i - leaf_size and the one ending at i may overlap, which a maximum does not mind),
///    and d(i) from the two keys.
/// (An earlier form took blocks of leaf_size + 1 windows per thread, van Herk / Gil-Werman: each
/// thread read its block byte by byte, 57 us of the ~0.6 ms build at 1e6 particles on the H200.)
#pragma once

#include <Kokkos_Core.hpp>

#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/view_capacity.hpp"
#include "kfmm/tree/morton.hpp"

namespace kfmm {
namespace detail {

/// Longest run of windows that the first kernel builds in scratch.
inline constexpr int max_window_run = 1024;

/// Kernel 1: runs(k) = max of G over windows k - W + 1 .. k, for k in [0, n).
template <class ExecutionSpace>
struct WindowRuns {
  using memory_space = typename ExecutionSpace::memory_space;
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = Kokkos::View<signed char*, typename ExecutionSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::View<const MortonKey*, memory_space> keys;
  Kokkos::View<signed char*, memory_space> runs;  // n entries
  int n, leaf_size, windows, run_log, tile;

  static size_t scratch_bytes(int tile, int run) { return 2 * Scratch::shmem_size(tile + run - 1); }

  KOKKOS_INLINE_FUNCTION void operator()(const Team& team) const {
    const int W = 1 << run_log;
    const int len = tile + W - 1;
    const int k0 = team.league_rank() * tile;  // first run of the tile; scratch q <-> window k0 - W + 1 + q
    Scratch a(team.team_scratch(0), len), b(team.team_scratch(0), len);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len), [&](const int q) {
      const int j = k0 - W + 1 + q;
      a(q) = static_cast<signed char>(
          j >= 0 && j < windows ? morton_common_level(keys(j), keys(j + leaf_size)) : -1);
    });
    team.team_barrier();
    // After step s, entry q holds the maximum over 2^(s+1) windows from q on.
    for (int s = 0; s < run_log; ++s) {
      const Scratch& from = s % 2 == 0 ? a : b;
      const Scratch& to = s % 2 == 0 ? b : a;
      const int h = 1 << s;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, len), [&](const int q) {
        to(q) = q + h < len && from(q + h) > from(q) ? from(q + h) : from(q);
      });
      team.team_barrier();
    }
    const Scratch& done = run_log % 2 == 0 ? a : b;
    const int count = k0 + tile < n ? tile : n - k0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](const int q) { runs(k0 + q) = done(q); });
  }
};

/// Kernel 2: dl(i) for i in [0, n].
template <class MemorySpace>
struct WindowStartLevels {
  Kokkos::View<const MortonKey*, MemorySpace> keys;
  Kokkos::View<const signed char*, MemorySpace> runs;
  Kokkos::View<int*, MemorySpace> dl;
  int n, leaf_size, windows, run_log;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    if (i == n) {
      dl(i) = 0;
      return;
    }
    int L = 0;
    if (windows > 0) {
      // Windows [i - leaf_size, i] as runs of W <= leaf_size + 1 (runs(k) covers windows k - W + 1 .. k):
      // the run ending at i, and those ending at i - leaf_size + W - 1, + W, ... below i (runs ending
      // before window 0 hold nothing but -1).
      const int W = 1 << run_log;
      int G = runs(i);
      for (int end = i - leaf_size + W - 1; end < i; end += W) {
        if (end >= 0) G = runs(end) > G ? runs(end) : G;
      }
      L = G + 1 < morton_levels ? G + 1 : morton_levels;
    }
    const int d = i == 0 ? 0 : morton_common_level(keys(i - 1), keys(i)) + 1;
    dl(i) = d | (L << 8);
  }
};

}  // namespace detail

/// dl(i) = d(i) | L(i) << 8 for the n sorted keys (i < n) and dl(n) = 0 (see the file comment); `runs`
/// is a temporary of n entries (grown as needed). Leaves beyond 1023 particles cost (leaf_size + 1) /
/// 1024 run reads per position.
template <class ExecutionSpace, class Keys, class Dl, class Runs>
void window_levels(const ExecutionSpace& space, const Keys& keys, int n, int leaf_size, const Dl& dl,
                   Runs& runs) {
  const int windows = n > leaf_size ? n - leaf_size : 0;  // window j covers keys [j, j + leaf_size]
  int run_log = 0;
  while ((2 << run_log) <= detail::max_window_run &&
         (2LL << run_log) <= static_cast<long long>(leaf_size) + 1)
    ++run_log;
  const int W = 1 << run_log;
  detail::reserve_at_least(runs, n, "kfmm::octree::window_runs");
  constexpr bool host = detail::is_host_execution_space<ExecutionSpace>;
  const int tile = host ? 4096 : 1024;
  const int team = host ? 1 : 256;
  const int tiles = (n + tile - 1) / tile;
  using Runs1 = detail::WindowRuns<ExecutionSpace>;
  Kokkos::parallel_for("kfmm::octree::window_runs",
                       Kokkos::TeamPolicy<ExecutionSpace>(space, tiles, team)
                           .set_scratch_size(0, Kokkos::PerTeam(Runs1::scratch_bytes(tile, W))),
                       Runs1{keys, runs, n, leaf_size, windows, run_log, tile});
  Kokkos::parallel_for("kfmm::octree::start_levels", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n + 1),
                       detail::WindowStartLevels<typename ExecutionSpace::memory_space>{
                           keys, runs, dl, n, leaf_size, windows, run_log});
}

}  // namespace kfmm
