/// \file tolerance.hpp
/// Accuracy control: from a requested relative L2 error of the accelerations to the expansion order p,
/// the opening angle theta and the leaf size, by a table measured with the finished solver against the
/// direct sum (the command that regenerates it is in docs/usage.md, "Calibration"), and the softening
/// margin that keeps the unsoftened far field within the tolerance of the softened kernel.
#pragma once

#include <cmath>
#include <optional>

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/drivers/calibration_table.hpp"

namespace kfmm {

/// Smallest tolerance a solver in precision Real accepts: below it rounding, not truncation,
/// dominates the error and no (p, theta) can meet the request.
template <class Real>
constexpr double precision_floor() {
  return sizeof(Real) <= 4 ? detail::calibration::float_floor : detail::calibration::double_floor;
}

/// Highest order the tolerance rule picks in precision Real. In float the unscaled solid harmonics of
/// degree 2p+1 overflow between strongly clustered nodes beyond p ~ 11, and float's floor never needs
/// more than p ~ 8; an explicit Options::order above this is still honoured.
template <class Real>
constexpr int highest_automatic_order() {
  return sizeof(Real) <= 4 ? 10 : max_order;
}

/// Parameters chosen for an evaluation.
struct ParameterChoice {
  int order = 0;               ///< expansion order p
  double theta = 0;            ///< opening angle
  int leaf_size = 0;           ///< maximum particles per leaf
  double predicted_error = 0;  ///< calibrated worst-case relative L2 error of the accelerations
};

/// Leaf size that balances near and far work for an expansion order (measured with the calibration).
inline int default_leaf_size(int order) {
  check_order(order);
  return detail::calibration::leaf_size_for_order[order];
}

/// Worst-case relative L2 acceleration error the calibration predicts for order p and opening angle
/// theta. Between measured thetas it takes the next larger measured theta (conservative); beyond the
/// largest it extrapolates with the truncation rate theta^(p+1).
inline double predicted_error(int order, double theta) {
  check_order(order);
  using namespace detail::calibration;
  constexpr int nt = sizeof(thetas) / sizeof(thetas[0]);
  for (int t = 0; t < nt; ++t) {
    if (theta <= thetas[t] * (1 + 1e-12)) return errors[order][t];
  }
  return errors[order][nt - 1] * std::pow(theta / thetas[nt - 1], order + 1);
}

/// Calibrated cost (arbitrary units, comparable across entries) of order p at opening angle theta, at
/// the next larger measured theta.
inline double relative_cost(int order, double theta) {
  check_order(order);
  using namespace detail::calibration;
  constexpr int nt = sizeof(thetas) / sizeof(thetas[0]);
  for (int t = 0; t < nt; ++t) {
    if (theta <= thetas[t] * (1 + 1e-12)) return costs[order][t];
  }
  return costs[order][nt - 1];
}

/// Chooses order, theta and leaf size for a requested relative L2 error of the accelerations.
/// With neither `order` nor `theta` given: the cheapest calibrated pair whose worst measured error
/// times a safety factor is within `tolerance`. With one of them given, the other is chosen.
/// With both given they are returned as they are (with their predicted error). Orders above
/// `highest_order` are only used when `order` asks for them.
/// Throws kfmm::Error when the request cannot be met (tolerance below `floor`, or a fixed order or
/// theta that cannot reach it).
inline ParameterChoice choose_parameters(double tolerance, std::optional<int> order = {},
                                         std::optional<double> theta = {},
                                         double floor = detail::calibration::double_floor,
                                         int highest_order = max_order) {
  using namespace detail::calibration;
  constexpr int nt = sizeof(thetas) / sizeof(thetas[0]);
  ParameterChoice best;
  if (order && theta) {
    best.order = *order;
    best.theta = *theta;
    best.leaf_size = default_leaf_size(*order);
    best.predicted_error = predicted_error(*order, *theta);
    return best;
  }
  require(std::isfinite(tolerance) && tolerance > 0, "tolerance = ", tolerance, " must be positive");
  require(tolerance >= floor, "tolerance = ", tolerance, " is below the precision floor ", floor,
          " of this precision (use double, or a larger tolerance)");
  const double budget = tolerance / safety;
  double best_cost = -1;
  for (int p = 0; p <= max_order; ++p) {
    if (order && p != *order) continue;
    if (!order && p > highest_order) continue;
    if (theta) {
      const double e = predicted_error(p, *theta);
      const double c = relative_cost(p, *theta);
      if (e <= budget && (best_cost < 0 || c < best_cost)) {
        best = {p, *theta, default_leaf_size(p), e};
        best_cost = c;
      }
      continue;
    }
    for (int t = 0; t < nt; ++t) {
      const double e = errors[p][t];
      const double c = costs[p][t];
      if (e <= budget && (best_cost < 0 || c < best_cost)) {
        best = {p, thetas[t], default_leaf_size(p), e};
        best_cost = c;
      }
    }
  }
  if (best_cost < 0) {
    if (order) {
      require(false, "order = ", *order, " cannot reach tolerance = ", tolerance,
              " at any calibrated theta; raise the order or leave it to the solver");
    }
    if (theta) {
      require(false, "theta = ", *theta, " cannot reach tolerance = ", tolerance, " at any order up to ",
              max_order, "; lower theta or leave it to the solver");
    }
    require(false, "tolerance = ", tolerance, " is below what the calibrated parameters reach (",
            errors[max_order][0] * safety, ")");
  }
  return best;
}

/// Smallest particle distance at which the unsoftened far field is within `fraction * tolerance` of
/// the Plummer-softened kernel, pair by pair: 1 - (1 + eps^2/r^2)^(-3/2) <= 3 eps^2 / (2 r^2) for the
/// acceleration (eps^2 / (2 r^2) for the potential), so r >= eps * sqrt(3 / (2 fraction tolerance)).
/// The walk sends node pairs whose particles can be closer than this to the near field. 0 without
/// softening.
inline double softening_min_separation(double softening, double tolerance, double fraction = 0.5) {
  if (!(softening > 0)) return 0;
  require(tolerance > 0 && fraction > 0, "softening_min_separation: tolerance and fraction must be positive");
  return softening * std::sqrt(1.5 / (fraction * tolerance));
}

}  // namespace kfmm
