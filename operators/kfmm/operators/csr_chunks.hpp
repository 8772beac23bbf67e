/// \file csr_chunks.hpp
/// Work decomposition shared by the target-owned CSR kernels (P2P near field, fused M2L far field).
///
/// A CSR interaction list has one row per target; a kernel that owns its output row needs no atomics,
/// but one very long row would serialise on one team. The rows are therefore cut into *chunks* of at
/// most `max_per_chunk` consecutive pairs (empty rows get no chunk, so they cost nothing):
///   - the first chunk of every row adds its result to the target's output directly (one write per
///     output entry; for a row with one chunk, the common case, that is all);
///   - the other chunks of a row with several chunks (a *split row*) write their partial results to
///     their own blocks of a partial buffer, and a second pass (`combine_split_rows`) sums those blocks
///     in chunk order and adds the sum to the output: output = (output + chunk 0) + (chunk 1 + ...).
/// The decomposition depends only on the list and `max_per_chunk`, never on the number of threads, so
/// the order of every floating-point sum is fixed: results are bitwise reproducible run after run.
///
/// The table is built by one kernel (single-pass look-back scans over the rows for the chunk,
/// partial-buffer and split-row offsets, core/kfmm/core/tile_scan.hpp: two, the chunk and split-row
/// counts packed into one value, for lists of fewer than 2^28 chunks, else three) that leaves its totals on
/// the device. The kernels that use it are launched over host-side capacities (upper bounds from the list's
/// row and pair counts) and skip the chunks past the device total, so a caller that knows the largest block
/// needs no host round trip (M2L: (p+1)^2 per chunk); otherwise the totals are copied back once (P2P, whose
/// block is 4 x the target leaf's particles). (Before: a Kokkos scan of two kernels, that host round trip and
/// a fill kernel per table.)
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <climits>
#include <functional>
#include <string>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/host_copy.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/tile_scan.hpp"
#include "kfmm/core/view_capacity.hpp"

