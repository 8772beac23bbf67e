/// \file solid_harmonics.hpp
/// Real solid harmonics in Dehnen's normalisation (W. Dehnen, "A fast multipole method for stellar
/// dynamics", arXiv:1405.2255, appendix A: the complex Upsilon_n^m and Theta_n^m, and the real basis
/// of section A.5.2 / Table 3, with no sqrt(2)), evaluated by
/// Cartesian recurrences: no trigonometric call, no square root for the regular ones, one for the
/// irregular ones.
///
/// With (r, theta, phi) the spherical coordinates of (x, y, z) and P_n^m the associated Legendre
/// function WITHOUT the Condon-Shortley phase (P_1^1 = +sin theta):
///
///   regular   R_n^m  = r^n P_n^|m|(cos theta) / (n+|m|)!       * {cos(|m| phi) for m >= 0, sin(|m| phi) for
///   m < 0} irregular I_n^m  = (n-|m|)! P_n^|m|(cos theta) / r^(n+1)   * {cos(|m| phi) for m >= 0, sin(|m|
///   phi) for m < 0}
///
/// i.e. R_n^m = Re / Im of Dehnen's complex Upsilon_n^|m| and I_n^m = Re / Im of Theta_n^|m|
/// of degree n. Examples: R_0^0 = 1, R_1^0 = z, R_1^1 = x/2, R_1^-1 = y/2, I_0^0 = 1/r, I_1^1 = x/r^3.
/// Values are stored in the packed layout of kfmm/core/expansion_layout.hpp (slot n^2 + n + m).
///
/// With these, for |y| < |x| (the addition theorem of Dehnen's appendix A written in the real basis):
///   1 / |x - y| = sum_{n >= 0} sum_{m=-n..n} w_m R_n^m(y) I_n^m(x),   w_0 = 1, w_{m != 0} = 2.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/simd_pack.hpp"

