/// \file p2p.hpp
/// Near field: softened particle-particle interactions over the near list (leaf pairs).
///
/// Physics (Plummer softening eps, constant G, masses may be negative):
///   a_i   = -G sum_{j != i} m_j (x_i - x_j) (r_ij^2 + eps^2)^(-3/2)
///   phi_i = -G sum_{j != i} m_j (r_ij^2 + eps^2)^(-1/2).
/// A pair with r^2 + eps^2 == 0 (coincident particles without softening) has no defined force; it is
/// skipped (contributes nothing) rather than producing inf/NaN. The i == j term is masked *before* the
/// reciprocal square root, so softening 0 never produces a NaN and softening > 0 never adds the
/// spurious self-potential -G m_i / eps.
///
/// Design (docs/kernels.md): the near list is cut into chunks of at most `leaves_per_chunk` source
/// leaves of one target leaf (csr_chunks.hpp), so long rows spread over several teams and empty rows
/// cost nothing. Each chunk owns its target particles: sums live in registers and each target entry
/// is written once (a split row's chunks write partial blocks that a second pass sums in fixed order).
///   - GPU backends: one team per chunk; the row's source particles are staged through team scratch in
///     tiles of packed (x, y, z, m); each thread owns two targets in float, one in double (the threads
///     of a team share them in interleaved slices of the tile, reduced in fixed order at the end); the
///     self leaf is one extra masked pass over the target leaf.
///   - host backends: one thread per chunk; targets in blocks of W lanes against one broadcast source,
///     a fixed-trip inner loop the compiler vectorises (needs -fno-math-errno, which kfmm's targets use).
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <limits>
#include <type_traits>
#include <utility>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/particle_types.hpp"
#include "kfmm/operators/csr_chunks.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/list_checks.hpp"
#include "kfmm/operators/p2p_mutual.hpp"
#include "kfmm/operators/p2p_pair.hpp"

namespace kfmm {

/// Options of the batched near-field operator `kfmm::p2p`.
struct P2POptions {
  /// With float data: sum each source tile (GPU) or source leaf (host) in float and accumulate across
  /// them in double. Costs a few per cent and removes most of the float round-off growth with the
  /// number of near sources. Ignored for double data.
  bool accumulate_in_double = false;
  /// P2P is deterministic by construction (each target is summed by one thread in a fixed order, split
  /// rows are combined in chunk order); the flag is accepted for symmetry with M2LOptions and costs
  /// nothing.
  bool deterministic = true;
  /// Most source leaves one work item takes from a row; longer rows are split. 0 = the default:
  /// detail::p2p_default_leaves_per_chunk (64; 256 in double on GPUs).
  int leaves_per_chunk = 0;
  /// Threads per team of the team (GPU) kernel; 0 = backend default (on GPUs from the target leaves'
  /// expected size: detail::p2p_default_team_size; host backends then run the one-thread-per-chunk
  /// vectorised kernel). A value on a host backend runs the team kernel
  /// there (how the tests check the GPU code path on a CPU); above the backend's maximum it throws.
  int team_size = 0;
  /// Newton's third law on host backends (p2p_mutual.hpp): each unordered leaf pair of a symmetric
  /// near list (every (A, B) listed as often as (B, A), as kfmm::dual_tree_walk makes them) is evaluated
  /// once for both leaves (1.2x faster than the one-directional host kernel on a Zen 4 core, where the
  /// loop is bound by issuing floating-point operations: docs/kernels.md). Needs one buffer
  /// of 4 sums per particle per host thread (in the workspace). Refused on GPU backends and together
  /// with an explicit team_size; with `validate`, an asymmetric list is refused.
  bool mutual = false;
  /// An upper bound on the particles of every target leaf of the list (e.g. Octree::max_leaf_particles);
  /// 0 = unknown. Known, it bounds the chunk table's partial buffer from the list's pair count, so the
  /// table's totals need not come back (one host round trip fewer; the buffer is then sized for the
  /// bound, at most 4 x bound x pairs / leaves_per_chunk sums). A precondition: `validate` refuses a list
  /// with a larger target leaf; unvalidated, such a leaf's partial sums beyond the buffer are dropped
  /// (its results are wrong, no memory outside the buffers is touched).
  int max_target_particles = 0;
  /// The most particles a target leaf is expected to hold (e.g. the tree's leaf size); 0 = unknown. It
  /// only picks the default team size of the GPU kernel (p2p_default_team_size) and is not a bound:
  /// larger leaves are computed all the same (max_target_particles is the bound).
  int expected_leaf_size = 0;
  /// Check that near_list.offsets start at 0 and never decrease, that near_list.sources holds the list's
  /// last offset of pairs, that every target and source leaf is a row of `ranges` with a particle range
  /// inside [0, N], that no leaf is the target of two rows and that no target leaf exceeds a given
  /// max_target_particles: one device pass over the rows and the pairs and one host round trip
  /// (list_checks.hpp; the counters live in the workspace); with `mutual`, also that the list is
  /// symmetric (O(sum of squared row lengths) on the host). A caller whose lists come from
  /// kfmm::dual_tree_walk may turn it off.
  bool validate = true;
};

namespace detail {

/// Shared state of the P2P kernels (host and team variants).
template <class MemorySpace, class PosView, class MassView, class AccView, class PotView, class Real,
          class Acc>
struct P2PData {
  Kokkos::View<const int*, MemorySpace> targets, sources;
  Kokkos::View<const int* [2], MemorySpace> ranges;
  PosView positions;
  MassView masses;
  AccView accelerations;
  PotView potentials;
  Kokkos::View<const int*, MemorySpace> chunk_row, chunk_begin, chunk_end, chunk_partial;
  Kokkos::View<const int*, MemorySpace> chunk_totals;  ///< (0): chunks; launches may cover more
  Kokkos::View<Acc*, MemorySpace> partial;
  Acc G;
  Real eps2;

