// kfmm::Solver against the O(N^2) direct sum: the tolerance holds on uniform, Plummer, clustered and
// disc distributions, with softening and with charges of both signs; degenerate inputs (line, plane,
// coincident points, 1e6 offsets, N = 0, 1, 2); a 2x margin on the disc at 5e4 particles, where the
// calibration underestimates it; the error falls monotonically with the order at fixed
// theta; reevaluate for new masses; caller order, determinism and input errors.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends.hpp"
#include "kfmm/kfmm.hpp"

namespace {

template <class Space, class Real>
struct Problem {
  using M = typename Space::memory_space;
  Kokkos::View<Real*[3], M> x, a;
  Kokkos::View<Real*, M> m, phi;
  Kokkos::View<double* [3], M> a_ref;
  Kokkos::View<double*, M> phi_ref;

  explicit Problem(const kfmm::HostParticles& p) {
    const int n = p.size();
    x = Kokkos::View<Real* [3], M>("x", n);
    a = Kokkos::View<Real* [3], M>("a", n);
    m = Kokkos::View<Real*, M>("m", n);
    phi = Kokkos::View<Real*, M>("phi", n);
    a_ref = Kokkos::View<double* [3], M>("a_ref", n);
    phi_ref = Kokkos::View<double*, M>("phi_ref", n);
    auto xh = Kokkos::create_mirror_view(x);
    auto mh = Kokkos::create_mirror_view(m);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) xh(i, d) = static_cast<Real>(p.positions(i, d));
      mh(i) = static_cast<Real>(p.masses(i));
    }
    Kokkos::deep_copy(x, xh);
    Kokkos::deep_copy(m, mh);
  }
  int size() const { return static_cast<int>(m.extent(0)); }

  /// The fp64 direct sum of the (Real-rounded) particles.
  void reference(double G, double softening) {
    kfmm::direct_sum(Space(), x, m, G, softening, a_ref, phi_ref);
  }

  /// Relative L2 errors of accelerations and potentials against the reference.
  std::pair<double, double> errors() const {
    auto ah = kfmm_test::to_host(a);
    auto ph = kfmm_test::to_host(phi);
    auto rh = kfmm_test::to_host(a_ref);
    auto qh = kfmm_test::to_host(phi_ref);
    long double num = 0, den = 0, pnum = 0, pden = 0;
    for (int i = 0; i < size(); ++i) {
      for (int d = 0; d < 3; ++d) {
        REQUIRE(std::isfinite(static_cast<double>(ah(i, d))));
        const long double e = static_cast<long double>(ah(i, d)) - rh(i, d);
        num += e * e;
        den += static_cast<long double>(rh(i, d)) * rh(i, d);
      }
      const long double e = static_cast<long double>(ph(i)) - qh(i);
      pnum += e * e;
      pden += static_cast<long double>(qh(i)) * qh(i);
    }
    return {den > 0 ? static_cast<double>(std::sqrt(num / den)) : static_cast<double>(std::sqrt(num)),
            pden > 0 ? static_cast<double>(std::sqrt(pnum / pden)) : static_cast<double>(std::sqrt(pnum))};
  }
};

template <class Space, class Real = double>
std::pair<double, double> solve_and_compare(const kfmm::HostParticles& p, const kfmm::Options& options,
                                            kfmm::Statistics* stats = nullptr) {
  Problem<Space, Real> prob(p);
  kfmm::Solver<Space, Real> solver(options);
  solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
  if (stats) *stats = solver.statistics();
  prob.reference(options.G, options.softening);
  return prob.errors();
}

kfmm::HostParticles with_random_masses(kfmm::HostParticles p, std::uint64_t seed, bool mixed_signs) {
  kfmm::Random rng(seed);
  for (int i = 0; i < p.size(); ++i) {
    p.masses(i) = (mixed_signs ? rng.uniform(-1.0, 1.0) : rng.uniform(0.1, 1.0)) / p.size();
  }
  return p;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("Solver meets the tolerance on the calibration distributions", "[solver][accuracy]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  for (auto dist : {kfmm::Distribution::uniform, kfmm::Distribution::plummer, kfmm::Distribution::clustered,
                    kfmm::Distribution::disc}) {
    const auto particles = kfmm::make_distribution(dist, 4000, 11);
    // (the odd powers land between the calibration's measured thetas: the interpolated error decides)
    for (double tol : {1e-2, 1e-3, 1e-4, 3e-5, 1e-5, 1e-6, 3e-7, 1e-7, 1e-8, 3e-9, 1e-10}) {
      kfmm::Options o;
      o.tolerance = tol;
      o.timing = true;
      kfmm::Statistics s;
      const auto [err, perr] = solve_and_compare<Space>(particles, o, &s);
      INFO(kfmm::to_string(dist) << " tolerance " << tol << ": p = " << s.order << ", theta = " << s.theta
                                 << ", leaf " << s.leaf_size << ", error " << err << ", potential error "
                                 << perr << ", far pairs " << s.far_pairs);
      CHECK(err <= tol);
      CHECK(perr <= tol);
      CHECK(s.parameters_from_tolerance);
      CHECK(s.p2p_interactions >= 0);
    }
  }
}

