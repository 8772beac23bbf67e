/// \file m2m.hpp
/// M2M: a multipole about a child centre c re-expanded about its parent's centre P (exact: the
/// degree-n moments about P are finite sums of the moments of degrees <= n about c).
///
/// Rotation-based, O(p^3) like the M2L (rotation.hpp, translation_z.hpp): with t = c - P,
///   normalise (D M), rotate so that t lies on +z (O), un-normalise, z-shift
///   M'_n^m = sum_{k=0}^{n-|m|} |t|^k / k! M_{n-k}^m, normalise, rotate back (O^T), un-normalise.
/// Why not the direct O(p^4) sum M'_n^m = sum_{k,l} R_k^l(t) M_{n-k}^{m-l}: the rotation form shares
/// every block with M2L (one set of tables, one set of tests), is the cheaper form from p ~ 6 on
/// (docs/operators.md), and M2M is a small share of the FMM's work at any order.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/static_order.hpp"
#include "kfmm/operators/translation_z.hpp"

namespace kfmm {

/// In place: the multipole `a` (order p) about a child centre c becomes the multipole about the
/// parent centre P, with (tx, ty, tz) = c - P. P >= 0: compile-time order (the runtime `order` is
/// ignored); P = -1: runtime order 0..16. A zero shift leaves `a` unchanged (to round-off).
template <int P = -1, class Real>
KOKKOS_INLINE_FUNCTION void m2m_shift(int order, Real tx, Real ty, Real tz, Real* a) {
  const RotationAngles<Real> g = rotation_angles(tx, ty, tz);
  apply_scale<P>(order, a);
  rotate_to_z<P>(order, g, a);
  apply_scale<P, true>(order, a);
  m2m_z_shift<P>(order, g.r, a);
  apply_scale<P>(order, a);
  rotate_from_z<P>(order, g, a);
  apply_scale<P, true>(order, a);
}

/// Adds to `parent` (order p, about P) the multipole `child` (order p, about c) shifted to P;
/// (tx, ty, tz) = c - P = child centre - parent centre. Runtime order 0..16 (stack buffer of
/// (max_order+1)^2 values).
template <class Real>
KOKKOS_INLINE_FUNCTION void m2m_pair(int order, const Real* child, Real tx, Real ty, Real tz, Real* parent) {
  Real a[num_coefficients(max_order)];
  const int nc = num_coefficients(order);
  for (int i = 0; i < nc; ++i) a[i] = child[i];
  m2m_shift(order, tx, ty, tz, a);
  for (int i = 0; i < nc; ++i) parent[i] += a[i];
}

/// Compile-time-order form of m2m_pair (registers only; loops unroll on GPUs).
template <int P, class Real>
KOKKOS_INLINE_FUNCTION void m2m_pair(const Real* child, Real tx, Real ty, Real tz, Real* parent) {
  static_assert(P >= 0 && P <= max_order, "kfmm: M2M order out of range 0..16");
  Real a[num_coefficients(P)];
  KFMM_PRAGMA_UNROLL
  for (int i = 0; i < num_coefficients(P); ++i) a[i] = child[i];
  m2m_shift<P>(P, tx, ty, tz, a);
  KFMM_PRAGMA_UNROLL
  for (int i = 0; i < num_coefficients(P); ++i) parent[i] += a[i];
}

namespace detail {

/// The batched M2M kernel (see m2m below): one team per listed parent. P >= 0: compile-time order.
/// Coherent: the children's rows are read past the L1 cache (written by other teams of the same
/// launch: m2m_pass).
template <int P, class ExecutionSpace, class Parents, class FirstChild, class NumChildren, class Centres,
          class Multipoles, bool Coherent = false>
struct M2MKernel {
  using Real = typename Multipoles::non_const_value_type;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = Kokkos::View<Real*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  Parents parents;
  FirstChild first_child;
  NumChildren num_children;
  Centres centres;
  Multipoles multipoles;
  int order, nc;
  bool keep_childless;

  KOKKOS_INLINE_FUNCTION Real child(const int c, const int k) const {
    if constexpr (Coherent) {
      return compat::coherent_load(multipoles(c, k));
    } else {
      return multipoles(c, k);
    }
  }

