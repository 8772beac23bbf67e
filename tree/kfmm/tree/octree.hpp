/// \file octree.hpp
/// The adaptive octree, built on the execution space from the caller's positions and masses.
///
/// Construction (no host loop over particles or nodes; about 20 kernels and one host round trip, the
/// level sizes with the node count and the box; a tree deeper than the first sort resolves repeats the
/// sort and the topology, with one more round trip):
/// 1. bounding box and non-finite count (one kernel, bounding_box.hpp), 63-bit Morton keys relative to
///    the box, which stays on the device: the keys kernel reads it there, and it comes to the host with
///    the level sizes of step 3, where non-finite inputs are reported (an error after the fact: the
///    keys of NaN or infinite coordinates are clamped, so the steps between stay memory-safe);
/// 2. keys sorted with the permutation (sort.hpp, the sort seam) by their top 3 D bits only, i.e. by
///    their cells at level D = default_sort_levels(N, leaf_size), ties in caller order. The topology
///    below reads only cells at levels <= D from such an order as long as no node lies deeper than D
///    (every level-D cell then holds at most leaf_size particles, so no window of leaf_size + 1 keys
///    shares one): when step 3 finds a node deeper than D, the keys are sorted again by all their bits
///    and step 3 repeats. The order is thus a function of the input alone (a workspace only remembers
///    which sort to try first). Positions and masses are gathered in the final order;
/// 3. topology from the sorted keys alone. A node is a Morton cell (level l = the top 3 l key bits)
///    whose parent cell holds more than leaf_size particles; a node is a leaf when it holds at most
///    leaf_size particles or is at the key resolution (level 21: coincident particles, kept together
///    even beyond leaf_size). For sorted position i let
///      d(i) = 1 + (deepest level at which keys i-1 and i share a cell)  (d(0) = 0): i starts a cell at
///             every level >= d(i);
///      L(i) = level of the leaf that holds i = 1 + the deepest level whose cell around i holds more
///             than leaf_size particles, found as the sliding maximum over the windows of leaf_size + 1
///             consecutive keys that contain i of their common level (window_levels.hpp);
///    then (l, i) starts a node exactly when d(i) <= l <= L(i). Nodes are numbered level by level in
///    Morton order (BFS ids, root 0): one kernel counts the node starts per (level, tile of positions),
///    one exclusive scan of that level-major matrix (scan.hpp) gives every tile its first id per level
///    and the level sizes (they size the arrays), and one kernel walks each tile in order with those
///    ids as counters and writes every field. (A single parallel_scan carrying 23 counters per item
///    took 1.9 ms of the 2.1 ms build at 1e6 on the H200.)
/// 4. centres, radii and masses bottom-up (node_moments.hpp) in one kernel: each parent is computed
///    by the thread that finished its last child.
/// The result depends only on the inputs, never on the backend or the thread count.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/host_copy.hpp"
#include "kfmm/core/particle_types.hpp"
#include "kfmm/core/scan.hpp"
#include "kfmm/core/view_capacity.hpp"
#include "kfmm/tree/bounding_box.hpp"
#include "kfmm/tree/morton.hpp"
#include "kfmm/tree/node_moments.hpp"
#include "kfmm/tree/sort.hpp"
#include "kfmm/tree/window_levels.hpp"

namespace kfmm {

/// An adaptive octree over N particles. Everything lives in ExecutionSpace::memory_space except the
/// host counts and `level_offsets`. Nodes are numbered level by level (BFS, root 0), in Morton order
/// within a level; the children of a node are contiguous ids. With N = 0 the tree has no node.
template <class ExecutionSpace, class Real>
struct Octree {
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using real_type = Real;

  int num_particles = 0;  ///< N
  int num_nodes = 0;
  int num_leaves = 0;
  int num_levels = 0;  ///< levels 0 .. num_levels-1 hold nodes (at most 22)
  int leaf_size = 0;   ///< the leaf capacity the tree was built with
  /// An upper bound on the particles of any leaf, known on the host without a round trip: leaf_size
  /// (at most N), unless a leaf lies at the key resolution (level 21, coincident particles kept together
  /// beyond leaf_size), then N.
  int max_leaf_particles = 0;
  /// The particles are in the order of their cells at this level (Morton order of the level's cells),
  /// in caller order within a cell: 21 (the key resolution) or a level at least as deep as every node.
  int sorted_levels = 0;

