// The octree against slow host references: Morton order, cell structure, leaf rule, moments.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/error.hpp"
#include "test_tree_inputs.hpp"

namespace {

using kfmm_tree_test::HostTree;
using kfmm_tree_test::Input;

std::uint64_t prefix(std::uint64_t key, int level) {
  return level == 0 ? 0 : key >> (3 * (21 - level));
}

/// Checks every structural invariant of a tree built from `in` (positions rounded to Real).
template <class Real>
void check_structure(const Input& in, const HostTree<Real>& t) {
  const int n = in.size();
  INFO(in.name << " n = " << n << " leaf_size = " << t.leaf_size);
  REQUIRE(t.n == n);
  if (n == 0) {
    REQUIRE(t.num_nodes == 0);
    REQUIRE(t.num_leaves == 0);
    REQUIRE(t.num_levels == 0);
    REQUIRE(t.max_leaf_particles == 0);
    return;
  }
  // The host-side leaf bound: leaf_size (at most N) unless a leaf lies at the key resolution.
  REQUIRE(t.max_leaf_particles == (t.num_levels <= 21 ? std::min(t.leaf_size, n) : n));
  // Permutation and gathered particles.
  std::vector<int> sorted_perm = t.permutation;
  std::sort(sorted_perm.begin(), sorted_perm.end());
  for (int i = 0; i < n; ++i) REQUIRE(sorted_perm[i] == i);
  for (int s = 0; s < n; ++s) {
    const int i = t.permutation[s];
    for (int a = 0; a < 3; ++a) REQUIRE(t.positions[3 * s + a] == static_cast<Real>(in.x[3 * i + a]));
    REQUIRE(t.masses[s] == static_cast<Real>(in.m[i]));
  }
  // Keys: the naive frame and quantisation, sorted, stable.
  double lo[3], hi[3];
  for (int a = 0; a < 3; ++a) {
    lo[a] = hi[a] = static_cast<Real>(in.x[a]);
    for (int i = 0; i < n; ++i) {
      lo[a] = std::min<double>(lo[a], static_cast<Real>(in.x[3 * i + a]));
      hi[a] = std::max<double>(hi[a], static_cast<Real>(in.x[3 * i + a]));
    }
  }
  double edge = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]});
  if (!(edge > 0)) edge = 1;
  for (int s = 0; s < n; ++s) {
    std::uint32_t c[3];
    for (int a = 0; a < 3; ++a) {
      const double q = std::floor((static_cast<double>(t.positions[3 * s + a]) - lo[a]) / edge * 2097152.0);
      c[a] = static_cast<std::uint32_t>(std::min(std::max(q, 0.0), 2097151.0));
    }
    REQUIRE(t.keys[s] == kfmm::morton_encode(c[0], c[1], c[2]));
    // Sorted by the cells of the sorted levels, in caller order within a cell: either all 21 levels
    // or more levels than the tree has (a partial sort that resolves every node).
    if (s > 0) {
      const int l = t.sorted_levels;
      REQUIRE(prefix(t.keys[s - 1], l) <= prefix(t.keys[s], l));
      if (prefix(t.keys[s - 1], l) == prefix(t.keys[s], l)) REQUIRE(t.permutation[s - 1] < t.permutation[s]);
    }
  }
  REQUIRE((t.sorted_levels == 21 || t.num_levels - 1 <= t.sorted_levels));
  // Levels and node table.
  REQUIRE(static_cast<int>(t.level_offsets.size()) == t.num_levels + 1);
  REQUIRE(t.level_offsets[0] == 0);
  REQUIRE(t.level_offsets[1] == 1);
  REQUIRE(t.level_offsets.back() == t.num_nodes);
  REQUIRE(t.num_levels <= 22);
  REQUIRE(t.parent[0] == -1);
  REQUIRE(t.begin[0] == 0);
  REQUIRE(t.end[0] == n);
  std::vector<int> leaves_found;
  for (int l = 0; l < t.num_levels; ++l) {
    REQUIRE(t.level_offsets[l] < t.level_offsets[l + 1]);  // no empty level below the deepest
    for (int k = t.level_offsets[l]; k < t.level_offsets[l + 1]; ++k) {
      INFO("node " << k << " level " << l);
      REQUIRE(t.level[k] == l);
      REQUIRE(t.begin[k] < t.end[k]);
      if (k > t.level_offsets[l]) REQUIRE(t.begin[k - 1] < t.begin[k]);  // Morton order within a level
      // A node is exactly one Morton cell of its level.
      const auto p = prefix(t.keys[t.begin[k]], l);
      REQUIRE(prefix(t.keys[t.end[k] - 1], l) == p);
      if (t.begin[k] > 0) REQUIRE(prefix(t.keys[t.begin[k] - 1], l) != p);
      if (t.end[k] < n) REQUIRE(prefix(t.keys[t.end[k]], l) != p);
      // The leaf rule.
      const int count = t.end[k] - t.begin[k];
      const bool should_split = count > t.leaf_size && l < 21;
      REQUIRE(t.is_leaf(k) == !should_split);
      if (t.is_leaf(k)) REQUIRE(count <= t.max_leaf_particles);
      if (t.is_leaf(k)) {
        REQUIRE(t.first_child[k] == -1);
        leaves_found.push_back(k);
      } else {
        const int f = t.first_child[k], c = t.num_children[k];
        REQUIRE(c >= 1);
        REQUIRE(c <= 8);
        REQUIRE(f >= t.level_offsets[l + 1]);
        REQUIRE(f + c <= t.level_offsets[l + 2]);
        int expect_begin = t.begin[k];
        for (int ch = f; ch < f + c; ++ch) {
          REQUIRE(t.parent[ch] == k);
          REQUIRE(t.begin[ch] == expect_begin);
          expect_begin = t.end[ch];
        }
        REQUIRE(expect_begin == t.end[k]);
      }
      if (k > 0) {
        const int par = t.parent[k];
        REQUIRE(t.level[par] == l - 1);
        REQUIRE(t.first_child[par] <= k);
        REQUIRE(k < t.first_child[par] + t.num_children[par]);
      }
    }
  }
  // Leaves: exactly the childless nodes, in Morton order, partitioning the particles.
  REQUIRE(t.num_leaves == static_cast<int>(leaves_found.size()));
  std::vector<int> leaves = t.leaves;
  REQUIRE(std::set<int>(leaves.begin(), leaves.end()) ==
          std::set<int>(leaves_found.begin(), leaves_found.end()));
  int expect = 0;
  for (int leaf : leaves) {
    REQUIRE(t.begin[leaf] == expect);
    expect = t.end[leaf];
  }
  REQUIRE(expect == n);
}