namespace kfmm::detail {

/// The chunk table of a CSR list (see the file comment). All Views live in MemorySpace and may be
/// longer than their contents (a reused table only grows); the counts are on the device (`totals`),
/// the host holds upper bounds for the launches and allocations.
template <class MemorySpace>
struct CsrChunks {
  Kokkos::View<int*, MemorySpace> chunk_row;    ///< row of each chunk
  Kokkos::View<int*, MemorySpace> chunk_begin;  ///< first pair (index into sources) of each chunk
  Kokkos::View<int*, MemorySpace> chunk_end;    ///< one past the last pair of each chunk
  /// Offset of the chunk's block in the partial buffer, or -1 for the first chunk of a row (it adds to
  /// the output directly).
  Kokkos::View<int*, MemorySpace> chunk_partial;
  Kokkos::View<int*, MemorySpace> split_rows;     ///< rows with more than one chunk, ascending
  Kokkos::View<int*, MemorySpace> split_partial;  ///< per split row: the partial block of its second chunk
  Kokkos::View<int*, MemorySpace> split_chunks;   ///< per split row: its number of chunks (> 1)
  /// On the device: [0] chunks, [1] partial-buffer entries, [2] split rows.
  Kokkos::View<int*, MemorySpace> totals;
  TileScanWorkspace<MemorySpace> scans[3];  ///< look-back state of the offsets (the third unpacked only)
  int chunk_capacity = 0;                   ///< host: at least totals[0] (the chunk kernels' launch size)
  int split_capacity = 0;                   ///< host: at least totals[2] (the combine pass's launch size)
  int partial_capacity = 0;                 ///< host: at least totals[1] (the partial buffer's entries)
  int max_per_chunk = 0;
  bool exact = false;  ///< the capacities are the totals (copied back), not bounds
  /// An exact table whose totals have not come back yet (make_csr_chunks with `defer_totals`): its
  /// capacities are unusable until finish_csr_chunks.
  bool totals_pending = false;
  /// Pack the chunk and split-row counts into one scan where the list allows (tests turn it off to run
  /// the three-scan path, which only lists of 2^28 chunks and more need).
  bool pack_scans = true;
};

/// What a chunk table was built for ahead of its operator call (p2p_prepare): the list's and the leaf
/// ranges' Views (by address and extent) and the chunking, with a wait for the instance that built it. An
/// operator call whose key matches takes the table, once; any other call builds its own.
struct PreparedChunksKey {
  const void* targets = nullptr;
  const void* offsets = nullptr;
  const void* sources = nullptr;
  const void* ranges = nullptr;
  std::size_t rows = 0, pairs = 0, leaves = 0;
  int max_per_chunk = 0;
  long long max_block = 0;
  bool operator==(const PreparedChunksKey& o) const {
    return targets == o.targets && offsets == o.offsets && sources == o.sources && ranges == o.ranges &&
           rows == o.rows && pairs == o.pairs && leaves == o.leaves && max_per_chunk == o.max_per_chunk &&
           max_block == o.max_block;
  }
};
struct PreparedChunks {
  bool valid = false;
  PreparedChunksKey key;
  std::function<void()> wait_for_builder;  ///< fences the instance that built the table
};

/// Tile geometry of the table kernel: host spaces one thread per team over 256 rows; GPUs 256 threads
/// x 2 rows.
template <class ExecutionSpace>
struct CsrChunkTiles {
  static constexpr bool host = is_host_execution_space<ExecutionSpace>;
  static constexpr int items = host ? 256 : 2;
  static constexpr int team_size = host ? 1 : 256;
};

/// The table kernel: each team takes a tile of rows, counts each row's chunks, partial entries and split
/// flag, scans them within the team and across tiles (two or three look-backs), and writes the chunk entries
/// and split rows at the offsets of a global exclusive scan in row order (so the table does not depend on the
/// schedule). Writes beyond a View's extent are dropped (a list that breaks its contract).
template <class ExecutionSpace, class BlockSize>
struct CsrChunkTable {
  using memory_space = typename ExecutionSpace::memory_space;
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int I = CsrChunkTiles<ExecutionSpace>::items;
  // A tile's partial entries are clamped here, so the look-back values (< 2^56) cannot wrap for any list;
  // a clamped total exceeds INT_MAX and is refused by the host.
  static constexpr unsigned long long tile_clamp = 1ULL << 33;

  Kokkos::View<const int*, memory_space> offsets;
  Kokkos::View<int*, memory_space> chunk_row, chunk_begin, chunk_end, chunk_partial;
  Kokkos::View<int*, memory_space> split_rows, split_partial, split_chunks, totals;
  TileScan<memory_space> scan[3];
  BlockSize block_size;
  int rows, max_per_chunk, tile_rows = 0;
  bool packed = false;  ///< chunks and split rows in one scan value (fewer than 2^28 chunks)
  static constexpr int packed_shift = 28;

  CsrChunkTable(const Kokkos::View<int*, memory_space>& list_offsets, const CsrChunks<memory_space>& c,
                const BlockSize& block, int num_rows, int per_chunk)
      : offsets(list_offsets),
        chunk_row(c.chunk_row),
        chunk_begin(c.chunk_begin),
        chunk_end(c.chunk_end),
        chunk_partial(c.chunk_partial),
        split_rows(c.split_rows),
        split_partial(c.split_partial),
        split_chunks(c.split_chunks),
        totals(c.totals),
        block_size(block),
        rows(num_rows),
        max_per_chunk(per_chunk) {}

