/// \file simd_pack.hpp
/// Pack<Real, W>: W reals with element-wise arithmetic, a portable SIMD value for host kernels that
/// run the same maths on W independent items at once (M2L pairs in m2l_csr_lanes.hpp, L2P particles in
/// l2p.hpp). Every operator is a fixed-trip loop over the lanes, which the compiler turns into SIMD
/// instructions; lane l of every value belongs to item l.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

namespace kfmm::detail {

/// W reals with element-wise arithmetic (a portable SIMD value for host code).
template <class Real, int W>
struct Pack {
  Real v[W];
  Pack() = default;
  // Copies lane by lane (a loop the compiler turns into full-width vector moves). The implicit copy of
  // the array went through 16-byte moves that the next 32-byte load could not forward from (a store
  // forwarding stall on 61 % of rotate_z's samples with AVX2).
  KOKKOS_FORCEINLINE_FUNCTION Pack(const Pack& o) {
    for (int l = 0; l < W; ++l) v[l] = o.v[l];
  }
  KOKKOS_FORCEINLINE_FUNCTION Pack& operator=(const Pack& o) {
    for (int l = 0; l < W; ++l) v[l] = o.v[l];
    return *this;
  }
  KOKKOS_FORCEINLINE_FUNCTION explicit Pack(Real x) {
    for (int l = 0; l < W; ++l) v[l] = x;
  }
  template <class T, class = std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, Real>>>
  KOKKOS_FORCEINLINE_FUNCTION explicit Pack(T x) : Pack(static_cast<Real>(x)) {}
  KOKKOS_FORCEINLINE_FUNCTION Pack& operator+=(const Pack& b) {
    for (int l = 0; l < W; ++l) v[l] += b.v[l];
    return *this;
  }
  KOKKOS_FORCEINLINE_FUNCTION Pack& operator-=(const Pack& b) {
    for (int l = 0; l < W; ++l) v[l] -= b.v[l];
    return *this;
  }
  KOKKOS_FORCEINLINE_FUNCTION Pack& operator*=(const Pack& b) {
    for (int l = 0; l < W; ++l) v[l] *= b.v[l];
    return *this;
  }
  KOKKOS_FORCEINLINE_FUNCTION friend Pack operator+(Pack a, const Pack& b) { return a += b; }
  KOKKOS_FORCEINLINE_FUNCTION friend Pack operator-(Pack a, const Pack& b) { return a -= b; }
  KOKKOS_FORCEINLINE_FUNCTION friend Pack operator*(Pack a, const Pack& b) { return a *= b; }
  KOKKOS_FORCEINLINE_FUNCTION friend Pack operator-(const Pack& a) {
    Pack r;
    for (int l = 0; l < W; ++l) r.v[l] = -a.v[l];
    return r;
  }
};

/// True for Pack<Real, W>: generic maths that divides (solid_harmonics.hpp) takes its divisors as scalars.
template <class T>
inline constexpr bool is_pack = false;
template <class Real, int W>
inline constexpr bool is_pack<Pack<Real, W>> = true;

}  // namespace kfmm::detail