/// Centres, radii and masses against sequential host sums over each node's particles.
template <class Real>
void check_moments(const Input& in, const HostTree<Real>& t) {
  INFO(in.name << " n = " << in.size());
  const double eps = sizeof(Real) == 4 ? 1.2e-7 : 2.3e-16;
  // Centres are accumulated relative to the box corner: their error scales with the box extent.
  double extent = 0;
  for (int a = 0; a < 3 && t.num_nodes > 0; ++a) {
    double lo = t.positions[a], hi = t.positions[a];
    for (int s = 0; s < t.n; ++s) {
      lo = std::min<double>(lo, t.positions[3 * s + a]);
      hi = std::max<double>(hi, t.positions[3 * s + a]);
    }
    extent = std::max(extent, hi - lo);
  }
  for (int k = 0; k < t.num_nodes; ++k) {
    INFO("node " << k);
    long double w = 0, wx[3] = {0, 0, 0}, m = 0, am = 0;
    double blo[3], bhi[3], scale = 0;
    for (int a = 0; a < 3; ++a) blo[a] = bhi[a] = t.positions[3 * t.begin[k] + a];
    for (int s = t.begin[k]; s < t.end[k]; ++s) {
      const long double ms = t.masses[s];
      w += std::fabs(ms);
      m += ms;
      am += std::fabs(ms);
      for (int a = 0; a < 3; ++a) {
        const double x = t.positions[3 * s + a];
        wx[a] += std::fabs(ms) * x;
        blo[a] = std::min(blo[a], x);
        bhi[a] = std::max(bhi[a], x);
        scale = std::max(scale, std::fabs(x));
      }
    }
    double c[3];
    for (int a = 0; a < 3; ++a) {
      const double ref = w > 0 ? static_cast<double>(wx[a] / w) : 0.5 * (blo[a] + bhi[a]);
      c[a] = t.centres[3 * k + a];
      REQUIRE(std::fabs(c[a] - ref) <= eps * (scale + 8 * extent) + 1e-300);
      REQUIRE(c[a] >= blo[a] - 2 * eps * scale);  // inside the particles' box
      REQUIRE(c[a] <= bhi[a] + 2 * eps * scale);
    }
    REQUIRE(std::fabs(static_cast<double>(t.node_masses[k]) - static_cast<double>(m)) <=
            4 * eps * static_cast<double>(am) + 1e-300);
    REQUIRE(std::fabs(static_cast<double>(t.node_abs_masses[k]) - static_cast<double>(am)) <=
            4 * eps * static_cast<double>(am) + 1e-300);
    // Radius: a bound on every particle distance from the stored centre...
    double exact = 0;
    for (int s = t.begin[k]; s < t.end[k]; ++s) {
      double d2 = 0;
      for (int a = 0; a < 3; ++a) d2 += (t.positions[3 * s + a] - c[a]) * (t.positions[3 * s + a] - c[a]);
      exact = std::max(exact, std::sqrt(d2));
    }
    const double r = t.radii[k];
    REQUIRE(r >= exact * (1 - 1e-15));
    if (t.is_leaf(k)) {
      // ... exact for leaves ...
      REQUIRE(r <= exact * (1 + 2 * eps) + 1e-300);
    } else {
      // ... and no looser than both the children's spheres and the box corner for internal nodes.
      double children = 0, corner2 = 0;
      for (int ch = t.first_child[k]; ch < t.first_child[k] + t.num_children[k]; ++ch) {
        double d2 = 0;
        for (int a = 0; a < 3; ++a) d2 += (t.centres[3 * ch + a] - c[a]) * (t.centres[3 * ch + a] - c[a]);
        children = std::max(children, std::sqrt(d2) + static_cast<double>(t.radii[ch]));
      }
      for (int a = 0; a < 3; ++a) {
        const double e = std::max(c[a] - blo[a], bhi[a] - c[a]);
        corner2 += e * e;
      }
      REQUIRE(r <= std::min(children, std::sqrt(corner2)) * (1 + 4 * eps) + 1e-300);
    }
  }
}

