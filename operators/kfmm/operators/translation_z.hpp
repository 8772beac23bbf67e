/// \file translation_z.hpp
/// Translations along the z axis in the real solid-harmonic basis (see solid_harmonics.hpp): the
/// m-preserving degree operators the rotation-based M2L, M2M and L2L apply between the rotations of
/// rotation.hpp. All work in place on an expansion of order p (template P >= 0: compile-time order;
/// P = -1: the runtime `order`), use no division inside the loops and build the radius powers by
/// products.
///
/// Derivations (from the translation theorems of Dehnen 2014, arXiv:1405.2255, appendix A, in
/// complex form, restricted to a displacement along z and written in the real basis):
///  - M2L, source multipole at the origin, target centre at +r e_z, truncated at n + k <= p:
///      L_n^m = w_m (-1)^(n+|m|) sum_{k=|m|}^{p-n} (n+k)! / r^(n+k+1) M_k^m,
///    from Theta_n^m(x - y) = sum_{k,l} conj(Upsilon_k^l(y)) Theta_{n+k}^{m+l}(x) and
///    Theta_N^M(r e_z) = delta_{M0} N! / r^(N+1); w_m as in harmonic_weight.
///  - M2M, multipole moved from a centre c to c - r e_z (i.e. the old centre sits at +r e_z from the
///    new one): M'_n^m = sum_{k=0}^{n-|m|} r^k / k! M_{n-k}^m, from
///    Upsilon_n^m(x + y) = sum_{k,l} Upsilon_k^l(y) Upsilon_{n-k}^{m-l}(x) and Upsilon_k^l(r e_z) =
///    delta_{l0} r^k/k!.
///  - L2L, local moved from a centre s to s + r e_z: L'_n^m = sum_{k=0}^{p-n} r^k / k! L_{n+k}^m.
#pragma once

#include <Kokkos_Core.hpp>

#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/rotation.hpp"

