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
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/interaction_list.hpp"

namespace kfmm::detail {

/// The chunk table of a CSR list (see the file comment). All Views live in MemorySpace.
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
  int num_chunks = 0;
  int num_split_rows = 0;
  int partial_size = 0;  ///< entries of the partial buffer the split rows need
  int max_per_chunk = 0;
};

/// Builds the chunk table of `list`. `block_size(r)` (device-callable, r a row index) is the number of
/// partial-buffer entries one chunk of row r needs (e.g. (p+1)^2 for M2L, 4 x targets for P2P).
template <class ExecutionSpace, class MemorySpace, class BlockSize>
CsrChunks<MemorySpace> make_csr_chunks(const ExecutionSpace& space, const InteractionList<MemorySpace>& list,
                                       int max_per_chunk, const BlockSize& block_size) {
  require(max_per_chunk >= 1, "CSR chunk size = ", max_per_chunk, " must be at least 1");
  using Policy = Kokkos::RangePolicy<ExecutionSpace>;
  CsrChunks<MemorySpace> c;
  c.max_per_chunk = max_per_chunk;
  const int rows = list.num_rows();
  c.row_chunks =
      Kokkos::View<int*, MemorySpace>(Kokkos::view_alloc(space, "kfmm::csr_chunks::row_chunks"), rows + 1);
  if (rows == 0) return c;
  auto offsets = list.offsets;
  auto row_chunks = c.row_chunks;

  // chunks per row and their exclusive prefix (64-bit total so an absurd list is refused, not wrapped)
  long long total_chunks = 0;
  Kokkos::parallel_scan(
      "kfmm::csr_chunks::count", Policy(space, 0, rows),
      KOKKOS_LAMBDA(int r, long long& sum, bool final) {
        const int n = offsets(r + 1) - offsets(r);
        const long long k = n > 0 ? (static_cast<long long>(n) + max_per_chunk - 1) / max_per_chunk : 0;
        if (final) row_chunks(r) = static_cast<int>(sum);
        sum += k;
        if (final && r == rows - 1) row_chunks(rows) = static_cast<int>(sum);
      },
      total_chunks);
  require(total_chunks < INT_MAX, "CSR list has too many chunks (", total_chunks, ")");
  c.num_chunks = static_cast<int>(total_chunks);

  // split rows and the partial-buffer offset of each split row
  Kokkos::View<int*, MemorySpace> row_partial(Kokkos::view_alloc(space, "kfmm::csr_chunks::row_partial"),
                                              rows);
  long long total_partial = 0;
  Kokkos::parallel_scan(
      "kfmm::csr_chunks::partial", Policy(space, 0, rows),
      KOKKOS_LAMBDA(int r, long long& sum, bool final) {
        const int k = row_chunks(r + 1) - row_chunks(r);
        const long long need = k > 1 ? static_cast<long long>(k) * block_size(r) : 0;
        if (final) row_partial(r) = need > 0 ? static_cast<int>(sum) : -1;
        sum += need;
      },
      total_partial);
  require(total_partial < INT_MAX, "CSR list needs too large a partial buffer (", total_partial, " entries)");
  c.partial_size = static_cast<int>(total_partial);

  Kokkos::View<int*, MemorySpace> split_index(Kokkos::view_alloc(space, "kfmm::csr_chunks::split_index"),
                                              rows);
  int split_count = 0;
  Kokkos::parallel_scan(
      "kfmm::csr_chunks::split", Policy(space, 0, rows),
      KOKKOS_LAMBDA(int r, int& sum, bool final) {
        const bool split = row_chunks(r + 1) - row_chunks(r) > 1;
        if (final) split_index(r) = sum;
        sum += split ? 1 : 0;
      },
      split_count);
  c.num_split_rows = split_count;

  c.chunk_row = Kokkos::View<int*, MemorySpace>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kfmm::csr_chunks::row"), c.num_chunks);
  c.chunk_begin = Kokkos::View<int*, MemorySpace>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kfmm::csr_chunks::begin"), c.num_chunks);
  c.chunk_end = Kokkos::View<int*, MemorySpace>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kfmm::csr_chunks::end"), c.num_chunks);
  c.chunk_partial = Kokkos::View<int*, MemorySpace>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kfmm::csr_chunks::partial"), c.num_chunks);
  c.split_rows = Kokkos::View<int*, MemorySpace>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kfmm::csr_chunks::split_rows"),
      c.num_split_rows);
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
