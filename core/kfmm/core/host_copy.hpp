/// \file host_copy.hpp
/// The host round trip of a series of kernels: copy a few device values back and wait for that series only.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>

namespace kfmm::detail {

/// Copies the first `count` values of the rank-1 View `src` to host memory `dst` once the work submitted
/// to `space` so far is done, and waits for that instance only: work submitted to other instances goes
/// on (Kokkos 3.4's deep_copy without an instance fences the whole device: the solver's side stream,
/// core/side_instance.hpp, would hold the host at every round trip of the main one).
template <class ExecutionSpace, class View>
void copy_to_host(const ExecutionSpace& space, typename View::non_const_value_type* dst, const View& src,
                  std::size_t count) {
  Kokkos::deep_copy(space, Kokkos::View<typename View::non_const_value_type*, Kokkos::HostSpace>(dst, count),
                    Kokkos::subview(src, Kokkos::make_pair(std::size_t(0), count)));
  space.fence();
}

}  // namespace kfmm::detail