// The calibration's worst case (2000 and 12000 particles) is not the worst at every size: the disc's
// error peaks between 2e4 and 1e5 particles at up to 1.43x the calibrated value (docs/benchmarks.md,
// "Thirty-third session"). The safety factor 3 is what keeps the tolerance there with 2x to spare: on
// host backends (p 4, theta 0.8 and p 6, 0.708) 0.29 and 0.35 of it at 1e-2 and 1e-3, every target;
// with the factor at 1.5 the rule picks p 3, 0.8 and p 6, 0.771 and this fails at 0.77 and 0.74. (GPUs
// pick p 4, 0.8 and p 7, 0.764: 0.31 and 0.32 on 4096 targets.) Default backend only: the direct sum of
// 5e4 particles is the cost (~12 s on two cores).
TEST_CASE("Solver keeps a 2x margin where the disc's error exceeds the calibration", "[solver][accuracy]") {
  using Space = Kokkos::DefaultExecutionSpace;
  // bench_solver's seed (with the calibration's, 7, this disc's error is ~1.3x smaller)
  const auto particles = kfmm::make_distribution(kfmm::Distribution::disc, 50000, 2024);
  for (double tol : {1e-2, 1e-3}) {
    kfmm::Options o;
    o.tolerance = tol;
    kfmm::Statistics s;
    const double err = solve_and_compare<Space>(particles, o, &s).first;
    INFO("disc 5e4, tolerance " << tol << ": p = " << s.order << ", theta = " << s.theta << ", leaf "
                                << s.leaf_size << ", error " << err);
    CHECK(err <= tol / 2);
  }
}

TEMPLATE_LIST_TEST_CASE("Solver meets the tolerance with softening and charges of both signs",
                        "[solver][accuracy]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const auto plummer = kfmm::make_distribution(kfmm::Distribution::plummer, 3000, 5);
  for (double eps : {1e-3, 1e-2, 0.1}) {
    for (double tol : {1e-3, 1e-6}) {
      kfmm::Options o;
      o.tolerance = tol;
      o.softening = eps;
      kfmm::Statistics s;
      const auto [err, perr] = solve_and_compare<Space>(plummer, o, &s);
      INFO("softening " << eps << " tolerance " << tol << ": margin " << s.min_separation << ", error "
                        << err);
      CHECK(err <= tol);
      CHECK(s.min_separation > eps);
    }
  }
  // Laplace charges of both signs, G != 1.
  const auto charges =
      with_random_masses(kfmm::make_distribution(kfmm::Distribution::clustered, 3000, 6), 9, true);
  for (double tol : {1e-3, 1e-7}) {
    kfmm::Options o;
    o.tolerance = tol;
    o.G = -2.5;
    const auto [err, perr] = solve_and_compare<Space>(charges, o);
    INFO("charges, tolerance " << tol << ": error " << err);
    CHECK(err <= tol);
  }
}

TEMPLATE_LIST_TEST_CASE(
    "Options::timing times every stage, and each instance's stages add up to the evaluation",
    "[solver][timing]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using kfmm::Stage;
  Problem<Space, double> prob(kfmm::make_distribution(kfmm::Distribution::plummer, 20000, 3));
  kfmm::Options o;
  o.order = 5;
  o.theta = 0.6;
  o.timing = true;
  kfmm::Solver<Space, double> solver(o);
  const auto check_sums = [](const kfmm::Statistics& s) {
    INFO("stages " << s.stage_sum() << " s of " << s.total_seconds << " s");
    CHECK(s.timed);
    CHECK(s.stage_clock == kfmm::StageClock<Space>::method);
    for (int i = 0; i < kfmm::num_stages; ++i) CHECK(s.seconds[i] >= 0);
    // (device events: each instance's stages span the device's time line from the start to its last
    // stage; events' milliseconds are floats, hence 1 us of slack) P2M, M2M and P2P run on the side
    // instance, beside the walk and M2L / L2L where it is a stream of its own (CUDA): there the sum of all
    // stages may exceed the evaluation, but each instance's may not.
    const double side = s.time(Stage::p2m) + s.time(Stage::m2m) + s.time(Stage::p2p);
    INFO("side stages " << side << " s");
    CHECK(s.stage_sum() - side <= s.total_seconds + 1e-6);
    CHECK(side <= s.total_seconds + 1e-6);
    if (!kfmm::detail::SideInstance<Space>::concurrent) CHECK(s.stage_sum() <= s.total_seconds + 1e-6);
    CHECK(s.stage_sum() >= 0.5 * s.total_seconds);
  };
  for (int rep = 0; rep < 3; ++rep) {  // (the first evaluation allocates, the later ones reuse)
    solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
    const kfmm::Statistics& s = solver.statistics();
    INFO("evaluation " << rep);
    check_sums(s);
    for (Stage st : {Stage::tree, Stage::walk, Stage::p2m, Stage::m2l, Stage::l2p, Stage::p2p})
      CHECK(s.time(st) > 0);
  }
  solver.reevaluate(prob.m, prob.a, prob.phi);
  check_sums(solver.statistics());
  CHECK(solver.statistics().time(Stage::tree) == 0);
  CHECK(solver.statistics().time(Stage::walk) == 0);
  CHECK(solver.statistics().time(Stage::p2p) > 0);
  // Without timing no stage is timed.
  o.timing = false;
  kfmm::Solver<Space, double> untimed(o);
  untimed.evaluate(prob.x, prob.m, prob.a, prob.phi);
  CHECK_FALSE(untimed.statistics().timed);
  CHECK(untimed.statistics().stage_sum() == 0);
}

