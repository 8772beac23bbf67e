/// \file dual_tree_walk.hpp
/// The mutual dual-tree walk: from the octree's centres and radii, the far pairs (for M2L) and the
/// near leaf pairs (for P2P), each as CSR grouped by target (core/kfmm/core/interaction_list.hpp).
///
/// The walk is level-synchronous on the device. A round takes the queue of undecided unordered node
/// pairs {A, B} (A == B for a node with itself) and, in ONE parallel_scan over the queue, decides each
/// pair and writes its results at scanned offsets: both directions of an accepted far pair, the near
/// pairs of a leaf pair (the self pair once), or the child pairs that form the next queue. The only
/// host round trip of a round is the scan's total (the next queue size and the output counts), which
/// also detects a capacity overflow: the round is then re-run after growing the buffers, so nothing
/// is ever truncated. Each unordered pair is visited once; the MAC is symmetric.
///
/// MAC, on expansion centres c and radii r (double precision): {A, B} is far iff
///   r_A + r_B <= theta d  and  d - r_A - r_B >= min_separation,  d = |c_A - c_B| > 0.
/// Otherwise a leaf pair is near; else the node with the larger radius is split (a leaf never is), or
/// both when their radii are within a factor `split_both_ratio` (fewer rounds, similar pair counts).
///
/// The pairs come out in queue order; a stable radix sort by target (sort.hpp) and one scan turn them
/// into CSR. Every step is a scan or owns its output, so the lists are identical run after run and
/// across backends (except possibly for pairs exactly on the MAC boundary where a device compiler
/// contracts the double-precision distance into FMAs; float trees are immune as their squares are exact).
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/tree/octree.hpp"
#include "kfmm/tree/sort.hpp"

namespace kfmm {

/// Parameters of the multipole acceptance criterion.
struct WalkOptions {
  /// Opening angle: far iff r_A + r_B <= theta d. 0 < theta <= 1.
  double theta = 0.5;
  /// Far pairs also need d - r_A - r_B >= min_separation (the softening floor); >= 0.
  double min_separation = 0;
  /// Split both internal nodes of a pair when max(r_A, r_B) <= split_both_ratio * min(r_A, r_B)
  /// (>= 1). The default 1 splits both only at equal radii: splitting the larger node alone gives
  /// about half the far pairs of splitting both at similar radii, for twice the generations.
  double split_both_ratio = 1.0;
  /// Generations of pairs one queue entry decides per round (1..4): more means fewer rounds (host
  /// round trips) and more work per thread.
  int levels_per_round = 3;
};

/// What a walk did (host values).
struct WalkStatistics {
  int rounds = 0;               ///< level-synchronous rounds
  long long peak_queue = 0;     ///< largest queue of undecided pairs
  long long pairs_visited = 0;  ///< unordered pairs tested
  int regrowths = 0;            ///< rounds re-run after growing a buffer
};

/// The two lists of a walk, in the memory space of the tree.
template <class MemorySpace>
struct InteractionLists {
  InteractionList<MemorySpace> far;   ///< (target node, source node) for M2L, grouped by target
  InteractionList<MemorySpace> near;  ///< (target leaf, source leaf) for P2P incl. (A, A); one row per leaf
  WalkStatistics statistics;
};

/// Reusable buffers of dual_tree_walk. Lists returned by a walk with a workspace share its memory and
/// stay valid only until the next walk with the same workspace.
template <class MemorySpace>
struct WalkWorkspace {
  Kokkos::View<int*, MemorySpace> queue[2][2];  // [current/next][A/B]
  Kokkos::View<unsigned*, MemorySpace> far_targets, near_targets;
  Kokkos::View<int*, MemorySpace> far_sources, near_sources;
  Kokkos::View<int*, MemorySpace> far_rows, far_offsets, near_rows, near_offsets;  // CSR row buffers
  SortWorkspace<MemorySpace, unsigned, int> sort;
};

namespace detail {

/// Scan value of a walk round: child pairs, far pairs and near pairs emitted so far.
struct WalkCounts {
  long long next, far, near, visited;
  KOKKOS_INLINE_FUNCTION WalkCounts() : next(0), far(0), near(0), visited(0) {}
  KOKKOS_INLINE_FUNCTION void operator+=(const WalkCounts& o) {
    next += o.next;
    far += o.far;
    near += o.near;
    visited += o.visited;
  }
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile WalkCounts& o) volatile {
    next = next + o.next;
    far = far + o.far;
    near = near + o.near;
    visited = visited + o.visited;
  }
};

/// One round of the walk over queue entries 0..size-1.
template <class MemorySpace, class Real>
struct WalkRound {
  using value_type = WalkCounts;
  enum Action : int { kFar = 0, kNear = 1, kSplitA = 2, kSplitB = 3, kSplitBoth = 4, kSplitSelf = 5 };

