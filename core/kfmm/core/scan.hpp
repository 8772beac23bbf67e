/// \file scan.hpp
/// The scan seam: an in-place exclusive prefix sum of unsigned integer counts, the step that turns
/// per-item output counts into write offsets (count kernel -> scan -> emit kernel). Every layer that
/// compacts through counts calls `exclusive_scan_in_place`, so a backend's fastest scan can replace
/// the portable one here.
///
/// Portable path: one Kokkos::parallel_scan. CUDA builds with KFMM_ENABLE_CUB_SORT (CMake option of the
/// same name, default ON) use CUB's decoupled look-back scan instead: one pass over the data, where
/// Kokkos 3.4's CUDA scan makes two and synchronises its blocks per 128 items. Integer sums are exact
/// and associative, so both paths give identical offsets.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/view_capacity.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(KFMM_ENABLE_CUB_SORT)
#include <cub/device/device_scan.cuh>
#define KFMM_CORE_HAVE_CUB_SCAN 1
#endif

namespace kfmm {

/// Reusable temporary storage of exclusive_scan_in_place (grown on demand).
template <class MemorySpace>
struct ScanWorkspace {
  Kokkos::View<unsigned char*, MemorySpace> bytes;  ///< temporary storage of a vendor scan
};

namespace detail {

/// counts(i) <- sum of counts(0 .. i-1) for i in [0, n]; with counts(n) = 0 on entry it ends as the total.
template <class Counts>
struct ExclusiveScanInPlace {
  using value_type = typename Counts::non_const_value_type;
  Counts counts;
  KOKKOS_INLINE_FUNCTION void operator()(const int i, value_type& sum, const bool final) const {
    const value_type x = counts(i);
    if (final) counts(i) = sum;
    sum += x;
  }
};

}  // namespace detail

/// Replaces counts(0 .. n-1) by their exclusive prefix sums and stores the total in counts(n), which
/// must exist and hold 0 on entry (the count kernel writes it). Asynchronous: the total stays on the
/// device (kernels that follow read it from counts(n)). T is an unsigned integer type; sums must not
/// wrap.
template <class ExecutionSpace, class T, class... Props>
void exclusive_scan_in_place_on_device(const ExecutionSpace& space, const Kokkos::View<T*, Props...>& counts,
                                       int n,
                                       ScanWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  static_assert(std::is_unsigned<T>::value, "exclusive_scan_in_place: counts must be unsigned integers");
  require(n >= 0 && static_cast<size_t>(n) < counts.extent(0), "exclusive_scan_in_place: n = ", n,
          " needs counts of at least n + 1 entries, got ", counts.extent(0));
#if defined(KFMM_CORE_HAVE_CUB_SCAN)
  if constexpr (std::is_same<ExecutionSpace, Kokkos::Cuda>::value) {
    size_t bytes = 0;
    cudaError_t status = cub::DeviceScan::ExclusiveSum(nullptr, bytes, counts.data(), counts.data(), n + 1,
                                                       space.cuda_stream());
    require(status == cudaSuccess,
            "exclusive_scan_in_place: cub size query failed: ", cudaGetErrorString(status));
    detail::reserve_at_least(workspace.bytes, static_cast<long long>(bytes), "kfmm::scan::bytes");
    status = cub::DeviceScan::ExclusiveSum(workspace.bytes.data(), bytes, counts.data(), counts.data(), n + 1,
                                           space.cuda_stream());
    require(status == cudaSuccess, "exclusive_scan_in_place: cub scan failed: ", cudaGetErrorString(status));
    return;
  }
#endif
  (void)workspace;
  Kokkos::parallel_scan("kfmm::exclusive_scan_in_place", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n + 1),
                        detail::ExclusiveScanInPlace<Kokkos::View<T*, Props...>>{counts});
}

/// exclusive_scan_in_place_on_device, then the total copied to the host (waits for the scan).
template <class ExecutionSpace, class T, class... Props>
T exclusive_scan_in_place(const ExecutionSpace& space, const Kokkos::View<T*, Props...>& counts, int n,
                          ScanWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  exclusive_scan_in_place_on_device(space, counts, n, workspace);
  T total = 0;
  Kokkos::deep_copy(total, Kokkos::subview(counts, n));
  return total;
}

}  // namespace kfmm