TEMPLATE_LIST_TEST_CASE("Statistics::p2p_interactions counts the near field's particle pairs",
                        "[solver][timing]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  kfmm::Options o;
  o.order = 4;
  o.timing = true;
  // A 16^3 lattice in leaves of 2^3 points (radius > 0: a one-point leaf has radius 0 and meets any
  // opening angle) and an opening angle so small that no pair is far: the near field holds every ordered
  // pair, n (n - 1).
  const int side = 16, n = side * side * side;
  kfmm::HostParticles lattice(n);
  for (int i = 0; i < n; ++i) {
    lattice.positions(i, 0) = i % side;
    lattice.positions(i, 1) = (i / side) % side;
    lattice.positions(i, 2) = i / (side * side);
    lattice.masses(i) = 1.0 / n;
  }
  Problem<Space, double> all_near(lattice);
  o.leaf_size = 8;
  o.theta = 0.01;
  kfmm::Solver<Space, double> near_only(o);
  near_only.evaluate(all_near.x, all_near.m, all_near.a, all_near.phi);
  const kfmm::Statistics& s = near_only.statistics();
  REQUIRE(s.far_pairs == 0);
  CHECK(s.near_pairs == static_cast<long long>(s.num_leaves) * s.num_leaves);
  CHECK(s.p2p_interactions == static_cast<long long>(n) * (n - 1));
  // With far pairs: fewer, and the same count as the host backend's for the same tree and lists.
  Problem<Space, double> plummer(kfmm::make_distribution(kfmm::Distribution::plummer, 20000, 4));
  o.leaf_size = 32;
  o.theta = 0.6;
  kfmm::Solver<Space, double> solver(o);
  solver.evaluate(plummer.x, plummer.m, plummer.a, plummer.phi);
  const long long count = solver.statistics().p2p_interactions;
  CHECK(solver.statistics().far_pairs > 0);
  CHECK(count > 0);
  CHECK(count < 20000LL * 19999);
  using Host = Kokkos::DefaultHostExecutionSpace;
  Problem<Host, double> plummer_host(kfmm::make_distribution(kfmm::Distribution::plummer, 20000, 4));
  kfmm::Solver<Host, double> host_solver(o);
  host_solver.evaluate(plummer_host.x, plummer_host.m, plummer_host.a, plummer_host.phi);
  CHECK(host_solver.statistics().near_pairs == solver.statistics().near_pairs);
  CHECK(host_solver.statistics().p2p_interactions == count);
  solver.reevaluate(plummer.m, plummer.a, plummer.phi);
  CHECK(solver.statistics().p2p_interactions == count);
  // One particle: no pair.
  Problem<Space, double> one(kfmm::make_distribution(kfmm::Distribution::uniform, 1, 2));
  kfmm::Solver<Space, double> single(o);
  single.evaluate(one.x, one.m, one.a, one.phi);
  CHECK(single.statistics().p2p_interactions == 0);
}

TEMPLATE_LIST_TEST_CASE("count_p2p_interactions: per row and per chunk agree with a loop on the host",
                        "[solver][timing]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Memory = typename Space::memory_space;
  // Ten nodes of 0..9 particles (node i holds i).
  Kokkos::View<int* [2], Memory> ranges("ranges", 10);
  auto ranges_host = Kokkos::create_mirror_view(ranges);
  for (int node = 0, first = 0; node < 10; first += node, ++node) {
    ranges_host(node, 0) = first;
    ranges_host(node, 1) = first + node;
  }
  Kokkos::deep_copy(ranges, ranges_host);
  // Counts the list of `rows` (target node targets[r]) with both forms and returns the host loop's count;
  // `padding` entries of node 9 after the last row (the solver's buffers are longer than their lists)
  // would add pairs if they were counted.
  const Space space;
  auto check = [&](const std::vector<int>& targets, const std::vector<std::vector<int>>& rows, int padding) {
    std::vector<int> offsets{0}, sources;
    long long expected = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const long long nt = targets[r];
      for (const int src : rows[r]) {
        sources.push_back(src);
        expected += src == targets[r] ? nt * (nt - 1) : nt * src;
      }
      offsets.push_back(static_cast<int>(sources.size()));
    }
    sources.resize(sources.size() + padding, 9);
    const kfmm::InteractionList<Memory> list{kfmm_test::device_ints<Memory>(targets),
                                             kfmm_test::device_ints<Memory>(offsets),
                                             kfmm_test::device_ints<Memory>(sources)};
    CHECK(kfmm::detail::count_p2p_interactions(space, list, ranges, false) == expected);
    CHECK(kfmm::detail::count_p2p_interactions(space, list, ranges, true) == expected);
    return expected;
  };
  // Rows with and without self pairs, empty rows first, in the middle and last.
  REQUIRE(check({3, 0, 7, 5, 9, 2, 8}, {{}, {0, 1, 9}, {7}, {}, {1, 2, 3, 4, 5, 6, 8}, {2, 9, 9}, {}}, 5) ==
          7 * 6 + 9 * (1 + 2 + 3 + 4 + 5 + 6 + 8) + 2 * 1 + 2 * 9 + 2 * 9);
  // Many rows of 0..40 entries (chunks start in the middle of rows and span several, some rows empty).
  std::mt19937 rng(7);
  std::vector<int> many_targets;
  std::vector<std::vector<int>> many_rows;
  for (int r = 0; r < 300; ++r) {
    many_targets.push_back(static_cast<int>(rng() % 10));
    const int length = static_cast<int>(rng() % 41) * (r % 7 != 3);
    many_rows.emplace_back();
    for (int e = 0; e < length; ++e) many_rows.back().push_back(static_cast<int>(rng() % 10));
  }
  CHECK(check(many_targets, many_rows, 0) > 0);
  // No rows at all, and rows with no entries.
  CHECK(check({}, {}, 0) == 0);
  CHECK(check({4, 6}, {{}, {}}, 2) == 0);
}