  /// Chunk c is past the table (the launch covers the table's capacity).
  KOKKOS_INLINE_FUNCTION bool past_end(int c) const { return c >= chunk_totals(0); }

  /// Adds the finished sums of target `i` (global index) of a row's first chunk, or stores them in the
  /// chunk's partial block at local target `t`. (A partial buffer sized from a bound that a list broke,
  /// P2POptions::max_target_particles, drops what lies beyond it.)
  KOKKOS_INLINE_FUNCTION void emit(int c, int i, int t, int q, Acc sum) const {
    const int slot = chunk_partial(c);
    if (slot >= 0) {
      const size_t at = static_cast<size_t>(slot) + 4 * t + q;
      if (at < partial.extent(0)) partial(at) = sum;
    } else {
      add_scaled_sum(accelerations, potentials, i, q, G, sum);
    }
  }
};

/// Host variant: one thread per chunk, W target lanes per source.
template <bool GuardZero, class Data, class Real, class Acc>
struct P2PHostKernel {
  Data d;
  static constexpr int W = p2p_host_lanes<Real>;

  KOKKOS_INLINE_FUNCTION void operator()(int c) const {
    if (d.past_end(c)) return;
    const int r = d.chunk_row(c);
    const int k0 = d.chunk_begin(c);
    const int k1 = d.chunk_end(c);
    const int tleaf = d.targets(r);
    const int t0 = d.ranges(tleaf, 0);
    const int t1 = d.ranges(tleaf, 1);
    for (int tb = t0; tb < t1; tb += W) {
      const int nl = (t1 - tb) < W ? (t1 - tb) : W;
      Real xi[W], yi[W], zi[W];
      for (int l = 0; l < W; ++l) {
        const int i = tb + (l < nl ? l : nl - 1);
        xi[l] = d.positions(i, 0);
        yi[l] = d.positions(i, 1);
        zi[l] = d.positions(i, 2);
      }
      Acc ax[W], ay[W], az[W], ph[W];
      for (int l = 0; l < W; ++l) ax[l] = ay[l] = az[l] = ph[l] = Acc(0);
      for (int k = k0; k < k1; ++k) {
        const int sleaf = d.sources(k);
        const int b = d.ranges(sleaf, 0);
        const int e = d.ranges(sleaf, 1);
        Real px[W], py[W], pz[W], pp[W];
        for (int l = 0; l < W; ++l) px[l] = py[l] = pz[l] = pp[l] = Real(0);
        if (sleaf == tleaf) {
          for (int j = b; j < e; ++j) {
            p2p_lanes<W, GuardZero, true>(xi, yi, zi, static_cast<Real>(d.positions(j, 0)),
                                          static_cast<Real>(d.positions(j, 1)),
                                          static_cast<Real>(d.positions(j, 2)),
                                          static_cast<Real>(d.masses(j)), d.eps2, j - tb, px, py, pz, pp);
          }
        } else {
          for (int j = b; j < e; ++j) {
            p2p_lanes<W, GuardZero, false>(xi, yi, zi, static_cast<Real>(d.positions(j, 0)),
                                           static_cast<Real>(d.positions(j, 1)),
                                           static_cast<Real>(d.positions(j, 2)),
                                           static_cast<Real>(d.masses(j)), d.eps2, -1, px, py, pz, pp);
          }
        }
        for (int l = 0; l < W; ++l) {
          ax[l] += px[l];
          ay[l] += py[l];
          az[l] += pz[l];
          ph[l] += pp[l];
        }
      }
      for (int l = 0; l < nl; ++l) {
        d.emit(c, tb + l, tb - t0 + l, 0, ax[l]);
        d.emit(c, tb + l, tb - t0 + l, 1, ay[l]);
        d.emit(c, tb + l, tb - t0 + l, 2, az[l]);
        d.emit(c, tb + l, tb - t0 + l, 3, ph[l]);
      }
    }
  }
};

/// Default team size of the GPU P2P kernel for target leaves of up to `leaf` particles (0: unknown, taken
/// as 64): the smallest of 64, 128, 256 threads that holds two slices of a full leaf's block (a thread
/// owns two targets in float, one in double). A block's nt targets take slots = ceil(nt / targets per
/// thread) threads and T / slots whole slices fit in a team of T, so T mod slots threads idle: with
/// 64 threads a leaf of 40 in double left 24 idle, and leaves over 64 targets ran as two blocks. Larger
/// teams idle fewer threads but hold fewer resident warps per SM (registers) and waste more of a chunk's
/// last tile, so they only pay where leaves are large for the team. Measured on one H200 on the solver's
/// own near lists (`bench_p2p --benchmark_filter=solver_lists`, docs/kernels.md, "Team size").
template <class Real>
constexpr int p2p_default_team_size(int leaf) {
  constexpr int per_thread = sizeof(Real) == 4 ? 2 : 1;
  const int slots = ((leaf > 0 ? leaf : 64) + per_thread - 1) / per_thread;
  int team = 64;
  while (team < 2 * slots && team < 256) team *= 2;
  return team;
}

/// Default source leaves per chunk: 64, and 256 for double on GPU backends. Every chunk pays its setup
/// (the leaf lookup, the target block's loads) and reduction, and a split row its partial blocks: on GPUs
/// 32 made twice the chunks of 64 at leaf 64 in float, where 256 lost 17 % at 2e5 (too few chunks
/// for the GPU); in double, whose rows are long at the small opening angles of its accuracies,
/// 256 took the solver's P2P 4-6 % less time at 1e6 and the same at 2e5 (bench_p2p
/// p2p_solver_chunks_*, docs/kernels.md).
template <class Real, class ExecutionSpace>
constexpr int p2p_default_leaves_per_chunk() {
  return !is_host_execution_space<ExecutionSpace> && sizeof(Real) == 8 ? 256 : 64;
}

/// GPU variant: one team per chunk, source tiles in team scratch (see file comment).
/// The chunk's source leaves (at most `max_leaves`) are looked up once, in parallel: their particle
/// ranges and an exclusive scan of their sizes go to scratch, so a tile is filled by one flat,
/// independent load per particle (a leaf-by-leaf fill chained a dependent global load per leaf), and
/// the next tile's loads are in flight while the team computes on the current one. Tiles hold
/// kTileRecords x team size sources.
/// Each thread owns kTargets targets (slots k and k + slots of a block) and a slice of the sources, read
/// once from scratch for all of them. A block holds at most T targets (teams of >= 2 kTargets threads),
/// so that S = T / slots >= 2 threads share every slot in float: a leaf of more than T targets runs as
/// blocks of T and the rest (each block passes over the sources again) rather than one block of
/// slots > T / 2 that left up to half the team idle; the T / slots slices leave T mod slots threads
/// idle, which larger teams make a smaller share (p2p_default_team_size). (Choosing 1, 2 or 4 targets per
/// thread per leaf from a cost model was measured slower at leaves of 32-64: the four-target variant's
/// registers lowered the whole kernel's occupancy.)
template <bool GuardZero, class ExecutionSpace, class Data, class Real, class Acc>
struct P2PTeamKernel {
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  // Targets per thread and source records per thread and tile: 2 and 4 in float; 1 and 2 in double,
  // whose pair term needs twice the registers (two targets per thread made the fp64 P2P 1.3x slower
  // at 1e6 Plummer, p 9, theta 0.4, leaf 128 on the H200).
  static constexpr int kTargets = sizeof(Real) == 4 ? 2 : 1;
  static constexpr int kTileRecords = sizeof(Real) == 4 ? 4 : 2;
  Data d;
  int max_leaves;  // source leaves per chunk at most

