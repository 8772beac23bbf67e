/// \file kokkos_compat.hpp
/// The one place where kfmm adapts to the Kokkos and Kokkos Kernels version it is built against
/// (Kokkos 3.4 from Debian's trilinos 13.2, and current Kokkos 4.x / 5.x). Every version `#if`
/// of the project lives in this header; everything else is written against `kfmm::compat`.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <string>
#include <type_traits>

/// Reduction value types joined by Kokkos' default join (operator+=): Kokkos 3.x joins through
/// `volatile` references, Kokkos 4+ through plain ones (and C++20, which Kokkos 5 requires, deprecates
/// compound assignment to volatile). Declare the volatile overload inside this macro so it exists only
/// where it is used:
///   KFMM_COMPAT_VOLATILE_JOIN(KOKKOS_INLINE_FUNCTION void operator+=(const volatile T& o) volatile {...})
#if KOKKOS_VERSION < 40000
#define KFMM_COMPAT_VOLATILE_JOIN(...) __VA_ARGS__
#else
#define KFMM_COMPAT_VOLATILE_JOIN(...)
#endif

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
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || defined(KOKKOS_ENABLE_SYCL) || \
    defined(KOKKOS_ENABLE_OPENMPTARGET)
// With a device backend Kokkos 3.4 declares no long double overloads (Kokkos 4+ has host-only ones);
// host reference code (the tests' long double references) needs them. Callable from host-device
// templates; in device code (where long double is double anyway) they compute in double.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define KFMM_COMPAT_LONG_DOUBLE_1(name)                    \
  KOKKOS_INLINE_FUNCTION long double name(long double x) { \
    return name(static_cast<double>(x));                   \
  }
#define KFMM_COMPAT_LONG_DOUBLE_2(name)                                   \
  KOKKOS_INLINE_FUNCTION long double name(long double x, long double y) { \
    return name(static_cast<double>(x), static_cast<double>(y));          \
  }
#else
#define KFMM_COMPAT_LONG_DOUBLE_1(name)                    \
  KOKKOS_INLINE_FUNCTION long double name(long double x) { \
    return std::name(x);                                   \
  }
#define KFMM_COMPAT_LONG_DOUBLE_2(name)                                   \
  KOKKOS_INLINE_FUNCTION long double name(long double x, long double y) { \
    return std::name(x, y);                                               \
  }
#endif
KFMM_COMPAT_LONG_DOUBLE_1(cbrt)
KFMM_COMPAT_LONG_DOUBLE_1(exp)
KFMM_COMPAT_LONG_DOUBLE_1(fabs)
KFMM_COMPAT_LONG_DOUBLE_2(fmax)
KFMM_COMPAT_LONG_DOUBLE_2(fmin)
KFMM_COMPAT_LONG_DOUBLE_1(log)
KFMM_COMPAT_LONG_DOUBLE_2(pow)
KFMM_COMPAT_LONG_DOUBLE_1(sqrt)
#undef KFMM_COMPAT_LONG_DOUBLE_1
#undef KFMM_COMPAT_LONG_DOUBLE_2
#endif
#endif

/// Reciprocal square root of a normal, finite x > 0 (the callers' contract: rsqrt_or_zero below guards
/// zero and subnormal x): 1/sqrt on the host, hardware-based on NVIDIA GPUs.
/// Float: the bare approximate instruction with denormals flushed (`rsqrt.approx.ftz.f32`, the
/// precision of rsqrtf, 2^-22.9): rsqrtf itself wraps it in a denormal rescaling that cost the P2P
/// inner loop 5 of its 28 instructions per pair.
KOKKOS_INLINE_FUNCTION float rsqrt(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / sqrt(x);
#endif
}
/// Double: the hardware's seed (`rsqrt.approx.ftz.f64`, the reciprocal square root of x's upper 32
/// bits, ~21 correct bits) and one second-order step, y' = y (1 + e/2 + 3 e^2/8) with e = 1 - x y^2,
/// whose truncation error 5 e^3 / 16 ~ 2^-62 is below double's rounding: five double operations,
/// within 2 ulp (unit test "compat::rsqrt"). CUDA's rsqrt(double) is PTX `rsqrt.approx.f64`, which the
/// PTX ISA calls emulated in software and relatively slow; it also handles the inputs outside the
/// contract, which cost its callers a branch. Outside the contract: an infinite x (a squared distance
/// that overflowed: finite coordinates ~1e154 apart, which the solver's length rescaling rules out)
/// gives NaN here where CUDA's rsqrt and the host give 0. Clamping x first (fmin) cost the fp64 P2P
/// 20 % on the H200, more than the whole gain, so it is not done.
/// (e is formed as (-x y) y, not fma(-x, y^2, 1): y^2 underflows for x above 2^1022.)
KOKKOS_INLINE_FUNCTION double rsqrt(double x) {
#if defined(__CUDA_ARCH__)
  double y;
  asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(x));
  const double e = ::fma(-x * y, y, 1.0);
  return ::fma(y * e, ::fma(e, 0.375, 0.5), y);
