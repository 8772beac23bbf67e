/// \file l2l.hpp
/// L2L: a local expansion about a parent centre P re-expanded about a child centre s (exact for the
/// truncated polynomial: the shifted local represents the same degree-p polynomial).
///
/// Rotation-based, O(p^3) (rotation.hpp, translation_z.hpp): with t = s - P, normalise (D^{-1} L),
/// rotate so that t lies on +z (O), un-normalise, z-shift L'_n^m = sum_{k=0}^{p-n} |t|^k / k! L_{n+k}^m,
/// normalise, rotate back (O^T), un-normalise.
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

/// In place: the local `a` (order p) about a parent centre P becomes the local about the child
/// centre s, with (tx, ty, tz) = s - P. P >= 0: compile-time order; P = -1: runtime order 0..16.
template <int P = -1, class Real>
KOKKOS_INLINE_FUNCTION void l2l_shift(int order, Real tx, Real ty, Real tz, Real* a) {
  const RotationAngles<Real> g = rotation_angles(tx, ty, tz);
  apply_scale<P, true>(order, a);
  rotate_to_z<P>(order, g, a);
  apply_scale<P>(order, a);
  l2l_z_shift<P>(order, g.r, a);
  apply_scale<P, true>(order, a);
  rotate_from_z<P>(order, g, a);
  apply_scale<P>(order, a);
}

/// Adds to `child` (order p, about s) the local `parent` (order p, about P) shifted to s;
/// (tx, ty, tz) = s - P = child centre - parent centre. Runtime order 0..16.
template <class Real>
KOKKOS_INLINE_FUNCTION void l2l_pair(int order, const Real* parent, Real tx, Real ty, Real tz, Real* child) {
  Real a[num_coefficients(max_order)];
  const int nc = num_coefficients(order);
  for (int i = 0; i < nc; ++i) a[i] = parent[i];
  l2l_shift(order, tx, ty, tz, a);
  for (int i = 0; i < nc; ++i) child[i] += a[i];
}

/// Compile-time-order form of l2l_pair.
template <int P, class Real>
KOKKOS_INLINE_FUNCTION void l2l_pair(const Real* parent, Real tx, Real ty, Real tz, Real* child) {
  static_assert(P >= 0 && P <= max_order, "kfmm: L2L order out of range 0..16");
  Real a[num_coefficients(P)];
  KFMM_PRAGMA_UNROLL
  for (int i = 0; i < num_coefficients(P); ++i) a[i] = parent[i];
  l2l_shift<P>(P, tx, ty, tz, a);
  KFMM_PRAGMA_UNROLL
  for (int i = 0; i < num_coefficients(P); ++i) child[i] += a[i];
}

namespace detail {

/// The batched L2L kernel (see l2l below): one thread per listed child. P >= 0: compile-time order.
/// Coherent: the parent's row is read past the L1 cache (written by another team of the same launch:
/// l2l_pass).
template <int P, class Children, class Parent, class Centres, class Locals, bool Coherent = false>
struct L2LKernel {
  using Real = typename Locals::non_const_value_type;
  Children children;
  Parent parent;
  Centres centres;
  Locals locals;
  int order;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const { add_parent(children(i)); }