namespace kfmm {

/// In place, the core of the M2L's z-translation without its scalings: for |m| <= min(n, p - n),
///   a_n^m <- S_n^m = sum_{k=|m|}^{p-n} (n+k)! / r^(n+k+1) a_k^m,
/// from the raw (Dehnen-normalised) aligned multipole; the local is L_n^m = w_m (-1)^(n+|m|) S_n^m.
/// The entries with |m| > p - n (a zero local) are left as they are. The M2L with folded scalings
/// (m2l_pair.hpp) gets a from a swap with SwapScaling::to_raw and hands S to one with from_z_sums.
template <int P = -1, class Real>
KOKKOS_INLINE_FUNCTION void m2l_z_sums(int order, Real rinv, Real* a) {
  const int p = detail::effective_order<P>(order);
  constexpr int cap = detail::buffer_order<P>;
  Real f[cap + 1] = {};  // f[j] = j! / r^(j+1)
  f[0] = rinv;
  KFMM_PRAGMA_UNROLL
  for (int j = 1; j <= p; ++j) f[j] = f[j - 1] * (Real(j) * rinv);
  KFMM_PRAGMA_UNROLL
  for (int am = 0; am <= p; ++am) {
    KFMM_PRAGMA_UNROLL
    for (int side = 0; side < 2; ++side) {
      if (am == 0 && side == 1) continue;
      const int m = side ? -am : am;
      Real col[cap + 1] = {};  // the column a_k^m, read before it is overwritten
      KFMM_PRAGMA_UNROLL
      for (int k = am; k <= p - am; ++k) col[k] = a[coefficient_index(k, m)];
      KFMM_PRAGMA_UNROLL
      for (int n = am; n <= p - am; ++n) {
        Real acc = Real(0);
        KFMM_PRAGMA_UNROLL
        for (int k = am; k <= p - n; ++k) acc += f[n + k] * col[k];
        a[coefficient_index(n, m)] = acc;
      }
    }
  }
}

/// In place: multipole coefficients about the origin -> local coefficients about r e_z (r > 0,
/// rinv = 1/r), both in the aligned frame; the degree operator truncated at n + k <= p:
///   L_n^m = w_m (-1)^(n+|m|) S_n^m (m2l_z_sums), zero where |m| > p - n.
/// Normalised = true: input D M and output D^{-1} L (the normalised coefficients of rotation.hpp).
template <int P = -1, bool Normalised = false, class Real>
KOKKOS_INLINE_FUNCTION void m2l_z_translate(int order, Real rinv, Real* a) {
  const int p = detail::effective_order<P>(order);
  if constexpr (Normalised) {  // the entries m2l_z_sums reads, |m| <= min(k, p - k), to raw coefficients
    KFMM_PRAGMA_UNROLL
    for (int k = 0; k <= p; ++k) {
      const int last = k < p - k ? k : p - k;
      KFMM_PRAGMA_UNROLL
      for (int m = -last; m <= last; ++m)
        a[coefficient_index(k, m)] *= static_cast<Real>(expansion_inverse_scale(k, m));
    }
  }
  m2l_z_sums<P>(order, rinv, a);
  KFMM_PRAGMA_UNROLL
  for (int n = 0; n <= p; ++n) {
    KFMM_PRAGMA_UNROLL
    for (int m = -n; m <= n; ++m) {
      const int am = m < 0 ? -m : m;
      const Real sign_weight = Real(m2l_z_sign_weight(n, m));
      const Real weight =
          Normalised ? sign_weight * static_cast<Real>(expansion_inverse_scale(n, m)) : sign_weight;
      a[coefficient_index(n, m)] = weight * (am <= p - n ? a[coefficient_index(n, m)] : Real(0));
    }
  }
}

/// In place: M'_n^m = sum_{k=0}^{n-|m|} r^k/k! M_{n-k}^m (multipole moved to a centre r e_z below the
/// old one, aligned frame). Degrees descend so every source coefficient is read before it changes.
template <int P = -1, class Real>
KOKKOS_INLINE_FUNCTION void m2m_z_shift(int order, Real r, Real* a) {
  const int p = detail::effective_order<P>(order);
  constexpr int cap = detail::buffer_order<P>;
  Real e[cap + 1] = {};  // e[k] = r^k / k!
  e[0] = Real(1);
  KFMM_PRAGMA_UNROLL
  for (int k = 1; k <= p; ++k) e[k] = e[k - 1] * r / Real(k);
  KFMM_PRAGMA_UNROLL
  for (int n = p; n >= 1; --n) {
    KFMM_PRAGMA_UNROLL
    for (int m = -n; m <= n; ++m) {
      const int am = m < 0 ? -m : m;
      Real acc = a[coefficient_index(n, m)];
      KFMM_PRAGMA_UNROLL
      for (int k = 1; k <= n - am; ++k) acc += e[k] * a[coefficient_index(n - k, m)];
      a[coefficient_index(n, m)] = acc;
    }
  }
}

/// In place: L'_n^m = sum_{k=0}^{p-n} r^k/k! L_{n+k}^m (local moved to a centre r e_z above the old
/// one, aligned frame). Degrees ascend so every source coefficient is read before it changes.
template <int P = -1, class Real>
KOKKOS_INLINE_FUNCTION void l2l_z_shift(int order, Real r, Real* a) {
  const int p = detail::effective_order<P>(order);
  constexpr int cap = detail::buffer_order<P>;
  Real e[cap + 1] = {};
  e[0] = Real(1);
  KFMM_PRAGMA_UNROLL
  for (int k = 1; k <= p; ++k) e[k] = e[k - 1] * r / Real(k);
  KFMM_PRAGMA_UNROLL
  for (int n = 0; n < p; ++n) {
    KFMM_PRAGMA_UNROLL
    for (int m = -n; m <= n; ++m) {
      Real acc = a[coefficient_index(n, m)];
      KFMM_PRAGMA_UNROLL
      for (int k = 1; k <= p - n; ++k) acc += e[k] * a[coefficient_index(n + k, m)];
      a[coefficient_index(n, m)] = acc;
    }
  }
}

}  // namespace kfmm
