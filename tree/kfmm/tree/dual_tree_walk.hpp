/// \file dual_tree_walk.hpp
/// The dual-tree walk: from the octree's centres and radii, the far pairs (for M2L) and the near leaf
/// pairs (for P2P), each as CSR grouped by target (core/kfmm/core/interaction_list.hpp), built on the
/// device breadth first over a queue of open (target, source) pairs.
///
/// MAC, on expansion centres c and radii r (double precision): (A, B) is far iff
///   r_A + r_B <= theta d  and  d - (r_A + r_B) >= min_separation,  d = |c_A - c_B| > 0,  0 < theta < 1
/// (theta < 1 also guarantees that a node is never accepted against one of its ancestors).
/// Otherwise a leaf pair is near; a self pair (A, A) of an internal node opens into all pairs of its
/// children; else the node with the larger radius is split (a leaf never is; on equal radii the larger
/// node id), so that (A, B) and (B, A) split the same node and both lists come out symmetric.
///
/// Rounds. Round r holds the open pairs; every pair does O(1) work in its own thread, so no thread can
/// set the pace of a round (an earlier depth-first design let one thread open ~9e4 nodes). Per round:
///   classify: one thread per open pair decides it (far / near / split target / split source / split
///             both) and writes its output count, packed as (final pairs << 32) | (child pairs);
///   scan:     exclusive_scan_in_place (core/kfmm/core/scan.hpp) turns the counts into write offsets
///             and returns the totals (the round's one host round trip: it sizes the next queue);
///   emit:     each pair writes its final pair (far or near) or its child pairs at its offsets.
/// The action is stored by classify, not recomputed by emit, so the two kernels cannot disagree (a
/// device compiler may contract the double-precision distance differently in two kernels). Rounds
/// larger than 2^25 pairs run in slices, so the packed 32-bit child count cannot wrap.
///
/// Planned rounds. A host round trip per round (~20 rounds at 1e6 particles) leaves the GPU idle
/// between rounds. A walk with a reused workspace therefore first runs the rounds of the workspace's
/// plan, the round sizes of its last walk plus a quarter (a time step changes them little): every
/// kernel is launched over the planned capacity, reads the round's open count and pair base from a
/// small device array that emit advances, and nothing returns to the host until the plan's rounds are
/// done. Then one copy brings back the sizes and an overflow flag: if any capacity was too small the
/// walk starts again with counted rounds (statistics.replanned); if pairs are still open, counted rounds
/// continue from there. Either way the lists are exactly those of counted rounds.
///
/// CSR. Final pairs are written in round order with the key (near << b) | target, b = bits of the
/// largest node id. One stable radix sort of the keys (tree/kfmm/tree/sort.hpp; CUB on CUDA) groups
/// them: all far pairs by ascending target, then all near pairs by ascending target. One thread per
/// node finds its rows' bounds by binary search and one scan over the nodes compacts the rows of both
/// lists.
///
/// Every kernel owns its output or is a scan, and the sort is stable: the lists are identical run after
/// run and across backends (except possibly for pairs exactly on the MAC boundary where a device
/// compiler contracts the double-precision distance into FMAs; float trees are immune as their squared
/// distances are exact in double). Buffers are sized from the scanned counts before anything is
/// written: nothing is truncated, and counts beyond the int range are an error.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kfmm/core/error.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/scan.hpp"
#include "kfmm/core/view_capacity.hpp"
#include "kfmm/tree/octree.hpp"
#include "kfmm/tree/sort.hpp"

