/// \file m2l_degree_split.hpp
/// The degree-split M2L: each pair's expansion is shared by G threads, each holding a few degrees.
///
/// Why. The fused team kernel (m2l_fused.hpp) gives a pair to one thread, which holds the pair's
/// (p+1)^2 coefficients in registers: in double at p 9-10 that is 200-242 of its 255 registers, so
/// the kernel spills (256 bytes of stack at p 10), keeps its partial local in team scratch and runs 8
/// warps per SM; on the H200 the double M2L at p 10 reached a third of its arithmetic floor
/// (docs/benchmarks.md, "Fraction of the hardware limit").
///
/// How. The rotations act within a degree: Dz mixes (n, m) with (n, -m), the swap blocks B_n mix the
/// orders of degree n (rotation.hpp). Only the z-translation (translation_z.hpp) mixes degrees, per
/// order m: S_n^m = sum_{k=|m|}^{p-n} (n+k)! / r^(n+k+1) a_k^m. So the degrees are split into G groups
/// (degree_group_mask: the longest-processing-time rule on the multiply-adds of each degree, so the
/// groups take about equal time) and a team of G x W threads takes W pairs at a time, thread
/// (g, w) = (rank / W, rank % W) holding the degrees of group g of pair w:
///   A. rotate its degrees of the raw multipole to the pair's z axis (rotation.hpp's swaps with the
///      folded scalings, as m2l_rotation_pair<P>) and write the rows the z-translation reads,
///      |m| <= min(n, p - n), to the team's exchange buffer;
///   barrier;
///   B. sum its degrees of the z-translation from the exchange buffer, rotate them back and add them to
///      its partial local (registers: only its degrees).
/// The exchange buffer alternates between two halves, so one barrier per W pairs suffices (a thread that
/// writes half h again has passed the barrier after which every thread finished reading it). At the
/// end the partial locals of the W lanes are summed per coefficient in lane order (deterministic) and
/// added once to the target's local (or to the chunk's partial block, csr_chunks.hpp), as in the fused
/// kernel. G = 1 is one thread per pair through the same exchange (the test path on teams of one).
/// The angles (and the powers of 1 / r) are computed by each of the G threads of a pair: ~5 % of the
/// work at p 10, G = 4, and no exchange for them.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/translation_z.hpp"