TEMPLATE_LIST_TEST_CASE("Solver handles degenerate inputs", "[solver][accuracy]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const int n = 1500;
  kfmm::Random rng(3);
  kfmm::HostParticles line(n), plane(n), coincident(n), offset(n);
  for (int i = 0; i < n; ++i) {
    line.positions(i, 0) = rng.uniform();  // on the x axis
    plane.positions(i, 0) = rng.uniform();
    plane.positions(i, 1) = rng.uniform();  // z = 0
    // A third of the particles at one point, a third at another, the rest around them.
    const int group = i % 3;
    for (int d = 0; d < 3; ++d) {
      coincident.positions(i, d) = group == 0 ? 0.25 : group == 1 ? 0.75 : rng.uniform();
      offset.positions(i, d) = 1e6 + rng.uniform();
    }
    line.masses(i) = plane.masses(i) = coincident.masses(i) = offset.masses(i) = 1.0 / n;
  }
  for (double tol : {1e-4, 1e-8}) {
    kfmm::Options o;
    o.tolerance = tol;
    for (const auto* p : {&line, &plane, &offset}) {
      const auto [err, perr] = solve_and_compare<Space>(*p, o);
      INFO((p == &line    ? "line"
            : p == &plane ? "plane"
                          : "offset 1e6")
           << " tolerance " << tol << ": error " << err);
      CHECK(err <= tol);
    }
    // Coincident particles: softened (finite forces), and unsoftened (coincident pairs contribute nothing).
    o.softening = 1e-2;
    auto [err, perr] = solve_and_compare<Space>(coincident, o);
    INFO("coincident, softened, tolerance " << tol << ": error " << err);
    CHECK(err <= tol);
    // Unsoftened, each group is a point mass of a third of the total (a radius-0 node). The plain MAC
    // r_A + r_B <= theta d lets a target node take all of theta d against it, ~2^(p+1) times the error
    // of the calibration's balanced pairs; the walk's concentration rule caps that partner at theta d / 2
    // (kfmm::concentration_accepts). With the rule off the error is ~30x the tolerance at 1e-4 (measured
    // 2.8e-3), which shows that this input exercises the rule.
    o.softening = 0;
    kfmm::Statistics on, off;
    std::tie(err, perr) = solve_and_compare<Space>(coincident, o, &on);
    INFO("coincident, unsoftened, tolerance " << tol << ": error " << err);
    CHECK(err <= tol);
    CHECK(on.concentration_ratio == o.concentration_ratio);
    if (tol == 1e-4) {
      o.concentration_ratio = 0;
      std::tie(err, perr) = solve_and_compare<Space>(coincident, o, &off);
      INFO("coincident, unsoftened, concentration rule off: error " << err);
      CHECK(err > 3 * tol);
      CHECK(off.concentration_ratio == 0);
      CHECK(off.near_pairs < on.near_pairs);  // (the rule sends pairs to the near field)
    }
  }
  // N = 0, 1, 2.
  kfmm::Options o;
  o.tolerance = 1e-6;
  {
    Problem<Space, double> prob{kfmm::HostParticles(0)};
    kfmm::Solver<Space, double> solver(o);
    solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
    CHECK(solver.statistics().num_particles == 0);
    solver.reevaluate(prob.m, prob.a, prob.phi);
  }
  {
    kfmm::HostParticles one(1);
    one.positions(0, 0) = 3;
    one.masses(0) = 2;
    Problem<Space, double> prob(one);
    Kokkos::deep_copy(prob.a, 7.0);
    Kokkos::deep_copy(prob.phi, 7.0);
    kfmm::Solver<Space, double> solver(o);
    solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
    auto ah = kfmm_test::to_host(prob.a);
    auto ph = kfmm_test::to_host(prob.phi);
    CHECK(ah(0, 0) == 0.0);
    CHECK(ah(0, 1) == 0.0);
    CHECK(ah(0, 2) == 0.0);
    CHECK(ph(0) == 0.0);
  }
  {
    kfmm::HostParticles two(2);
    two.positions(1, 0) = 2;
    two.masses(0) = 1;
    two.masses(1) = 3;
    Problem<Space, double> prob(two);
    kfmm::Options g = o;
    g.G = 0.5;
    kfmm::Solver<Space, double> solver(g);
    solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
    auto ah = kfmm_test::to_host(prob.a);
    auto ph = kfmm_test::to_host(prob.phi);
    // a_0 = -G m_1 (x_0 - x_1) / r^3 = 0.5 * 3 * 2 / 8; phi_0 = -G m_1 / r.
    CHECK(ah(0, 0) == Catch::Approx(0.375).epsilon(1e-14));
    CHECK(ah(1, 0) == Catch::Approx(-0.125).epsilon(1e-14));
    CHECK(ph(0) == Catch::Approx(-0.75).epsilon(1e-14));
    CHECK(ph(1) == Catch::Approx(-0.25).epsilon(1e-14));
  }
}