  KOKKOS_INLINE_FUNCTION void operator()(const Team& team) const {
    long long tile = 0;
    if (team.team_rank() == 0) tile = scan[0].take_ticket();
    team.team_broadcast(tile, 0);
    const long long first = tile * tile_rows + static_cast<long long>(team.team_rank()) * I;
    int chunks[I];
    long long block[I];
    unsigned long long sum[3] = {0, 0, 0};
    for (int q = 0; q < I; ++q) {
      chunks[q] = 0;
      block[q] = 0;
      const long long r = first + q;
      if (r < rows) {
        const long long n = offsets(r + 1) - offsets(r);
        chunks[q] = n > 0 ? static_cast<int>((n + max_per_chunk - 1) / max_per_chunk) : 0;
        if (chunks[q] > 1) block[q] = block_size(static_cast<int>(r));
      }
      sum[0] += chunks[q];
      sum[1] += chunks[q] > 1 ? (chunks[q] - 1ULL) * static_cast<unsigned long long>(block[q]) : 0ULL;
      sum[2] += chunks[q] > 1 ? 1 : 0;
    }
    sum[1] = sum[1] < tile_clamp ? sum[1] : tile_clamp;
    // Packed: chunks and split rows share one scan value (chunks << 28 | split rows; the host allows it
    // when the list has fewer than 2^28 chunks), so the kernel runs two look-backs, not three.
    if (packed) sum[0] = (sum[0] << packed_shift) | sum[2];
    const int scans = packed ? 2 : 3;
    unsigned long long before[3] = {0, 0, 0}, base[3] = {0, 0, 0}, total[3] = {0, 0, 0};
    for (int x = 0; x < scans; ++x) {
      before[x] = team.team_scan(sum[x]);
      unsigned long long tile_sum = before[x] + sum[x];
      team.team_broadcast(tile_sum, team.team_size() - 1);
      if (x == 1) tile_sum = tile_sum < tile_clamp ? tile_sum : tile_clamp;
      base[x] = scan[x].exclusive_prefix(team, tile, tile_sum);
      total[x] = base[x] + tile_sum;
    }
    if (packed) {
      const unsigned long long mask = (1ULL << packed_shift) - 1;
      before[2] = before[0] & mask;
      base[2] = base[0] & mask;
      total[2] = total[0] & mask;
      before[0] >>= packed_shift;
      base[0] >>= packed_shift;
      total[0] >>= packed_shift;
    }
    if (team.team_rank() == 0 && tile == scan[0].tiles - 1) {
      for (int x = 0; x < 3; ++x) totals(x) = total[x] < INT_MAX ? static_cast<int>(total[x]) : INT_MAX;
    }
    long long c = static_cast<long long>(base[0] + before[0]);
    long long p = static_cast<long long>(base[1] + before[1]);
    long long s = static_cast<long long>(base[2] + before[2]);
    const long long chunk_cap = static_cast<long long>(chunk_row.extent(0));
    const long long split_cap = static_cast<long long>(split_rows.extent(0));
    for (int q = 0; q < I; ++q) {
      const int k = chunks[q];
      if (k == 0) continue;
      const int r = static_cast<int>(first + q);
      const int b = offsets(r), e = offsets(r + 1);
      for (int j = 0; j < k && c + j < chunk_cap; ++j) {
        chunk_row(c + j) = r;
        chunk_begin(c + j) = b + j * max_per_chunk;
        chunk_end(c + j) = j + 1 == k ? e : b + (j + 1) * max_per_chunk;
        chunk_partial(c + j) = j == 0 ? -1 : static_cast<int>(p + (j - 1) * block[q]);
      }
      if (k > 1) {
        if (s < split_cap) {
          split_rows(s) = r;
          split_partial(s) = static_cast<int>(p);
          split_chunks(s) = k;
        }
        p += (k - 1) * block[q];
        ++s;
      }
      c += k;
    }
  }
};

/// The counts of a chunk table, on the host.
struct CsrChunkTotals {
  int chunks = 0, partial = 0, split_rows = 0;
};

/// The table's device totals on the host, once the work submitted to `space` (which built the table) is
/// done: a round trip that waits for that instance only (work on other instances may go on).
template <class ExecutionSpace, class MemorySpace>
CsrChunkTotals csr_chunk_totals(const ExecutionSpace& space, const CsrChunks<MemorySpace>& c) {
  CsrChunkTotals t;
  if (c.totals.extent(0) < 3) return t;
  int totals[3];
  copy_to_host(space, totals, c.totals, 3);
  t.chunks = totals[0];
  t.partial = totals[1];
  t.split_rows = totals[2];
  return t;
}

/// The table's device totals on the host after all submitted work: a round trip, for tests and
/// diagnostics.
template <class MemorySpace>
CsrChunkTotals csr_chunk_totals(const CsrChunks<MemorySpace>& c) {
  Kokkos::fence();
  return csr_chunk_totals(typename MemorySpace::execution_space(), c);
}

/// The exact capacities of a table built with `defer_totals`: its totals' host round trip, which waits
/// for `space` (the instance that built it) only. Does nothing for a table without pending totals.
template <class ExecutionSpace, class MemorySpace>
void finish_csr_chunks(const ExecutionSpace& space, CsrChunks<MemorySpace>& c) {
  if (!c.totals_pending) return;
  const CsrChunkTotals totals = csr_chunk_totals(space, c);
  c.totals_pending = false;
  require(totals.partial < INT_MAX, "CSR list needs too large a partial buffer (", totals.partial,
          "+ entries)");
  c.chunk_capacity = totals.chunks;
  c.partial_capacity = totals.partial;
  c.split_capacity = totals.split_rows;
}

/// Builds the chunk table of `list` into `c`, reusing its arrays where they are long enough: one kernel,
/// no host round trip when `max_block` > 0 bounds `block_size(r)` (device-callable, r a row index: the
/// partial-buffer entries one chunk of row r needs, e.g. (p+1)^2 for M2L, 4 x targets for P2P); with
/// `max_block` = 0, or a partial-buffer bound beyond the int range, the totals are copied back (one round
/// trip) and the capacities are exact. With `defer_totals` that round trip is left to finish_csr_chunks,
/// so that the caller can submit other work while the table is built.
/// Requires list.offsets(rows) <= list.sources.extent(0) (the pairs), which bounds the chunks.
template <class ExecutionSpace, class MemorySpace, class BlockSize>
void make_csr_chunks(const ExecutionSpace& space, const InteractionList<MemorySpace>& list, int max_per_chunk,
                     const BlockSize& block_size, long long max_block, CsrChunks<MemorySpace>& c,
                     bool defer_totals = false) {
  require(max_per_chunk >= 1, "CSR chunk size = ", max_per_chunk, " must be at least 1");
  require(max_block >= 0, "CSR chunk block bound = ", max_block, " must be >= 0");
  c.max_per_chunk = max_per_chunk;
  c.totals_pending = false;
  const int rows = list.num_rows();
  const long long pairs = static_cast<long long>(list.sources.extent(0));
  // Bounds: every chunk holds a pair, and a row of n pairs has ceil(n / m) <= 1 + floor(n / m) chunks;
  // a split row has n > m, and its chunks after the first number floor((n - 1) / m) <= n / m.
  const long long m = max_per_chunk;
  const long long chunk_bound = rows == 0 ? 0 : std::min(pairs, rows + pairs / m);
  const long long split_bound = std::min<long long>(rows, pairs / (m + 1));
  require(chunk_bound < INT_MAX, "CSR list has too many chunks (up to ", chunk_bound, ")");
  c.chunk_capacity = static_cast<int>(chunk_bound);
  c.split_capacity = static_cast<int>(split_bound);
  // A bound beyond the int range (large blocks, small chunks) does not mean the list needs that much:
  // count exactly then (the totals come back) rather than refuse.
  const long long partial_bound = max_block > 0 ? max_block * (pairs / m) : 0;
  c.exact = max_block == 0 || partial_bound >= INT_MAX;
  if (!c.exact) c.partial_capacity = static_cast<int>(partial_bound);
  reserve_at_least(c.totals, 3, "kfmm::csr_chunks::totals");
  if (chunk_bound == 0) {  // (no chunk: the kernels that follow are not launched)
    c.chunk_capacity = c.split_capacity = c.partial_capacity = 0;
    c.exact = true;
    Kokkos::deep_copy(space, c.totals, 0);
    return;
  }
  reserve_at_least(c.chunk_row, chunk_bound, "kfmm::csr_chunks::row");
  reserve_at_least(c.chunk_begin, chunk_bound, "kfmm::csr_chunks::begin");
  reserve_at_least(c.chunk_end, chunk_bound, "kfmm::csr_chunks::end");
  reserve_at_least(c.chunk_partial, chunk_bound, "kfmm::csr_chunks::partial");
  reserve_at_least(c.split_rows, split_bound, "kfmm::csr_chunks::split_rows");
  reserve_at_least(c.split_partial, split_bound, "kfmm::csr_chunks::split_partial");
  reserve_at_least(c.split_chunks, split_bound, "kfmm::csr_chunks::split_chunks");

  using Tiles = CsrChunkTiles<ExecutionSpace>;
  using Table = CsrChunkTable<ExecutionSpace, BlockSize>;
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  Table table(list.offsets, c, block_size, rows, max_per_chunk);
  const int team =
      Tiles::team_size > 1
          ? std::min(Tiles::team_size, Policy(space, 1, 1).team_size_max(table, Kokkos::ParallelForTag()))
          : 1;
  table.tile_rows = team * Tiles::items;
  table.packed = c.pack_scans &&
                 chunk_bound < (1LL << Table::packed_shift);  // (split rows <= chunks / 2 fit the low bits)
  const long long tiles = (rows + table.tile_rows - 1LL) / table.tile_rows;
  const int scans = table.packed ? 2 : 3;  // (the look-backs the kernel runs: one scratch window each)
  for (int x = 0; x < scans; ++x)
    table.scan[x] = TileScan<MemorySpace>(c.scans[x], c.scans[x].prepare(space, tiles), tiles);
  // (light weight: the table's functor, with its three tile scans, is over 512 bytes; see
  // compat::light_weight. From constant memory the M2L's table waited on the host for the P2P's.)
  Kokkos::parallel_for(
      "kfmm::csr_chunks::table",
      compat::light_weight(
          Policy(space, static_cast<int>(tiles), team)
              .set_scratch_size(0, Kokkos::PerTeam(scans * TileScan<MemorySpace>::scratch_bytes()))),
      table);
  if (c.exact) {
    c.totals_pending = true;
    if (!defer_totals) finish_csr_chunks(space, c);
  }
}

/// make_csr_chunks into a fresh table.
template <class ExecutionSpace, class MemorySpace, class BlockSize>
CsrChunks<MemorySpace> make_csr_chunks(const ExecutionSpace& space, const InteractionList<MemorySpace>& list,
                                       int max_per_chunk, const BlockSize& block_size, long long max_block) {
  CsrChunks<MemorySpace> c;
  make_csr_chunks(space, list, max_per_chunk, block_size, max_block, c);
  return c;
}

/// Second pass over the split rows: for every split row r and entry e < block_size(r), sums the
/// partial blocks of the row's chunks after the first (consecutive blocks of block_size(r) entries from
/// split_partial) and calls `apply(r, e, sum)` (device-callable; adds the sum to the output entry). One
/// team per split row, no atomics. The block offsets come from the split row, not from the chunks, so a
/// thread's loads are independent of each other (a chunk-by-chunk lookup made them a chain: 110 us for
/// the 4006 split rows of the P2P at 2e5 Plummer, p 4, theta 0.6, leaf 64 on the H200, Nsight Compute).
/// Where a row has fewer entries than half the team, the team also splits the row's blocks into G
/// consecutive groups, each thread summing one group of one entry, and the group sums are added in group
/// order: the longest rows have few entries and many chunks (at that point a large sparse outer leaf with
/// 8779 source leaves, 138 chunks), and one thread per entry over all the blocks took 66 us, the tail
/// of that one row (0.95 waves, 3 % of the memory throughput). `gpu_team` is the team size on GPUs (1 on
/// host backends): the caller picks it from its rows' shape, since the pass is launched over the table's
/// split capacity (rows past the device total return at once) and a wide team costs every such empty
/// team too (the M2L's pass, (p+1)^2 entries and few chunks per row, took 11.7 us with teams of 64 and
/// 27.5 us with 256 at 2e5, p 4). Every sum's order depends only on the row and the team size: results
/// are reproducible run after run.
template <class ExecutionSpace, class MemorySpace, class PartialView, class BlockSize, class Apply>
void combine_split_rows(const ExecutionSpace& space, const CsrChunks<MemorySpace>& chunks,
                        const PartialView& partial, const BlockSize& block_size, int gpu_team,
                        const Apply& apply) {
  if (chunks.split_capacity == 0) return;
  require(gpu_team >= 1, "combine_split_rows: team size = ", gpu_team, " must be at least 1");
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Member = typename Policy::member_type;
  using Acc = typename PartialView::non_const_value_type;
  auto split_rows = chunks.split_rows;
  auto split_partial = chunks.split_partial;
  auto split_chunks = chunks.split_chunks;
  auto totals = chunks.totals;
  const int team = is_host_execution_space<ExecutionSpace> ? 1 : gpu_team;
  Kokkos::parallel_for(
      "kfmm::csr_chunks::combine",
      Policy(space, chunks.split_capacity, team)
          .set_scratch_size(0, Kokkos::PerTeam(team * sizeof(Acc) + 64)),
      KOKKOS_LAMBDA(const Member& m) {
        const int s = m.league_rank();
        if (s >= totals(2)) return;
        const int r = split_rows(s);
        const long long base = split_partial(s);
        const int later = split_chunks(s) - 1;  // blocks, one per chunk after the first, >= 1
        const int n = static_cast<int>(block_size(r));
        // (A partial buffer sized from a bound that the list broke holds no complete row: dropped.)
        if (base + static_cast<long long>(later) * n > static_cast<long long>(partial.extent(0))) return;
        const int T = m.team_size();
        const int groups = n > 0 && 2 * n <= T ? (T / n < later ? T / n : later) : 1;
        if (groups == 1) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](int e) {
            Acc sum = partial(base + e);
            KFMM_PRAGMA_UNROLL_BY(8)
            for (int j = 1; j < later; ++j) sum += partial(base + static_cast<long long>(j) * n + e);
            apply(r, e, sum);
          });
          return;
        }
        // Thread (g, e) sums blocks [later g / groups, later (g + 1) / groups) of entry e in order.
        Acc* group_sums = static_cast<Acc*>(m.team_scratch(0).get_shmem_aligned(sizeof(Acc) * T, 16));
        const int tid = m.team_rank();
        if (tid < groups * n) {
          const int g = tid / n, e = tid % n;
          const int j0 = static_cast<int>(static_cast<long long>(later) * g / groups);
          const int j1 = static_cast<int>(static_cast<long long>(later) * (g + 1) / groups);
          Acc sum = partial(base + static_cast<long long>(j0) * n + e);
          KFMM_PRAGMA_UNROLL_BY(8)
          for (int j = j0 + 1; j < j1; ++j) sum += partial(base + static_cast<long long>(j) * n + e);
          group_sums[tid] = sum;
        }
        m.team_barrier();
        if (tid < n) {
          Acc sum = group_sums[tid];
          for (int g = 1; g < groups; ++g) sum += group_sums[g * n + tid];
          apply(r, tid, sum);
        }
      });
}

}  // namespace kfmm::detail

