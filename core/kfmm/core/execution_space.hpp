/// \file execution_space.hpp
/// Traits of Kokkos execution spaces that the kernels of every layer branch on.
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm::detail {

/// True when kernels of ExecutionSpace run on the host (Serial, OpenMP, Threads): there the kernels use
/// one thread per work item (the league is the parallelism, inner loops vectorise) instead of a
/// cooperative team, and GPU-only tuning (team sizes, targets per thread) does not apply.
template <class ExecutionSpace>
inline constexpr bool is_host_execution_space =
    Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;

/// Work items of a reduction over n elements: item i takes elements i, i + items, i + 2 items, ...
/// GPUs: at most 2^16 items (coalesced strided loads, and the reduction tree joins 2^16 values instead
/// of n: a 1e6-point box reduction with a 56-byte value took ~66 us on the H200 as one item per point).
/// Host backends: one item per element (each thread's contiguous range stays contiguous).
template <class ExecutionSpace>
inline int reduction_items(int n) {
  constexpr int gpu_items = 1 << 16;
  return is_host_execution_space<ExecutionSpace> || n < gpu_items ? n : gpu_items;
}

}  // namespace kfmm::detail