TEMPLATE_LIST_TEST_CASE("Solver results do not depend on the unit of length", "[solver][accuracy]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  // Solid harmonics up to degree 2p+1 overflow or underflow in raw metres-for-galaxies units; the
  // solver rescales lengths by powers of two, so results scale exactly.
  const auto unit = kfmm::make_distribution(kfmm::Distribution::clustered, 2000, 61);
  kfmm::Options o;
  o.order = 12;
  o.theta = 0.5;
  o.softening = 1e-3;
  Problem<Space, double> base(unit);
  kfmm::Solver<Space, double> solver(o);
  solver.evaluate(base.x, base.m, base.a, base.phi);
  CHECK(solver.statistics().length_scale == 1.0);
  auto a0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), base.a);
  auto p0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), base.phi);
  base.reference(o.G, o.softening);
  const double err0 = base.errors().first;
  CHECK(err0 < 1e-6);
  for (int e : {60, -40}) {
    const double s = std::ldexp(1.0, e);
    kfmm::HostParticles scaled = unit;
    scaled.positions = Kokkos::View<double* [3], Kokkos::HostSpace>("scaled", unit.size());
    for (int i = 0; i < unit.size(); ++i) {
      for (int d = 0; d < 3; ++d) scaled.positions(i, d) = unit.positions(i, d) * s;
    }
    Problem<Space, double> big(scaled);
    kfmm::Options os = o;
    os.softening = o.softening * s;
    kfmm::Solver<Space, double> solver2(os);
    solver2.evaluate(big.x, big.m, big.a, big.phi);
    INFO("lengths times 2^" << e);
    // A power of two that brings the extent (about 1 here) back near 1.
    const double internal = solver2.statistics().length_scale * s;
    CHECK(internal >= 1.0 / 16);
    CHECK(internal <= 1.0);
    int exponent = 0;
    CHECK(std::frexp(solver2.statistics().length_scale, &exponent) == 0.5);
    auto a1 = kfmm_test::to_host(big.a);
    auto p1 = kfmm_test::to_host(big.phi);
    // The rescaling is by powers of two, so results agree to round-off (bitwise, unless a kernel
    // has a scale-dependent constant such as a radius floor).
    for (int i = 0; i < unit.size(); ++i) {
      for (int d = 0; d < 3; ++d)
        REQUIRE(a1(i, d) * (s * s) == Catch::Approx(a0(i, d)).epsilon(1e-12).margin(1e-300));
      REQUIRE(p1(i) * s == Catch::Approx(p0(i)).epsilon(1e-12));
    }
  }
  // One solver across changes of unit: after its first evaluation a build assumes the last scale (the
  // box stays on the device); when the box asks for another scale it builds again, and the results
  // are those of a fresh solver, bitwise.
  auto same_results = [](const Problem<Space, double>& x, const Problem<Space, double>& y) {
    auto ax = kfmm_test::to_host(x.a), ay = kfmm_test::to_host(y.a);
    auto px = kfmm_test::to_host(x.phi), py = kfmm_test::to_host(y.phi);
    for (int i = 0; i < static_cast<int>(ax.extent(0)); ++i) {
      for (int d = 0; d < 3; ++d) REQUIRE(ax(i, d) == ay(i, d));
      REQUIRE(px(i) == py(i));
    }
  };
  double last_scale = solver.statistics().length_scale;
  for (int e : {60, 2, -40}) {
    INFO("one solver, lengths times 2^" << e);
    kfmm::HostParticles scaled = unit;
    scaled.positions = Kokkos::View<double* [3], Kokkos::HostSpace>("scaled", unit.size());
    for (int i = 0; i < unit.size(); ++i) {
      for (int d = 0; d < 3; ++d) scaled.positions(i, d) = unit.positions(i, d) * std::ldexp(1.0, e);
    }
    Problem<Space, double> reused(scaled), fresh_run(scaled);
    kfmm::Solver<Space, double> fresh(o);
    fresh.evaluate(fresh_run.x, fresh_run.m, fresh_run.a, fresh_run.phi);
    solver.evaluate(reused.x, reused.m, reused.a, reused.phi);
    CHECK(solver.statistics().scale_rebuild == (fresh.statistics().length_scale != last_scale));
    CHECK(solver.statistics().length_scale == fresh.statistics().length_scale);
    last_scale = fresh.statistics().length_scale;
    same_results(reused, fresh_run);
    solver.evaluate(reused.x, reused.m, reused.a, reused.phi);
    CHECK_FALSE(solver.statistics().scale_rebuild);
    same_results(reused, fresh_run);
  }
  Problem<Space, double> again(unit);
  solver.evaluate(again.x, again.m, again.a, again.phi);
  CHECK(solver.statistics().scale_rebuild);
  CHECK(solver.statistics().length_scale == 1.0);
  auto a2 = kfmm_test::to_host(again.a);
  for (int i = 0; i < unit.size(); ++i) {
    for (int d = 0; d < 3; ++d) REQUIRE(a2(i, d) == a0(i, d));
  }
}

TEMPLATE_LIST_TEST_CASE("Solver error falls monotonically with the order at fixed theta",
                        "[solver][accuracy]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  for (auto [dist, theta] :
       {std::pair{kfmm::Distribution::plummer, 0.4}, std::pair{kfmm::Distribution::uniform, 0.7}}) {
    const auto particles = kfmm::make_distribution(dist, 2000, 21);
    double last = std::numeric_limits<double>::infinity();
    double first = 0;
    for (int p = 0; p <= 12; ++p) {
      kfmm::Options o;
      o.order = p;
      o.theta = theta;
      o.leaf_size = 16;
      const double err = solve_and_compare<Space>(particles, o).first;
      INFO(kfmm::to_string(dist) << " theta " << theta << " p " << p << ": error " << err << " (previous "
                                 << last << ")");
      if (p == 0) first = err;
      // About the centre of mass the dipole vanishes: p = 1 equals p = 0 (up to round-off).
      if (p == 1) {
        CHECK(err <= last * (1 + 1e-6));
      } else if (last > 1e-12) {
        CHECK(err < last);
      } else {
        CHECK(err < 1e-11);  // round-off floor of double
      }
      last = err;
    }
    CHECK(last < first * std::pow(theta, 8));
  }
}

TEMPLATE_LIST_TEST_CASE("Solver reevaluates new masses on the same tree", "[solver][api]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const auto base = kfmm::make_distribution(kfmm::Distribution::clustered, 3000, 31);
  Problem<Space, double> prob(base);
  kfmm::Options o;
  o.tolerance = 1e-7;
  kfmm::Solver<Space, double> solver(o);
  CHECK_THROWS_AS(solver.reevaluate(prob.m, prob.a, prob.phi), kfmm::Error);
  solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
  const kfmm::Statistics first = solver.statistics();
  CHECK(first.tree_rebuilt);
  // New masses, both signs.
  const auto charged = with_random_masses(base, 4, true);
  Problem<Space, double> other(charged);
  solver.reevaluate(other.m, prob.a, prob.phi);
  CHECK_FALSE(solver.statistics().tree_rebuilt);
  CHECK(solver.statistics().far_pairs == first.far_pairs);
  Kokkos::deep_copy(prob.m, other.m);
  prob.reference(o.G, o.softening);
  const auto [err, perr] = prob.errors();
  INFO("reevaluate error " << err);
  CHECK(err <= o.tolerance);
  // Wrong size.
  Kokkos::View<double*, typename Space::memory_space> short_masses("m", 10);
  CHECK_THROWS_AS(solver.reevaluate(short_masses, prob.a, prob.phi), kfmm::Error);
}

