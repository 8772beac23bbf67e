// The N-body pieces: initial conditions (Plummer in virial equilibrium, uniform sphere), the leapfrog
// kick/drift (second order, time-reversible) and the diagnostics, with the direct sum as the force.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "backends.hpp"
#include "kfmm/drivers/distributions.hpp"
#include "kfmm/drivers/nbody.hpp"
#include "kfmm/operators/direct_sum.hpp"

namespace {

template <class Space>
struct DeviceSystem {
  using M = typename Space::memory_space;
  Kokkos::View<double*[3], M> x, v, a;
  Kokkos::View<double*, M> m, phi;
  double G, eps;

  DeviceSystem(const kfmm::HostParticles& p, double G_, double eps_) : G(G_), eps(eps_) {
    const int n = p.size();
    x = Kokkos::View<double* [3], M>("x", n);
    v = Kokkos::View<double* [3], M>("v", n);
    a = Kokkos::View<double* [3], M>("a", n);
    m = Kokkos::View<double*, M>("m", n);
    phi = Kokkos::View<double*, M>("phi", n);
    kfmm::copy_to(x, p.positions);
    kfmm::copy_to(v, p.velocities);
    kfmm::copy_to(m, p.masses);
    forces();
  }
  void forces() { kfmm::direct_sum(Space(), x, m, G, eps, a, phi); }
  void step(double dt) {
    kfmm::kick(Space(), v, a, dt / 2);
    kfmm::drift(Space(), x, v, dt);
    forces();
    kfmm::kick(Space(), v, a, dt / 2);
  }
  kfmm::Diagnostics diagnostics() const { return kfmm::diagnostics(Space(), x, v, m, phi); }
};

/// Two bodies on an eccentric Kepler orbit (e = 0.5, a = 1, G M = 1, period 2 pi), COM at rest.
kfmm::HostParticles kepler() {
  kfmm::HostParticles p(2);
  const double e = 0.5, m1 = 0.7, m2 = 0.3;
  // Relative orbit at pericentre: r = a (1 - e), v = sqrt(GM (1 + e) / (a (1 - e))).
  const double r = 1 - e, v = std::sqrt((1 + e) / (1 - e));
  p.masses(0) = m1;
  p.masses(1) = m2;
  p.positions(0, 0) = -m2 * r;
  p.positions(1, 0) = m1 * r;
  p.velocities(0, 1) = -m2 * v;
  p.velocities(1, 1) = m1 * v;
  return p;
}

}  // namespace

// The convergence order on the first backend (Serial when enabled: thousands of tiny kernels), the
// kernels themselves on every backend below.
TEST_CASE("Leapfrog is second order and time reversible on a Kepler orbit", "[solver][nbody]") {
  using Space = std::tuple_element_t<0, kfmm_test::ExecutionSpaces>;
  const double period = 2 * 3.14159265358979323846;
  double errors[2];
  for (int k = 0; k < 2; ++k) {
    const int steps = 200 << k;
    DeviceSystem<Space> s(kepler(), 1.0, 0.0);
    const kfmm::Diagnostics d0 = s.diagnostics();
    CHECK(d0.total == Catch::Approx(-0.5 * 0.7 * 0.3 / 1.0).epsilon(1e-12));  // E = -G m1 m2 / (2a)
    double worst = 0;
    for (int i = 0; i < steps; ++i) {
      s.step(period / steps);
      if (i % (4 << k) == 0)
        worst = std::max(worst, std::fabs(s.diagnostics().total - d0.total) / std::fabs(d0.total));
    }
    const kfmm::Diagnostics d = s.diagnostics();
    errors[k] = worst;
    // Momentum and angular momentum are conserved to round-off by pairwise-symmetric forces.
    for (int c = 0; c < 3; ++c) {
      CHECK(std::fabs(d.momentum[c] - d0.momentum[c]) < 1e-13);
      CHECK(std::fabs(d.angular_momentum[c] - d0.angular_momentum[c]) < 1e-12);
    }
    // After one period the orbit closes (phase error O(dt^2)).
    auto x = kfmm_test::to_host(s.x);
    CHECK(std::fabs(x(1, 0) - 0.7 * 0.5) < 8e-2 / (1 << (2 * k)));
  }
  INFO("worst energy errors " << errors[0] << " " << errors[1]);
  CHECK(errors[0] < 1e-2);
  // Halving dt divides the (bounded, oscillating) energy error by ~4.
  CHECK(errors[0] / errors[1] > 3.5);
  CHECK(errors[0] / errors[1] < 4.5);

  // Time reversibility: forward n steps, flip velocities, n steps back.
  DeviceSystem<Space> s(kepler(), 1.0, 0.0);
  auto x0 = kfmm_test::to_host(s.x);
  for (int i = 0; i < 100; ++i) s.step(0.02);
  auto v = s.v;
  Kokkos::parallel_for(
      Kokkos::RangePolicy<Space>(0, 2), KOKKOS_LAMBDA(const int i) {
        for (int d = 0; d < 3; ++d) v(i, d) = -v(i, d);
      });
  for (int i = 0; i < 100; ++i) s.step(0.02);
  auto x1 = kfmm_test::to_host(s.x);
  for (int i = 0; i < 2; ++i) {
    for (int d = 0; d < 3; ++d) CHECK(std::fabs(x1(i, d) - x0(i, d)) < 1e-10);
  }
}