#else
  return 1.0 / sqrt(x);
#endif
}

/// a * b + c, fused where the target has the instruction. The project's own host code compiles with
/// -ffp-contract=off (g++ contracted one kernel differently in its Serial and OpenMP instantiations);
/// the hot loops that gain from fused multiply-adds ask for them here, explicitly, which rounds the same
/// in every instantiation. Host without FMA (x86-64 baseline): the plain expression, never a library
/// call. GPUs: the expression, which nvcc contracts as before.
template <class Real, std::enable_if_t<std::is_floating_point_v<Real>, int> = 0>
KOKKOS_FORCEINLINE_FUNCTION Real fmadd(Real a, Real b, Real c) {
#if defined(__CUDA_ARCH__) || !defined(__FMA__)
  return a * b + c;
#else
  return std::fma(a, b, c);
#endif
}

/// 1 in host code compiled by g++ or clang (not a CUDA, HIP or SYCL device pass): the `__builtin_*` /
/// `__atomic_*` builtins are available.
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__) && !defined(__SYCL_DEVICE_ONLY__) && \
    (defined(__GNUC__) || defined(__clang__))
#define KFMM_HOST_GNU_BUILTINS 1
#else
#define KFMM_HOST_GNU_BUILTINS 0
#endif

/// Asks the host's caches to fetch [p, p + bytes) for reading ahead of use (a hint; no effect in device
/// code or with compilers without the builtin). For loops whose next iteration's addresses are known
/// but random, where the hardware prefetchers cannot guess them.
KOKKOS_FORCEINLINE_FUNCTION void prefetch(const void* p, int bytes) {
#if KFMM_HOST_GNU_BUILTINS
  const char* c = static_cast<const char*>(p);
  for (int b = 0; b < bytes; b += 64) __builtin_prefetch(c + b);
  __builtin_prefetch(c + bytes - 1);
#else
  (void)p;
  (void)bytes;
#endif
}

/// The smallest normal number of Real (FLT_MIN, DBL_MIN), usable in device code.
template <class Real>
KOKKOS_INLINE_FUNCTION constexpr Real smallest_normal() {
  return std::is_same_v<Real, float> ? static_cast<Real>(1.17549435082228750797e-38)
                                     : static_cast<Real>(2.22507385850720138309e-308);
}

/// 1/sqrt(x) for x >= the smallest normal number of Real and 0 otherwise (x >= 0 or NaN), without a
/// branch the compiler keeps. Below that bound (particles closer than ~1.1e-19 in float, ~1.5e-154
/// in double) a pair term would overflow anyway, and the GPU's flushed rsqrt would return inf: such
/// pairs count as coincident. On NVIDIA GPUs a select around the hardware rsqrt; on the host
/// arithmetic (live = 1 or 0, a dead value takes 1/sqrt(1) times 0), because g++ keeps loops with
/// `x > 0 ? 1/sqrt(x) : 0` scalar (it will not speculate a division that may trap): the host P2P
/// lanes ran 3.5x slower.
template <class Real>
KOKKOS_INLINE_FUNCTION Real rsqrt_or_zero(Real x) {
#if defined(__CUDA_ARCH__)
  return x >= smallest_normal<Real>() ? rsqrt(x) : Real(0);
#else
  const Real live = static_cast<Real>(x >= smallest_normal<Real>());
  return live * rsqrt(x + (Real(1) - live));
#endif
}

/// A value that another thread of the same kernel may have written, read past this core's cache
/// (volatile: on GPUs L1 is not coherent, and a line cached earlier may predate the write). For
/// naturally aligned scalars of at most 8 bytes the load cannot tear.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION T coherent_load(const T& value) {
  return *static_cast<const volatile T*>(&value);
}

/// `policy` with Kokkos' light-weight work-item hint (the same spelling in Kokkos 3.4, 4.x and 5.x). On
/// CUDA a functor of 512 bytes or more is otherwise launched from constant memory: per launch the host
/// waits (cudaEventSynchronize) until the instance's previous constant-memory kernel has finished, then
/// copies the functor host-to-device; with the hint, functors under the 4 KB parameter limit travel in
/// the kernel's parameters. Other backends ignore it.
template <class Policy>
auto light_weight(const Policy& policy) {
  return Kokkos::Experimental::require(policy, Kokkos::Experimental::WorkItemProperty::HintLightWeight);
}

