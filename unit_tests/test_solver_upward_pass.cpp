// The fused upward pass (operators/kfmm/operators/upward_pass.hpp) against P2M followed by M2M level by
// level, on octrees from build_octree: Plummer, all particles on a line, coincident clumps, N = 0, 1, 2;
// float and double; a reused workspace (the arrival counters reset themselves); inconsistent trees
// are refused. (In the solver area: the test needs both the tree and the operators.)
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends.hpp"
#include "kfmm/kfmm.hpp"

namespace {

template <class Space, class Real>
struct UpwardCase {
  using M = typename Space::memory_space;
  using Rows = Kokkos::View<Real**, Kokkos::LayoutRight, M>;
  kfmm::Octree<Space, Real> tree;

  UpwardCase(const kfmm::HostParticles& p, int leaf_size) {
    const int n = p.size();
    Kokkos::View<Real* [3], M> x("x", n);
    Kokkos::View<Real*, M> m("m", n);
    auto xh = Kokkos::create_mirror_view(x);
    auto mh = Kokkos::create_mirror_view(m);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) xh(i, d) = static_cast<Real>(p.positions(i, d));
      mh(i) = static_cast<Real>(p.masses(i));
    }
    Kokkos::deep_copy(x, xh);
    Kokkos::deep_copy(m, mh);
    tree = kfmm::build_octree(Space(), x, m, leaf_size);
  }

  /// P2M on the leaves, then M2M over each level's internal nodes, deepest first.
  Rows reference(int order) const {
    Space space;
    Rows rows("reference", tree.num_nodes, kfmm::num_coefficients(order));
    kfmm::p2m(space, order, tree.positions, tree.masses, tree.ranges, tree.leaves, tree.centres, rows);
    auto children = kfmm_test::to_host(tree.num_children);
    for (int l = tree.num_levels - 2; l >= 0; --l) {
      std::vector<int> parents;
      for (int q = tree.level_offsets[l]; q < tree.level_offsets[l + 1]; ++q)
        if (children(q) > 0) parents.push_back(q);
      if (parents.empty()) continue;
      kfmm::m2m(space, order, kfmm_test::device_ints<M>(parents, "parents"), tree.first_child,
                tree.num_children, tree.centres, rows);
    }
    return rows;
  }

  Rows fused(int order, kfmm::UpwardPassWorkspace<M>& ws, const kfmm::ExpansionOptions& options = {}) const {
    Rows rows("fused", tree.num_nodes, kfmm::num_coefficients(order));
    kfmm::upward_pass(Space(), order, tree.positions, tree.masses, tree.ranges, tree.leaves, tree.parent,
                      tree.first_child, tree.num_children, tree.centres, rows, ws, options);
    return rows;
  }
};

/// Every row agrees to `tol` relative to the row's largest coefficient (bitwise on host backends,
/// where both paths run one thread per team in the same order).
template <class Rows>
void expect_same_rows(const Rows& a, const Rows& b, double tol, bool bitwise) {
  auto ha = kfmm_test::to_host(a);
  auto hb = kfmm_test::to_host(b);
  REQUIRE(ha.extent(0) == hb.extent(0));
  for (size_t q = 0; q < ha.extent(0); ++q) {
    double scale = 0;
    for (size_t k = 0; k < ha.extent(1); ++k)
      scale = std::max(scale, std::abs(static_cast<double>(hb(q, k))));
    for (size_t k = 0; k < ha.extent(1); ++k) {
      INFO("node " << q << " coefficient " << k);
      REQUIRE(std::isfinite(static_cast<double>(ha(q, k))));
      if (bitwise) {
        REQUIRE(ha(q, k) == hb(q, k));
      } else {
        REQUIRE(std::abs(static_cast<double>(ha(q, k)) - static_cast<double>(hb(q, k))) <= tol * scale);
      }
    }
  }
}

