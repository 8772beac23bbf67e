/// \file m2l_baseline.hpp
/// The baseline M2L lane: the straightforward batched form the fused lane is measured against, and a
/// fallback. Pairs are processed in batches:
///   1. one thread per pair translates its source multipole (the same per-pair building blocks as the
///      fused lane) and writes the (p+1)^2 contributions to a global buffer, coefficient-major
///      (contrib(i, q): consecutive pairs are contiguous, so GPU stores coalesce);
///   2. a segmented Kokkos::parallel_scan (segmented_scan.hpp) over the flattened (coefficient, pair)
///      range sums the contributions of each target row within the batch; at the last pair of each
///      segment the sum is added to the target's local. No atomics; a row that spans two batches is
///      finished by two successive kernels, so the order is fixed and results are deterministic.
/// Optionally (M2LOptions::baseline_kokkos_kernels, with Kokkos Kernels; runtime-order maths only, it
/// exists for comparison) the z-axis translation of step 1 is one dense product per pair, H (p+1)x(p+1) times
/// X (p+1)x(2p+1), by KokkosBatched's SerialGemm: H_nk = (n+k)!/r^(n+k+1) for n + k <= p (zero beyond), X the
/// aligned multipole by (degree, order) (eq. of translation_z.hpp: L_n^m = w_m (-1)^(n+|m|) sum_k
/// (n+k)!/r^(n+k+1) M_k^m).
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/operators/csr_chunks.hpp"
#include "kfmm/operators/m2l_csr_options.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/segmented_scan.hpp"
#include "kfmm/operators/solid_harmonics.hpp"

#if defined(KFMM_HAVE_KOKKOSKERNELS)
#include <KokkosBatched_Gemm_Decl.hpp>
#include <KokkosBatched_Gemm_Serial_Impl.hpp>
#endif

namespace kfmm::detail {

#if defined(KFMM_HAVE_KOKKOSKERNELS)
/// M2L of one pair with the z-translation as a dense SerialGemm (see the file comment); adds to L.
template <int P, class Real>
KOKKOS_INLINE_FUNCTION void m2l_pair_dense_z(int order, const Real* M, Real dx, Real dy, Real dz, Real* L) {
  const int p = effective_order<P>(order);
  constexpr int cap = buffer_order<P>;
  constexpr int rows = cap + 1;
  constexpr int cols = 2 * cap + 1;
  Real a[(cap + 1) * (cap + 1)];
  Real h[rows * rows];
  Real x[rows * cols];
  Real y[rows * cols];
  for (int n = 0; n <= p; ++n)
    for (int m = -n; m <= n; ++m)
      a[coefficient_index(n, m)] = M[coefficient_index(n, m)] * static_cast<Real>(expansion_scale(n, m));
  const RotationAngles<Real> g = rotation_angles(dx, dy, dz);
  rotate_to_z<P>(order, g, a);
  // H_nk = (n+k)! / r^(n+k+1) for n + k <= p; X(k, m) = raw aligned multipole (zero for k < |m|)
  Real f[cap + 1];
  f[0] = g.rinv;
  for (int j = 1; j <= p; ++j) f[j] = f[j - 1] * (Real(j) * g.rinv);
  using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using Matrix = Kokkos::View<Real**, Kokkos::LayoutRight, Kokkos::AnonymousSpace, Unmanaged>;
  const int w = 2 * p + 1;
  Matrix H(h, p + 1, p + 1), X(x, p + 1, w), Y(y, p + 1, w);
  for (int n = 0; n <= p; ++n)
    for (int k = 0; k <= p; ++k) H(n, k) = n + k <= p ? f[n + k] : Real(0);
  for (int k = 0; k <= p; ++k)
    for (int m = -p; m <= p; ++m) {
      const int am = m < 0 ? -m : m;
      X(k, m + p) =
          am <= k ? a[coefficient_index(k, m)] * static_cast<Real>(expansion_inverse_scale(k, m)) : Real(0);
    }
  KokkosBatched::SerialGemm<KokkosBatched::Trans::NoTranspose, KokkosBatched::Trans::NoTranspose,
                            KokkosBatched::Algo::Gemm::Unblocked>::invoke(Real(1), H, X, Real(0), Y);
  for (int n = 0; n <= p; ++n)
    for (int m = -n; m <= n; ++m) {
      const int am = m < 0 ? -m : m;
      const Real sign_weight = Real(((n + am) & 1) ? -harmonic_weight(m) : harmonic_weight(m));
      a[coefficient_index(n, m)] =
          sign_weight * static_cast<Real>(expansion_inverse_scale(n, m)) * Y(n, m + p);
    }
  rotate_from_z<P>(order, g, a);
  for (int n = 0; n <= p; ++n)
    for (int m = -n; m <= n; ++m)
      L[coefficient_index(n, m)] += a[coefficient_index(n, m)] * static_cast<Real>(expansion_scale(n, m));
}
#endif

/// Step 1: contrib(i, q) = coefficient i of the M2L of pair q0 + q.
template <int P, bool DenseZ, class Mem, class CentresView, class MultipoleView, class Real>
struct M2LBaselinePairs {
  Kokkos::View<const int*, Mem> targets, sources, pair_row;
  CentresView centres;
  MultipoleView multipoles;
  Kokkos::View<Real**, Kokkos::LayoutRight, Mem> contrib;
  int q0;
  int order;
  int nc;

