/// \file upward_pass.hpp
/// The whole upward pass in one kernel: P2M on every leaf, then M2M up to the root, each parent as
/// soon as its last child is done.
///
/// One team per leaf computes the leaf's multipole (kfmm::p2m's team kernel), then counts the leaf
/// in at its parent (an atomic arrival counter per node). The team whose child arrives last computes
/// the parent from all its children (kfmm::m2m's team kernel, reading the children's rows past its
/// core's cache) and goes on up; the others stop. Nothing waits, so no schedule can deadlock (the
/// bottom-up scheme of Karras, HPG 2012, also used for the tree's moments, tree/node_moments.hpp).
/// Every row is computed by one team in the fixed order of kfmm::p2m and kfmm::m2m with the same
/// team size, so the multipoles are those of P2M followed by M2M level by level, bit for bit.
/// Why: one launch instead of 1 + (levels - 1), and no level sizes on the host (a per-level M2M
/// cost ~7 us of latency per level on the H200 whatever its size, and the levels' internal-node
/// lists a host round trip).
#pragma once

#include <Kokkos_Core.hpp>

#include <string>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/m2m.hpp"
#include "kfmm/operators/p2m.hpp"
#include "kfmm/operators/static_order.hpp"

namespace kfmm {

/// Reusable state of upward_pass: one arrival counter per node, zero between calls (the team that
/// finishes a node resets its counter).
template <class MemorySpace>
struct UpwardPassWorkspace {
  Kokkos::View<int*, MemorySpace> arrivals;
  void reserve(int num_nodes) {
    if (static_cast<int>(arrivals.extent(0)) >= num_nodes) return;
    arrivals = Kokkos::View<int*, MemorySpace>();
    arrivals = Kokkos::View<int*, MemorySpace>("kfmm::upward_pass::arrivals",
                                               num_nodes + num_nodes / 4);  // (zeroed)
  }
};

namespace detail {

/// A node whose parent or children are not consistent: parent outside [-1, num_nodes), children
/// outside [0, num_nodes), or a child whose parent is not this node.
template <class Parent, class FirstChild, class NumChildren>
struct TreeLinkIsBad {
  Parent parent;
  FirstChild first_child;
  NumChildren num_children;
  int num_nodes;
  KOKKOS_INLINE_FUNCTION bool operator()(int i) const {
    const int up = parent(i);
    if (up < -1 || up >= num_nodes) return true;
    const int f = first_child(i), k = num_children(i);
    if (k < 0 || (k > 0 && (f < 0 || f > num_nodes - k))) return true;
    for (int c = f; c < f + k; ++c)
      if (parent(c) != i) return true;
    return false;
  }
};

/// The fused kernel: a leaf per team, then every ancestor whose last child this team finished.
template <class Leaf, class Parents, class NumChildren, class Internal, class MemorySpace,
          class ExecutionSpace>
struct UpwardPassKernel {
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  Leaf leaf;
  Internal internal;
  Parents parent;
  NumChildren num_children;
  Kokkos::View<int*, MemorySpace> arrivals;
  int nc;  // coefficients per row
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    // One scratch allocation for every step (a team's scratch is a bump allocator).
    using Scratch = typename Leaf::Scratch;
    const Scratch acc(member.team_scratch(0), nc);
    const Scratch rows(member.team_scratch(0),
                       static_cast<std::size_t>(member.team_size()) * expansion_scratch_stride(nc));
    int node = leaf.leaves(member.league_rank());
    leaf.compute(member, node, acc, rows);
    for (;;) {
      const int up = parent(node);
      if (up < 0) return;
      // Every thread's part of the row is visible before the arrival is (each thread fences its own
      // writes), and the siblings' rows are read after theirs.
      Kokkos::memory_fence();
      member.team_barrier();
      int last = 0;
      if (member.team_rank() == 0) {
        last = Kokkos::atomic_fetch_add(&arrivals(up), 1) == num_children(up) - 1 ? 1 : 0;
        if (last) arrivals(up) = 0;  // (ready for the next call)
      }
      member.team_broadcast(last, 0);
      if (!last) return;
      Kokkos::memory_fence();
      internal.compute(member, up, acc, rows);
      node = up;
    }
  }
};

}  // namespace detail

/// Upward pass in one kernel (see the file comment). OVERWRITES the multipole row of every node of the
/// tree: the leaves listed in `leaves` get their particles' multipole (order `order`, particles
/// ranges(leaf, 0) .. ranges(leaf, 1) - 1 of `positions` / `masses`, about centres(leaf)), and every
/// internal node the sum of its children's multipoles shifted to its centre. The tree is given as
/// plain Views: `parent` (-1 for the root), `first_child` and `num_children` (children are contiguous
/// ids; a node without children must be listed in `leaves`, and every listed node must have none).
/// The same result as kfmm::p2m on `leaves` followed by kfmm::m2m level by level, deepest first.
///
/// Throws kfmm::Error for an order outside 0..16, too few multipole columns, mismatched extents, or
/// (with options.validate) listed leaves out of bounds and parent / child links that disagree.
template <class ExecutionSpace, class Positions, class Masses, class Ranges, class Leaves, class Parents,
          class FirstChild, class NumChildren, class Centres, class Multipoles>