namespace kfmm {

/// Reusable buffers of the CSR operators (m2l, p2p): the chunk table of the list and the split rows'
/// partial sums, grown on demand. A time loop that passes the same workspace to every call of one
/// operator allocates nothing once the lists stop growing (allocation and the release of device
/// memory synchronise the device).
template <class MemorySpace>
struct CsrWorkspace {
  detail::CsrChunks<MemorySpace> chunks;
  Kokkos::View<float*, MemorySpace> partial_float;
  Kokkos::View<double*, MemorySpace> partial_double;
  /// validate's counters and per-node row counts (list_checks.hpp).
  Kokkos::View<int*, MemorySpace> list_check;
  /// The list whose table `chunks` holds ahead of its operator call (p2p_prepare), if any.
  detail::PreparedChunks prepared;

  /// A partial buffer of at least n entries of type T (float or double).
  template <class T>
  Kokkos::View<T*, MemorySpace> partial(long long n) {
    static_assert(std::is_same<T, float>::value || std::is_same<T, double>::value,
                  "CsrWorkspace: partial sums are float or double");
    if constexpr (std::is_same<T, float>::value) {
      detail::reserve_at_least(partial_float, n, "kfmm::csr::partial");
      return partial_float;
    } else {
      detail::reserve_at_least(partial_double, n, "kfmm::csr::partial");
      return partial_double;
    }
  }
};

}  // namespace kfmm
