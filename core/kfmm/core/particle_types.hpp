/// \file particle_types.hpp
/// View aliases for particle data as the public API takes it: positions and accelerations as
/// `Real*[3]`, masses and potentials as `Real*`, all in the memory space of an execution space.
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm {

template <class Real, class MemorySpace>
using PositionView = Kokkos::View<Real* [3], MemorySpace>;
template <class Real, class MemorySpace>
using ScalarView = Kokkos::View<Real*, MemorySpace>;
/// Node particle ranges: ranges(i, 0) is the first particle of node i, ranges(i, 1) one past its last.
template <class MemorySpace>
using RangeView = Kokkos::View<int* [2], MemorySpace>;

}  // namespace kfmm
