/// \file segmented_scan.hpp
/// Segmented sums by Kokkos::parallel_scan: the atomic-free reduction of the baseline M2L lane.
///
/// The input is a sequence of values cut into contiguous segments (a segment starts where
/// `is_head(i)` holds; element 0 always starts one). The scan carries pairs (v, head) under the
/// associative operator
///     (v_a, h_a) (+) (v_b, h_b) = (h_b ? v_b : v_a + v_b,  h_a | h_b),
/// so the inclusive scan at the last element of a segment is the sum of that segment. The sum's
/// association depends only on the scan's fixed partition of the range (for a given backend and
/// thread count), so results are bitwise reproducible run after run; no atomics are involved.
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm::detail {

/// Value carried by the segmented scan.
template <class Real>
struct SegmentedValue {
  Real v;
  int head;
};

/// Functor for Kokkos::parallel_scan over [0, n). `Access` provides (device-callable):
///   Real value(int i) const;  bool is_head(int i) const;  bool is_tail(int i) const;
///   void tail(int i, Real segment_sum) const;   // called once per segment, at its last element
template <class Real, class Access>
struct SegmentedScan {
  using value_type = SegmentedValue<Real>;
  Access access;

  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& update, const bool final) const {
    const Real v = access.value(i);
    const bool head = access.is_head(i);
    update.v = head ? v : update.v + v;
    update.head |= head ? 1 : 0;
    if (final && access.is_tail(i)) access.tail(i, update.v);
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& dst) const {
    dst.v = Real(0);
    dst.head = 0;
  }
  KOKKOS_INLINE_FUNCTION void join(value_type& dst, const value_type& src) const {
    dst.v = src.head ? src.v : dst.v + src.v;
    dst.head |= src.head;
  }
  // Kokkos 3.4-3.6 call join through volatile references (and fall back to operator+= without this
  // overload); Kokkos >= 3.7 select the overload above, so this one is never used there.
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& dst, const volatile value_type& src) const {
    const int src_head = src.head;
    const Real src_v = src.v;
    dst.v = src_head ? src_v : dst.v + src_v;
    dst.head = dst.head | src_head;
  }
};

/// Runs the segmented scan of `access` over [0, n) on `space` (see SegmentedScan).
template <class ExecutionSpace, class Real, class Access>
void segmented_scan(const ExecutionSpace& space, int n, const Access& access, const char* label) {
  if (n <= 0) return;
  Kokkos::parallel_scan(label, Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
                        SegmentedScan<Real, Access>{access});
}

}  // namespace kfmm::detail
