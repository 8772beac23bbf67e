# Injected by scripts/bootstrap.sh into the Kokkos Kernels build (CMAKE_PROJECT_KokkosKernels_INCLUDE):
# with CMake >= 4, Kokkos 3.4's exported CUDA::cudart / CUDA::cuda_driver targets break generation unless
# CUDAToolkit was found before find_package(Kokkos) (docs/gpu.md). Harmless with older CMake.
find_package(CUDAToolkit QUIET)