template <class Space, class Real>
void check_all_inputs(int leaf_size) {
  for (const auto& in : kfmm_tree_test::standard_inputs()) {
    kfmm_tree_test::DeviceInput<Space, Real> d(in);
    const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, leaf_size);
    const HostTree<Real> t(tree);
    check_structure(in, t);
    check_moments(in, t);
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("octree cells leaves and moments match host references", "[tree][octree]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  for (int leaf_size : {1, 3, 16, 64}) {
    check_all_inputs<Space, double>(leaf_size);
    check_all_inputs<Space, float>(leaf_size);
  }
}

TEMPLATE_LIST_TEST_CASE("octree leaf rule holds for leaves longer than one window run", "[tree][octree]",
                        kfmm_test::ExecutionSpaces) {
  // Leaf sizes around and beyond the 1024-window runs of window_levels.hpp (several runs per window).
  using Space = TestType;
  for (const char* name : {"plummer", "coincident"}) {
    const auto in = kfmm_tree_test::make_input(name, 12000, 21);
    kfmm_tree_test::DeviceInput<Space, double> d(in);
    for (int leaf_size : {1022, 1023, 1024, 2500, 11999, 12000}) {
      INFO(name << " leaf_size " << leaf_size);
      const HostTree<double> t(kfmm::build_octree(Space(), d.positions, d.masses, leaf_size));
      check_structure(in, t);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("octree keeps coincident particles in one leaf beyond leaf_size", "[tree][octree]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  auto in = kfmm_tree_test::make_input("coincident", 400, 5);
  kfmm_tree_test::DeviceInput<Space, double> d(in);
  const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 8);
  const HostTree<double> t(tree);
  check_structure(in, t);
  int biggest = 0, biggest_level = 0;
  for (int leaf : t.leaves) {
    if (t.end[leaf] - t.begin[leaf] > biggest) {
      biggest = t.end[leaf] - t.begin[leaf];
      biggest_level = t.level[leaf];
    }
  }
  REQUIRE(biggest == 300);  // three quarters of the particles share one point
  REQUIRE(biggest_level == 21);
  REQUIRE(t.num_levels == 22);
  // All particles at one point: a single root leaf would exceed leaf_size; a chain down to level 21.
  auto same = kfmm_tree_test::make_input("coincident", 3, 5);
  for (int i = 0; i < 3; ++i)
    for (int a = 0; a < 3; ++a) same.x[3 * i + a] = 0.125;
  kfmm_tree_test::DeviceInput<Space, float> ds(same);
  const HostTree<float> ts(kfmm::build_octree(Space(), ds.positions, ds.masses, 2));
  check_structure(same, ts);
  REQUIRE(ts.num_nodes == 22);
  REQUIRE(ts.num_leaves == 1);
  REQUIRE(ts.radii[0] == 0.0f);
}

TEMPLATE_LIST_TEST_CASE("octree tiny inputs", "[tree][octree]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  // N = 0: an empty tree with zero nodes.
  kfmm_tree_test::DeviceInput<Space, double> d0(kfmm_tree_test::make_input("uniform", 0));
  const auto t0 = kfmm::build_octree(Space(), d0.positions, d0.masses, 4);
  REQUIRE(t0.num_nodes == 0);
  REQUIRE(t0.leaves.extent(0) == 0);
  REQUIRE(t0.level_offsets == std::vector<int>{0});
  // N = 1: one root leaf of radius 0 centred on the particle.
  const auto in1 = kfmm_tree_test::make_input("uniform", 1);
  kfmm_tree_test::DeviceInput<Space, double> d1(in1);
  const HostTree<double> t1(kfmm::build_octree(Space(), d1.positions, d1.masses, 1));
  REQUIRE(t1.num_nodes == 1);
  REQUIRE(t1.leaves == std::vector<int>{0});
  REQUIRE(t1.radii[0] == 0.0);
  for (int a = 0; a < 3; ++a) REQUIRE(t1.centres[a] == in1.x[a]);
  // N = 2 with leaf_size 1: the root and two leaves (they differ in the first octant digit or deeper).
  const auto in2 = kfmm_tree_test::make_input("uniform", 2);
  kfmm_tree_test::DeviceInput<Space, double> d2(in2);
  const HostTree<double> t2(kfmm::build_octree(Space(), d2.positions, d2.masses, 1));
  check_structure(in2, t2);
  REQUIRE(t2.num_leaves == 2);
}

/// Two host copies of trees describe the same tree: order, topology and moments, bitwise.
template <class Real>
void require_same_tree(const HostTree<Real>& a, const HostTree<Real>& b) {
  REQUIRE(a.permutation == b.permutation);
  REQUIRE(a.level_offsets == b.level_offsets);
  REQUIRE(a.begin == b.begin);
  REQUIRE(a.end == b.end);
  REQUIRE(a.parent == b.parent);
  REQUIRE(a.num_children == b.num_children);
  REQUIRE(a.leaves == b.leaves);
  REQUIRE(a.centres == b.centres);
  REQUIRE(a.radii == b.radii);
}

TEMPLATE_LIST_TEST_CASE("octree rejects bad input", "[tree][octree]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using M = typename Space::memory_space;
  const auto in = kfmm_tree_test::make_input("uniform", 10);
  kfmm_tree_test::DeviceInput<Space, double> d(in);
  REQUIRE_THROWS_AS(kfmm::build_octree(Space(), d.positions, d.masses, 0), kfmm::Error);
  Kokkos::View<double*, M> short_masses("m", 9);
  REQUIRE_THROWS_AS(kfmm::build_octree(Space(), d.positions, short_masses, 4), kfmm::Error);
  auto bad = in;
  bad.x[3 * 4 + 2] = INFINITY;
  kfmm_tree_test::DeviceInput<Space, double> db(bad);
  REQUIRE_THROWS_AS(kfmm::build_octree(Space(), db.positions, db.masses, 4), kfmm::Error);
  bad = in;
  bad.m[7] = std::nan("");
  kfmm_tree_test::DeviceInput<Space, double> dm(bad);
  REQUIRE_THROWS_AS(kfmm::build_octree(Space(), dm.positions, dm.masses, 4), kfmm::Error);
  // The box stays on the device until the level sizes come back: the keys, the sort and the topology of
  // NaN coordinates run first and must stay in bounds; the error then counts the bad inputs, and a tree
  // and workspace that saw it build the next input as a fresh build does.
  {
    auto many = kfmm_tree_test::make_input("plummer", 5000, 3);
    const auto good = many;
    for (int i = 0; i < 5000; i += 7) many.x[3 * i + i % 3] = i % 2 ? std::nan("") : -INFINITY;
    kfmm_tree_test::DeviceInput<Space, double> dn(many), dg(good);
    kfmm::Octree<Space, double> tree;
    kfmm::OctreeWorkspace<M> ws;
    try {
      kfmm::build_octree(Space(), dn.positions, dn.masses, 8, tree, ws);
      FAIL("no error for NaN and infinite coordinates");
    } catch (const kfmm::Error& e) {
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::ContainsSubstring("715 coordinates or masses are NaN"));
    }
    kfmm::build_octree(Space(), dg.positions, dg.masses, 8, tree, ws);
    require_same_tree(HostTree<double>(tree),
                      HostTree<double>(kfmm::build_octree(Space(), dg.positions, dg.masses, 8)));
  }
  auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 4);
  REQUIRE_THROWS_AS(kfmm::update_moments(Space(), tree, short_masses), kfmm::Error);
  REQUIRE_THROWS_AS(kfmm::update_moments(Space(), tree, dm.masses), kfmm::Error);
}

