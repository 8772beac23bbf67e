/// \file p2p_mutual.hpp
/// Host near field by Newton's third law (P2POptions::mutual): over a symmetric near list, each
/// unordered leaf pair {A, B} is evaluated once and both leaves take their sums from the same terms,
///   a_i += m_j d / r^3, a_j -= m_i d / r^3, phi_i += m_j / r, phi_j += m_i / r   (d = x_j - x_i),
/// which halves the reciprocal square roots and the distance arithmetic. A mutual pair costs more than
/// a one-directional interaction (the second set of sums), and the loop is bound by issuing its
/// floating-point operations, so the gain is 1.2-1.5x, not 2x (measured on a Zen 4 core: docs/kernels.md).
///
/// Work. The rows are dealt round-robin, in blocks of kRowsPerBlock consecutive rows, to `slices` work
/// items (the backend's concurrency). Item s evaluates, for each of its rows with target leaf A, the
/// pairs (A, B) with B > A in both directions and the self pair (A, A) in one direction (i == j masked
/// before the reciprocal square root); a pair with B < A is skipped: row B holds (B, A). Item s adds
/// everything it computes, for A's particles and for B's, to its own block of the sum buffer, so no
/// two threads write one entry and no atomics are needed; a last pass adds the blocks in item order.
/// The order of every sum is fixed by the list and the number of items: bitwise reproducible run
/// after run on the same number of threads (a different thread count rounds differently).
///
/// Inner loop: one source particle j of B (broadcast) against A's packed particles, W lanes at a time.
/// A's sums over B live in the item's scratch (a few KB, in L1), j's reaction in W lane accumulators
/// summed once per j: no reduction across lanes inside the loop, so the compiler vectorises it.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/p2p_pair.hpp"

namespace kfmm::detail {

/// W target lanes (x, y, z, m)[l] against source j, both directions: adds m_j t (t = d / r^3) and
/// m_j / r to the target sums (ax, ay, az, ap)[l], and m_i t, m_i / r to j's lane accumulators
/// (rx, ry, rz, rp)[l] (j's acceleration is minus the lane sum of (rx, ry, rz)). The pointers never
/// alias (restrict): the target data and sums are disjoint slices of the item's scratch, j's
/// accumulators the caller's locals; without the promise g++ stored the sums lane by lane.
template <int W, bool GuardZero, class Real>
KOKKOS_FORCEINLINE_FUNCTION void p2p_mutual_lanes(
    const Real* KOKKOS_RESTRICT x, const Real* KOKKOS_RESTRICT y, const Real* KOKKOS_RESTRICT z,
    const Real* KOKKOS_RESTRICT m, Real xj, Real yj, Real zj, Real mj, Real eps2, Real* KOKKOS_RESTRICT ax,
    Real* KOKKOS_RESTRICT ay, Real* KOKKOS_RESTRICT az, Real* KOKKOS_RESTRICT ap, Real* KOKKOS_RESTRICT rx,
    Real* KOKKOS_RESTRICT ry, Real* KOKKOS_RESTRICT rz, Real* KOKKOS_RESTRICT rp) {
  // (Double with AVX-512: r^2 for all lanes, then 1/sqrt for all at once; elsewhere 1/sqrt stays in
  // the one lane loop, which g++ vectorises whole: rsqrt_lanes_vectorised.)
  Real ri[W];
  if constexpr (rsqrt_lanes_vectorised<Real, W>) {
    Real r2[W];
    for (int l = 0; l < W; ++l) {
      const Real dx = xj - x[l];
      const Real dy = yj - y[l];
      const Real dz = zj - z[l];
      r2[l] = pair_r2(dx, dy, dz, eps2);
    }
    rsqrt_lanes<W, GuardZero>(r2, ri);
  }
  for (int l = 0; l < W; ++l) {
    const Real dx = xj - x[l];
    const Real dy = yj - y[l];
    const Real dz = zj - z[l];
    Real rinv;
    if constexpr (rsqrt_lanes_vectorised<Real, W>) {
      rinv = ri[l];
    } else {
      rinv = pair_rsqrt<GuardZero>(pair_r2(dx, dy, dz, eps2));
    }
    const Real rinv3 = rinv * rinv * rinv;
    const Real tx = dx * rinv3;
    const Real ty = dy * rinv3;
    const Real tz = dz * rinv3;
    ax[l] = compat::fmadd(mj, tx, ax[l]);
    ay[l] = compat::fmadd(mj, ty, ay[l]);
    az[l] = compat::fmadd(mj, tz, az[l]);
    ap[l] = compat::fmadd(mj, rinv, ap[l]);
    rx[l] = compat::fmadd(m[l], tx, rx[l]);
    ry[l] = compat::fmadd(m[l], ty, ry[l]);
    rz[l] = compat::fmadd(m[l], tz, rz[l]);
    rp[l] = compat::fmadd(m[l], rinv, rp[l]);
  }
}

/// The mutual host kernel (see the file comment): operator()(s) runs work item s.
/// Views: targets / offsets / sources the near list, ranges(leaf, 0..1), positions(i, 0..2),
/// masses(i); `sums` holds slices blocks of 4 N entries (4 i + q: a_x, a_y, a_z, potential sum of
/// particle i), zero on entry. Each item's scratch: `packed` (8 x stride reals: its target leaf's x, y,
/// z, m and sums over one source leaf) and `totals` (4 x stride in Acc: the sums over the row).
template <bool GuardZero, class Mem, class PosView, class MassView, class Real, class Acc>
struct P2PMutualHostKernel {
  static constexpr int W = p2p_host_lanes<Real>;
  static constexpr int kRowsPerBlock = 4;
  static constexpr int kPacked = 8;  // reals of scratch per unit of stride
  Kokkos::View<const int*, Mem> targets, offsets, sources;
  Kokkos::View<const int* [2], Mem> ranges;
  PosView positions;
  MassView masses;
  Kokkos::View<Acc*, Mem> sums;
  Kokkos::View<Real*, Mem> packed;
  Kokkos::View<Acc*, Mem> totals;
  Real eps2;
  int rows, slices, stride;
  long long n;  // particles

