/// \file bounding_box.hpp
/// The axis-aligned bounding box of a particle set, by one parallel reduction on the execution space,
/// together with a count of non-finite inputs so that NaN or infinite coordinates (and masses) are
/// rejected before they can poison the Morton keys.
#pragma once

#include <Kokkos_Core.hpp>

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"

namespace kfmm {

/// Axis-aligned bounding box in double precision (exact for float and double inputs).
/// An empty box has lo = +DBL_MAX and hi = -DBL_MAX on every axis.
struct BoundingBox {
  double lo[3] = {DBL_MAX, DBL_MAX, DBL_MAX};
  double hi[3] = {-DBL_MAX, -DBL_MAX, -DBL_MAX};

  /// True when the box contains no point.
  bool empty() const { return !(lo[0] <= hi[0]); }
  /// Largest edge length (0 for a single point, negative for an empty box).
  double max_extent() const {
    double e = hi[0] - lo[0];
    for (int a = 1; a < 3; ++a) e = (hi[a] - lo[a]) > e ? (hi[a] - lo[a]) : e;
    return e;
  }
};

namespace detail {

/// True unless x is NaN or infinite. Tests the exponent bits, so it stays correct under fast-math
/// flags that let compilers assume finite arithmetic.
KOKKOS_INLINE_FUNCTION bool is_finite(double x) {
  std::uint64_t bits = 0;
  memcpy(&bits, &x, sizeof(bits));
  return ((bits >> 52) & 0x7ffu) != 0x7ffu;
}

/// Reduction value of the bounding-box pass: box plus the number of non-finite inputs. Its `+=` is
/// the merge of two partial results (Kokkos' default join). Kokkos 3.4 joins through volatile
/// references and Kokkos 4+ through plain ones, so both overloads exist; the unused one is inert.
struct BoxReduction {
  double lo[3], hi[3];
  long long non_finite;

  KOKKOS_INLINE_FUNCTION BoxReduction()
      : lo{DBL_MAX, DBL_MAX, DBL_MAX}, hi{-DBL_MAX, -DBL_MAX, -DBL_MAX}, non_finite(0) {}
  KOKKOS_INLINE_FUNCTION void operator+=(const BoxReduction& o) {
    for (int a = 0; a < 3; ++a) {
      lo[a] = o.lo[a] < lo[a] ? o.lo[a] : lo[a];
      hi[a] = o.hi[a] > hi[a] ? o.hi[a] : hi[a];
    }
    non_finite += o.non_finite;
  }
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile BoxReduction& o) volatile {
    for (int a = 0; a < 3; ++a) {
      lo[a] = o.lo[a] < lo[a] ? o.lo[a] : lo[a];
      hi[a] = o.hi[a] > hi[a] ? o.hi[a] : hi[a];
    }
    non_finite = non_finite + o.non_finite;  // no compound assignment on volatile (C++20)
  }
};

/// Work item `item` of the box pass: elements item, item + items, ... A functor, not a lambda: in
/// CUDA builds nvcc wrapped this reduction's host-device lambda in a type-erased holder whose deleter
/// lives in each translation unit's anonymous namespace; with the holder's constructor and destructor
/// merged from different translation units, Serial runs called a null deleter (seen on the H200).
template <class PositionsView, class MassesView>
struct BoxReduce {
  PositionsView positions;
  MassesView masses;
  int n, n_pos, n_mass, items;
  KOKKOS_INLINE_FUNCTION void operator()(const int item, BoxReduction& acc) const {
    for (int i = item; i < n; i += items) {
      if (i < n_pos) {
        for (int a = 0; a < 3; ++a) {
          const double x = static_cast<double>(positions(i, a));
          if (is_finite(x)) {
            acc.lo[a] = x < acc.lo[a] ? x : acc.lo[a];
            acc.hi[a] = x > acc.hi[a] ? x : acc.hi[a];
          } else {
            acc.non_finite += 1;
          }
        }
      }
      if (i < n_mass && !is_finite(static_cast<double>(masses(i)))) acc.non_finite += 1;
    }
  }
};

/// One pass over positions (n x 3) and masses (n, or 0 to skip them): the box of the positions and
/// the number of non-finite coordinates and masses.
template <class ExecutionSpace, class PositionsView, class MassesView>
BoxReduction reduce_box(const ExecutionSpace& space, const PositionsView& positions,
                        const MassesView& masses) {
  const int n_pos = static_cast<int>(positions.extent(0));
  const int n_mass = static_cast<int>(masses.extent(0));
  const int n = n_pos > n_mass ? n_pos : n_mass;
  BoxReduction result;
  if (n == 0) return result;
  const int items = reduction_items<ExecutionSpace>(n);
  Kokkos::parallel_reduce("kfmm::bounding_box", Kokkos::RangePolicy<ExecutionSpace>(space, 0, items),
                          BoxReduce<PositionsView, MassesView>{positions, masses, n, n_pos, n_mass, items},
                          result);
  return result;
}

}  // namespace detail

/// Bounding box of `positions` (a View of n x 3 coordinates accessible from `space`), computed by a
/// parallel reduction on `space`. Throws kfmm::Error if a coordinate is NaN or infinite.
template <class ExecutionSpace, class PositionsView>
BoundingBox bounding_box(const ExecutionSpace& space, const PositionsView& positions) {
  const auto r = detail::reduce_box(space, positions,
                                    Kokkos::View<const double*, typename ExecutionSpace::memory_space>());
  require(r.non_finite == 0, "positions: ", r.non_finite, " coordinates are NaN or infinite");
  BoundingBox box;
  for (int a = 0; a < 3; ++a) {
    box.lo[a] = r.lo[a];
    box.hi[a] = r.hi[a];
  }
  return box;
}

}  // namespace kfmm