/// Publishes `value` to `flag` after every earlier write of this thread (and, through a preceding team
/// barrier, of its team) is visible device-wide: a release store. NVIDIA GPUs: `st.release.gpu`, whose
/// ordering costs less than a full `fence.sc` (Kokkos::memory_fence) before the store; elsewhere the
/// release builtin of host compilers, or a fence and an atomic store.
KOKKOS_FORCEINLINE_FUNCTION void store_release(unsigned& flag, unsigned value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(&flag), "r"(value) : "memory");
#elif KFMM_HOST_GNU_BUILTINS
  __atomic_store_n(&flag, value, __ATOMIC_RELEASE);
#else
  Kokkos::memory_fence();
  Kokkos::atomic_exchange(&flag, value);
#endif
}

/// Reads a flag written by store_release; the reads that follow see everything written before it: an
/// acquire load (NVIDIA GPUs: `ld.acquire.gpu`; host compilers: the atomic builtin; elsewhere a coherent
/// load and a fence).
KOKKOS_FORCEINLINE_FUNCTION unsigned load_acquire(const unsigned& flag) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  unsigned value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(value) : "l"(&flag) : "memory");
  return value;
#elif KFMM_HOST_GNU_BUILTINS
  return __atomic_load_n(&flag, __ATOMIC_ACQUIRE);  // (host: an atomic acquire load, no data race)
#else
  const unsigned value = coherent_load(flag);
  Kokkos::memory_fence();
  return value;
#endif
}

/// `KFMM_PRAGMA_UNROLL` before a loop asks device compilers (CUDA, HIP) to unroll it completely
/// when its trip count is a compile-time constant (operators templated on the expansion order).
/// Host compilers get nothing: forcing complete unrolling there (`#pragma GCC unroll`) made the M2L
/// 3-4x faster on one CPU core but multiplied the compile time and memory of translation units that
/// instantiate many orders (tens of minutes, ~10 GB), see docs/operators.md.
/// `KFMM_PRAGMA_UNROLL_BY(n)` asks device compilers to unroll a loop of run-time trip count n times.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define KFMM_PRAGMA_UNROLL _Pragma("unroll")
#define KFMM_PRAGMA_UNROLL_BY(n) _Pragma(KFMM_STRINGIFY(unroll n))
#else
#define KFMM_PRAGMA_UNROLL
#define KFMM_PRAGMA_UNROLL_BY(n)
#endif
#define KFMM_STRINGIFY(x) #x

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

/// Kokkos version as a string for reports, e.g. "3.4.1" (KOKKOS_VERSION is major*10000 + minor*100 + patch).
inline const char* kokkos_version_string() {
  static const std::string version = std::to_string(KOKKOS_VERSION / 10000) + "." +
                                     std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
                                     std::to_string(KOKKOS_VERSION % 100);
  return version.c_str();
}

}  // namespace kfmm::compat

// Kokkos Kernels' per-team and per-thread rank-2 GEMV (small dense blocks applied inside kernels;
// docs/dense_blocks.md compares them with kfmm's hand-written loops). Kokkos Kernels 3.x has them in
// KokkosBatched (and defines no KOKKOSKERNELS_VERSION); from 4.0 KokkosBatched::TeamGemv wants a
// rank-3 (batched) matrix and the rank-2 forms live in KokkosBlas.
#if defined(KFMM_HAVE_KOKKOSKERNELS)
#include <KokkosKernels_config.h>
#if defined(KOKKOSKERNELS_VERSION)
#include <KokkosBlas2_serial_gemv.hpp>
#include <KokkosBlas2_team_gemv.hpp>
namespace kfmm::compat {
/// y = beta y + alpha A x by the threads of a team (A rank 2, no transpose).
template <class Member>
using TeamGemvN =
    KokkosBlas::TeamGemv<Member, KokkosBlas::Trans::NoTranspose, KokkosBlas::Algo::Gemv::Unblocked>;
/// y = beta y + alpha A x by one thread.
using SerialGemvN = KokkosBlas::SerialGemv<KokkosBlas::Trans::NoTranspose, KokkosBlas::Algo::Gemv::Unblocked>;
}  // namespace kfmm::compat
#else
#include <KokkosBatched_Gemv_Decl.hpp>
namespace kfmm::compat {
template <class Member>
using TeamGemvN =
    KokkosBatched::TeamGemv<Member, KokkosBatched::Trans::NoTranspose, KokkosBatched::Algo::Gemv::Unblocked>;
using SerialGemvN =
    KokkosBatched::SerialGemv<KokkosBatched::Trans::NoTranspose, KokkosBatched::Algo::Gemv::Unblocked>;
}  // namespace kfmm::compat
#endif
#endif
