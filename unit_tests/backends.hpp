// The execution spaces every backend-templated test runs on: each enabled Kokkos backend once.
// Use with TEMPLATE_LIST_TEST_CASE("...", "[...]", kfmm_test::ExecutionSpaces).
#pragma once

#include <Kokkos_Core.hpp>

#include <tuple>

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

/// Copies a device View to a host mirror (a no-op copy on host spaces).
template <class View>
auto to_host(const View& v) {
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
}

}  // namespace kfmm_test