  KOKKOS_INLINE_FUNCTION void operator()(int q) const {
    const int k = q0 + q;
    const int t = targets(pair_row(k));
    const int s = sources(k);
    const Real dx = static_cast<Real>(centres(t, 0) - centres(s, 0));
    const Real dy = static_cast<Real>(centres(t, 1) - centres(s, 1));
    const Real dz = static_cast<Real>(centres(t, 2) - centres(s, 2));
    Real L[m2l_capacity<P>];
    for (int i = 0; i < nc; ++i) L[i] = Real(0);
#if defined(KFMM_HAVE_KOKKOSKERNELS)
    if constexpr (DenseZ) {
      m2l_pair_dense_z<P>(order, &multipoles(s, 0), dx, dy, dz, L);
    } else {
      m2l_pair_dispatch<P>(order, &multipoles(s, 0), dx, dy, dz, L);
    }
#else
    m2l_pair_dispatch<P>(order, &multipoles(s, 0), dx, dy, dz, L);
#endif
    for (int i = 0; i < nc; ++i) contrib(i, q) = L[i];
  }
};

/// Step 2: the segmented scan's view of the batch (segments = (coefficient, row) runs).
template <class Mem, class LocalView, class Real>
struct M2LBaselineSegments {
  Kokkos::View<const int*, Mem> targets, offsets, pair_row;
  Kokkos::View<const Real**, Kokkos::LayoutRight, Mem> contrib;
  LocalView locals;
  int q0;
  int nb;  // pairs in the batch

  KOKKOS_INLINE_FUNCTION Real value(int idx) const { return contrib(idx / nb, idx % nb); }
  /// The segment of idx: coefficient idx / nb of one row, keyed by its first index in the batch.
  KOKKOS_INLINE_FUNCTION int segment(int idx) const {
    const int first = offsets(pair_row(q0 + idx % nb)) - q0;
    return (idx / nb) * nb + (first > 0 ? first : 0);
  }
  KOKKOS_INLINE_FUNCTION bool is_tail(int idx) const {
    const int q = idx % nb;
    return q == nb - 1 || pair_row(q0 + q) != pair_row(q0 + q + 1);
  }
  KOKKOS_INLINE_FUNCTION void tail(int idx, Real sum) const {
    locals(targets(pair_row(q0 + idx % nb)), idx / nb) += sum;
  }
};

/// Runs the baseline lane at compile-time order P (P = -1: runtime order).
template <int P, class ExecutionSpace, class CentresView, class MultipoleView, class LocalView>
void m2l_baseline(const ExecutionSpace& space, int order,
                  const InteractionList<typename ExecutionSpace::memory_space>& far,
                  const CentresView& centres, const MultipoleView& multipoles, const LocalView& locals,
                  const M2LOptions& options) {
  using Mem = typename ExecutionSpace::memory_space;
  using Real = typename LocalView::non_const_value_type;
  const int rows = far.num_rows();
  const long long pairs = far.num_pairs();
  if (rows == 0 || pairs == 0) return;
#if !defined(KFMM_HAVE_KOKKOSKERNELS)
  require(!options.baseline_kokkos_kernels,
          "m2l: baseline_kokkos_kernels was requested but kfmm was built without Kokkos Kernels");
#endif
  const int nc = num_coefficients(order);
  const int np = static_cast<int>(pairs);

  // row of every pair
  Kokkos::View<int*, Mem> pair_row(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kfmm::m2l::pair_row"), np);
  auto offsets = far.offsets;
  Kokkos::parallel_for(
      "kfmm::m2l::baseline::pair_row", Kokkos::RangePolicy<ExecutionSpace>(space, 0, rows),
      KOKKOS_LAMBDA(int r) {
        for (int k = offsets(r); k < offsets(r + 1); ++k) pair_row(k) = r;
      });

  const long long budget = 32ll << 20;
  const long long fit = std::max<long long>(1024, budget / (static_cast<long long>(nc) * sizeof(Real)));
  const int batch = static_cast<int>(std::min<long long>(
      np, options.baseline_batch > 0 ? options.baseline_batch : std::min<long long>(fit, INT_MAX / nc)));
  require(static_cast<long long>(batch) * nc < INT_MAX, "m2l: baseline_batch = ", batch,
          " is too large at order ", order);
  Kokkos::View<Real**, Kokkos::LayoutRight, Mem> contrib(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kfmm::m2l::contrib"), nc, batch);

  for (int q0 = 0; q0 < np; q0 += batch) {
    const int nb = std::min(batch, np - q0);
    auto translate = [&](auto dense) {
      constexpr bool Dense = decltype(dense)::value;
      // the Kokkos Kernels variant exists for comparison: runtime-order maths only (compile time)
      constexpr int PB = Dense ? -1 : P;
      M2LBaselinePairs<PB, Dense, Mem, CentresView, MultipoleView, Real> f{
          far.targets, far.sources, pair_row, centres, multipoles, contrib, q0, order, nc};
      Kokkos::parallel_for("kfmm::m2l::baseline::translate",
                           Kokkos::RangePolicy<ExecutionSpace>(space, 0, nb), f);
    };
    if (options.baseline_kokkos_kernels) {
      translate(std::true_type{});
    } else {
      translate(std::false_type{});
    }
    M2LBaselineSegments<Mem, LocalView, Real> seg{far.targets, far.offsets, pair_row, contrib,
                                                  locals,      q0,          nb};
    segmented_scan<ExecutionSpace, Real>(space, nc * nb, seg, "kfmm::m2l::baseline::segmented_scan");
  }
}

}  // namespace kfmm::detail
