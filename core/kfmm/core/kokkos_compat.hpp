/// \file kokkos_compat.hpp
/// The one place where kfmm adapts to the Kokkos and Kokkos Kernels version it is built against
/// (Kokkos 3.4 from Debian's trilinos 13.2, and current Kokkos 4.x / 5.x). Every version `#if`
/// of the project lives in this header; everything else is written against `kfmm::compat`.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>

namespace kfmm::compat {

// Kokkos 3.4-3.6 keep the math functions in Kokkos::Experimental; 3.7 moved them to Kokkos:: and
// Kokkos 4 deprecated (5 removed) the Experimental spellings.
#if KOKKOS_VERSION >= 30700
using Kokkos::abs;
using Kokkos::cbrt;
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::fmax;
using Kokkos::fmin;
using Kokkos::log;
using Kokkos::pow;
using Kokkos::sqrt;
#else
using Kokkos::Experimental::cbrt;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::fmax;
using Kokkos::Experimental::fmin;
using Kokkos::Experimental::log;
using Kokkos::Experimental::pow;
using Kokkos::Experimental::sqrt;
template <class T>
KOKKOS_INLINE_FUNCTION T abs(T x) {
  return x < T(0) ? -x : x;
}
#endif

/// Reciprocal square root: the hardware instruction on NVIDIA GPUs, 1/sqrt elsewhere.
KOKKOS_INLINE_FUNCTION float rsqrt(float x) {
#if defined(__CUDA_ARCH__)
  return ::rsqrtf(x);
#else
  return 1.0f / sqrt(x);
#endif
}
KOKKOS_INLINE_FUNCTION double rsqrt(double x) {
#if defined(__CUDA_ARCH__)
  return ::rsqrt(x);
#else
  return 1.0 / sqrt(x);
#endif
}

/// `KFMM_PRAGMA_UNROLL` before a loop asks device compilers (CUDA, HIP) to unroll it completely
/// when its trip count is a compile-time constant (operators templated on the expansion order).
/// Host compilers get nothing: their own heuristics decide, and runtime-order loops stay compact.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define KFMM_PRAGMA_UNROLL _Pragma("unroll")
#else
#define KFMM_PRAGMA_UNROLL
#endif

/// True when the translation unit is compiled for a device (the code path inside a GPU kernel).
KOKKOS_INLINE_FUNCTION constexpr bool on_device() {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return true;
#else
  return false;
#endif
}

/// Number of threads an execution space instance runs (a static member in Kokkos 3, a member in 4+;
/// calling it on an instance works in both).
template <class ExecutionSpace>
int concurrency(const ExecutionSpace& space) {
  return static_cast<int>(space.concurrency());
}

/// Kokkos version as a string for reports, e.g. "3.4.1".
inline const char* kokkos_version_string() {
#define KFMM_STR2(x) #x
#define KFMM_STR(x) KFMM_STR2(x)
  return KFMM_STR(KOKKOS_VERSION);
#undef KFMM_STR
#undef KFMM_STR2
}

}  // namespace kfmm::compat