  void operator()(const int s) const {
    Real* xs = packed.data() + static_cast<long long>(kPacked) * stride * s;
    Acc* tot = totals.data() + 4LL * stride * s;
    Acc* out = sums.data() + 4 * n * s;
    for (int first = s * kRowsPerBlock; first < rows; first += slices * kRowsPerBlock) {
      const int last = first + kRowsPerBlock < rows ? first + kRowsPerBlock : rows;
      for (int r = first; r < last; ++r) row(r, xs, tot, out);
    }
  }

  void row(const int r, Real* xs, Acc* tot, Acc* out) const {
    const int a = targets(r);
    const int t0 = ranges(a, 0);
    const int na = ranges(a, 1) - t0;
    if (na <= 0) return;
    const int npad = (na + W - 1) / W * W;
    Real* ys = xs + stride;
    Real* zs = ys + stride;
    Real* ms = zs + stride;
    Real* ax = ms + stride;  // A's sums over one source leaf (in Real, then added to tot in Acc)
    Real* ay = ax + stride;
    Real* az = ay + stride;
    Real* ap = az + stride;
    for (int i = 0; i < npad; ++i) {  // padding lanes repeat the last particle with zero mass
      const int p = t0 + (i < na ? i : na - 1);
      xs[i] = static_cast<Real>(positions(p, 0));
      ys[i] = static_cast<Real>(positions(p, 1));
      zs[i] = static_cast<Real>(positions(p, 2));
      ms[i] = i < na ? static_cast<Real>(masses(p)) : Real(0);
    }
    // (sections of stride entries, of which this leaf uses npad: work per row and per source leaf
    // follows the leaf's size, not the widest leaf's)
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < npad; ++i) tot[c * stride + i] = Acc(0);
    for (int k = offsets(r); k < offsets(r + 1); ++k) {
      const int b = sources(k);
      if (b < a) continue;  // evaluated from row b
      if (b == a) {         // self pair, one direction: i == j masked; sums in local lanes
        for (int tb = 0; tb < npad; tb += W) {
          Real sx[W], sy[W], sz[W], sp[W];
          for (int l = 0; l < W; ++l) sx[l] = sy[l] = sz[l] = sp[l] = Real(0);
          for (int j = t0; j < t0 + na; ++j) {
            p2p_lanes<W, GuardZero, true>(xs + tb, ys + tb, zs + tb, xs[j - t0], ys[j - t0], zs[j - t0],
                                          ms[j - t0], eps2, j - t0 - tb, sx, sy, sz, sp);
          }
          for (int l = 0; l < W; ++l) {
            tot[tb + l] += sx[l];
            tot[stride + tb + l] += sy[l];
            tot[2 * stride + tb + l] += sz[l];
            tot[3 * stride + tb + l] += sp[l];
          }
        }
        continue;
      }
      for (int c = 0; c < 4; ++c)
        for (int i = 0; i < npad; ++i) ax[c * stride + i] = Real(0);
      for (int j = ranges(b, 0); j < ranges(b, 1); ++j) {
        const Real xj = static_cast<Real>(positions(j, 0));
        const Real yj = static_cast<Real>(positions(j, 1));
        const Real zj = static_cast<Real>(positions(j, 2));
        const Real mj = static_cast<Real>(masses(j));
        Real rx[W], ry[W], rz[W], rp[W];
        for (int l = 0; l < W; ++l) rx[l] = ry[l] = rz[l] = rp[l] = Real(0);
        for (int tb = 0; tb < npad; tb += W) {
          p2p_mutual_lanes<W, GuardZero>(xs + tb, ys + tb, zs + tb, ms + tb, xj, yj, zj, mj, eps2, ax + tb,
                                         ay + tb, az + tb, ap + tb, rx, ry, rz, rp);
        }
        // Lanes summed pairwise in Acc, halves first (a fixed order): log2(W) vector adds per component
        // where one scalar add per lane had been 17 % of the kernel's samples in double (a chain of W
        // dependent adds), and 2.6x the double kernel's time in float with double sums (W = 16).
        Acc ux[W], uy[W], uz[W], up[W];
        for (int l = 0; l < W; ++l) {
          ux[l] = static_cast<Acc>(rx[l]);
          uy[l] = static_cast<Acc>(ry[l]);
          uz[l] = static_cast<Acc>(rz[l]);
          up[l] = static_cast<Acc>(rp[l]);
        }
        for (int h = W / 2; h >= 1; h /= 2) {
          for (int l = 0; l < h; ++l) {
            ux[l] += ux[l + h];
            uy[l] += uy[l + h];
            uz[l] += uz[l + h];
            up[l] += up[l + h];
          }
        }
        const Acc sx = ux[0], sy = uy[0], sz = uz[0], sp = up[0];
        out[4LL * j + 0] -= sx;
        out[4LL * j + 1] -= sy;
        out[4LL * j + 2] -= sz;
        out[4LL * j + 3] += sp;
      }
      for (int c = 0; c < 4; ++c)
        for (int i = 0; i < npad; ++i) tot[c * stride + i] += ax[c * stride + i];
    }
    for (int i = 0; i < na; ++i) {
      out[4LL * (t0 + i) + 0] += tot[i];
      out[4LL * (t0 + i) + 1] += tot[stride + i];
      out[4LL * (t0 + i) + 2] += tot[2 * stride + i];
      out[4LL * (t0 + i) + 3] += tot[3 * stride + i];
    }
  }
};