  static size_t scratch_bytes(int team_size, int max_leaves) {
    return sizeof(P2PSource<Real>) * kTileRecords * static_cast<size_t>(team_size) +
           4 * kTargets * sizeof(Acc) * static_cast<size_t>(team_size) +
           2 * sizeof(int) * (static_cast<size_t>(max_leaves) + 1) + 3 * 64;
  }

  /// Source particle g of the chunk's flattened source order (leaf j holds [prefix[j], prefix[j+1])).
  KOKKOS_INLINE_FUNCTION P2PSource<Real> fetch(const int* prefix, const int* start, int leaves, int g) const {
    int lo = 0, hi = leaves;  // the leaf j with prefix[j] <= g < prefix[j + 1]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (prefix[mid] <= g) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return source(start[lo] + g - prefix[lo]);
  }

  /// Particle i as a source record.
  KOKKOS_INLINE_FUNCTION P2PSource<Real> source(int i) const {
    P2PSource<Real> b;
    b.x = static_cast<Real>(d.positions(i, 0));
    b.y = static_cast<Real>(d.positions(i, 1));
    b.z = static_cast<Real>(d.positions(i, 2));
    b.m = static_cast<Real>(d.masses(i));
    return b;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int c = m.league_rank();
    if (d.past_end(c)) return;
    const int r = d.chunk_row(c);
    const int k0 = d.chunk_begin(c);
    const int k1 = d.chunk_end(c);
    const int tleaf = d.targets(r);
    const int t0 = d.ranges(tleaf, 0);
    const int nt = d.ranges(tleaf, 1) - t0;
    if (nt <= 0) return;
    const int T = m.team_size();
    auto* buf = static_cast<P2PSource<Real>*>(m.team_shmem().get_shmem_aligned(
        sizeof(P2PSource<Real>) * kTileRecords * T, alignof(P2PSource<Real>)));
    Acc* red = static_cast<Acc*>(m.team_shmem().get_shmem_aligned(4 * kTargets * sizeof(Acc) * T, 16));
    int* prefix = static_cast<int*>(m.team_shmem().get_shmem_aligned(sizeof(int) * (max_leaves + 1), 16));
    int* start = static_cast<int*>(m.team_shmem().get_shmem_aligned(sizeof(int) * (max_leaves + 1), 16));
    const int leaves = k1 - k0;
    // Each source leaf's first particle and the exclusive prefix of the leaf sizes (the target's own
    // leaf counts 0 here: it is the masked pass below). A team scan where the backend allows it (Kokkos'
    // CUDA team scan needs a power-of-two team), else one thread runs the (<= max_leaves) prefix.
    const auto leaf_size = [&](const int j) {
      const int sleaf = d.sources(k0 + j);
      return sleaf == tleaf ? 0 : d.ranges(sleaf, 1) - d.ranges(sleaf, 0);
    };
    if ((T & (T - 1)) == 0) {
      Kokkos::parallel_scan(Kokkos::TeamThreadRange(m, leaves), [&](const int j, int& run, const bool final) {
        const int size = leaf_size(j);
        if (final) {
          start[j] = d.ranges(d.sources(k0 + j), 0);
          prefix[j] = run;
          if (j == leaves - 1) prefix[leaves] = run + size;
        }
        run += size;
      });
    } else {
      Kokkos::single(Kokkos::PerTeam(m), [&]() {
        int run = 0;
        for (int j = 0; j < leaves; ++j) {
          start[j] = d.ranges(d.sources(k0 + j), 0);
          prefix[j] = run;
          run += leaf_size(j);
        }
        prefix[leaves] = run;
      });
    }
    int has_self = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(m, leaves),
        [&](const int j, int& self) { self += d.sources(k0 + j) == tleaf ? 1 : 0; }, has_self);
    m.team_barrier();
    const int total = prefix[leaves];
    targets(m, c, t0, nt, buf, red, prefix, start, leaves, total, has_self);
  }