template <class Space, class Real>
void check_inputs(double tol) {
  constexpr bool host = kfmm::detail::is_host_execution_space<Space>;
  std::vector<std::pair<std::string, kfmm::HostParticles>> inputs;
  inputs.emplace_back("plummer", kfmm::plummer_sphere(3000, 5));
  kfmm::HostParticles line(700);    // all on the x axis: a thin, deep tree
  kfmm::HostParticles clumps(900);  // three clumps of coincident particles and a sprinkle
  for (int i = 0; i < 700; ++i) {
    line.positions(i, 0) = std::sin(0.37 * i) * 3.0;
    line.masses(i) = 1.0 + (i % 5);
  }
  for (int i = 0; i < 900; ++i) {
    const int c = i % 4;
    for (int d = 0; d < 3; ++d) clumps.positions(i, d) = c < 3 ? 0.25 * c + 0.1 * d : std::cos(1.3 * i + d);
    clumps.masses(i) = c == 1 ? -0.5 : 1.0;  // charges of both signs
  }
  inputs.emplace_back("line", line);
  inputs.emplace_back("clumps", clumps);
  for (int n : {0, 1, 2}) inputs.emplace_back("n=" + std::to_string(n), kfmm::plummer_sphere(n, 9));
  for (const auto& [name, particles] : inputs) {
    for (int leaf : {1, 16}) {
      const UpwardCase<Space, Real> c(particles, leaf);
      for (int order : {0, 4, 7}) {
        INFO(name << ", leaf " << leaf << ", order " << order);
        kfmm::UpwardPassWorkspace<typename Space::memory_space> ws;
        const auto ref = c.reference(order);
        // twice with one workspace: the arrival counters must be back at zero
        for (int rep = 0; rep < 2; ++rep) expect_same_rows(c.fused(order, ws), ref, tol, host);
      }
    }
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("upward_pass equals P2M then M2M level by level", "[solver][upward]",
                        kfmm_test::ExecutionSpaces) {
  check_inputs<TestType, double>(1e-13);
  check_inputs<TestType, float>(2e-6);
}

TEMPLATE_LIST_TEST_CASE("upward_pass refuses inconsistent trees", "[solver][upward]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using M = typename Space::memory_space;
  const UpwardCase<Space, double> c(kfmm::plummer_sphere(500, 3), 8);
  REQUIRE(c.tree.num_nodes > 9);
  kfmm::UpwardPassWorkspace<M> ws;
  // A child that names another parent: the counters of both would be wrong.
  Kokkos::View<int*, M> parent("parent", c.tree.num_nodes);
  Kokkos::deep_copy(parent, c.tree.parent);
  auto first_child = kfmm_test::to_host(c.tree.first_child);
  auto hp = kfmm_test::to_host(parent);
  hp(first_child(0)) = 5;
  Kokkos::deep_copy(parent, hp);
  Kokkos::View<double**, Kokkos::LayoutRight, M> rows("rows", c.tree.num_nodes, kfmm::num_coefficients(4));
  REQUIRE_THROWS_AS(
      kfmm::upward_pass(Space(), 4, c.tree.positions, c.tree.masses, c.tree.ranges, c.tree.leaves, parent,
                        c.tree.first_child, c.tree.num_children, c.tree.centres, rows, ws),
      kfmm::Error);
  // Too few multipole columns, a bad order.
  Kokkos::View<double**, Kokkos::LayoutRight, M> narrow("narrow", c.tree.num_nodes, 3);
  REQUIRE_THROWS_AS(
      kfmm::upward_pass(Space(), 4, c.tree.positions, c.tree.masses, c.tree.ranges, c.tree.leaves,
                        c.tree.parent, c.tree.first_child, c.tree.num_children, c.tree.centres, narrow, ws),
      kfmm::Error);
  REQUIRE_THROWS_AS(
      kfmm::upward_pass(Space(), 17, c.tree.positions, c.tree.masses, c.tree.ranges, c.tree.leaves,
                        c.tree.parent, c.tree.first_child, c.tree.num_children, c.tree.centres, rows, ws),
      kfmm::Error);
}