  Kokkos::View<int*, memory_space> permutation;     ///< sorted slot s -> caller's particle index
  Kokkos::View<MortonKey*, memory_space> keys;      ///< Morton keys in sorted order (see sorted_levels)
  Kokkos::View<Real* [3], memory_space> positions;  ///< positions in sorted (Morton) order
  Kokkos::View<Real*, memory_space> masses;         ///< particle masses in sorted order
  RangeView<memory_space> ranges;                   ///< per node [first, last) in sorted order
  Kokkos::View<int*, memory_space> parent;          ///< -1 for the root (node 0)
  Kokkos::View<int*, memory_space> first_child;     ///< -1 for leaves
  Kokkos::View<int*, memory_space> num_children;    ///< 0 for leaves, else 1..8
  Kokkos::View<int*, memory_space> level;           ///< root = 0
  std::vector<int> level_offsets;                 ///< host: level l is [level_offsets[l], level_offsets[l+1])
  Kokkos::View<int*, memory_space> leaves;        ///< leaf ids in Morton order (num_leaves)
  Kokkos::View<Real* [3], memory_space> centres;  ///< expansion centres (|m|-weighted COM)
  Kokkos::View<Real*, memory_space> radii;        ///< max particle distance from the centre (bound)
  Kokkos::View<Real*, memory_space> node_masses;  ///< sum of the particle masses of each node
  /// Sum of |m| over each node's particles (equal to node_masses for gravity; the walk's
  /// concentration rule compares them).
  Kokkos::View<Real*, memory_space> node_abs_masses;
  MortonFrame frame;  ///< the cube the keys quantise
  /// The box of the positions as the caller passed them (before build_octree's position_scale).
  BoundingBox box;
  /// Sum of |m| over the particles, from the build's box reduction or update_moments; -1 when the
  /// caller passed the box (build_octree's known_box: the caller's reduction has it).
  double abs_mass = -1;
};

namespace detail {

/// Rows of the topology count matrix: one per level 0..21, then one for the leaves.
inline constexpr int topology_slots = morton_levels + 2;

/// Per sorted position: d (low byte) and L (high byte), see the file comment.
KOKKOS_INLINE_FUNCTION int start_level(int dl) {
  return dl & 0xff;
}
KOKKOS_INLINE_FUNCTION int leaf_level(int dl) {
  return dl >> 8;
}

/// The topology pass over sorted positions 0..N (position N, with dl = 0, closes every open node) in
/// tiles of `tile` consecutive positions, one thread per tile.
/// Count: counts(row * tiles + tile) = nodes that start in the tile at level `row` (rows 0..21) and
///        leaves that start in it (row 22); counts(topology_slots * tiles) = 0 for the scan's total.
/// After the exclusive scan of that row-major matrix, counts(l * tiles + tile) is the id of the first
/// node of level l that starts in the tile (nodes are numbered level by level), and counts(l * tiles)
/// is level l's first id: the level offsets.
/// Write: one thread walks its tile in order with those ids as running counters and writes every node
/// field: the ids depend only on the positions, never on the backend or the tiling.
template <class MemorySpace>
struct TopologyTiles {
  struct CountTag {};
  struct WriteTag {};
  Kokkos::View<const int*, MemorySpace> dl;  // size N + 1, dl(N) = 0
  Kokkos::View<unsigned long long*, MemorySpace> counts;
  Kokkos::View<int* [2], MemorySpace> ranges;
  Kokkos::View<int*, MemorySpace> parent, first_child, child_end, level, leaves;
  int n, tile, tiles, num_nodes;

  KOKKOS_INLINE_FUNCTION void operator()(CountTag, const int t) const {
    int c[topology_slots];
    for (int l = 0; l < topology_slots; ++l) c[l] = 0;
    const int end = (t + 1) * tile < n + 1 ? (t + 1) * tile : n + 1;
    for (int i = t * tile; i < end; ++i) {
      if (i == n) break;
      const int v = dl(i);
      const int d = start_level(v), L = leaf_level(v);
      for (int l = d; l <= L; ++l) c[l] += 1;
      if (d <= L) c[topology_slots - 1] += 1;
    }
    for (int l = 0; l < topology_slots; ++l) counts(l * tiles + t) = static_cast<unsigned long long>(c[l]);
    if (t == 0) counts(topology_slots * tiles) = 0;
  }