  /// The chunk's work once its sources are indexed: blocks of up to T targets, R = kTargets per thread.
  KOKKOS_INLINE_FUNCTION void targets(const Member& m, const int c, const int t0, const int nt,
                                      P2PSource<Real>* buf, Acc* red, const int* prefix, const int* start,
                                      const int leaves, const int total, const int has_self) const {
    constexpr int R = kTargets;
    const int T = m.team_size();
    const int tid = m.team_rank();
    const int tile = kTileRecords * T;       // source records per tile
    const int cap = T >= 2 * R ? T : R * T;  // targets per block at most (S >= 2 on teams of >= 2R)
    const int nb = nt < cap ? nt : cap;
    const int slots = (nb + R - 1) / R;  // threads per slice; slot k owns targets k, k + slots, ...
    const int S = T / slots;             // slices: threads sharing the same targets
    const int slot = tid % slots;
    const int s = tid / slots;
    for (int tb = 0; tb < nt; tb += nb) {
      const int nblk = (nt - tb) < nb ? (nt - tb) : nb;
      const bool active = s < S;
      int local[R];  // the thread's targets within the block (a target past the block repeats the first)
      Real xi[R], yi[R], zi[R];
      for (int q = 0; q < R; ++q) {
        const int k = slot + q * slots;
        local[q] = k < nblk ? k : slot < nblk ? slot : 0;
        const int i = t0 + tb + local[q];
        xi[q] = static_cast<Real>(d.positions(i, 0));
        yi[q] = static_cast<Real>(d.positions(i, 1));
        zi[q] = static_cast<Real>(d.positions(i, 2));
      }
      Acc ax[R], ay[R], az[R], ph[R];
      for (int q = 0; q < R; ++q) ax[q] = ay[q] = az[q] = ph[q] = Acc(0);
      const auto accumulate = [&](const Real(&px)[R], const Real(&py)[R], const Real(&pz)[R],
                                  const Real(&pp)[R]) {
        for (int q = 0; q < R; ++q) {
          ax[q] += px[q];
          ay[q] += py[q];
          az[q] += pz[q];
          ph[q] += pp[q];
        }
      };
      // Tiles of kTileRecords x T sources; each thread holds its records of the next tile in
      // registers while the team computes on the current one (the global loads overlap the compute).
      P2PSource<Real> next[kTileRecords];
      const auto prefetch = [&](const int base) {
        for (int j = 0; j < kTileRecords; ++j) {
          const int q = tid + j * T;
          if (q < tile && base + q < total) next[j] = fetch(prefix, start, leaves, base + q);
        }
      };
      const auto stage = [&](const int base) {
        for (int j = 0; j < kTileRecords; ++j) {
          const int q = tid + j * T;
          if (q < tile && base + q < total) buf[q] = next[j];
        }
      };
      int none[R], self_at[R];
      for (int q = 0; q < R; ++q) none[q] = -1;
      prefetch(0);
      stage(0);
      m.team_barrier();
      for (int base = 0; base < total; base += tile) {
        const int fill = (total - base) < tile ? (total - base) : tile;
        if (base + tile < total) prefetch(base + tile);
        if (active) {
          Real px[R] = {}, py[R] = {}, pz[R] = {}, pp[R] = {};
          p2p_targets_vs_sources<GuardZero, false, R>(xi, yi, zi, buf, s, fill, S, d.eps2, none, px, py, pz,
                                                      pp);
          accumulate(px, py, pz, pp);
        }
        m.team_barrier();
        if (base + tile < total) {
          stage(base + tile);
          m.team_barrier();
        }
      }
      if (has_self > 0) {  // one extra pass over the own leaf, the diagonal masked before the rsqrt
        for (int base = 0; base < nt; base += tile) {
          const int take = (nt - base) < tile ? (nt - base) : tile;
          for (int q = tid; q < take; q += T) buf[q] = source(t0 + base + q);
          m.team_barrier();
          if (active) {
            for (int q = 0; q < R; ++q) self_at[q] = tb + local[q] - base;
            Real px[R] = {}, py[R] = {}, pz[R] = {}, pp[R] = {};
            p2p_targets_vs_sources<GuardZero, true, R>(xi, yi, zi, buf, s, take, S, d.eps2, self_at, px, py,
                                                       pz, pp);
            accumulate(px, py, pz, pp);
          }
          m.team_barrier();
        }
      }
      // fixed-order reduction over the slices of each target: red[4 (R tid + q) + component]
      for (int q = 0; q < R; ++q) {
        red[4 * (R * tid + q) + 0] = active ? ax[q] : Acc(0);
        red[4 * (R * tid + q) + 1] = active ? ay[q] : Acc(0);
        red[4 * (R * tid + q) + 2] = active ? az[q] : Acc(0);
        red[4 * (R * tid + q) + 3] = active ? ph[q] : Acc(0);
      }
      m.team_barrier();
      for (int e = tid; e < 4 * nblk; e += T) {
        const int k = e / 4;  // target within the block: slot k % slots, its (k / slots)-th target
        const int comp = e % 4;
        const int at = R * (k % slots) + k / slots;
        Acc sum = red[4 * at + comp];
        for (int ss = 1; ss < S; ++ss) sum += red[4 * (R * ss * slots + at) + comp];
        d.emit(c, t0 + tb + k, tb + k, comp, sum);
      }
      m.team_barrier();
    }
  }
};

/// Source leaves per chunk that p2p runs with these options.
template <class Real, class ExecutionSpace>
int p2p_leaves_per_chunk(const P2POptions& options) {
  return options.leaves_per_chunk > 0 ? options.leaves_per_chunk
                                      : p2p_default_leaves_per_chunk<Real, ExecutionSpace>();
}

/// The partial-buffer entries of one chunk of row r: 4 sums per particle of its target leaf (with a bound
/// on those the table needs no host round trip; without one its totals come back and size the partial
/// buffer exactly).
template <class MemorySpace>
struct P2PBlock {
  Kokkos::View<const int*, MemorySpace> targets;
  Kokkos::View<const int* [2], MemorySpace> ranges;
  KOKKOS_INLINE_FUNCTION int operator()(const int r) const {
    const int leaf = targets(r);
    return 4 * (ranges(leaf, 1) - ranges(leaf, 0));
  }
};

/// p2p's chunk table of `near_list` into `chunks` (the one construction that p2p and p2p_prepare share, so
/// a prepared table is the table p2p would build); with `defer_totals` the totals' round trip is left to
/// finish_csr_chunks.
template <class ExecutionSpace>
void make_p2p_chunks(const ExecutionSpace& space,
                     const InteractionList<typename ExecutionSpace::memory_space>& near_list,
                     const Kokkos::View<const int* [2], typename ExecutionSpace::memory_space>& ranges,
                     int per_chunk, const P2POptions& options,
                     CsrChunks<typename ExecutionSpace::memory_space>& chunks, bool defer_totals) {
  using Mem = typename ExecutionSpace::memory_space;
  make_csr_chunks(space, near_list, per_chunk, P2PBlock<Mem>{near_list.targets, ranges},
                  4LL * options.max_target_particles, chunks, defer_totals);
}

/// What p2p's chunk table depends on (p2p_prepare's handshake with p2p).
template <class MemorySpace, class RangesView>
PreparedChunksKey p2p_chunks_key(const InteractionList<MemorySpace>& near_list, const RangesView& ranges,
                                 int per_chunk, const P2POptions& options) {
  PreparedChunksKey k;
  k.targets = near_list.targets.data();
  k.offsets = near_list.offsets.data();
  k.sources = near_list.sources.data();
  k.ranges = ranges.data();
  k.rows = near_list.targets.extent(0);
  k.pairs = near_list.sources.extent(0);
  k.leaves = ranges.extent(0);
  k.max_per_chunk = per_chunk;
  k.max_block = 4LL * options.max_target_particles;
  return k;
}

/// The checks of the near list, the leaf ranges and the options that p2p and p2p_prepare share
/// (`n` particles; with options.validate the list pass of list_checks.hpp).
template <class ExecutionSpace, class RangesView>
void check_p2p_list(const ExecutionSpace& space, const char* caller,
                    const InteractionList<typename ExecutionSpace::memory_space>& near_list,
                    const RangesView& ranges, size_t n, const P2POptions& options,
                    CsrWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  require(ranges.extent(1) == 2, caller, ": ranges must have 2 columns");
  require(near_list.offsets.extent(0) == near_list.targets.extent(0) + 1, caller, ": near_list.offsets has ",
          near_list.offsets.extent(0), " entries, expected rows + 1 = ", near_list.targets.extent(0) + 1);
  require(options.leaves_per_chunk >= 0, caller, ": leaves_per_chunk = ", options.leaves_per_chunk,
          " must be >= 0");
  require(options.team_size >= 0, caller, ": team_size = ", options.team_size, " must be >= 0");
  require(options.expected_leaf_size >= 0, caller, ": expected_leaf_size = ", options.expected_leaf_size,
          " must be >= 0 (0: unknown)");
  require(options.max_target_particles >= 0, caller,
          ": max_target_particles = ", options.max_target_particles, " must be >= 0 (0: unknown)");
  if (options.validate) {
    // Target leaves' ranges say where the sums are written, source leaves' what is read; a target of two
    // rows would be written twice at once.
    require(n <= static_cast<size_t>(INT_MAX), caller, ": ", n, " particles exceed the int index range");
    const ValidLeaf<RangesView> valid{ranges, static_cast<int>(ranges.extent(0)), static_cast<int>(n)};
    const auto checked = check_interaction_list(space, caller, "near_list", near_list, valid,
                                                options.max_target_particles, workspace.list_check);
    require(checked.largest_over_bound == 0, caller,
            ": max_target_particles = ", options.max_target_particles,
            " but a target leaf of near_list holds ", checked.largest_over_bound, " particles");
  }
  require(!options.mutual || is_host_execution_space<ExecutionSpace>, caller,
          ": mutual = true runs on host backends only (GPU threads would race on the source leaves)");
  require(!options.mutual || options.team_size == 0, caller,
          ": mutual = true has no team kernel; team_size = ", options.team_size, " asks for one");
  require(!options.mutual || (options.leaves_per_chunk == 0 && options.max_target_particles == 0), caller,
          ": mutual = true evaluates whole rows without chunks or partial sums; leaves_per_chunk = ",
          options.leaves_per_chunk, " and max_target_particles = ", options.max_target_particles,
          " must be 0 with it");
  if (options.mutual && options.validate) {
    const long long bad = count_asymmetric_pairs(space, near_list, static_cast<int>(ranges.extent(0)));
    require(bad == 0, caller,
            ": mutual = true needs a symmetric near list ((A, B) listed as often as (B, A), one row ",
            "per target leaf); ", bad, " rows or pairs of this one are not");
  }
}

template <class ExecutionSpace, class Real, class Acc, class PosView, class MassView, class AccView,
          class PotView>
void p2p_impl(const ExecutionSpace& space,
              const InteractionList<typename ExecutionSpace::memory_space>& near_list,
              const Kokkos::View<const int* [2], typename ExecutionSpace::memory_space>& ranges,
              const PosView& positions, const MassView& masses, double G, double softening,
              const AccView& accelerations, const PotView& potentials, const P2POptions& options,
              CsrWorkspace<typename ExecutionSpace::memory_space>& workspace,
              const PreparedChunks& prepared) {
  using Mem = typename ExecutionSpace::memory_space;
  constexpr bool host = is_host_execution_space<ExecutionSpace>;
  const Real eps2 = static_cast<Real>(softening * softening);
  const bool guard = !(eps2 >= compat::smallest_normal<Real>());  // (rsqrt_or_zero's bound)
  if constexpr (host) {                                           // (p2p refuses mutual on device backends)
    if (options.mutual) {
      const int slices = compat::concurrency(space);
      const auto sums =
          workspace.template partial<Acc>(4LL * slices * static_cast<long long>(positions.extent(0)));
      p2p_mutual(space, near_list, ranges, positions, masses, static_cast<Acc>(G), eps2, guard, accelerations,
                 potentials, sums, slices);
      return;
    }
  }
  const int per_chunk = p2p_leaves_per_chunk<Real, ExecutionSpace>(options);
  Kokkos::View<const int* [2], Mem> rng = ranges;
  Kokkos::View<const int*, Mem> tgt = near_list.targets;
  const P2PBlock<Mem> block{tgt, rng};
  const PreparedChunksKey key = p2p_chunks_key(near_list, ranges, per_chunk, options);
  if (prepared.valid && prepared.key == key) {  // (p2p_prepare built it)
    prepared.wait_for_builder();
    finish_csr_chunks(space, workspace.chunks);
  } else {
    make_p2p_chunks(space, near_list, ranges, per_chunk, options, workspace.chunks, false);
  }
  const CsrChunks<Mem>& chunks = workspace.chunks;
  if (chunks.chunk_capacity == 0) return;

  using Data = P2PData<Mem, PosView, MassView, AccView, PotView, Real, Acc>;
  Data d;
  d.targets = near_list.targets;
  d.sources = near_list.sources;
  d.ranges = ranges;
  d.positions = positions;
  d.masses = masses;
  d.accelerations = accelerations;
  d.potentials = potentials;
  d.chunk_row = chunks.chunk_row;
  d.chunk_begin = chunks.chunk_begin;
  d.chunk_end = chunks.chunk_end;
  d.chunk_partial = chunks.chunk_partial;
  d.chunk_totals = chunks.totals;
  d.partial = workspace.template partial<Acc>(chunks.partial_capacity);
  d.G = static_cast<Acc>(G);
  d.eps2 = eps2;

  bool done = false;
  if constexpr (host) {  // the host kernel is never instantiated for device backends
    if (options.team_size == 0) {
      using Policy = Kokkos::RangePolicy<ExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
      if (guard) {
        Kokkos::parallel_for("kfmm::p2p", Policy(space, 0, chunks.chunk_capacity),
                             P2PHostKernel<true, Data, Real, Acc>{d});
      } else {
        Kokkos::parallel_for("kfmm::p2p", Policy(space, 0, chunks.chunk_capacity),
                             P2PHostKernel<false, Data, Real, Acc>{d});
      }
      done = true;
    }
  }
  if (!done) {
    using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
    auto run = [&](auto kernel) {
      using K = decltype(kernel);
      const auto max_team_for = [&](const int t) {
        return Policy(space, 1, 1)
            .set_scratch_size(0, Kokkos::PerTeam(K::scratch_bytes(t, per_chunk)))
            .team_size_max(kernel, Kokkos::ParallelForTag());
      };
      // An explicit team size is honoured or refused; the default halves while the backend cannot run it
      // (a kernel's registers or scratch limit its teams), down to 32.
      int team =
          options.team_size > 0 ? options.team_size : p2p_default_team_size<Real>(options.expected_leaf_size);
      if (options.team_size == 0) {
        while (team > 32 &&
               (team > max_team_for(team) ||
                K::scratch_bytes(team, per_chunk) > static_cast<size_t>(Policy::scratch_size_max(0))))
          team /= 2;
      }
      const size_t bytes = K::scratch_bytes(team, per_chunk);
      require(bytes <= static_cast<size_t>(Policy::scratch_size_max(0)), "p2p: team_size = ", team,
              " with leaves_per_chunk = ", per_chunk, " needs ", bytes,
              " bytes of team scratch, more than the backend's ", Policy::scratch_size_max(0));
      const auto scratch = Kokkos::PerTeam(bytes);
      const int max_team = max_team_for(team);
      require(team <= max_team, "p2p: team_size = ", team, " exceeds the backend's maximum of ", max_team);
      Kokkos::parallel_for("kfmm::p2p",
                           Policy(space, chunks.chunk_capacity, team).set_scratch_size(0, scratch), kernel);
    };
    if (guard) {
      run(P2PTeamKernel<true, ExecutionSpace, Data, Real, Acc>{d, per_chunk});
    } else {
      run(P2PTeamKernel<false, ExecutionSpace, Data, Real, Acc>{d, per_chunk});
    }
  }

  auto partial = d.partial;
  auto acc = accelerations;
  auto pot = potentials;
  const Acc g = d.G;
  // Near rows can be long (thousands of source leaves) with few entries: wide teams split their blocks.
  combine_split_rows(
      space, chunks, partial, block, 256, KOKKOS_LAMBDA(int r, int e, Acc sum) {
        add_scaled_sum(acc, pot, rng(tgt(r), 0) + e / 4, e % 4, g, sum);
      });
}

}  // namespace detail