namespace kfmm {

/// Parameters of the multipole acceptance criterion.
struct WalkOptions {
  /// Opening angle: far iff r_A + r_B <= theta d. 0 < theta < 1.
  double theta = 0.5;
  /// Far pairs also need d - r_A - r_B >= min_separation (the softening floor); finite, >= 0.
  double min_separation = 0;
};

/// The multipole acceptance criterion of the walk, on centres (x, y, z) and radii, in double precision:
/// r_a + r_b <= theta d and d - (r_a + r_b) >= min_separation with d = |c_a - c_b| > 0, evaluated on
/// squares (no square root). Symmetric in a and b; deterministic across backends for float inputs (all
/// products are exact in double, so FMA contraction cannot change them).
KOKKOS_INLINE_FUNCTION bool mac_accepts(const double ca[3], double ra, const double cb[3], double rb,
                                        double theta_squared, double min_separation) {
  const double dx = ca[0] - cb[0], dy = ca[1] - cb[1], dz = ca[2] - cb[2];
  const double d2 = dx * dx + dy * dy + dz * dz;
  const double r = ra + rb;
  const double rs = r + min_separation;
  return d2 > 0 && r * r <= theta_squared * d2 && rs * rs <= d2;
}

/// What a walk did (host values).
struct WalkStatistics {
  int rounds = 0;               ///< breadth-first rounds
  long long peak_entries = 0;   ///< largest number of open (target, source) pairs in one round
  long long pairs_visited = 0;  ///< (target, source) pairs decided (tested against the MAC)
  int planned_rounds = 0;       ///< rounds run from the workspace's plan, without a host round trip
  bool replanned = false;       ///< the plan was too small somewhere: the walk was re-run counted
};

/// The two lists of a walk, in the memory space of the tree. Their sources Views hold exactly their
/// pairs (sources.extent(0) == num_pairs()).
template <class MemorySpace>
struct InteractionLists {
  InteractionList<MemorySpace> far;   ///< (target node, source node) for M2L, rows by ascending target
  InteractionList<MemorySpace> near;  ///< (target leaf, source leaf) incl. (A, A); one row per leaf
  WalkStatistics statistics;
};

namespace detail {
/// A node as the walk reads it, in the tree's precision: 32 bytes (one GPU memory sector) for float
/// trees, 64 for double. Classify gathers two records per open pair, so their size sets its traffic.
/// The MAC converts them to double, where float products are exact: the decisions do not depend on
/// the record's precision beyond the tree's own.
template <class Real>
struct alignas(8 * sizeof(Real)) WalkNode {
  Real centre[3];
  Real radius;
  int first_child, num_children;
};
static_assert(sizeof(WalkNode<float>) == 32 && sizeof(WalkNode<double>) == 64,
              "one walk node record per 32-byte sector (float) or cache line (double)");
}  // namespace detail

/// Reusable buffers of dual_tree_walk (grown on demand; a reused workspace allocates nothing once the
/// lists stop growing). Lists returned by a walk with a workspace share its memory and stay valid only
/// until the next walk with the same workspace.
template <class MemorySpace>
struct WalkWorkspace {
  Kokkos::View<double*, MemorySpace> node_storage;  ///< per node: a detail::WalkNode<Real> record (raw)
  Kokkos::View<unsigned long long*, MemorySpace> queue[2];  ///< open pairs (t << 32 | s), by round
  Kokkos::View<unsigned long long*, MemorySpace> counts;    ///< per open pair: packed counts, offsets
  Kokkos::View<unsigned char*, MemorySpace> actions;        ///< per open pair: the decision
  Kokkos::View<unsigned*, MemorySpace> pair_keys;           ///< per final pair: (near << b) | target
  Kokkos::View<int*, MemorySpace> pair_sources;             ///< per final pair: source (the payload)
  Kokkos::View<int* [4], MemorySpace> bounds;               ///< per node: far [begin, end), near [begin, end)
  Kokkos::View<int*, MemorySpace> split;  ///< [0]: index of the first near pair; [1], [2]: far, near rows
  Kokkos::View<int*, MemorySpace> far_rows, far_offsets, near_rows, near_offsets;
  SortWorkspace<MemorySpace, unsigned, int> sort;
  ScanWorkspace<MemorySpace> scan;
  /// Open pairs per classify/scan/emit slice, 1 .. 2^25 (tests set it small to exercise slicing).
  long long slice = 1LL << 25;
  /// Run planned rounds when a plan exists (the default; false: every round is counted).
  bool planned_rounds = true;
  /// The plan: open pairs per round and final pairs of the last walk with this workspace.
  std::vector<long long> plan;
  long long planned_pairs = 0;
  Kokkos::View<long long*, MemorySpace> state;  ///< planned rounds: pair base, open pairs per round; overflow
};

namespace detail {

/// What the walk does with one open pair.
enum WalkAction : unsigned char { kWalkFar, kWalkNear, kWalkSplitTarget, kWalkSplitSource, kWalkSplitBoth };

/// The decision for the open pair (target t, source s); see the file comment.
template <class Real>
KOKKOS_INLINE_FUNCTION WalkAction walk_action(const WalkNode<Real>& a, const int t, const WalkNode<Real>& b,
                                              const int s, const double theta_squared,
                                              const double min_separation) {
  if (t == s) return a.num_children == 0 ? kWalkNear : kWalkSplitBoth;
  const double ca[3] = {a.centre[0], a.centre[1], a.centre[2]};
  const double cb[3] = {b.centre[0], b.centre[1], b.centre[2]};
  if (mac_accepts(ca, a.radius, cb, b.radius, theta_squared, min_separation)) return kWalkFar;
  const bool target_leaf = a.num_children == 0, source_leaf = b.num_children == 0;
  if (target_leaf && source_leaf) return kWalkNear;
  if (target_leaf) return kWalkSplitSource;
  if (source_leaf) return kWalkSplitTarget;
  if (a.radius != b.radius) return a.radius > b.radius ? kWalkSplitTarget : kWalkSplitSource;
  return t > s ? kWalkSplitTarget : kWalkSplitSource;  // the same node in both directions
}

/// An open pair as the queue stores it: target in the high half, source in the low half.
KOKKOS_INLINE_FUNCTION unsigned long long walk_pair(const int t, const int s) {
  return (static_cast<unsigned long long>(t) << 32) | static_cast<unsigned>(s);
}

/// Most open pairs per classify/scan/emit slice: 64 children per pair at most, so the packed child
/// count (low 32 bits) of a slice stays below 2^31 and never carries into the final-pair count.
inline constexpr long long max_walk_slice = 1LL << 25;

/// Starts a walk: packs the node records, seeds the queue with (root, root).
template <class MemorySpace, class Real>
struct WalkPack {
  Kokkos::View<WalkNode<Real>*, MemorySpace, Kokkos::MemoryUnmanaged> nodes;
  Kokkos::View<const Real* [3], MemorySpace> centres;
  Kokkos::View<const Real*, MemorySpace> radii;
  Kokkos::View<const int*, MemorySpace> first_child, num_children;
  Kokkos::View<unsigned long long*, MemorySpace> queue;
  Kokkos::View<long long*, MemorySpace> state;
  int overflow_at;  // >= 0: seed the planned rounds' state (no pair yet, one open pair, no overflow)
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    WalkNode<Real> node;
    for (int a = 0; a < 3; ++a) node.centre[a] = centres(i, a);
    node.radius = radii(i);
    node.first_child = first_child(i);
    node.num_children = num_children(i);
    nodes(i) = node;
    if (i == 0) {
      queue(0) = 0;  // (root, root)
      if (overflow_at >= 0) {
        state(0) = 0;
        state(1) = 1;
        state(overflow_at) = 0;
      }
    }
  }
};

/// Classify: the action and the packed output count of open pairs [begin, begin + m); item m writes the
/// 0 that the in-place scan turns into the total.
template <class MemorySpace, class Real>
struct WalkClassify {
  Kokkos::View<const WalkNode<Real>*, MemorySpace, Kokkos::MemoryUnmanaged> nodes;
  Kokkos::View<const unsigned long long*, MemorySpace> queue;
  Kokkos::View<unsigned long long*, MemorySpace> counts;
  Kokkos::View<unsigned char*, MemorySpace> actions;
  Kokkos::View<const long long*, MemorySpace> state;  // planned rounds: the open count is state(open_at)
  int begin, m;
  int open_at;  // -1: all m items are open pairs (counted rounds)
  double theta_squared, min_separation;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    const long long open = open_at < 0 ? m : state(open_at);
    if (i == m || i >= open) {
      counts(i) = 0;
      return;
    }
    const unsigned long long pair = queue(begin + i);
    const int t = static_cast<int>(pair >> 32), s = static_cast<int>(pair & 0xffffffffULL);
    const WalkNode<Real>& a = nodes(t);
    const WalkNode<Real>& b = nodes(s);
    const WalkAction action = walk_action(a, t, b, s, theta_squared, min_separation);
    actions(i) = action;
    unsigned long long count = 0;
    switch (action) {
      case kWalkFar:
      case kWalkNear:
        count = 1ULL << 32;
        break;
      case kWalkSplitTarget:
        count = static_cast<unsigned long long>(a.num_children);
        break;
      case kWalkSplitSource:
        count = static_cast<unsigned long long>(b.num_children);
        break;
      case kWalkSplitBoth:
        count = static_cast<unsigned long long>(a.num_children * a.num_children);
        break;
    }
    counts(i) = count;
  }
};