  Kokkos::View<const Real* [3], MemorySpace> centres;
  Kokkos::View<const Real*, MemorySpace> radii;
  Kokkos::View<const int*, MemorySpace> first_child, num_children;
  Kokkos::View<const int*, MemorySpace> qa, qb;        // current queue
  Kokkos::View<int*, MemorySpace> na, nb;              // next queue
  Kokkos::View<unsigned*, MemorySpace> far_t, near_t;  // output pairs
  Kokkos::View<int*, MemorySpace> far_s, near_s;
  long long far_base, near_base;  // pairs emitted by earlier rounds
  long long next_cap, far_cap, near_cap;
  double theta, min_separation, split_both_ratio;
  int levels;  // generations decided per queue entry and round
  static constexpr int kStack = 96;

  KOKKOS_INLINE_FUNCTION int decide(const int a, const int b, int& count) const {
    const int ka = num_children(a);
    if (a == b) {
      count = ka == 0 ? 1 : ka * (ka + 1) / 2;
      return ka == 0 ? kNear : kSplitSelf;
    }
    const int kb = num_children(b);
    const double dx = static_cast<double>(centres(a, 0)) - static_cast<double>(centres(b, 0));
    const double dy = static_cast<double>(centres(a, 1)) - static_cast<double>(centres(b, 1));
    const double dz = static_cast<double>(centres(a, 2)) - static_cast<double>(centres(b, 2));
    const double d = compat::sqrt(dx * dx + dy * dy + dz * dz);
    const double ra = static_cast<double>(radii(a)), rb = static_cast<double>(radii(b));
    const double s = ra + rb;
    if (d > 0 && s <= theta * d && d - s >= min_separation) {
      count = 2;
      return kFar;
    }
    if (ka == 0 && kb == 0) {
      count = 2;
      return kNear;
    }
    if (ka > 0 && kb > 0 && (ra >= rb ? ra <= split_both_ratio * rb : rb <= split_both_ratio * ra)) {
      count = ka * kb;
      return kSplitBoth;
    }
    if (kb == 0 || (ka > 0 && ra >= rb)) {
      count = ka;
      return kSplitA;
    }
    count = kb;
    return kSplitB;
  }

  /// Calls f(x, y) for every child pair of an undecided pair, in a fixed order.
  template <class F>
  KOKKOS_INLINE_FUNCTION void for_each_child_pair(const int action, const int a, const int b, F&& f) const {
    if (action == kSplitSelf) {
      const int fa = first_child(a), ka = num_children(a);
      for (int i = 0; i < ka; ++i)
        for (int j = i; j < ka; ++j) f(fa + i, fa + j);
    } else if (action == kSplitBoth) {
      const int fa = first_child(a), ka = num_children(a), fb = first_child(b), kb = num_children(b);
      for (int i = 0; i < ka; ++i)
        for (int j = 0; j < kb; ++j) f(fa + i, fb + j);
    } else if (action == kSplitA) {
      const int fa = first_child(a), ka = num_children(a);
      for (int i = 0; i < ka; ++i) f(fa + i, b);
    } else {
      const int fb = first_child(b), kb = num_children(b);
      for (int j = 0; j < kb; ++j) f(a, fb + j);
    }
  }

