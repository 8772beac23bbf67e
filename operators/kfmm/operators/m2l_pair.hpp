/// \file m2l_pair.hpp
/// Per-pair M2L building blocks: device-callable, allocation-free, on raw coefficient pointers in the
/// packed layout of kfmm/core/expansion_layout.hpp (real solid harmonics, Dehnen normalisation, no
/// sqrt 2; see solid_harmonics.hpp).
///
/// Conventions (shared by every kfmm operator):
///  - multipole about a source centre c:  M_n^m = sum_j mu_j R_n^m(x_j - c);
///  - local about a target centre s:      Phi(x) = sum_{n,m} L_n^m R_n^m(x - s) approximates
///    sum_j mu_j / |x - x_j| (the potential WITHOUT the factor -G; L2P applies -G);
///  - displacement of an M2L pair:        (dx, dy, dz) = s - c = target centre - source centre.
///  - truncation: L_n receives the multipole degrees k <= p - n (n + k <= p), the usual FMM truncation
///    (Dehnen 2014, section 3); the naive and the rotation versions truncate identically.
///
/// m2l_rotation_pair (O(p^3)): rotate M so that s - c lies on +z (rotation.hpp: A = B Dz(theta) B Dz(-phi),
/// angles from the displacement components, no trigonometric call), apply the m-preserving z-axis
/// degree operator (translation_z.hpp, radius powers by products), rotate the local back (A^T).
/// The rotations act on normalised coefficients (D M, D^{-1} L), where they are orthogonal.
/// Exact on the z axis (both +z and -z) and in every direction.
/// m2l_naive_pair (O(p^4)): the complex translation theorem
///   Lc_n^m = (-1)^n sum_{k <= p-n} sum_{l} conj(Mc_k^l) Theta_{n+k}^{m+l}(s - c)
/// evaluated term by term, with Mc and Lc the complex coefficients (Mc_k^l = M_k^l + i M_k^-l,
/// L_n^0 = Lc_n^0, L_n^m = 2 Re Lc_n^m, L_n^-m = 2 Im Lc_n^m): the reference for the tests.
///
/// Both ADD to L. Coincident centres are outside the domain of M2L (the rotation version then adds
/// zeros, the naive one non-finite values).
#pragma once

#include <Kokkos_Core.hpp>

#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/solid_harmonics.hpp"
#include "kfmm/operators/translation_z.hpp"

