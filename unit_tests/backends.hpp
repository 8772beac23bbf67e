// The execution spaces every backend-templated test runs on: each enabled Kokkos backend once.
// Use with TEMPLATE_LIST_TEST_CASE("...", "[...]", kfmm_test::ExecutionSpaces).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

namespace kfmm_test {

using ExecutionSpaces = std::tuple<
#if defined(KOKKOS_ENABLE_SERIAL)
    Kokkos::Serial
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
#if defined(KOKKOS_ENABLE_SERIAL)
    ,
#endif
    Kokkos::OpenMP
#endif
#if defined(KOKKOS_ENABLE_CUDA)
    ,
    Kokkos::Cuda
#endif
    >;

/// The most threads per team the default host backend runs (1 for Serial): tests of the GPU code paths
/// (several threads per team) on the host skip themselves below 2.
inline int host_max_team_size() {
  using Space = Kokkos::DefaultHostExecutionSpace;
  return Kokkos::TeamPolicy<Space>(1, 1).team_size_max([](const Kokkos::TeamPolicy<Space>::member_type&) {},
                                                       Kokkos::ParallelForTag());
}

/// An int View in `Memory` holding `values` (node ids, CSR offsets and the like for the tests).
template <class Memory>
Kokkos::View<int*, Memory> device_ints(const std::vector<int>& values, const char* label = "ints") {
  Kokkos::View<int*, Memory> v(std::string(label), values.size());
  auto h = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < values.size(); ++i) h(i) = values[i];
  Kokkos::deep_copy(v, h);
  return v;
}

/// Copies a device View to a host mirror (a no-op copy on host spaces).
template <class View>
auto to_host(const View& v) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

}  // namespace kfmm_test
