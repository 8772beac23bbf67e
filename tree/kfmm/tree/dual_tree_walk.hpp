/// \file dual_tree_walk.hpp
/// The dual-tree walk: from the octree's centres and radii, the far pairs (for M2L) and the near leaf
/// pairs (for P2P), each as CSR grouped by target (core/kfmm/core/interaction_list.hpp), built on the
/// device with one parallel_scan and one host round trip per tree level, and no sort.
///
/// MAC, on expansion centres c and radii r (double precision): (A, B) is far iff
///   r_A + r_B <= theta d  and  d - (r_A + r_B) >= min_separation,  d = |c_A - c_B| > 0,  0 < theta < 1
/// (theta < 1 also guarantees that a node is never accepted against one of its ancestors).
/// Otherwise a leaf pair is near; else the node with the larger radius is split (a leaf never is; on
/// equal radii the larger node id), so that the decision for (A, B) and (B, A) splits the same node -
/// except where the descent budget (below) makes an internal target split itself instead of opening
/// one more source: the lists are then valid but not always symmetric.
///
/// Round r handles every node t of level r as a target (all of them: the parent of t always hands it
/// at least one source). Its candidate sources are the parent's "pending" list, the sources that made
/// the parent split. One scan entry per (t, source) pair decides the pair and, depth first inside the
/// thread, every source descendant it opens (the target stays fixed), writing at scanned offsets:
/// far sources of t, near sources of t, and the sources that make t itself split (t's pending list for
/// its children in round r + 1). The entries of a round are ordered by target, so every target's far and
/// near sources are contiguous, all emitted in its own round, and the rounds follow the node numbering:
/// the output is CSR by construction. The next round's entries are never materialised: entry q of round
/// r + 1 is decoded (one binary search over level r) into (child of P, pending source of P).
///
/// Bounded descents. An entry opens at most `descent_budget` sources in its thread: beyond it an
/// internal target splits itself (its children meet the source next round, so opening continues one
/// level per round in parallel), and a leaf target defers the rest of its descent, as follows.
/// A leaf target never splits, so (leaf t, source s) may have to open all of s's
/// subtree: in a Plummer sphere an outer leaf next to the core opened ~9e4 nodes in one thread, and that
/// one GPU thread set the pace of the whole walk (~100 ms at 1e6 particles). A leaf target's entry
/// therefore opens at most `descent_budget` sources; the rest of its stack becomes "deferred" entries
/// (t, s'), collected over all rounds and finished after them by further scan passes over the
/// deferred entries (each bounded the same way), whose pairs carry their target. A stable sort of those
/// extra pairs by target and one merge per list then restore CSR order: each row holds its in-round
/// pairs first, then its deferred ones. When nothing is deferred, the lists are the rounds' output.
///
/// The scan total is the only host round trip of a round (the next round's size and the output
/// counts); it also detects capacity overflow, and the round is then re-run with larger buffers, so
/// nothing is ever truncated. Every kernel is a scan or owns its output: the lists are identical run
/// after run and across backends (except possibly for pairs exactly on the MAC boundary where a device
/// compiler contracts the double-precision distance into FMAs; float trees are immune as their squared
/// distances are exact in double).
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "kfmm/core/error.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/tree/octree.hpp"
#include "kfmm/tree/sort.hpp"