TEMPLATE_LIST_TEST_CASE("Leapfrog kernels agree on every backend", "[solver][nbody]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  DeviceSystem<Space> s(kepler(), 1.0, 0.0);
  DeviceSystem<Kokkos::DefaultHostExecutionSpace> h(kepler(), 1.0, 0.0);
  for (int i = 0; i < 20; ++i) {
    s.step(0.05);
    h.step(0.05);
  }
  auto xs = kfmm_test::to_host(s.x);
  auto vs = kfmm_test::to_host(s.v);
  auto xh = kfmm_test::to_host(h.x);
  auto vh = kfmm_test::to_host(h.v);
  for (int i = 0; i < 2; ++i) {
    for (int d = 0; d < 3; ++d) {
      CHECK(xs(i, d) == Catch::Approx(xh(i, d)).epsilon(1e-12).margin(1e-14));
      CHECK(vs(i, d) == Catch::Approx(vh(i, d)).epsilon(1e-12).margin(1e-14));
    }
  }
  const kfmm::Diagnostics d = s.diagnostics();
  CHECK(d.total == Catch::Approx(-0.5 * 0.7 * 0.3).epsilon(2e-2));
}

TEST_CASE("Plummer initial conditions are in virial equilibrium in Henon units", "[solver][nbody]") {
  const int n = 4000;
  const kfmm::HostParticles p = kfmm::plummer_sphere(n, 42);
  REQUIRE(p.size() == n);
  // Same seed, same particles; another seed, other particles.
  const kfmm::HostParticles q = kfmm::plummer_sphere(n, 42);
  const kfmm::HostParticles r = kfmm::plummer_sphere(n, 43);
  CHECK(p.positions(17, 1) == q.positions(17, 1));
  CHECK(p.velocities(n - 1, 2) == q.velocities(n - 1, 2));
  CHECK(p.positions(17, 1) != r.positions(17, 1));
  DeviceSystem<Kokkos::DefaultExecutionSpace> s(p, 1.0, 0.0);
  const kfmm::Diagnostics d = s.diagnostics();
  CHECK(d.mass == Catch::Approx(1.0).epsilon(1e-12));
  for (int c = 0; c < 3; ++c) CHECK(std::fabs(d.momentum[c]) < 1e-12);
  // E = -1/4, W = -1/2, K = 1/4 (sampling noise ~ 1/sqrt(N), the cut at 20 scale radii ~0.4 %).
  CHECK(d.total == Catch::Approx(-0.25).epsilon(0.05));
  CHECK(d.potential == Catch::Approx(-0.5).epsilon(0.05));
  CHECK(d.virial_ratio() == Catch::Approx(1.0).epsilon(0.06));
  // Half-mass radius of the Plummer sphere: 1.305 a.
  std::vector<double> radii(n);
  for (int i = 0; i < n; ++i) {
    radii[i] = std::sqrt(p.positions(i, 0) * p.positions(i, 0) + p.positions(i, 1) * p.positions(i, 1) +
                         p.positions(i, 2) * p.positions(i, 2));
  }
  std::nth_element(radii.begin(), radii.begin() + n / 2, radii.end());
  CHECK(radii[n / 2] == Catch::Approx(1.305 * kfmm::henon_plummer_radius).epsilon(0.05));
}

