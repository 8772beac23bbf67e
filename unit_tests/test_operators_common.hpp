// Shared helpers of the operator tests (unit_tests/test_operators_*.cpp): random multipoles from
// particles in long double, and the per-degree error norm the accuracy checks use.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/solid_harmonics.hpp"

namespace kfmm_test::ops {

/// Multipole (order p, about the origin) of `count` particles uniform in the ball of `radius`, with
/// masses in [-1, 1] (negative masses are allowed by kfmm) or, if `positive`, in [0.1, 1],
/// computed in long double.
inline std::vector<long double> random_multipole(int order, int count, double radius, std::mt19937& rng,
                                                 bool positive = false) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int nc = kfmm::num_coefficients(order);
  std::vector<long double> M(nc, 0.0L), R(nc);
  for (int j = 0; j < count; ++j) {
    double x, y, z;
    do {
      x = u(rng), y = u(rng), z = u(rng);
    } while (x * x + y * y + z * z > 1.0);
    kfmm::regular_harmonics<long double>(order, radius * x, radius * y, radius * z, R.data());
    const long double q = positive ? 0.55 + 0.45 * u(rng) : u(rng);
    for (int i = 0; i < nc; ++i) M[i] += q * R[i];
  }
  return M;
}

/// Weight of coefficient (n, m) in the rotation-invariant norm: D_n^m for multipole-like vectors
/// (regular harmonics, multipoles: D M is the orthonormal form), 1 / D_n^m for local-like vectors
/// (irregular harmonics, locals: D^{-1} L), D of rotation.hpp.
inline long double invariant_weight(int n, int m, bool multipole) {
  return multipole ? kfmm::expansion_scale(n, m) : kfmm::expansion_inverse_scale(n, m);
}

/// Largest over degrees n of ||e_n|| / ||ref_n||, e = got - ref, in the rotation-invariant norm of
/// the normalised coefficients (invariant_weight): the L2 norm over the unit sphere of the degree-n
/// part of the field. (The raw per-coefficient norm is not rotation invariant: Dehnen's normalisation
/// spreads the components of one degree over ~4 orders of magnitude at n = 16, and any
/// rotation-based operator mixes them.) For vectors whose degrees are all of comparable size; a
/// degree that (nearly) vanishes, like the dipole about a centre of mass, needs weighted_error.
template <class Real>
double degree_errors(int order, const Real* got, const long double* ref, bool multipole = false) {
  std::vector<long double> num(order + 1, 0.0L), den(order + 1, 0.0L);
  for (int n = 0; n <= order; ++n) {
    for (int m = -n; m <= n; ++m) {
      const int i = kfmm::coefficient_index(n, m);
      const long double w = invariant_weight(n, m, multipole);
      const long double e = (static_cast<long double>(got[i]) - ref[i]) * w;
      num[n] += e * e;
      den[n] += ref[i] * w * ref[i] * w;
    }
  }
  const long double top = *std::max_element(den.begin(), den.end());
  double worst = 0.0;
  for (int n = 0; n <= order; ++n) {
    const long double d = std::max(den[n], top * 1e-60L);
    if (d > 0) worst = std::max(worst, static_cast<double>(std::sqrt(num[n] / d)));
  }
  return worst;
}

/// ||e|| / ||ref|| over all degrees at once, degree n weighted by rho^n on top of invariant_weight:
/// for a multipole, rho = (source radius) / (evaluation distance); for a local, rho = (evaluation
/// radius) / 1 (the size of the degree-n term of the field at that distance).
template <class Real>
double weighted_error(int order, const Real* got, const long double* ref, bool multipole, double rho) {
  long double num = 0.0L, den = 0.0L, scale = 1.0L;
  for (int n = 0; n <= order; ++n, scale *= rho) {
    for (int m = -n; m <= n; ++m) {
      const int i = kfmm::coefficient_index(n, m);
      const long double w = invariant_weight(n, m, multipole) * scale;
      const long double e = (static_cast<long double>(got[i]) - ref[i]) * w;
      num += e * e;
      den += ref[i] * w * ref[i] * w;
    }
  }
  return den > 0 ? static_cast<double>(std::sqrt(num / den)) : static_cast<double>(std::sqrt(num));
}

}  // namespace kfmm_test::ops
