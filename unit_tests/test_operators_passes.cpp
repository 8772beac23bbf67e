// The one-launch M2M and L2L passes (operators/kfmm/operators/translation_passes.hpp) against the
// batched operators called level by level, on random parent-first trees: equal bitwise, for whole trees
// and sub-ranges (also cutting levels), chains of up to 3000 dependent nodes, several threads per team,
// a reused workspace and a wrapping epoch, and the argument checks. (On Serial the teams run in ticket
// order and never wait; the waits are exercised by OpenMP with two or more threads and by Cuda.)
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <climits>
#include <random>
#include <string>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/operators/l2l.hpp"
#include "kfmm/operators/m2m.hpp"
#include "kfmm/operators/translation_passes.hpp"

namespace {

/// A random tree numbered breadth first (parents before children, each node's children consecutive):
/// up to `depth` levels, 0..8 children per internal node (every level but the last has at least one
/// internal node), centres jittered around the parent's, rows of random values.
struct RandomTree {
  std::vector<int> parent, first_child, num_children, level_first;  // level_first: first id per level + end
  std::vector<double> centre, rows;                                 // 3 per node; nc per node
  int num_nodes() const { return static_cast<int>(parent.size()); }
};

RandomTree make_tree(int depth, int nc, unsigned seed, bool single_children = false) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> kids(0, 8);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  RandomTree t;
  t.parent = {-1};
  t.first_child = {-1};
  t.num_children = {0};
  t.centre = {0.0, 0.0, 0.0};
  t.level_first = {0, 1};
  double size = 1.0;
  for (int l = 0; l + 1 < depth; ++l) {
    const int b = t.level_first[l], e = t.level_first[l + 1];
    bool any = false;
    for (int q = b; q < e; ++q) {
      int k = single_children ? 1 : kids(rng);
      if (!any && q == e - 1 && k == 0) k = 1 + static_cast<int>(rng() % 8);  // keep the tree growing
      if (k == 0) continue;
      any = true;
      t.first_child[q] = t.num_nodes();
      t.num_children[q] = k;
      for (int j = 0; j < k; ++j) {
        t.parent.push_back(q);
        t.first_child.push_back(-1);
        t.num_children.push_back(0);
        for (int a = 0; a < 3; ++a) t.centre.push_back(t.centre[3 * q + a] + 0.5 * size * u(rng));
      }
    }
    t.level_first.push_back(t.num_nodes());
    size *= 0.5;
  }
  t.rows.resize(static_cast<std::size_t>(t.num_nodes()) * nc);
  for (double& v : t.rows) v = u(rng);
  return t;
}

template <class Space>
struct DeviceTree {
  using Memory = typename Space::memory_space;
  Kokkos::View<int*, Memory> parent, first_child, num_children;
  Kokkos::View<double* [3], Memory> centres;
  kfmm::ExpansionView<double, Memory> rows;
  explicit DeviceTree(const RandomTree& t, int nc)
      : parent(kfmm_test::device_ints<Memory>(t.parent, "parent")),
        first_child(kfmm_test::device_ints<Memory>(t.first_child, "first_child")),
        num_children(kfmm_test::device_ints<Memory>(t.num_children, "num_children")),
        centres("centres", t.num_nodes()),
        rows("rows", t.num_nodes(), nc) {
    auto c = Kokkos::create_mirror_view(centres);
    auto r = Kokkos::create_mirror_view(rows);
    for (int i = 0; i < t.num_nodes(); ++i) {
      for (int a = 0; a < 3; ++a) c(i, a) = t.centre[3 * i + a];
      for (int k = 0; k < nc; ++k) r(i, k) = t.rows[static_cast<std::size_t>(i) * nc + k];
    }
    Kokkos::deep_copy(centres, c);
    Kokkos::deep_copy(rows, r);
  }
  /// A fresh copy of the rows as given.
  kfmm::ExpansionView<double, Memory> copy_rows() const {
    kfmm::ExpansionView<double, Memory> out("copy", rows.extent(0), rows.extent(1));
    Kokkos::deep_copy(out, rows);
    return out;
  }
};

template <class Memory>
Kokkos::View<int*, Memory> id_range(int b, int e) {
  std::vector<int> ids;
  for (int i = b; i < e; ++i) ids.push_back(i);
  return kfmm_test::device_ints<Memory>(ids, "ids");
}

