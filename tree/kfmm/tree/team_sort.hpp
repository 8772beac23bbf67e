// A team sorts one row of unsigned values in place: a bitonic network run in scratch chunks, for the walk's
// per-row sort of the atomic scatter (the rows' lengths vary from none to ~1e4 entries, most a few hundred).
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm::detail {

/// Element pair (lo, hi), lo < hi, of comparator `c` in stage (k, j) of a bitonic sorting network whose
/// comparators all put the smaller value at the lower index: the merge of k-blocks first compares each
/// element with its mirror in the block (j = k / 2), then runs half-cleaners at distances j = k / 4 .. 1.
/// With every comparator ascending the network sorts any length n: the missing elements at n .. 2^m - 1
/// act as +infinity, which never moves, so a comparator with hi >= n is skipped.
KOKKOS_INLINE_FUNCTION void bitonic_pair(const long long c, const long long k, const long long j,
                                         long long& lo, long long& hi) {
  if (j == k / 2) {
    const long long block = c / j, r = c % j;  // j = k / 2 comparators per k-block
    lo = block * k + r;
    hi = block * k + k - 1 - r;
  } else {
    lo = (c / j) * 2 * j + c % j;
    hi = lo + j;
  }
}

/// Sorts a[0, n) ascending in place with the threads of `team` (any team size, one included), then stores
/// `out(value)` in place of each value (the walk turns entry indices into sources on the way out).
/// `scratch` holds `chunk` values (a power of two): every stage whose comparators lie within aligned
/// chunks runs there (rows up to `chunk` entries never touch global memory in between); only the stages
/// at distances >= chunk of longer rows run on `a` itself (a team barrier after each).
template <class Team, class Scratch, class Out>
KOKKOS_INLINE_FUNCTION void team_sort(const Team& team, unsigned* a, const int n, const Scratch& scratch,
                                      const Out& out) {
  const long long chunk = static_cast<long long>(scratch.extent(0));
  long long size = 1;  // the network's length: n rounded up to a power of two
  while (size < n) size *= 2;
  const long long local = size < chunk ? size : chunk;

  // Loads the chunk at `base`, runs the stages (k, j) for k = k_first .. k_last and j from k / 2 (from
  // j_first for k_first) down to 1 in scratch, and stores it back (through `out` if `last`).
  const auto in_scratch = [&](const long long base, const long long k_first, const long long k_last,
                              const long long j_first, const bool last) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, local),
                         [&](const long long i) { scratch(i) = base + i < n ? a[base + i] : ~0u; });
    team.team_barrier();
    for (long long k = k_first; k <= k_last; k *= 2) {
      for (long long j = k == k_first ? j_first : k / 2; j >= 1; j /= 2) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, local / 2), [&](const long long c) {
          long long lo, hi;
          bitonic_pair(c, k, j, lo, hi);
          const unsigned x = scratch(lo), y = scratch(hi);
          if (x > y) {
            scratch(lo) = y;
            scratch(hi) = x;
          }
        });
        team.team_barrier();
      }
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, local), [&](const long long i) {
      if (base + i < n) a[base + i] = last ? out(scratch(i)) : scratch(i);
    });
    team.team_barrier();  // (the next chunk reuses the scratch)
  };

  if (size <= chunk) {
    if (n > 0) in_scratch(0, 2, size, 1, true);
    return;
  }
  for (long long base = 0; base < n; base += chunk) in_scratch(base, 2, chunk, 1, false);
  for (long long k = 2 * chunk; k <= size; k *= 2) {
    for (long long j = k / 2; j >= chunk; j /= 2) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, size / 2), [&](const long long c) {
        long long lo, hi;
        bitonic_pair(c, k, j, lo, hi);
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