void upward_pass(const ExecutionSpace& space, int order, const Positions& positions, const Masses& masses,
                 const Ranges& ranges, const Leaves& leaves, const Parents& parent,
                 const FirstChild& first_child, const NumChildren& num_children, const Centres& centres,
                 const Multipoles& multipoles,
                 UpwardPassWorkspace<typename ExecutionSpace::memory_space>& workspace,
                 const ExpansionOptions& options = {}) {
  using Real = typename Multipoles::non_const_value_type;
  using memory_space = typename ExecutionSpace::memory_space;
  detail::static_check_view<ExecutionSpace, Positions, 2>();
  detail::static_check_view<ExecutionSpace, Masses, 1>();
  detail::static_check_view<ExecutionSpace, Ranges, 2>();
  detail::static_check_view<ExecutionSpace, Leaves, 1>();
  detail::static_check_view<ExecutionSpace, Parents, 1>();
  detail::static_check_view<ExecutionSpace, FirstChild, 1>();
  detail::static_check_view<ExecutionSpace, NumChildren, 1>();
  detail::static_check_view<ExecutionSpace, Centres, 2>();
  detail::static_check_view<ExecutionSpace, Multipoles, 2>();
  static_assert(std::is_floating_point<Real>::value,
                "kfmm::upward_pass: multipoles must hold float or double");
  static_assert(std::is_same<typename Positions::non_const_value_type, Real>::value &&
                    std::is_same<typename Masses::non_const_value_type, Real>::value &&
                    std::is_same<typename Centres::non_const_value_type, Real>::value,
                "kfmm::upward_pass: positions, masses, centres and multipoles must share one real type");
  static_assert(std::is_same<typename Multipoles::array_layout, Kokkos::LayoutRight>::value,
                "kfmm::upward_pass: multipoles must be LayoutRight (one contiguous row per node)");

  check_order(order, "upward_pass order");
  const int nc = num_coefficients(order);
  require(static_cast<int>(multipoles.extent(1)) >= nc, "upward_pass: multipoles has ", multipoles.extent(1),
          " columns, order ", order, " needs ", nc);
  require(positions.extent(1) == 3, "upward_pass: positions must have 3 columns, has ", positions.extent(1));
  require(centres.extent(1) == 3, "upward_pass: centres must have 3 columns, has ", centres.extent(1));
  require(ranges.extent(1) == 2, "upward_pass: ranges must have 2 columns, has ", ranges.extent(1));
  require(masses.extent(0) == positions.extent(0), "upward_pass: masses has ", masses.extent(0),
          " entries, positions ", positions.extent(0));
  const int num_nodes = static_cast<int>(multipoles.extent(0));
  require(static_cast<int>(centres.extent(0)) >= num_nodes &&
              static_cast<int>(ranges.extent(0)) >= num_nodes &&
              static_cast<int>(parent.extent(0)) >= num_nodes &&
              static_cast<int>(first_child.extent(0)) >= num_nodes &&
              static_cast<int>(num_children.extent(0)) >= num_nodes,
          "upward_pass: centres (", centres.extent(0), "), ranges (", ranges.extent(0), "), parent (",
          parent.extent(0), "), first_child (", first_child.extent(0), ") and num_children (",
          num_children.extent(0), ") must cover the multipoles' ", num_nodes, " rows");
  const int num_leaves = static_cast<int>(leaves.extent(0));
  if (options.validate) {
    detail::check_leaf_ranges(space, "upward_pass", leaves, ranges, num_nodes,
                              static_cast<int>(positions.extent(0)));
    const int bad = detail::count_bad(space, "kfmm::upward_pass::check", num_nodes,
                                      detail::TreeLinkIsBad<Parents, FirstChild, NumChildren>{
                                          parent, first_child, num_children, num_nodes});
    require(bad == 0, "upward_pass: ", bad, " of the ", num_nodes,
            " nodes have a parent or children outside [0, ", num_nodes, ") or a child whose parent differs");
  }
  if (num_leaves == 0) return;
  workspace.reserve(num_nodes);

  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Scratch = Kokkos::View<Real*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  // Compile-time orders on GPUs, the runtime order on the host (as kfmm::p2m and kfmm::m2m); P2M's
  // team size, which also serves the M2M (its scratch has the same shape: a row plus one per thread).
  const auto run = [&](auto p) {
    constexpr int P = decltype(p)::value;
    using Leaf = detail::P2MKernel<P, ExecutionSpace, Positions, Masses, Ranges, Leaves, Centres, Multipoles>;
    using Internal =
        detail::M2MKernel<P, ExecutionSpace, Leaves, FirstChild, NumChildren, Centres, Multipoles, true>;
    using Kernel =
        detail::UpwardPassKernel<Leaf, Parents, NumChildren, Internal, memory_space, ExecutionSpace>;
    const Kernel kernel{Leaf{positions, masses, ranges, leaves, centres, multipoles, order, nc},
                        Internal{leaves, first_child, num_children, centres, multipoles, order, nc},
                        parent,
                        num_children,
                        workspace.arrivals,
                        nc};
    const int stride = expansion_scratch_stride(nc);
    const std::size_t row_bytes = Scratch::shmem_size(nc);
    const int team = detail::choose_team_size<ExecutionSpace>("upward_pass", options.team_size, 32, row_bytes,
                                                              Scratch::shmem_size(stride),
                                                              Policy(space, num_leaves, 1), kernel);
    Policy policy(space, num_leaves, team);
    policy.set_scratch_size(0, Kokkos::PerTeam(row_bytes + Scratch::shmem_size(std::size_t(team) * stride)));
    Kokkos::parallel_for("kfmm::upward_pass", policy, kernel);
  };
  detail::dispatch_device_static_order<ExecutionSpace>(order, run);
}

}  // namespace kfmm
