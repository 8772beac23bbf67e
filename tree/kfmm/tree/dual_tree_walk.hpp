/// \file dual_tree_walk.hpp
/// The dual-tree walk: from the octree's centres and radii, the far pairs (for M2L) and the near leaf
/// pairs (for P2P), each as CSR grouped by target (core/kfmm/core/interaction_list.hpp), built on the
/// device breadth first over a queue of open node pairs.
///
/// MAC, on expansion centres c and radii r (double precision): (A, B) is far iff
///   r_A + r_B <= theta d  and  d - (r_A + r_B) >= min_separation,  d = |c_A - c_B| > 0,  0 < theta < 1
/// (theta < 1 also guarantees that a node is never accepted against one of its ancestors), and the
/// concentration rule (concentration_accepts): when one node is heavier (sum |m|) than the other and
/// its radius is below `concentration_ratio` times the other's, the other's radius must be at most
/// theta d / 2.
/// Otherwise a leaf pair is near; a self pair (A, A) of an internal node opens into the pairs of its
/// children (unordered, below); else the node with the larger radius is split (a leaf never is; on equal
/// radii the larger node id), so that (A, B) and (B, A) split the same node.
///
/// Unordered pairs. Every decision, and so the whole descent below a pair, is symmetric in its two nodes,
/// so the walk visits each unordered pair {A, B} once, and a final pair stands for both directions,
/// (A <- B) and (B <- A) (written twice for ListBuild::sort, once for scatter); a self pair opens into the
/// unordered pairs {a_u, a_v}, u <= v, of its children (36 of 8 children, not 64). Both lists come out
/// symmetric by construction, and the rounds decide about half the pairs that a walk over ordered pairs
/// decides (docs/tree.md, "Walk").
///
/// Rounds. Round r holds the open pairs; every pair does O(1) work in its own thread, so no thread can
/// set the pace of a round (an earlier depth-first design let one thread open ~9e4 nodes). A round is
/// one kernel (detail::WalkRound): each team takes a tile of open pairs and
///   decides every pair (far / near / split target / split source / split both), counting its output
///     as (final pairs << 30) | (child pairs);
///   turns the counts into write offsets: a scan within the team, then decoupled look-back across the
///     tiles (core/kfmm/core/tile_scan.hpp), i.e. the offsets of a global exclusive scan in queue order;
///   writes each pair's final pair (far or near) or its child pairs at its offsets.
/// A decision is made once and kept in registers until its pair is written. (The round used to be three
/// kernels, classify, a device scan and emit: four launches. At 1e6 particles on the H200 one kernel per
/// round saves launches, not kernel time, since the small top rounds still pay ~8-16 us of latency each:
/// docs/benchmarks.md.) Rounds larger than 2^24 pairs run in slices, so the
/// packed 30-bit child count cannot wrap (a planned round's slices chain their running totals through
/// the device state, so a walk with rounds of 1e7-1e8 pairs plans too). A counted round's totals come
/// back to the host; writes past a buffer's end are dropped and the round runs again once the buffer has
/// grown (its input is unchanged).
///
/// Planned rounds. A host round trip per round (~20 rounds at 1e6 particles) leaves the GPU idle
/// between rounds. A walk with a reused workspace therefore first runs the rounds of the workspace's
/// plan, the round sizes of its last walk plus an eighth (a time step changes them little): every
/// kernel is launched over the planned capacity, reads the round's open count and pair base from a
/// small device array that the previous round's last tile advanced, and nothing returns to the host until the
/// plan's rounds are done. Then one copy brings back the sizes and an overflow flag: if any capacity was too
/// small the walk starts again with counted rounds (statistics.replanned); if pairs are still open, counted
/// rounds continue from there. Either way the lists are exactly those of counted rounds.
///
/// CSR (WalkOptions::list_build, tree/kfmm/tree/list_build.hpp). Final pairs are written in round order
/// with the key (near << b) | target, b = bits of the largest node id; the lists hold all far pairs by
/// ascending target, then all near pairs by ascending target, each row's sources in the order of the
/// written entries.
///   sort: every final pair is written in both directions, and one stable radix sort of the keys
///     (tree/kfmm/tree/sort.hpp; CUB on CUDA) groups them (its second buffers are the queues' storage;
///     after an odd number of passes the sorted pairs stay there and the lists view them). One thread
///     per node finds its rows' bounds by binary search. ~16 bytes per list entry at the peak.
///   scatter: every final pair is written once; entry 2i of stored pair i is (t <- s) and 2i + 1 its
///     mirror (s <- t). Rows are counted, their starts scanned, and every entry placed at the place the
///     stable sort would give it, in the sources' final buffer (queue 1's storage): on the host by sliced
///     counting (one block of pairs per thread, a column of counts per block: no atomics), on GPUs by
///     atomic row cursors followed by a team per node sorting its rows' entry indices in scratch
///     (tree/kfmm/tree/team_sort.hpp). ~8 bytes per list entry; on
///     the host also 21-54 % less walk time (docs/tree.md, "Scatter").
/// One scan over the nodes then compacts the rows of both lists.
///
/// Every write goes to an offset that a scan determined (or, for the atomic cursors, is put in order
/// after), and the sort is stable: the lists are identical run after run, across backends and list
/// builds (except possibly for pairs exactly on the MAC boundary where a device compiler contracts the
/// double-precision distance into FMAs; float trees are immune as their squared distances are exact in
/// double). Nothing is truncated: a round whose output did not fit runs again after its buffers grew to
/// the scanned counts, and counts beyond the int range are an error.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/host_copy.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/tile_scan.hpp"
#include "kfmm/core/view_capacity.hpp"
#include "kfmm/tree/list_build.hpp"
#include "kfmm/tree/octree.hpp"
#include "kfmm/tree/sort.hpp"
#include "kfmm/tree/team_sort.hpp"