/// Largest leaf among a near list's targets and sources (the mutual kernel's scratch length).
template <class Mem>
struct NearListWidestLeaf {
  Kokkos::View<const int*, Mem> targets, offsets, sources;
  Kokkos::View<const int* [2], Mem> ranges;
  KOKKOS_INLINE_FUNCTION int size(int leaf) const { return ranges(leaf, 1) - ranges(leaf, 0); }
  KOKKOS_INLINE_FUNCTION void operator()(const int r, int& widest) const {
    int w = size(targets(r));
    for (int k = offsets(r); k < offsets(r + 1); ++k) w = size(sources(k)) > w ? size(sources(k)) : w;
    widest = w > widest ? w : widest;
  }
};

/// Pairs of row r whose multiplicity differs from that of the reversed pair, or whose source has no
/// row (`row_of(leaf)`: the leaf's row, -1 for none).
template <class Mem>
struct NearListAsymmetry {
  Kokkos::View<const int*, Mem> targets, offsets, sources, row_of;
  int nodes;
  KOKKOS_INLINE_FUNCTION void operator()(const int r, long long& count) const {
    const int a = targets(r);
    for (int k = offsets(r); k < offsets(r + 1); ++k) {
      const int b = sources(k);
      const int rb = b >= 0 && b < nodes ? row_of(b) : -1;
      if (rb < 0) {
        ++count;
        continue;
      }
      int forward = 0, backward = 0;
      for (int q = offsets(r); q < offsets(r + 1); ++q) forward += sources(q) == b ? 1 : 0;
      for (int q = offsets(rb); q < offsets(rb + 1); ++q) backward += sources(q) == a ? 1 : 0;
      count += forward != backward ? 1 : 0;
    }
  }
};

/// The last pass of the mutual kernel: particle i's sums of all work items, in item order, scaled and
/// added to the outputs.
template <class Mem, class AccView, class PotView, class Acc>
struct MutualCombine {
  Kokkos::View<const Acc*, Mem> sums;
  AccView accelerations;
  PotView potentials;
  Acc G;
  long long n;
  int slices;
  KOKKOS_INLINE_FUNCTION void operator()(const long long i) const {
    for (int q = 0; q < 4; ++q) {
      Acc sum = sums(4 * i + q);
      for (int s = 1; s < slices; ++s) sum += sums(4 * n * s + 4 * i + q);
      add_scaled_sum(accelerations, potentials, i, q, G, sum);
    }
  }
};

