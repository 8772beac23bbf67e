/// \file expansion_layout.hpp
/// Packing of real solid-harmonic expansions (Dehnen 2014, arXiv:1405.2255): an expansion of order p
/// holds (p+1)^2 real coefficients; degree n occupies the slots [n^2, n^2 + 2n + 1) with order
/// m = -n..n at slot n^2 + n + m. m >= 0 slots hold the cosine (real) part, m < 0 the sine
/// (imaginary) part of the complex coefficient of order |m|.
/// Expansions of many nodes are stored node-major: a rank-2 View (nodes, coefficients), one
/// contiguous row per node (LayoutRight).
#pragma once

#include <Kokkos_Core.hpp>

#include "kfmm/core/error.hpp"

namespace kfmm {

/// Highest expansion order kfmm supports.
inline constexpr int max_order = 16;

/// Number of coefficients of an expansion of order p.
KOKKOS_INLINE_FUNCTION constexpr int num_coefficients(int order) {
  return (order + 1) * (order + 1);
}

/// Slot of the coefficient of degree n and order m (|m| <= n).
KOKKOS_INLINE_FUNCTION constexpr int coefficient_index(int n, int m) {
  return n * n + n + m;
}

/// Throws kfmm::Error unless 0 <= order <= max_order. `what` names the argument in the message.
inline void check_order(int order, const char* what = "order") {
  require(order >= 0 && order <= max_order, what, " = ", order, " is out of range: kfmm supports orders 0..",
          max_order);
}

/// Row length (reals) for storing expansions of order p: num_coefficients(p) rounded up to 4 times an
/// odd number. A multiple of 4 keeps every row 16-byte aligned, so the GPU M2L reads a source row with
/// 16-byte loads (a warp reads 32 different rows at once: with one load per coefficient each request
/// touched 32 sectors, and L1 was the M2L's bottleneck on the H200); an odd multiple of 4 is never a
/// multiple of 16, so the rows of a warp do not fall into few L1 sets (with 64 floats, 256 bytes at
/// p = 7, the M2L ran 1.6x slower than at p = 8: docs/benchmarks.md). Operators take rows of any length
/// >= num_coefficients(p); the 16-byte loads need rows whose length is a multiple of 16 bytes.
KOKKOS_INLINE_FUNCTION constexpr int expansion_row_length(int order) {
  const int quads = (num_coefficients(order) + 3) / 4;  // 4 reals each, rounded up
  return 4 * (quads % 2 == 1 ? quads : quads + 1);
}

/// Stride (reals) of per-thread expansion rows in GPU team scratch: nc rounded up to an odd number, so
/// that the threads of a warp writing the same coefficient of their own rows hit different banks (with
/// nc = 64, p = 7, every write was a 32-way bank conflict; P2M took 9x its p = 6 time on the H200).
KOKKOS_INLINE_FUNCTION constexpr int expansion_scratch_stride(int nc) {
  return nc | 1;
}

/// Node-major expansion storage: one row of at least num_coefficients(p) reals per node (the solver's
/// rows are expansion_row_length(p) long).
template <class Real, class MemorySpace>
using ExpansionView = Kokkos::View<Real**, Kokkos::LayoutRight, MemorySpace>;

}  // namespace kfmm