namespace kfmm {

/// Parameters of the multipole acceptance criterion.
struct WalkOptions {
  /// Opening angle: far iff r_A + r_B <= theta d. 0 < theta < 1.
  double theta = 0.5;
  /// Far pairs also need d - r_A - r_B >= min_separation (the softening floor); finite, >= 0.
  double min_separation = 0;
  /// Most sources one (target, source) work item opens in its thread (bounds the longest GPU thread,
  /// which sets the pace of a whole round); >= 1. Beyond it an internal target splits itself instead
  /// (its children meet the source next round) and a leaf target defers the rest of its descent to a
  /// later parallel pass. The lists stay valid for any value (every pair covered once, far pairs pass
  /// the MAC); which nodes pair up depends on it, and so the near lists are not always symmetric.
  int descent_budget = 2;
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
  int rounds = 0;               ///< level-synchronous rounds (= tree levels)
  long long peak_entries = 0;   ///< largest number of (target, source) entries in one round
  long long pairs_visited = 0;  ///< (target, source) pairs tested against the MAC
  int regrowths = 0;            ///< rounds re-run after growing a buffer
  long long deferred = 0;       ///< (leaf target, source) entries handed to the deferred passes
  int deferred_passes = 0;      ///< scan passes over deferred entries after the rounds
};

/// The two lists of a walk, in the memory space of the tree.
template <class MemorySpace>
struct InteractionLists {
  InteractionList<MemorySpace> far;   ///< (target node, source node) for M2L, rows by ascending target
  InteractionList<MemorySpace> near;  ///< (target leaf, source leaf) incl. (A, A); one row per leaf
  WalkStatistics statistics;
};

namespace detail {
/// A node as the walk reads it: one 64-byte record (one cache line) per node.
struct alignas(64) WalkNode {
  double centre[3];
  double radius;
  int first_child, num_children;
  int pad[2];
};
static_assert(sizeof(WalkNode) == 64, "one walk node record per cache line");
}  // namespace detail

/// Reusable buffers of dual_tree_walk. Lists returned by a walk with a workspace share its memory and
/// stay valid only until the next walk with the same workspace.
template <class MemorySpace>
struct WalkWorkspace {
  Kokkos::View<int*, MemorySpace> far_sources, near_sources;  // outputs, grown on demand
  Kokkos::View<int*, MemorySpace> pending;                    // pending sources of one level
  Kokkos::View<int*, MemorySpace> entry_t[2], entry_s[2];     // (target, source) entries, by round
  Kokkos::View<int* [4], MemorySpace> begins;                 // per node: far, near, pending, entry begins
  Kokkos::View<detail::WalkNode*, MemorySpace> nodes;         // per node: centre, radius, children
  Kokkos::View<int*, MemorySpace> far_rows, far_offsets, near_rows, near_offsets;
  // deferred descents: entries (ping-pong), their pairs with targets, per-node merge data, merged lists
  Kokkos::View<int*, MemorySpace> deferred_t[2], deferred_s[2];
  Kokkos::View<unsigned*, MemorySpace> extra_far_t, extra_near_t;
  Kokkos::View<int*, MemorySpace> extra_far_s, extra_near_s;
  Kokkos::View<int* [3], MemorySpace> merge;  // per node: extra begin, extra end, merged begin
  Kokkos::View<int*, MemorySpace> far_merged, near_merged;
  SortWorkspace<MemorySpace, unsigned, int> sort;
  /// First-call capacity guesses: far sources per node, near sources per leaf, pending sources per
  /// node of the widest level. Too small only costs re-running a round (statistics.regrowths).
  int far_per_node = 24, near_per_leaf = 24, pending_per_node = 16;
};

namespace detail {

/// Scan value of a walk round: outputs emitted so far in the round.
struct WalkCounts {
  long long far, near, pending, entries, visited, deferred;
  KOKKOS_INLINE_FUNCTION WalkCounts() : far(0), near(0), pending(0), entries(0), visited(0), deferred(0) {}
  KOKKOS_INLINE_FUNCTION void operator+=(const WalkCounts& o) {
    far += o.far;
    near += o.near;
    pending += o.pending;
    entries += o.entries;
    visited += o.visited;
    deferred += o.deferred;
  }
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile WalkCounts& o) volatile {
    far = far + o.far;
    near = near + o.near;
    pending = pending + o.pending;
    entries = entries + o.entries;
    visited = visited + o.visited;
    deferred = deferred + o.deferred;
  }
};

enum : int { kBeginFar = 0, kBeginNear = 1, kBeginPending = 2, kBeginEntries = 3 };

/// One round: the (target, source) entries of all targets of one level. In a deferred pass
/// (`deferred_pass`) the entries are deferred (leaf target, source) entries instead, the node row
/// begins are left alone and every emitted pair also records its target (far_t, near_t).
template <class MemorySpace>
struct WalkRound {
  using value_type = WalkCounts;
  static constexpr int kStack = 8 * 22;  // source descent: at most 8 siblings per level