/// Number of rows and pairs that keep the list from the mutual kernel: a row whose target is no leaf
/// index or repeats an earlier row's target, a pair whose source has no row, a pair (A, B) listed a
/// different number of times than (B, A). 0 for a symmetric list. O(sum of squared row lengths).
template <class ExecutionSpace, class Mem>
long long count_asymmetric_pairs(const ExecutionSpace& space, const InteractionList<Mem>& list, int nodes) {
  Kokkos::View<int*, Mem> row_of(Kokkos::view_alloc(std::string("kfmm::p2p::row_of")), nodes);
  Kokkos::deep_copy(space, row_of, -1);
  auto targets = list.targets;
  auto offsets = list.offsets;
  auto sources = list.sources;
  const int rows = list.num_rows();
  long long bad = 0;
  space.fence();
  for (int r = 0; r < rows; ++r) {  // (host memory: the mutual kernel runs on host backends only)
    const int a = targets(r);
    if (a < 0 || a >= nodes || row_of(a) >= 0) {
      ++bad;
    } else {
      row_of(a) = r;
    }
  }
  long long pairs = 0;
  Kokkos::parallel_reduce("kfmm::p2p::check_symmetry", Kokkos::RangePolicy<ExecutionSpace>(space, 0, rows),
                          NearListAsymmetry<Mem>{targets, offsets, sources, row_of, nodes}, pairs);
  return bad + pairs;
}

/// Runs the mutual kernel (host backends) and adds G x (sums) and -G x (potential sums) to the outputs.
/// `sums` needs slices x 4 N entries; its contents on entry are overwritten.
template <class ExecutionSpace, class Real, class Acc, class Mem, class PosView, class MassView,
          class AccView, class PotView>
void p2p_mutual(const ExecutionSpace& space, const InteractionList<Mem>& near_list,
                const Kokkos::View<const int* [2], Mem>& ranges, const PosView& positions,
                const MassView& masses, Acc G, Real eps2, bool guard, const AccView& accelerations,
                const PotView& potentials, const Kokkos::View<Acc*, Mem>& sums, int slices) {
  const long long n = static_cast<long long>(positions.extent(0));
  const int rows = near_list.num_rows();
  int widest = 0;  // largest leaf of the list: the scratch arrays' length
  Kokkos::parallel_reduce(
      "kfmm::p2p::widest_leaf", Kokkos::RangePolicy<ExecutionSpace>(space, 0, rows),
      NearListWidestLeaf<Mem>{near_list.targets, near_list.offsets, near_list.sources, ranges},
      Kokkos::Max<int>(widest));
  constexpr int W = p2p_host_lanes<Real>;
  const int stride = (widest + W - 1) / W * W;  // (a leaf of the widest size, padded to lanes)
  Kokkos::deep_copy(space, Kokkos::subview(sums, Kokkos::make_pair(0LL, slices * 4 * n)), Acc(0));
  using Kernel = P2PMutualHostKernel<false, Mem, PosView, MassView, Real, Acc>;
  Kokkos::View<Real*, Mem> packed(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::p2p::packed")),
      static_cast<long long>(Kernel::kPacked) * stride * slices);
  Kokkos::View<Acc*, Mem> totals(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::p2p::totals")),
      4LL * stride * slices);
  using Policy = Kokkos::RangePolicy<ExecutionSpace, Kokkos::Schedule<Kokkos::Static>>;
  auto launch = [&](auto kernel) {
    kernel.targets = near_list.targets;
    kernel.offsets = near_list.offsets;
    kernel.sources = near_list.sources;
    kernel.ranges = ranges;
    kernel.positions = positions;
    kernel.masses = masses;
    kernel.sums = sums;
    kernel.packed = packed;
    kernel.totals = totals;
    kernel.eps2 = eps2;
    kernel.rows = rows;
    kernel.slices = slices;
    kernel.stride = stride;
    kernel.n = n;
    Kokkos::parallel_for("kfmm::p2p::mutual", Policy(space, 0, slices), kernel);
  };
  if (guard) {
    launch(P2PMutualHostKernel<true, Mem, PosView, MassView, Real, Acc>{});
  } else {
    launch(P2PMutualHostKernel<false, Mem, PosView, MassView, Real, Acc>{});
  }
  Kokkos::parallel_for(
      "kfmm::p2p::mutual_combine", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      MutualCombine<Mem, AccView, PotView, Acc>{sums, accelerations, potentials, G, n, slices});
}

}  // namespace kfmm::detail