TEMPLATE_LIST_TEST_CASE("update_moments equals a rebuild with the new masses", "[tree][octree]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  auto in = kfmm_tree_test::make_input("plummer", 3000, 21);
  kfmm_tree_test::DeviceInput<Space, float> d(in);
  auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 16);
  auto in2 = in;
  for (int i = 0; i < in.size(); ++i) in2.m[i] = (i % 5 == 0 ? -2.0 : 1.0) * in.m[i] * (1 + i % 7);
  kfmm_tree_test::DeviceInput<Space, float> d2(in2);
  kfmm::update_moments(Space(), tree, d2.masses);
  const HostTree<float> updated(tree);
  const HostTree<float> rebuilt(kfmm::build_octree(Space(), d2.positions, d2.masses, 16));
  REQUIRE(updated.centres == rebuilt.centres);
  REQUIRE(updated.radii == rebuilt.radii);
  REQUIRE(updated.node_masses == rebuilt.node_masses);
  REQUIRE(updated.masses == rebuilt.masses);
  check_moments(in2, updated);
}

TEMPLATE_LIST_TEST_CASE("permutation helpers round trip", "[tree][octree]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using M = typename Space::memory_space;
  const auto in = kfmm_tree_test::make_input("plummer", 500, 2);
  kfmm_tree_test::DeviceInput<Space, double> d(in);
  const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 8);
  Kokkos::View<double*[3], M> sorted("sorted", 500), back("back", 500);
  kfmm::permute_to_tree_order(Space(), tree, d.positions, sorted);
  kfmm::permute_to_caller_order(Space(), tree, sorted, back);
  const auto hs = kfmm_test::to_host(sorted), hp = kfmm_test::to_host(tree.positions);
  const auto hb = kfmm_test::to_host(back), hi = kfmm_test::to_host(d.positions);
  for (int i = 0; i < 500; ++i)
    for (int a = 0; a < 3; ++a) {
      REQUIRE(hs(i, a) == hp(i, a));
      REQUIRE(hb(i, a) == hi(i, a));
    }
  Kokkos::View<double*, M> m_sorted("ms", 500);
  kfmm::permute_to_tree_order(Space(), tree, d.masses, m_sorted);
  const auto hm = kfmm_test::to_host(m_sorted), htm = kfmm_test::to_host(tree.masses);
  for (int i = 0; i < 500; ++i) REQUIRE(hm(i) == htm(i));
}