  Kokkos::View<const WalkNode*, MemorySpace> nodes;
  Kokkos::View<int* [4], MemorySpace> begins;              // per node row begins (written for this level)
  Kokkos::View<const int*, MemorySpace> entry_t, entry_s;  // this round's (target, source) entries
  Kokkos::View<int*, MemorySpace> pending_out;             // pending sources of this level
  Kokkos::View<int*, MemorySpace> far_s, near_s;           // output sources
  Kokkos::View<unsigned*, MemorySpace> far_t, near_t;      // output targets (deferred passes)
  Kokkos::View<int*, MemorySpace> deferred_t, deferred_s;  // deferred entries out
  long long far_base, near_base, deferred_base;            // outputs of earlier rounds
  long long far_cap, near_cap, pending_cap, deferred_cap;
  double theta_squared, min_separation;
  int budget;
  bool deferred_pass;

  enum Action : int { kFar, kNear, kSplitTarget, kSplitSource };

  /// Decides (target t, source s); the target's sphere ct/rt and child count kt are passed in, the
  /// source's children are returned in first/count.
  KOKKOS_INLINE_FUNCTION int decide(const int t, const double ct[3], const double rt, const int kt,
                                    const int s, int& first, int& count) const {
    const WalkNode& node = nodes(s);
    first = node.first_child;
    count = node.num_children;
    if (t == s) return kt == 0 ? kNear : kSplitTarget;
    const double rs = node.radius;
    if (mac_accepts(ct, rt, node.centre, rs, theta_squared, min_separation)) return kFar;
    if (kt == 0 && count == 0) return kNear;
    if (kt == 0) return kSplitSource;
    if (count == 0) return kSplitTarget;
    if (rt != rs) return rt > rs ? kSplitTarget : kSplitSource;
    return t > s ? kSplitTarget : kSplitSource;  // the same node in both directions
  }

  KOKKOS_INLINE_FUNCTION void operator()(const int q, WalkCounts& c, const bool final) const {
    const int t = entry_t(q), s0 = entry_s(q);
    const bool row_start = q == 0 || entry_t(q - 1) != t;
    if (final && row_start && !deferred_pass) {
      begins(t, kBeginFar) = static_cast<int>(far_base + c.far);
      begins(t, kBeginNear) = static_cast<int>(near_base + c.near);
      begins(t, kBeginPending) = static_cast<int>(c.pending);
      begins(t, kBeginEntries) = static_cast<int>(c.entries);
    }
    const WalkNode& target = nodes(t);
    const int kt = target.num_children;
    const double ct[3] = {target.centre[0], target.centre[1], target.centre[2]};
    const double rt = target.radius;
    int stack[kStack];
    stack[0] = s0;
    int top = 1;
    int opened = 0;
    while (top > 0) {
      if (kt == 0 && opened >= budget) {
        // Hand the rest of the descent to a deferred pass, in the order it would have been popped.
        if (final) {
          for (int j = 0; j < top; ++j) {
            const long long o = deferred_base + c.deferred + j;
            if (o < deferred_cap) {
              deferred_t(o) = t;
              deferred_s(o) = stack[top - 1 - j];
            }
          }
        }
        c.deferred += top;
        break;
      }
      const int s = stack[--top];
      int f = 0, k = 0;
      const int action = decide(t, ct, rt, kt, s, f, k);
      c.visited += 1;
      if (action == kFar) {
        if (final && far_base + c.far < far_cap) {
          far_s(far_base + c.far) = s;
          if (deferred_pass) far_t(far_base + c.far) = static_cast<unsigned>(t);
        }
        c.far += 1;
      } else if (action == kNear) {
        if (final && near_base + c.near < near_cap) {
          near_s(near_base + c.near) = s;
          if (deferred_pass) near_t(near_base + c.near) = static_cast<unsigned>(t);
        }
        c.near += 1;
      } else if (action == kSplitTarget || (kt > 0 && opened >= budget)) {
        // (An internal target that has opened `budget` sources in this entry splits itself instead
        // of opening s: its children meet s next round. This bounds every thread's work.)
        if (final && c.pending < pending_cap) pending_out(c.pending) = s;
        c.pending += 1;
        c.entries += kt;  // each child of t will pair with s next round
      } else {
        // Open the source: push its children so that they pop in ascending order.
        for (int j = k - 1; j >= 0; --j) stack[top++] = f + j;
        ++opened;
      }
    }
  }
};

/// Writes the next round's entries: for every target t of this level with pending sources P_t, the
/// pairs (child i of t, P_t[j]) at begins(t, entries) + i |P_t| + j, i.e. grouped by child.
template <class ExecutionSpace, class Begins, class Nodes, class Pending, class Entries>
void expand_entries(const ExecutionSpace& space, const Begins& begins, const Nodes& nodes,
                    const Pending& pending, const int level_begin, const int level_end,
                    const long long pending_total, const Entries& next_t, const Entries& next_s) {
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  Kokkos::parallel_for(
      "kfmm::walk::expand", Kokkos::TeamPolicy<ExecutionSpace>(space, level_end - level_begin, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int t = level_begin + team.league_rank();
        const int pb = begins(t, kBeginPending);
        const int pe = t + 1 < level_end ? begins(t + 1, kBeginPending) : static_cast<int>(pending_total);
        const int m = pe - pb;
        if (m == 0) return;
        const int f = nodes(t).first_child, k = nodes(t).num_children;
        const int base = begins(t, kBeginEntries);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k * m), [&](const int idx) {
          next_t(base + idx) = f + idx / m;
          next_s(base + idx) = pending(pb + idx % m);
        });
      });
}