TEMPLATE_LIST_TEST_CASE("Solver is deterministic and keeps the caller's order", "[solver][api]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const auto particles = kfmm::make_distribution(kfmm::Distribution::plummer, 2500, 41);
  Problem<Space, double> prob(particles);
  kfmm::Options o;
  o.tolerance = 1e-5;
  kfmm::Solver<Space, double> solver(o);
  solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
  auto a1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), prob.a);
  solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
  auto a2 = kfmm_test::to_host(prob.a);
  for (int i = 0; i < prob.size(); ++i) {
    for (int d = 0; d < 3; ++d) REQUIRE(a1(i, d) == a2(i, d));
  }
  // Reversing the input order reverses the output order (up to the summation order of the sums).
  kfmm::HostParticles reversed(prob.size());
  for (int i = 0; i < prob.size(); ++i) {
    const int j = prob.size() - 1 - i;
    for (int d = 0; d < 3; ++d) reversed.positions(j, d) = particles.positions(i, d);
    reversed.masses(j) = particles.masses(i);
  }
  Problem<Space, double> rev(reversed);
  kfmm::Solver<Space, double> solver2(o);
  solver2.evaluate(rev.x, rev.m, rev.a, rev.phi);
  auto a3 = kfmm_test::to_host(rev.a);
  for (int i = 0; i < prob.size(); ++i) {
    for (int d = 0; d < 3; ++d)
      CHECK(a3(prob.size() - 1 - i, d) == Catch::Approx(a1(i, d)).epsilon(1e-9).margin(1e-12));
  }
  // Potentials may be skipped.
  solver.evaluate(prob.x, prob.m, prob.a, Kokkos::View<double*, typename Space::memory_space>());
}

TEMPLATE_LIST_TEST_CASE("Options::list_build does not change the results", "[solver][api]",
                        kfmm_test::ExecutionSpaces) {
  // Both list builds place every list entry where the other does, so the evaluations are bitwise equal.
  using Space = TestType;
  const auto particles = kfmm::make_distribution(kfmm::Distribution::clustered, 3000, 43);
  Problem<Space, float> prob(particles);
  std::vector<std::vector<float>> results;
  for (const kfmm::ListBuild build :
       {kfmm::ListBuild::sort, kfmm::ListBuild::scatter, kfmm::ListBuild::automatic}) {
    INFO("list_build = " << kfmm::to_string(build));
    kfmm::Options o;
    o.tolerance = 1e-4;
    o.list_build = build;
    kfmm::Solver<Space, float> solver(o);
    solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
    const kfmm::ListBuild resolved = build != kfmm::ListBuild::automatic            ? build
                                     : kfmm::detail::is_host_execution_space<Space> ? kfmm::ListBuild::scatter
                                                                                    : kfmm::ListBuild::sort;
    CHECK(solver.statistics().list_build == resolved);
    const auto a = kfmm_test::to_host(prob.a);
    const auto phi = kfmm_test::to_host(prob.phi);
    std::vector<float> r;
    for (int i = 0; i < prob.size(); ++i) {
      for (int d = 0; d < 3; ++d) r.push_back(a(i, d));
      r.push_back(phi(i));
    }
    results.push_back(r);
    REQUIRE(results.back() == results.front());
  }
}

TEMPLATE_LIST_TEST_CASE("Solver rejects bad inputs with clear messages", "[solver][api]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Catch::Matchers::ContainsSubstring;
  const auto particles = kfmm::make_distribution(kfmm::Distribution::uniform, 100, 1);
  Problem<Space, double> prob(particles);
  kfmm::Solver<Space, double> solver;
  auto expect_error = [&](const std::string& what) {
    try {
      solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
      FAIL("no error for " << what);
    } catch (const kfmm::Error& e) {
      CHECK_THAT(std::string(e.what()), ContainsSubstring(what));
    }
  };
  auto xh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), prob.x);
  xh(42, 1) = std::numeric_limits<double>::quiet_NaN();
  Kokkos::deep_copy(prob.x, xh);
  expect_error("position of particle 42 is NaN or infinite");
  xh(42, 1) = 0.5;
  Kokkos::deep_copy(prob.x, xh);
  // After a good evaluation the build reduces the box on the device and finds the bad input only with
  // the level sizes: the error still names the particle.
  solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
  xh(3, 2) = -std::numeric_limits<double>::infinity();
  Kokkos::deep_copy(prob.x, xh);
  expect_error("position of particle 3 is NaN or infinite");
  xh(3, 2) = 0.25;
  Kokkos::deep_copy(prob.x, xh);
  auto mh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), prob.m);
  mh(7) = std::numeric_limits<double>::infinity();
  Kokkos::deep_copy(prob.m, mh);
  expect_error("mass of particle 7 is NaN or infinite");
  Kokkos::View<double* [3], typename Space::memory_space> short_acc("a", 99);
  CHECK_THROWS_AS(solver.evaluate(prob.x, prob.m, short_acc, prob.phi), kfmm::Error);
  // Invalid options and tolerances below the precision floor.
  kfmm::Options bad;
  bad.theta = 1.0;
  CHECK_THROWS_AS((kfmm::Solver<Space, double>(bad)), kfmm::Error);
  kfmm::Options tight;
  tight.tolerance = 1e-13;
  CHECK_THROWS_AS((kfmm::Solver<Space, double>(tight)), kfmm::Error);
}