#if defined(KOKKOS_ENABLE_SERIAL) && defined(KOKKOS_ENABLE_OPENMP)
TEST_CASE("octree is bitwise identical on Serial and OpenMP", "[tree][octree]") {
  for (const char* name : {"plummer", "coincident", "mixed_sign"}) {
    const auto in = kfmm_tree_test::make_input(name, 30000, 9);
    kfmm_tree_test::DeviceInput<Kokkos::Serial, double> ds(in);
    kfmm_tree_test::DeviceInput<Kokkos::OpenMP, double> dp(in);
    const HostTree<double> a(kfmm::build_octree(Kokkos::Serial(), ds.positions, ds.masses, 32));
    const HostTree<double> b(kfmm::build_octree(Kokkos::OpenMP(), dp.positions, dp.masses, 32));
    REQUIRE(a.permutation == b.permutation);
    REQUIRE(a.level_offsets == b.level_offsets);
    REQUIRE(a.begin == b.begin);
    REQUIRE(a.end == b.end);
    REQUIRE(a.parent == b.parent);
    REQUIRE(a.first_child == b.first_child);
    REQUIRE(a.num_children == b.num_children);
    REQUIRE(a.leaves == b.leaves);
    REQUIRE(a.centres == b.centres);
    REQUIRE(a.radii == b.radii);
    REQUIRE(a.node_masses == b.node_masses);
  }
}
#endif