/// Emit: every open pair of the slice writes its final pair or its child pairs at its scanned offsets.
template <class MemorySpace, class Real>
struct WalkEmit {
  Kokkos::View<const WalkNode<Real>*, MemorySpace, Kokkos::MemoryUnmanaged> nodes;
  Kokkos::View<const unsigned long long*, MemorySpace> queue;
  Kokkos::View<const unsigned long long*, MemorySpace> offsets;
  Kokkos::View<const unsigned char*, MemorySpace> actions;
  Kokkos::View<unsigned long long*, MemorySpace> next;
  Kokkos::View<unsigned*, MemorySpace> pair_keys;
  Kokkos::View<int*, MemorySpace> pair_sources;
  Kokkos::View<long long*, MemorySpace> state;  // planned rounds: bases in, next bases and overflow out
  long long pair_base, next_base;
  unsigned near_bit;
  int begin, m;
  int round;  // -1: counted round (bases from the host); else planned round `round`
  int overflow_at;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    const long long pair_cap = static_cast<long long>(pair_keys.extent(0));
    const long long next_cap = static_cast<long long>(next.extent(0));
    long long pairs0 = pair_base;
    if (round >= 0) {
      // Planned round: the bases live on the device; item 0 writes the next round's and flags a
      // capacity the plan got wrong (the walk then re-runs counted).
      pairs0 = state(2 * round);
      if (i == 0) {
        const unsigned long long total = offsets(m);
        const long long finals = static_cast<long long>(total >> 32);
        const long long children = static_cast<long long>(total & 0xffffffffULL);
        state(2 * round + 2) = pairs0 + finals;
        state(2 * round + 3) = children;
        if (state(2 * round + 1) > m || pairs0 + finals > pair_cap || children > next_cap)
          state(overflow_at) = 1;
      }
      if (i >= state(2 * round + 1)) return;
    }
    const unsigned long long pair = queue(begin + i);
    const int t = static_cast<int>(pair >> 32), s = static_cast<int>(pair & 0xffffffffULL);
    const unsigned long long o = offsets(i);
    const WalkAction action = static_cast<WalkAction>(actions(i));
    if (action == kWalkFar || action == kWalkNear) {
      const long long p = pairs0 + static_cast<long long>(o >> 32);
      if (p < pair_cap) {
        pair_keys(p) = static_cast<unsigned>(t) | (action == kWalkNear ? near_bit : 0u);
        pair_sources(p) = s;
      }
      return;
    }
    const long long c = next_base + static_cast<long long>(o & 0xffffffffULL);
    if (action == kWalkSplitTarget) {
      const WalkNode<Real>& a = nodes(t);
      for (int j = 0; j < a.num_children; ++j)
        if (c + j < next_cap) next(c + j) = walk_pair(a.first_child + j, s);
    } else if (action == kWalkSplitSource) {
      const WalkNode<Real>& b = nodes(s);
      for (int j = 0; j < b.num_children; ++j)
        if (c + j < next_cap) next(c + j) = walk_pair(t, b.first_child + j);
    } else {  // a self pair: all pairs of the children, (child i, child j) at i k + j
      const WalkNode<Real>& a = nodes(t);
      const int k = a.num_children, f = a.first_child;
      for (int u = 0; u < k; ++u)
        for (int v = 0; v < k; ++v)
          if (c + u * k + v < next_cap) next(c + u * k + v) = walk_pair(f + u, f + v);
    }
  }
};

