// The dual-tree walk: MAC, completeness (every particle pair covered exactly once), CSR form,
// symmetry, determinism, argument checks.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/tree/team_sort.hpp"
#include "test_tree_inputs.hpp"

namespace {

using kfmm_tree_test::HostList;
using kfmm_tree_test::HostTree;
using kfmm_tree_test::Input;

/// Checks the CSR invariants and returns the pairs (target, source) in list order.
std::vector<std::pair<int, int>> check_csr(const HostList& l, int num_nodes) {
  REQUIRE(l.offsets.size() == l.targets.size() + 1);
  REQUIRE(l.offsets.front() == 0);
  REQUIRE(l.offsets.back() == static_cast<int>(l.sources.size()));
  std::vector<std::pair<int, int>> pairs;
  std::map<int, int> counts;
  for (size_t r = 0; r < l.targets.size(); ++r) {
    REQUIRE(l.offsets[r] < l.offsets[r + 1]);             // rows hold at least one source
    if (r > 0) REQUIRE(l.targets[r - 1] < l.targets[r]);  // grouped by target, each target once
    REQUIRE(l.targets[r] >= 0);
    REQUIRE(l.targets[r] < num_nodes);
    for (int k = l.offsets[r]; k < l.offsets[r + 1]; ++k) {
      REQUIRE(l.sources[k] >= 0);
      REQUIRE(l.sources[k] < num_nodes);
      pairs.emplace_back(l.targets[r], l.sources[k]);
      counts[l.targets[r]] += 1;
    }
  }
  // Offsets are the exclusive scan of the per-target counts.
  int run = 0;
  for (size_t r = 0; r < l.targets.size(); ++r) {
    REQUIRE(l.offsets[r] == run);
    run += counts[l.targets[r]];
  }
  return pairs;
}

template <class Real>
bool mac(const HostTree<Real>& t, int a, int b, const kfmm::WalkOptions& o) {
  const double ca[3] = {t.centres[3 * a], t.centres[3 * a + 1], t.centres[3 * a + 2]};
  const double cb[3] = {t.centres[3 * b], t.centres[3 * b + 1], t.centres[3 * b + 2]};
  return kfmm::walk_accepts(ca, t.radii[a], t.node_abs_masses[a], cb, t.radii[b], t.node_abs_masses[b],
                            o.theta * o.theta, o.min_separation, o.concentration_ratio);
}

/// Every invariant of the lists of tree t (`check_cover`: also that every particle pair is covered once, a
/// check of O(leaves x particles)).
template <class Real>
void check_lists(const Input& in, const HostTree<Real>& t, const HostList& far, const HostList& near,
                 const kfmm::WalkOptions& o, bool check_cover = true) {
  INFO(in.name << " n = " << in.size() << " leaf_size = " << t.leaf_size << " theta = " << o.theta
               << " min_separation = " << o.min_separation);
  const auto far_pairs = check_csr(far, t.num_nodes);
  const auto near_pairs = check_csr(near, t.num_nodes);
  // Far pairs: distinct nodes that satisfy the MAC, each once and in both directions (the walk splits
  // the same node of (A, B) and (B, A)).
  std::multiset<std::pair<int, int>> far_set(far_pairs.begin(), far_pairs.end());
  for (const auto& p : far_pairs) {
    REQUIRE(p.first != p.second);
    REQUIRE(mac(t, p.first, p.second, o));
    REQUIRE(far_set.count(p) == 1);
    REQUIRE(far_set.count({p.second, p.first}) == 1);
  }
  // Near pairs: leaves; one row per leaf with its self pair once; no near pair passes the MAC.
  std::set<int> leaves(t.leaves.begin(), t.leaves.end());
  REQUIRE(std::set<int>(near.targets.begin(), near.targets.end()) == leaves);
  std::multiset<std::pair<int, int>> near_set(near_pairs.begin(), near_pairs.end());
  for (const auto& p : near_pairs) {
    REQUIRE(leaves.count(p.first) == 1);
    REQUIRE(leaves.count(p.second) == 1);
    REQUIRE(near_set.count(p) == 1);
    REQUIRE(near_set.count({p.second, p.first}) == 1);
    if (p.first != p.second) REQUIRE_FALSE(mac(t, p.first, p.second, o));
  }
  for (int leaf : leaves) REQUIRE(near_set.count({leaf, leaf}) == 1);
  if (!check_cover) return;
  // Completeness: for every target leaf, the near sources of the leaf and the far sources of it and
  // of all its ancestors cover every source particle exactly once.
  std::map<int, std::vector<int>> far_of, near_of;
  for (const auto& p : far_pairs) far_of[p.first].push_back(p.second);
  for (const auto& p : near_pairs) near_of[p.first].push_back(p.second);
  std::vector<int> cover(t.n);
  for (int leaf : t.leaves) {
    std::fill(cover.begin(), cover.end(), 0);
    for (int s : near_of[leaf])
      for (int j = t.begin[s]; j < t.end[s]; ++j) cover[j] += 1;
    for (int a = leaf; a >= 0; a = t.parent[a])
      for (int s : far_of[a])
        for (int j = t.begin[s]; j < t.end[s]; ++j) cover[j] += 1;
    const auto bad = std::find_if(cover.begin(), cover.end(), [](int c) { return c != 1; });
    INFO("target leaf " << leaf << " source particle " << (bad - cover.begin()));
    REQUIRE(bad == cover.end());
  }
}

/// `o` with its list build set to `build`.
kfmm::WalkOptions with_build(kfmm::WalkOptions o, kfmm::ListBuild build) {
  o.list_build = build;
  return o;
}

/// A way to build the lists: ListBuild and, for scatter, WalkWorkspace::scatter_slices.
struct BuildVariant {
  kfmm::ListBuild build;
  int scatter_slices;
};
/// Sort, then scatter by the backend's choice, by atomic cursors and by sliced counting over 1 and 3 slices.
constexpr BuildVariant build_variants[] = {{kfmm::ListBuild::sort, 0},
                                           {kfmm::ListBuild::scatter, 0},
                                           {kfmm::ListBuild::scatter, -1},
                                           {kfmm::ListBuild::scatter, 1},
                                           {kfmm::ListBuild::scatter, 3}};

/// Walks every standard input at each leaf size with every build variant: every invariant, top_far_level,
/// and exactly the same lists from all of them (scatter places each entry where the stable sort does).
template <class Space, class Real>
void check_walks(const kfmm::WalkOptions& options, std::initializer_list<int> leaf_sizes) {
  for (const auto& in : kfmm_tree_test::standard_inputs()) {
    kfmm_tree_test::DeviceInput<Space, Real> d(in);
    for (int leaf_size : leaf_sizes) {
      const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, leaf_size);
      const HostTree<Real> host(tree);
      std::vector<HostList> sorted;  // (far, near of ListBuild::sort)
      int sorted_top = -1;
      for (const BuildVariant v : build_variants) {
        INFO(in.name << " leaf_size = " << leaf_size << " list_build = " << kfmm::to_string(v.build)
                     << " scatter_slices = " << v.scatter_slices);
        const kfmm::WalkOptions o = with_build(options, v.build);
        kfmm::WalkWorkspace<typename Space::memory_space> ws;
        ws.scatter_slices = v.scatter_slices;
        const auto lists = kfmm::dual_tree_walk(Space(), tree, o, ws);
        REQUIRE(lists.statistics.list_build == v.build);
        const HostList far(lists.far), near(lists.near);
        if (sorted.empty()) {
          check_lists(in, host, far, near, o);
          // top_far_level: the shallowest level of any far target or source (-1 without far pairs).
          int top = -1;
          for (size_t r = 0; r < far.targets.size(); ++r)
            for (int k = far.offsets[r]; k < far.offsets[r + 1]; ++k)
              for (int node : {far.targets[r], far.sources[k]})
                if (top < 0 || host.level[node] < top) top = host.level[node];
          REQUIRE(lists.top_far_level == top);
          sorted = {far, near};
          sorted_top = top;
        } else {
          REQUIRE(far == sorted[0]);
          REQUIRE(near == sorted[1]);
          REQUIRE(lists.top_far_level == sorted_top);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("mac_accepts is the opening-angle criterion with a separation floor", "[tree][walk]") {
  kfmm_tree_test::Rng rng(17);
  int accepted = 0;
  for (int k = 0; k < 200000; ++k) {
    double ca[3], cb[3];
    for (int a = 0; a < 3; ++a) {
      ca[a] = rng.uniform(-1, 1);
      cb[a] = rng.uniform(-1, 1);
    }
    const double ra = rng.uniform(0, 0.5), rb = rng.uniform(0, 0.5);
    const double theta = rng.uniform(0.2, 0.95), sep = k % 2 ? rng.uniform(0, 0.3) : 0.0;
    const double d = std::sqrt((ca[0] - cb[0]) * (ca[0] - cb[0]) + (ca[1] - cb[1]) * (ca[1] - cb[1]) +
                               (ca[2] - cb[2]) * (ca[2] - cb[2]));
    const bool result = kfmm::mac_accepts(ca, ra, cb, rb, theta * theta, sep);
    REQUIRE(result == kfmm::mac_accepts(cb, rb, ca, ra, theta * theta, sep));  // symmetric
    // Away from the boundary (relative margin 1e-12) it agrees with the square-root form.
    const double m1 = theta * d - (ra + rb), m2 = d - (ra + rb) - sep;
    if (std::fabs(m1) > 1e-12 && std::fabs(m2) > 1e-12) REQUIRE(result == (m1 >= 0 && m2 >= 0));
    accepted += result;
  }
  REQUIRE(accepted > 1000);
  const double c[3] = {0.5, 0.5, 0.5};
  REQUIRE_FALSE(kfmm::mac_accepts(c, 0, c, 0, 0.25, 0));  // coincident centres are never far
}

TEST_CASE("concentration_accepts caps the partner of a heavier compact node at theta d / 2", "[tree][walk]") {
  const double theta = 0.6, t2 = theta * theta, d = 2, d2 = d * d;  // theta d / 2 = 0.6
  // A compact heavy source (radius 0.01, mass 1) and a light target of radius 0.7 > 0.6: refused in
  // both orders; a target of radius 0.6 (the cap) or a rule of ratio 0 accepts.
  CHECK_FALSE(kfmm::concentration_accepts(d2, 0.7, 0.1, 0.01, 1.0, t2, 0.1));
  CHECK_FALSE(kfmm::concentration_accepts(d2, 0.01, 1.0, 0.7, 0.1, t2, 0.1));
  CHECK(kfmm::concentration_accepts(d2, 0.6, 0.1, 0.01, 1.0, t2, 0.1));
  CHECK(kfmm::concentration_accepts(d2, 0.7, 0.1, 0.01, 1.0, t2, 0.0));
  // Not compact enough (radius 0.1 is not below 0.1 x 0.7 ... nor 0.07), not heavier, equal masses,
  // zero masses: accepted.
  CHECK(kfmm::concentration_accepts(d2, 0.7, 0.1, 0.1, 1.0, t2, 0.1));
  CHECK(kfmm::concentration_accepts(d2, 0.7, 1.0, 0.01, 0.1, t2, 0.1));
  CHECK(kfmm::concentration_accepts(d2, 0.7, 1.0, 0.01, 1.0, t2, 0.1));
  CHECK(kfmm::concentration_accepts(d2, 0.7, 0.0, 0.0, 0.0, t2, 0.1));
  // A point source (radius 0) is compact for every ratio > 0.
  CHECK_FALSE(kfmm::concentration_accepts(d2, 0.7, 0.1, 0.0, 1.0, t2, 1e-9));
  // walk_accepts is mac_accepts and the rule; random cases against the square-root form, symmetric.
  kfmm_tree_test::Rng rng(23);
  int refused_by_rule = 0;
  for (int k = 0; k < 100000; ++k) {
    double ca[3], cb[3];
    for (int a = 0; a < 3; ++a) {
      ca[a] = rng.uniform(-1, 1);
      cb[a] = rng.uniform(-1, 1);
    }
    const double ra = rng.uniform(0, 0.5), rb = k % 3 ? rng.uniform(0, 0.5) : rng.uniform(0, 0.02);
    const double ma = rng.uniform(0, 1), mb = rng.uniform(0, 1), ratio = k % 4 ? 0.1 : rng.uniform(0, 1);
    const double th = rng.uniform(0.2, 0.95);
    const bool mac = kfmm::mac_accepts(ca, ra, cb, rb, th * th, 0);
    const bool result = kfmm::walk_accepts(ca, ra, ma, cb, rb, mb, th * th, 0, ratio);
    REQUIRE(result == kfmm::walk_accepts(cb, rb, mb, ca, ra, ma, th * th, 0, ratio));
    if (!mac) REQUIRE_FALSE(result);
    const double dd = std::sqrt((ca[0] - cb[0]) * (ca[0] - cb[0]) + (ca[1] - cb[1]) * (ca[1] - cb[1]) +
                                (ca[2] - cb[2]) * (ca[2] - cb[2]));
    const double cap = th * dd / 2;
    const bool a_heavy_compact = (ma > mb) && (ra < ratio * rb);
    const bool b_heavy_compact = (mb > ma) && (rb < ratio * ra);
    const bool expect_rule = !(b_heavy_compact && ra > cap) && !(a_heavy_compact && rb > cap);
    if (std::fabs(ra - cap) > 1e-12 && std::fabs(rb - cap) > 1e-12) REQUIRE(result == (mac && expect_rule));
    refused_by_rule += mac && !result;
  }
  REQUIRE(refused_by_rule > 100);
}

TEMPLATE_LIST_TEST_CASE("the concentration rule changes the lists of coincident groups only where it must",
                        "[tree][walk]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  // Off (ratio 0) and at its strongest (ratio 1) the lists keep every invariant.
  kfmm::WalkOptions off{0.6};
  off.concentration_ratio = 0;
  kfmm::WalkOptions strongest{0.6};
  strongest.concentration_ratio = 1;
  check_walks<Space, double>(off, {8});
  check_walks<Space, float>(strongest, {8});
  // Coincident particles (a radius-0 leaf holding three quarters of the mass): the default rule refuses
  // far pairs that the plain MAC accepts, so the lists differ; on a uniform input they do not.
  for (const char* name : {"coincident", "uniform"}) {
    kfmm_tree_test::DeviceInput<Space, double> d(kfmm_tree_test::make_input(name, 3000, 5));
    const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 16);
    const HostTree<double> host(tree);
    const HostList far_off(kfmm::dual_tree_walk(Space(), tree, off).far);
    const HostList far_on(kfmm::dual_tree_walk(Space(), tree, kfmm::WalkOptions{0.6}).far);
    INFO(name);
    const bool same = far_off.sources == far_on.sources && far_off.targets == far_on.targets;
    if (std::string(name) == "coincident") {
      REQUIRE_FALSE(same);
    } else {
      REQUIRE(same);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("walk lists satisfy the MAC and cover every pair exactly once", "[tree][walk]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  check_walks<Space, double>(kfmm::WalkOptions{0.6}, {1, 8, 32});
  check_walks<Space, float>(kfmm::WalkOptions{0.5}, {4, 16});
  check_walks<Space, double>(kfmm::WalkOptions{0.99}, {8});
  check_walks<Space, double>(kfmm::WalkOptions{0.3}, {8});
}

TEMPLATE_LIST_TEST_CASE("walk honours min_separation", "[tree][walk]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  check_walks<Space, double>(kfmm::WalkOptions{0.7, 0.05}, {8});
  check_walks<Space, float>(kfmm::WalkOptions{0.5, 0.2}, {2});
}

TEMPLATE_LIST_TEST_CASE("walk of tiny trees", "[tree][walk]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  // N = 0: empty lists (no rows, offsets {0}).
  kfmm_tree_test::DeviceInput<Space, double> d0(kfmm_tree_test::make_input("uniform", 0));
  const auto l0 = kfmm::dual_tree_walk(Space(), kfmm::build_octree(Space(), d0.positions, d0.masses, 4),
                                       kfmm::WalkOptions{0.5});
  REQUIRE(l0.far.num_rows() == 0);
  REQUIRE(l0.near.num_rows() == 0);
  REQUIRE(l0.far.num_pairs() == 0);
  REQUIRE(l0.near.num_pairs() == 0);
  REQUIRE(HostList(l0.near).offsets == std::vector<int>{0});
  REQUIRE(l0.top_far_level == -1);
  // N = 1: the root's self pair only.
  kfmm_tree_test::DeviceInput<Space, double> d1(kfmm_tree_test::make_input("uniform", 1));
  const auto l1 = kfmm::dual_tree_walk(Space(), kfmm::build_octree(Space(), d1.positions, d1.masses, 4),
                                       kfmm::WalkOptions{0.5});
  const HostList n1(l1.near);
  REQUIRE(n1.targets == std::vector<int>{0});
  REQUIRE(n1.sources == std::vector<int>{0});
  REQUIRE(l1.far.num_pairs() == 0);
  REQUIRE(l1.top_far_level == -1);
  // N = 2, leaf_size 1, far apart with theta 0.9: two leaves, one far pair each way, two self pairs.
  auto in2 = kfmm_tree_test::make_input("uniform", 2);
  for (int a = 0; a < 3; ++a) {
    in2.x[a] = 0;
    in2.x[3 + a] = 1;
  }
  kfmm_tree_test::DeviceInput<Space, double> d2(in2);
  const auto t2 = kfmm::build_octree(Space(), d2.positions, d2.masses, 1);
  const auto l2 = kfmm::dual_tree_walk(Space(), t2, kfmm::WalkOptions{0.9});
  REQUIRE(l2.far.num_pairs() == 2);
  REQUIRE(l2.top_far_level == 1);  // the two leaves are the root's children
  REQUIRE(l2.near.num_pairs() == 2);
  check_lists(in2, HostTree<double>(t2), HostList(l2.far), HostList(l2.near), kfmm::WalkOptions{0.9});
}

TEMPLATE_LIST_TEST_CASE("walk reuses a workspace and gives the same lists in slices", "[tree][walk]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const auto in = kfmm_tree_test::make_input("plummer", 5000, 4);
  kfmm_tree_test::DeviceInput<Space, float> d(in);
  const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 8);
  std::vector<HostList> reference;  // (the first variant's far and near lists: every variant gives them)
  for (const BuildVariant v : build_variants) {
    const kfmm::WalkOptions o = with_build(kfmm::WalkOptions{0.6}, v.build);
    INFO("list_build = " << kfmm::to_string(v.build) << " scatter_slices = " << v.scatter_slices);
    kfmm::WalkWorkspace<typename Space::memory_space> ws;
    ws.scatter_slices = v.scatter_slices;
    const auto first = kfmm::dual_tree_walk(Space(), tree, o, ws);
    const HostList far1(first.far), near1(first.near);
    check_lists(in, HostTree<float>(tree), far1, near1, o);
    if (reference.empty()) reference = {far1, near1};
    REQUIRE(far1 == reference[0]);
    REQUIRE(near1 == reference[1]);
    REQUIRE(first.statistics.rounds > tree.num_levels);  // pairs of different levels take extra rounds
    // Each unordered pair is decided once: more than its final pairs, (far + near + self pairs) / 2 (the
    // other pairs were split), and fewer than the ordered final pairs that a walk over ordered pairs would
    // have decided on top of its splits.
    const long long ordered_finals = static_cast<long long>(far1.sources.size() + near1.sources.size());
    REQUIRE(first.statistics.pairs_visited > (ordered_finals + tree.num_leaves) / 2);
    REQUIRE(first.statistics.pairs_visited < ordered_finals);
    // A second walk with the workspace: same lists; a third one reallocates nothing (steady state).
    const auto second = kfmm::dual_tree_walk(Space(), tree, o, ws);
    {
      const HostList far2(second.far), near2(second.near);  // (copied before the workspace is reused)
      const auto* keys = ws.pair_keys.data();
      const auto* queue0 = ws.queue[0].data();
      const auto* queue1 = ws.queue[1].data();
      const auto third = kfmm::dual_tree_walk(Space(), tree, o, ws);
      REQUIRE(ws.pair_keys.data() == keys);
      REQUIRE(ws.queue[0].data() == queue0);
      REQUIRE(ws.queue[1].data() == queue1);
      REQUIRE(HostList(third.far) == far2);
      REQUIRE(HostList(third.near) == near2);
    }
    REQUIRE(HostList(second.far) == far1);
    REQUIRE(HostList(second.near) == near1);
    REQUIRE(second.statistics.rounds == first.statistics.rounds);
    REQUIRE(second.statistics.pairs_visited == first.statistics.pairs_visited);
    // ... and it ran every round from the plan the first walk left (no host round trip per round).
    REQUIRE(first.statistics.planned_rounds == 0);
    REQUIRE(second.statistics.planned_rounds == first.statistics.rounds);
    REQUIRE_FALSE(second.statistics.replanned);
    // A plan too small for this tree (from a smaller one): re-run counted, same lists.
    {
      const auto small_in = kfmm_tree_test::make_input("uniform", 300, 9);
      kfmm_tree_test::DeviceInput<Space, float> ds(small_in);
      const auto small = kfmm::build_octree(Space(), ds.positions, ds.masses, 8);
      kfmm::WalkWorkspace<typename Space::memory_space> w;
      kfmm::dual_tree_walk(Space(), small, o, w);
      const auto l = kfmm::dual_tree_walk(Space(), tree, o, w);
      REQUIRE(l.statistics.replanned);
      REQUIRE(l.statistics.rounds == first.statistics.rounds);
      REQUIRE(HostList(l.far) == far1);
      REQUIRE(HostList(l.near) == near1);
      // The next walk plans from this tree again.
      const auto again = kfmm::dual_tree_walk(Space(), tree, o, w);
      REQUIRE_FALSE(again.statistics.replanned);
      REQUIRE(again.statistics.planned_rounds == first.statistics.rounds);
      REQUIRE(HostList(again.far) == far1);
    }
    // A plan with fewer rounds than the walk needs: counted rounds continue where it ends.
    {
      kfmm::WalkWorkspace<typename Space::memory_space> w;
      w.plan = {1};  // the root pair only
      w.planned_pairs = 1 << 20;
      const auto l = kfmm::dual_tree_walk(Space(), tree, o, w);
      REQUIRE(l.statistics.planned_rounds == 1);
      REQUIRE_FALSE(l.statistics.replanned);
      REQUIRE(l.statistics.rounds == first.statistics.rounds);
      REQUIRE(HostList(l.far) == far1);
      REQUIRE(HostList(l.near) == near1);
    }
    // Planned rounds switched off.
    {
      kfmm::WalkWorkspace<typename Space::memory_space> w;
      w.planned_rounds = false;
      kfmm::dual_tree_walk(Space(), tree, o, w);
      const auto l = kfmm::dual_tree_walk(Space(), tree, o, w);
      REQUIRE(l.statistics.planned_rounds == 0);
      REQUIRE(HostList(l.far) == far1);
    }
    // Rounds cut into slices of 1, 7 and 1000 open pairs (buffers grow between slices, keeping what
    // earlier slices wrote): identical lists.
    for (long long slice : {1LL, 7LL, 1000LL}) {
      kfmm::WalkWorkspace<typename Space::memory_space> sliced;
      sliced.slice = slice;
      const auto l = kfmm::dual_tree_walk(Space(), tree, o, sliced);
      REQUIRE(HostList(l.far) == far1);
      REQUIRE(HostList(l.near) == near1);
      // Planned rounds in slices (the slices chain their totals on the device): the same lists.
      if (slice == 1) continue;  // (a launch per open pair)
      const auto planned = kfmm::dual_tree_walk(Space(), tree, o, sliced);
      REQUIRE(planned.statistics.planned_rounds == first.statistics.rounds);
      REQUIRE_FALSE(planned.statistics.replanned);
      REQUIRE(HostList(planned.far) == far1);
      REQUIRE(HostList(planned.near) == near1);
      // ... and a plan too small for it, in slices: flagged, re-run counted, the same lists.
      sliced.plan.assign(sliced.plan.size(), 1);
      const auto small = kfmm::dual_tree_walk(Space(), tree, o, sliced);
      REQUIRE(small.statistics.replanned);
      REQUIRE(HostList(small.far) == far1);
      REQUIRE(HostList(small.near) == near1);
    }
    const auto fresh = kfmm::dual_tree_walk(Space(), tree, o);
    REQUIRE(HostList(fresh.far) == far1);
    REQUIRE(HostList(fresh.near) == near1);
    for (long long slice : {0LL, (1LL << 24) + 1}) {
      kfmm::WalkWorkspace<typename Space::memory_space> bad;
      bad.slice = slice;
      REQUIRE_THROWS_AS(kfmm::dual_tree_walk(Space(), tree, o, bad), kfmm::Error);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("walk lists come from either buffer of the pair sort", "[tree][walk]",
                        kfmm_test::ExecutionSpaces) {
  // The pair sort is not copied back: after an odd number of passes the lists view its second buffers.
  // On the host (8-bit digits) a tree of under 2^7 nodes sorts 8 key bits in one pass, over 2^15 nodes
  // 17 bits in three, and between them two: all three trees must give lists with every invariant.
  using Space = TestType;
  struct Case {
    const char* name;
    int n, leaf_size;
  };
  for (const Case c : {Case{"uniform", 60, 8}, Case{"plummer", 3000, 8}, Case{"uniform", 40000, 1}}) {
    const auto in = kfmm_tree_test::make_input(c.name, c.n, 21);
    kfmm_tree_test::DeviceInput<Space, float> d(in);
    const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, c.leaf_size);
    const kfmm::WalkOptions o = with_build(kfmm::WalkOptions{0.6}, kfmm::ListBuild::sort);
    kfmm::WalkWorkspace<typename Space::memory_space> ws;
    for (int walk = 0; walk < 2; ++walk) {  // counted, then planned rounds
      const auto lists = kfmm::dual_tree_walk(Space(), tree, o, ws);
      const bool second = lists.near.sources.data() != ws.pair_sources.data() + lists.far.num_pairs();
      INFO(c.name << " n = " << c.n << " nodes = " << tree.num_nodes << " walk " << walk);
      if (second) REQUIRE(lists.far.sources.data() == ws.sort.values.data());
      if (!second) REQUIRE(lists.far.sources.data() == ws.pair_sources.data());
      const int passes = (kfmm::bits_for(tree.num_nodes - 1) + 1 + 7) / 8;
      if (kfmm::detail::is_host_execution_space<Space>) REQUIRE(second == (passes % 2 == 1));
      check_lists(in, HostTree<float>(tree), HostList(lists.far), HostList(lists.near), o, c.n <= 3000);
    }
    if (c.n == 40000) REQUIRE(tree.num_nodes > 32768);
    if (c.n == 60) REQUIRE(tree.num_nodes < 128);
  }
}

TEMPLATE_LIST_TEST_CASE("team_sort sorts a row in place with a team", "[tree][walk]",
                        kfmm_test::ExecutionSpaces) {
  // The atomic scatter's per-row sort (a bitonic network in scratch chunks, the longer stages on the row
  // itself), against std::sort and a transform on the way out: with chunks of 16 (rows past it run the
  // global stages; the walk uses 2048) and of 2048, lengths around the chunk, its powers of two and long
  // rows, in ascending, descending, constant, sawtooth and random order (the largest value included), with
  // one thread per team and the most the backend allows up to 128.
  using Space = TestType;
  using Team = typename Kokkos::TeamPolicy<Space>::member_type;
  using Scratch = Kokkos::View<unsigned*, typename Space::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  kfmm_tree_test::Rng rng(7);
  const int most = kfmm::detail::is_host_execution_space<Space> ? 1 : 128;
  for (const int chunk : {16, 2048}) {
    for (const int team_size : {1, most}) {
      for (const int n : {0, 1, 2, 3, 15, 16, 17, 31, 32, 33, 64, 200, 1001, 2047, 2048, 2049, 5000}) {
        for (int pattern = 0; pattern < 5; ++pattern) {
          std::vector<unsigned> row(n);
          for (int i = 0; i < n; ++i) {
            const unsigned values[5] = {static_cast<unsigned>(i), static_cast<unsigned>(n - i), 7u,
                                        static_cast<unsigned>(i % 5),
                                        i == n / 2 ? ~0u : static_cast<unsigned>(rng.uniform(0, 4.2e9))};
            row[i] = values[pattern];
          }
          Kokkos::View<unsigned*, typename Space::memory_space> d("row", n);
          Kokkos::deep_copy(
              d, Kokkos::View<const unsigned*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(row.data(), n));
          Kokkos::parallel_for(
              "team_sort",
              Kokkos::TeamPolicy<Space>(1, team_size)
                  .set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(chunk))),
              KOKKOS_LAMBDA(const Team& team) {
                const Scratch scratch(team.team_scratch(0), chunk);
                kfmm::detail::team_sort(team, d.data(), n, scratch, [](const unsigned v) { return v ^ 1u; });
              });
          std::vector<unsigned> got(n);
          Kokkos::deep_copy(
              Kokkos::View<unsigned*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(got.data(), n), d);
          std::sort(row.begin(), row.end());
          for (auto& v : row) v ^= 1u;
          INFO("chunk " << chunk << ", team " << team_size << ", n = " << n << ", pattern " << pattern);
          REQUIRE(got == row);
        }
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("walk rejects bad options", "[tree][walk]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  kfmm_tree_test::DeviceInput<Space, double> d(kfmm_tree_test::make_input("uniform", 50));
  const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 4);
  for (double theta : {0.0, -0.5, 1.0, 1.5, std::nan("")})
    REQUIRE_THROWS_AS(kfmm::dual_tree_walk(Space(), tree, kfmm::WalkOptions{theta}), kfmm::Error);
  for (double sep : {-1.0, static_cast<double>(INFINITY), std::nan("")})
    REQUIRE_THROWS_AS(kfmm::dual_tree_walk(Space(), tree, kfmm::WalkOptions{0.5, sep}), kfmm::Error);
  REQUIRE_THROWS_WITH(kfmm::dual_tree_walk(Space(), tree, with_build({0.5}, static_cast<kfmm::ListBuild>(7))),
                      Catch::Matchers::ContainsSubstring("list_build = 7"));
  for (int slices : {-2, 1025}) {
    kfmm::WalkWorkspace<typename Space::memory_space> bad;
    bad.scatter_slices = slices;
    REQUIRE_THROWS_WITH(kfmm::dual_tree_walk(Space(), tree, kfmm::WalkOptions{0.5}, bad),
                        Catch::Matchers::ContainsSubstring("scatter_slices = " + std::to_string(slices)));
  }
}

TEMPLATE_LIST_TEST_CASE("ListBuild::automatic scatters on the host and sorts on GPUs", "[tree][walk]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const auto in = kfmm_tree_test::make_input("plummer", 4000, 5);
  kfmm_tree_test::DeviceInput<Space, float> d(in);
  const auto tree = kfmm::build_octree(Space(), d.positions, d.masses, 8);
  const auto automatic = kfmm::dual_tree_walk(Space(), tree, kfmm::WalkOptions{0.6});
  REQUIRE(automatic.statistics.list_build ==
          (kfmm::detail::is_host_execution_space<Space> ? kfmm::ListBuild::scatter : kfmm::ListBuild::sort));
  const auto sorted = kfmm::dual_tree_walk(Space(), tree, with_build({0.6}, kfmm::ListBuild::sort));
  REQUIRE(sorted.statistics.list_build == kfmm::ListBuild::sort);
  REQUIRE(HostList(automatic.far) == HostList(sorted.far));
  REQUIRE(HostList(automatic.near) == HostList(sorted.near));
  // One workspace through sort, scatter and sort again: each walk plans from the last one's rounds, its
  // pair capacity converted between the builds (no replanning), and gives the same lists.
  kfmm::WalkWorkspace<typename Space::memory_space> ws;
  for (const kfmm::ListBuild build :
       {kfmm::ListBuild::sort, kfmm::ListBuild::scatter, kfmm::ListBuild::sort, kfmm::ListBuild::scatter}) {
    INFO("list_build = " << kfmm::to_string(build));
    const auto l = kfmm::dual_tree_walk(Space(), tree, with_build({0.6}, build), ws);
    REQUIRE(l.statistics.list_build == build);
    REQUIRE_FALSE(l.statistics.replanned);
    REQUIRE(HostList(l.far) == HostList(sorted.far));
    REQUIRE(HostList(l.near) == HostList(sorted.near));
  }
}

#if defined(KOKKOS_ENABLE_SERIAL) && defined(KOKKOS_ENABLE_OPENMP)
TEST_CASE("walk lists are identical on Serial and OpenMP", "[tree][walk]") {
  for (const char* name : {"plummer", "uniform", "coincident"}) {
    const auto in = kfmm_tree_test::make_input(name, 20000, 13);
    kfmm_tree_test::DeviceInput<Kokkos::Serial, float> ds(in);
    kfmm_tree_test::DeviceInput<Kokkos::OpenMP, float> dp(in);
    const auto ts = kfmm::build_octree(Kokkos::Serial(), ds.positions, ds.masses, 16);
    const auto tp = kfmm::build_octree(Kokkos::OpenMP(), dp.positions, dp.masses, 16);
    for (const BuildVariant v : build_variants) {
      INFO(name << " list_build = " << kfmm::to_string(v.build) << " scatter_slices = " << v.scatter_slices);
      const kfmm::WalkOptions o = with_build(kfmm::WalkOptions{0.6}, v.build);
      kfmm::WalkWorkspace<Kokkos::HostSpace> ws_serial, ws_openmp;
      ws_serial.scatter_slices = ws_openmp.scatter_slices = v.scatter_slices;
      const auto ls = kfmm::dual_tree_walk(Kokkos::Serial(), ts, o, ws_serial);
      const auto lp = kfmm::dual_tree_walk(Kokkos::OpenMP(), tp, o, ws_openmp);
      REQUIRE(HostList(ls.far) == HostList(lp.far));
      REQUIRE(HostList(ls.near) == HostList(lp.near));
      REQUIRE(ls.statistics.rounds == lp.statistics.rounds);
      REQUIRE(ls.statistics.pairs_visited == lp.statistics.pairs_visited);
    }
  }
}
#endif

#if defined(KOKKOS_ENABLE_SERIAL) && defined(KOKKOS_ENABLE_CUDA)
// The device build against the host reference: the same tree (topology exactly; float centres and radii
// bitwise, as every sum runs in double in a fixed order) and the same lists, pair for pair.
TEST_CASE("tree and walk lists are identical on Serial and Cuda", "[tree][walk]") {
  for (const char* name : {"plummer", "uniform", "coincident"}) {
    INFO(name);
    const auto in = kfmm_tree_test::make_input(name, 20000, 13);
    kfmm_tree_test::DeviceInput<Kokkos::Serial, float> ds(in);
    kfmm_tree_test::DeviceInput<Kokkos::Cuda, float> dc(in);
    const auto ts = kfmm::build_octree(Kokkos::Serial(), ds.positions, ds.masses, 16);
    const auto tc = kfmm::build_octree(Kokkos::Cuda(), dc.positions, dc.masses, 16);
    const HostTree<float> hs(ts), hc(tc);
    REQUIRE(hs.permutation == hc.permutation);
    REQUIRE(hs.level_offsets == hc.level_offsets);
    REQUIRE(hs.begin == hc.begin);
    REQUIRE(hs.end == hc.end);
    REQUIRE(hs.parent == hc.parent);
    REQUIRE(hs.first_child == hc.first_child);
    REQUIRE(hs.leaves == hc.leaves);
    REQUIRE(hs.centres == hc.centres);
    REQUIRE(hs.radii == hc.radii);
    const auto ls = kfmm::dual_tree_walk(Kokkos::Serial(), ts, with_build({0.6}, kfmm::ListBuild::sort));
    for (const BuildVariant v : build_variants) {
      INFO(name << " list_build = " << kfmm::to_string(v.build) << " scatter_slices = " << v.scatter_slices);
      const kfmm::WalkOptions o = with_build(kfmm::WalkOptions{0.6}, v.build);
      kfmm::WalkWorkspace<Kokkos::CudaSpace> ws;
      ws.scatter_slices = v.scatter_slices;
      const auto lc = kfmm::dual_tree_walk(Kokkos::Cuda(), tc, o, ws);
      REQUIRE(HostList(ls.far) == HostList(lc.far));
      REQUIRE(HostList(ls.near) == HostList(lc.near));
      const auto planned = kfmm::dual_tree_walk(Kokkos::Cuda(), tc, o, ws);  // planned rounds on the device
      REQUIRE(planned.statistics.planned_rounds == ls.statistics.rounds);
      REQUIRE(HostList(ls.far) == HostList(planned.far));
      REQUIRE(HostList(ls.near) == HostList(planned.near));
    }
  }
}
#endif

namespace {

/// Host "Barnes-Hut through the lists": near pairs directly, far pairs of every ancestor of a particle's
/// leaf as monopoles at the node centres. Returns the rms relative acceleration error against the
/// direct sum; it must shrink with theta (the monopole error is O(theta^2) about centres of mass).
double monopole_error(const Input& in, double theta) {
  kfmm_tree_test::DeviceInput<Kokkos::DefaultHostExecutionSpace, double> d(in);
  const auto tree = kfmm::build_octree(Kokkos::DefaultHostExecutionSpace(), d.positions, d.masses, 8);
  const auto lists =
      kfmm::dual_tree_walk(Kokkos::DefaultHostExecutionSpace(), tree, kfmm::WalkOptions{theta});
  const HostTree<double> t(tree);
  const HostList far(lists.far), near(lists.near);
  std::vector<int> far_row(t.num_nodes, -1), near_row(t.num_nodes, -1), leaf_of(t.n);
  for (size_t r = 0; r < far.targets.size(); ++r) far_row[far.targets[r]] = static_cast<int>(r);
  for (size_t r = 0; r < near.targets.size(); ++r) near_row[near.targets[r]] = static_cast<int>(r);
  for (int leaf : t.leaves)
    for (int i = t.begin[leaf]; i < t.end[leaf]; ++i) leaf_of[i] = leaf;
  double num = 0, den = 0;
  for (int i = 0; i < t.n; ++i) {
    const double* xi = &t.positions[3 * i];
    double a[3] = {0, 0, 0}, ref[3] = {0, 0, 0};
    auto add = [&](double* acc, const double* x, double m) {
      const double dx = xi[0] - x[0], dy = xi[1] - x[1], dz = xi[2] - x[2];
      const double r2 = dx * dx + dy * dy + dz * dz;
      if (r2 == 0) return;
      const double f = m / (r2 * std::sqrt(r2));
      acc[0] -= f * dx;
      acc[1] -= f * dy;
      acc[2] -= f * dz;
    };
    for (int j = 0; j < t.n; ++j) add(ref, &t.positions[3 * j], t.masses[j]);
    const int r = near_row[leaf_of[i]];
    for (int k = near.offsets[r]; k < near.offsets[r + 1]; ++k)
      for (int j = t.begin[near.sources[k]]; j < t.end[near.sources[k]]; ++j)
        add(a, &t.positions[3 * j], t.masses[j]);
    for (int anc = leaf_of[i]; anc >= 0; anc = t.parent[anc]) {
      if (far_row[anc] < 0) continue;
      for (int k = far.offsets[far_row[anc]]; k < far.offsets[far_row[anc] + 1]; ++k) {
        const int s = far.sources[k];
        add(a, &t.centres[3 * s], t.node_masses[s]);
      }
    }
    for (int c = 0; c < 3; ++c) {
      num += (a[c] - ref[c]) * (a[c] - ref[c]);
      den += ref[c] * ref[c];
    }
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("monopoles through the walk lists approximate the direct sum", "[tree][walk]") {
  const auto in = kfmm_tree_test::make_input("plummer", 2000, 31);
  const double e3 = monopole_error(in, 0.3), e5 = monopole_error(in, 0.5), e8 = monopole_error(in, 0.8);
  INFO("rms relative error: theta 0.3 " << e3 << ", 0.5 " << e5 << ", 0.8 " << e8);
  REQUIRE(e3 < 5e-3);
  REQUIRE(e3 < e5);
  REQUIRE(e5 < e8);
  REQUIRE(e8 < 0.1);
}
