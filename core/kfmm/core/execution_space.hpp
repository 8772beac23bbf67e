/// \file execution_space.hpp
/// Traits of Kokkos execution spaces that the kernels of every layer branch on.
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm::detail {

/// True when kernels of ExecutionSpace run on the host (Serial, OpenMP, Threads): there the kernels use
/// one thread per work item (the league is the parallelism, inner loops vectorise) instead of a
/// cooperative team, and GPU-only tuning (leaf size, team sizes) does not apply.
template <class ExecutionSpace>
inline constexpr bool is_host_execution_space =
    Kokkos::SpaceAccessibility<ExecutionSpace, Kokkos::HostSpace>::accessible;

}  // namespace kfmm::detail