  /// Child c shifted to the parent centre (px, py, pz), into `row`.
  KOKKOS_INLINE_FUNCTION void shift(const int c, const Real px, const Real py, const Real pz,
                                    Real* row) const {
    const Real tx = centres(c, 0) - px, ty = centres(c, 1) - py, tz = centres(c, 2) - pz;
    if constexpr (P >= 0) {
      Real a[num_coefficients(P)];  // registers: the loops unroll
      KFMM_PRAGMA_UNROLL
      for (int k = 0; k < num_coefficients(P); ++k) a[k] = child(c, k);
      m2m_shift<P>(P, tx, ty, tz, a);
      KFMM_PRAGMA_UNROLL
      for (int k = 0; k < num_coefficients(P); ++k) row[k] = a[k];
    } else {
      for (int k = 0; k < nc; ++k) row[k] = child(c, k);
      m2m_shift(order, tx, ty, tz, row);
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int q = parents(member.league_rank());
    if (num_children(q) == 0 && keep_childless) return;  // (a leaf of a listed level keeps its P2M row)
    combine(member, q);
  }

  /// The whole team: row q becomes the sum of its children's rows shifted to centres(q).
  KOKKOS_INLINE_FUNCTION void combine(const Member& member, const int q) const {
    const int first = first_child(q), count = num_children(q);
    const Real px = centres(q, 0), py = centres(q, 1), pz = centres(q, 2);
    const int team = member.team_size();
    Scratch acc(member.team_scratch(0), nc);
    const int stride = expansion_scratch_stride(nc);  // (odd: no bank conflicts)
    Scratch rows(member.team_scratch(0), static_cast<std::size_t>(team) * stride);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int k) { acc(k) = Real(0); });
    member.team_barrier();
    for (int chunk = 0; chunk < count; chunk += team) {
      const int used = count - chunk < team ? count - chunk : team;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, used), [&](int t) {
        shift(first + chunk + t, px, py, pz, &rows(static_cast<std::size_t>(t) * stride));
      });
      member.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int k) {
        Real s = acc(k);
        for (int t = 0; t < used; ++t) s += rows(static_cast<std::size_t>(t) * stride + k);
        acc(k) = s;
      });
      member.team_barrier();
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int k) { multipoles(q, k) = acc(k); });
  }
};

/// The checks m2m and m2m_pass share (`op` names the caller in messages); returns the number of nodes.
template <class ExecutionSpace, class FirstChild, class NumChildren, class Centres, class Multipoles>
int check_m2m_arguments(const char* op, int order, const FirstChild& first_child,
                        const NumChildren& num_children, const Centres& centres,
                        const Multipoles& multipoles) {
  using Real = typename Multipoles::non_const_value_type;
  static_check_view<ExecutionSpace, FirstChild, 1>();
  static_check_view<ExecutionSpace, NumChildren, 1>();
  static_check_view<ExecutionSpace, Centres, 2>();
  static_check_view<ExecutionSpace, Multipoles, 2>();
  static_assert(std::is_floating_point<Real>::value,
                "kfmm::m2m(_pass): multipoles must hold float or double");
  static_assert(std::is_same<typename Centres::non_const_value_type, Real>::value,
                "kfmm::m2m(_pass): centres and multipoles must share one real type");
  static_assert(std::is_same<typename Multipoles::array_layout, Kokkos::LayoutRight>::value,
                "kfmm::m2m(_pass): multipoles must be LayoutRight (one contiguous row per node)");
  check_order(order, concat(op, " order").c_str());
  const int nc = num_coefficients(order);
  require(static_cast<int>(multipoles.extent(1)) >= nc, op, ": multipoles has ", multipoles.extent(1),
          " columns, order ", order, " needs ", nc);
  require(centres.extent(1) == 3, op, ": centres must have 3 columns, has ", centres.extent(1));
  const int num_nodes = static_cast<int>(multipoles.extent(0));
  require(static_cast<int>(centres.extent(0)) >= num_nodes &&
              static_cast<int>(first_child.extent(0)) >= num_nodes &&
              static_cast<int>(num_children.extent(0)) >= num_nodes,
          op, ": centres (", centres.extent(0), "), first_child (", first_child.extent(0),
          ") and num_children (", num_children.extent(0), ") must cover the multipoles' ", num_nodes,
          " rows");
  return num_nodes;
}

