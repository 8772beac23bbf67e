/// \file tolerance.hpp
/// Accuracy control: from a requested relative L2 error of the accelerations to the expansion order p,
/// the opening angle theta and the leaf size, by a table measured with the finished solver against the
/// direct sum (the command that regenerates it is in docs/usage.md, "Calibration"), with the costs
/// measured on a GPU for GPU backends, and the softening margin that keeps the unsoftened far field
/// within the tolerance of the softened kernel.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/drivers/calibration_gpu_costs.hpp"
#include "kfmm/drivers/calibration_table.hpp"
#include "kfmm/operators/static_order.hpp"

namespace kfmm {

/// Smallest tolerance a solver in precision Real accepts: below it rounding, not truncation,
/// dominates the error and no (p, theta) can meet the request.
template <class Real>
constexpr double precision_floor() {
  return sizeof(Real) <= 4 ? detail::calibration::float_floor : detail::calibration::double_floor;
}

/// Highest order the tolerance rule picks in precision Real on ExecutionSpace: the M2L's highest
/// compile-time order there (operators' static_order.hpp: 16 for double on host backends, 10 on GPUs,
/// where higher orders run the runtime-order kernel with its local in scratch memory and the calibrated
/// CPU costs would not hold). In float 8: float's floor (1e-5) is within reach of p 8, the calibrated
/// costs of p 8 and p 9 differ by 0.5-3 % at every float tolerance, and the expansions' range separation
/// (expansion_range_separation below) grows with p: at p 9 it is 2.7x that of p 8 and sends the
/// densest node pairs of large clustered inputs to the near field (on one H200, 1e7 Plummer at 1e-4:
/// p 9 69.1 ms, p 8 56.4 ms; docs/benchmarks.md, "Seventeenth session"). An explicit Options::order
/// above this is still honoured.
template <class Real, class ExecutionSpace = Kokkos::DefaultHostExecutionSpace>
constexpr int highest_automatic_order() {
  return sizeof(Real) <= 4 ? 8 : detail::max_static_order_for<ExecutionSpace, Real>;
}

/// Parameters chosen for an evaluation.
struct ParameterChoice {
  int order = 0;               ///< expansion order p
  double theta = 0;            ///< opening angle
  int leaf_size = 0;           ///< maximum particles per leaf
  double predicted_error = 0;  ///< calibrated worst-case relative L2 error of the accelerations
};

namespace detail {
/// default_leaf_size for a GPU (`gpu`) or a host backend in precision Real, the rule itself: callable on
/// any machine, so that the tests check the GPU's sizes where no GPU is. The GPU sizes hold for the
/// orders with a compile-time GPU M2L (up to max_static_order, 10); above it the calibration's.
template <class Real>
int default_leaf_size_for(bool gpu, int order, long long particles) {
  check_order(order);
  require(particles >= 0, "default_leaf_size: particles = ", particles, " must be >= 0 (0: unknown)");
  if (gpu && order <= max_static_order) {
    if (sizeof(Real) <= 4 && particles >= 5000000) return 96;
    if (sizeof(Real) <= 4 && particles >= 1000000) return 88;
    return 80;
  }
  return calibration::leaf_size_for_order[order];
}
}  // namespace detail

/// Leaf size that balances near and far work for an expansion order on ExecutionSpace, used when
/// Options::leaf_size is 0. Host backends: the calibration's (the fastest at theta = 0.5 on one CPU
/// core). GPUs: 80 up to p 10, the H200's fastest or within 3 % of it at the tolerance rule's thetas
/// (1e6 Plummer in fp32 at p 4-9 and in fp64 at p 9-10, leaves 48-160; 2e5 and 1e7 at p 8 in fp32;
/// docs/benchmarks.md, "Nineteenth session"; 64 up to p 8 before the P2P's team followed the leaf
/// size, which made larger leaves cheaper), where the CPU's 128 cost up to 13 %; in float 88 from
/// `particles` >= 1e6 and 96 from 5e6 on (the tolerance rule's p 8, theta 0.629 on Plummer, one H200,
/// leaves 48-160, two runs: 88 is the fastest at 1e6 (1.3 % faster than 96), 2e6 and 3e6, 96 equals it
/// at 5e6 and is 0.9 % faster than 80 at 1e7 with 12 % less memory, and 80 is within 0.5 % of the
/// fastest (72) at 2e5; docs/benchmarks.md, "Thirty-seventh session"); above p 10 (the GPU's runtime-order
/// M2L) the calibration's. `particles` = 0: not known (the size for small N).
template <class ExecutionSpace = Kokkos::DefaultHostExecutionSpace, class Real = double>
int default_leaf_size(int order, long long particles = 0) {
  return detail::default_leaf_size_for<Real>(!detail::is_host_execution_space<ExecutionSpace>, order,
                                             particles);
}

namespace detail {
/// y at x on the straight line through (x0, y0) and (x1, y1) in log-log coordinates (a power law through
/// both points); y0 at x0 and y1 at x1 exactly.
inline double loglog_interpolate(double x0, double y0, double x1, double y1, double x) {
  if (x <= x0) return y0;
  if (x >= x1) return y1;
  return y0 * std::pow(y1 / y0, std::log(x / x0) / std::log(x1 / x0));
}

/// A calibrated row (errors or costs of one order) at theta: between measured thetas on the power law
/// through its neighbours, where `increasing` rows (errors) also never go below the larger of the two
/// when the row dips (a non-monotone step is taken at its worse end); below the smallest theta the
/// first entry.
inline double calibrated_row_at(const double* row, double theta, bool increasing) {
  using calibration::thetas;
  constexpr int nt = sizeof(thetas) / sizeof(thetas[0]);
  if (theta <= thetas[0] * (1 + 1e-12)) return row[0];
  for (int t = 0; t + 1 < nt; ++t) {
    if (theta <= thetas[t + 1] * (1 + 1e-12)) {
      if (theta >= thetas[t + 1] * (1 - 1e-12)) return row[t + 1];
      if (increasing && !(row[t + 1] > row[t])) return std::max(row[t], row[t + 1]);
      return loglog_interpolate(thetas[t], row[t], thetas[t + 1], row[t + 1], theta);
    }
  }
  return row[nt - 1];
}
}  // namespace detail

/// Worst-case relative L2 acceleration error the calibration predicts for order p and opening angle
/// theta. At the measured thetas the table's value; between them the power law in theta through the
/// two neighbours (the truncation error of order p behaves as theta^(p+1), a straight line in log-log;
/// the safety factor of choose_parameters covers the curvature between the points); below the smallest
/// measured theta that theta's value (conservative); beyond the largest it extrapolates with the
/// truncation rate theta^(p+1).
inline double predicted_error(int order, double theta) {
  check_order(order);
  using namespace detail::calibration;
  constexpr int nt = sizeof(thetas) / sizeof(thetas[0]);
  if (theta > thetas[nt - 1] * (1 + 1e-12))
    return errors[order][nt - 1] * std::pow(theta / thetas[nt - 1], order + 1);
  return detail::calibrated_row_at(errors[order], theta, true);
}

namespace detail {
/// The cost row of order p that the tolerance rule compares: on GPU backends the milliseconds measured
/// on one H200 (calibration_gpu_costs.hpp: 1e6 Plummer in Real's precision) for the orders that table
/// holds (up to highest_automatic_order, 8 in float and 10 in double); otherwise, and on host backends,
/// the CPU calibration's modelled seconds. (The rule compares costs of one order row or of orders within
/// one table: orders above the GPU table's are searched only when none of its orders meets the
/// tolerance, choose_parameters.)
template <class Real>
const double* cost_row(int order, bool gpu) {
  static_assert(sizeof(calibration::gpu_costs_float[0]) == sizeof(calibration::thetas) &&
                    sizeof(calibration::gpu_costs_double[0]) == sizeof(calibration::thetas),
                "a GPU cost row holds one time per calibrated theta (regenerate calibration_gpu_costs.hpp)");
  if (gpu) {
    if constexpr (sizeof(Real) <= 4) {
      constexpr int rows = sizeof(calibration::gpu_costs_float) / sizeof(calibration::gpu_costs_float[0]);
      if (order < rows) return calibration::gpu_costs_float[order];
    } else {
      constexpr int rows = sizeof(calibration::gpu_costs_double) / sizeof(calibration::gpu_costs_double[0]);
      if (order < rows) return calibration::gpu_costs_double[order];
    }
  }
  return calibration::costs[order];
}
}  // namespace detail

/// Calibrated cost of order p at opening angle theta on ExecutionSpace in precision Real (units
/// comparable across the entries of one backend kind and precision: detail::cost_row): between
/// measured thetas the power law through the two neighbours, outside them the nearest entry.
template <class ExecutionSpace = Kokkos::DefaultHostExecutionSpace, class Real = double>
double relative_cost(int order, double theta) {
  check_order(order);
  return detail::calibrated_row_at(
      detail::cost_row<Real>(order, !detail::is_host_execution_space<ExecutionSpace>), theta, false);
}

namespace detail {
/// choose_parameters with the GPU's costs (gpu_costs) or the CPU calibration's (cost_row), leaf size
/// left 0: the search itself, callable for either kind of backend (the tests check both on any machine).
template <class Real>
ParameterChoice choose_parameters_by_cost(bool gpu_costs, double tolerance, std::optional<int> order,
                                          std::optional<double> theta, double floor, int highest_order) {
  using namespace detail::calibration;
  const auto cost = [&](int p, double th) {
    return calibrated_row_at(cost_row<Real>(p, gpu_costs), th, false);
  };
  constexpr int nt = sizeof(thetas) / sizeof(thetas[0]);
  ParameterChoice best;
  if (theta) require(*theta > 0 && *theta < 1, "choose_parameters: theta = ", *theta, " must be in (0, 1)");
  if (order && theta) {
    best.order = *order;
    best.theta = *theta;
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
    if (!order && p > highest_order) break;  // (tried again below when nothing up to it qualifies)
    if (theta) {
      const double e = predicted_error(p, *theta);
      const double c = cost(p, *theta);
      if (e <= budget && (best_cost < 0 || c < best_cost)) {
        best = {p, *theta, 0, e};
        best_cost = c;
      }
      continue;
    }
    // Candidates: the measured thetas, and in a step where the error crosses the budget the largest
    // theta the interpolated error admits (rounded down to 1e-3), i.e. the cheapest one of that step.
    const auto consider = [&](double th) {
      const double e = predicted_error(p, th);
      const double c = cost(p, th);
      if (e <= budget && (best_cost < 0 || c < best_cost)) {
        best = {p, th, 0, e};
        best_cost = c;
      }
    };
    for (int t = 0; t < nt; ++t) {
      consider(thetas[t]);
      if (t + 1 < nt && errors[p][t] <= budget && errors[p][t + 1] > budget) {
        // Inverse of the power law through (thetas[t], errors[p][t]) and (thetas[t+1], errors[p][t+1]).
        const double slope = std::log(errors[p][t + 1] / errors[p][t]) / std::log(thetas[t + 1] / thetas[t]);
        double th = std::floor(thetas[t] * std::pow(budget / errors[p][t], 1 / slope) * 1000) / 1000;
        while (th > thetas[t] && predicted_error(p, th) > budget) th -= 1e-3;  // (rounding at the edge)
        if (th > thetas[t]) consider(th);
      }
    }
  }
  if (best_cost < 0 && !order && highest_order < max_order) {
    return choose_parameters_by_cost<Real>(gpu_costs, tolerance, order, theta, floor, max_order);
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
}  // namespace detail

/// Chooses order, theta and leaf size for a requested relative L2 error of the accelerations.
/// With neither `order` nor `theta` given: the cheapest (p, theta) whose calibrated worst-case error
/// (predicted_error: measured at theta = 0.3, 0.4, ..., 0.8, interpolated between) times a safety factor
/// is within `tolerance`, the cost being ExecutionSpace's for precision Real (relative_cost: on GPU
/// backends measured on one H200, on host backends the CPU calibration's); theta is continuous (a
/// multiple of 1e-3), not only a measured one. With one of them given, the other is chosen. With both given
/// they are returned as they are (with their predicted error). Orders above `highest_order` are used when
/// `order` asks for them, or when no order up to it can meet the tolerance (then the cheapest order up to
/// max_order that can; a GPU asked for 1e-9 in double still gets an answer, from its runtime-order kernels).
/// Throws kfmm::Error when the request cannot be met (tolerance below `floor`, or a fixed order or theta that
/// cannot reach it). The leaf size is default_leaf_size<ExecutionSpace>'s for the chosen order, N unknown
/// (kfmm::Solver takes the size for its N, default_leaf_size<ExecutionSpace, Real>, at each evaluation).
template <class ExecutionSpace = Kokkos::DefaultHostExecutionSpace, class Real = double>
ParameterChoice choose_parameters(double tolerance, std::optional<int> order = {},
                                  std::optional<double> theta = {},
                                  double floor = detail::calibration::double_floor,
                                  int highest_order = max_order) {
  ParameterChoice c = detail::choose_parameters_by_cost<Real>(
      !detail::is_host_execution_space<ExecutionSpace>, tolerance, order, theta, floor, highest_order);
  c.leaf_size = default_leaf_size<ExecutionSpace>(c.order);
  return c;
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

/// Smallest node distance, in the lengths the expansions are built in (the solver's scaled ones), at
/// which order-p expansions in Real stay inside Real's range. A local coefficient of a pair at distance
/// d reaches |m| p! / d^(p+1) (docs/operators.md, "Range limits"); with sum |m| = `abs_mass` (rounded up
/// to a power of two, so that every backend gets the same bits) and a margin of 2^10 for the sums over
/// pairs and the rotations, d >= (abs_mass p! 2^10 / max(Real))^(1/(p+1)). The walk sends closer node
/// pairs to the near field. Float, abs_mass 1: 1.1e-4 at p 7, 1.1e-3 at p 9, 9.1e-3 at p 12 (so tight
/// clusters are summed directly instead of overflowing to inf and NaN); double: below 1e-17 at every
/// order, i.e. never binding.
template <class Real>
double expansion_range_separation(int order, double abs_mass) {
  check_order(order);
  if (!(abs_mass > 0)) return 0;
  int e = 0;
  std::frexp(abs_mass, &e);  // abs_mass <= 2^e
  const double log_bound = e * std::log(2.0) + std::lgamma(order + 1.0) + 10 * std::log(2.0) -
                           std::log(static_cast<double>(std::numeric_limits<Real>::max()));
  return std::exp(log_bound / (order + 1));
}

}  // namespace kfmm