  /// Decides queue pair q and, depth first, up to `levels - 1` generations of its descendants; pairs
  /// still undecided then go to the next queue. Both scan passes replay the same sequence, so the
  /// final pass writes exactly what the first one counted.
  KOKKOS_INLINE_FUNCTION void operator()(const int q, WalkCounts& e, const bool final) const {
    int sa[kStack], sb[kStack];
    unsigned char sd[kStack];
    sa[0] = qa(q);
    sb[0] = qb(q);
    sd[0] = 0;
    int top = 1;
    while (top > 0) {
      --top;
      const int a = sa[top], b = sb[top], depth = sd[top];
      int count = 0;
      const int action = decide(a, b, count);
      e.visited += 1;
      if (action == kFar) {
        const long long o = far_base + e.far;
        if (final && o + 2 <= far_cap) {
          far_t(o) = static_cast<unsigned>(a);
          far_s(o) = b;
          far_t(o + 1) = static_cast<unsigned>(b);
          far_s(o + 1) = a;
        }
        e.far += 2;
      } else if (action == kNear) {
        const long long o = near_base + e.near;
        if (final && o + count <= near_cap) {
          near_t(o) = static_cast<unsigned>(a);
          near_s(o) = b;
          if (count == 2) {
            near_t(o + 1) = static_cast<unsigned>(b);
            near_s(o + 1) = a;
          }
        }
        e.near += count;
      } else if (depth + 1 < levels && top + count <= kStack) {
        for_each_child_pair(action, a, b, [&](const int x, const int y) {
          sa[top] = x;
          sb[top] = y;
          sd[top] = static_cast<unsigned char>(depth + 1);
          ++top;
        });
      } else {
        if (final && e.next + count <= next_cap) {
          long long o = e.next;
          for_each_child_pair(action, a, b, [&](const int x, const int y) {
            na(o) = x;
            nb(o) = y;
            ++o;
          });
        }
        e.next += count;
      }
    }
  }
};

/// Rows of a CSR list from pairs sorted by target: row r starts where the target changes.
template <class MemorySpace>
struct RowStarts {
  using value_type = int;
  Kokkos::View<const unsigned*, MemorySpace> targets;
  Kokkos::View<int*, MemorySpace> row_targets, row_offsets;
  KOKKOS_INLINE_FUNCTION void operator()(const int i, int& row, const bool final) const {
    const bool start = i == 0 || targets(i) != targets(i - 1);
    if (start) {
      if (final) {
        row_targets(row) = static_cast<int>(targets(i));
        row_offsets(row) = i;
      }
      row += 1;
    }
  }
};

/// Grows `v` to at least `needed` entries (times 1.5 headroom), keeping its first `keep` entries.
template <class View>
void grow(View& v, long long needed, long long keep) {
  require(needed <= INT_MAX, "dual_tree_walk: ", needed, " pairs exceed the int index range of the lists");
  const long long want = needed + needed / 2 + 1024;
  const int cap = static_cast<int>(want < INT_MAX ? want : INT_MAX);
  View grown(Kokkos::view_alloc(Kokkos::WithoutInitializing, v.label()), cap);
  if (keep > 0)
    Kokkos::deep_copy(Kokkos::subview(grown, Kokkos::make_pair(0, static_cast<int>(keep))),
                      Kokkos::subview(v, Kokkos::make_pair(0, static_cast<int>(keep))));
  v = grown;
}

/// Sorts `count` pairs by target (stably) and forms the CSR list; rows = distinct targets.
template <class ExecutionSpace>
InteractionList<typename ExecutionSpace::memory_space> pairs_to_csr(
    const ExecutionSpace& space,
    const Kokkos::View<unsigned*, typename ExecutionSpace::memory_space>& targets,
    const Kokkos::View<int*, typename ExecutionSpace::memory_space>& sources, int count, int num_nodes,
    int max_rows, SortWorkspace<typename ExecutionSpace::memory_space, unsigned, int>& sort_workspace,
    Kokkos::View<int*, typename ExecutionSpace::memory_space>& row_targets,
    Kokkos::View<int*, typename ExecutionSpace::memory_space>& row_offsets) {
  using memory_space = typename ExecutionSpace::memory_space;
  sort_by_key(space, targets, sources, count, bits_for(num_nodes > 0 ? num_nodes - 1 : 0), sort_workspace);
  if (static_cast<int>(row_targets.extent(0)) < max_rows) {
    row_targets = Kokkos::View<int*, memory_space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::walk::rows")), max_rows);
  }
  if (static_cast<int>(row_offsets.extent(0)) < max_rows + 1) {
    row_offsets = Kokkos::View<int*, memory_space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::walk::offsets")), max_rows + 1);
  }
  int rows = 0;
  if (count > 0) {
    Kokkos::parallel_scan("kfmm::walk::csr_rows", Kokkos::RangePolicy<ExecutionSpace>(space, 0, count),
                          RowStarts<memory_space>{targets, row_targets, row_offsets}, rows);
  }
  Kokkos::deep_copy(space, Kokkos::subview(row_offsets, rows), count);
  InteractionList<memory_space> list;
  list.targets = Kokkos::subview(row_targets, Kokkos::make_pair(0, rows));
  list.offsets = Kokkos::subview(row_offsets, Kokkos::make_pair(0, rows + 1));
  list.sources = Kokkos::subview(sources, Kokkos::make_pair(0, count));
  return list;
}

}  // namespace detail

