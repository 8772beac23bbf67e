/// \file zero_fill.hpp
/// Zeroing a flat range of memory in 16-byte stores: the per-evaluation clearing of outputs and locals.
///
/// Kokkos 3.4's deep_copy(space, view, 0) of a rank-1 View stores one value per thread; the solver's two
/// fills per evaluation (sorted outputs and locals, ~240 MB at 1e7 particles) ran at ~0.8 TB/s on the
/// H200 (0.30 ms, docs/benchmarks.md, "Twenty-seventh session"). One 16-byte store per thread writes
/// the same bytes with a quarter of the instructions and memory transactions (float).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kfmm::detail {

/// Sixteen zero bytes: one store instruction on GPUs.
struct alignas(16) ZeroBlock {
  std::uint64_t v[2];
};

/// data[0, count) = 0 as: `head` single values up to the first 16-byte boundary, `blocks` ZeroBlocks,
/// then the single values left (work item k does block k and single values k of the head and the tail).
template <class T>
struct ZeroFill {
  T* data;
  std::size_t count, head, blocks;
  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t k) const {
    constexpr std::size_t per_block = sizeof(ZeroBlock) / sizeof(T);
    if (k < blocks) reinterpret_cast<ZeroBlock*>(data + head)[k] = ZeroBlock{{0, 0}};
    if (k < head) data[k] = T(0);
    const std::size_t tail = head + blocks * per_block + k;
    if (tail < count) data[tail] = T(0);
  }
};

/// Sets data[0, count) to zero (all bits clear: +0 for floating point) on `space`; `data` lives in a
/// memory space that `space` can access. Asynchronous like any kernel on `space`.
template <class ExecutionSpace, class T>
void zero_fill(const ExecutionSpace& space, T* data, std::size_t count) {
  static_assert(std::is_arithmetic_v<T> && sizeof(ZeroBlock) % sizeof(T) == 0,
                "zero_fill: arithmetic values whose size divides 16 bytes");
  if (count == 0) return;
  constexpr std::size_t per_block = sizeof(ZeroBlock) / sizeof(T);
  const std::size_t misalign = reinterpret_cast<std::uintptr_t>(data) % sizeof(ZeroBlock);
  // (a start that is not even T-aligned cannot reach a 16-byte boundary: all single values)
  std::size_t head = misalign == 0 ? 0 : (sizeof(ZeroBlock) - misalign) / sizeof(T);
  if (misalign % sizeof(T) != 0 || head > count) head = count;
  const std::size_t blocks = (count - head) / per_block;
  const std::size_t singles = count - head - blocks * per_block;
  const std::size_t ends = head > singles ? head : singles;
  const std::size_t items = blocks > ends ? blocks : ends;
  Kokkos::parallel_for("kfmm::zero_fill",
                       Kokkos::RangePolicy<ExecutionSpace, Kokkos::IndexType<std::size_t>>(space, 0, items),
                       ZeroFill<T>{data, count, head, blocks});
}

}  // namespace kfmm::detail