TEMPLATE_LIST_TEST_CASE("rebuilding into a tree with a workspace equals a fresh build", "[tree][octree]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  kfmm::Octree<Space, double> tree, packed_tree;
  kfmm::OctreeWorkspace<typename Space::memory_space> ws, packed_ws;
  packed_ws.gather_records = 1;  // (the second sequence gathers through packed records)
  // Same N twice (arrays reused), then other sizes (arrays replaced), then N = 0 and back.
  int k = 0;
  for (const auto& in :
       {kfmm_tree_test::make_input("plummer", 2000, 1), kfmm_tree_test::make_input("uniform", 2000, 2),
        kfmm_tree_test::make_input("coincident", 900, 3), kfmm_tree_test::make_input("uniform", 0),
        kfmm_tree_test::make_input("line", 3000, 4)}) {
    INFO("build " << k++ << " " << in.name);
    kfmm_tree_test::DeviceInput<Space, double> d(in);
    kfmm::build_octree(Space(), d.positions, d.masses, 8, tree, ws);
    const HostTree<double> reused(tree);
    const HostTree<double> fresh(kfmm::build_octree(Space(), d.positions, d.masses, 8));
    require_same_tree(reused, fresh);
    // The same sequence through a workspace that gathers from records: sizes change, N = 0 between, and
    // after the coincident input the next build's full sort retries partially with fresh keys (records).
    kfmm::build_octree(Space(), d.positions, d.masses, 8, packed_tree, packed_ws);
    const HostTree<double> packed(packed_tree);
    require_same_tree(packed, fresh);
    REQUIRE(packed.positions == fresh.positions);
    REQUIRE(packed.masses == fresh.masses);
    REQUIRE(reused.sorted_levels == fresh.sorted_levels);
    check_structure(in, reused);
    // Shallow trees sort only the levels a default guess allows; the coincident one needs all 21.
    if (in.size() > 0) REQUIRE((reused.sorted_levels == 21) == (in.name == std::string("coincident")));
    // The topology's tiling (positions per thread) does not change the tree.
    for (int tile : {1, 3, 64, 1 << 20}) {
      INFO("topology_tile " << tile);
      kfmm::OctreeWorkspace<typename Space::memory_space> tiled;
      tiled.topology_tile = tile;
      kfmm::Octree<Space, double> t;
      kfmm::build_octree(Space(), d.positions, d.masses, 8, t, tiled);
      const HostTree<double> h(t);
      REQUIRE(h.level_offsets == fresh.level_offsets);
      REQUIRE(h.begin == fresh.begin);
      REQUIRE(h.end == fresh.end);
      REQUIRE(h.parent == fresh.parent);
      REQUIRE(h.first_child == fresh.first_child);
      REQUIRE(h.level == fresh.level);
      REQUIRE(h.num_children == fresh.num_children);
      REQUIRE(h.leaves == fresh.leaves);
    }
  }
  // The records buffer, sized in words for double above, serves a float tree of another size too.
  {
    kfmm_tree_test::DeviceInput<Space, float> f(kfmm_tree_test::make_input("plummer", 2500, 6));
    kfmm::Octree<Space, float> t;
    kfmm::build_octree(Space(), f.positions, f.masses, 8, t, packed_ws);
    const HostTree<float> packed(t), fresh(kfmm::build_octree(Space(), f.positions, f.masses, 8));
    require_same_tree(packed, fresh);
    REQUIRE(packed.positions == fresh.positions);
    REQUIRE(packed.masses == fresh.masses);
  }
  kfmm::OctreeWorkspace<typename Space::memory_space> bad;
  bad.topology_tile = -1;
  kfmm_tree_test::DeviceInput<Space, double> d(kfmm_tree_test::make_input("uniform", 10, 5));
  REQUIRE_THROWS_AS(kfmm::build_octree(Space(), d.positions, d.masses, 8, tree, bad), kfmm::Error);
  kfmm::OctreeWorkspace<typename Space::memory_space> bad_records;
  bad_records.gather_records = 2;
  REQUIRE_THROWS_WITH(kfmm::build_octree(Space(), d.positions, d.masses, 8, tree, bad_records),
                      Catch::Matchers::ContainsSubstring("gather_records = 2"));
}