/// After the sort: the bounds of every row per node, far [0, 1) and near [2, 3), by binary search of the
/// sorted keys (far keys are the target t, near keys near_bit + t), and the index of the first near pair.
/// One thread per node: ~4 log2(pairs) cached reads each, instead of a pass over every pair (a per-pair
/// boundary-marking kernel took ~0.1 ms for 1e7 pairs on the H200).
template <class MemorySpace>
struct WalkRowBounds {
  Kokkos::View<const unsigned*, MemorySpace> keys;
  Kokkos::View<int* [4], MemorySpace> bounds;
  Kokkos::View<int*, MemorySpace> split;
  unsigned long long near_bit;
  int pairs;
  /// First index whose key is >= key (pairs when none).
  KOKKOS_INLINE_FUNCTION int lower_bound(const unsigned long long key) const {
    int lo = 0, hi = pairs;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (static_cast<unsigned long long>(keys(mid)) < key) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
  KOKKOS_INLINE_FUNCTION void operator()(const int t) const {
    const unsigned long long far = static_cast<unsigned long long>(t), near = near_bit + far;
    bounds(t, 0) = lower_bound(far);
    bounds(t, 1) = lower_bound(far + 1);
    bounds(t, 2) = lower_bound(near);
    bounds(t, 3) = lower_bound(near + 1);
    if (t == 0) split(0) = lower_bound(near_bit);
  }
};

/// Scan over the nodes 0..num_nodes: compacts the far and near rows (value: far rows << 32 | near rows)
/// and writes both CSR offsets arrays; node num_nodes closes them.
template <class MemorySpace>
struct WalkCompactRows {
  using value_type = unsigned long long;
  Kokkos::View<const int* [4], MemorySpace> bounds;
  Kokkos::View<int*, MemorySpace> split;
  Kokkos::View<int*, MemorySpace> far_rows, far_offsets, near_rows, near_offsets;
  int num_nodes, pairs;
  KOKKOS_INLINE_FUNCTION void operator()(const int t, value_type& rows, const bool final) const {
    const int far_row = static_cast<int>(rows >> 32), near_row = static_cast<int>(rows & 0xffffffffULL);
    const int first_near = pairs > 0 ? split(0) : 0;
    if (t == num_nodes) {
      if (final) {
        far_offsets(far_row) = first_near;
        near_offsets(near_row) = pairs - first_near;
        if (pairs == 0) split(0) = 0;  // (no pairs: no near pair either)
        split(1) = far_row;            // the row counts, copied to the host with split(0)
        split(2) = near_row;
      }
      return;
    }
    const bool has_far = bounds(t, 1) > bounds(t, 0), has_near = bounds(t, 3) > bounds(t, 2);
    if (final) {
      if (has_far) {
        far_rows(far_row) = t;
        far_offsets(far_row) = bounds(t, 0);
      }
      if (has_near) {
        near_rows(near_row) = t;
        near_offsets(near_row) = bounds(t, 2) - first_near;
      }
    }
    rows += (has_far ? 1ULL << 32 : 0ULL) + (has_near ? 1ULL : 0ULL);
  }
};

/// Grows `v` to at least `needed` entries (plus headroom), keeping its first `keep` entries.
template <class View>
void grow_to(View& v, long long needed, long long keep) {
  require(needed <= INT_MAX, "dual_tree_walk: ", needed, " pairs exceed the int index range of the lists");
  if (needed <= static_cast<long long>(v.extent(0))) return;
  const long long want = needed + needed / 4 + 1024;  // (a quarter of headroom: memory per particle matters)
  const int cap = static_cast<int>(want < INT_MAX ? want : INT_MAX);
  View grown(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(v.label())), cap);
  if (keep > 0)
    Kokkos::deep_copy(Kokkos::subview(grown, Kokkos::make_pair(0, static_cast<int>(keep))),
                      Kokkos::subview(v, Kokkos::make_pair(0, static_cast<int>(keep))));
  v = grown;
}

}  // namespace detail