/// Runs the mutual dual-tree walk on `space` over `tree` and returns the far and near lists, using
/// (and growing) the buffers of `workspace`; the lists share the workspace's memory.
template <class ExecutionSpace, class Real>
InteractionLists<typename ExecutionSpace::memory_space> dual_tree_walk(
    const ExecutionSpace& space, const Octree<ExecutionSpace, Real>& tree, const WalkOptions& options,
    WalkWorkspace<typename ExecutionSpace::memory_space>& ws) {
  using memory_space = typename ExecutionSpace::memory_space;
  require(options.theta > 0 && options.theta <= 1, "dual_tree_walk: theta = ", options.theta,
          " must lie in (0, 1]");
  require(options.min_separation >= 0 && std::isfinite(options.min_separation),
          "dual_tree_walk: min_separation = ", options.min_separation, " must be finite and >= 0");
  require(options.levels_per_round >= 1 && options.levels_per_round <= 4,
          "dual_tree_walk: levels_per_round = ", options.levels_per_round, " must lie in 1..4");
  require(options.split_both_ratio >= 1, "dual_tree_walk: split_both_ratio = ", options.split_both_ratio,
          " must be >= 1");
  InteractionLists<memory_space> lists;
  const int num_nodes = tree.num_nodes;
  const auto alloc = [](const char* label) {
    return Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label));
  };

  // Capacity guesses; grown when a round reports more.
  auto ensure = [&](auto& v, long long want, const char* label) {
    if (static_cast<long long>(v.extent(0)) < want) {
      v = std::remove_reference_t<decltype(v)>(alloc(label), static_cast<size_t>(want));
    }
  };
  const long long q0 = 8LL * num_nodes + 64;
  for (int c = 0; c < 2; ++c) {
    ensure(ws.queue[c][0], q0, "kfmm::walk::queue_a");
    ensure(ws.queue[c][1], q0, "kfmm::walk::queue_b");
  }
  ensure(ws.far_targets, 16LL * num_nodes + 64, "kfmm::walk::far_targets");
  ensure(ws.far_sources, 16LL * num_nodes + 64, "kfmm::walk::far_sources");
  ensure(ws.near_targets, 32LL * tree.num_leaves + 64, "kfmm::walk::near_targets");
  ensure(ws.near_sources, 32LL * tree.num_leaves + 64, "kfmm::walk::near_sources");

  long long far_count = 0, near_count = 0, queue_size = 0;
  int cur = 0;
  if (num_nodes > 0) {
    Kokkos::deep_copy(space, Kokkos::subview(ws.queue[cur][0], 0), 0);
    Kokkos::deep_copy(space, Kokkos::subview(ws.queue[cur][1], 0), 0);
    queue_size = 1;
  }
  detail::WalkRound<memory_space, Real> round;
  round.centres = tree.centres;
  round.radii = tree.radii;
  round.first_child = tree.first_child;
  round.num_children = tree.num_children;
  round.theta = options.theta;
  round.min_separation = options.min_separation;
  round.split_both_ratio = options.split_both_ratio;
  round.levels = options.levels_per_round;
  while (queue_size > 0) {
    require(lists.statistics.rounds < 64 * (tree.num_levels + 1),
            "dual_tree_walk: the walk does not terminate");
    lists.statistics.peak_queue =
        queue_size > lists.statistics.peak_queue ? queue_size : lists.statistics.peak_queue;
    detail::WalkCounts totals;
    for (;;) {
      round.qa = ws.queue[cur][0];
      round.qb = ws.queue[cur][1];
      round.na = ws.queue[1 - cur][0];
      round.nb = ws.queue[1 - cur][1];
      round.far_t = ws.far_targets;
      round.far_s = ws.far_sources;
      round.near_t = ws.near_targets;
      round.near_s = ws.near_sources;
      round.far_base = far_count;
      round.near_base = near_count;
      round.next_cap = static_cast<long long>(round.na.extent(0));
      round.far_cap = static_cast<long long>(ws.far_targets.extent(0));
      round.near_cap = static_cast<long long>(ws.near_targets.extent(0));
      totals = detail::WalkCounts();
      Kokkos::parallel_scan("kfmm::walk::round",
                            Kokkos::RangePolicy<ExecutionSpace>(space, 0, static_cast<int>(queue_size)),
                            round, totals);
      bool regrow = false;
      if (totals.next > round.next_cap) {
        for (int ab = 0; ab < 2; ++ab) detail::grow(ws.queue[1 - cur][ab], totals.next, 0);
        regrow = true;
      }
      if (far_count + totals.far > round.far_cap) {
        detail::grow(ws.far_targets, far_count + totals.far, far_count);
        detail::grow(ws.far_sources, far_count + totals.far, far_count);
        regrow = true;
      }
      if (near_count + totals.near > round.near_cap) {
        detail::grow(ws.near_targets, near_count + totals.near, near_count);
        detail::grow(ws.near_sources, near_count + totals.near, near_count);
        regrow = true;
      }
      if (!regrow) break;
      ++lists.statistics.regrowths;
    }
    far_count += totals.far;
    near_count += totals.near;
    lists.statistics.pairs_visited += totals.visited;
    queue_size = totals.next;
    cur = 1 - cur;
    ++lists.statistics.rounds;
  }
  lists.far = detail::pairs_to_csr(space, ws.far_targets, ws.far_sources, static_cast<int>(far_count),
                                   num_nodes, num_nodes, ws.sort, ws.far_rows, ws.far_offsets);
  // Near rows are exactly the leaves (each has its self pair).
  lists.near = detail::pairs_to_csr(space, ws.near_targets, ws.near_sources, static_cast<int>(near_count),
                                    num_nodes, tree.num_leaves, ws.sort, ws.near_rows, ws.near_offsets);
  return lists;
}

/// Runs the mutual dual-tree walk on `space` over `tree`; the returned lists own their memory.
template <class ExecutionSpace, class Real>
InteractionLists<typename ExecutionSpace::memory_space> dual_tree_walk(
    const ExecutionSpace& space, const Octree<ExecutionSpace, Real>& tree, const WalkOptions& options) {
  WalkWorkspace<typename ExecutionSpace::memory_space> workspace;
  return dual_tree_walk(space, tree, options, workspace);
}

}  // namespace kfmm