TEMPLATE_LIST_TEST_CASE("Solver uses the backend's default leaf size unless one is given", "[solver][api]",
                        kfmm_test::ExecutionSpaces) {
  kfmm::Options o;
  o.tolerance = 1e-4;
  const kfmm::Solver<TestType, float> f(o);
  CHECK(f.chosen_order() <= 8);  // float's automatic orders stop at 8
  CHECK(f.chosen_leaf_size() == kfmm::default_leaf_size<TestType>(f.chosen_order()));
  const kfmm::Solver<TestType, double> d(o);
  CHECK(d.chosen_leaf_size() == kfmm::default_leaf_size<TestType>(d.chosen_order()));
  // an evaluation takes the size for its N (kfmm::default_leaf_size; on GPUs it grows in float from 1e6
  // particles on), and its statistics report it
  Problem<TestType, float> prob{kfmm::plummer_sphere(300, 11)};
  kfmm::Solver<TestType, float> g(o);
  g.evaluate(prob.x, prob.m, prob.a, prob.phi);
  CHECK(g.chosen_leaf_size() == kfmm::default_leaf_size<TestType, float>(g.chosen_order(), 300));
  CHECK(g.statistics().leaf_size == g.chosen_leaf_size());
  o.leaf_size = 37;  // an explicit leaf size is honoured as given
  CHECK(kfmm::Solver<TestType, double>(o).chosen_leaf_size() == 37);
  kfmm::Solver<TestType, float> h(o);
  h.evaluate(prob.x, prob.m, prob.a, prob.phi);
  CHECK(h.chosen_leaf_size() == 37);
  CHECK(h.statistics().leaf_size == 37);
  // a G beyond float's range would be infinite in the float kernels (every sum inf or NaN): refused,
  // while double takes it
  o.G = 1e39;
  CHECK_THROWS_WITH((kfmm::Solver<TestType, float>(o)),
                    Catch::Matchers::ContainsSubstring("Options::G = 1e+39 exceeds the range of float"));
  CHECK_NOTHROW(kfmm::Solver<TestType, double>(o));
}

// Float on the default backend only (each Solver instantiation costs compile time).
TEST_CASE("Solver in float reaches its documented floor", "[solver][accuracy]") {
  using Space = Kokkos::DefaultExecutionSpace;
  const double floor = kfmm::precision_floor<float>();
  for (auto dist : {kfmm::Distribution::plummer, kfmm::Distribution::clustered}) {
    const auto particles = kfmm::make_distribution(dist, 4000, 51);
    for (double tol : {1e-3, floor}) {
      kfmm::Options o;
      o.tolerance = 1e-7;  // below the float floor
      CHECK_THROWS_AS((kfmm::Solver<Space, float>(o)), kfmm::Error);
      o.tolerance = tol;
      for (auto acc : {kfmm::Accumulation::working, kfmm::Accumulation::wide}) {
        o.accumulation = acc;
        kfmm::Statistics s;
        const double err = solve_and_compare<Space, float>(particles, o, &s).first;
        INFO(kfmm::to_string(dist) << " float, tolerance " << tol << ", accumulation " << kfmm::to_string(acc)
                                   << ": p = " << s.order << ", theta = " << s.theta << ", error " << err);
        CHECK(err <= tol);
      }
    }
  }
}

TEST_CASE("Solver handles coordinates whose extent overflows double", "[solver][accuracy]") {
  // +-1e308 are finite but 2e308 is not: the length scale comes from half extents. Accelerations
  // (~1e-616) underflow to 0; potentials -1/1e308 - 1/2e308 and -2/1e308 are subnormal but exact.
  using Space = Kokkos::DefaultExecutionSpace;
  kfmm::HostParticles p(3);
  p.positions(0, 0) = -1e308;
  p.positions(1, 0) = 1e308;
  for (int i = 0; i < 3; ++i) p.masses(i) = 1.0;
  Problem<Space, double> prob(p);
  kfmm::Options o;
  o.tolerance = 1e-6;
  kfmm::Solver<Space, double> solver(o);
  solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
  const auto a = kfmm_test::to_host(prob.a);
  const auto phi = kfmm_test::to_host(prob.phi);
  for (int i = 0; i < 3; ++i) {
    for (int d = 0; d < 3; ++d) CHECK(a(i, d) == 0.0);
  }
  CHECK(phi(0) == Catch::Approx(-1.5e-308).epsilon(1e-12));
  CHECK(phi(1) == Catch::Approx(-1.5e-308).epsilon(1e-12));
  CHECK(phi(2) == Catch::Approx(-2e-308).epsilon(1e-12));
}