/// CSR rows from per-node begins: every node with at least one pair, ascending.
template <class MemorySpace>
struct CompactRows {
  using value_type = int;
  Kokkos::View<const int* [4], MemorySpace> begins;
  Kokkos::View<int*, MemorySpace> rows, offsets;
  int which, num_nodes, total;
  KOKKOS_INLINE_FUNCTION void operator()(const int t, int& row, const bool final) const {
    const int b = begins(t, which);
    const int e = t + 1 < num_nodes ? begins(t + 1, which) : total;
    if (e > b) {
      if (final) {
        rows(row) = t;
        offsets(row) = b;
      }
      row += 1;
    }
  }
};

/// Grows `v` to at least `needed` entries (plus headroom), keeping its first `keep` entries.
template <class View>
void grow(View& v, long long needed, long long keep) {
  require(needed <= INT_MAX, "dual_tree_walk: ", needed, " pairs exceed the int index range of the lists");
  const long long want = needed + needed / 2 + 1024;
  const int cap = static_cast<int>(want < INT_MAX ? want : INT_MAX);
  View grown(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(v.label())), cap);
  if (keep > 0)
    Kokkos::deep_copy(Kokkos::subview(grown, Kokkos::make_pair(0, static_cast<int>(keep))),
                      Kokkos::subview(v, Kokkos::make_pair(0, static_cast<int>(keep))));
  v = grown;
}

/// grow(v, needed, keep) when v holds fewer than `needed` entries; true when it grew (the round that
/// overflowed is then re-run).
template <class View>
bool grow_to(View& v, long long needed, long long keep) {
  if (needed <= static_cast<long long>(v.extent(0))) return false;
  grow(v, needed, keep);
  return true;
}

template <class View>
void ensure(View& v, long long want, const char* label) {
  if (static_cast<long long>(v.extent(0)) < want) {
    v = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), static_cast<size_t>(want));
  }
}

