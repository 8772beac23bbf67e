# Dependencies of the library target: Kokkos (required) and Kokkos Kernels (optional: kfmm uses its
# team-level dense kernels where they win, see docs/dense_blocks.md, and has hand-written loops for all).

# On CMake >= 4 with CUDA, Kokkos 3.4's exported CUDA targets need CUDAToolkit found first (docs/gpu.md).
find_package(CUDAToolkit QUIET)
find_package(Kokkos REQUIRED)

set(_kfmm_backends "")
foreach(_backend SERIAL OPENMP THREADS CUDA HIP SYCL)
  kokkos_check(DEVICES ${_backend} RETURN_VALUE _kfmm_has_${_backend})
  if(_kfmm_has_${_backend})
    list(APPEND _kfmm_backends ${_backend})
  endif()
endforeach()
message(STATUS "kfmm: Kokkos ${Kokkos_VERSION} from ${Kokkos_DIR}")
message(STATUS "kfmm: Kokkos backends: ${_kfmm_backends}")

option(KFMM_USE_KOKKOSKERNELS "Use Kokkos Kernels when it is found" ON)
set(KFMM_HAVE_KOKKOSKERNELS OFF)
if(KFMM_USE_KOKKOSKERNELS)
  find_package(KokkosKernels QUIET)
  if(KokkosKernels_FOUND)
    set(KFMM_HAVE_KOKKOSKERNELS ON)
    message(STATUS "kfmm: Kokkos Kernels ${KokkosKernels_VERSION} from ${KokkosKernels_DIR}")
  else()
    message(STATUS "kfmm: Kokkos Kernels not found; the hand-written dense kernels are used")
  endif()
endif()

# On CUDA the tree's sort seam (tree/kfmm/tree/sort.hpp) uses CUB's onesweep radix sort (CUDA toolkit).
option(KFMM_ENABLE_CUB_SORT "CUDA builds: the sort and scan seams (tree/sort.hpp, core/scan.hpp) use CUB" ON)
set(KFMM_HAVE_CUB_SORT OFF)
if(KFMM_ENABLE_CUB_SORT AND _kfmm_has_CUDA)
  set(KFMM_HAVE_CUB_SORT ON)
  message(STATUS "kfmm: CUB radix sort for the tree on CUDA")
endif()