namespace kfmm {

/// Parameters of the multipole acceptance criterion and of the lists' construction.
struct WalkOptions {
  /// Opening angle: far iff r_A + r_B <= theta d. 0 < theta < 1.
  double theta = 0.5;
  /// Far pairs also need d - r_A - r_B >= min_separation (the softening floor); finite, >= 0.
  double min_separation = 0;
  /// Concentration rule (concentration_accepts): a node heavier than its partner and smaller than this
  /// fraction of its radius (a compact mass: coincident particles, a black hole's leaf) allows the
  /// partner a radius of at most theta d / 2. In [0, 1]; 0 turns the rule off.
  double concentration_ratio = 0.1;
  /// How the CSR rows are built (ListBuild); the lists' pairs do not depend on it.
  ListBuild list_build = ListBuild::automatic;
};

namespace detail {
/// |c_a - c_b|^2 in double (the one distance mac_accepts and walk_accepts decide on).
KOKKOS_INLINE_FUNCTION double squared_distance(const double ca[3], const double cb[3]) {
  const double dx = ca[0] - cb[0], dy = ca[1] - cb[1], dz = ca[2] - cb[2];
  return dx * dx + dy * dy + dz * dz;
}
/// mac_accepts on the squared distance d2 of the centres.
KOKKOS_INLINE_FUNCTION bool mac_accepts_squared(double d2, double ra, double rb, double theta_squared,
                                                double min_separation) {
  const double r = ra + rb;
  const double rs = r + min_separation;
  return d2 > 0 && r * r <= theta_squared * d2 && rs * rs <= d2;
}
}  // namespace detail

/// The multipole acceptance criterion of the walk, on centres (x, y, z) and radii, in double precision:
/// r_a + r_b <= theta d and d - (r_a + r_b) >= min_separation with d = |c_a - c_b| > 0, evaluated on
/// squares (no square root). Symmetric in a and b; deterministic across backends for float inputs (all
/// products are exact in double, so FMA contraction cannot change them).
KOKKOS_INLINE_FUNCTION bool mac_accepts(const double ca[3], double ra, const double cb[3], double rb,
                                        double theta_squared, double min_separation) {
  return detail::mac_accepts_squared(detail::squared_distance(ca, cb), ra, rb, theta_squared, min_separation);
}

/// The concentration rule of the walk, for two nodes at squared distance d2 of their centres with radii
/// ra, rb and absolute masses (sum |m|) ma, mb: false when one node is heavier than the other and its
/// radius is below `ratio` times the other's while the other's radius exceeds theta d / 2; true
/// otherwise (always with ratio = 0). Symmetric in a and b.
///
/// Why: the calibrated errors of r_A + r_B <= theta d come from pairs whose radii share theta d, so
/// that a target is at most ~theta d / 2 from its expansion centre. Against a compact source (radius
/// ~0) the target node may take all of theta d, and the local expansion's truncation error of order p,
/// ~(r_T / d)^(p+1) of the source's field (the remainder of the Legendre series of 1 / |x - y|), grows
/// by up to 2^(p+1): where the compact node dominates the field, 28-40x the requested tolerance at 1e-4
/// (docs/tree.md, "Walk"). A heavier partner ten times smaller is what a smooth distribution rarely
/// produces (a node ten times smaller holds ~1/1000 of the mass at equal density), so the rule costs
/// smooth inputs 0-4 % and removes that error.
KOKKOS_INLINE_FUNCTION bool concentration_accepts(double d2, double ra, double ma, double rb, double mb,
                                                  double theta_squared, double ratio) {
  const double cap2 = 0.25 * theta_squared * d2;  // (theta d / 2)^2
  if (mb > ma && rb < ratio * ra && ra * ra > cap2) return false;
  if (ma > mb && ra < ratio * rb && rb * rb > cap2) return false;
  return true;
}

/// The walk's whole acceptance test: mac_accepts and concentration_accepts (absolute masses ma, mb).
KOKKOS_INLINE_FUNCTION bool walk_accepts(const double ca[3], double ra, double ma, const double cb[3],
                                         double rb, double mb, double theta_squared, double min_separation,
                                         double concentration_ratio) {
  const double d2 = detail::squared_distance(ca, cb);  // (once for both tests)
  return detail::mac_accepts_squared(d2, ra, rb, theta_squared, min_separation) &&
         concentration_accepts(d2, ra, ma, rb, mb, theta_squared, concentration_ratio);
}

/// What a walk did (host values).
struct WalkStatistics {
  int rounds = 0;               ///< breadth-first rounds
  long long peak_entries = 0;   ///< largest number of open (unordered) node pairs in one round
  long long pairs_visited = 0;  ///< unordered node pairs decided (tested against the MAC)
  int planned_rounds = 0;       ///< rounds run from the workspace's plan, without a host round trip
  bool replanned = false;       ///< the plan was too small somewhere: the walk was re-run counted
  ListBuild list_build = ListBuild::sort;  ///< how the rows were built (WalkOptions::list_build resolved)
};

/// The two lists of a walk, in the memory space of the tree. Their sources Views hold exactly their
/// pairs (sources.extent(0) == num_pairs()).
template <class MemorySpace>
struct InteractionLists {
  InteractionList<MemorySpace> far;   ///< (target node, source node) for M2L, rows by ascending target
  InteractionList<MemorySpace> near;  ///< (target leaf, source leaf) incl. (A, A); one row per leaf
  /// The shallowest tree level that holds a node of a far pair, -1 when there is no far pair. The far
  /// list is symmetric ((A, B) far iff (B, A) far), so this is the shallowest level both of a far target
  /// and of a far source: multipoles above it are never read and locals above it stay zero.
  int top_far_level = -1;
  WalkStatistics statistics;
};

namespace detail {
/// A node as the walk reads it, in the tree's precision: 32 bytes (one GPU memory sector) for float
/// trees, 64 for double (the absolute mass fills what was padding). Classify gathers two records per open
/// pair, so their size sets its traffic. The MAC converts them to double, where float products are exact: the
/// decisions do not depend on the record's precision beyond the tree's own.
template <class Real>
struct alignas(8 * sizeof(Real)) WalkNode {
  Real centre[3];
  Real radius;
  int first_child, num_children;
  Real abs_mass;  ///< sum |m| (the concentration rule)
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
  /// Open pairs {t, s} as t << 32 | s, by round: views of sort.keys (queue 0) and sort.values (queue 1),
  /// the final sort's second buffers (ListBuild::scatter: sort.values then holds the lists' sources),
  /// which are free while the rounds run (refreshed by every walk).
  Kokkos::View<unsigned long long*, MemorySpace, Kokkos::MemoryUnmanaged> queue[2];
  Kokkos::View<unsigned*, MemorySpace> pair_keys;  ///< per written final pair: (near << b) | target
  Kokkos::View<int*, MemorySpace> pair_sources;    ///< per written final pair: source (the payload)
  Kokkos::View<int* [4], MemorySpace> bounds;      ///< per node: far [begin, end), near [begin, end)
  /// [0]: index of the first near pair; [1], [2]: far, near rows; [3]: first far target (-1: none);
  /// [4] (ListBuild::scatter): all list entries as counted on the device
  Kokkos::View<int*, MemorySpace> split;
  Kokkos::View<int*, MemorySpace> far_rows, far_offsets, near_rows, near_offsets;
  /// The final pairs' sort. Its key and value buffers hold the queues during the rounds, and the sorted
  /// pairs after a sort of an odd number of passes (the lists then view them: no copy back); with
  /// ListBuild::scatter the values buffer holds the lists' sources and no sort runs.
  SortWorkspace<MemorySpace, unsigned, int> sort;
  TileScanWorkspace<MemorySpace> tiles;  ///< the rounds' look-back state
  /// Open pairs per round kernel (a slice of a round), 1 .. 2^24 (tests set it small to exercise slicing).
  long long slice = 1LL << 24;
  /// Run planned rounds when a plan exists (the default; false: every round is counted).
  bool planned_rounds = true;
  /// ListBuild::scatter's variant: 0 = the backend's (host: sliced counting, one slice per thread up to
  /// 16; GPUs: atomic cursors), 1..1024 = sliced counting over that many slices, -1 = atomic cursors.
  /// The lists are the same for every choice (tests run them all).
  int scatter_slices = 0;
  /// ListBuild::scatter: per row (and slice) the entry counts, then the cursors.
  Kokkos::View<int*, MemorySpace> row_counts;
  /// The plan: open pairs per round and final pairs stored by the last walk with this workspace (one per
  /// final pair with ListBuild::scatter, two but for self pairs with sort: planned_build says which).
  std::vector<long long> plan;
  long long planned_pairs = 0;
  ListBuild planned_build = ListBuild::sort;
  Kokkos::View<long long*, MemorySpace> state;  ///< planned rounds: pair base, open pairs per round; overflow
};

namespace detail {

/// What the walk does with one open pair.
enum WalkAction : unsigned char { kWalkFar, kWalkNear, kWalkSplitTarget, kWalkSplitSource, kWalkSplitBoth };

/// The decision for the open pair (target t, source s); see the file comment.
template <class Real>
KOKKOS_INLINE_FUNCTION WalkAction walk_action(const WalkNode<Real>& a, const int t, const WalkNode<Real>& b,
                                              const int s, const double theta_squared,
                                              const double min_separation, const double concentration_ratio) {
  if (t == s) return a.num_children == 0 ? kWalkNear : kWalkSplitBoth;
  const double ca[3] = {a.centre[0], a.centre[1], a.centre[2]};
  const double cb[3] = {b.centre[0], b.centre[1], b.centre[2]};
  if (walk_accepts(ca, a.radius, a.abs_mass, cb, b.radius, b.abs_mass, theta_squared, min_separation,
                   concentration_ratio))
    return kWalkFar;
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

/// Most open pairs per round kernel (slice): 36 children per pair at most (the unordered pairs of a self
/// pair's 8 children), so the packed child count (low 30 bits) of a slice stays below 36 x 2^24 < 2^30
/// and never carries into the final-pair count (2 per pair at most), and the packed total (below
/// 2^55 + 2^30) fits the look-back's 56-bit values.
inline constexpr long long max_walk_slice = 1LL << 24;
inline constexpr int walk_final_shift = 30;
inline constexpr unsigned long long walk_children_mask = (1ULL << walk_final_shift) - 1;

/// Starts a walk: packs the node records, seeds the queue with (root, root).
template <class MemorySpace, class Real>
struct WalkPack {
  Kokkos::View<WalkNode<Real>*, MemorySpace, Kokkos::MemoryUnmanaged> nodes;
  Kokkos::View<const Real* [3], MemorySpace> centres;
  Kokkos::View<const Real*, MemorySpace> radii;
  Kokkos::View<const int*, MemorySpace> first_child, num_children;
  Kokkos::View<const Real*, MemorySpace> abs_masses;
  Kokkos::View<unsigned long long*, MemorySpace> queue;
  Kokkos::View<long long*, MemorySpace> state;
  int overflow_at;  // >= 0: seed the planned rounds' state (no pair yet, one open pair, no overflow)
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    WalkNode<Real> node;
    for (int a = 0; a < 3; ++a) node.centre[a] = centres(i, a);
    node.radius = radii(i);
    node.first_child = first_child(i);
    node.num_children = num_children(i);
    node.abs_mass = abs_masses(i);
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

/// Tile geometry of a walk round: teams of `team_size` threads, each deciding `items` consecutive open
/// pairs (held in registers from the decision to the write). Host spaces: one thread per team over a
/// tile of 256; GPUs: 256 threads x 4 pairs, and x 1 pair (`small_items`) in rounds of at most
/// `small_round` open pairs, where a thread's chain of four dependent pair decisions, not the
/// throughput, set the round's time. (Staging the gathers, all pairs then all node records, made the
/// rounds slower on the H200: 113 -> 144 us for a round of 3e6 pairs, register pressure; one pair per
/// thread in every round made the walk 0.95 -> 1.27 ms at 1e6. The bound of 2^18 open pairs, up to
/// ~1000 tiles, ~2.5 waves of teams, was measured against 2^10, 2^14 and 2^16 on the H200 (bench_tree
/// BM_walk, theta 0.72): 2e5 particles at leaf 64 0.426 -> 0.403 ms, 1e6 at leaf 128 0.658 -> 0.637 ms
/// against 2^14; a middle variant of 2 pairs per thread up to 2^18 gained no more.)
template <class ExecutionSpace>
struct WalkTiles {
  static constexpr bool host = is_host_execution_space<ExecutionSpace>;
  static constexpr int items = host ? 256 : 4;
  static constexpr int small_items = host ? 256 : 1;
  static constexpr long long small_round = 262144;
  static constexpr int team_size = host ? 1 : 256;
};

/// One walk round (or one slice of it) in one kernel: every open pair of the team's tile is decided
/// (far / near / split), the tile's output counts (packed (final pairs << 30) | child pairs) are scanned
/// within the team and across tiles by decoupled look-back (core/kfmm/core/tile_scan.hpp), and every
/// pair then writes its final pair or its child pairs at its offsets. The offsets are those of a global
/// exclusive scan of the counts in queue order, so the lists do not depend on the schedule.
/// Writes past a buffer's extent are dropped; the totals (written by the tile holding the last open
/// pair) tell the host or the planned-round check that the round must run again with larger buffers.
template <class ExecutionSpace, class Real, int Items = WalkTiles<ExecutionSpace>::items>
struct WalkRound {
  using memory_space = typename ExecutionSpace::memory_space;
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int I = Items;

  Kokkos::View<const WalkNode<Real>*, memory_space, Kokkos::MemoryUnmanaged> nodes;
  Kokkos::View<const unsigned long long*, memory_space> queue;
  Kokkos::View<unsigned long long*, memory_space> next;
  Kokkos::View<unsigned*, memory_space> pair_keys;
  Kokkos::View<int*, memory_space> pair_sources;
  Kokkos::View<long long*, memory_space> state;
  TileScan<memory_space> scan;
  double theta_squared, min_separation, concentration_ratio;
  long long pair_base, next_base;  // counted rounds: where the slice's final and child pairs start
  unsigned near_bit;
  int begin, m;     // open pairs [begin, begin + m) of the queue (planned rounds: m is the capacity)
  int in_at;        // planned round: pair base state(in_at), open pairs state(in_at + 1); -1: counted
  int base_at;      // planned slice after the first: its pair and child bases at state(base_at), + 1; else -1
  int out_at;       // totals: state(out_at) = pair base + final pairs, state(out_at + 1) = child pairs
                    // (planned: child base + child pairs, i.e. the round's open pairs so far)
  int overflow_at;  // planned round: set to 1 when a capacity was too small; -1: counted
  bool last_slice;  // planned: the round's last slice (its open pairs beyond begin + m overflow)
  bool mirror;      // write a final pair {t, s} in both directions (ListBuild::sort), else once
  int tile_items;   // team size x I

  KOKKOS_INLINE_FUNCTION void operator()(const Team& team) const {
    long long tile = 0;
    if (team.team_rank() == 0) tile = scan.take_ticket();
    team.team_broadcast(tile, 0);
    long long open = m, pairs0 = pair_base, next0 = next_base;
    if (in_at >= 0) {
      pairs0 = state(base_at >= 0 ? base_at : in_at);
      next0 = base_at >= 0 ? state(base_at + 1) : 0;
      const long long left = state(in_at + 1) - begin;  // (the round's open pairs from this slice on)
      open = left < m ? (left > 0 ? left : 0) : m;
    }
    const long long first = tile * tile_items;
    if (first >= open && tile > 0) return;  // (tile 0 writes the totals of an empty round)

    // Decide this thread's pairs; keep what the write needs.
    const long long mine = first + static_cast<long long>(team.team_rank()) * I;
    unsigned long long count[I];
    int target[I], source[I], child_first[I], child_count[I];
    unsigned char action[I];
    unsigned long long sum = 0;
    for (int k = 0; k < I; ++k) {
      count[k] = 0;
      action[k] = kWalkFar;
      target[k] = source[k] = child_first[k] = child_count[k] = 0;
      if (mine + k < open) {
        const unsigned long long pair = queue(begin + mine + k);
        const int t = static_cast<int>(pair >> 32), s = static_cast<int>(pair & 0xffffffffULL);
        const WalkNode<Real> a = nodes(t);
        const WalkNode<Real> b = nodes(s);
        const WalkAction act = walk_action(a, t, b, s, theta_squared, min_separation, concentration_ratio);
        target[k] = t;
        source[k] = s;
        action[k] = static_cast<unsigned char>(act);
        if (act == kWalkFar || act == kWalkNear) {
          count[k] = (mirror && t != s ? 2ULL : 1ULL) << walk_final_shift;  // (both directions of {t, s})
        } else {
          const WalkNode<Real>& split = act == kWalkSplitSource ? b : a;
          child_first[k] = split.first_child;
          child_count[k] = split.num_children;
          const int n = split.num_children;
          count[k] = static_cast<unsigned long long>(act == kWalkSplitBoth ? n * (n + 1) / 2 : n);
        }
      }
      sum += count[k];
    }

    // Offsets: within the team, then across tiles.
    const unsigned long long before = team.team_scan(sum);
    unsigned long long tile_sum = before + sum;
    team.team_broadcast(tile_sum, team.team_size() - 1);
    const unsigned long long prefix = scan.exclusive_prefix(team, tile, tile_sum);
    if (team.team_rank() == 0) {
      const long long last_tile = open > 0 ? (open - 1) / tile_items : 0;
      if (tile == last_tile) {
        const unsigned long long total = prefix + tile_sum;
        const long long finals = static_cast<long long>(total >> walk_final_shift);
        const long long children = static_cast<long long>(total & walk_children_mask);
        state(out_at) = pairs0 + finals;
        state(out_at + 1) = in_at >= 0 ? next0 + children : children;
        if (overflow_at >= 0 && ((last_slice && state(in_at + 1) > begin + static_cast<long long>(m)) ||
                                 pairs0 + finals > static_cast<long long>(pair_keys.extent(0)) ||
                                 next0 + children > static_cast<long long>(next.extent(0))))
          state(overflow_at) = 1;
      }
    }

    // Write.
    const long long pair_cap = static_cast<long long>(pair_keys.extent(0));
    const long long next_cap = static_cast<long long>(next.extent(0));
    unsigned long long o = prefix + before;
    for (int k = 0; k < I; ++k) {
      if (mine + k < open) {
        const int t = target[k], s = source[k];
        const WalkAction act = static_cast<WalkAction>(action[k]);
        if (act == kWalkFar || act == kWalkNear) {
          const long long p = pairs0 + static_cast<long long>(o >> walk_final_shift);
          const unsigned near = act == kWalkNear ? near_bit : 0u;
          if (p < pair_cap) {
            pair_keys(p) = static_cast<unsigned>(t) | near;
            pair_sources(p) = s;
          }
          if (mirror && t != s && p + 1 < pair_cap) {  // the same pair seen from s
            pair_keys(p + 1) = static_cast<unsigned>(s) | near;
            pair_sources(p + 1) = t;
          }
        } else {
          const long long c = next0 + static_cast<long long>(o & walk_children_mask);
          const int f = child_first[k], n = child_count[k];
          if (act == kWalkSplitTarget) {
            for (int j = 0; j < n; ++j)
              if (c + j < next_cap) next(c + j) = walk_pair(f + j, s);
          } else if (act == kWalkSplitSource) {
            for (int j = 0; j < n; ++j)
              if (c + j < next_cap) next(c + j) = walk_pair(t, f + j);
          } else {  // a self pair: every unordered pair of its children, {u, v} with u <= v, in order
            long long j = c;
            for (int u = 0; u < n; ++u)
              for (int v = u; v < n; ++v, ++j)
                if (j < next_cap) next(j) = walk_pair(f + u, f + v);
          }
        }
      }
      o += count[k];
    }
  }
};

/// After the sort: the bounds of every row per node, far [0, 1) and near [2, 3), by binary search of the
/// sorted keys (far keys are the target t, near keys near_bit + t), and the index of the first near pair.
/// Four threads per node, one search each (index 4 num_nodes: the first near pair): ~log2(pairs)
/// dependent cached reads per thread, instead of a pass over every pair (a per-pair boundary-marking
/// kernel took ~0.1 ms for 1e7 pairs on the H200) or four chained searches (~25 us at 2e5 particles).
template <class MemorySpace>
struct WalkRowBounds {
  Kokkos::View<const unsigned*, MemorySpace> keys;
  Kokkos::View<int* [4], MemorySpace> bounds;
  Kokkos::View<int*, MemorySpace> split;
  unsigned long long near_bit;
  int pairs, num_nodes;
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
  KOKKOS_INLINE_FUNCTION void operator()(const long long k) const {  // (4 num_nodes may exceed int)
    if (k == 4LL * num_nodes) {
      split(0) = lower_bound(near_bit);
      return;
    }
    // bound q of node t: far begin, far end, near begin, near end
    const int t = static_cast<int>(k / 4), q = static_cast<int>(k % 4);
    bounds(t, q) = lower_bound((q >= 2 ? near_bit : 0ULL) + static_cast<unsigned long long>(t) + (q & 1));
  }
};

/// Scan over the nodes 0..num_nodes: compacts the far and near rows (value: far rows << 32 | near rows)
/// and writes both CSR offsets arrays; node num_nodes closes them.
/// (Measured and kept: one kernel with two look-back scans (core/tile_scan.hpp) instead took 17 us
/// against 2 x 5.8 us for this scan's two CUDA kernels at 2e5 Plummer, leaf 64 on the H200, Nsight Compute,
/// twelfth session: the look-backs' team reductions cost more than the launch they save.)
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
        if (far_row == 0) split(3) = -1;  // (no far row)
      }
      return;
    }
    const bool has_far = bounds(t, 1) > bounds(t, 0), has_near = bounds(t, 3) > bounds(t, 2);
    if (final) {
      if (has_far) {
        if (far_row == 0) split(3) = t;  // the first far target: the shallowest (nodes go level by level)
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

/// ListBuild::scatter. A stored final pair i = {t, s} stands for the list entries 2i (row t, source s)
/// and, unless t == s, 2i + 1 (row s, source t): the sequence that ListBuild::sort writes and sorts
/// stably by row. Both variants below place every entry in its row in the order of the entry indices,
/// i.e. exactly where the stable sort puts it: the lists do not depend on the build. A row is (near, t),
/// numbered near * num_nodes + t: all far rows by target, then all near rows (the sort's key order).
struct WalkEntry {
  int row, source;
};
/// Entry 2i + mirror of the stored pair (key, s) (near_bit marks a near pair).
KOKKOS_INLINE_FUNCTION WalkEntry walk_entry(const unsigned key, const int s, const bool mirror,
                                            const unsigned near_bit, const int num_nodes) {
  const int t = static_cast<int>(key & (near_bit - 1));
  const int base = (key & near_bit) != 0 ? num_nodes : 0;
  return mirror ? WalkEntry{base + s, t} : WalkEntry{base + t, s};
}

/// Sliced counting (host backends): the stored pairs are cut into `slices` consecutive blocks, one per
/// thread, and every block has its own column of counts, counts(slice * rows + row) (zeroed before; a
/// block's counts are contiguous, so threads do not share cache lines): no atomics. Pass 1 (Place = false)
/// counts each block's entries per row; pass 3 (Place = true), after pass 2 turned the counts into cursors,
/// writes each block's entries in entry order at its cursors.
template <class MemorySpace, bool Place>
struct WalkSlicePass {
  Kokkos::View<const unsigned*, MemorySpace> keys;
  Kokkos::View<const int*, MemorySpace> pair_sources;
  Kokkos::View<int*, MemorySpace> counts;
  Kokkos::View<int*, MemorySpace> sources;  // (pass 3)
  long long pairs;
  unsigned near_bit;
  int num_nodes, slices;
  KOKKOS_INLINE_FUNCTION void visit(const WalkEntry e, const int slice) const {
    int& count = counts(static_cast<long long>(slice) * 2 * num_nodes + e.row);
    if constexpr (Place) {
      const int place = count++;
      if (static_cast<long long>(place) < static_cast<long long>(sources.extent(0)))
        sources(place) = e.source;
    } else {
      ++count;
    }
  }
  KOKKOS_INLINE_FUNCTION void operator()(const int slice) const {
    const long long end = pairs * (slice + 1) / slices;
    for (long long i = pairs * slice / slices; i < end; ++i) {
      const unsigned key = keys(i);
      const int s = pair_sources(i);
      visit(walk_entry(key, s, false, near_bit, num_nodes), slice);
      if (static_cast<int>(key & (near_bit - 1)) != s)
        visit(walk_entry(key, s, true, near_bit, num_nodes), slice);
    }
  }
};

/// Pass 2, both variants: an exclusive scan of the counts in row order (sliced counting: row by row,
/// each row's slices in order, read from their columns; atomic cursors: one count per row, slices = 1)
/// turns them into the places where each slice's (or row's) entries start. Writes the rows' bounds, far
/// rows in bounds(t, 0..1), near rows in bounds(t, 2..3); split(0) = the first near entry and split(4) =
/// all entries, which the host compares with the expected count before the lists are used (a tree whose
/// leaves do not each have one self pair would be inconsistent: the passes then drop the writes that
/// fall outside the buffer, and the walk throws).
template <class MemorySpace>
struct WalkRowOffsets {
  using value_type = long long;
  Kokkos::View<int*, MemorySpace> counts;
  Kokkos::View<int* [4], MemorySpace> bounds;
  Kokkos::View<int*, MemorySpace> split;
  int num_nodes, slices;
  KOKKOS_INLINE_FUNCTION void operator()(const long long j, value_type& prefix, const bool final) const {
    const long long rows = 2LL * num_nodes, end = rows * slices;
    if (final && j % slices == 0) {
      const long long row = j / slices;
      if (row > 0)
        bounds(static_cast<int>((row - 1) % num_nodes), (row - 1) < num_nodes ? 1 : 3) =
            static_cast<int>(prefix);
      if (row < rows)
        bounds(static_cast<int>(row % num_nodes), row < num_nodes ? 0 : 2) = static_cast<int>(prefix);
      if (row == num_nodes) split(0) = static_cast<int>(prefix);
      if (row == rows) split(4) = static_cast<int>(prefix);
    }
    if (j == end) return;
    int& count = counts((j % slices) * rows + j / slices);  // (row j / slices, slice j % slices)
    const int c = count;
    if (final) count = static_cast<int>(prefix);
    prefix += c;
  }
};

/// Atomic cursors (GPUs: too many threads for a column of counts each), one thread per stored pair.
/// Pass 1 (Place = false) counts every row's entries by atomic increments (counts zeroed before); pass 3
/// (Place = true), after pass 2, gives every entry the next place of its row from the row's cursor and
/// writes its entry index there (as unsigned: 2 x pairs may pass INT_MAX), in an order that varies run
/// to run (pass 4 puts it right).
template <class MemorySpace, bool Place>
struct WalkAtomicPass {
  Kokkos::View<const unsigned*, MemorySpace> keys;
  Kokkos::View<const int*, MemorySpace> pair_sources;
  Kokkos::View<int*, MemorySpace> counts;
  Kokkos::View<unsigned*, MemorySpace, Kokkos::MemoryUnmanaged> entries;  // (pass 3)
  unsigned near_bit;
  int num_nodes;
  KOKKOS_INLINE_FUNCTION void visit(const WalkEntry e, const unsigned index) const {
    if constexpr (Place) {
      const int place = Kokkos::atomic_fetch_add(&counts(e.row), 1);
      if (static_cast<long long>(place) < static_cast<long long>(entries.extent(0))) entries(place) = index;
    } else {
      Kokkos::atomic_add(&counts(e.row), 1);
    }
  }
  KOKKOS_INLINE_FUNCTION void operator()(const long long i) const {
    const unsigned key = keys(i);
    const int s = pair_sources(i);
    visit(walk_entry(key, s, false, near_bit, num_nodes), 2 * static_cast<unsigned>(i));
    if (static_cast<int>(key & (near_bit - 1)) != s)
      visit(walk_entry(key, s, true, near_bit, num_nodes), 2 * static_cast<unsigned>(i) + 1);
  }
};

/// Atomic cursors, pass 4: a team per node sorts the entry indices of its far and near row (the stable
/// order; team_sort, in scratch chunks of `chunk`) and replaces each by its source on the way out.
template <class ExecutionSpace>
struct WalkSortRows {
  using memory_space = typename ExecutionSpace::memory_space;
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch =
      Kokkos::View<unsigned*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  // (A GPU team of 128 fills the median row's network, 64-256 comparators; rows up to 2048 entries, 8 KB,
  // all but the longest few per cent of the entries, sort without a pass over global memory.)
  static constexpr int team_size = is_host_execution_space<ExecutionSpace> ? 1 : 128;
  static constexpr int chunk = 2048;
  Kokkos::View<const unsigned*, memory_space> keys;
  Kokkos::View<const int*, memory_space> pair_sources;
  Kokkos::View<const int* [4], memory_space> bounds;
  Kokkos::View<unsigned*, memory_space, Kokkos::MemoryUnmanaged> entries;
  long long pairs;
  unsigned near_bit;
  static size_t scratch_bytes() { return Scratch::shmem_size(chunk); }
  KOKKOS_INLINE_FUNCTION void operator()(const Team& team) const {
    const int t = team.league_rank();
    const Scratch scratch(team.team_scratch(0), chunk);
    for (int q = 0; q < 4; q += 2) {
      const int begin = bounds(t, q), end = bounds(t, q + 1);
      // (an inconsistent tree's rows may pass the buffer: skipped, and the entry check throws)
      if (static_cast<long long>(end) > static_cast<long long>(entries.extent(0))) continue;
      team_sort(team, entries.data() + begin, end - begin, scratch, [&](const unsigned e) {
        const long long i = e >> 1;
        if (i >= pairs) return e;
        return static_cast<unsigned>((e & 1u) != 0 ? static_cast<int>(keys(i) & (near_bit - 1))
                                                   : pair_sources(i));
      });
    }
  }
};

/// The walk's capacity for n entries: an eighth of headroom (memory per particle matters; a time step
/// changes the counts far less) plus `slack`, at most INT_MAX.
inline long long with_headroom(long long n, long long slack) {
  return std::min<long long>(n + n / 8 + slack, INT_MAX);
}

/// Grows `v` to at least `needed` entries (plus headroom), keeping its first `keep` entries.
template <class View>
void grow_to(View& v, long long needed, long long keep, const char* label) {
  require(needed <= INT_MAX, "dual_tree_walk: ", needed, " pairs exceed the int index range of the lists");
  if (needed <= static_cast<long long>(v.extent(0))) return;
  const int cap = static_cast<int>(with_headroom(needed, 1024));
  View grown(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), cap);
  if (keep > 0)
    Kokkos::deep_copy(Kokkos::subview(grown, Kokkos::make_pair(0, static_cast<int>(keep))),
                      Kokkos::subview(v, Kokkos::make_pair(0, static_cast<int>(keep))));
  v = grown;
}

/// Makes `queue` (open pairs, 8-byte words) a view of `storage` (4-byte entries, two per word) holding at
/// least `words` words. When the storage must grow: to `words` words, plus an eighth and 1024 with
/// `headroom` (a counted round's output, as grow_to), keeping the first `keep` words (that output so far;
/// with keep = 0 the old buffer is released first, so the two never coexist).
template <class Storage>
void reserve_queue(
    Storage& storage,
    Kokkos::View<unsigned long long*, typename Storage::memory_space, Kokkos::MemoryUnmanaged>& queue,
    long long words, long long keep, bool headroom, const char* label) {
  static_assert(2 * sizeof(typename Storage::value_type) == sizeof(unsigned long long),
                "a queue word takes two storage entries");
  require(words <= INT_MAX, "dual_tree_walk: ", words, " open pairs exceed the int index range");
  if (2 * words > static_cast<long long>(storage.extent(0))) {
    const long long cap = headroom ? with_headroom(words, 1024) : words;
    if (keep == 0) storage = Storage();
    Storage grown(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                  static_cast<size_t>(2 * cap));
    if (keep > 0)
      Kokkos::deep_copy(Kokkos::subview(grown, Kokkos::make_pair(0LL, 2 * keep)),
                        Kokkos::subview(storage, Kokkos::make_pair(0LL, 2 * keep)));
    storage = grown;
  }
  require(reinterpret_cast<std::uintptr_t>(storage.data()) % alignof(unsigned long long) == 0,
          "dual_tree_walk: queue storage not aligned to ", alignof(unsigned long long), " bytes");
  queue = Kokkos::View<unsigned long long*, typename Storage::memory_space, Kokkos::MemoryUnmanaged>(
      reinterpret_cast<unsigned long long*>(storage.data()), storage.extent(0) / 2);
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
  require(options.concentration_ratio >= 0 && options.concentration_ratio <= 1,
          "dual_tree_walk: concentration_ratio = ", options.concentration_ratio, " must lie in [0, 1]");
  require(ws.slice >= 1 && ws.slice <= detail::max_walk_slice, "dual_tree_walk: workspace slice = ", ws.slice,
          " must lie in [1, 2^24]");
  require(ws.scatter_slices >= -1 && ws.scatter_slices <= 1024,
          "dual_tree_walk: workspace scatter_slices = ", ws.scatter_slices, " must lie in [-1, 1024]");
  require(is_valid(options.list_build), "dual_tree_walk: list_build = ", static_cast<int>(options.list_build),
          " is not a ListBuild (automatic, sort, scatter)");
  const ListBuild build = options.list_build != ListBuild::automatic        ? options.list_build
                          : detail::is_host_execution_space<ExecutionSpace> ? ListBuild::scatter
                                                                            : ListBuild::sort;
  const bool scatter = build == ListBuild::scatter;
  InteractionLists<memory_space> lists;
  const int num_nodes = tree.num_nodes;

  const int node_bits = bits_for(static_cast<unsigned long long>(num_nodes > 1 ? num_nodes - 1 : 0));
  require(node_bits < 32, "dual_tree_walk: ", num_nodes, " nodes exceed the 31-bit pair keys");
  const unsigned near_bit = 1u << node_bits;
  const double theta_squared = options.theta * options.theta;

  // Planned rounds: the last walk's round sizes plus an eighth as capacities, so that no round needs
  // the host (see the file comment). Buffers are sized before the pack kernel seeds the queue.
  const int planned = num_nodes > 0 && ws.planned_rounds ? static_cast<int>(ws.plan.size()) : 0;
  std::vector<int> caps(planned);
  const bool use_plan = planned > 0;
  for (int r = 0; r < planned; ++r) {
    const long long cap = detail::with_headroom(ws.plan[r], 256);
    caps[r] = static_cast<int>(std::min<long long>(cap, INT_MAX - 1));
  }
  const int overflow_at = 2 * planned + 2;
  const int counted_at = overflow_at + 1;  // a counted slice's totals: pair base + finals, children
  // A planned round wider than the slice runs as several launches, each leaving its running totals in
  // two more state words for the next (slices_at on).
  const int slices_at = counted_at + 2;
  long long slice_words = 0;
  for (int r = 0; r < planned; ++r) slice_words += 2 * ((caps[r] + ws.slice - 1) / ws.slice - 1);
  detail::reserve_at_least(ws.state, slices_at + slice_words, "kfmm::walk::state");
  if (use_plan) {
    // Round r reads queue r % 2: each queue holds the widest round of its parity (not both the widest:
    // at 1e8 particles that was 8 bytes per particle more than counted rounds hold).
    int widest[2] = {1, 1};
    for (int r = 0; r < planned; ++r) widest[r % 2] = std::max(widest[r % 2], caps[r]);
    // (and the last planned round's output, the first counted round's input when the plan ends early)
    widest[planned % 2] = std::max(widest[planned % 2], caps[planned - 1]);
    detail::reserve_queue(ws.sort.keys, ws.queue[0], widest[0], 0, false, "kfmm::walk::queue");
    detail::reserve_queue(ws.sort.values, ws.queue[1], widest[1], 0, false, "kfmm::walk::queue");
    // (The plan's pairs are those its walk stored: a plan of the other list build stores about twice or
    // half as many, 2 P - L or (P + L) / 2 with L leaves, each leaf's self pair stored once.)
    long long planned_pairs = ws.planned_pairs;
    if (ws.planned_build != build)
      planned_pairs = scatter ? (planned_pairs + tree.num_leaves) / 2 : 2 * planned_pairs - tree.num_leaves;
    const long long pair_cap = detail::with_headroom(std::max(planned_pairs, 0LL), 1024);
    detail::reserve_at_least(ws.pair_keys, pair_cap, "kfmm::walk::pair_keys");
    detail::reserve_at_least(ws.pair_sources, pair_cap, "kfmm::walk::pair_sources");
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
  detail::reserve_at_least(ws.split, 5, "kfmm::walk::split");
  // (a queue's storage grows in the counted rounds below, with headroom, and after them to the sort's
  // size (sort) or, queue 1's, to the lists' sources (scatter): grow_queue refreshes the queue's view)
  const auto grow_queue = [&](int b, long long words, long long keep, bool headroom) {
    if (b == 0) {
      detail::reserve_queue(ws.sort.keys, ws.queue[0], words, keep, headroom, "kfmm::walk::queue");
    } else {
      detail::reserve_queue(ws.sort.values, ws.queue[1], words, keep, headroom, "kfmm::walk::queue");
    }
  };
  grow_queue(0, 1, 0, false);
  grow_queue(1, 1, 0, false);
  Kokkos::parallel_for("kfmm::walk::pack", Range(space, 0, num_nodes),
                       detail::WalkPack<memory_space, Real>{
                           nodes, tree.centres, tree.radii, tree.first_child, tree.num_children,
                           tree.node_abs_masses, ws.queue[0], ws.state, use_plan ? overflow_at : -1});

  // One kernel per round (or slice): decide, scan by look-back, write (detail::WalkRound). The team size
  // depends on the kernel alone: queried once per walk, not per round.
  using Tiles = detail::WalkTiles<ExecutionSpace>;
  using Round = detail::WalkRound<ExecutionSpace, Real, Tiles::items>;
  using SmallRound = detail::WalkRound<ExecutionSpace, Real, Tiles::small_items>;
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  const int team =
      Tiles::team_size > 1
          ? std::min({Tiles::team_size, Policy(space, 1, 1).team_size_max(Round(), Kokkos::ParallelForTag()),
                      Policy(space, 1, 1).team_size_max(SmallRound(), Kokkos::ParallelForTag())})
          : 1;
  // The buffers are read at each launch: counted rounds grow them between launches.
  const auto launch = [&](auto round, int cur_queue, long long pair_base, long long next_base, int begin,
                          int m, int in_at, int base_at, int out_at, int overflow, bool last_slice) {
    round.nodes = nodes;
    round.queue = ws.queue[cur_queue];
    round.next = ws.queue[1 - cur_queue];
    round.pair_keys = ws.pair_keys;
    round.pair_sources = ws.pair_sources;
    round.state = ws.state;
    round.theta_squared = theta_squared;
    round.min_separation = options.min_separation;
    round.concentration_ratio = options.concentration_ratio;
    round.pair_base = pair_base;
    round.next_base = next_base;
    round.near_bit = near_bit;
    round.begin = begin;
    round.m = m;
    round.in_at = in_at;
    round.base_at = base_at;
    round.out_at = out_at;
    round.overflow_at = overflow;
    round.last_slice = last_slice;
    round.mirror = !scatter;
    round.tile_items = team * decltype(round)::I;
    const long long tiles = std::max<long long>(1, (m + round.tile_items - 1LL) / round.tile_items);
    round.scan = TileScan<memory_space>(ws.tiles, ws.tiles.prepare(space, tiles), tiles);
    Kokkos::parallel_for("kfmm::walk::round",
                         Policy(space, static_cast<int>(tiles), team)
                             .set_scratch_size(0, Kokkos::PerTeam(TileScan<memory_space>::scratch_bytes())),
                         round);
  };
  // (Both tilings write the same lists: the offsets are a global scan's in queue order.)
  const auto run_round = [&](int cur_queue, long long pair_base, long long next_base, int begin, int m,
                             int in_at, int base_at, int out_at, int overflow, bool last_slice) {
    if (Tiles::small_items != Tiles::items && m <= Tiles::small_round) {
      launch(SmallRound(), cur_queue, pair_base, next_base, begin, m, in_at, base_at, out_at, overflow,
             last_slice);
    } else {
      launch(Round(), cur_queue, pair_base, next_base, begin, m, in_at, base_at, out_at, overflow,
             last_slice);
    }
  };

  long long open = num_nodes > 0 ? 1 : 0, pairs = 0;
  int cur = 0;
  std::vector<long long> sizes;  // open pairs per round: the next walk's plan
  if (use_plan) {
    int words = slices_at;
    for (int r = 0; r < planned; ++r) {
      // Slices of the round's capacity, chained through the state: slice k starts where k - 1 ended.
      int base_at = -1;
      for (long long begin = 0; begin < caps[r]; begin += ws.slice) {
        const int m = static_cast<int>(std::min<long long>(ws.slice, caps[r] - begin));
        const bool last = begin + m >= caps[r];
        const int out_at = last ? 2 * r + 2 : words;
        run_round(cur, 0, 0, static_cast<int>(begin), m, 2 * r, base_at, out_at, overflow_at, last);
        base_at = out_at;
        if (!last) words += 2;
      }
      cur = 1 - cur;
    }
    // The one host round trip of the planned rounds: their sizes, the pairs, the overflow flag.
    std::vector<long long> state(overflow_at + 1);
    detail::copy_to_host(space, state.data(), ws.state, state.size());
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

  // Counted rounds: each slice's totals come back to the host (the round's round trip); when a buffer
  // was too small the slice runs again after the buffer grew (its input queue is unchanged).
  while (open > 0) {
    sizes.push_back(open);
    long long next = 0;
    for (long long begin = 0; begin < open; begin += ws.slice) {
      const int m = static_cast<int>(std::min(ws.slice, open - begin));
      for (;;) {
        run_round(cur, pairs, next, static_cast<int>(begin), m, -1, -1, counted_at, -1, false);
        long long totals[2];
        detail::copy_to_host(space, totals,
                             Kokkos::subview(ws.state, Kokkos::make_pair(counted_at, counted_at + 2)), 2);
        const long long finals = totals[0] - pairs, children = totals[1];
        const bool fits = pairs + finals <= static_cast<long long>(ws.pair_keys.extent(0)) &&
                          next + children <= static_cast<long long>(ws.queue[1 - cur].extent(0));
        detail::grow_to(ws.pair_keys, pairs + finals, pairs, "kfmm::walk::pair_keys");
        detail::grow_to(ws.pair_sources, pairs + finals, pairs, "kfmm::walk::pair_sources");
        grow_queue(1 - cur, next + children, next, true);
        if (!fits) continue;
        pairs += finals;
        next += children;
        break;
      }
    }
    open = next;
    cur = 1 - cur;
  }
  for (const long long size : sizes) {
    lists.statistics.peak_entries = std::max(lists.statistics.peak_entries, size);
    lists.statistics.pairs_visited += size;
  }
  lists.statistics.rounds = static_cast<int>(sizes.size());
  lists.statistics.list_build = build;
  ws.plan = sizes;
  ws.planned_pairs = pairs;
  ws.planned_build = build;

  // CSR: sort the final pairs by (near, target) and mark the rows' bounds, or count, scatter and sort the
  // rows (ListBuild); then compact the rows.
  require(pairs <= INT_MAX, "dual_tree_walk: ", pairs, " pairs exceed the int index range of the lists");
  // List entries: with scatter every stored pair but the leaves' self pairs gives two.
  const long long np = scatter ? 2 * pairs - (num_nodes > 0 ? tree.num_leaves : 0) : pairs;
  require(np >= 0 && np <= INT_MAX, "dual_tree_walk: ", np,
          " list entries exceed the int index range of the lists (or an inconsistent tree)");
  const int n_pairs = static_cast<int>(np);
  const long long buffer_words = (np + np / 16 + 1024) / 2 + 1;  // (a 16th of headroom on the entries)
  Kokkos::View<int*, memory_space> sources;
  if (scatter) {
    // The lists' sources take queue 1's storage (dead once the rounds are done); counts and cursors are
    // per row (atomic) or per row and slice.
    grow_queue(1, buffer_words, 0, false);
    sources = ws.sort.values;
    const int slices = ws.scatter_slices != 0 ? ws.scatter_slices
                       : detail::is_host_execution_space<ExecutionSpace>
                           ? std::max(1, std::min(compat::concurrency(space), 16))
                           : -1;
    if (num_nodes > 0) {
      const long long rows = 2LL * num_nodes, columns = slices > 0 ? slices : 1;
      require(rows * columns < INT_MAX, "dual_tree_walk: ", num_nodes, " nodes x ", columns,
              " scatter slices exceed the int range of the row counts (use fewer slices)");
      detail::reserve_at_least(ws.row_counts, rows * columns + 1, "kfmm::walk::row_counts");
      Kokkos::deep_copy(space, Kokkos::subview(ws.row_counts, Kokkos::make_pair(0LL, rows * columns)), 0);
      const detail::WalkRowOffsets<memory_space> offsets{ws.row_counts, ws.bounds, ws.split, num_nodes,
                                                         static_cast<int>(columns)};
      if (slices > 0) {
        using Count = detail::WalkSlicePass<memory_space, false>;
        using Place = detail::WalkSlicePass<memory_space, true>;
        Kokkos::parallel_for(
            "kfmm::walk::count_slices", Range(space, 0, slices),
            Count{ws.pair_keys, ws.pair_sources, ws.row_counts, sources, pairs, near_bit, num_nodes, slices});
        Kokkos::parallel_scan("kfmm::walk::row_offsets", Range(space, 0, rows * columns + 1), offsets);
        Kokkos::parallel_for(
            "kfmm::walk::scatter_slices", Range(space, 0, slices),
            Place{ws.pair_keys, ws.pair_sources, ws.row_counts, sources, pairs, near_bit, num_nodes, slices});
      } else {
        // (entry indices up to 2 pairs - 1 < 2^32, in the sources' storage until the rows are sorted)
        const Kokkos::View<unsigned*, memory_space, Kokkos::MemoryUnmanaged> entries(
            reinterpret_cast<unsigned*>(sources.data()), sources.extent(0));
        using Count = detail::WalkAtomicPass<memory_space, false>;
        using Place = detail::WalkAtomicPass<memory_space, true>;
        Kokkos::parallel_for(
            "kfmm::walk::count_rows", Range(space, 0, pairs),
            Count{ws.pair_keys, ws.pair_sources, ws.row_counts, entries, near_bit, num_nodes});
        Kokkos::parallel_scan("kfmm::walk::row_offsets", Range(space, 0, rows + 1), offsets);
        Kokkos::parallel_for(
            "kfmm::walk::scatter_rows", Range(space, 0, pairs),
            Place{ws.pair_keys, ws.pair_sources, ws.row_counts, entries, near_bit, num_nodes});
        using SortRows = detail::WalkSortRows<ExecutionSpace>;
        Kokkos::parallel_for("kfmm::walk::sort_rows",
                             Kokkos::TeamPolicy<ExecutionSpace>(space, num_nodes, SortRows::team_size)
                                 .set_scratch_size(0, Kokkos::PerTeam(SortRows::scratch_bytes())),
                             SortRows{ws.pair_keys, ws.pair_sources, ws.bounds, entries, pairs, near_bit});
      }
    }
  } else {
    // The sort's second key and value buffers are the queues' storage, dead once the rounds are done: the
    // walk holds max(queues, sort buffers) instead of their sum (2e5 Plummer, p 4, theta 0.6, leaf 64: the
    // walk's buffers 436 -> 338 bytes per particle in the eleventh session, docs/tree.md). The sorted pairs
    // stay where the sort's last pass wrote them (keys and sources below): after an odd number of passes
    // that is this storage, and copying them back cost ~0.45 ms at 1e7 particles on an H100.
    grow_queue(0, buffer_words, 0, false);
    grow_queue(1, buffer_words, 0, false);
    const bool in_second =
        sort_by_key_bits_in_either(space, ws.pair_keys, ws.pair_sources, n_pairs, 0, node_bits + 1, ws.sort);
    const Kokkos::View<unsigned*, memory_space> keys = in_second ? ws.sort.keys : ws.pair_keys;
    sources = in_second ? ws.sort.values : ws.pair_sources;
    if (num_nodes > 0) {
      Kokkos::parallel_for(
          "kfmm::walk::row_bounds", Range(space, 0, 4LL * num_nodes + 1),
          detail::WalkRowBounds<memory_space>{keys, ws.bounds, ws.split, near_bit, n_pairs, num_nodes});
    }
  }
  detail::reserve_at_least(ws.far_rows, num_nodes, "kfmm::walk::far_rows");
  detail::reserve_at_least(ws.far_offsets, num_nodes + 1LL, "kfmm::walk::far_offsets");
  detail::reserve_at_least(ws.near_rows, num_nodes, "kfmm::walk::near_rows");
  detail::reserve_at_least(ws.near_offsets, num_nodes + 1LL, "kfmm::walk::near_offsets");
  Kokkos::parallel_scan(
      "kfmm::walk::rows", Range(space, 0, num_nodes + 1),
      detail::WalkCompactRows<memory_space>{ws.bounds, ws.split, ws.far_rows, ws.far_offsets, ws.near_rows,
                                            ws.near_offsets, num_nodes, n_pairs});
  // first near pair, far rows, near rows, first far target (and with scatter the entries): the lists' one
  // copy to the host
  int split[5] = {0, 0, 0, 0, n_pairs};
  detail::copy_to_host(space, split, ws.split, scatter && num_nodes > 0 ? 5 : 4);
  const int first_near = split[0], far_rows = split[1], near_rows = split[2], first_far = split[3];
  require(split[4] == n_pairs, "dual_tree_walk: ", split[4], " list entries counted for ", n_pairs,
          " expected (inconsistent tree)");
  if (far_rows > 0) {
    require(first_far >= 0 && first_far < num_nodes, "dual_tree_walk: first far target ", first_far,
            " out of range (inconsistent tree)");
    lists.top_far_level =
        static_cast<int>(std::upper_bound(tree.level_offsets.begin(), tree.level_offsets.end(), first_far) -
                         tree.level_offsets.begin() - 1);
  }
  lists.far.targets = Kokkos::subview(ws.far_rows, Kokkos::make_pair(0, far_rows));
  lists.far.offsets = Kokkos::subview(ws.far_offsets, Kokkos::make_pair(0, far_rows + 1));
  lists.far.sources = Kokkos::subview(sources, Kokkos::make_pair(0, first_near));
  lists.near.targets = Kokkos::subview(ws.near_rows, Kokkos::make_pair(0, near_rows));
  lists.near.offsets = Kokkos::subview(ws.near_offsets, Kokkos::make_pair(0, near_rows + 1));
  lists.near.sources = Kokkos::subview(sources, Kokkos::make_pair(first_near, n_pairs));
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