/// The CSR list of one kind of output: rows = nodes with at least one pair.
template <class ExecutionSpace>
InteractionList<typename ExecutionSpace::memory_space> make_list(
    const ExecutionSpace& space, const Kokkos::View<int* [4], typename ExecutionSpace::memory_space>& begins,
    int which, int num_nodes, int total,
    const Kokkos::View<int*, typename ExecutionSpace::memory_space>& sources,
    Kokkos::View<int*, typename ExecutionSpace::memory_space>& rows,
    Kokkos::View<int*, typename ExecutionSpace::memory_space>& offsets) {
  using memory_space = typename ExecutionSpace::memory_space;
  ensure(rows, num_nodes, "kfmm::walk::rows");
  ensure(offsets, num_nodes + 1, "kfmm::walk::offsets");
  int count = 0;
  if (num_nodes > 0) {
    Kokkos::parallel_scan("kfmm::walk::rows", Kokkos::RangePolicy<ExecutionSpace>(space, 0, num_nodes),
                          CompactRows<memory_space>{begins, rows, offsets, which, num_nodes, total}, count);
  }
  Kokkos::deep_copy(space, Kokkos::subview(offsets, count), total);
  InteractionList<memory_space> list;
  list.targets = Kokkos::subview(rows, Kokkos::make_pair(0, count));
  list.offsets = Kokkos::subview(offsets, Kokkos::make_pair(0, count + 1));
  list.sources = Kokkos::subview(sources, Kokkos::make_pair(0, total));
  return list;
}

/// The CSR list of one kind of output when deferred passes added pairs: row t is the rounds' pairs of
/// t (begins(t, which) .. next begin) followed by its extra pairs (extra_t/extra_s, n_extra of them,
/// stably sorted by target here), copied into `merged`.
template <class ExecutionSpace, class MemorySpace = typename ExecutionSpace::memory_space>
InteractionList<MemorySpace> merge_list(
    const ExecutionSpace& space, const Kokkos::View<int* [4], MemorySpace>& begins, int which, int num_nodes,
    int total, const Kokkos::View<int*, MemorySpace>& sources,
    const Kokkos::View<unsigned*, MemorySpace>& extra_t, const Kokkos::View<int*, MemorySpace>& extra_s,
    int n_extra, WalkWorkspace<MemorySpace>& ws, Kokkos::View<int*, MemorySpace>& merged,
    Kokkos::View<int*, MemorySpace>& rows, Kokkos::View<int*, MemorySpace>& offsets) {
  using Policy = Kokkos::RangePolicy<ExecutionSpace>;
  sort_by_key(space, extra_t, extra_s, n_extra, bits_for(static_cast<unsigned long long>(num_nodes)),
              ws.sort);
  ensure(ws.merge, num_nodes, "kfmm::walk::merge");
  ensure(rows, num_nodes, "kfmm::walk::rows");
  ensure(offsets, num_nodes + 1, "kfmm::walk::offsets");
  const long long merged_total = static_cast<long long>(total) + n_extra;
  require(merged_total <= INT_MAX, "dual_tree_walk: ", merged_total,
          " pairs exceed the int index range of the lists");
  ensure(merged, merged_total, "kfmm::walk::merged_sources");
  const auto merge = ws.merge;
  Kokkos::parallel_for(
      "kfmm::walk::merge_clear", Policy(space, 0, num_nodes), KOKKOS_LAMBDA(const int t) {
        merge(t, 0) = 0;
        merge(t, 1) = 0;
      });
  Kokkos::parallel_for(
      "kfmm::walk::merge_runs", Policy(space, 0, n_extra), KOKKOS_LAMBDA(const int k) {
        const unsigned t = extra_t(k);
        if (k == 0 || extra_t(k - 1) != t) merge(t, 0) = k;
        if (k == n_extra - 1 || extra_t(k + 1) != t) merge(t, 1) = k + 1;
      });
  int count = 0;
  Kokkos::parallel_scan(
      "kfmm::walk::merge_rows", Policy(space, 0, num_nodes),
      KOKKOS_LAMBDA(const int t, int& row, const bool final) {
        const int b = begins(t, which);
        const int e = t + 1 < num_nodes ? begins(t + 1, which) : total;
        if (e - b + merge(t, 1) - merge(t, 0) > 0) {
          if (final) rows(row) = t;
          row += 1;
        }
      },
      count);
  int pairs = 0;
  Kokkos::parallel_scan(
      "kfmm::walk::merge_offsets", Policy(space, 0, count),
      KOKKOS_LAMBDA(const int r, int& sum, const bool final) {
        const int t = rows(r);
        const int b = begins(t, which);
        const int e = t + 1 < num_nodes ? begins(t + 1, which) : total;
        if (final) {
          offsets(r) = sum;
          merge(t, 2) = sum;
        }
        sum += e - b + merge(t, 1) - merge(t, 0);
      },
      pairs);
  Kokkos::deep_copy(space, Kokkos::subview(offsets, count), pairs);
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  Kokkos::parallel_for(
      "kfmm::walk::merge_copy", Kokkos::TeamPolicy<ExecutionSpace>(space, count, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Team& team) {
        const int t = rows(team.league_rank());
        const int b = begins(t, which);
        const int e = t + 1 < num_nodes ? begins(t + 1, which) : total;
        const int dest = merge(t, 2), xb = merge(t, 0), xe = merge(t, 1);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, e - b + xe - xb), [&](const int i) {
          merged(dest + i) = i < e - b ? sources(b + i) : extra_s(xb + i - (e - b));
        });
      });
  InteractionList<MemorySpace> list;
  list.targets = Kokkos::subview(rows, Kokkos::make_pair(0, count));
  list.offsets = Kokkos::subview(offsets, Kokkos::make_pair(0, count + 1));
  list.sources = Kokkos::subview(merged, Kokkos::make_pair(0, pairs));
  return list;
}

}  // namespace detail