  KOKKOS_INLINE_FUNCTION void operator()(WriteTag, const int t) const {
    int c[topology_slots];  // global id of the next node to start at each level; next leaf index
    for (int l = 0; l < topology_slots; ++l) c[l] = static_cast<int>(counts(l * tiles + t));
    c[topology_slots - 1] -= num_nodes;
    const int end = (t + 1) * tile < n + 1 ? (t + 1) * tile : n + 1;
    for (int i = t * tile; i < end; ++i) {
      const int v = dl(i);
      const int d = start_level(v), L = i < n ? leaf_level(v) : -1;
      if (i > 0) {
        // Every open node of particle i-1 at a level >= d(i) ends here.
        const int L_prev = leaf_level(dl(i - 1));
        for (int l = d; l <= L_prev; ++l) {
          const int m = c[l] - 1;
          ranges(m, 1) = i;
          if (l < L_prev) child_end(m) = c[l + 1];
        }
      }
      for (int l = d; l <= L; ++l) {
        const int node = c[l];
        ranges(node, 0) = i;
        level(node) = l;
        parent(node) = l == 0 ? -1 : c[l - 1] - 1 + (d <= l - 1 ? 1 : 0);
        first_child(node) = l < L ? c[l + 1] : -1;
        if (l == L) {
          leaves(c[topology_slots - 1]) = node;
          child_end(node) = -1;
        }
      }
      for (int l = d; l <= L; ++l) c[l] += 1;
      if (d <= L) c[topology_slots - 1] += 1;
    }
  }
};

/// GPU topology tile: each thread walks its tile serially (one dependent load chain per position), so
/// small inputs want short tiles to fill the GPU and large ones long tiles to keep the count matrix
/// (23 rows x tiles) and its scan small: N / 32768 rounded up to a power of two, within [8, 64] (at
/// 2e5 particles 8 instead of 64: 3125 threads left most of the H200 idle for ~75 us).
inline int default_topology_tile(const int n) {
  int tile = 8;
  while (tile < 64 && static_cast<long long>(tile) * 32768 < n) tile *= 2;
  return tile;
}

/// A BoxReduction as 8 words (bit patterns), after the level offsets in the build's copy to the host.
inline constexpr int box_words = 8;
KOKKOS_INLINE_FUNCTION void box_to_words(const BoxReduction& b, unsigned long long* w) {
  for (int a = 0; a < 3; ++a) {
    memcpy(w + a, &b.lo[a], sizeof(double));
    memcpy(w + 3 + a, &b.hi[a], sizeof(double));
  }
  memcpy(w + 6, &b.non_finite, sizeof(long long));
  memcpy(w + 7, &b.abs_mass, sizeof(double));
}
inline BoxReduction box_from_words(const unsigned long long* w) {
  BoxReduction b;
  for (int a = 0; a < 3; ++a) {
    memcpy(&b.lo[a], w + a, sizeof(double));
    memcpy(&b.hi[a], w + 3 + a, sizeof(double));
  }
  memcpy(&b.non_finite, w + 6, sizeof(long long));
  memcpy(&b.abs_mass, w + 7, sizeof(double));
  return b;
}

/// Copies the first id of every row (the level offsets, then the leaf row's) and the total (entry
/// topology_slots) out of the scanned count matrix, and the device box when there is one (entries
/// topology_slots + 1 ..), for one copy to the host.
template <class MemorySpace>
struct TopologyLevelOffsets {
  Kokkos::View<const unsigned long long*, MemorySpace> counts;
  Kokkos::View<unsigned long long*, MemorySpace> offsets;
  Kokkos::View<const BoxReduction*, MemorySpace> box;
  int tiles;
  KOKKOS_INLINE_FUNCTION void operator()(const int l) const {
    offsets(l) = counts(l * tiles);
    if (l == 0 && box.extent(0) > 0) {
      unsigned long long words[box_words];
      box_to_words(box(0), words);
      for (int w = 0; w < box_words; ++w) offsets(topology_slots + 1 + w) = words[w];
    }
  }
};

/// A caller row as the gather reads it: the position times the power of two `scale` (exact) and the
/// mass, in one aligned record (16 bytes in float, one load on GPUs; 32 in double).
template <class Real>
struct alignas(4 * sizeof(Real)) ParticleRecord {
  Real v[4];
};

/// Caller row i as a ParticleRecord: the one definition of the sorted positions' values, whichever way
/// they are gathered (the scale in double, as the keys take it: the same product even where Real's
/// range ends).
template <class Real, class PositionsView, class MassesView>
KOKKOS_INLINE_FUNCTION ParticleRecord<Real> particle_record(const PositionsView& positions,
                                                            const MassesView& masses, int i, double scale) {
  ParticleRecord<Real> r;
  for (int a = 0; a < 3; ++a) r.v[a] = static_cast<Real>(static_cast<double>(positions(i, a)) * scale);
  r.v[3] = masses(i);
  return r;
}

/// Writes record r as sorted row s.
template <class Real, class MemorySpace>
KOKKOS_INLINE_FUNCTION void store_sorted(const ParticleRecord<Real>& r, int s,
                                         const Kokkos::View<Real* [3], MemorySpace>& sorted_positions,
                                         const Kokkos::View<Real*, MemorySpace>& sorted_masses) {
  for (int a = 0; a < 3; ++a) sorted_positions(s, a) = r.v[a];
  sorted_masses(s) = r.v[3];
}

/// Positions (scaled) and masses in sorted order: row s from the caller's row perm(s).
template <class Permutation, class PositionsView, class MassesView, class Real, class MemorySpace>
struct GatherParticles {
  Permutation perm;
  PositionsView positions;
  MassesView masses;
  Kokkos::View<Real* [3], MemorySpace> sorted_positions;
  Kokkos::View<Real*, MemorySpace> sorted_masses;
  double scale;
  KOKKOS_INLINE_FUNCTION void operator()(const int s) const {
    store_sorted(particle_record<Real>(positions, masses, perm(s), scale), s, sorted_positions,
                 sorted_masses);
  }
};

/// The Morton keys (MortonKeys) and, in the same pass over the caller's rows (read in order), each row's
/// ParticleRecord in caller order, for GatherRecords.
template <class Keys, class PositionsView, class MassesView, class Real, class MemorySpace>
struct KeysAndRecords {
  Keys key_pass;
  PositionsView positions;
  MassesView masses;
  Kokkos::View<ParticleRecord<Real>*, MemorySpace, Kokkos::MemoryUnmanaged> records;
  double scale;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    key_pass(i);
    records(i) = particle_record<Real>(positions, masses, i, scale);
  }
};

/// GatherParticles from the records: one random record per row instead of the caller's four columns
/// (positions are N x 3 Views, on CUDA LayoutLeft by default: x, y, z and the mass each cost a random
/// 32-byte sector per particle, of which the float gather uses 4 bytes; the H100 took 1.17 ms for it
/// at 1e7).
template <class Permutation, class Real, class MemorySpace>
struct GatherRecords {
  Permutation perm;
  Kokkos::View<const ParticleRecord<Real>*, MemorySpace, Kokkos::MemoryUnmanaged> records;
  Kokkos::View<Real* [3], MemorySpace> sorted_positions;
  Kokkos::View<Real*, MemorySpace> sorted_masses;
  KOKKOS_INLINE_FUNCTION void operator()(const int s) const {
    store_sorted(records(perm(s)), s, sorted_positions, sorted_masses);
  }
};

/// The caller's columns (positions and masses, about 4 N sizeof(Real) bytes) above which a device build
/// gathers through records by default: 32 MiB, beyond what the 50 MB L2 of an H100 / H200 keeps beside
/// the build's own arrays. Measured on an H100: at 1e7 in float (160 MB) the gather took 1.17 -> 0.36 ms
/// and the keys pass 0.10 -> 0.15 ms (30.5 against 31.3 ms per evaluation); at 2e5 in float and 1e6 in
/// double (3.2 and 32 MB) no time changed, at 1e6 in float (16 MB) the tree took ~0.02 ms less (0.6 % of
/// the evaluation), each for 16 or 32 more bytes per particle.
inline constexpr double gather_records_min_bytes = 32.0 * (1 << 20);

/// Whether build_octree gathers through records when OctreeWorkspace::gather_records is -1: on device
/// backends, for LayoutLeft positions (CUDA's default layout, the measured case) whose columns,
/// positions and masses, exceed gather_records_min_bytes.
template <class ExecutionSpace, class PositionsView, class MassesView>
constexpr bool gather_records_by_default(long long n) {
  using Real = typename PositionsView::non_const_value_type;
  using Mass = typename MassesView::non_const_value_type;
  return !is_host_execution_space<ExecutionSpace> &&
         std::is_same<typename PositionsView::array_layout, Kokkos::LayoutLeft>::value &&
         static_cast<double>(n) * (3.0 * sizeof(Real) + sizeof(Mass)) > gather_records_min_bytes;
}

/// num_children(k) held one past the last child; turned into the count (0 for leaves).
template <class MemorySpace>
struct ChildCounts {
  Kokkos::View<int*, MemorySpace> first_child, num_children;
  KOKKOS_INLINE_FUNCTION void operator()(const int k) const {
    num_children(k) = first_child(k) < 0 ? 0 : num_children(k) - first_child(k);
  }
};

/// Copies rows between caller and tree order. A functor rather than a lambda: nvcc rejects extended
/// lambdas that first-capture a variable inside `if constexpr`.
template <class Permutation, class In, class Out, bool to_caller>
struct PermuteRows {
  Permutation perm;
  In in;
  Out out;
  int cols;
  KOKKOS_INLINE_FUNCTION void operator()(const int s) const {
    const int i = perm(s);
    const int dst = to_caller ? i : s;
    const int src = to_caller ? s : i;
    if constexpr (Out::rank == 1) {
      out(dst) = in(src);
    } else {
      for (int a = 0; a < cols; ++a) out(dst, a) = in(src, a);
    }
  }
};

}  // namespace detail

