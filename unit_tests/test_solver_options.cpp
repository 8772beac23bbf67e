// Options validation, the tolerance -> (p, theta) rule and the softening margin.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "kfmm/drivers/options.hpp"
#include "kfmm/drivers/tolerance.hpp"

namespace {

/// Brute force over p <= top and theta in steps of 1e-3 across the calibrated range: no admissible point
/// (calibrated error times the safety factor within `tol`) costs less than `chosen` by `cost(p, theta)`.
template <class Cost>
void check_nothing_admissible_cheaper(double tol, int top, double chosen, const Cost& cost) {
  for (int p = 0; p <= top; ++p) {
    for (int k = 300; k <= 800; ++k) {
      const double th = k / 1000.0;
      if (kfmm::predicted_error(p, th) * kfmm::detail::calibration::safety <= tol)
        CHECK(cost(p, th) >= chosen);
    }
  }
}

std::string error_of(const kfmm::Options& o) {
  try {
    o.validate();
  } catch (const kfmm::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Options validation names the bad field", "[solver][options]") {
  using Catch::Matchers::ContainsSubstring;
  kfmm::Options ok;
  CHECK(error_of(ok).empty());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double t : {0.0, 1.0, -0.5, 1.5, nan, inf}) {
    kfmm::Options o;
    o.theta = t;
    CHECK_THAT(error_of(o), ContainsSubstring("theta") && ContainsSubstring("(0, 1)"));
  }
  for (int p : {-1, 17, 100}) {
    kfmm::Options o;
    o.order = p;
    CHECK_THAT(error_of(o), ContainsSubstring("order") && ContainsSubstring("out of range"));
  }
  for (double tol : {0.0, -1e-6, 1.0, nan}) {
    kfmm::Options o;
    o.tolerance = tol;
    CHECK_THAT(error_of(o), ContainsSubstring("tolerance"));
  }
  kfmm::Options o;
  o.leaf_size = -1;
  CHECK_THAT(error_of(o), ContainsSubstring("leaf_size"));
  o = kfmm::Options();
  o.softening = -1e-3;
  CHECK_THAT(error_of(o), ContainsSubstring("softening"));
  o.softening = inf;
  CHECK_THAT(error_of(o), ContainsSubstring("softening"));
  o = kfmm::Options();
  o.G = nan;
  CHECK_THAT(error_of(o), ContainsSubstring("G"));
  for (double r : {-0.1, 1.5, nan}) {
    o = kfmm::Options();
    o.concentration_ratio = r;
    CHECK_THAT(error_of(o), ContainsSubstring("concentration_ratio") && ContainsSubstring("[0, 1]"));
  }
  o = kfmm::Options();
  o.list_build = static_cast<kfmm::ListBuild>(5);
  CHECK_THAT(error_of(o), ContainsSubstring("list_build = 5"));
  o = kfmm::Options();
  o.order = 16;
  o.theta = 0.999;
  o.G = -2;                   // negative G (repulsive) is allowed
  o.concentration_ratio = 0;  // (the plain MAC)
  CHECK(error_of(o).empty());
  o.concentration_ratio = 1;
  CHECK(error_of(o).empty());
}

TEST_CASE("The tolerance rule meets its own calibration at the lowest cost", "[solver][tolerance]") {
  using namespace kfmm::detail::calibration;
  constexpr int nt = sizeof(thetas) / sizeof(thetas[0]);
  for (double tol = 1e-2; tol >= 1e-10; tol /= std::sqrt(10.0)) {
    INFO("tolerance " << tol);
    const kfmm::ParameterChoice c = kfmm::choose_parameters(tol);
    CHECK(c.order >= 0);
    CHECK(c.order <= kfmm::max_order);
    CHECK(c.theta > 0);
    CHECK(c.theta < 1);
    CHECK(c.leaf_size >= 1);
    CHECK(c.predicted_error * safety <= tol);
    CHECK(c.predicted_error == kfmm::predicted_error(c.order, c.theta));
    // Brute force: nothing admissible is cheaper, neither a measured theta nor one between them.
    const double chosen_cost = kfmm::relative_cost(c.order, c.theta);
    for (int p = 0; p <= kfmm::max_order; ++p) {
      for (int t = 0; t < nt; ++t) {
        if (errors[p][t] * safety <= tol) CHECK(costs[p][t] >= chosen_cost);
      }
    }
    check_nothing_admissible_cheaper(tol, kfmm::max_order, chosen_cost,
                                     [](int p, double th) { return kfmm::relative_cost(p, th); });
  }
  // The interpolation: the table at the measured thetas, between them inside the neighbours' range
  // and increasing wherever the table is.
  for (int p = 0; p <= kfmm::max_order; ++p) {
    for (int t = 0; t < nt; ++t) CHECK(kfmm::predicted_error(p, thetas[t]) == errors[p][t]);
    for (int t = 0; t + 1 < nt; ++t) {
      double last = errors[p][t];
      for (int k = 1; k < 10; ++k) {
        const double th = thetas[t] + k * (thetas[t + 1] - thetas[t]) / 10;
        const double e = kfmm::predicted_error(p, th);
        CHECK(e >= std::min(errors[p][t], errors[p][t + 1]));
        CHECK(e <= std::max(errors[p][t], errors[p][t + 1]));
        if (errors[p][t + 1] > errors[p][t]) CHECK(e >= last);
        last = e;
        const double cost = kfmm::relative_cost(p, th);
        CHECK(cost >= std::min(costs[p][t], costs[p][t + 1]));
        CHECK(cost <= std::max(costs[p][t], costs[p][t + 1]));
      }
    }
  }
  // A tolerance between two measured errors gets a theta between the measured ones (p 9: 1.544e-6 at
  // 0.5, 1.129e-5 at 0.6, so 1e-5 / 3 ~ 3.3e-6 lies between).
  const kfmm::ParameterChoice mid = kfmm::choose_parameters(1e-5, 9);
  CHECK(mid.theta > 0.5);
  CHECK(mid.theta < 0.6);
  CHECK(mid.predicted_error * safety <= 1e-5);
  // Tighter tolerances never predict a larger error.
  double last = 1;
  for (double tol = 1e-2; tol >= 1e-10; tol /= 10) {
    const double e = kfmm::choose_parameters(tol).predicted_error;
    CHECK(e <= last);
    last = e;
  }
}

TEST_CASE("The tolerance rule honours a fixed order or theta or fails loudly", "[solver][tolerance]") {
  using Catch::Matchers::ContainsSubstring;
  // Fixed order: theta chosen for it.
  const auto c = kfmm::choose_parameters(1e-4, 6);
  CHECK(c.order == 6);
  CHECK(c.predicted_error * kfmm::detail::calibration::safety <= 1e-4);
  // Fixed theta: order chosen for it.
  const auto d = kfmm::choose_parameters(1e-6, std::nullopt, 0.5);
  CHECK(d.theta == 0.5);
  CHECK(d.predicted_error * kfmm::detail::calibration::safety <= 1e-6);
  // Both: returned as given.
  const auto e = kfmm::choose_parameters(1e-6, 3, 0.7);
  CHECK(e.order == 3);
  CHECK(e.theta == 0.7);
  // Out-of-range angles are refused on every path, the as-given one included.
  CHECK_THROWS_WITH(kfmm::choose_parameters(1e-6, 3, 1.5),
                    ContainsSubstring("theta = 1.5 must be in (0, 1)"));
  CHECK_THROWS_WITH(kfmm::choose_parameters(1e-6, std::nullopt, 0.0), ContainsSubstring("must be in (0, 1)"));
  CHECK_THROWS_AS(kfmm::choose_parameters(1e-6, 17, 0.5), kfmm::Error);
  // Impossible requests.
  try {
    kfmm::choose_parameters(1e-9, 1);
    FAIL("order 1 cannot reach 1e-9");
  } catch (const kfmm::Error& err) {
    CHECK_THAT(std::string(err.what()), ContainsSubstring("order = 1"));
  }
  try {
    kfmm::choose_parameters(1e-8, std::nullopt, 0.95);
    FAIL("theta 0.95 cannot reach 1e-8");
  } catch (const kfmm::Error& err) {
    CHECK_THAT(std::string(err.what()), ContainsSubstring("theta = 0.95"));
  }
  // Below the floor.
  CHECK_THROWS_AS(kfmm::choose_parameters(1e-7, std::nullopt, std::nullopt, kfmm::precision_floor<float>()),
                  kfmm::Error);
  CHECK(kfmm::precision_floor<float>() > kfmm::precision_floor<double>());
  CHECK(kfmm::precision_floor<double>() <= 1e-10);
}

namespace {
/// The GPU cost search of one precision: what it chooses meets the calibration, and nothing admissible
/// among the GPU table's orders is cheaper by the GPU table (brute force over theta in steps of 1e-3).
template <class Real>
void check_gpu_cost_choices(double floor, int highest) {
  using namespace kfmm::detail::calibration;
  const auto gpu_cost = [](int p, double th) {
    return kfmm::detail::calibrated_row_at(kfmm::detail::cost_row<Real>(p, true), th, false);
  };
  int differs = 0;
  for (double step = 1e-2; step >= floor * 0.999; step /= std::sqrt(10.0)) {
    const double tol = std::max(step, floor);  // (the last step lands a rounding below the floor)
    INFO("tolerance " << tol << ", " << sizeof(Real) << "-byte reals");
    const kfmm::ParameterChoice c =
        kfmm::detail::choose_parameters_by_cost<Real>(true, tol, std::nullopt, std::nullopt, floor, highest);
    CHECK(c.predicted_error * safety <= tol);
    CHECK(c.predicted_error == kfmm::predicted_error(c.order, c.theta));
    const bool reachable = kfmm::predicted_error(highest, 0.3) * safety <= tol;
    CHECK((c.order <= highest) == reachable);
    if (!reachable) continue;
    const double chosen = gpu_cost(c.order, c.theta);
    check_nothing_admissible_cheaper(tol, highest, chosen, gpu_cost);
    // The CPU-cost choice is admissible too, so by the GPU's measured costs it is never cheaper.
    const kfmm::ParameterChoice h =
        kfmm::detail::choose_parameters_by_cost<Real>(false, tol, std::nullopt, std::nullopt, floor, highest);
    CHECK(gpu_cost(h.order, h.theta) >= chosen);
    differs += h.order != c.order || h.theta != c.theta;
  }
  // (The two cost models disagree somewhere: otherwise the GPU table would not be needed.)
  CHECK(differs > 0);
}
/// choose_parameters<Space, Real> and relative_cost<Space, Real> are the cost search with Space's table
/// (the GPU's on GPU backends) and Space's leaf size.
template <class Space, class Real>
void check_public_choice() {
  const bool gpu = !kfmm::detail::is_host_execution_space<Space>;
  const int top = sizeof(Real) <= 4 ? 8 : kfmm::detail::max_static_order;
  const double floor = kfmm::precision_floor<Real>();
  for (const double tol : {1e-3, 1e-4, 1e-5, 1e-7}) {
    if (tol < floor) continue;
    INFO("tolerance " << tol << ", " << sizeof(Real) << "-byte reals, gpu " << gpu);
    const auto chosen = kfmm::choose_parameters<Space, Real>(tol, std::nullopt, std::nullopt, floor, top);
    const auto search =
        kfmm::detail::choose_parameters_by_cost<Real>(gpu, tol, std::nullopt, std::nullopt, floor, top);
    CHECK(chosen.order == search.order);
    CHECK(chosen.theta == search.theta);
    CHECK(chosen.leaf_size == kfmm::default_leaf_size<Space>(chosen.order));
  }
  CHECK(kfmm::relative_cost<Space, Real>(7, 0.65) ==
        kfmm::detail::calibrated_row_at(kfmm::detail::cost_row<Real>(7, gpu), 0.65, false));
}
}  // namespace

TEST_CASE("On GPU backends the tolerance rule compares the GPU's measured costs", "[solver][tolerance]") {
  using namespace kfmm::detail::calibration;
  // The GPU table holds every order the rule searches on GPUs: up to 8 in float, up to the GPU's highest
  // compile-time M2L order (10) in double; every entry a positive time.
  constexpr int float_rows = sizeof(gpu_costs_float) / sizeof(gpu_costs_float[0]);
  constexpr int double_rows = sizeof(gpu_costs_double) / sizeof(gpu_costs_double[0]);
  static_assert(float_rows == 9, "the float GPU costs cover p 0..8 (highest_automatic_order<float>)");
  static_assert(double_rows == kfmm::detail::max_static_order + 1, "the double GPU costs cover p 0..10");
  for (int p = 0; p < double_rows; ++p) {
    for (int t = 0; t < static_cast<int>(sizeof(thetas) / sizeof(thetas[0])); ++t) {
      CHECK(gpu_costs_double[p][t] > 0);
      if (p < float_rows) CHECK(gpu_costs_float[p][t] > 0);
    }
  }
  // Beyond the table (orders above 10: searched only when none up to 10 meets the tolerance) and on host
  // backends: the CPU calibration's row.
  CHECK(kfmm::detail::cost_row<double>(11, true) == costs[11]);
  CHECK(kfmm::detail::cost_row<float>(9, true) == costs[9]);
  CHECK(kfmm::detail::cost_row<double>(5, false) == costs[5]);
  CHECK(kfmm::detail::cost_row<float>(5, true) == gpu_costs_float[5]);
  CHECK(kfmm::detail::cost_row<double>(5, true) == gpu_costs_double[5]);
  check_gpu_cost_choices<float>(kfmm::precision_floor<float>(), 8);
  check_gpu_cost_choices<double>(kfmm::precision_floor<double>(), kfmm::detail::max_static_order);
  // The public functions pick the table by the execution space: host spaces keep the CPU calibration.
  check_public_choice<Kokkos::DefaultHostExecutionSpace, double>();
  check_public_choice<Kokkos::DefaultExecutionSpace, double>();
  check_public_choice<Kokkos::DefaultExecutionSpace, float>();
}

TEST_CASE("The tolerance rule keeps to the backend's compile-time orders while they can meet it",
          "[solver][tolerance]") {
  // Host backends compile the M2L up to p 16 in double, GPUs up to 10; float stops at 8 everywhere.
  CHECK(kfmm::highest_automatic_order<double, Kokkos::DefaultHostExecutionSpace>() ==
        kfmm::detail::max_host_double_static_order);
  CHECK(kfmm::highest_automatic_order<float, Kokkos::DefaultHostExecutionSpace>() == 8);
  CHECK(kfmm::highest_automatic_order<float, Kokkos::DefaultExecutionSpace>() == 8);
  // Float's whole range of tolerances stays within p 8.
  for (const double tol : {1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, kfmm::precision_floor<float>()}) {
    INFO("float tolerance " << tol);
    const auto c =
        kfmm::choose_parameters(tol, std::nullopt, std::nullopt, kfmm::precision_floor<float>(), 8);
    CHECK(c.order <= 8);
    CHECK(c.predicted_error * kfmm::detail::calibration::safety <= tol);
  }
  const double floor = kfmm::precision_floor<double>();
  for (const double tol : {1e-3, 1e-5, 1e-7, 1e-8, 1e-9, 1e-10}) {
    INFO("tolerance " << tol);
    const auto capped = kfmm::choose_parameters(tol, std::nullopt, std::nullopt, floor, 10);
    const auto open = kfmm::choose_parameters(tol, std::nullopt, std::nullopt, floor, kfmm::max_order);
    CHECK(capped.predicted_error * kfmm::detail::calibration::safety <= tol);
    CHECK(kfmm::relative_cost(open.order, open.theta) <=
          kfmm::relative_cost(capped.order, capped.theta) * (1 + 1e-12));
    // Within the cap whenever some order up to it meets the tolerance (the calibrated best error of
    // p 10 is at theta 0.3), above it only when none does.
    const bool reachable = kfmm::predicted_error(10, 0.3) * kfmm::detail::calibration::safety <= tol;
    CHECK((capped.order <= 10) == reachable);
  }
  CHECK(kfmm::choose_parameters(1e-10, std::nullopt, std::nullopt, floor, 10).order > 10);  // (not refused)
}

TEST_CASE("The softening margin bounds the softened-unsoftened kernel difference", "[solver][tolerance]") {
  CHECK(kfmm::softening_min_separation(0.0, 1e-6) == 0.0);
  for (double eps : {1e-4, 1e-2, 0.3}) {
    for (double tol : {1e-2, 1e-6, 1e-10}) {
      const double fraction = 0.5;
      const double r = kfmm::softening_min_separation(eps, tol, fraction);
      REQUIRE(r > 0);
      // Exact relative differences of acceleration and potential at and beyond the margin.
      for (double x : {r, 1.5 * r, 10 * r}) {
        const double acc = -std::expm1(-1.5 * std::log1p(eps * eps / (x * x)));
        const double pot = -std::expm1(-0.5 * std::log1p(eps * eps / (x * x)));
        CHECK(acc <= fraction * tol * (1 + 1e-9));
        CHECK(pot <= fraction * tol);
      }
      // And not wastefully large: at 0.9 r the bound is exceeded by the first-order estimate.
      const double x = 0.9 * r;
      CHECK(1.5 * eps * eps / (x * x) > fraction * tol);
    }
  }
}

TEST_CASE("Default leaf sizes: the calibration's on host backends, the H200's on GPUs",
          "[solver][tolerance]") {
  using Host = Kokkos::DefaultHostExecutionSpace;
  using Device = Kokkos::DefaultExecutionSpace;
  for (int p = 0; p <= kfmm::max_order; ++p) {
    INFO("order " << p);
    const int calibrated = kfmm::detail::calibration::leaf_size_for_order[p];
    CHECK(kfmm::default_leaf_size<Host>(p) == calibrated);
    const int expected = kfmm::detail::is_host_execution_space<Device> ? calibrated
                         : p <= 10                                     ? 80
                                                                       : calibrated;
    CHECK(kfmm::default_leaf_size<Device>(p) == expected);
    // The tolerance rule hands out the backend's leaf size with the order it chose.
    const auto c = kfmm::choose_parameters<Device>(1e-4, p, 0.3);
    CHECK(c.leaf_size == expected);
    // On GPUs float takes 88 from 1e6 particles on and 96 from 5e6 (orders up to 10); double and host
    // backends keep the size for an unknown N whatever N.
    for (const long long n : {0LL, 200000LL, 999999LL, 1000000LL, 4999999LL, 5000000LL, 10000000LL}) {
      INFO("particles " << n);
      const bool float_gpu = !kfmm::detail::is_host_execution_space<Device> && p <= 10;
      const int float_expected = !float_gpu ? expected : n >= 5000000 ? 96 : n >= 1000000 ? 88 : expected;
      CHECK(kfmm::default_leaf_size<Device, float>(p, n) == float_expected);
      CHECK(kfmm::default_leaf_size<Device, double>(p, n) == expected);
      CHECK(kfmm::default_leaf_size<Host, float>(p, n) == calibrated);
    }
  }
  CHECK_THROWS_AS(kfmm::default_leaf_size<Host>(kfmm::max_order + 1), kfmm::Error);
  CHECK_THROWS_AS(kfmm::default_leaf_size<Host>(4, -1), kfmm::Error);
}

TEST_CASE("The GPU's default leaf sizes, checked on any machine", "[solver][tolerance]") {
  using kfmm::detail::default_leaf_size_for;
  // Up to order 10: 80, and in float 88 from 1e6 particles and 96 from 5e6 (N = 0: unknown, small).
  const std::pair<long long, int> float_sizes[] = {
      {0, 80}, {1, 80}, {999999, 80}, {1000000, 88}, {4999999, 88}, {5000000, 96}, {100000000, 96}};
  for (int p = 0; p <= kfmm::max_order; ++p) {
    INFO("order " << p);
    const int calibrated = kfmm::detail::calibration::leaf_size_for_order[p];
    for (const auto& [n, size] : float_sizes) {
      INFO("particles " << n);
      CHECK(default_leaf_size_for<float>(true, p, n) == (p <= 10 ? size : calibrated));
      CHECK(default_leaf_size_for<double>(true, p, n) == (p <= 10 ? 80 : calibrated));
      CHECK(default_leaf_size_for<float>(false, p, n) == calibrated);
      CHECK(default_leaf_size_for<double>(false, p, n) == calibrated);
    }
  }
  CHECK_THROWS_AS(default_leaf_size_for<float>(true, kfmm::max_order + 1, 0), kfmm::Error);
  CHECK_THROWS_AS(default_leaf_size_for<float>(true, 4, -1), kfmm::Error);
}
