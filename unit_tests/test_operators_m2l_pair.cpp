// M2L building blocks (operators/kfmm/operators/m2l_pair.hpp): the O(p^3) rotation M2L against the
// naive O(p^4) translation theorem evaluated in long double on the host, both run inside kernels on
// every backend, for p = 1..16, float and double, and displacements on and near the z axis.
#if defined(__NVCC__)
// The long double references of these tests instantiate kfmm's host-device templates with long double,
// which nvcc also compiles (unused) for the device, warning that it is double there.
#pragma nv_diag_suppress 20208
#endif
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends.hpp"
#include "kfmm/operators/m2l_csr_lanes.hpp"
#include "kfmm/operators/m2l_pair.hpp"
#include "test_operators_common.hpp"

namespace {

using kfmm_test::ops::degree_errors;
using kfmm_test::ops::random_multipole;

/// Displacements (target centre - source centre) of length about 1.7 covering the special
/// directions: +z, -z, near +z/-z (rho/r = 1e-6, 1e-12, 1e-300 below the fp32 range), the axes,
/// and random directions.
std::vector<std::array<double, 3>> test_displacements(std::mt19937& rng, int random_count) {
  const double r = 1.7;
  std::vector<std::array<double, 3>> d = {{0, 0, r},          {0, 0, -r},        {1e-6 * r, 0, r},
                                          {0, -1e-6 * r, -r}, {1e-12, 1e-12, r}, {-1e-12, 0, -r},
                                          {1e-300, 0, r},     {r, 0, 0},         {0, r, 0},
                                          {-r, 0, 0},         {0, -r, 0},        {r / 2, -r / 2, r / 2}};
  std::normal_distribution<double> g(0.0, 1.0);
  for (int i = 0; i < random_count; ++i) {
    double x = g(rng), y = g(rng), z = g(rng);
    const double s = r / std::sqrt(x * x + y * y + z * z);
    d.push_back({x * s, y * s, z * s});
  }
  return d;
}

template <class ExecutionSpace, class Real>
void check_rotation_against_naive(int order, double tolerance) {
  using Memory = typename ExecutionSpace::memory_space;
  std::mt19937 rng(1234 + order);
  const auto displacements = test_displacements(rng, 12);
  const int cases = static_cast<int>(displacements.size());
  const int nc = kfmm::num_coefficients(order);

  Kokkos::View<Real**, Kokkos::LayoutRight, Memory> M("M", cases, nc), L_rot("L_rot", cases, nc),
      L_naive("L_naive", cases, nc);
  Kokkos::View<Real* [3], Memory> D("D", cases);
  auto M_h = Kokkos::create_mirror_view(M);
  auto D_h = Kokkos::create_mirror_view(D);
  std::vector<std::vector<long double>> reference(cases);
  for (int c = 0; c < cases; ++c) {
    // Multipole of 12 random positive masses within radius 0.5 of the source centre, rounded to
    // Real; the reference translates exactly those rounded values. (Signed masses can cancel a
    // whole degree of the local, whose relative error then measures that cancellation, not M2L.)
    const std::vector<long double> m = random_multipole(order, 12, 0.5, rng, /*positive=*/true);
    std::vector<long double> m_rounded(nc);
    for (int i = 0; i < nc; ++i) {
      M_h(c, i) = static_cast<Real>(m[i]);
      m_rounded[i] = M_h(c, i);
    }
    for (int k = 0; k < 3; ++k) D_h(c, k) = static_cast<Real>(displacements[c][k]);
    reference[c].assign(nc, 0.0L);
    kfmm::m2l_naive_pair<long double>(order, m_rounded.data(), D_h(c, 0), D_h(c, 1), D_h(c, 2),
                                      reference[c].data());
  }
  Kokkos::deep_copy(M, M_h);
  Kokkos::deep_copy(D, D_h);

  Kokkos::parallel_for(
      "test_m2l_pair", Kokkos::RangePolicy<ExecutionSpace>(ExecutionSpace(), 0, cases), KOKKOS_LAMBDA(int c) {
        const Real* m = &M(c, 0);
        kfmm::m2l_rotation_pair(order, m, D(c, 0), D(c, 1), D(c, 2), &L_rot(c, 0));
        kfmm::m2l_naive_pair(order, m, D(c, 0), D(c, 1), D(c, 2), &L_naive(c, 0));
      });
  auto rot_h = kfmm_test::to_host(L_rot);
  auto naive_h = kfmm_test::to_host(L_naive);
  for (int c = 0; c < cases; ++c) {
    INFO("order " << order << " displacement (" << D_h(c, 0) << ", " << D_h(c, 1) << ", " << D_h(c, 2)
                  << ")");
    const double err_rot = degree_errors(order, &rot_h(c, 0), reference[c].data());
    const double err_naive = degree_errors(order, &naive_h(c, 0), reference[c].data());
    CHECK(err_rot < tolerance);
    CHECK(err_naive < tolerance);
    for (int i = 0; i < nc; ++i) CHECK(std::isfinite(static_cast<double>(rot_h(c, i))));
  }
}

template <class ExecutionSpace, class Real, int P>
void check_compile_time_order() {
  // The compile-time-order version must agree with the runtime-order one to round-off.
  using Memory = typename ExecutionSpace::memory_space;
  constexpr int nc = kfmm::num_coefficients(P);
  std::mt19937 rng(99 + P);
  const auto displacements = test_displacements(rng, 4);
  const int cases = static_cast<int>(displacements.size());
  Kokkos::View<Real**, Kokkos::LayoutRight, Memory> M("M", cases, nc), L_fixed("L_fixed", cases, nc),
      L_runtime("L_runtime", cases, nc);
  Kokkos::View<Real* [3], Memory> D("D", cases);
  auto M_h = Kokkos::create_mirror_view(M);
  auto D_h = Kokkos::create_mirror_view(D);
  for (int c = 0; c < cases; ++c) {
    const auto m = random_multipole(P, 8, 0.5, rng);
    for (int i = 0; i < nc; ++i) M_h(c, i) = static_cast<Real>(m[i]);
    for (int k = 0; k < 3; ++k) D_h(c, k) = static_cast<Real>(displacements[c][k]);
  }
  Kokkos::deep_copy(M, M_h);
  Kokkos::deep_copy(D, D_h);
  Kokkos::parallel_for(
      "test_m2l_pair_fixed", Kokkos::RangePolicy<ExecutionSpace>(ExecutionSpace(), 0, cases),
      KOKKOS_LAMBDA(int c) {
        kfmm::m2l_rotation_pair<P>(&M(c, 0), D(c, 0), D(c, 1), D(c, 2), &L_fixed(c, 0));
        kfmm::m2l_rotation_pair(P, &M(c, 0), D(c, 0), D(c, 1), D(c, 2), &L_runtime(c, 0));
      });
  auto fixed_h = kfmm_test::to_host(L_fixed);
  auto runtime_h = kfmm_test::to_host(L_runtime);
  const double eps = std::is_same<Real, float>::value ? 1e-6 : 1e-14;
  for (int c = 0; c < cases; ++c) {
    std::vector<long double> ref(nc);
    for (int i = 0; i < nc; ++i) ref[i] = runtime_h(c, i);
    CHECK(degree_errors(P, &fixed_h(c, 0), ref.data()) < eps);
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("rotation M2L equals naive M2L in double for p 1 to 16", "[operators][m2l]",
                        kfmm_test::ExecutionSpaces) {
  for (int p = 0; p <= kfmm::max_order; ++p) check_rotation_against_naive<TestType, double>(p, 1e-12);
}

TEMPLATE_LIST_TEST_CASE("rotation M2L equals naive M2L in float for p 1 to 16", "[operators][m2l]",
                        kfmm_test::ExecutionSpaces) {
  for (int p = 0; p <= kfmm::max_order; ++p) check_rotation_against_naive<TestType, float>(p, 1e-5);
}

TEMPLATE_LIST_TEST_CASE("compile-time order M2L equals runtime order M2L", "[operators][m2l]",
                        kfmm_test::ExecutionSpaces) {
  check_compile_time_order<TestType, float, 2>();
  check_compile_time_order<TestType, float, 4>();
  check_compile_time_order<TestType, double, 6>();
  check_compile_time_order<TestType, float, 8>();
  check_compile_time_order<TestType, double, 8>();
}

TEST_CASE("M2L adds to the local and is exact on the z axis", "[operators][m2l]") {
  // A unit point mass at the source centre: M = (1, 0, ...). On the +z axis at distance r the local
  // expansion of 1/|x - c| about s = c + r e_z is L_n^0 = (-1)^n n! / r^(n+1) (the Taylor series of
  // 1/(r + z), with R_n^0(0, 0, z) = z^n / n!), all m != 0 zero; about s = c - r e_z it is
  // L_n^0 = n! / r^(n+1). On the axis the rotations are the identity (+z) and a half turn (-z).
  const int p = 16;
  for (const double sign : {1.0, -1.0}) {
    const int nc = kfmm::num_coefficients(p);
    std::vector<double> M(nc, 0.0), L(nc, 1.0);
    std::vector<long double> expected(nc, 1.0L);  // L was 1: M2L adds
    M[0] = 1.0;
    long double factorial = 1.0L;
    for (int n = 0; n <= p; ++n) {
      if (n > 0) factorial *= n;
      expected[kfmm::coefficient_index(n, 0)] +=
          ((n & 1) && sign > 0 ? -1.0L : 1.0L) * factorial / std::pow(2.0L, n + 1);
    }
    kfmm::m2l_rotation_pair(p, M.data(), 0.0, 0.0, sign * 2.0, L.data());
    INFO("axis sign " << sign);
    CHECK(kfmm_test::ops::degree_errors(p, L.data(), expected.data()) < 1e-15);
  }
}

TEST_CASE("the M2L's truncated swaps skip only unread rows and zero columns", "[operators][m2l]") {
  // rotate_to_z / rotate_from_z with ForM2L = true (SwapRange::rows / columns) around the truncated
  // z-translation must give exactly what the full swaps give, at every order and in every direction.
  std::mt19937 rng(77);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int p = 0; p <= kfmm::max_order; ++p) {
    const int nc = kfmm::num_coefficients(p);
    for (int c = 0; c < 20; ++c) {
      std::vector<double> full(nc), cut(nc);
      for (int i = 0; i < nc; ++i) full[i] = cut[i] = u(rng);
      const double dx = c % 5 == 0 ? 0.0 : u(rng), dy = c % 5 == 0 ? 0.0 : u(rng), dz = 1.5 * u(rng);
      const kfmm::RotationAngles<double> g = kfmm::rotation_angles(dx, dy, dz);
      kfmm::rotate_to_z<-1, false>(p, g, full.data());
      kfmm::m2l_z_translate<-1, true>(p, g.rinv, full.data());
      kfmm::rotate_from_z<-1, false>(p, g, full.data());
      kfmm::rotate_to_z<-1, true>(p, g, cut.data());
      kfmm::m2l_z_translate<-1, true>(p, g.rinv, cut.data());
      kfmm::rotate_from_z<-1, true>(p, g, cut.data());
      INFO("p = " << p << ", case " << c);
      for (int i = 0; i < nc; ++i) REQUIRE(cut[i] == full[i]);
    }
  }
}

namespace {
template <kfmm::SwapScaling Scaling, class Real>
void check_lane_swap_table() {
  static constexpr auto table = kfmm::detail::make_lane_swap_table<Scaling, Real>();
  for (int n = 0; n <= kfmm::max_order; ++n)
    for (int m = -n; m <= n; ++m)
      for (int k = -n; k <= n; ++k) {
        const int i = kfmm::detail::swap_block_offset(n) + (m + n) * (2 * n + 1) + (k + n);
        const Real expected = static_cast<Real>(kfmm::normalised_swap_coefficient(n, m, k) *
                                                kfmm::swap_scaling<Scaling>(n, m, k));
        INFO("scaling " << static_cast<int>(Scaling) << ", n " << n << ", m " << m << ", k " << k);
        REQUIRE(table.v[i] == expected);
      }
}
}  // namespace

TEST_CASE("the host lanes' swap tables hold each scaled entry rounded once", "[operators][m2l]") {
  // make_lane_swap_table folds the scalings at compile time; the lanes must see exactly the values the
  // GPU's unrolled swaps fold into immediates (swap entry times swap_scaling, rounded to Real once).
  check_lane_swap_table<kfmm::SwapScaling::none, double>();
  check_lane_swap_table<kfmm::SwapScaling::from_raw, double>();
  check_lane_swap_table<kfmm::SwapScaling::to_raw, double>();
  check_lane_swap_table<kfmm::SwapScaling::from_z_sums, double>();
  check_lane_swap_table<kfmm::SwapScaling::from_z_sums, float>();
  check_lane_swap_table<kfmm::SwapScaling::from_raw, float>();
  // The z-translation's signed weight, (-1)^(n+|m|) w_m, which from_z_sums folds in.
  for (int n = 0; n <= kfmm::max_order; ++n)
    for (int m = -n; m <= n; ++m) {
      const int expected = ((n + std::abs(m)) % 2 == 0 ? 1 : -1) * (m == 0 ? 1 : 2);
      CHECK(kfmm::m2l_z_sign_weight(n, m) == expected);
    }
}