/// out(s) = in(tree.permutation(s)): caller order to tree (sorted) order, rank 1 or rank 2 Views.
template <class ExecutionSpace, class Real, class In, class Out>
void permute_to_tree_order(const ExecutionSpace& space, const Octree<ExecutionSpace, Real>& tree,
                           const In& in, const Out& out) {
  require(static_cast<int>(in.extent(0)) == tree.num_particles &&
              static_cast<int>(out.extent(0)) == tree.num_particles,
          "permute_to_tree_order: in (", in.extent(0), ") and out (", out.extent(0),
          ") must have the tree's ", tree.num_particles, " particles");
  const auto perm = tree.permutation;
  const int n = tree.num_particles;
  const int cols = static_cast<int>(out.extent(1));  // 1 for rank-1 Views
  Kokkos::parallel_for(
      "kfmm::permute_to_tree_order", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      detail::PermuteRows<decltype(perm), In, Out, /*to_caller=*/false>{perm, in, out, cols});
}

/// out(tree.permutation(s)) = in(s): tree (sorted) order back to caller order, rank 1 or 2 Views.
template <class ExecutionSpace, class Real, class In, class Out>
void permute_to_caller_order(const ExecutionSpace& space, const Octree<ExecutionSpace, Real>& tree,
                             const In& in, const Out& out) {
  require(static_cast<int>(in.extent(0)) == tree.num_particles &&
              static_cast<int>(out.extent(0)) == tree.num_particles,
          "permute_to_caller_order: in (", in.extent(0), ") and out (", out.extent(0),
          ") must have the tree's ", tree.num_particles, " particles");
  const auto perm = tree.permutation;
  const int n = tree.num_particles;
  const int cols = static_cast<int>(out.extent(1));
  Kokkos::parallel_for("kfmm::permute_to_caller_order", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
                       detail::PermuteRows<decltype(perm), In, Out, /*to_caller=*/true>{perm, in, out, cols});
}