namespace kfmm::detail {

/// Most groups a pair's degrees are split into.
inline constexpr int max_degree_groups = 8;

/// Multiply-adds of degree n in one rotation M2L of order p (m2l_pair.hpp, folded scalings): four
/// rotations about z, two full swaps, the row-limited and the column-limited swap, the z-translation
/// sums and the accumulation. The cost model of the split.
KOKKOS_INLINE_FUNCTION constexpr int m2l_degree_cost(int p, int n) {
  const int rows = n < p - n ? n : p - n;  // |m| <= min(n, p - n): rows of the z-translation
  const int w = 2 * n + 1;
  int sums = 0;
  for (int m = -rows; m <= rows; ++m) sums += p - n - (m < 0 ? -m : m) + 1;
  const int swap_full = (w * w + 3) / 4;  // about a quarter of B_n is non-zero
  const int swap_rows = ((2 * rows + 1) * w + 3) / 4;
  const int swap_columns = (w * (2 * rows + 1) + 3) / 4;
  return 4 * 2 * n + 2 * swap_full + swap_rows + swap_columns + sums + w;
}

/// The degrees (a mask, see kfmm::all_degrees) of group g of G for order p: degrees in order of
/// decreasing cost, each to the group with the least cost so far (ties: the lower group). Every degree
/// 0..p is in exactly one group; a group may be empty when G > p + 1.
KOKKOS_INLINE_FUNCTION constexpr unsigned degree_group_mask(int p, int G, int g) {
  int load[max_degree_groups] = {};
  unsigned mask[max_degree_groups] = {};
  bool done[max_order + 1] = {};
  for (int step = 0; step <= p; ++step) {
    int best = -1;  // the costliest degree not yet placed (ties: the higher degree)
    for (int n = p; n >= 0; --n)
      if (!done[n] && (best < 0 || m2l_degree_cost(p, n) > m2l_degree_cost(p, best))) best = n;
    done[best] = true;
    int to = 0;
    for (int q = 1; q < G; ++q)
      if (load[q] < load[to]) to = q;
    load[to] += m2l_degree_cost(p, best);
    mask[to] |= 1u << best;
  }
  return mask[g];
}

/// Rows of degree n that the z-translation reads (aligned multipole) and writes (aligned local):
/// |m| <= min(n, p - n).
KOKKOS_FORCEINLINE_FUNCTION constexpr int z_rows(int p, int n) {
  return n < p - n ? n : p - n;
}

/// Slot of (n, m), |m| <= z_rows(p, n), in the exchange buffer: degrees in order, 2 z_rows + 1 each,
/// i.e. n + 2 sum_{j<n} min(j, p - j) before degree n, in closed form (no loop for the device compiler
/// to unroll: a loop here was left rolled inside the unrolled kernels).
KOKKOS_FORCEINLINE_FUNCTION constexpr int exchange_slot(int p, int n, int m) {
  const int a = n < p / 2 + 1 ? n : p / 2 + 1;  // degrees j < a have min(j, p - j) = j
  const int tail = n > a ? (n - a) * p - (n * (n - 1) - a * (a - 1)) / 2 : 0;
  return n + a * (a - 1) + 2 * tail + z_rows(p, n) + m;
}

/// Entries of one pair in the exchange buffer (61 at p 10 against 121 coefficients).
KOKKOS_INLINE_FUNCTION constexpr int exchange_entries(int p) {
  return exchange_slot(p, p, 0) + 1;
}

/// Phase A of one pair for the degrees `degrees` (see the file comment): the raw multipole M (nullptr:
/// an idle lane, zeros) rotated to the z axis of g; rows |m| <= min(n, p - n) written to x[slot * W].
template <int P, class Real>
KOKKOS_FORCEINLINE_FUNCTION void m2l_split_rotate_in(int order, unsigned degrees, const Real* M,
                                                     const RotationAngles<Real>& g, Real* x, int W) {
  const int p = effective_order<P>(order);
  constexpr int cap = buffer_order<P>;
  Real a[(cap + 1) * (cap + 1)];
  KFMM_PRAGMA_UNROLL
  for (int n = 0; n <= p; ++n) {
    if (!has_degree(degrees, n)) continue;
    KFMM_PRAGMA_UNROLL
    for (int m = -n; m <= n; ++m) a[coefficient_index(n, m)] = M ? M[coefficient_index(n, m)] : Real(0);
  }
  rotate_z<P>(order, g.cphi, -g.sphi, a, degrees);
  apply_swap<P, SwapRange::full, SwapScaling::from_raw>(order, a, degrees);
  rotate_z<P>(order, g.ctheta, g.stheta, a, degrees);
  apply_swap<P, SwapRange::rows, SwapScaling::to_raw>(order, a, degrees);
  KFMM_PRAGMA_UNROLL
  for (int n = 0; n <= p; ++n) {
    if (!has_degree(degrees, n)) continue;
    const int r = z_rows(p, n);
    KFMM_PRAGMA_UNROLL
    for (int m = -r; m <= r; ++m) x[exchange_slot(p, n, m) * W] = a[coefficient_index(n, m)];
  }
}

/// Phase B of one pair for the degrees `degrees`: the z-translation sums of its degrees from the
/// exchange buffer x (stride W), the rotation back, and (when `add`) L += the local on its degrees (L
/// in the packed layout: with compile-time orders and masks only those entries are ever touched, so a
/// device compiler keeps only them, in registers).
template <int P, class Real>
KOKKOS_FORCEINLINE_FUNCTION void m2l_split_rotate_out(int order, unsigned degrees, const Real* x, int W,
                                                      const RotationAngles<Real>& g, bool add, Real* L) {
  const int p = effective_order<P>(order);
  constexpr int cap = buffer_order<P>;
  Real f[cap + 1] = {};  // f[j] = j! / r^(j+1) (translation_z.hpp's m2l_z_sums)
  f[0] = g.rinv;
  KFMM_PRAGMA_UNROLL
  for (int j = 1; j <= p; ++j) f[j] = f[j - 1] * (Real(j) * g.rinv);
  Real a[(cap + 1) * (cap + 1)];
  // S_n^m = sum_{k=|m|}^{p-n} f[n+k] a_k^m for |m| <= min(n, p - n); a column a_k^m is read once for
  // all of this thread's degrees (|m| <= min(k, p - k) holds: k <= p - n and |m| <= n).
  KFMM_PRAGMA_UNROLL
  for (int am = 0; am <= p; ++am) {
    KFMM_PRAGMA_UNROLL
    for (int side = 0; side < 2; ++side) {
      if (am == 0 && side == 1) continue;
      const int m = side ? -am : am;
      int lowest = -1;  // this thread's lowest degree with a row m: it reads the longest column
      KFMM_PRAGMA_UNROLL
      for (int n = p; n >= 0; --n)
        if (has_degree(degrees, n) && am <= z_rows(p, n)) lowest = n;
      if (lowest < 0) continue;
      Real col[cap + 1] = {};
      KFMM_PRAGMA_UNROLL
      for (int k = am; k <= p - lowest; ++k) col[k] = x[exchange_slot(p, k, m) * W];
      KFMM_PRAGMA_UNROLL
      for (int n = lowest; n <= p; ++n) {
        if (!has_degree(degrees, n) || am > z_rows(p, n)) continue;
        Real acc = Real(0);
        KFMM_PRAGMA_UNROLL
        for (int k = am; k <= p - n; ++k) acc += f[n + k] * col[k];
        a[coefficient_index(n, m)] = acc;
      }
    }
  }
  apply_swap<P, SwapRange::columns, SwapScaling::from_z_sums>(order, a, degrees);
  rotate_z<P>(order, g.ctheta, -g.stheta, a, degrees);
  apply_swap<P>(order, a, degrees);
  rotate_z<P>(order, g.cphi, g.sphi, a, degrees);
  if (add) {
    KFMM_PRAGMA_UNROLL
    for (int n = 0; n <= p; ++n) {
      if (!has_degree(degrees, n)) continue;
      KFMM_PRAGMA_UNROLL
      for (int m = -n; m <= n; ++m)
        L[coefficient_index(n, m)] += a[coefficient_index(n, m)] * static_cast<Real>(expansion_scale(n, m));
    }
  }
}

/// Calls f(std::integral_constant<int, g>) for the runtime group g in [0, G).
template <int G, int First = 0, class F>
KOKKOS_FORCEINLINE_FUNCTION void dispatch_group(int g, F&& f) {
  if constexpr (First + 1 >= G) {
    f(std::integral_constant<int, First>{});
  } else if (g == First) {
    f(std::integral_constant<int, First>{});
  } else {
    dispatch_group<G, First + 1>(g, f);
  }
}

/// The M2L of one pair by the degree split, all G groups in turn through a local exchange buffer:
/// the reference the tests hold the split's arithmetic to (runtime order and groups).
template <class Real>
KOKKOS_INLINE_FUNCTION void m2l_degree_split_pair(int order, int G, const Real* M, Real dx, Real dy, Real dz,
                                                  Real* L) {
  Real x[exchange_entries(max_order)];
  const RotationAngles<Real> g = rotation_angles(dx, dy, dz);
  for (int q = 0; q < G; ++q) m2l_split_rotate_in<-1>(order, degree_group_mask(order, G, q), M, g, x, 1);
  for (int q = 0; q < G; ++q)
    m2l_split_rotate_out<-1>(order, degree_group_mask(order, G, q), x, 1, g, true, L);
}

}  // namespace kfmm::detail