TEMPLATE_LIST_TEST_CASE(
    "the gather goes through records by default on GPUs above 32 MiB of LayoutLeft columns", "[tree][octree]",
    kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using M = typename Space::memory_space;
  using Left = Kokkos::View<float* [3], Kokkos::LayoutLeft, M>;
  using Right = Kokkos::View<float* [3], Kokkos::LayoutRight, M>;
  using Masses = Kokkos::View<float*, M>;
  using DoubleLeft = Kokkos::View<double* [3], Kokkos::LayoutLeft, M>;
  using DoubleMasses = Kokkos::View<double*, M>;
  constexpr bool device = !kfmm::detail::is_host_execution_space<Space>;
  // 16 bytes per float particle: 2^21 particles are exactly 32 MiB (not above), one more is.
  CHECK_FALSE(kfmm::detail::gather_records_by_default<Space, Left, Masses>(1LL << 21));
  CHECK(kfmm::detail::gather_records_by_default<Space, Left, Masses>((1LL << 21) + 1) == device);
  CHECK(kfmm::detail::gather_records_by_default<Space, DoubleLeft, DoubleMasses>((1LL << 20) + 1) == device);
  CHECK_FALSE(kfmm::detail::gather_records_by_default<Space, DoubleLeft, DoubleMasses>(1LL << 20));
  CHECK_FALSE(
      kfmm::detail::gather_records_by_default<Space, Right, Masses>(1LL << 30));  // (rows: unmeasured)
  CHECK(kfmm::detail::gather_records_by_default<Space, Left, Masses>(1LL << 30) == device);
}