/// Level-by-level M2M (keep_childless), deepest level first, over the nodes of [first, last) level by level.
template <class Space>
void m2m_by_ids(const Space& space, int p, const RandomTree& t, const DeviceTree<Space>& d, int first,
                int last, const kfmm::ExpansionView<double, typename Space::memory_space>& rows) {
  kfmm::ExpansionOptions keep;
  keep.keep_childless = true;
  for (int l = static_cast<int>(t.level_first.size()) - 2; l >= 0; --l) {
    const int b = std::max(first, t.level_first[l]), e = std::min(last, t.level_first[l + 1]);
    if (e > b)
      kfmm::m2m(space, p, id_range<typename Space::memory_space>(b, e), d.first_child, d.num_children,
                d.centres, rows, keep);
  }
}

/// Level-by-level M2M over parents on levels [top, bottom), deepest first.
template <class Space>
void m2m_by_level(const Space& space, int p, const RandomTree& t, const DeviceTree<Space>& d, int top,
                  int bottom, const kfmm::ExpansionView<double, typename Space::memory_space>& rows) {
  m2m_by_ids(space, p, t, d, t.level_first[top], t.level_first[bottom], rows);
}

/// Level-by-level L2L, root side first, over the nodes of [first, last) level by level.
template <class Space>
void l2l_by_ids(const Space& space, int p, const RandomTree& t, const DeviceTree<Space>& d, int first,
                int last, const kfmm::ExpansionView<double, typename Space::memory_space>& rows) {
  for (std::size_t l = 0; l + 1 < t.level_first.size(); ++l) {
    const int b = std::max(first, t.level_first[l]), e = std::min(last, t.level_first[l + 1]);
    if (e > b) kfmm::l2l(space, p, id_range<typename Space::memory_space>(b, e), d.parent, d.centres, rows);
  }
}

/// Level-by-level L2L over children on levels [top, levels), root side first.
template <class Space>
void l2l_by_level(const Space& space, int p, const RandomTree& t, const DeviceTree<Space>& d, int top,
                  const kfmm::ExpansionView<double, typename Space::memory_space>& rows) {
  l2l_by_ids(space, p, t, d, t.level_first[top], t.num_nodes(), rows);
}