/// Near field over a CSR near list (see the file comment for the physics and the design).
/// ADDS to `accelerations(i, 0..2)` and `potentials(i)` the softened interaction of every particle i
/// of each target leaf `near_list.targets(r)` with the particles of the row's source leaves; the self
/// pair (A, A), present once in the row of A, excludes i == j. `ranges(leaf, 0..1)` index the sorted
/// particle arrays `positions`, `masses`, `accelerations`, `potentials` (all of one length N).
/// Every View lives in `ExecutionSpace::memory_space`. Throws kfmm::Error for inconsistent sizes.
/// `workspace` holds the chunk table and partial sums between calls (csr_chunks.hpp).
template <class ExecutionSpace, class RangesView, class PosView, class MassView, class AccView, class PotView>
void p2p(const ExecutionSpace& space, const InteractionList<typename ExecutionSpace::memory_space>& near_list,
         const RangesView& ranges, const PosView& positions, const MassView& masses, double G,
         double softening, const AccView& accelerations, const PotView& potentials, const P2POptions& options,
         CsrWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  using Mem = typename ExecutionSpace::memory_space;
  using Real = std::remove_const_t<typename PosView::value_type>;
  static_assert(std::is_floating_point_v<Real>, "kfmm::p2p: positions must hold float or double");
  static_assert(PosView::rank == 2 && AccView::rank == 2 && MassView::rank == 1 && PotView::rank == 1,
                "kfmm::p2p: positions/accelerations are Real*[3], masses/potentials Real*");
  static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, typename PosView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecutionSpace, typename MassView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecutionSpace, typename AccView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecutionSpace, typename PotView::memory_space>::accessible,
                "kfmm::p2p: Views must be accessible from the execution space");
  // A table that p2p_prepare built is taken by this call or by none (once).
  const detail::PreparedChunks prepared = std::exchange(workspace.prepared, detail::PreparedChunks());
  const size_t n = positions.extent(0);
  require(positions.extent(1) == 3, "p2p: positions must have 3 columns, has ", positions.extent(1));
  require(accelerations.extent(1) == 3, "p2p: accelerations must have 3 columns, has ",
          accelerations.extent(1));
  require(masses.extent(0) == n, "p2p: masses has ", masses.extent(0), " entries, positions ", n);
  require(accelerations.extent(0) == n, "p2p: accelerations has ", accelerations.extent(0),
          " rows, positions ", n);
  require(potentials.extent(0) == n, "p2p: potentials has ", potentials.extent(0), " entries, positions ", n);
  require(softening >= 0 && softening < 1e300, "p2p: softening = ", softening, " must be finite and >= 0");
  // (the kernels hold eps^2 in Real: an infinite one would make every force silently zero)
  require(!(softening * softening > static_cast<double>(std::numeric_limits<Real>::max())),
          "p2p: softening = ", softening, ": its square exceeds the range of ", real_type_name<Real>());
  require_finite_constant<Real>(G, "p2p: G");
  detail::check_p2p_list(space, "p2p", near_list, ranges, n, options, workspace);
  if (n == 0 || near_list.num_rows() == 0) return;
  Kokkos::View<const int* [2], Mem> rng = ranges;
  if (std::is_same_v<Real, float> && options.accumulate_in_double) {
    detail::p2p_impl<ExecutionSpace, Real, double>(space, near_list, rng, positions, masses, G, softening,
                                                   accelerations, potentials, options, workspace, prepared);
  } else {
    detail::p2p_impl<ExecutionSpace, Real, Real>(space, near_list, rng, positions, masses, G, softening,
                                                 accelerations, potentials, options, workspace, prepared);
  }
}