template <class Space, class Real>
void check_scaled_build() {
  for (const double scale : {0.125, 1.0, 1024.0, std::ldexp(1.0, -40)}) {
    for (const auto& in :
         {kfmm_tree_test::make_input("plummer", 3000, 7), kfmm_tree_test::make_input("coincident", 500, 8),
          kfmm_tree_test::make_input("line", 1)}) {
      INFO(in.name << " scale " << scale);
      kfmm_tree_test::Input scaled = in;
      for (double& x : scaled.x) x *= scale;
      kfmm_tree_test::DeviceInput<Space, Real> d(in), ds(scaled);
      kfmm::Octree<Space, Real> tree;
      kfmm::OctreeWorkspace<typename Space::memory_space> ws;
      const HostTree<Real> reference(kfmm::build_octree(Space(), ds.positions, ds.masses, 16));
      kfmm::BoundingBox box;  // (of the scaled positions, as the caller's known box)
      for (int a = 0; a < 3; ++a) {
        box.lo[a] = box.hi[a] = static_cast<Real>(scaled.x[a]);
        for (int i = 0; i < scaled.size(); ++i) {
          box.lo[a] = std::min<double>(box.lo[a], static_cast<Real>(scaled.x[3 * i + a]));
          box.hi[a] = std::max<double>(box.hi[a], static_cast<Real>(scaled.x[3 * i + a]));
        }
      }
      // Without a box (the build reduces it and scales it) and with the caller's scaled box; the
      // sorted positions gathered from the caller's columns and from packed records (the GPU default
      // for large inputs).
      for (const bool give_box : {false, true}) {
        for (const int records : {0, 1}) {
          INFO("known box " << give_box << ", gather_records " << records);
          ws.gather_records = records;
          kfmm::build_octree(Space(), d.positions, d.masses, 16, tree, ws, give_box ? &box : nullptr, scale);
          const HostTree<Real> t(tree);
          REQUIRE(t.keys == reference.keys);
          REQUIRE(t.permutation == reference.permutation);
          REQUIRE(t.positions == reference.positions);  // (bitwise: a power of two scales exactly)
          REQUIRE(t.masses == reference.masses);
          REQUIRE(t.level_offsets == reference.level_offsets);
          REQUIRE(t.parent == reference.parent);
          REQUIRE(t.centres == reference.centres);
          REQUIRE(t.radii == reference.radii);
          // The box of the caller's positions: reduced on the device (copied back with the level sizes)
          // or the known box over the scale.
          for (int a = 0; a < 3; ++a) {
            REQUIRE(tree.box.lo[a] == box.lo[a] / scale);
            REQUIRE(tree.box.hi[a] == box.hi[a] / scale);
          }
        }
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("a position_scale build equals the build of scaled positions", "[tree][octree]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  check_scaled_build<Space, float>();
  check_scaled_build<Space, double>();
  kfmm_tree_test::DeviceInput<Space, double> d(kfmm_tree_test::make_input("uniform", 10, 5));
  kfmm::Octree<Space, double> tree;
  kfmm::OctreeWorkspace<typename Space::memory_space> ws;
  for (const double bad : {3.0, 0.0, -2.0, std::nan("")}) {
    INFO("position_scale " << bad);
    REQUIRE_THROWS_AS(kfmm::build_octree(Space(), d.positions, d.masses, 8, tree, ws, nullptr, bad),
                      kfmm::Error);
  }
  // A scale that takes float positions out of float's range is refused, not turned into infinities.
  kfmm_tree_test::DeviceInput<Space, float> df(kfmm_tree_test::make_input("uniform", 10, 6));
  kfmm::Octree<Space, float> float_tree;
  REQUIRE_THROWS_AS(
      kfmm::build_octree(Space(), df.positions, df.masses, 8, float_tree, ws, nullptr, std::ldexp(1.0, 200)),
      kfmm::Error);
}
