/// \file rotation.hpp
/// Rotations of real solid-harmonic expansions (packed layout of kfmm/core/expansion_layout.hpp),
/// the building blocks of the O(p^3) rotation-based translations (M2L, M2M, L2L).
///
/// Convention. For an orthogonal map Q of R^3, the regular harmonics of degree n transform among
/// themselves: R_n(Q y) = A_n(Q) R_n(y) (R_n the vector of the 2n+1 harmonics of degree n), and
/// A(Q1 Q2) = A(Q1) A(Q2). Two kinds of A are used:
///  - Dz(alpha) = A(rotation by alpha about z): a 2x2 rotation of each (m, -m) pair,
///      out[m] = cos(m alpha) v[m] - sin(m alpha) v[-m],  out[-m] = sin(m alpha) v[m] + cos(m alpha) v[-m];
///  - B = A(S) for the constant swap S(x, y, z) = (x, z, y). S^2 = 1, so B^2 = 1 (B is its own
///    inverse). S Rz(alpha) S = Ry(-alpha), so a rotation about y is B Dz(alpha) B: the only
///    non-diagonal blocks are the constant B's (Dehnen 2014, arXiv:1405.2255, section A.6.1, eqs.
///    63-64, uses the same idea with an x <-> z swap).
///
/// A multipole M_n^m = sum_j mu_j R_n^m(y_j) becomes A M in the frame y' = Q y; a local expansion
/// L (potential = sum L_n^m R_n^m(y)) becomes A^{-T} L, and comes back as A^T L.
///
/// In Dehnen's normalisation A is not orthogonal and B's entries span many orders of magnitude,
/// which costs precision at high order. The rotations are therefore applied to NORMALISED
/// coefficients (D M for multipoles, D^{-1} L for locals, D of expansion_scale), on which every
/// rotation is orthogonal: O = D A D^{-1}, O^{-1} = O^T, and the swap block D B D^{-1} is symmetric.
///
/// The alignment used by every translation with displacement t = (tx, ty, tz), |t| = r:
///   Q = Ry(-theta) Rz(-phi) = S Rz(theta) S Rz(-phi),  A(Q) = B Dz(theta) B Dz(-phi),  Q t = r e_z,
/// with phi the azimuth of t (cos phi = tx/rho, sin phi = ty/rho, rho = sqrt(tx^2 + ty^2); phi = 0 on
/// the z axis) and theta its polar angle (cos theta = tz/r, sin theta = rho/r). cos(m alpha) and
/// sin(m alpha) come from the angle-addition recurrence, so there is no trigonometric call, and the
/// z axis (rho = 0, theta = 0 or pi) is exact.
///
/// The B tables are computed at compile time (constexpr) from the degree-lowering relations of the
/// harmonics: d/dz f = (d/dy R_n)(S y) etc. for f(y) = R_n(S y) give
///   B_n G_x = G_x B_{n-1},  B_n G_y = G_z B_{n-1},  B_n G_z = G_y B_{n-1}
/// (G_a the lowering matrices of harmonic_lowering_x/_y, G_z the identity shift), which determine
/// B_n column by column from B_{n-1}; B_0 = 1. Only about a quarter of the entries are non-zero, at
/// positions known in closed form (swap_column_sign / swap_first_column), and only those are visited.
#pragma once

#include <Kokkos_Core.hpp>

#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/solid_harmonics.hpp"