/// Recomputes centres, radii and node (absolute) masses for new masses (given in the caller's order) on the
/// same topology: no re-sort, one gather and the bottom-up pass (one kernel).
template <class ExecutionSpace, class Real, class MassesView>
void update_moments(const ExecutionSpace& space, Octree<ExecutionSpace, Real>& tree,
                    const MassesView& masses) {
  require(static_cast<int>(masses.extent(0)) == tree.num_particles, "update_moments: masses has ",
          masses.extent(0), " entries, the tree ", tree.num_particles, " particles");
  detail::BoxWorkspace<typename ExecutionSpace::memory_space> box_workspace;
  const auto r = detail::reduce_box(
      space, Kokkos::View<const Real* [3], typename ExecutionSpace::memory_space>(), masses, box_workspace);
  require(r.non_finite == 0, "update_moments: ", r.non_finite, " masses are NaN or infinite");
  tree.abs_mass = r.abs_mass;
  permute_to_tree_order(space, tree, masses, tree.masses);
  MomentSums<typename ExecutionSpace::memory_space> sums;
  compute_node_moments(space, tree.positions, tree.masses, tree.ranges, tree.parent, tree.first_child,
                       tree.num_children, tree.leaves, tree.frame.lo, tree.centres, tree.radii,
                       tree.node_masses, tree.node_abs_masses, sums);
}

/// Reusable temporaries of build_octree (grown on demand), so that repeated builds allocate little.
template <class MemorySpace>
struct OctreeWorkspace {
  Kokkos::View<int*, MemorySpace> dl;                          ///< per sorted position: start and leaf level
  Kokkos::View<signed char*, MemorySpace> runs;                ///< window maxima over runs of windows
  SortWorkspace<MemorySpace, MortonKey, int> sort;             ///< the key sort's temporaries
  Kokkos::View<unsigned long long*, MemorySpace> counts;       ///< topology count matrix (levels x tiles)
  Kokkos::View<unsigned long long*, MemorySpace> level_first;  ///< first id of each level, leaves; total
  ScanWorkspace<MemorySpace> scan;                             ///< the count matrix's scan temporaries
  MomentSums<MemorySpace> sums;                                ///< the moments' per-node accumulators
  detail::BoxWorkspace<MemorySpace> box;                       ///< the box reduction's buffers
  /// The caller's rows as ParticleRecords in caller order, for the gather (raw words: the record's size
  /// depends on the positions' type); used when gather_records says so, grown and kept like the other
  /// buffers (16 or 32 bytes per particle once used).
  Kokkos::View<unsigned long long*, MemorySpace> records;
  /// Sorted positions per topology tile (one thread each); 0 picks 4096 on host spaces and on GPUs
  /// N / 32768 rounded up to a power of two within [8, 64] (detail::default_topology_tile). The tree
  /// does not depend on it (tests vary it).
  int topology_tile = 0;
  /// The last build's tree was deeper than its default sort levels: the next build sorts all key
  /// bits at once instead of trying the partial sort first (the tree does not depend on it).
  bool last_tree_deeper = false;
  /// Gather the sorted positions and masses through packed records (16 bytes per particle in float,
  /// 32 in double, in `records`): 1 yes, 0 no (the caller's columns directly), -1 (default) on device
  /// backends for LayoutLeft positions whose columns exceed 32 MiB (detail::gather_records_by_default).
  /// The tree does not depend on it (tests compare both).
  int gather_records = -1;
};

/// The key levels a build sorts by first: the depth of a uniform tree of n particles in leaves of
/// leaf_size, ceil(log8(n / leaf_size)), plus 8 levels of clustering, at most 21 (Plummer spheres of
/// 1e4 .. 1e7 particles need 1 .. 7 of those 8). Sorting 39 instead of 63 key bits saves 3 of the 8
/// passes of an 8-bit radix sort.
inline int default_sort_levels(int n, int leaf_size) {
  int uniform = 0;
  for (long long cells = 1; cells * leaf_size < n; cells *= 8) ++uniform;
  return uniform + 8 < morton_levels ? uniform + 8 : morton_levels;
}

namespace detail {

/// Makes `v` a View of exactly n entries, reusing its allocation when the extent already matches.
template <class View>
void resize_exact(View& v, size_t n, const char* label) {
  if (v.extent(0) != n || (n > 0 && v.data() == nullptr)) {
    v = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), n);
  }
}

}  // namespace detail