TEST_CASE("Solver in float stays finite on tight clusters at every order", "[solver][accuracy]") {
  // Two clusters of size 1e-4 in a unit box, and a background: leaves 1e-4 apart, where a local
  // coefficient |m| p! / d^(p+1) passes float's 3.4e38 from p ~ 7 on. Such node pairs must go to the
  // near field (expansion_range_separation), not overflow to inf and NaN.
  using Space = Kokkos::DefaultExecutionSpace;
  const int n = 3000;
  kfmm::HostParticles p(n);
  kfmm::Random rng(77);
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    for (int d = 0; d < 3; ++d) {
      p.positions(i, d) = c == 2 ? rng.uniform() : 0.1 + 0.8 * c + 1e-4 * rng.normal();
    }
    p.masses(i) = 1.0 / n;
  }
  for (int order : {4, 7, 9, 12, 16}) {
    kfmm::Options o;
    o.order = order;
    o.theta = 0.5;
    kfmm::Statistics s;
    const double err = solve_and_compare<Space, float>(p, o, &s).first;  // (REQUIREs finite results)
    INFO("float, p = " << order << ", theta 0.5: error " << err << ", far pairs " << s.far_pairs
                       << ", calibrated error " << s.predicted_error);
    CHECK(err <= std::max(3e-5, s.predicted_error));  // (truncation, or float's floor of ~1e-5)
    // (the box is 1 long: no length scale; sum |m| ~ 1, rounded up to 1 or 2 by its last bit)
    CHECK(s.range_separation >= kfmm::expansion_range_separation<float>(order, 0.5));
    CHECK(s.range_separation <= kfmm::expansion_range_separation<float>(order, 1.0));
    CHECK(s.far_pairs > 0);
  }
  kfmm::Options o;
  o.tolerance = kfmm::precision_floor<float>();
  kfmm::Statistics s;
  const double err = solve_and_compare<Space, float>(p, o, &s).first;
  INFO("float, tolerance " << o.tolerance << ": p = " << s.order << ", error " << err);
  CHECK(err <= o.tolerance);
  // The separation: zero without mass, growing with the order and the masses, never binding in double.
  CHECK(kfmm::expansion_range_separation<float>(9, 0.0) == 0.0);
  CHECK(kfmm::expansion_range_separation<float>(9, 1.0) == Catch::Approx(1.08e-3).epsilon(0.01));
  CHECK(kfmm::expansion_range_separation<float>(12, 1.0) > kfmm::expansion_range_separation<float>(9, 1.0));
  CHECK(kfmm::expansion_range_separation<float>(9, 1e6) > kfmm::expansion_range_separation<float>(9, 1.0));
  CHECK(kfmm::expansion_range_separation<double>(16, 1.0) < 1e-16);
}

TEST_CASE("Solver in float re-walks when reevaluated masses need a larger separation", "[solver][api]") {
  using Space = Kokkos::DefaultExecutionSpace;
  const auto base = kfmm::make_distribution(kfmm::Distribution::clustered, 3000, 5);
  Problem<Space, float> prob(base);
  kfmm::Options o;
  o.order = 9;
  o.theta = 0.5;
  kfmm::Solver<Space, float> solver(o);
  solver.evaluate(prob.x, prob.m, prob.a, prob.phi);
  const long long far_before = solver.statistics().far_pairs;
  // Masses 2^40 times larger: far pairs closer than the new separation go to the near field.
  auto heavy = base;
  for (int i = 0; i < heavy.size(); ++i) heavy.masses(i) *= 1099511627776.0;
  Problem<Space, float> other(heavy);
  solver.reevaluate(other.m, prob.a, prob.phi);
  CHECK(solver.statistics().far_pairs < far_before);
  Kokkos::deep_copy(prob.m, other.m);
  prob.reference(o.G, o.softening);
  const auto [err, perr] = prob.errors();  // (REQUIREs finite results)
  INFO("reevaluated error " << err);
  CHECK(err <= 1e-4);
}

namespace {

/// Largest |E(t) - E(0)| / |E(0)| of a leapfrog run of a Plummer sphere with FMM or direct forces.
template <class Space>
double plummer_energy_error(bool fmm, double dt, int steps, double tolerance, double softening) {
  using M = typename Space::memory_space;
  const auto p = kfmm::plummer_sphere(1000, 8);
  const int n = p.size();
  Kokkos::View<double*[3], M> x("x", n), v("v", n), a("a", n);
  Kokkos::View<double*, M> m("m", n), phi("phi", n);
  kfmm::copy_to(x, p.positions);
  kfmm::copy_to(v, p.velocities);
  kfmm::copy_to(m, p.masses);
  kfmm::Options o;
  o.tolerance = tolerance;
  o.softening = softening;
  kfmm::Solver<Space, double> solver(o);
  auto forces = [&] {
    if (fmm) {
      solver.evaluate(x, m, a, phi);
    } else {
      kfmm::direct_sum(Space(), x, m, 1.0, softening, a, phi);
    }
  };
  forces();
  if (fmm) REQUIRE(solver.statistics().far_pairs > 0);  // the far field takes part
  const double e0 = kfmm::diagnostics(Space(), x, v, m, phi).total;
  double worst = 0;
  for (int s = 1; s <= steps; ++s) {
    kfmm::kick(Space(), v, a, dt / 2);
    kfmm::drift(Space(), x, v, dt);
    forces();
    kfmm::kick(Space(), v, a, dt / 2);
    if (s % 4 == 0)
      worst = std::max(worst, std::fabs(kfmm::diagnostics(Space(), x, v, m, phi).total - e0) / std::fabs(e0));
  }
  return worst;
}

}  // namespace

TEST_CASE("A short Plummer run conserves energy within the leapfrog's error", "[solver][nbody]") {
  using Space = Kokkos::DefaultExecutionSpace;
  // Softening 0.02 and tolerance 1e-3 put the far field beyond 1.1 (the softening margin), so the
  // outer halo interacts through expansions; dt resolves the softened encounters.
  const double eps = 0.02, tol = 1e-3;
  const double direct = plummer_energy_error<Space>(false, 1.0 / 128, 32, tol, eps);
  const double fmm = plummer_energy_error<Space>(true, 1.0 / 128, 32, tol, eps);
  const double fmm_fine = plummer_energy_error<Space>(true, 1.0 / 256, 64, tol, eps);
  INFO("max |dE/E|: direct " << direct << ", fmm " << fmm << ", fmm at dt/2 " << fmm_fine);
  CHECK(direct < 1e-4);
  // The FMM's force errors add little to the integrator's own error ...
  CHECK(std::fabs(fmm - direct) <= 0.2 * direct + 1e-7);
  // ... and the error is the leapfrog's: second order in dt.
  CHECK(fmm / fmm_fine > 3.0);
  CHECK(fmm / fmm_fine < 5.0);
}
