// The reciprocal square roots of kokkos_compat.hpp, evaluated on every backend, against 1/sqrt in
// long double: across the whole normal range of float and double (their contract), and
// rsqrt_or_zero below it.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/kokkos_compat.hpp"

namespace {

template <class Space, class Real>
struct RsqrtKernel {
  using memory_space = typename Space::memory_space;
  Kokkos::View<const Real*, memory_space> x;
  Kokkos::View<Real* [2], memory_space> y;  // rsqrt, rsqrt_or_zero
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    y(i, 0) = kfmm::compat::rsqrt(x(i));
    y(i, 1) = kfmm::compat::rsqrt_or_zero(x(i));
  }
};

// Normal numbers with random mantissas at every binary exponent of Real's normal range (four per
// exponent), the range's ends and the powers of two.
template <class Real>
std::vector<Real> normal_inputs() {
  std::vector<Real> v;
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  const int lo = std::numeric_limits<Real>::min_exponent - 1,
            hi = std::numeric_limits<Real>::max_exponent - 1;
  for (int e = lo; e <= hi; ++e) {
    v.push_back(std::ldexp(Real(1), e));
    for (int k = 0; k < 4; ++k) {
      const Real r = static_cast<Real>(std::ldexp(mantissa(gen), e));
      if (std::isfinite(r)) v.push_back(r);
    }
  }
  v.push_back(std::numeric_limits<Real>::min());
  v.push_back(std::numeric_limits<Real>::max());
  return v;
}

template <class Space, class Real>
std::vector<Real> evaluate(const std::vector<Real>& inputs, int column) {
  using Mem = typename Space::memory_space;
  const int n = static_cast<int>(inputs.size());
  Kokkos::View<Real*, Mem> x("x", n);
  Kokkos::View<Real* [2], Mem> y("y", n);
  auto hx = Kokkos::create_mirror_view(x);
  for (int i = 0; i < n; ++i) hx(i) = inputs[i];
  Kokkos::deep_copy(x, hx);
  Kokkos::parallel_for(Kokkos::RangePolicy<Space>(0, n), RsqrtKernel<Space, Real>{x, y});
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  std::vector<Real> out(n);
  for (int i = 0; i < n; ++i) out[i] = hy(i, column);
  return out;
}

// Largest relative error of rsqrt (column 0) and rsqrt_or_zero (column 1) over normal inputs.
template <class Space, class Real>
double worst_relative_error(int column) {
  const std::vector<Real> x = normal_inputs<Real>();
  const std::vector<Real> y = evaluate<Space, Real>(x, column);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double exact = 1.0L / std::sqrt(static_cast<long double>(x[i]));
    const double err = static_cast<double>(std::fabs((static_cast<long double>(y[i]) - exact) / exact));
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("compat::rsqrt and rsqrt_or_zero match 1/sqrt over the normal range", "[core]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  // double: within 2 ulp on every backend (host 1/sqrt is correctly rounded twice; the GPU refines a
  // 32-bit hardware seed by one second-order step). float: the GPU's approximate instruction,
  // documented to 2^-22.9 relative.
  for (int column = 0; column < 2; ++column) {
    INFO((column == 0 ? "rsqrt" : "rsqrt_or_zero"));
    CHECK(worst_relative_error<Space, double>(column) <= 2 * DBL_EPSILON);
    CHECK(worst_relative_error<Space, float>(column) <= 1.5 * std::ldexp(1.0, -22));
  }
}

TEMPLATE_LIST_TEST_CASE("compat::rsqrt_or_zero is zero below the normal range", "[core]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const std::vector<double> x = {0.0, std::numeric_limits<double>::denorm_min(), 1e-310};
  for (const double z : evaluate<Space, double>(x, 1)) CHECK(z == 0.0);
  const std::vector<float> xf = {0.0f, std::numeric_limits<float>::denorm_min(), 1e-40f};
  for (const float z : evaluate<Space, float>(xf, 1)) CHECK(z == 0.0f);
}