namespace kfmm {

namespace detail {

/// Offset of the (2n+1) x (2n+1) block of degree n in the swap table: sum_{j<n} (2j+1)^2.
KOKKOS_INLINE_FUNCTION constexpr int swap_block_offset(int n) {
  return n * (2 * n - 1) * (2 * n + 1) / 3;
}

inline constexpr int swap_table_size = swap_block_offset(max_order + 1);

/// Dense row-major blocks B_n (rows m = -n..n, columns k = -n..n) for n = 0..max_order.
struct SwapTable {
  double v[swap_table_size];
};

KOKKOS_INLINE_FUNCTION constexpr int iabs(int i) {
  return i < 0 ? -i : i;
}

KOKKOS_INLINE_FUNCTION constexpr double swap_previous(const SwapTable& t, int n, int m, int k) {
  // Entry (m, k) of B_n, zero outside the block.
  return (iabs(m) <= n && iabs(k) <= n) ? t.v[swap_block_offset(n) + (m + n) * (2 * n + 1) + (k + n)] : 0.0;
}

KOKKOS_INLINE_FUNCTION constexpr int swap_column_sign_impl(int n, int m) {
  return ((n - iabs(m)) % 2 == 0) ? 1 : -1;
}

/// True where B_n may be non-zero (see swap_column_sign / swap_first_column below).
KOKKOS_INLINE_FUNCTION constexpr bool swap_in_pattern(int n, int m, int k) {
  if ((k >= 0) != (swap_column_sign_impl(n, m) > 0)) return false;
  if (k == 0 && swap_column_sign_impl(n, m) < 0) return false;
  const int parity = (m >= 0) ? (n & 1) : ((n + 1) & 1);
  return (iabs(k) & 1) == parity;
}

KOKKOS_INLINE_FUNCTION constexpr bool candidate_repeated(const int* cand, int c) {
  for (int e = 0; e < c; ++e)
    if (cand[e] == cand[c]) return true;
  return false;
}

KOKKOS_INLINE_FUNCTION constexpr SwapTable make_swap_table() {
  // Only the entries inside the sparsity pattern are computed (the others are zero), and the sums
  // visit only the indices where the lowering coefficients can be non-zero: device compilers'
  // constant evaluators (EDG in nvcc) refuse long constexpr evaluations.
  SwapTable t{};
  t.v[0] = 1.0;
  for (int n = 1; n <= max_order; ++n) {
    const int o = swap_block_offset(n), w = 2 * n + 1;
    for (int m = -n; m <= n; ++m) {
      const int am = iabs(m);
      // j with harmonic_lowering_x/y(m, j) possibly non-zero (each distinct value visited once).
      const int cand[4] = {am - 1, am + 1, -(am - 1), -(am + 1)};
      // Inner columns first: the columns +-n need the inner columns +-(n-2) of the same row.
      for (int step = 0; step < w; ++step) {
        const int k = step < w - 2 ? step - (n - 1) : (step == w - 2 ? n : -n);
        if (!swap_in_pattern(n, m, k)) continue;
        double s = 0.0;
        if (iabs(k) <= n - 1) {
          // Columns |k| <= n-1 from B_n G_z = G_y B_{n-1} (G_z is the identity shift of degree).
          for (int c = 0; c < 4; ++c) {
            const int j = cand[c];
            if (iabs(j) > n - 1 || candidate_repeated(cand, c)) continue;
            s += harmonic_lowering_y(m, j) * swap_previous(t, n - 1, j, k);
          }
        } else if (k == n) {
          // Column k = n from column n-1 of B_n G_x = G_x B_{n-1}: among the unknown columns only
          // R_n^n feeds R_{n-1}^{n-1} under d/dx (coefficient 1/2); of the known ones only k = +-(n-2).
          for (int c = 0; c < 4; ++c) {
            const int j = cand[c];
            if (iabs(j) > n - 1 || candidate_repeated(cand, c)) continue;
            s += harmonic_lowering_x(m, j) * swap_previous(t, n - 1, j, n - 1);
          }
          if (n >= 2) {
            s -= t.v[o + (m + n) * w + (n - 2 + n)] * harmonic_lowering_x(n - 2, n - 1);
            if (n > 2) s -= t.v[o + (m + n) * w + (-(n - 2) + n)] * harmonic_lowering_x(-(n - 2), n - 1);
          }
          s *= 2.0;
        } else {
          // Column k = -n from column n-1 of B_n G_y = G_z B_{n-1}: among the unknown columns only
          // R_n^-n feeds R_{n-1}^{n-1} under d/dy (coefficient 1/2); of the known ones only k = +-(n-2).
          s = swap_previous(t, n - 1, m, n - 1);
          if (n >= 2) {
            s -= t.v[o + (m + n) * w + (n - 2 + n)] * harmonic_lowering_y(n - 2, n - 1);
            if (n > 2) s -= t.v[o + (m + n) * w + (-(n - 2) + n)] * harmonic_lowering_y(-(n - 2), n - 1);
          }
          s *= 2.0;
        }
        t.v[o + (m + n) * w + (k + n)] = s;
      }
    }
  }
  return t;
}

/// Scale factors between Dehnen's normalisation and an orthonormal real basis:
///   D_n^m = sqrt((n - |m|)! (n + |m|)!) * (|m| > 0 ? sqrt 2 : 1).
/// The scaled coefficients (D M for multipoles, D^{-1} L for locals) transform under rotations with
/// the orthogonal matrices O = D A D^{-1}, so round-off is not amplified by the factorial spread of
/// the raw B blocks (whose entries span 2^n .. 1/(2^n n!)): at p = 16 the raw blocks lose about
/// 8 digits in fp32 and 3 in fp64, the orthogonal ones none (measured, docs/operators.md).
struct ScaleTable {
  double scale[num_coefficients(max_order)];
  double inverse[num_coefficients(max_order)];
};

/// sqrt for constant evaluation (Newton from above; exact to an ulp for the factorials used here).
KOKKOS_INLINE_FUNCTION constexpr double constexpr_sqrt(double x) {
  if (!(x > 0.0)) return 0.0;
  double g = x > 1.0 ? x : 1.0;
  while (g * g > 4.0 * x) g *= 0.5;
  for (int i = 0; i < 100; ++i) {
    const double next = 0.5 * (g + x / g);
    if (next == g) break;
    g = next;
  }
  return g;
}

KOKKOS_INLINE_FUNCTION constexpr ScaleTable make_scale_table() {
  ScaleTable t{};
  double factorial[2 * max_order + 1] = {};
  factorial[0] = 1.0;
  for (int i = 1; i <= 2 * max_order; ++i) factorial[i] = factorial[i - 1] * i;
  for (int n = 0; n <= max_order; ++n) {
    for (int m = -n; m <= n; ++m) {
      const int am = iabs(m);
      const double d = constexpr_sqrt(factorial[n - am] * factorial[n + am] * (am > 0 ? 2.0 : 1.0));
      t.scale[coefficient_index(n, m)] = d;
      t.inverse[coefficient_index(n, m)] = 1.0 / d;
    }
  }
  return t;
}

/// The orthogonal (and, B being an involution, symmetric) blocks D_n B_n D_n^{-1}.
KOKKOS_INLINE_FUNCTION constexpr SwapTable make_normalised_swap_table() {
  const SwapTable raw = make_swap_table();
  const ScaleTable d = make_scale_table();
  SwapTable t{};
  for (int n = 0; n <= max_order; ++n) {
    for (int m = -n; m <= n; ++m) {
      for (int k = -n; k <= n; ++k) {
        if (!swap_in_pattern(n, m, k)) continue;
        const int i = swap_block_offset(n) + (m + n) * (2 * n + 1) + (k + n);
        t.v[i] = d.scale[coefficient_index(n, m)] * raw.v[i] * d.inverse[coefficient_index(n, k)];
      }
    }
  }
  return t;
}

}  // namespace detail

/// D_n^m of detail::ScaleTable (orthonormal-basis scale of coefficient (n, m)), in double.
KOKKOS_INLINE_FUNCTION double expansion_scale(int n, int m) {
  static constexpr detail::ScaleTable table = detail::make_scale_table();
  return table.scale[coefficient_index(n, m)];
}
/// 1 / D_n^m.
KOKKOS_INLINE_FUNCTION double expansion_inverse_scale(int n, int m) {
  static constexpr detail::ScaleTable table = detail::make_scale_table();
  return table.inverse[coefficient_index(n, m)];
}

/// Entry (m, k) of the raw swap block B_n (Dehnen normalisation; |m|, |k| <= n <= max_order).
/// Kept for tests and documentation; the operators use normalised_swap_coefficient.
KOKKOS_INLINE_FUNCTION double swap_coefficient(int n, int m, int k) {
  static constexpr detail::SwapTable table = detail::make_swap_table();
  return table.v[detail::swap_block_offset(n) + (m + n) * (2 * n + 1) + (k + n)];
}

/// Entry (m, k) of the orthogonal swap block D_n B_n D_n^{-1} (symmetric: (m, k) == (k, m)).
/// Callable on the host and in kernels: the table is a constant-initialised static, and with
/// constant arguments (compile-time order, unrolled loops) the load folds to an immediate.
KOKKOS_INLINE_FUNCTION double normalised_swap_coefficient(int n, int m, int k) {
  static constexpr detail::SwapTable table = detail::make_normalised_swap_table();
  return table.v[detail::swap_block_offset(n) + (m + n) * (2 * n + 1) + (k + n)];
}

/// Sparsity of B_n (and, the pattern being symmetric, of B_n^T): row m has non-zeros only in the
/// columns k = sign * j, j = swap_first_column(n, m), +2, ..., <= n. The swap S keeps x and
/// exchanges y and z, so parities in x, y, z decide: sign = +1 (cosine columns) iff n - |m| is even;
/// |k| has the parity of n for m >= 0 and of n + 1 for m < 0.
KOKKOS_INLINE_FUNCTION constexpr int swap_column_sign(int n, int m) {
  return detail::swap_column_sign_impl(n, m);
}
KOKKOS_INLINE_FUNCTION constexpr int swap_first_column(int n, int m) {
  const int j0 = (m >= 0) ? (n & 1) : ((n + 1) & 1);
  return (j0 == 0 && swap_column_sign(n, m) < 0) ? 2 : j0;
}

/// cos and sin of the azimuth (phi) and polar angle (theta) of a displacement, and its length:
/// everything a rotation-based translation needs, from one square root and one reciprocal square
/// root (no trigonometric call).
template <class Real>
struct RotationAngles {
  Real r;       ///< |t|
  Real rinv;    ///< 1 / |t|
  Real cphi;    ///< cos(phi) = tx / rho (1 on the z axis)
  Real sphi;    ///< sin(phi) = ty / rho (0 on the z axis)
  Real ctheta;  ///< cos(theta) = tz / r
  Real stheta;  ///< sin(theta) = rho / r
};

/// Angles of the displacement (tx, ty, tz). On the z axis (rho == 0) phi = 0, so +z gives
/// theta = 0 (the identity) and -z theta = pi, both exact. A zero displacement gives the identity
/// rotation with r = rinv = 0 (an M2M/L2L shift by zero is then the identity; an M2L between
/// coincident centres is undefined and yields zeros, never NaN); so does one whose r^2 is below the
/// smallest normal number (|t| < ~1.1e-19 in float, ~1.5e-154 in double), outside compat::rsqrt's range.
template <class Real>
KOKKOS_INLINE_FUNCTION RotationAngles<Real> rotation_angles(Real tx, Real ty, Real tz) {
  RotationAngles<Real> a;
  const Real rho2 = tx * tx + ty * ty;
  const Real r2 = rho2 + tz * tz;
  if (!(r2 >= compat::smallest_normal<Real>())) {  // zero displacement: the identity, r = rinv = 0 (no NaN)
    a.r = a.rinv = a.sphi = a.stheta = Real(0);
    a.cphi = a.ctheta = Real(1);
    return a;
  }
  const Real rho = compat::sqrt(rho2);
  a.rinv = compat::rsqrt(r2);
  a.r = r2 * a.rinv;
  if (rho > Real(0)) {
    const Real rhoinv = Real(1) / rho;
    a.cphi = tx * rhoinv;
    a.sphi = ty * rhoinv;
  } else {
    a.cphi = Real(1);
    a.sphi = Real(0);
  }
  a.ctheta = tz * a.rinv;
  a.stheta = rho * a.rinv;
  return a;
}

namespace detail {
/// The order actually used: the compile-time P when P >= 0, else the runtime order, clamped to
/// 0..max_order (callers check orders on the host; the clamp also tells the compiler the bound of
/// the partially unrolled runtime loops).
template <int P>
KOKKOS_FORCEINLINE_FUNCTION constexpr int effective_order(int order) {
  return P >= 0 ? P : (order < 0 ? 0 : (order > max_order ? max_order : order));
}
/// Capacity of per-expansion buffers: (P+1)^2 for a compile-time order, else the maximum order.
template <int P>
inline constexpr int buffer_order = P >= 0 ? P : max_order;
}  // namespace detail

/// In place: a <- Dz(alpha) a for an expansion of order p (P >= 0: compile-time order, the runtime
/// `order` is ignored; P = -1: runtime order). (c, s) = (cos alpha, sin alpha).
template <int P = -1, class Real>
KOKKOS_INLINE_FUNCTION void rotate_z(int order, Real c, Real s, Real* a) {
  const int p = detail::effective_order<P>(order);
  Real cm = Real(1), sm = Real(0);
  KFMM_PRAGMA_UNROLL
  for (int m = 1; m <= p; ++m) {
    const Real cn = cm * c - sm * s;
    sm = sm * c + cm * s;
    cm = cn;
    KFMM_PRAGMA_UNROLL
    for (int n = m; n <= p; ++n) {
      const Real u = a[coefficient_index(n, m)], v = a[coefficient_index(n, -m)];
      a[coefficient_index(n, m)] = cm * u - sm * v;
      a[coefficient_index(n, -m)] = sm * u + cm * v;
    }
  }
}

/// The coefficients of a degree-n block that the swap next to an M2L's truncated z-translation
/// (translation_z.hpp, n + k <= p) needs. In the aligned frame the z-translation reads the multipole
/// M_k^m only for |m| <= min(k, p - k), and leaves the local L_n^m zero for |m| > p - n. So:
///  - full:    every row from every column (M2M, L2L, rotations on their own);
///  - rows:    the swap that ends rotate_to_z before an M2L computes only the rows |m| <= min(n, p - n)
///             (the others keep their input, which the z-translation never reads);
///  - columns: the swap that starts rotate_from_z after an M2L reads only the columns |k| <= p - n
///             (the others are the z-translation's zeros).
/// At p = 9 the two cut 31 % of the swaps' multiply-adds (the swaps are half of an M2L's), with the same
/// result: nothing but exact zeros and unread rows is skipped.
enum class SwapRange { full, rows, columns };

/// Diagonal scalings folded into a swap's entries, so that the M2L needs no separate scaling passes
/// (m2l_pair.hpp): with O the orthogonal block D B D^{-1} of degree n,
///  - none:          O (normalised coefficients in and out);
///  - from_raw:      O diag(D_n^k): takes raw (Dehnen-normalised) coefficients, gives normalised ones
///                   (a rotation about z commutes with D, whose entries depend on |m| only);
///  - to_raw:        diag(1 / D_n^m) O: takes normalised coefficients, gives raw ones;
///  - from_z_sums:   O diag(z_weight(n, k)): takes the bare sums of m2l_z_sums, gives the normalised
///                   aligned local (z_weight: translation_z.hpp's sign, harmonic weight and 1 / D).
/// With a compile-time order the entry and its factor are constants, so the product folds into one.
enum class SwapScaling { none, from_raw, to_raw, from_z_sums };

namespace detail {
/// The factor of swap entry (n, m, k) under Scaling (see SwapScaling), from the scale table d
/// (constexpr: the host lanes fold it into their own tables at compile time, m2l_csr_lanes.hpp).
template <SwapScaling Scaling>
KOKKOS_INLINE_FUNCTION constexpr double swap_scaling_from(const ScaleTable& d, int n, int m, int k) {
  if constexpr (Scaling == SwapScaling::from_raw) {
    return d.scale[coefficient_index(n, k)];
  } else if constexpr (Scaling == SwapScaling::to_raw) {
    return d.inverse[coefficient_index(n, m)];
  } else if constexpr (Scaling == SwapScaling::from_z_sums) {
    return m2l_z_sign_weight(n, k) * d.inverse[coefficient_index(n, k)];
  } else {
    (void)d, (void)n, (void)m, (void)k;
    return 1.0;
  }
}
}  // namespace detail

/// The factor of swap entry (n, m, k) under Scaling (double; see SwapScaling).
template <SwapScaling Scaling>
KOKKOS_FORCEINLINE_FUNCTION double swap_scaling(int n, int m, int k) {
  static constexpr detail::ScaleTable table = detail::make_scale_table();
  return detail::swap_scaling_from<Scaling>(table, n, m, k);
}

/// In place: a_n <- (D B D^{-1})_n a_n for every degree n of an expansion of order p, on
/// normalised coefficients (the block is symmetric, so this is also its transpose); Range and Scaling
/// as above.
template <int P = -1, SwapRange Range = SwapRange::full, SwapScaling Scaling = SwapScaling::none, class Real>
KOKKOS_INLINE_FUNCTION void apply_swap(int order, Real* a) {
  const int p = detail::effective_order<P>(order);
  constexpr int cap = detail::buffer_order<P>;
  Real tmp[2 * cap + 1] = {};
  KFMM_PRAGMA_UNROLL
  for (int n = 1; n <= p; ++n) {
    Real* an = a + n * n + n;  // an[m] is the coefficient (n, m)
    // rows |m| <= last_row, columns |k| <= last_column
    const int last_row = (Range == SwapRange::rows && p - n < n) ? p - n : n;
    const int last_column = (Range == SwapRange::columns && p - n < n) ? p - n : n;
    KFMM_PRAGMA_UNROLL
    for (int m = -last_row; m <= last_row; ++m) {
      const int sign = swap_column_sign(n, m);
      Real acc = Real(0);
      KFMM_PRAGMA_UNROLL
      for (int j = swap_first_column(n, m); j <= last_column; j += 2) {
        const int k = sign * j;
        const double c = Scaling == SwapScaling::none
                             ? normalised_swap_coefficient(n, m, k)
                             : normalised_swap_coefficient(n, m, k) * swap_scaling<Scaling>(n, m, k);
        acc += static_cast<Real>(c) * an[k];
      }
      tmp[m + n] = acc;
    }
    KFMM_PRAGMA_UNROLL
    for (int m = -last_row; m <= last_row; ++m) an[m] = tmp[m + n];
  }
}

/// In place: a <- O a with O = D A(Q) D^{-1} = B' Dz(theta) B' Dz(-phi) (B' the orthogonal swap),
/// the rotation of NORMALISED coefficients into the frame where the displacement of `g` lies on +z.
/// Multipoles enter as D M, locals as D^{-1} L (both transform with O).
/// ForM2L: only the rows that an M2L's truncated z-translation reads are computed (SwapRange::rows).
template <int P = -1, bool ForM2L = false, class Real>
KOKKOS_INLINE_FUNCTION void rotate_to_z(int order, const RotationAngles<Real>& g, Real* a) {
  rotate_z<P>(order, g.cphi, -g.sphi, a);
  apply_swap<P>(order, a);
  rotate_z<P>(order, g.ctheta, g.stheta, a);
  apply_swap<P, ForM2L ? SwapRange::rows : SwapRange::full>(order, a);
}

/// In place: a <- O^T a = Dz(phi) B' Dz(-theta) B' a, normalised coefficients from the z frame back
/// to the world frame (O is orthogonal, so this is also O^{-1}).
/// ForM2L: a is an M2L's z-translated local, zero where |m| > p - n (SwapRange::columns).
template <int P = -1, bool ForM2L = false, class Real>
KOKKOS_INLINE_FUNCTION void rotate_from_z(int order, const RotationAngles<Real>& g, Real* a) {
  apply_swap<P, ForM2L ? SwapRange::columns : SwapRange::full>(order, a);
  rotate_z<P>(order, g.ctheta, -g.stheta, a);
  apply_swap<P>(order, a);
  rotate_z<P>(order, g.cphi, g.sphi, a);
}

/// In place: a_i <- a_i * D_i (Inverse: a_i / D_i) for the (p+1)^2 coefficients.
template <int P = -1, bool Inverse = false, class Real>
KOKKOS_INLINE_FUNCTION void apply_scale(int order, Real* a) {
  const int p = detail::effective_order<P>(order);
  KFMM_PRAGMA_UNROLL
  for (int n = 0; n <= p; ++n) {
    KFMM_PRAGMA_UNROLL
    for (int m = -n; m <= n; ++m)
      a[coefficient_index(n, m)] *=
          static_cast<Real>(Inverse ? expansion_inverse_scale(n, m) : expansion_scale(n, m));
  }
}

}  // namespace kfmm