namespace kfmm {

/// Weight w_m of the real addition theorem: 1 for m == 0, 2 otherwise (the m and -m complex terms
/// are complex conjugates and sum to twice their real part).
KOKKOS_INLINE_FUNCTION constexpr int harmonic_weight(int m) {
  return m == 0 ? 1 : 2;
}

/// Signed weight (-1)^(n+|m|) w_m of the M2L along +z (translation_z.hpp, m2l_z_translate:
/// L_n^m = (-1)^(n+|m|) w_m S_n^m); rotation.hpp folds it into the swap after the z-translation.
KOKKOS_INLINE_FUNCTION constexpr int m2l_z_sign_weight(int n, int m) {
  return ((n + (m < 0 ? -m : m)) & 1) ? -harmonic_weight(m) : harmonic_weight(m);
}

namespace detail {
struct RecurrenceTable {
  double inverse[num_coefficients(max_order)];  // 1 / ((n+m)(n-m)) at slot (n, m >= 0)
};
KOKKOS_INLINE_FUNCTION constexpr RecurrenceTable make_recurrence_table() {
  RecurrenceTable t{};
  for (int n = 0; n <= max_order; ++n)
    for (int m = 0; m < n; ++m) t.inverse[coefficient_index(n, m)] = 1.0 / ((n + m) * (n - m));
  return t;
}
}  // namespace detail

/// 1 / ((n+m)(n-m)) for 0 <= m < n <= max_order (the regular recurrence's divisor), from a
/// constant table: no division in the streaming loops.
KOKKOS_INLINE_FUNCTION double regular_recurrence_inverse(int n, int m) {
  static constexpr detail::RecurrenceTable table = detail::make_recurrence_table();
  return table.inverse[coefficient_index(n, m)];
}

namespace detail {
/// R_m^m and R_m^-m into (c, s) from R_{m-1}^{m-1} and R_{m-1}^-(m-1) in (c, s) (m = 0: unchanged, the
/// caller starts from (1, 0)); see for_each_regular_harmonic.
template <class Real>
KOKKOS_FORCEINLINE_FUNCTION void regular_harmonic_column_start(int m, Real x, Real y, Real& c, Real& s) {
  if (m == 0) return;
  Real half;
  if constexpr (is_pack<Real>) {
    half = Real(0.5 / m);
  } else {
    half = Real(0.5) / Real(m);
  }
  const Real cn = (x * c - y * s) * half;
  s = (y * c + x * s) * half;
  c = cn;
}

/// One step down column m: from R_{n-1}^{+-m} in (c1, s1) and R_{n-2}^{+-m} in (c2, s2), R_n^m, returned,
/// and R_n^-m; shifts the pair, so that (c1, s1) holds degree n afterwards (see for_each_regular_harmonic).
template <class Real>
KOKKOS_FORCEINLINE_FUNCTION Real regular_harmonic_step(int n, int m, Real z, Real r2, Real& c1, Real& s1,
                                                       Real& c2, Real& s2) {
  constexpr bool tabulated =
      std::is_same<Real, float>::value || std::is_same<Real, double>::value || is_pack<Real>;
  const Real a = Real(2 * n - 1) * z;
  Real inv;
  if constexpr (tabulated) {
    inv = static_cast<Real>(regular_recurrence_inverse(n, m));
  } else {
    inv = Real(1) / Real((n + m) * (n - m));
  }
  const Real cn = (a * c1 - r2 * c2) * inv;
  const Real sn = (a * s1 - r2 * s2) * inv;
  c2 = c1, s2 = s1, c1 = cn, s1 = sn;
  return cn;
}
}  // namespace detail

/// Calls f(n, m, c, s) for every degree n = 0..degree and order m = 0..n, with c = R_n^m(x, y, z)
/// and s = R_n^-m(x, y, z) (s = 0 for m = 0), column by column (m outer, n inner). Recurrences (the
/// Legendre recurrences with Dehnen's 1/(n+m)! normalisation; no division by r, exact at r = 0):
///   R_m^m = (x + i y) / (2m) * R_{m-1}^{m-1}     (complex form: real and imaginary parts)
///   R_n^m = ((2n-1) z R_{n-1}^m - r^2 R_{n-2}^m) / ((n+m)(n-m))   for n > m  (R_{m-1}^m = 0).
/// Only a handful of registers, no buffer of (degree+1)^2 values: the streaming form of P2M and L2P.
/// float / double and SIMD packs of them (detail::Pack: W points at once): degree <= max_order (the
/// divisors come from a table, as scalars); other types (long double, dual numbers in tests) divide and
/// accept any degree.
/// P >= 0: the degree is the compile-time P (`degree` is ignored) and device compilers unroll both
/// loops, so the divisors, the table entries and f's coefficient indices fold to immediates and its
/// tests on n and m disappear (the GPU P2M: 1.7-1.9x faster on the H200, docs/benchmarks.md,
/// "Twenty-fifth session").
/// P = -1: the run-time `degree`, loops as written (also where inlining makes `degree` a constant: the
/// GPU L2P, whose f reads four coefficient arrays, held 255 registers and spilled when unrolled).
template <int P = -1, class Real, class F>
KOKKOS_INLINE_FUNCTION void for_each_regular_harmonic(int degree, Real x, Real y, Real z, F&& f) {
  const Real r2 = x * x + y * y + z * z;
  Real c = Real(1), s = Real(0);  // R_m^m, R_m^-m
  if constexpr (P >= 0) {
    KFMM_PRAGMA_UNROLL
    for (int m = 0; m <= P; ++m) {
      detail::regular_harmonic_column_start(m, x, y, c, s);
      f(m, m, c, s);
      Real c2 = Real(0), s2 = Real(0), c1 = c, s1 = s;  // R_{n-2}, R_{n-1}
      KFMM_PRAGMA_UNROLL
      for (int n = m + 1; n <= P; ++n) {
        const Real cn = detail::regular_harmonic_step(n, m, z, r2, c1, s1, c2, s2);
        f(n, m, cn, s1);
      }
    }
  } else {
    for (int m = 0; m <= degree; ++m) {
      detail::regular_harmonic_column_start(m, x, y, c, s);
      f(m, m, c, s);
      Real c2 = Real(0), s2 = Real(0), c1 = c, s1 = s;
      for (int n = m + 1; n <= degree; ++n) {
        const Real cn = detail::regular_harmonic_step(n, m, z, r2, c1, s1, c2, s2);
        f(n, m, cn, s1);
      }
    }
  }
}

/// Regular real solid harmonics R_n^m(x, y, z) for n = 0..degree, written to R[0 .. (degree+1)^2)
/// (for_each_regular_harmonic's recurrences and degree limits).
template <class Real>
KOKKOS_INLINE_FUNCTION void regular_harmonics(int degree, Real x, Real y, Real z, Real* R) {
  for_each_regular_harmonic(degree, x, y, z, [&](int n, int m, const Real& c, const Real& s) {
    R[coefficient_index(n, m)] = c;
    if (m > 0) R[coefficient_index(n, -m)] = s;
  });
}

/// Irregular real solid harmonics I_n^m(x, y, z) for n = 0..degree (any degree), written to
/// I[0 .. (degree+1)^2). Requires r > 0 (the harmonics are singular at the origin). Recurrences
/// (the Legendre recurrences with the (n-m)!/r^(n+1) normalisation):
///   I_0^0 = 1/r,  I_m^m = (2m-1) (x + i y) / r^2 * I_{m-1}^{m-1},
///   I_n^m = ((2n-1) z I_{n-1}^m - (n+m-1)(n-m-1) I_{n-2}^m) / r^2   for n > m  (I_{m-1}^m = 0).
template <class Real>
KOKKOS_INLINE_FUNCTION void irregular_harmonics(int degree, Real x, Real y, Real z, Real* I) {
  const Real r2 = x * x + y * y + z * z;
  const Real rinv2 = Real(1) / r2;
  Real c = compat::sqrt(rinv2), s = Real(0);
  const Real xs = x * rinv2, ys = y * rinv2, zs = z * rinv2;
  for (int m = 0; m <= degree; ++m) {
    if (m > 0) {
      const Real a = Real(2 * m - 1);
      const Real cn = a * (xs * c - ys * s);
      s = a * (ys * c + xs * s);
      c = cn;
    }
    I[coefficient_index(m, m)] = c;
    if (m > 0) I[coefficient_index(m, -m)] = s;
    Real c2 = Real(0), s2 = Real(0), c1 = c, s1 = s;  // I_{n-2}, I_{n-1}
    for (int n = m + 1; n <= degree; ++n) {
      const Real a = Real(2 * n - 1) * zs;
      const Real b = Real((n + m - 1) * (n - m - 1)) * rinv2;
      const Real cn = a * c1 - b * c2, sn = a * s1 - b * s2;
      I[coefficient_index(n, m)] = cn;
      if (m > 0) I[coefficient_index(n, -m)] = sn;
      c2 = c1, s2 = s1, c1 = cn, s1 = sn;
    }
  }
}

/// Coefficient of R_{n-1}^k in d/dx R_n^m (degree lowering, from Dehnen's complex relations
/// (d/dx - i d/dy) Upsilon_n^m = Upsilon_{n-1}^{m-1}, (d/dx + i d/dy) Upsilon_n^m = -Upsilon_{n-1}^{m+1}):
///   d/dx R_n^0 = -R_{n-1}^1,            d/dy R_n^0 = -R_{n-1}^-1,            d/dz R_n^m = R_{n-1}^m,
///   d/dx R_n^m  = (R_{n-1}^{m-1}  - R_{n-1}^{m+1}) / 2,   d/dy R_n^m  = -(R_{n-1}^{-(m-1)} +
///   R_{n-1}^{-(m+1)}) / 2, d/dx R_n^-m = (R_{n-1}^{-(m-1)} - R_{n-1}^{-(m+1)}) / 2, d/dy R_n^-m =
///   (R_{n-1}^{m-1} + R_{n-1}^{m+1}) / 2,
/// for m > 0, where R_{n-1}^{-0} := 0 and terms with |index| > n-1 vanish.
KOKKOS_INLINE_FUNCTION constexpr double harmonic_lowering_x(int m, int k) {
  if (m == 0) return k == 1 ? -1.0 : 0.0;
  if (m > 0) return (k == m - 1 ? 0.5 : 0.0) - (k == m + 1 ? 0.5 : 0.0);
  const int q = -m;
  return ((q > 1 && k == -(q - 1)) ? 0.5 : 0.0) - (k == -(q + 1) ? 0.5 : 0.0);
}
/// Coefficient of R_{n-1}^k in d/dy R_n^m (see harmonic_lowering_x).
KOKKOS_INLINE_FUNCTION constexpr double harmonic_lowering_y(int m, int k) {
  if (m == 0) return k == -1 ? -1.0 : 0.0;
  if (m > 0) return -(((m > 1 && k == -(m - 1)) ? 0.5 : 0.0) + (k == -(m + 1) ? 0.5 : 0.0));
  const int q = -m;
  return (k == q - 1 ? 0.5 : 0.0) + (k == q + 1 ? 0.5 : 0.0);
}

}  // namespace kfmm
