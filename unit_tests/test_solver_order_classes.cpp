// Per-pair M2L orders (kfmm/drivers/order_classes.hpp): the class split partitions the walk's far list
// by the ratio rule, and the Solver with classes stays within the error of the full order.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends.hpp"
#include "kfmm/kfmm.hpp"

namespace {

template <class Space>
struct Particles {
  using M = typename Space::memory_space;
  Kokkos::View<double* [3], M> x, a, a_ref;
  Kokkos::View<double*, M> m, phi, phi_ref;
  explicit Particles(const kfmm::HostParticles& p)
      : x("x", p.size()),
        a("a", p.size()),
        a_ref("a_ref", p.size()),
        m("m", p.size()),
        phi("phi", p.size()),
        phi_ref("phi_ref", p.size()) {
    kfmm::copy_to(x, p.positions);
    kfmm::copy_to(m, p.masses);
    kfmm::direct_sum(Space(), x, m, 1.0, 0.0, a_ref, phi_ref);
  }
  double error() const {
    auto ah = kfmm_test::to_host(a);
    auto rh = kfmm_test::to_host(a_ref);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < ah.extent(0); ++i)
      for (int d = 0; d < 3; ++d) {
        num += (ah(i, d) - rh(i, d)) * (ah(i, d) - rh(i, d));
        den += rh(i, d) * rh(i, d);
      }
    return std::sqrt(num / den);
  }
};

}  // namespace

TEST_CASE("order classes: orders p, p - 2, .. down to 1 and bounds that shrink with the order",
          "[solver][order_classes]") {
  const kfmm::OrderClasses c = kfmm::make_order_classes(9, 0.7, 4, 0.3);
  REQUIRE(c.count == 4);
  CHECK(c.order[0] == 9);
  CHECK(c.order[3] == 3);
  for (int k = 1; k < c.count; ++k) {
    // rho_k^(q_k + 1) = margin theta^(p+1)
    const double rho = std::sqrt(c.ratio_squared[k]);
    CHECK(std::abs(std::pow(rho, c.order[k] + 1) / (0.3 * std::pow(0.7, 10)) - 1) < 1e-12);
    CHECK(c.ratio_squared[k] < c.ratio_squared[k - 1]);
  }
  CHECK(kfmm::make_order_classes(2, 0.5, 4, 0.1).count == 1);  // (p - 2 = 0: no lower class)
  CHECK(kfmm::make_order_classes(4, 0.5, 4, 0.1).count == 2);
  CHECK(kfmm::make_order_classes(9, 0.7, 1, 0.3).count == 1);
  CHECK_THROWS_AS(kfmm::make_order_classes(9, 0.7, 5, 0.3), kfmm::Error);
  CHECK_THROWS_AS(kfmm::make_order_classes(9, 0.7, 4, 0.0), kfmm::Error);
  CHECK_THROWS_AS(kfmm::make_order_classes(9, 0.7, 4, 1.5), kfmm::Error);
}

