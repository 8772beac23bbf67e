/// \file segmented_scan.hpp
/// Segmented sums by Kokkos::parallel_scan: the atomic-free reduction of the baseline M2L lane.
///
/// The input is a sequence of values cut into contiguous segments; `segment(i)` names the segment of
/// element i by the index of its first element, so it never decreases along the sequence. The scan
/// carries pairs (key, v) under the operator "the larger key wins, equal keys add":
///     (k_a, v_a) (+) (k_b, v_b) = k_a == k_b ? (k_a, v_a + v_b) : the pair with the larger key,
/// with identity (-1, 0). Because keys never decrease, the inclusive scan at element i is
/// (segment(i), sum of the segment's elements up to i), and at the segment's last element its sum.
///
/// The operator is associative AND commutative. Commutativity matters: Kokkos 3.4's CUDA scan
/// accumulates each thread's strided elements (i, i + blockDim, ...) in its first pass before joining
/// threads, which is only right for a commutative join. The classic (v, head-flag) segmented operator
/// is not commutative and gave wrong sums there once a block held more elements than threads.
/// Round-off depends only on the scan's fixed partition of the range (for a given backend and thread
/// count), so results are bitwise reproducible run after run; no atomics are involved.
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm::detail {

/// Value carried by the segmented scan: the segment's key (index of its first element) and a sum.
template <class Real>
struct SegmentedValue {
  Real v;
  int key;
};

/// Functor for Kokkos::parallel_scan over [0, n). `Access` provides (device-callable):
///   Real value(int i) const;  int segment(int i) const;   // first index of i's segment, >= 0
///   bool is_tail(int i) const;  void tail(int i, Real segment_sum) const;  // once per segment
template <class Real, class Access>
struct SegmentedScan {
  using value_type = SegmentedValue<Real>;
  Access access;

  KOKKOS_INLINE_FUNCTION static void combine(int& key, Real& v, int src_key, Real src_v) {
    if (src_key == key) {
      v += src_v;
    } else if (src_key > key) {
      key = src_key;
      v = src_v;
    }
  }
  KOKKOS_INLINE_FUNCTION void operator()(int i, value_type& update, const bool final) const {
    combine(update.key, update.v, access.segment(i), access.value(i));
    if (final && access.is_tail(i)) access.tail(i, update.v);
  }
  KOKKOS_INLINE_FUNCTION void init(value_type& dst) const {
    dst.v = Real(0);
    dst.key = -1;
  }
  KOKKOS_INLINE_FUNCTION void join(value_type& dst, const value_type& src) const {
    combine(dst.key, dst.v, src.key, src.v);
  }
  // Kokkos 3.4-3.6 call join through volatile references (and fall back to operator+= without this
  // overload); Kokkos >= 3.7 select the overload above, so this one is never used there.
  KOKKOS_INLINE_FUNCTION void join(volatile value_type& dst, const volatile value_type& src) const {
    int key = dst.key;
    Real v = dst.v;
    combine(key, v, src.key, src.v);
    dst.key = key;
    dst.v = v;
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
