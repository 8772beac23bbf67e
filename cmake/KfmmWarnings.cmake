# Compiler flags for the project's own targets (never forced on consumers of kfmm::kfmm).
add_library(kfmm_warnings INTERFACE)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(kfmm_warnings INTERFACE -Wall -Wextra)
  # Lets the compiler vectorise loops with sqrt (g++ otherwise keeps the scalar errno path).
  target_compile_options(kfmm_warnings INTERFACE -fno-math-errno)
  # No a*b+c -> fma contraction: g++ contracts wherever the target has FMA, and differently in the
  # Serial and the OpenMP instantiation of one kernel, which broke the bitwise Serial == OpenMP tree test
  # under -march=native. Costs ~7 % of the host P2P rate (docs/benchmarks.md, "CPU").
  target_compile_options(kfmm_warnings INTERFACE -ffp-contract=off)
endif()
option(KFMM_WARNINGS_AS_ERRORS "Treat warnings as errors" OFF)
if(KFMM_WARNINGS_AS_ERRORS AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(kfmm_warnings INTERFACE -Werror)
endif()

# The host backends' kernels (P2P lanes, M2L lane packs) are written for the compiler to vectorise; the
# x86-64 baseline allows only SSE2 (2 doubles). On the 2-core Zen 4 development machine -march=native
# (AVX2 + FMA) doubles the host P2P rate (docs/benchmarks.md, "CPU"). Binaries built so run only on
# CPUs with the build machine's instruction set; switch it off to build portable binaries. Host-compiler
# builds only: a CUDA build's host code is not where its time goes.
option(KFMM_NATIVE_ARCH "Compile the project's executables for the build machine's CPU (-march=native)" ON)
set(KFMM_HAVE_NATIVE_ARCH OFF)
if(KFMM_NATIVE_ARCH AND NOT _kfmm_has_CUDA AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native KFMM_COMPILER_HAS_MARCH_NATIVE)
  if(KFMM_COMPILER_HAS_MARCH_NATIVE)
    target_compile_options(kfmm_warnings INTERFACE -march=native)
    set(KFMM_HAVE_NATIVE_ARCH ON)
    message(STATUS "kfmm: executables compiled with -march=native (KFMM_NATIVE_ARCH)")
  endif()
endif()