/// Builds the octree of `positions` (N x 3) with `masses` (N), both Views accessible from `space`, in
/// the caller's particle order, into `tree`, reusing its arrays where their sizes still fit exactly and
/// the temporaries of `workspace` (a time-stepping caller passes the same tree and workspace every
/// step). Leaves hold at most `leaf_size` particles, except runs of particles that share a level-21
/// cell, which stay in one leaf. Throws kfmm::Error for mismatched extents, leaf_size < 1, or
/// NaN/infinite coordinates or masses (reported after the keys, sort and level sizes were computed on
/// the device: the build's one round trip brings the box and the count back with the level sizes).
/// `known_box`, when given, is the box of the positions the caller already reduced (and checked for
/// NaN/infinity, which is then not checked again): it saves the reduction. It is trusted; keys of
/// positions outside it are clamped.
/// `position_scale`, a power of two (else an error), multiplies the positions as the tree takes them
/// (exactly, barring overflow): the tree is that of the scaled positions, and `known_box` is in scaled
/// units. (The solver rescales lengths this way without a scaled copy of the caller's positions.)
template <class ExecutionSpace, class PositionsView, class MassesView, class Real>
void build_octree(const ExecutionSpace& space, const PositionsView& positions, const MassesView& masses,
                  int leaf_size, Octree<ExecutionSpace, Real>& tree,
                  OctreeWorkspace<typename ExecutionSpace::memory_space>& workspace,
                  const BoundingBox* known_box = nullptr, double position_scale = 1) {
  using memory_space = typename ExecutionSpace::memory_space;
  static_assert(std::is_same<typename PositionsView::non_const_value_type, Real>::value,
                "build_octree: the tree's Real must be the positions' value type");
  static_assert(std::is_floating_point<Real>::value, "build_octree: positions must hold float or double");
  static_assert(
      Kokkos::SpaceAccessibility<ExecutionSpace, typename PositionsView::memory_space>::accessible &&
          Kokkos::SpaceAccessibility<ExecutionSpace, typename MassesView::memory_space>::accessible,
      "build_octree: positions and masses must be accessible from the execution space");
  require(positions.extent(1) == 3, "build_octree: positions must be N x 3, got N x ", positions.extent(1));
  require(positions.extent(0) == masses.extent(0), "build_octree: positions has ", positions.extent(0),
          " particles but masses has ", masses.extent(0));
  require(positions.extent(0) <= static_cast<size_t>(INT_MAX) - 1, "build_octree: N = ", positions.extent(0),
          " exceeds the int index range");
  require(leaf_size >= 1, "build_octree: leaf_size = ", leaf_size, " must be at least 1");
  require(workspace.topology_tile >= 0, "build_octree: workspace topology_tile = ", workspace.topology_tile,
          " must be >= 0");
  require(workspace.gather_records >= -1 && workspace.gather_records <= 1,
          "build_octree: workspace gather_records = ", workspace.gather_records,
          " must be -1 (default), 0 or 1");
  int scale_exponent = 0;
  require(position_scale > 0 && std::isfinite(position_scale) &&
              std::frexp(position_scale, &scale_exponent) == 0.5,
          "build_octree: position_scale = ", position_scale, " must be a power of two");

  const int n = static_cast<int>(positions.extent(0));
  tree.num_particles = n;
  tree.leaf_size = leaf_size;
  tree.num_nodes = tree.num_leaves = tree.num_levels = tree.max_leaf_particles = 0;
  tree.sorted_levels = morton_levels;  // (N = 0 or 1: trivially in order)
  tree.level_offsets.assign(1, 0);

  using Topology = detail::TopologyTiles<memory_space>;
  Topology topology;

  // 1. Box, keys. The caller's box, or the reduction's, which stays on the device until the level sizes
  // come to the host (step 3); its frame is then recomputed there with the same arithmetic.
  Kokkos::View<const detail::BoxReduction*, memory_space> device_box;
  const auto check_box = [&](const BoundingBox& bb) {
    for (int a = 0; a < 3; ++a) {
      const double largest = static_cast<double>(std::numeric_limits<Real>::max());
      require(bb.lo[a] >= -largest && bb.hi[a] <= largest,  // (false for NaN and infinities too)
              "build_octree: the box of the positions times position_scale = ", position_scale, ", [",
              bb.lo[a], ", ", bb.hi[a], "] along axis ", a, ", leaves the range of the positions' type");
    }
    tree.frame = MortonFrame::of(bb);
  };
  tree.frame = MortonFrame();
  tree.box = BoundingBox();
  tree.abs_mass = -1;
  if (known_box != nullptr) {
    // The caller's (it checked the inputs): no reduction.
    check_box(*known_box);
    for (int a = 0; a < 3; ++a) {
      tree.box.lo[a] = known_box->lo[a] / position_scale;
      tree.box.hi[a] = known_box->hi[a] / position_scale;
    }
  } else {
    device_box = detail::reduce_box_on_device(space, positions, masses, workspace.box);
  }
  detail::resize_exact(tree.keys, n, "kfmm::octree::keys");
  detail::resize_exact(tree.permutation, n, "kfmm::octree::permutation");
  detail::resize_exact(tree.positions, n, "kfmm::octree::positions");
  detail::resize_exact(tree.masses, n, "kfmm::octree::masses");
  if (n > 0) {
    // 2. Sort by the cells of `sort_levels` levels (see the file comment); 3. topology. A tree deeper
    // than the sorted levels sorts again by all key bits; a full sort whose tree turns out shallow
    // enough starts again from the keys, so that the order never depends on the workspace's history.
    const int guess_levels = default_sort_levels(n, leaf_size);
    bool partial = guess_levels < morton_levels && !workspace.last_tree_deeper;
    bool fresh_keys = true;
    const auto keys = tree.keys;
    const auto perm = tree.permutation;
    // The keys pass can also pack the caller's rows into records, so that the gather reads one record
    // per particle (GatherRecords); by default on device backends for inputs larger than their L2 (host
    // caches serve the caller's rows themselves; not measured there).
    const bool pack = workspace.gather_records < 0
                          ? detail::gather_records_by_default<ExecutionSpace, PositionsView, MassesView>(n)
                          : workspace.gather_records != 0;
    using Record = detail::ParticleRecord<Real>;
    static_assert(sizeof(Record) % sizeof(unsigned long long) == 0, "records are whole 8-byte words");
    Kokkos::View<Record*, memory_space, Kokkos::MemoryUnmanaged> records;
    if (pack) {
      const long long words = static_cast<long long>(sizeof(Record) / sizeof(unsigned long long)) * n;
      detail::reserve_at_least(workspace.records, words, "kfmm::octree::records");
      require(reinterpret_cast<std::uintptr_t>(workspace.records.data()) % alignof(Record) == 0,
              "build_octree: the records buffer is not ", alignof(Record), "-byte aligned");
      records = decltype(records)(reinterpret_cast<Record*>(workspace.records.data()), n);
    }
    for (;;) {
      if (fresh_keys) {
        const detail::MortonKeys<PositionsView, decltype(keys), decltype(perm)> key_pass{
            positions, keys, perm, tree.frame, position_scale, device_box};
        if (pack) {
          Kokkos::parallel_for(
              "kfmm::octree::keys", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
              detail::KeysAndRecords<decltype(key_pass), PositionsView, MassesView, Real, memory_space>{
                  key_pass, positions, masses, records, position_scale});
        } else {
          Kokkos::parallel_for("kfmm::octree::keys", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
                               key_pass);
        }
      }
      const int sort_levels = partial ? guess_levels : morton_levels;
      sort_by_key_bits(space, tree.keys, tree.permutation, n, morton_bits - 3 * sort_levels, morton_bits,
                       workspace.sort);
      tree.sorted_levels = sort_levels;
      // 3. Topology: start and leaf levels per position (window_levels.hpp), then the nodes.
      detail::reserve_at_least(workspace.dl, n + 1, "kfmm::octree::dl");
      window_levels(space, keys, n, leaf_size, workspace.dl, workspace.runs);
      // Nodes per (level, tile), scanned into first ids; the level offsets are the host round trip.
      topology.n = n;
      topology.tile =
          workspace.topology_tile > 0
              ? workspace.topology_tile
              : (detail::is_host_execution_space<ExecutionSpace> ? 4096 : detail::default_topology_tile(n));
      topology.tiles = (n + 1 + topology.tile - 1) / topology.tile;
      detail::reserve_at_least(workspace.counts,
                               static_cast<size_t>(detail::topology_slots) * topology.tiles + 1,
                               "kfmm::octree::topology_counts");
      detail::reserve_at_least(workspace.level_first, detail::topology_slots + 1 + detail::box_words,
                               "kfmm::octree::level_first");
      topology.dl = workspace.dl;
      topology.counts = workspace.counts;
      Kokkos::parallel_for(
          "kfmm::octree::topology_counts",
          Kokkos::RangePolicy<ExecutionSpace, typename Topology::CountTag>(space, 0, topology.tiles),
          topology);
      exclusive_scan_in_place_on_device(space, workspace.counts, detail::topology_slots * topology.tiles,
                                        workspace.scan);
      // (row l's first entry at l * tiles; the total at topology_slots * tiles, i.e. "row" topology_slots)
      Kokkos::parallel_for("kfmm::octree::level_offsets",
                           Kokkos::RangePolicy<ExecutionSpace>(space, 0, detail::topology_slots + 1),
                           detail::TopologyLevelOffsets<memory_space>{workspace.counts, workspace.level_first,
                                                                      device_box, topology.tiles});
      const int leaf_row = detail::topology_slots - 1;
      // The build's one copy to the host: level sizes, then the box when it was reduced here.
      const int copied = detail::topology_slots + 1 + (device_box.extent(0) > 0 ? detail::box_words : 0);
      std::vector<unsigned long long> firsts(copied);
      detail::copy_to_host(space, firsts.data(), workspace.level_first, firsts.size());
      if (device_box.extent(0) > 0) {
        const detail::BoxReduction b = detail::box_from_words(firsts.data() + detail::topology_slots + 1);
        require(b.non_finite == 0, "build_octree: ", b.non_finite,
                " coordinates or masses are NaN or infinite");
        tree.box = detail::scaled_box(b, 1.0);
        tree.abs_mass = b.abs_mass;
        check_box(detail::scaled_box(b, position_scale));  // (the frame the keys kernel derived)
        device_box = decltype(device_box)();               // (known from here on, for a second sort)
        firsts.resize(detail::topology_slots + 1);
      }
      const unsigned long long total = firsts[detail::topology_slots];
      require(total <= static_cast<unsigned long long>(INT_MAX), "build_octree: ", total,
              " nodes and leaves exceed the int index range");
      const std::vector<int> first(firsts.begin(), firsts.end() - 1);
      int levels = 0;
      for (int l = 0; l < leaf_row; ++l)
        if (first[l + 1] > first[l]) levels = l + 1;  // (first[leaf_row] = the number of nodes)
      tree.num_levels = levels;
      tree.level_offsets.assign(first.begin(), first.begin() + levels + 1);
      tree.num_nodes = first[leaf_row];
      tree.num_leaves = static_cast<int>(total) - first[leaf_row];
      const bool deeper = levels - 1 > guess_levels;
      workspace.last_tree_deeper = deeper;
      if (partial && deeper) {
        partial = false;  // the cells at guess_levels do not resolve the tree: sort the rest of the bits
        fresh_keys = false;
      } else if (!partial && !deeper && guess_levels < morton_levels) {
        partial = true;  // the history guessed wrong: the canonical order is the partial one
        fresh_keys = true;
      } else {
        break;
      }
    }
    if (pack) {
      Kokkos::parallel_for("kfmm::octree::gather", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
                           detail::GatherRecords<decltype(perm), Real, memory_space>{
                               perm, records, tree.positions, tree.masses});
    } else {
      Kokkos::parallel_for(
          "kfmm::octree::gather", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
          detail::GatherParticles<decltype(perm), PositionsView, MassesView, Real, memory_space>{
              perm, positions, masses, tree.positions, tree.masses, position_scale});
    }
  }
  // (Only a node at the key resolution may hold more than leaf_size particles: then levels = 22.)
  tree.max_leaf_particles = tree.num_levels <= morton_levels ? std::min(leaf_size, n) : n;
  const int m = tree.num_nodes;
  detail::resize_exact(tree.ranges, m, "kfmm::octree::ranges");
  detail::resize_exact(tree.parent, m, "kfmm::octree::parent");
  detail::resize_exact(tree.first_child, m, "kfmm::octree::first_child");
  detail::resize_exact(tree.num_children, m, "kfmm::octree::num_children");
  detail::resize_exact(tree.level, m, "kfmm::octree::level");
  detail::resize_exact(tree.leaves, tree.num_leaves, "kfmm::octree::leaves");
  detail::resize_exact(tree.centres, m, "kfmm::octree::centres");
  detail::resize_exact(tree.radii, m, "kfmm::octree::radii");
  detail::resize_exact(tree.node_masses, m, "kfmm::octree::node_masses");
  detail::resize_exact(tree.node_abs_masses, m, "kfmm::octree::node_abs_masses");
  if (n == 0) return;
  {
    topology.ranges = tree.ranges;
    topology.parent = tree.parent;
    topology.first_child = tree.first_child;
    topology.child_end = tree.num_children;  // holds one past the last child until the fix-up below
    topology.level = tree.level;
    topology.leaves = tree.leaves;
    topology.num_nodes = m;
    Kokkos::parallel_for(
        "kfmm::octree::topology",
        Kokkos::RangePolicy<ExecutionSpace, typename Topology::WriteTag>(space, 0, topology.tiles), topology);
    Kokkos::parallel_for("kfmm::octree::num_children", Kokkos::RangePolicy<ExecutionSpace>(space, 0, m),
                         detail::ChildCounts<memory_space>{tree.first_child, tree.num_children});
  }

  // 4. Moments.
  compute_node_moments(space, tree.positions, tree.masses, tree.ranges, tree.parent, tree.first_child,
                       tree.num_children, tree.leaves, tree.frame.lo, tree.centres, tree.radii,
                       tree.node_masses, tree.node_abs_masses, workspace.sums);
}

/// Builds a new octree (see the overload above); allocates everything for this call.
template <class ExecutionSpace, class PositionsView, class MassesView>
Octree<ExecutionSpace, typename PositionsView::non_const_value_type> build_octree(
    const ExecutionSpace& space, const PositionsView& positions, const MassesView& masses, int leaf_size) {
  Octree<ExecutionSpace, typename PositionsView::non_const_value_type> tree;
  OctreeWorkspace<typename ExecutionSpace::memory_space> workspace;
  build_octree(space, positions, masses, leaf_size, tree, workspace);
  return tree;
}

}  // namespace kfmm