  /// Adds to row c the local of its parent shifted to centres(c).
  KOKKOS_INLINE_FUNCTION void add_parent(const int c) const {
    const int q = parent(c);
    const auto tx = centres(c, 0) - centres(q, 0), ty = centres(c, 1) - centres(q, 1),
               tz = centres(c, 2) - centres(q, 2);
    if constexpr (Coherent) {
      Real a[num_coefficients(P >= 0 ? P : max_order)];
      const int nc = P >= 0 ? num_coefficients(P) : num_coefficients(order);
      KFMM_PRAGMA_UNROLL
      for (int k = 0; k < nc; ++k) a[k] = compat::coherent_load(locals(q, k));
      if constexpr (P >= 0) {
        l2l_pair<P>(a, tx, ty, tz, &locals(c, 0));
      } else {
        l2l_pair(order, a, tx, ty, tz, &locals(c, 0));
      }
    } else if constexpr (P >= 0) {
      l2l_pair<P>(&locals(q, 0), tx, ty, tz, &locals(c, 0));
    } else {
      l2l_pair(order, &locals(q, 0), tx, ty, tz, &locals(c, 0));
    }
  }
};

/// The checks l2l and l2l_pass share (`op` names the caller in messages); returns the number of nodes.
template <class ExecutionSpace, class Parent, class Centres, class Locals>
int check_l2l_arguments(const char* op, int order, const Parent& parent, const Centres& centres,
                        const Locals& locals) {
  using Real = typename Locals::non_const_value_type;
  static_check_view<ExecutionSpace, Parent, 1>();
  static_check_view<ExecutionSpace, Centres, 2>();
  static_check_view<ExecutionSpace, Locals, 2>();
  static_assert(std::is_floating_point<Real>::value, "kfmm::l2l(_pass): locals must hold float or double");
  static_assert(std::is_same<typename Centres::non_const_value_type, Real>::value,
                "kfmm::l2l(_pass): centres and locals must share one real type");
  static_assert(std::is_same<typename Locals::array_layout, Kokkos::LayoutRight>::value,
                "kfmm::l2l(_pass): locals must be LayoutRight (one contiguous row per node)");
  check_order(order, concat(op, " order").c_str());
  const int nc = num_coefficients(order);
  require(static_cast<int>(locals.extent(1)) >= nc, op, ": locals has ", locals.extent(1), " columns, order ",
          order, " needs ", nc);
  require(centres.extent(1) == 3, op, ": centres must have 3 columns, has ", centres.extent(1));
  const int num_nodes = static_cast<int>(locals.extent(0));
  require(static_cast<int>(centres.extent(0)) >= num_nodes && static_cast<int>(parent.extent(0)) >= num_nodes,
          op, ": centres (", centres.extent(0), ") and parent (", parent.extent(0),
          ") must cover the locals' ", num_nodes, " rows");
  return num_nodes;
}

}  // namespace detail

/// Batched L2L. For every node id `c` in `children`, ADDS to row c of `locals` the local of its
/// parent `parent(c)` shifted to centres(c). The parents' rows must be final (the solver passes one
/// level at a time, root side first) and no listed child may be the parent of another listed child.
///
/// One thread per listed child owns that child's row (no atomics; the work per child is a single
/// shift, so a team per child would leave all but one thread idle). Deterministic.
///
/// Throws kfmm::Error for an order outside 0..16, a locals View with fewer than (order+1)^2 columns,
/// mismatched extents, or listed children / their parents out of bounds (checked on the device first).
template <class ExecutionSpace, class Children, class Parent, class Centres, class Locals>
void l2l(const ExecutionSpace& space, int order, const Children& children, const Parent& parent,
         const Centres& centres, const Locals& locals, const ExpansionOptions& options = {}) {
  detail::static_check_view<ExecutionSpace, Children, 1>();
  const int num_nodes = detail::check_l2l_arguments<ExecutionSpace>("l2l", order, parent, centres, locals);
  const int num_children = static_cast<int>(children.extent(0));
  require(options.team_size == 0, "l2l: team_size = ", options.team_size,
          " asks for teams, but l2l runs one thread per child (l2l_pass takes a team size)");
  if (options.validate) {
    const int bad = detail::count_bad(space, "kfmm::l2l::check", num_children,
                                      detail::ChildIsBad<Children, Parent>{children, parent, num_nodes});
    require(bad == 0, "l2l: ", bad, " of the ", num_children, " listed children are not node ids in [0, ",
            num_nodes, ") with a parent in [0, ", num_nodes, ") (the root has none)");
  }
  if (num_children == 0) return;

  // Compile-time orders on GPUs (registers instead of a (max_order+1)^2 local-memory buffer: one
  // runtime-order shift per thread made every level take ~0.1 ms at p = 6 on the H200); runtime order
  // on the host.
  const auto run = [&](auto p) {
    constexpr int P = decltype(p)::value;
    Kokkos::parallel_for(
        "kfmm::l2l", Kokkos::RangePolicy<ExecutionSpace>(space, 0, num_children),
        detail::L2LKernel<P, Children, Parent, Centres, Locals>{children, parent, centres, locals, order});
  };
  detail::dispatch_device_static_order<ExecutionSpace>(order, run);
}

}  // namespace kfmm