TEST_CASE("Uniform sphere initial conditions have the requested virial ratio", "[solver][nbody]") {
  const int n = 3000;
  const kfmm::HostParticles p = kfmm::uniform_sphere(n, 5, 2.0, 3.0, 0.5, 1.0);
  double rmax = 0;
  for (int i = 0; i < n; ++i) {
    double r2 = 0;
    for (int c = 0; c < 3; ++c) r2 += p.positions(i, c) * p.positions(i, c);
    rmax = std::max(rmax, std::sqrt(r2));
  }
  CHECK(rmax < 3.2);  // radius 3 (the COM shift is tiny)
  DeviceSystem<Kokkos::DefaultExecutionSpace> s(p, 1.0, 0.0);
  const kfmm::Diagnostics d = s.diagnostics();
  CHECK(d.mass == Catch::Approx(2.0));
  // W = -3 G M^2 / (5 R) up to sampling noise and the discreteness of N particles.
  CHECK(d.potential == Catch::Approx(-3.0 * 4.0 / 15.0).epsilon(0.03));
  CHECK(d.virial_ratio() == Catch::Approx(0.5).epsilon(0.05));
  // A cold sphere has no kinetic energy.
  const kfmm::HostParticles cold = kfmm::uniform_sphere(100, 5);
  for (int i = 0; i < 100; ++i) CHECK(cold.velocities(i, 0) == 0.0);
  // A virial ratio needs a bound sphere (W < 0): repulsive or no gravity is refused, not NaN velocities.
  CHECK_THROWS_WITH(kfmm::uniform_sphere(100, 5, 1.0, 1.0, 0.5, -1.0),
                    Catch::Matchers::ContainsSubstring("virial_ratio = 0.5 needs G > 0"));
  CHECK_THROWS_WITH(kfmm::uniform_sphere(100, 5, 1.0, 1.0, 0.5, 0.0),
                    Catch::Matchers::ContainsSubstring("virial_ratio = 0.5 needs G > 0"));
  CHECK_NOTHROW(kfmm::uniform_sphere(100, 5, 1.0, 1.0, 0.0, -1.0));
}

TEST_CASE("Plummer spheres cut at small radii are sampled from the truncated mass profile",
          "[solver][nbody]") {
  // max_radius 1e-3 scale radii keeps 1e-9 of the mass: rejection would need ~1e9 draws per particle.
  for (double cut : {1e-3, 0.5, 1.0, 1.5}) {
    INFO("max_radius " << cut);
    const int n = 4000;
    const kfmm::HostParticles p = kfmm::plummer_sphere(n, 9, 1.0, 1.0, 1.0, cut);
    std::vector<double> radii(n);
    for (int i = 0; i < n; ++i) {
      double r2 = 0;
      for (int c = 0; c < 3; ++c) r2 += p.positions(i, c) * p.positions(i, c);
      radii[i] = std::sqrt(r2);
      for (int c = 0; c < 3; ++c) REQUIRE(std::isfinite(p.velocities(i, c)));
    }
    // Every radius inside the cut (plus the centre-of-mass shift), and the median where the truncated
    // profile puts it: M(r_half) = M(cut) / 2 with M(r) = r^3 (1 + r^2)^(-3/2).
    const double inside = std::pow(1.0 + 1.0 / (cut * cut), -1.5);
    const double x = 0.5 * inside;
    const double r_half = 1.0 / std::sqrt(std::pow(x, -2.0 / 3.0) - 1.0);
    CHECK(*std::max_element(radii.begin(), radii.end()) < 1.1 * cut);
    std::nth_element(radii.begin(), radii.begin() + n / 2, radii.end());
    CHECK(radii[n / 2] == Catch::Approx(r_half).epsilon(0.05));
  }
}

TEST_CASE("Test distributions are reproducible and well formed", "[solver][nbody]") {
  for (auto dist : {kfmm::Distribution::uniform, kfmm::Distribution::plummer, kfmm::Distribution::clustered,
                    kfmm::Distribution::disc}) {
    INFO(kfmm::to_string(dist));
    CHECK(kfmm::distribution_from_string(kfmm::to_string(dist)) == dist);
    const auto p = kfmm::make_distribution(dist, 1000, 3);
    const auto q = kfmm::make_distribution(dist, 1000, 3);
    double mass = 0;
    for (int i = 0; i < 1000; ++i) {
      for (int c = 0; c < 3; ++c) {
        REQUIRE(std::isfinite(p.positions(i, c)));
        CHECK(p.positions(i, c) == q.positions(i, c));
      }
      mass += p.masses(i);
    }
    CHECK(mass == Catch::Approx(1.0));
    CHECK(kfmm::make_distribution(dist, 0, 3).size() == 0);
  }
  CHECK_THROWS_AS(kfmm::distribution_from_string("gaussian"), kfmm::Error);
}