template <class A, class B>
int count_differences(const A& a, const B& b) {
  auto ha = kfmm_test::to_host(a);
  auto hb = kfmm_test::to_host(b);
  int differ = 0;
  for (std::size_t i = 0; i < ha.extent(0); ++i)
    for (std::size_t k = 0; k < ha.extent(1); ++k) differ += ha(i, k) == hb(i, k) ? 0 : 1;
  return differ;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("m2m_pass and l2l_pass equal level-by-level m2m and l2l", "[operators][passes]",
                        kfmm_test::ExecutionSpaces) {
  const TestType space;
  kfmm::TranslationPassWorkspace<typename TestType::memory_space> workspace;  // (reused by every call)
  for (const int p : {0, 3, 7}) {
    const int nc = kfmm::num_coefficients(p);
    for (const unsigned seed : {1u, 2u, 3u}) {
      const RandomTree t = make_tree(6, nc, seed + 10u * static_cast<unsigned>(p));
      const DeviceTree<TestType> d(t, nc);
      const int levels = static_cast<int>(t.level_first.size()) - 1;
      INFO("order " << p << ", seed " << seed << ", " << t.num_nodes() << " nodes, " << levels << " levels");
      for (const int top : {0, 1, 2}) {
        // M2M: parents on levels top .. levels - 2, in one launch.
        auto ref = d.copy_rows();
        auto got = d.copy_rows();
        m2m_by_level(space, p, t, d, top, levels - 1, ref);
        kfmm::m2m_pass(space, p, t.level_first[top], t.level_first[levels - 1], d.first_child, d.num_children,
                       d.centres, got, workspace);
        CHECK(count_differences(got, ref) == 0);
        // L2L: children on levels max(1, top) .. levels - 1.
        auto lref = d.copy_rows();
        auto lgot = d.copy_rows();
        const int l2l_top = top > 1 ? top : 1;
        l2l_by_level(space, p, t, d, l2l_top, lref);
        kfmm::l2l_pass(space, p, t.level_first[l2l_top], t.num_nodes(), d.parent, d.centres, lgot, workspace);
        CHECK(count_differences(lgot, lref) == 0);
      }
      // A range that stops above the deepest parents: rows at and below `last` are read as given.
      if (levels >= 4) {
        auto ref = d.copy_rows();
        auto got = d.copy_rows();
        m2m_by_level(space, p, t, d, 1, levels - 2, ref);
        kfmm::m2m_pass(space, p, t.level_first[1], t.level_first[levels - 2], d.first_child, d.num_children,
                       d.centres, got, workspace);
        CHECK(count_differences(got, ref) == 0);
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("passes over chains, a lone root and empty ranges", "[operators][passes]",
                        kfmm_test::ExecutionSpaces) {
  // A chain (one child per node) is the longest dependency: every node waits for the one before it.
  const TestType space;
  kfmm::TranslationPassWorkspace<typename TestType::memory_space> workspace;
  const int p = 4, nc = kfmm::num_coefficients(p);
  const RandomTree chain = make_tree(40, nc, 7u, true);
  const DeviceTree<TestType> d(chain, nc);
  auto ref = d.copy_rows();
  auto got = d.copy_rows();
  m2m_by_level(space, p, chain, d, 0, 39, ref);
  kfmm::m2m_pass(space, p, 0, chain.num_nodes() - 1, d.first_child, d.num_children, d.centres, got,
                 workspace);
  CHECK(count_differences(got, ref) == 0);
  ref = d.copy_rows();
  got = d.copy_rows();
  l2l_by_level(space, p, chain, d, 1, ref);
  kfmm::l2l_pass(space, p, 1, chain.num_nodes(), d.parent, d.centres, got, workspace);
  CHECK(count_differences(got, ref) == 0);
  // Empty ranges and a lone root change nothing.
  const RandomTree root = make_tree(1, nc, 8u);
  const DeviceTree<TestType> r(root, nc);
  got = r.copy_rows();
  kfmm::m2m_pass(space, p, 0, 1, r.first_child, r.num_children, r.centres, got, workspace);
  kfmm::m2m_pass(space, p, 0, 0, r.first_child, r.num_children, r.centres, got, workspace);
  kfmm::l2l_pass(space, p, 1, 1, r.parent, r.centres, got, workspace);
  CHECK(count_differences(got, r.rows) == 0);
}

TEST_CASE("passes with several threads per team agree with level-by-level calls", "[operators][passes]") {
  // The GPU code paths on the host: M2M teams summing children in scratch, L2L teams whose nodes wait
  // for parents in the same team (polling with team scans).
  using Space = Kokkos::DefaultHostExecutionSpace;
  const int max_team = kfmm_test::host_max_team_size();
  if (max_team < 2) {
    SUCCEED("host backend allows one thread per team only");
    return;
  }
  const Space space;
  kfmm::TranslationPassWorkspace<Space::memory_space> workspace;
  kfmm::ExpansionOptions options;
  options.team_size = max_team < 4 ? max_team : 4;
  const int p = 5, nc = kfmm::num_coefficients(p);
  for (const bool chain : {false, true}) {
    const RandomTree t = make_tree(chain ? 12 : 5, nc, 21u, chain);
    const DeviceTree<Space> d(t, nc);
    const int levels = static_cast<int>(t.level_first.size()) - 1;
    auto ref = d.copy_rows();
    auto got = d.copy_rows();
    m2m_by_level(space, p, t, d, 0, levels - 1, ref);
    kfmm::m2m_pass(space, p, 0, t.level_first[levels - 1], d.first_child, d.num_children, d.centres, got,
                   workspace, options);
    CHECK(count_differences(got, ref) == 0);
    ref = d.copy_rows();
    got = d.copy_rows();
    l2l_by_level(space, p, t, d, 1, ref);
    kfmm::l2l_pass(space, p, 1, t.num_nodes(), d.parent, d.centres, got, workspace, options);
    CHECK(count_differences(got, ref) == 0);
  }
}

TEMPLATE_LIST_TEST_CASE("passes over ranges that cut levels, long chains and a wrapping epoch",
                        "[operators][passes]", kfmm_test::ExecutionSpaces) {
  const TestType space;
  kfmm::TranslationPassWorkspace<typename TestType::memory_space> workspace;
  const int p = 3, nc = kfmm::num_coefficients(p);
  const RandomTree t = make_tree(6, nc, 31u);
  const DeviceTree<TestType> d(t, nc);
  const int n = t.num_nodes();
  INFO(n << " nodes");
  // Ranges that start and end inside levels: nodes outside are read as given.
  for (const auto& range :
       {std::make_pair(n / 7, n - n / 5), std::make_pair(1, n / 2), std::make_pair(n / 3, n)}) {
    auto ref = d.copy_rows();
    auto got = d.copy_rows();
    m2m_by_ids(space, p, t, d, range.first, range.second, ref);
    kfmm::m2m_pass(space, p, range.first, range.second, d.first_child, d.num_children, d.centres, got,
                   workspace);
    CHECK(count_differences(got, ref) == 0);
    ref = d.copy_rows();
    got = d.copy_rows();
    const int first = std::max(1, range.first);
    l2l_by_ids(space, p, t, d, first, range.second, ref);
    kfmm::l2l_pass(space, p, first, range.second, d.parent, d.centres, got, workspace);
    CHECK(count_differences(got, ref) == 0);
  }
  // The epoch wraps: the flags are cleared, and stale flags of earlier launches never count.
  workspace.state->epoch = UINT_MAX - 2;
  for (int call = 0; call < 4; ++call) {
    auto ref = d.copy_rows();
    auto got = d.copy_rows();
    m2m_by_ids(space, p, t, d, 0, n, ref);
    kfmm::m2m_pass(space, p, 0, n, d.first_child, d.num_children, d.centres, got, workspace);
    CHECK(count_differences(got, ref) == 0);
  }
  CHECK(workspace.state->epoch < 8);
  // A chain of 3000 nodes, every node waiting for the one before it, three times on one workspace.
  const RandomTree chain = make_tree(3000, nc, 32u, true);
  const DeviceTree<TestType> c(chain, nc);
  auto ref = c.copy_rows();
  l2l_by_ids(space, p, chain, c, 1, chain.num_nodes(), ref);
  for (int rep = 0; rep < 3; ++rep) {
    auto got = c.copy_rows();
    kfmm::l2l_pass(space, p, 1, chain.num_nodes(), c.parent, c.centres, got, workspace);
    CHECK(count_differences(got, ref) == 0);
  }
  ref = c.copy_rows();
  m2m_by_ids(space, p, chain, c, 0, chain.num_nodes(), ref);
  auto got = c.copy_rows();
  kfmm::m2m_pass(space, p, 0, chain.num_nodes(), c.first_child, c.num_children, c.centres, got, workspace);
  CHECK(count_differences(got, ref) == 0);
}

TEMPLATE_LIST_TEST_CASE("passes reject bad ranges and trees that are not numbered parents first",
                        "[operators][passes]", kfmm_test::ExecutionSpaces) {
  using Memory = typename TestType::memory_space;
  const TestType space;
  kfmm::TranslationPassWorkspace<Memory> workspace;
  const int p = 2, nc = kfmm::num_coefficients(p);
  const RandomTree t = make_tree(3, nc, 5u);
  const DeviceTree<TestType> d(t, nc);
  const int n = t.num_nodes();
  auto rows = d.copy_rows();
  const auto throws_with = [](auto&& call, const std::string& text) {
    try {
      call();
    } catch (const kfmm::Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(text) != std::string::npos);
      return;
    }
    FAIL("no kfmm::Error for " << text);
  };
  throws_with(
      [&] { kfmm::m2m_pass(space, p, 2, 1, d.first_child, d.num_children, d.centres, rows, workspace); },
      "node range [2, 1)");
  throws_with([&] { kfmm::l2l_pass(space, p, 0, n + 1, d.parent, d.centres, rows, workspace); },
              "is not inside [0, ");
  throws_with([&] { kfmm::l2l_pass(space, p, 0, n, d.parent, d.centres, rows, workspace); },
              "no parent or a parent id not below their own");
  throws_with(
      [&] { kfmm::m2m_pass(space, 17, 0, n, d.first_child, d.num_children, d.centres, rows, workspace); },
      "m2m_pass order");
  throws_with(
      [&] { kfmm::m2m_pass(space, 3, 0, n, d.first_child, d.num_children, d.centres, rows, workspace); },
      "columns, order 3");
  // Node 0 claims its children start at itself: not parent-first.
  std::vector<int> bad_first = t.first_child;
  bad_first[0] = 0;
  const auto first_child = kfmm_test::device_ints<Memory>(bad_first, "bad_first_child");
  throws_with(
      [&] { kfmm::m2m_pass(space, p, 0, n, first_child, d.num_children, d.centres, rows, workspace); },
      "parent-first numbering");
  std::vector<int> bad_parent = t.parent;
  bad_parent[n - 1] = n - 1;
  const auto parent = kfmm_test::device_ints<Memory>(bad_parent, "bad_parent");
  throws_with([&] { kfmm::l2l_pass(space, p, 1, n, parent, d.centres, rows, workspace); },
              "parent-first numbering");
  // Nothing was written by the refused calls.
  CHECK(count_differences(rows, d.rows) == 0);
}