/// Launches an M2MKernel-based team kernel (`label`) over `teams` teams: the team size chosen for the
/// order's scratch (one shifted child row per thread, plus the parent's sum).
template <class ExecutionSpace, class Kernel>
void launch_m2m_teams(const ExecutionSpace& space, const char* label, int requested_team, int nc, int teams,
                      const Kernel& kernel) {
  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Scratch = typename Kernel::Scratch;
  const int stride = expansion_scratch_stride(nc);
  const std::size_t row_bytes = Scratch::shmem_size(nc);
  const int team = choose_team_size<ExecutionSpace>(
      label, requested_team, 8, row_bytes, Scratch::shmem_size(stride), Policy(space, teams, 1), kernel);
  Policy policy(space, teams, team);
  policy.set_scratch_size(
      0, Kokkos::PerTeam(row_bytes + Scratch::shmem_size(static_cast<std::size_t>(team) * stride)));
  Kokkos::parallel_for(label, policy, kernel);
}

}  // namespace detail

/// Batched M2M. For every node id `q` in `parents`, OVERWRITES row q of `multipoles` with the sum of
/// its children's multipoles (children first_child(q) .. first_child(q) + num_children(q) - 1) shifted
/// to centres(q). A listed parent without children gets zeros, or keeps its row with
/// options.keep_childless (so a whole level may be listed). The children's rows must be final
/// (the solver passes one level at a time, deepest first) and must not be listed as parents in the
/// same call.
///
/// One team per listed parent owns its row (no atomics): each thread shifts one child into team
/// scratch and the team sums the shifted children per coefficient in child order. Deterministic.
///
/// Throws kfmm::Error for an order outside 0..16, a multipoles View with fewer than (order+1)^2
/// columns, mismatched extents, or listed parents / their children out of bounds (checked on the
/// device first).
template <class ExecutionSpace, class Parents, class FirstChild, class NumChildren, class Centres,
          class Multipoles>
void m2m(const ExecutionSpace& space, int order, const Parents& parents, const FirstChild& first_child,
         const NumChildren& num_children, const Centres& centres, const Multipoles& multipoles,
         const ExpansionOptions& options = {}) {
  detail::static_check_view<ExecutionSpace, Parents, 1>();
  const int num_nodes = detail::check_m2m_arguments<ExecutionSpace>("m2m", order, first_child, num_children,
                                                                    centres, multipoles);
  const int nc = num_coefficients(order);
  const int num_parents = static_cast<int>(parents.extent(0));
  if (options.validate) {
    const int bad = detail::count_bad(
        space, "kfmm::m2m::check", num_parents,
        detail::ParentIsBad<Parents, FirstChild, NumChildren>{parents, first_child, num_children, num_nodes});
    require(bad == 0, "m2m: ", bad, " of the ", num_parents, " listed parents are not node ids in [0, ",
            num_nodes, ") whose children lie in [0, ", num_nodes, ")");
  }
  if (num_parents == 0) return;

  // Compile-time orders on GPUs (the shift runs in registers: a runtime-order shift in local memory made
  // every level take ~0.1 ms at p = 6 on the H200, latency of one thread); runtime order on the host.
  const auto run = [&](auto p) {
    constexpr int P = decltype(p)::value;
    using Kernel =
        detail::M2MKernel<P, ExecutionSpace, Parents, FirstChild, NumChildren, Centres, Multipoles>;
    detail::launch_m2m_teams(
        space, "kfmm::m2m", options.team_size, nc, num_parents,
        Kernel{parents, first_child, num_children, centres, multipoles, order, nc, options.keep_childless});
  };
  detail::dispatch_device_static_order<ExecutionSpace>(order, run);
}

}  // namespace kfmm