/// Runs the dual-tree walk on `space` over `tree` and returns the far and near lists, using (and
/// growing) the buffers of `workspace`; the lists share the workspace's memory.
template <class ExecutionSpace, class Real>
InteractionLists<typename ExecutionSpace::memory_space> dual_tree_walk(
    const ExecutionSpace& space, const Octree<ExecutionSpace, Real>& tree, const WalkOptions& options,
    WalkWorkspace<typename ExecutionSpace::memory_space>& ws) {
  using memory_space = typename ExecutionSpace::memory_space;
  using Range = Kokkos::RangePolicy<ExecutionSpace>;
  // theta < 1 keeps a node and its ancestors apart: the ancestor's sphere contains the node's centre.
  require(options.theta > 0 && options.theta < 1, "dual_tree_walk: theta = ", options.theta,
          " must lie in (0, 1)");
  require(options.min_separation >= 0 && std::isfinite(options.min_separation),
          "dual_tree_walk: min_separation = ", options.min_separation, " must be finite and >= 0");
  require(ws.slice >= 1 && ws.slice <= detail::max_walk_slice, "dual_tree_walk: workspace slice = ", ws.slice,
          " must lie in [1, 2^25]");
  InteractionLists<memory_space> lists;
  const int num_nodes = tree.num_nodes;

  const int node_bits = bits_for(static_cast<unsigned long long>(num_nodes > 1 ? num_nodes - 1 : 0));
  require(node_bits < 32, "dual_tree_walk: ", num_nodes, " nodes exceed the 31-bit pair keys");
  const unsigned near_bit = 1u << node_bits;
  const double theta_squared = options.theta * options.theta;

  // Planned rounds: the last walk's round sizes plus a quarter as capacities, so that no round needs
  // the host (see the file comment). Buffers are sized before the pack kernel seeds the queue.
  const int planned = num_nodes > 0 && ws.planned_rounds ? static_cast<int>(ws.plan.size()) : 0;
  std::vector<int> caps(planned);
  bool use_plan = planned > 0;
  for (int r = 0; r < planned; ++r) {
    const long long cap = ws.plan[r] + ws.plan[r] / 4 + 256;
    if (cap > ws.slice) use_plan = false;
    caps[r] = static_cast<int>(std::min<long long>(cap, INT_MAX - 1));
  }
  const int overflow_at = 2 * planned + 2;
  if (use_plan) {
    const int widest = *std::max_element(caps.begin(), caps.end());
    detail::reserve_at_least(ws.counts, widest + 1LL, "kfmm::walk::counts");
    detail::reserve_at_least(ws.actions, widest, "kfmm::walk::actions");
    for (int b = 0; b < 2; ++b) detail::reserve_at_least(ws.queue[b], widest, "kfmm::walk::queue");
    const long long pair_cap = ws.planned_pairs + ws.planned_pairs / 4 + 1024;
    detail::reserve_at_least(ws.pair_keys, pair_cap, "kfmm::walk::pair_keys");
    detail::reserve_at_least(ws.pair_sources, pair_cap, "kfmm::walk::pair_sources");
    detail::reserve_at_least(ws.state, overflow_at + 1LL, "kfmm::walk::state");
  }
  // The node records live in untyped storage so that one workspace serves float and double trees.
  using Node = detail::WalkNode<Real>;
  constexpr long long words_per_node = sizeof(Node) / sizeof(double);
  detail::reserve_at_least(ws.node_storage, words_per_node * num_nodes, "kfmm::walk::nodes");
  const Kokkos::View<Node*, memory_space, Kokkos::MemoryUnmanaged> nodes(
      reinterpret_cast<Node*>(ws.node_storage.data()), num_nodes);
  require(reinterpret_cast<std::uintptr_t>(ws.node_storage.data()) % alignof(Node) == 0,
          "dual_tree_walk: node storage not aligned to ", alignof(Node), " bytes");
  detail::reserve_at_least(ws.bounds, num_nodes, "kfmm::walk::bounds");
  detail::reserve_at_least(ws.split, 3, "kfmm::walk::split");
  for (int b = 0; b < 2; ++b) detail::reserve_at_least(ws.queue[b], 1, "kfmm::walk::queue");
  Kokkos::parallel_for("kfmm::walk::pack", Range(space, 0, num_nodes),
                       detail::WalkPack<memory_space, Real>{nodes, tree.centres, tree.radii, tree.first_child,
                                                            tree.num_children, ws.queue[0], ws.state,
                                                            use_plan ? overflow_at : -1});

  long long open = num_nodes > 0 ? 1 : 0, pairs = 0;
  int cur = 0;
  std::vector<long long> sizes;  // open pairs per round: the next walk's plan
  if (use_plan) {
    for (int r = 0; r < planned; ++r) {
      const int m = caps[r];
      Kokkos::parallel_for(
          "kfmm::walk::classify", Range(space, 0, m + 1),
          detail::WalkClassify<memory_space, Real>{nodes, ws.queue[cur], ws.counts, ws.actions, ws.state, 0,
                                                   m, 2 * r + 1, theta_squared, options.min_separation});
      exclusive_scan_in_place_on_device(space, ws.counts, m, ws.scan);
      Kokkos::parallel_for("kfmm::walk::emit", Range(space, 0, m),
                           detail::WalkEmit<memory_space, Real>{
                               nodes, ws.queue[cur], ws.counts, ws.actions, ws.queue[1 - cur], ws.pair_keys,
                               ws.pair_sources, ws.state, 0, 0, near_bit, 0, m, r, overflow_at});
      cur = 1 - cur;
    }
    // The one host round trip of the planned rounds: their sizes, the pairs, the overflow flag.
    std::vector<long long> state(overflow_at + 1);
    Kokkos::deep_copy(Kokkos::View<long long*, Kokkos::HostSpace>(state.data(), state.size()),
                      Kokkos::subview(ws.state, Kokkos::make_pair(0, overflow_at + 1)));
    if (state[overflow_at] != 0) {
      // A capacity of the plan was too small: start again with counted rounds.
      lists.statistics.replanned = true;
      cur = 0;
      Kokkos::deep_copy(space, Kokkos::subview(ws.queue[0], 0), 0ULL);  // (root, root)
    } else {
      for (int r = 0; r < planned && state[2 * r + 1] > 0; ++r) sizes.push_back(state[2 * r + 1]);
      lists.statistics.planned_rounds = static_cast<int>(sizes.size());
      pairs = state[2 * planned];
      open = state[2 * planned + 1];
    }
  }

  // Counted rounds: classify, scan (its total is the round's host round trip), emit, until no pair is
  // open; buffers grow to the counts before anything is written.
  while (open > 0) {
    sizes.push_back(open);
    long long next = 0;
    for (long long begin = 0; begin < open; begin += ws.slice) {
      const int m = static_cast<int>(std::min(ws.slice, open - begin));
      detail::reserve_at_least(ws.counts, m + 1LL, "kfmm::walk::counts");
      detail::reserve_at_least(ws.actions, m, "kfmm::walk::actions");
      Kokkos::parallel_for("kfmm::walk::classify", Range(space, 0, m + 1),
                           detail::WalkClassify<memory_space, Real>{
                               nodes, ws.queue[cur], ws.counts, ws.actions, ws.state, static_cast<int>(begin),
                               m, -1, theta_squared, options.min_separation});
      const unsigned long long total = exclusive_scan_in_place(space, ws.counts, m, ws.scan);
      const long long finals = static_cast<long long>(total >> 32);
      const long long children = static_cast<long long>(total & 0xffffffffULL);
      detail::grow_to(ws.pair_keys, pairs + finals, pairs);
      detail::grow_to(ws.pair_sources, pairs + finals, pairs);
      detail::grow_to(ws.queue[1 - cur], next + children, next);
      Kokkos::parallel_for(
          "kfmm::walk::emit", Range(space, 0, m),
          detail::WalkEmit<memory_space, Real>{nodes, ws.queue[cur], ws.counts, ws.actions, ws.queue[1 - cur],
                                               ws.pair_keys, ws.pair_sources, ws.state, pairs, next, near_bit,
                                               static_cast<int>(begin), m, -1, -1});
      pairs += finals;
      next += children;
    }
    open = next;
    cur = 1 - cur;
  }
  for (const long long size : sizes) {
    lists.statistics.peak_entries = std::max(lists.statistics.peak_entries, size);
    lists.statistics.pairs_visited += size;
  }
  lists.statistics.rounds = static_cast<int>(sizes.size());
  ws.plan = sizes;
  ws.planned_pairs = pairs;

  // CSR: sort the final pairs by (near, target), mark the rows' bounds, compact the rows.
  const int n_pairs = static_cast<int>(pairs);
  sort_by_key(space, ws.pair_keys, ws.pair_sources, n_pairs, node_bits + 1, ws.sort);
  if (num_nodes > 0) {
    Kokkos::parallel_for(
        "kfmm::walk::row_bounds", Range(space, 0, num_nodes),
        detail::WalkRowBounds<memory_space>{ws.pair_keys, ws.bounds, ws.split, near_bit, n_pairs});
  }
  detail::reserve_at_least(ws.far_rows, num_nodes, "kfmm::walk::far_rows");
  detail::reserve_at_least(ws.far_offsets, num_nodes + 1LL, "kfmm::walk::far_offsets");
  detail::reserve_at_least(ws.near_rows, num_nodes, "kfmm::walk::near_rows");
  detail::reserve_at_least(ws.near_offsets, num_nodes + 1LL, "kfmm::walk::near_offsets");
  Kokkos::parallel_scan(
      "kfmm::walk::rows", Range(space, 0, num_nodes + 1),
      detail::WalkCompactRows<memory_space>{ws.bounds, ws.split, ws.far_rows, ws.far_offsets, ws.near_rows,
                                            ws.near_offsets, num_nodes, n_pairs});
  int split[3];  // first near pair, far rows, near rows: the lists' one copy to the host
  Kokkos::deep_copy(Kokkos::View<int*, Kokkos::HostSpace>(split, 3),
                    Kokkos::subview(ws.split, Kokkos::make_pair(0, 3)));
  const int first_near = split[0], far_rows = split[1], near_rows = split[2];
  lists.far.targets = Kokkos::subview(ws.far_rows, Kokkos::make_pair(0, far_rows));
  lists.far.offsets = Kokkos::subview(ws.far_offsets, Kokkos::make_pair(0, far_rows + 1));
  lists.far.sources = Kokkos::subview(ws.pair_sources, Kokkos::make_pair(0, first_near));
  lists.near.targets = Kokkos::subview(ws.near_rows, Kokkos::make_pair(0, near_rows));
  lists.near.offsets = Kokkos::subview(ws.near_offsets, Kokkos::make_pair(0, near_rows + 1));
  lists.near.sources = Kokkos::subview(ws.pair_sources, Kokkos::make_pair(first_near, n_pairs));
  require(near_rows == tree.num_leaves, "dual_tree_walk: ", near_rows, " near rows for ", tree.num_leaves,
          " leaves (inconsistent tree)");
  return lists;
}

/// Runs the dual-tree walk on `space` over `tree`; the returned lists own their memory.
template <class ExecutionSpace, class Real>
InteractionLists<typename ExecutionSpace::memory_space> dual_tree_walk(
    const ExecutionSpace& space, const Octree<ExecutionSpace, Real>& tree, const WalkOptions& options) {
  WalkWorkspace<typename ExecutionSpace::memory_space> workspace;
  return dual_tree_walk(space, tree, options, workspace);
}

}  // namespace kfmm
