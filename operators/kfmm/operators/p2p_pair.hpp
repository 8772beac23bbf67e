/// \file p2p_pair.hpp
/// Building blocks of the near field: the softened pair term and the loops over sources that the P2P
/// kernels (p2p.hpp, p2p_mutual.hpp) and the direct sum (direct_sum.hpp) share. Device-callable,
/// allocation-free. Conventions: d = x_j - x_i; the sums are unscaled (the caller multiplies the
/// acceleration by G and the potential by -G once per target).
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/kokkos_compat.hpp"

#if defined(__AVX512F__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#define KFMM_P2P_LANES_AVX512 1
#endif

namespace kfmm {
/// Softened squared distance r^2 + eps^2 (building block; eps2 first: three fused multiply-adds).
template <class Real>
KOKKOS_FORCEINLINE_FUNCTION Real pair_r2(Real dx, Real dy, Real dz, Real eps2) {
  using compat::fmadd;
  return fmadd(dz, dz, fmadd(dy, dy, fmadd(dx, dx, eps2)));
}

/// 1 / sqrt(r2) of a pair (building block); GuardZero: 0 below the smallest normal (branch-free on the
/// host, so the lanes vectorise: compat::rsqrt_or_zero).
template <bool GuardZero, class Real>
KOKKOS_FORCEINLINE_FUNCTION Real pair_rsqrt(Real r2) {
  if constexpr (GuardZero) {
    return compat::rsqrt_or_zero(r2);
  } else {
    return compat::rsqrt(r2);
  }
}

/// A pair's sums given its reciprocal distance rinv (building block): adds m rinv^3 d to (ax, ay, az)
/// and m rinv to phi.
template <class Real>
KOKKOS_FORCEINLINE_FUNCTION void pair_sums(Real dx, Real dy, Real dz, Real mass, Real rinv, Real& ax,
                                           Real& ay, Real& az, Real& phi) {
  using compat::fmadd;
  const Real mr = mass * rinv;
  const Real mr3 = mr * rinv * rinv;
  phi += mr;
  ax = fmadd(dx, mr3, ax);
  ay = fmadd(dy, mr3, ay);
  az = fmadd(dz, mr3, az);
}

/// One softened pair term (building block). With d = x_j - x_i, adds m_j d / (r^2+eps^2)^(3/2) to
/// (ax, ay, az) and m_j / (r^2+eps^2)^(1/2) to phi; the caller multiplies by G (acceleration) and -G
/// (potential) once per target. GuardZero (for eps2 == 0): a pair at zero distance adds nothing.
template <bool GuardZero, class Real>
KOKKOS_FORCEINLINE_FUNCTION void p2p_pair(Real dx, Real dy, Real dz, Real mass, Real eps2, Real& ax, Real& ay,
                                          Real& az, Real& phi) {
  pair_sums(dx, dy, dz, mass, pair_rsqrt<GuardZero>(pair_r2(dx, dy, dz, eps2)), ax, ay, az, phi);
}

/// Adds a finished unscaled sum (p2p_pair's conventions) of particle i to the outputs: component q < 3
/// as G x sum to accelerations(i, q), q == 3 (the potential sum) as -G x sum to potentials(i).
template <class AccView, class PotView, class Index, class Acc>
KOKKOS_FORCEINLINE_FUNCTION void add_scaled_sum(const AccView& accelerations, const PotView& potentials,
                                                Index i, int q, Acc G, Acc sum) {
  if (q < 3) {
    accelerations(i, q) += static_cast<typename AccView::non_const_value_type>(G * sum);
  } else {
    potentials(i) += static_cast<typename PotView::non_const_value_type>(-G * sum);
  }
}

/// A source particle as the P2P tiles hold it: position and mass packed and aligned to their size, so
/// a GPU thread reads one with a single 128-bit shared-memory load (float; two for double).
template <class Real>
struct alignas(4 * sizeof(Real)) P2PSource {
  Real x, y, z, m;
};

/// R targets against a block of sources (device building block): sources begin, begin+step, ... < end
/// of `sources` are taken, each read once for all R targets; target r skips `masked[r]` (the target
/// itself in a self pass; -1 for none), excluded before the reciprocal square root. Adds the unscaled
/// sums (see p2p_pair) to ax[r], ay[r], az[r], phi[r]. (Two targets per source read halve the shared
/// loads and the loop overhead per interaction: docs/kernels.md.)
template <bool GuardZero, bool Masked, int R, class Real>
KOKKOS_INLINE_FUNCTION void p2p_targets_vs_sources(const Real (&xi)[R], const Real (&yi)[R],
                                                   const Real (&zi)[R], const P2PSource<Real>* sources,
                                                   int begin, int end, int step, Real eps2,
                                                   const int (&masked)[R], Real (&ax)[R], Real (&ay)[R],
                                                   Real (&az)[R], Real (&phi)[R]) {
  const auto source = [&](const int j) {
    const P2PSource<Real> b = sources[j];
    for (int r = 0; r < R; ++r) {
      Real mj = b.m;
      Real e2 = eps2;
      if constexpr (Masked) {
        // i == j: dx = dy = dz = 0; a unit r^2 and a zero mass make the term exactly zero.
        const bool self = j == masked[r];
        mj = self ? Real(0) : mj;
        e2 = self ? Real(1) : e2;
      }
      p2p_pair<GuardZero>(b.x - xi[r], b.y - yi[r], b.z - zi[r], mj, e2, ax[r], ay[r], az[r], phi[r]);
    }
  };
  if constexpr (sizeof(Real) == 4) {
    KFMM_PRAGMA_UNROLL_BY(4)
    for (int j = begin; j < end; j += step) source(j);
  } else {  // (double: the rsqrt is a long sequence already; unrolling it cost registers)
    for (int j = begin; j < end; j += step) source(j);
  }
}

/// One target against a block of sources: p2p_targets_vs_sources with R = 1.
template <bool GuardZero, bool Masked, class Real>
KOKKOS_INLINE_FUNCTION void p2p_target_vs_sources(Real xi, Real yi, Real zi, const P2PSource<Real>* sources,
                                                  int begin, int end, int step, Real eps2, int masked,
                                                  Real& ax, Real& ay, Real& az, Real& phi) {
  const Real x[1] = {xi}, y[1] = {yi}, z[1] = {zi};
  const int mask[1] = {masked};
  Real a0[1] = {ax}, a1[1] = {ay}, a2[1] = {az}, p[1] = {phi};
  p2p_targets_vs_sources<GuardZero, Masked, 1>(x, y, z, sources, begin, end, step, eps2, mask, a0, a1, a2, p);
  ax = a0[0];
  ay = a1[0];
  az = a2[0];
  phi = p[0];
}

namespace detail {

/// rinv[l] = 1 / sqrt(r2[l]) for W host lanes (GuardZero: 0 where r2[l] is below the smallest normal,
/// as compat::rsqrt_or_zero). Double with AVX-512: the hardware seed (vrsqrt14pd, relative error below
/// 2^-14) and one third-order step, y' = y (1 + e/2 + 3 e^2/8 + 5 e^3/16) with e = 1 - x y^2, whose
/// truncation error 35 e^4 / 128 < 2^-57 is below double's rounding.
template <int W, bool GuardZero, class Real>
KOKKOS_FORCEINLINE_FUNCTION void rsqrt_lanes(const Real* KOKKOS_RESTRICT r2, Real* KOKKOS_RESTRICT rinv) {
#if defined(KFMM_P2P_LANES_AVX512)
  if constexpr (std::is_same_v<Real, double> && W % 8 == 0) {
    for (int b = 0; b < W; b += 8) {
      const __m512d x = _mm512_loadu_pd(r2 + b);
      const __m512d y = _mm512_maskz_rsqrt14_pd(0xff, x);
      const __m512d e = _mm512_fnmadd_pd(_mm512_mul_pd(x, y), y, _mm512_set1_pd(1.0));
      __m512d poly = _mm512_fmadd_pd(e, _mm512_set1_pd(0.3125), _mm512_set1_pd(0.375));
      poly = _mm512_fmadd_pd(e, poly, _mm512_set1_pd(0.5));
      __m512d r = _mm512_fmadd_pd(_mm512_mul_pd(y, e), poly, y);
      if constexpr (GuardZero) {
        const __mmask8 live =
            _mm512_cmp_pd_mask(x, _mm512_set1_pd(compat::smallest_normal<double>()), _CMP_GE_OQ);
        r = _mm512_maskz_mov_pd(live, r);
      }
      _mm512_storeu_pd(rinv + b, r);
    }
    return;
  }
#endif
  for (int l = 0; l < W; ++l) rinv[l] = pair_rsqrt<GuardZero>(r2[l]);
}

/// True where rsqrt_lanes has a vector path of its own (double with AVX-512). Elsewhere the host lanes
/// keep 1/sqrt inside their one fused lane loop: split into its own loop, g++ left the generic
/// rsqrt_lanes scalar there (float, and double with AVX2 only).
template <class Real, int W>
inline constexpr bool rsqrt_lanes_vectorised =
#if defined(KFMM_P2P_LANES_AVX512)
    std::is_same_v<Real, double>&& W % 8 == 0;
#else
    false;
#endif

/// Host lanes: W targets against one source; the fixed-trip lane loop vectorises. Lane `lane_of_self`
/// (the lane whose target is this source, on the target's own leaf; -1 for none) is masked.
template <int W, bool GuardZero, bool Masked, class Real>
KOKKOS_FORCEINLINE_FUNCTION void p2p_lanes(const Real* xi, const Real* yi, const Real* zi, Real xj, Real yj,
                                           Real zj, Real mj, Real eps2, int lane_of_self, Real* ax, Real* ay,
                                           Real* az, Real* phi) {
  // Lane l's source mass and softening: the masked lane (i == j) takes zero mass and a unit r^2 (no 0 * inf).
  const auto lane = [&](const int l, Real& m, Real& e2) {
    m = mj;
    e2 = eps2;
    if constexpr (Masked) {
      const bool self = l == lane_of_self;
      m = self ? Real(0) : m;
      e2 = self ? Real(1) : e2;
    }
  };
  if constexpr (rsqrt_lanes_vectorised<Real, W>) {  // r^2 for all lanes, 1/sqrt for all, then the sums
    Real r2[W], ri[W], m[W];
    for (int l = 0; l < W; ++l) {
      Real e2;
      lane(l, m[l], e2);
      r2[l] = pair_r2(xj - xi[l], yj - yi[l], zj - zi[l], e2);
    }
    rsqrt_lanes<W, GuardZero>(r2, ri);
    for (int l = 0; l < W; ++l)
      pair_sums(xj - xi[l], yj - yi[l], zj - zi[l], m[l], ri[l], ax[l], ay[l], az[l], phi[l]);
  } else {
    for (int l = 0; l < W; ++l) {
      Real m, e2;
      lane(l, m, e2);
      p2p_pair<GuardZero>(xj - xi[l], yj - yi[l], zj - zi[l], m, e2, ax[l], ay[l], az[l], phi[l]);
    }
  }
}

template <class Real>
inline constexpr int p2p_host_lanes = sizeof(Real) == 4 ? 16 : 8;

}  // namespace detail
}  // namespace kfmm