/// Builds the chunk table of p2p's next call for `near_list` into `workspace`, on `space`, ahead of that
/// call. Without options.max_target_particles the table's totals (which size the split rows' partial
/// sums) come back to the host in p2p, a round trip that waits for the table kernel; submitted here, the
/// kernel can run while the caller submits other work, and the P2P then starts without waiting for that
/// work to leave the GPU first (the solver builds the table before its M2L and L2L and launches the P2P
/// after them; on a GPU a table submitted behind a kernel that fills the device waits for its last wave).
/// The next p2p call with this workspace takes the table if its near_list and ranges are the same Views
/// (data and extents) and its options chunk the list the same way; it waits for `space` first, so it may
/// run on another instance. Any other call, or a second one, builds its own. The list's and the ranges'
/// contents must not change in between. Checks what p2p checks of the list, the ranges and the options
/// (with options.validate, the list pass). Builds nothing where p2p builds no table (`mutual` host
/// kernels, no particles, no rows).
template <class ExecutionSpace, class RangesView, class PosView>
void p2p_prepare(const ExecutionSpace& space,
                 const InteractionList<typename ExecutionSpace::memory_space>& near_list,
                 const RangesView& ranges, const PosView& positions, const P2POptions& options,
                 CsrWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  using Mem = typename ExecutionSpace::memory_space;
  using Real = std::remove_const_t<typename PosView::value_type>;
  static_assert(std::is_floating_point_v<Real>, "kfmm::p2p_prepare: positions must hold float or double");
  workspace.prepared = detail::PreparedChunks();
  const size_t n = positions.extent(0);
  detail::check_p2p_list(space, "p2p_prepare", near_list, ranges, n, options, workspace);
  if (n == 0 || near_list.num_rows() == 0 || options.mutual) return;
  const int per_chunk = detail::p2p_leaves_per_chunk<Real, ExecutionSpace>(options);
  detail::make_p2p_chunks(space, near_list, Kokkos::View<const int* [2], Mem>(ranges), per_chunk, options,
                          workspace.chunks, true);
  workspace.prepared.key = detail::p2p_chunks_key(near_list, ranges, per_chunk, options);
  workspace.prepared.wait_for_builder = [space]() { space.fence(); };
  workspace.prepared.valid = true;
}

/// p2p (above) with its chunk table and partial buffer allocated for this call.
template <class ExecutionSpace, class RangesView, class PosView, class MassView, class AccView, class PotView>
void p2p(const ExecutionSpace& space, const InteractionList<typename ExecutionSpace::memory_space>& near_list,
         const RangesView& ranges, const PosView& positions, const MassView& masses, double G,
         double softening, const AccView& accelerations, const PotView& potentials,
         const P2POptions& options = {}) {
  CsrWorkspace<typename ExecutionSpace::memory_space> workspace;
  p2p(space, near_list, ranges, positions, masses, G, softening, accelerations, potentials, options,
      workspace);
}

}  // namespace kfmm
