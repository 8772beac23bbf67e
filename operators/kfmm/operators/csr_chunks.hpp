/// \file csr_chunks.hpp
/// Work decomposition shared by the target-owned CSR kernels (P2P near field, fused M2L far field).
///
/// A CSR interaction list has one row per target; a kernel that owns its output row needs no atomics,
/// but one very long row would serialise on one team. The rows are therefore cut into *chunks* of at
/// most `max_per_chunk` consecutive pairs (empty rows get no chunk, so they cost nothing):
///   - a row with one chunk (the common case) is finished by that chunk, which adds its result to the
///     target's output directly (one write per output entry);
///   - a row with several chunks (a *split row*) has each chunk write its partial result to its own
///     block of a partial buffer; a second pass (`combine_split_rows`) sums a split row's partial
///     blocks in chunk order and adds the sum to the output.
/// The decomposition depends only on the list and `max_per_chunk`, never on the number of threads, so
/// the order of every floating-point sum is fixed: results are bitwise reproducible run after run.
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <string>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/view_capacity.hpp"

namespace kfmm::detail {

/// The chunk table of a CSR list (see the file comment). All Views live in MemorySpace; they may be
/// longer than the counts below (a reused table only grows).
template <class MemorySpace>
struct CsrChunks {
  Kokkos::View<int*, MemorySpace> chunk_row;    ///< row of each chunk
  Kokkos::View<int*, MemorySpace> chunk_begin;  ///< first pair (index into sources) of each chunk
  Kokkos::View<int*, MemorySpace> chunk_end;    ///< one past the last pair of each chunk
  /// Offset of the chunk's block in the partial buffer, or -1 when its row has a single chunk.
  Kokkos::View<int*, MemorySpace> chunk_partial;
  Kokkos::View<int*, MemorySpace> split_rows;  ///< rows with more than one chunk, ascending
  Kokkos::View<int*, MemorySpace>
      row_chunks;  ///< size rows + 1: chunks of row r are [row_chunks(r), row_chunks(r+1))
  Kokkos::View<int*, MemorySpace> row_partial, split_index;  ///< per row: partial offset, split rank
  int num_chunks = 0;
  int num_split_rows = 0;
  int partial_size = 0;  ///< entries of the partial buffer the split rows need
  int max_per_chunk = 0;
};

/// Scan value of the chunk table: chunks, partial-buffer entries and split rows before a row.
struct CsrChunkCounts {
  long long chunks = 0, partial = 0, split = 0;
  KOKKOS_INLINE_FUNCTION CsrChunkCounts() {}
  KOKKOS_INLINE_FUNCTION void operator+=(const CsrChunkCounts& o) {
    chunks += o.chunks;
    partial += o.partial;
    split += o.split;
  }
  KFMM_COMPAT_VOLATILE_JOIN(
      KOKKOS_INLINE_FUNCTION void operator+=(const volatile CsrChunkCounts& o) volatile {
        chunks = chunks + o.chunks;
        partial = partial + o.partial;
        split = split + o.split;
      })
};

/// The one scan over the rows: per-row chunk, partial and split offsets (row r's counts depend only
/// on its length, so one pass gives all three).
template <class MemorySpace, class BlockSize>
struct CsrChunkScan {
  using value_type = CsrChunkCounts;
  Kokkos::View<const int*, MemorySpace> offsets;
  Kokkos::View<int*, MemorySpace> row_chunks, row_partial, split_index;
  BlockSize block_size;
  int rows, max_per_chunk;
  KOKKOS_INLINE_FUNCTION void operator()(const int r, CsrChunkCounts& sum, const bool final) const {
    const int n = offsets(r + 1) - offsets(r);
    const long long k = n > 0 ? (static_cast<long long>(n) + max_per_chunk - 1) / max_per_chunk : 0;
    const long long need = k > 1 ? k * static_cast<long long>(block_size(r)) : 0;
    if (final) {
      row_chunks(r) = static_cast<int>(sum.chunks);
      row_partial(r) = need > 0 ? static_cast<int>(sum.partial) : -1;
      split_index(r) = static_cast<int>(sum.split);
      if (r == rows - 1) row_chunks(rows) = static_cast<int>(sum.chunks + k);
    }
    sum.chunks += k;
    sum.partial += need;
    sum.split += k > 1 ? 1 : 0;
  }
};

/// Builds the chunk table of `list` into `c`, reusing its arrays where they are long enough (one scan,
/// one host round trip, one fill kernel). `block_size(r)` (device-callable, r a row index) is the
/// number of partial-buffer entries one chunk of row r needs (e.g. (p+1)^2 for M2L, 4 x targets for P2P).
template <class ExecutionSpace, class MemorySpace, class BlockSize>
void make_csr_chunks(const ExecutionSpace& space, const InteractionList<MemorySpace>& list, int max_per_chunk,
                     const BlockSize& block_size, CsrChunks<MemorySpace>& c) {
  require(max_per_chunk >= 1, "CSR chunk size = ", max_per_chunk, " must be at least 1");
  using Policy = Kokkos::RangePolicy<ExecutionSpace>;
  c.max_per_chunk = max_per_chunk;
  c.num_chunks = c.num_split_rows = c.partial_size = 0;
  const int rows = list.num_rows();
  reserve_at_least(c.row_chunks, rows + 1LL, "kfmm::csr_chunks::row_chunks");
  if (rows == 0) {
    Kokkos::deep_copy(space, Kokkos::subview(c.row_chunks, 0), 0);
    return;
  }
  reserve_at_least(c.row_partial, rows, "kfmm::csr_chunks::row_partial");
  reserve_at_least(c.split_index, rows, "kfmm::csr_chunks::split_index");
  CsrChunkCounts total;
  Kokkos::parallel_scan("kfmm::csr_chunks::scan", Policy(space, 0, rows),
                        CsrChunkScan<MemorySpace, BlockSize>{list.offsets, c.row_chunks, c.row_partial,
                                                             c.split_index, block_size, rows, max_per_chunk},
                        total);
  // (64-bit totals, so an absurd list is refused, not wrapped)
  require(total.chunks < INT_MAX, "CSR list has too many chunks (", total.chunks, ")");
  require(total.partial < INT_MAX, "CSR list needs too large a partial buffer (", total.partial, " entries)");
  c.num_chunks = static_cast<int>(total.chunks);
  c.partial_size = static_cast<int>(total.partial);
  c.num_split_rows = static_cast<int>(total.split);
  reserve_at_least(c.chunk_row, c.num_chunks, "kfmm::csr_chunks::row");
  reserve_at_least(c.chunk_begin, c.num_chunks, "kfmm::csr_chunks::begin");
  reserve_at_least(c.chunk_end, c.num_chunks, "kfmm::csr_chunks::end");
  reserve_at_least(c.chunk_partial, c.num_chunks, "kfmm::csr_chunks::partial");
  reserve_at_least(c.split_rows, c.num_split_rows, "kfmm::csr_chunks::split_rows");
  auto offsets = list.offsets;
  auto row_chunks = c.row_chunks;
  auto row_partial = c.row_partial;
  auto split_index = c.split_index;
  auto chunk_row = c.chunk_row;
  auto chunk_begin = c.chunk_begin;
  auto chunk_end = c.chunk_end;
  auto chunk_partial = c.chunk_partial;
  auto split_rows = c.split_rows;
  Kokkos::parallel_for(
      "kfmm::csr_chunks::fill", Policy(space, 0, rows), KOKKOS_LAMBDA(int r) {
        const int first = row_chunks(r);
        const int k = row_chunks(r + 1) - first;
        const int b = offsets(r);
        const int e = offsets(r + 1);
        const int block = k > 1 ? static_cast<int>(block_size(r)) : 0;
        for (int i = 0; i < k; ++i) {
          chunk_row(first + i) = r;
          chunk_begin(first + i) = b + i * max_per_chunk;
          chunk_end(first + i) = (i + 1 == k) ? e : b + (i + 1) * max_per_chunk;
          chunk_partial(first + i) = k > 1 ? row_partial(r) + i * block : -1;
        }
        if (k > 1) split_rows(split_index(r)) = r;
      });
}

/// make_csr_chunks into a fresh table.
template <class ExecutionSpace, class MemorySpace, class BlockSize>
CsrChunks<MemorySpace> make_csr_chunks(const ExecutionSpace& space, const InteractionList<MemorySpace>& list,
                                       int max_per_chunk, const BlockSize& block_size) {
  CsrChunks<MemorySpace> c;
  make_csr_chunks(space, list, max_per_chunk, block_size, c);
  return c;
}

/// Second pass over the split rows: for every split row r and entry e < block_size(r), sums the
/// row's partial blocks `partial(chunk_partial(c) + e)` in chunk order and calls `apply(r, e, sum)`
/// (device-callable; adds the sum to the output entry). One thread per (row, entry): no atomics.
template <class ExecutionSpace, class MemorySpace, class PartialView, class BlockSize, class Apply>
void combine_split_rows(const ExecutionSpace& space, const CsrChunks<MemorySpace>& chunks,
                        const PartialView& partial, const BlockSize& block_size, const Apply& apply) {
  if (chunks.num_split_rows == 0) return;
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Member = typename Policy::member_type;
  using Acc = typename PartialView::non_const_value_type;
  auto split_rows = chunks.split_rows;
  auto row_chunks = chunks.row_chunks;
  auto chunk_partial = chunks.chunk_partial;
  const int team = is_host_execution_space<ExecutionSpace> ? 1 : 64;
  Kokkos::parallel_for(
      "kfmm::csr_chunks::combine", Policy(space, chunks.num_split_rows, team),
      KOKKOS_LAMBDA(const Member& m) {
        const int r = split_rows(m.league_rank());
        const int c0 = row_chunks(r);
        const int c1 = row_chunks(r + 1);
        const int n = static_cast<int>(block_size(r));
        Kokkos::parallel_for(Kokkos::TeamThreadRange(m, n), [&](int e) {
          Acc sum = partial(chunk_partial(c0) + e);
          for (int c = c0 + 1; c < c1; ++c) sum += partial(chunk_partial(c) + e);
          apply(r, e, sum);
        });
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