/// Runs the dual-tree walk on `space` over `tree` and returns the far and near lists, using (and
/// growing) the buffers of `workspace`; the lists share the workspace's memory.
template <class ExecutionSpace, class Real>
InteractionLists<typename ExecutionSpace::memory_space> dual_tree_walk(
    const ExecutionSpace& space, const Octree<ExecutionSpace, Real>& tree, const WalkOptions& options,
    WalkWorkspace<typename ExecutionSpace::memory_space>& ws) {
  using memory_space = typename ExecutionSpace::memory_space;
  // theta < 1 keeps a node and its ancestors apart: the ancestor's sphere contains the node's centre.
  require(options.theta > 0 && options.theta < 1, "dual_tree_walk: theta = ", options.theta,
          " must lie in (0, 1)");
  require(options.min_separation >= 0 && std::isfinite(options.min_separation),
          "dual_tree_walk: min_separation = ", options.min_separation, " must be finite and >= 0");
  require(options.descent_budget >= 1, "dual_tree_walk: descent_budget = ", options.descent_budget,
          " must be >= 1");
  InteractionLists<memory_space> lists;
  const int num_nodes = tree.num_nodes;

  // Capacity guesses (grown when a round reports more): far and near sources per node, and pending
  // sources per node of the widest level.
  int widest = 1;
  for (int l = 0; l < tree.num_levels; ++l)
    widest = std::max(widest, tree.level_offsets[l + 1] - tree.level_offsets[l]);
  detail::ensure(ws.far_sources, static_cast<long long>(ws.far_per_node) * num_nodes + 16,
                 "kfmm::walk::far_sources");
  detail::ensure(ws.near_sources, static_cast<long long>(ws.near_per_leaf) * tree.num_leaves + 16,
                 "kfmm::walk::near_sources");
  detail::ensure(ws.pending, static_cast<long long>(ws.pending_per_node) * widest + 16,
                 "kfmm::walk::pending");
  for (int b = 0; b < 2; ++b) {
    detail::ensure(ws.entry_t[b], 1, "kfmm::walk::entry_targets");
    detail::ensure(ws.entry_s[b], 1, "kfmm::walk::entry_sources");
    detail::ensure(ws.deferred_t[b], 1024, "kfmm::walk::deferred_targets");
    detail::ensure(ws.deferred_s[b], 1024, "kfmm::walk::deferred_sources");
  }
  detail::ensure(ws.extra_far_t, 1024, "kfmm::walk::extra_far_targets");
  detail::ensure(ws.extra_far_s, 1024, "kfmm::walk::extra_far_sources");
  detail::ensure(ws.extra_near_t, 1024, "kfmm::walk::extra_near_targets");
  detail::ensure(ws.extra_near_s, 1024, "kfmm::walk::extra_near_sources");
  if (num_nodes > 0) {
    Kokkos::deep_copy(space, Kokkos::subview(ws.entry_t[0], 0), 0);  // round 0: the root with itself
    Kokkos::deep_copy(space, Kokkos::subview(ws.entry_s[0], 0), 0);
  }
  if (static_cast<int>(ws.begins.extent(0)) < num_nodes) {
    ws.begins = Kokkos::View<int* [4], memory_space>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::walk::begins")), num_nodes);
  }

  // Node records packed for the walk: one cache line per node.
  if (static_cast<int>(ws.nodes.extent(0)) < num_nodes) {
    ws.nodes = decltype(ws.nodes)(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::walk::nodes")), num_nodes);
  }
  {
    const auto nodes = ws.nodes;
    const auto centres = tree.centres;
    const auto radii = tree.radii;
    const auto first_child = tree.first_child;
    const auto num_children = tree.num_children;
    Kokkos::parallel_for(
        "kfmm::walk::pack", Kokkos::RangePolicy<ExecutionSpace>(space, 0, num_nodes),
        KOKKOS_LAMBDA(const int i) {
          detail::WalkNode node;
          for (int a = 0; a < 3; ++a) node.centre[a] = static_cast<double>(centres(i, a));
          node.radius = static_cast<double>(radii(i));
          node.first_child = first_child(i);
          node.num_children = num_children(i);
          node.pad[0] = node.pad[1] = 0;
          nodes(i) = node;
        });
  }
  detail::WalkRound<memory_space> round;
  round.nodes = ws.nodes;
  round.begins = ws.begins;
  round.theta_squared = options.theta * options.theta;
  round.min_separation = options.min_separation;
  round.budget = options.descent_budget;
  round.deferred_pass = false;
  long long far_count = 0, near_count = 0, deferred_count = 0, entries = num_nodes > 0 ? 1 : 0;
  for (int level = 0; level < tree.num_levels && entries > 0; ++level) {
    lists.statistics.peak_entries = std::max(lists.statistics.peak_entries, entries);
    round.entry_t = ws.entry_t[level % 2];
    round.entry_s = ws.entry_s[level % 2];
    round.far_base = far_count;
    round.near_base = near_count;
    round.deferred_base = deferred_count;
    detail::WalkCounts totals;
    for (;;) {
      round.pending_out = ws.pending;
      round.far_s = ws.far_sources;
      round.near_s = ws.near_sources;
      round.deferred_t = ws.deferred_t[0];
      round.deferred_s = ws.deferred_s[0];
      round.far_cap = static_cast<long long>(ws.far_sources.extent(0));
      round.near_cap = static_cast<long long>(ws.near_sources.extent(0));
      round.pending_cap = static_cast<long long>(round.pending_out.extent(0));
      round.deferred_cap = static_cast<long long>(ws.deferred_t[0].extent(0));
      totals = detail::WalkCounts();
      Kokkos::parallel_scan("kfmm::walk::round",
                            Kokkos::RangePolicy<ExecutionSpace>(space, 0, static_cast<int>(entries)), round,
                            totals);
      // (| rather than ||: every buffer that overflowed grows before the re-run)
      const bool regrow =
          detail::grow_to(ws.far_sources, far_count + totals.far, far_count) |
          detail::grow_to(ws.near_sources, near_count + totals.near, near_count) |
          detail::grow_to(ws.pending, totals.pending, 0) |
          detail::grow_to(ws.deferred_t[0], deferred_count + totals.deferred, deferred_count) |
          detail::grow_to(ws.deferred_s[0], deferred_count + totals.deferred, deferred_count);
      if (!regrow) break;
      ++lists.statistics.regrowths;
    }
    far_count += totals.far;
    near_count += totals.near;
    deferred_count += totals.deferred;
    entries = totals.entries;
    if (entries > 0) {
      require(entries <= INT_MAX, "dual_tree_walk: ", entries,
              " candidate pairs in one level exceed the int range");
      const int next = 1 - level % 2;
      detail::ensure(ws.entry_t[next], entries + entries / 4, "kfmm::walk::entry_targets");
      detail::ensure(ws.entry_s[next], entries + entries / 4, "kfmm::walk::entry_sources");
      detail::expand_entries(space, ws.begins, ws.nodes, ws.pending, tree.level_offsets[level],
                             tree.level_offsets[level + 1], totals.pending, ws.entry_t[next],
                             ws.entry_s[next]);
    }
    lists.statistics.pairs_visited += totals.visited;
    ++lists.statistics.rounds;
  }
  require(entries == 0 && lists.statistics.rounds == tree.num_levels,
          "dual_tree_walk: the walk did not end with the deepest level (inconsistent tree)");

  // Deferred passes: finish the deferred (leaf target, source) descents, pairs with their targets.
  lists.statistics.deferred = deferred_count;
  long long extra_far = 0, extra_near = 0;
  round.deferred_pass = true;
  for (int b = 0; deferred_count > 0; b = 1 - b) {
    require(deferred_count <= INT_MAX, "dual_tree_walk: ", deferred_count,
            " deferred entries exceed the int range");
    round.entry_t = ws.deferred_t[b];
    round.entry_s = ws.deferred_s[b];
    round.far_base = extra_far;
    round.near_base = extra_near;
    round.deferred_base = 0;
    detail::WalkCounts totals;
    for (;;) {
      round.far_s = ws.extra_far_s;
      round.far_t = ws.extra_far_t;
      round.near_s = ws.extra_near_s;
      round.near_t = ws.extra_near_t;
      round.deferred_t = ws.deferred_t[1 - b];
      round.deferred_s = ws.deferred_s[1 - b];
      round.far_cap = static_cast<long long>(ws.extra_far_s.extent(0));
      round.near_cap = static_cast<long long>(ws.extra_near_s.extent(0));
      round.deferred_cap = static_cast<long long>(ws.deferred_t[1 - b].extent(0));
      totals = detail::WalkCounts();
      Kokkos::parallel_scan("kfmm::walk::deferred",
                            Kokkos::RangePolicy<ExecutionSpace>(space, 0, static_cast<int>(deferred_count)),
                            round, totals);
      const bool regrow = detail::grow_to(ws.extra_far_s, extra_far + totals.far, extra_far) |
                          detail::grow_to(ws.extra_far_t, extra_far + totals.far, extra_far) |
                          detail::grow_to(ws.extra_near_s, extra_near + totals.near, extra_near) |
                          detail::grow_to(ws.extra_near_t, extra_near + totals.near, extra_near) |
                          detail::grow_to(ws.deferred_t[1 - b], totals.deferred, 0) |
                          detail::grow_to(ws.deferred_s[1 - b], totals.deferred, 0);
      if (!regrow) break;
      ++lists.statistics.regrowths;
    }
    extra_far += totals.far;
    extra_near += totals.near;
    deferred_count = totals.deferred;
    lists.statistics.pairs_visited += totals.visited;
    ++lists.statistics.deferred_passes;
  }

  if (extra_far > 0) {
    lists.far =
        detail::merge_list(space, ws.begins, detail::kBeginFar, num_nodes, static_cast<int>(far_count),
                           ws.far_sources, ws.extra_far_t, ws.extra_far_s, static_cast<int>(extra_far), ws,
                           ws.far_merged, ws.far_rows, ws.far_offsets);
  } else {
    lists.far = detail::make_list(space, ws.begins, detail::kBeginFar, num_nodes, static_cast<int>(far_count),
                                  ws.far_sources, ws.far_rows, ws.far_offsets);
  }
  if (extra_near > 0) {
    lists.near =
        detail::merge_list(space, ws.begins, detail::kBeginNear, num_nodes, static_cast<int>(near_count),
                           ws.near_sources, ws.extra_near_t, ws.extra_near_s, static_cast<int>(extra_near),
                           ws, ws.near_merged, ws.near_rows, ws.near_offsets);
  } else {
    lists.near =
        detail::make_list(space, ws.begins, detail::kBeginNear, num_nodes, static_cast<int>(near_count),
                          ws.near_sources, ws.near_rows, ws.near_offsets);
  }
  require(lists.near.num_rows() == tree.num_leaves, "dual_tree_walk: ", lists.near.num_rows(),
          " near rows for ", tree.num_leaves, " leaves (inconsistent tree)");
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