TEMPLATE_LIST_TEST_CASE("order classes partition the far list by the ratio rule", "[solver][order_classes]",
                        kfmm_test::ExecutionSpaces) {
  using M = typename TestType::memory_space;
  const TestType space;
  const auto p = kfmm::make_distribution(kfmm::Distribution::plummer, 20000, 11);
  Particles<TestType> d(p);
  const auto tree = kfmm::build_octree(space, d.x, d.m, 32);
  const double theta = 0.7;
  const auto lists = kfmm::dual_tree_walk(space, tree, kfmm::WalkOptions{theta});
  const kfmm::OrderClasses classes = kfmm::make_order_classes(9, theta, 4, 0.3);
  kfmm::FarListsByOrder<M> split;
  split.split(space, lists.far, tree.centres, tree.radii, classes);

  auto c = kfmm_test::to_host(tree.centres);
  auto r = kfmm_test::to_host(tree.radii);
  auto targets = kfmm_test::to_host(lists.far.targets);
  auto offsets = kfmm_test::to_host(lists.far.offsets);
  auto sources = kfmm_test::to_host(lists.far.sources);
  const int rows = lists.far.num_rows();
  // The class of every pair on the host, from the rule.
  const auto class_of = [&](int t, int s) {
    const double dx = c(t, 0) - c(s, 0), dy = c(t, 1) - c(s, 1), dz = c(t, 2) - c(s, 2);
    const double rr = (r(t) + r(s)) * (r(t) + r(s)), d2 = dx * dx + dy * dy + dz * dz;
    int k = 0;
    while (k + 1 < classes.count && rr <= classes.ratio_squared[k + 1] * d2) ++k;
    return k;
  };
  std::vector<std::vector<std::vector<int>>> expected(classes.count, std::vector<std::vector<int>>(rows));
  std::vector<long long> per_class(classes.count, 0);
  for (int row = 0; row < rows; ++row)
    for (int j = offsets(row); j < offsets(row + 1); ++j) {
      const int k = class_of(targets(row), sources(j));
      expected[k][row].push_back(sources(j));
      ++per_class[k];
    }
  // Every non-empty class is one list, in order of decreasing order, with the same rows.
  std::size_t listed = 0;
  long long total = 0;
  for (int k = 0; k < classes.count; ++k) {
    if (per_class[k] == 0) continue;
    REQUIRE(listed < split.lists.size());
    CHECK(split.orders[listed] == classes.order[k]);
    const auto& list = split.lists[listed++];
    REQUIRE(list.num_rows() == rows);
    auto lt = kfmm_test::to_host(list.targets);
    auto lo = kfmm_test::to_host(list.offsets);
    auto ls = kfmm_test::to_host(list.sources);
    CHECK(lo(0) == 0);
    CHECK(static_cast<long long>(ls.extent(0)) == per_class[k]);
    int mismatched_rows = 0;
    for (int row = 0; row < rows; ++row) {
      std::vector<int> got(ls.data() + lo(row), ls.data() + lo(row + 1));
      mismatched_rows += (lt(row) == targets(row) && got == expected[k][row]) ? 0 : 1;  // (list order kept)
    }
    CHECK(mismatched_rows == 0);
    total += per_class[k];
  }
  CHECK(listed == split.lists.size());
  CHECK(total == lists.far.num_pairs());
  // At this opening angle the lower classes hold most pairs (the point of the split).
  CHECK(per_class[0] < total / 2);
}

TEMPLATE_LIST_TEST_CASE("Solver with per-pair M2L orders stays within the full order's error",
                        "[solver][order_classes]", kfmm_test::ExecutionSpaces) {
  const TestType space;
  for (const auto distribution : {kfmm::Distribution::plummer, kfmm::Distribution::uniform}) {
    Particles<TestType> d(kfmm::make_distribution(distribution, 12000, 5));
    kfmm::Options o;
    o.order = 8;
    o.theta = 0.65;
    o.leaf_size = 32;
    kfmm::Solver<TestType, double> full(o);
    full.evaluate(d.x, d.m, d.a, d.phi);
    const double e_full = d.error();
    o.m2l_order_classes = 4;
    o.m2l_order_margin = 0.1;
    kfmm::Solver<TestType, double> tight(o);
    tight.evaluate(d.x, d.m, d.a, d.phi);
    const double e_tight = d.error();
    tight.evaluate(d.x, d.m, d.a, d.phi);  // (the same lists again: same result)
    CHECK(d.error() == e_tight);
    o.m2l_order_margin = 1.0;
    kfmm::Solver<TestType, double> loose(o);
    loose.evaluate(d.x, d.m, d.a, d.phi);
    const double e_loose = d.error();
    INFO("full " << e_full << ", margin 0.1 " << e_tight << ", margin 1 " << e_loose);
    CHECK(e_full < 5e-4);
    CHECK(e_tight <= 1.5 * e_full);
    CHECK(e_tight != e_full);  // (lower orders were used)
    // Margin 1 lets every pair reach the worst accepted pair's bound: larger, still bounded.
    CHECK(e_loose <= 30 * e_full);
    CHECK(e_loose > e_tight);
  }
}