namespace kfmm {

namespace detail {
template <int P, class Real>
KOKKOS_INLINE_FUNCTION void m2l_rotation_impl(int order, const Real* M, Real dx, Real dy, Real dz, Real* L) {
  const int p = effective_order<P>(order);
  constexpr int cap = buffer_order<P>;
  Real a[(cap + 1) * (cap + 1)];
  const RotationAngles<Real> g = rotation_angles(dx, dy, dz);
  if constexpr (P >= 0) {
    // The scalings folded into the swaps (SwapScaling; constants fold with a compile-time order): raw M
    // in (Dz commutes with D), the raw aligned multipole out of the second swap, the z-translation's
    // bare sums into the third: ~200 multiplications fewer per pair at p = 9 (of ~2260).
    KFMM_PRAGMA_UNROLL
    for (int i = 0; i < num_coefficients(P); ++i) a[i] = M[i];
    rotate_z<P>(order, g.cphi, -g.sphi, a);
    apply_swap<P, SwapRange::full, SwapScaling::from_raw>(order, a);
    rotate_z<P>(order, g.ctheta, g.stheta, a);
    apply_swap<P, SwapRange::rows, SwapScaling::to_raw>(order, a);  // only the rows the z-translation reads
    m2l_z_sums<P>(order, g.rinv, a);
    apply_swap<P, SwapRange::columns, SwapScaling::from_z_sums>(order, a);  // skips its zero columns
    rotate_z<P>(order, g.ctheta, -g.stheta, a);
    apply_swap<P>(order, a);
    rotate_z<P>(order, g.cphi, g.sphi, a);
  } else {
    // Runtime order: the table entries are loads, so the scalings stay separate passes.
    // Normalised coefficients (rotation.hpp): D M in, D^{-1} L out, so every rotation is orthogonal.
    for (int n = 0; n <= p; ++n) {
      for (int m = -n; m <= n; ++m) {
        const int i = coefficient_index(n, m);
        a[i] = M[i] * static_cast<Real>(expansion_scale(n, m));
      }
    }
    rotate_to_z<P, true>(order, g, a);  // only the rows the truncated z-translation reads
    m2l_z_translate<P, true>(order, g.rinv, a);
    rotate_from_z<P, true>(order, g, a);  // skips the columns it leaves zero
  }
  KFMM_PRAGMA_UNROLL
  for (int n = 0; n <= p; ++n) {
    KFMM_PRAGMA_UNROLL
    for (int m = -n; m <= n; ++m) {
      const int i = coefficient_index(n, m);
      L[i] += a[i] * static_cast<Real>(expansion_scale(n, m));
    }
  }
}
}  // namespace detail

/// Adds to the local expansion L (order P, about the target centre s) the M2L of the multipole M
/// (order P, about the source centre c); (dx, dy, dz) = s - c. Compile-time order 0 <= P <= 16:
/// loops unroll and the swap-matrix entries fold to immediates; registers only (two expansions of
/// (P+1)^2 values and a few vectors of P+1). O(P^3).
template <int P, class Real>
KOKKOS_INLINE_FUNCTION void m2l_rotation_pair(const Real* M, Real dx, Real dy, Real dz, Real* L) {
  static_assert(P >= 0 && P <= max_order, "kfmm: M2L order out of range 0..16");
  detail::m2l_rotation_impl<P>(P, M, dx, dy, dz, L);
}

/// Runtime-order M2L by rotation, 0 <= order <= 16 (not checked here: device code; batched operators
/// check with kfmm::check_order). Same result as m2l_rotation_pair<P>; uses a stack buffer of
/// (max_order+1)^2 values.
template <class Real>
KOKKOS_INLINE_FUNCTION void m2l_rotation_pair(int order, const Real* M, Real dx, Real dy, Real dz, Real* L) {
  detail::m2l_rotation_impl<-1>(order, M, dx, dy, dz, L);
}

/// Reference M2L, O(p^4): adds to L the M2L of M by the complex translation theorem (see the file
/// comment), with the irregular harmonics of (dx, dy, dz) = s - c to degree p (n + k <= p). Runtime
/// order 0..16; uses a stack buffer of (max_order+1)^2 values. Slow on purpose: for tests.
template <class Real>
KOKKOS_INLINE_FUNCTION void m2l_naive_pair(int order, const Real* M, Real dx, Real dy, Real dz, Real* L) {
  const int p = order;
  Real T[num_coefficients(max_order)];
  irregular_harmonics(p, dx, dy, dz, T);
  for (int n = 0; n <= p; ++n) {
    for (int m = 0; m <= n; ++m) {
      Real re = Real(0), im = Real(0);
      for (int k = 0; k <= p - n; ++k) {
        for (int l = -k; l <= k; ++l) {
          const int q = m + l, N = n + k;
          if (q > N || q < -N) continue;
          // conj(Mc_k^l): Mc_k^l = M_k^l + i M_k^-l for l >= 0, (-1)^l conj(Mc_k^|l|) for l < 0.
          const int al = l < 0 ? -l : l;
          Real mr = M[coefficient_index(k, al)];
          Real mi = al > 0 ? M[coefficient_index(k, -al)] : Real(0);
          if (l < 0) {
            mi = -mi;
            if (al & 1) mr = -mr, mi = -mi;
          }
          mi = -mi;  // conjugate
          // Theta_N^q = I_N^q + i I_N^-q for q >= 0, (-1)^q conj(Theta_N^|q|) for q < 0.
          const int aq = q < 0 ? -q : q;
          Real tr = T[coefficient_index(N, aq)];
          Real ti = aq > 0 ? T[coefficient_index(N, -aq)] : Real(0);
          if (q < 0) {
            ti = -ti;
            if (aq & 1) tr = -tr, ti = -ti;
          }
          re += mr * tr - mi * ti;
          im += mr * ti + mi * tr;
        }
      }
      if (n & 1) re = -re, im = -im;
      if (m == 0) {
        L[coefficient_index(n, 0)] += re;
      } else {
        L[coefficient_index(n, m)] += Real(2) * re;
        L[coefficient_index(n, -m)] += Real(2) * im;
      }
    }
  }
}

}  // namespace kfmm
