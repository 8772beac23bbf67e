/// \file m2l_csr_lanes.hpp
/// Host lanes of the fused M2L: W pairs translated at once, vectorised ACROSS pairs.
///
/// The per-pair maths of the ops layer (rotation.hpp, translation_z.hpp) is templated on the real
/// type and branch-free once the angles are known. Instantiated with Pack<Real, W> (W reals, each
/// arithmetic operator a fixed-trip loop over the lanes, which the compiler turns into SIMD
/// instructions), the same code translates W pairs in lock step: lane l of every coefficient belongs
/// to pair l. Only the angles (rotation_angles has data-dependent branches) are computed lane by lane
/// here, with the same conventions (phi = 0 on the z axis, identity for a zero displacement).
/// This is the CPU counterpart of the GPU's one-pair-per-thread layout.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/simd_pack.hpp"
#include "kfmm/operators/translation_z.hpp"

#if defined(__AVX__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#define KFMM_M2L_LANES_AVX 1
#endif

namespace kfmm::detail {

/// Lanes per pack on the host: 16, enough independent work to hide latencies (docs/kernels.md); measured
/// best for float and double in SSE2 and AVX-512 builds, and for double with AVX2 once packs copy lane by
/// lane (2e5 Plummer, p 6: M2L 729 ms with 16 lanes, 791 with 8).
template <class Real>
inline constexpr int m2l_host_lanes = 16;

/// a[i].v[l] = M[l][i] for the NC coefficients i and the W lanes l: the lanes' raw multipoles,
/// transposed into packs (their normalisation D is folded into the first swap, SwapScaling::from_raw). With
/// AVX, 4 x 4 blocks go through registers (four row loads, four shuffles, four pack stores) instead of
/// element by element. With the prefetch of the next block (m2l_fused.hpp): bench_m2l_csr fp64, 1e6 random
/// pairs, one core, 299 / 490 -> 266 / 465 ns per pair at p 6 / 8; the solver's M2L at 1e6 Plummer, p 9: 2.16
/// -> 2.10 s.
template <int NC, int W, class Real>
KOKKOS_FORCEINLINE_FUNCTION void transposed_lanes(const Real* const* M, Pack<Real, W>* a) {
  int first = 0;  // the coefficients from here on go element by element
#if defined(KFMM_M2L_LANES_AVX)
  if constexpr (std::is_same_v<Real, double> && W % 4 == 0) {
    first = NC & ~3;
    for (int lb = 0; lb < W; lb += 4) {
      const double *p0 = M[lb], *p1 = M[lb + 1], *p2 = M[lb + 2], *p3 = M[lb + 3];
      for (int i = 0; i < first; i += 4) {
        const __m256d r0 = _mm256_loadu_pd(p0 + i), r1 = _mm256_loadu_pd(p1 + i);
        const __m256d r2 = _mm256_loadu_pd(p2 + i), r3 = _mm256_loadu_pd(p3 + i);
        const __m256d e01 = _mm256_unpacklo_pd(r0, r1), o01 = _mm256_unpackhi_pd(r0, r1);
        const __m256d e23 = _mm256_unpacklo_pd(r2, r3), o23 = _mm256_unpackhi_pd(r2, r3);
        _mm256_storeu_pd(&a[i].v[lb], _mm256_permute2f128_pd(e01, e23, 0x20));
        _mm256_storeu_pd(&a[i + 1].v[lb], _mm256_permute2f128_pd(o01, o23, 0x20));
        _mm256_storeu_pd(&a[i + 2].v[lb], _mm256_permute2f128_pd(e01, e23, 0x31));
        _mm256_storeu_pd(&a[i + 3].v[lb], _mm256_permute2f128_pd(o01, o23, 0x31));
      }
    }
  }
#endif
  for (int i = first; i < NC; ++i)
    for (int l = 0; l < W; ++l) a[i].v[l] = M[l][i];
}

/// The orthogonal swap blocks with a SwapScaling folded in, in the lanes' real type: entry
/// static_cast<Real>(normalised_swap_coefficient(n, m, k) * swap_scaling<Scaling>(n, m, k)), the value the
/// GPU's unrolled swaps fold into an immediate. The lanes' loops are not unrolled at high orders, so
/// without this table each entry cost two table loads, a product and a conversion per call.
template <class Real>
struct LaneSwapTable {
  Real v[swap_table_size];
};
template <SwapScaling Scaling, class Real>
KOKKOS_INLINE_FUNCTION constexpr LaneSwapTable<Real> make_lane_swap_table() {
  const SwapTable o = make_normalised_swap_table();
  const ScaleTable d = make_scale_table();
  LaneSwapTable<Real> t{};
  for (int n = 0; n <= max_order; ++n)
    for (int m = -n; m <= n; ++m)
      for (int k = -n; k <= n; ++k) {
        const int i = swap_block_offset(n) + (m + n) * (2 * n + 1) + (k + n);
        t.v[i] = static_cast<Real>(o.v[i] * swap_scaling_from<Scaling>(d, n, m, k));
      }
  return t;
}

/// In place: a_n <- (D B D^{-1})_n a_n for every degree n <= P, W lanes at once: rotation.hpp's
/// apply_swap written for packs. The generic loop, instantiated with packs, was left to g++'s
/// unroller: from p = 10 on it produced scalar code (one vmulsd per lane and table entry; M2L 2.9x
/// the p = 9 time per pair for 1.3x the arithmetic), and its zero-initialised buffer cost a memset
/// per call. Here the lane loop is innermost (full-width vectors at every order), the table entry
/// is one broadcast per row term, the products are fused multiply-adds and the buffer is not
/// initialised (every entry is written before it is read).
/// Range and Scaling: rotation.hpp's SwapRange (the rows an M2L's z-translation reads, the columns it
/// leaves zero) and SwapScaling (folded into the table: make_lane_swap_table).
template <int P, SwapRange Range, SwapScaling Scaling, class Real, int W>
KOKKOS_FORCEINLINE_FUNCTION void apply_swap_lanes(Pack<Real, W>* a) {
  static constexpr LaneSwapTable<Real> table = make_lane_swap_table<Scaling, Real>();
  Pack<Real, W> tmp[2 * P + 1];
  for (int n = 1; n <= P; ++n) {
    Pack<Real, W>* an = a + n * n + n;  // an[m] is the coefficient (n, m)
    const Real* block = table.v + swap_block_offset(n) + n * (2 * n + 1) + n;  // block[m * (2n+1) + k]
    const int last_row = (Range == SwapRange::rows && P - n < n) ? P - n : n;
    const int last_column = (Range == SwapRange::columns && P - n < n) ? P - n : n;
    for (int m = -last_row; m <= last_row; ++m) {
      const int sign = swap_column_sign(n, m);
      const Real* row = block + m * (2 * n + 1);
      Pack<Real, W> acc(Real(0));
      for (int j = swap_first_column(n, m); j <= last_column; j += 2) {
        const int k = sign * j;
        const Real c = row[k];
        for (int l = 0; l < W; ++l) acc.v[l] = compat::fmadd(c, an[k].v[l], acc.v[l]);
      }
      tmp[m + n] = acc;
    }
    for (int m = -last_row; m <= last_row; ++m) an[m] = tmp[m + n];
  }
}

/// In place: translation_z.hpp's m2l_z_sums for W lanes (the raw aligned multipole in, the bare sums
/// S_n^m for |m| <= min(n, P - n) out, the other entries left as they are), written for packs for the
/// reasons of apply_swap_lanes (zero-initialised column buffers were a memset per column).
template <int P, class Real, int W>
KOKKOS_FORCEINLINE_FUNCTION void m2l_z_sums_lanes(const Pack<Real, W>& rinv, Pack<Real, W>* a) {
  using V = Pack<Real, W>;
  V f[P + 1];  // f[j] = j! / r^(j+1)
  f[0] = rinv;
  for (int j = 1; j <= P; ++j) f[j] = f[j - 1] * (V(Real(j)) * rinv);
  V col[P + 1];
  for (int am = 0; am <= P; ++am) {
    for (int side = 0; side < 2; ++side) {
      if (am == 0 && side == 1) continue;
      const int m = side ? -am : am;
      for (int k = am; k <= P - am; ++k) col[k] = a[coefficient_index(k, m)];
      for (int n = am; n <= P - am; ++n) {
        V acc(Real(0));
        for (int k = am; k <= P - n; ++k)
          for (int l = 0; l < W; ++l) acc.v[l] = compat::fmadd(f[n + k].v[l], col[k].v[l], acc.v[l]);
        a[coefficient_index(n, m)] = acc;
      }
    }
  }
}

/// Adds to L the M2L of W pairs: lane l translates the multipole at M[l] (an idle lane points at
/// zeros) by the displacement (dx[l], dy[l], dz[l]) = target - source. Compile-time order P >= 0.
/// L accumulates across calls; the caller sums its lanes in a fixed order at the end.
template <int P, int W, class Real>
KOKKOS_INLINE_FUNCTION void m2l_lanes(const Real* const* M, const Real* dx, const Real* dy, const Real* dz,
                                      Pack<Real, W>* L) {
  static_assert(P >= 0, "m2l_lanes needs a compile-time order");
  using V = Pack<Real, W>;
  constexpr int nc = num_coefficients(P);
  V a[nc];
  transposed_lanes<nc, W>(M, a);
  // angles of rotation.hpp's rotation_angles, lane by lane (branches become selects)
  RotationAngles<V> g;
  for (int l = 0; l < W; ++l) {
    const Real tx = dx[l], ty = dy[l], tz = dz[l];
    const Real rho2 = tx * tx + ty * ty;
    const Real r2 = rho2 + tz * tz;
    const bool zero = !(r2 >= compat::smallest_normal<Real>());
    const Real rho = compat::sqrt(rho2);
    const Real rinv = zero ? Real(0) : compat::rsqrt(zero ? Real(1) : r2);
    const bool axis = !(rho > Real(0));
    const Real rhoinv = axis ? Real(0) : Real(1) / (axis ? Real(1) : rho);
    g.r.v[l] = r2 * rinv;
    g.rinv.v[l] = rinv;
    g.cphi.v[l] = axis ? Real(1) : tx * rhoinv;
    g.sphi.v[l] = axis ? Real(0) : ty * rhoinv;
    g.ctheta.v[l] = zero ? Real(1) : tz * rinv;
    g.stheta.v[l] = zero ? Real(0) : rho * rinv;
  }
  // m2l_pair.hpp's compile-time-order steps (scalings folded into the swaps), with the lane versions
  // of the swap and the z-translation
  rotate_z<P>(P, g.cphi, -g.sphi, a);
  apply_swap_lanes<P, SwapRange::full, SwapScaling::from_raw>(a);
  rotate_z<P>(P, g.ctheta, g.stheta, a);
  apply_swap_lanes<P, SwapRange::rows, SwapScaling::to_raw>(a);
  m2l_z_sums_lanes<P>(g.rinv, a);
  apply_swap_lanes<P, SwapRange::columns, SwapScaling::from_z_sums>(a);
  rotate_z<P>(P, g.ctheta, -g.stheta, a);
  apply_swap_lanes<P, SwapRange::full, SwapScaling::none>(a);
  rotate_z<P>(P, g.cphi, g.sphi, a);
  for (int n = 0; n <= P; ++n)
    for (int m = -n; m <= n; ++m) {
      const int i = coefficient_index(n, m);
      L[i] += a[i] * V(static_cast<Real>(expansion_scale(n, m)));
    }
}

}  // namespace kfmm::detail
