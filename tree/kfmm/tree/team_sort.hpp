// A team sorts one row of unsigned values in place: a bitonic network run in scratch chunks, for the walk's
// per-row sort of the atomic scatter (the rows' lengths vary from none to ~1e4 entries, most a few hundred).
#pragma once

#include <Kokkos_Core.hpp>

#include "kfmm/core/bit_width.hpp"

namespace kfmm::detail {

/// Element pair (lo, hi), lo < hi, of comparator `c` in stage (k, j = 2^shift) of a bitonic sorting
/// network whose comparators all put the smaller value at the lower index: the merge of k-blocks first
/// compares each element with its mirror in the block (j = k / 2), then runs half-cleaners at distances
/// j = k / 4 .. 1. With every comparator ascending the network sorts any length n: the missing elements
/// at n .. 2^m - 1 act as +infinity, which never moves, so a comparator with hi >= n is skipped. (Shifts
/// and masks, j being a power of two: GPUs emulate 64-bit division in tens of instructions, and with
/// divisions here the walk took 1.06 instead of 0.60 ms at 2e5 Plummer, p 7, theta 0.72, leaf 64 on an
/// H100: docs/benchmarks.md, "Thirty-sixth session".)
template <class Index>
KOKKOS_INLINE_FUNCTION void bitonic_pair(const Index c, const Index k, const Index j, const int shift,
                                         Index& lo, Index& hi) {
  const Index r = c & (j - 1);
  const Index block_start = (c >> shift) << (shift + 1);  // j comparators per 2j elements
  lo = block_start + r;
  hi = j == k / 2 ? block_start + k - 1 - r : lo + j;
}

/// Sorts a[0, n) ascending in place with the threads of `team` (any team size, one included), then stores
/// `out(value)` in place of each value (the walk turns entry indices into sources on the way out).
/// `scratch` holds `chunk` values (a power of two): every stage whose comparators lie within aligned
/// chunks runs there (rows up to `chunk` entries never touch global memory in between); only the stages
/// at distances >= chunk of longer rows run on `a` itself (a team barrier after each).
template <class Team, class Scratch, class Out>
KOKKOS_INLINE_FUNCTION void team_sort(const Team& team, unsigned* a, const int n, const Scratch& scratch,
                                      const Out& out) {
  const int chunk = static_cast<int>(scratch.extent(0));
  long long size = 1;  // the network's length: n rounded up to a power of two
  while (size < n) size *= 2;
  const int local = size < chunk ? static_cast<int>(size) : chunk;

  // Loads the chunk at `base`, runs the stages (k, j) for k = k_first .. k_last and j from k / 2 (from
  // j_first for k_first) down to 1 in scratch, and stores it back (through `out` if `last`). Within a
  // chunk the pair indices are local (k > chunk only with j < chunk: half-cleaners inside the chunk).
  const auto in_scratch = [&](const long long base, const long long k_first, const long long k_last,
                              const int j_first, const bool last) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, local),
                         [&](const int i) { scratch(i) = base + i < n ? a[base + i] : ~0u; });
    team.team_barrier();
    for (long long k = k_first; k <= k_last; k *= 2) {
      const int j_start = k == k_first ? j_first : static_cast<int>(k / 2);
      // (k itself only matters for the mirror stage, j = k / 2, where it is at most the chunk)
      const int k_local = k <= chunk ? static_cast<int>(k) : 0;
      // (shift: log2 of j, a power of two)
      for (int j = j_start, shift = bits_for(j_start - 1); j >= 1; j /= 2, --shift) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, local / 2), [&](const int c) {
          int lo, hi;
          bitonic_pair(c, k_local, j, shift, lo, hi);
          const unsigned x = scratch(lo), y = scratch(hi);
          if (x > y) {
            scratch(lo) = y;
            scratch(hi) = x;
          }
        });
        team.team_barrier();
      }
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, local), [&](const int i) {
      if (base + i < n) a[base + i] = last ? out(scratch(i)) : scratch(i);
    });
    team.team_barrier();  // (the next chunk reuses the scratch)
  };

  if (size <= chunk) {
    if (n > 0) in_scratch(0, 2, size, 1, true);
    return;
  }
  for (long long base = 0; base < n; base += chunk) in_scratch(base, 2, chunk, 1, false);
  for (long long k = 2LL * chunk; k <= size; k *= 2) {
    for (long long j = k / 2, shift = bits_for(k / 2 - 1); j >= chunk; j /= 2, --shift) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, size / 2), [&](const long long c) {
        long long lo, hi;
        bitonic_pair(c, k, j, static_cast<int>(shift), lo, hi);
        if (hi < n && a[lo] > a[hi]) {
          const unsigned x = a[lo];
          a[lo] = a[hi];
          a[hi] = x;
        }
      });
      team.team_barrier();
    }
    // The half-cleaners at distances below chunk stay within aligned chunks.
    for (long long base = 0; base < n; base += chunk) in_scratch(base, k, k, chunk / 2, k == size);
  }
}

}  // namespace kfmm::detail
