/// \file translation_passes.hpp
/// The upward M2M pass and the downward L2L pass over many tree levels, each in one launch.
///
/// The batched m2m and l2l (m2m.hpp, l2l.hpp) take one level per call, because a parent's M2M reads
/// its children's finished rows and a child's L2L its parent's. Near the root a level has a few nodes
/// and its launch is all latency (~7 us each on the H200, about 20 launches per evaluation at 2e5
/// particles). Here the whole range of levels is one launch: teams take nodes in dependency order from
/// a ticket counter and wait, per node, until the rows they read are published
/// (core/kfmm/core/dependency_flags.hpp). The arithmetic is the batched operators' own (same kernels,
/// same order of every sum), so the results are identical to level-by-level calls.
///
/// Node numbering: both passes take a contiguous range of node ids [first, last) of a tree whose ids
/// put every parent before its children (parent(c) < c, first_child(q) > q): the breadth-first, level
/// by level numbering of kfmm::build_octree and of most host codes' trees.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/dependency_flags.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/l2l.hpp"
#include "kfmm/operators/m2m.hpp"
#include "kfmm/operators/static_order.hpp"

namespace kfmm {

/// Reusable state of m2m_pass and l2l_pass (flags per node and a ticket counter; grown on demand).
template <class MemorySpace>
using TranslationPassWorkspace = DependencyWorkspace<MemorySpace>;

namespace detail {

/// A node of [first, last) whose children break the parent-first numbering (M2M pass).
template <class FirstChild, class NumChildren>
struct PassParentIsBad {
  FirstChild first_child;
  NumChildren num_children;
  int first, num_nodes;
  KOKKOS_INLINE_FUNCTION bool operator()(int i) const {
    const int q = first + i;
    const int f = first_child(q), k = num_children(q);
    return k < 0 || k > 8 || (k > 0 && (f <= q || f > num_nodes - k));
  }
};

/// A node of [first, last) whose parent breaks the parent-first numbering (L2L pass).
template <class Parent>
struct PassChildIsBad {
  Parent parent;
  int first;
  KOKKOS_INLINE_FUNCTION bool operator()(int i) const {
    const int c = first + i;
    const int q = parent(c);
    return q < 0 || q >= c;
  }
};

/// One team per node of [first, last), deepest ids first: waits until every child in the range that has
/// children of its own is published, then the batched kernel's team sum (M2MKernel::combine).
template <int P, class ExecutionSpace, class FirstChild, class NumChildren, class Centres, class Multipoles>
struct M2MPassKernel {
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using memory_space = typename ExecutionSpace::memory_space;
  using Batched = M2MKernel<P, ExecutionSpace, Kokkos::View<const int*, memory_space>, FirstChild,
                            NumChildren, Centres, Multipoles, true>;
  using Scratch = typename Batched::Scratch;
  Batched batched;
  DependencyFlags<memory_space> flags;
  int first, last;

  KOKKOS_INLINE_FUNCTION bool ready(const int c) const {
    return c >= last || batched.num_children(c) == 0 || flags.published(c);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const long long ticket = flags.team_ticket(member);
    const int q = last - 1 - static_cast<int>(ticket);
    const int count = batched.num_children(q), f = batched.first_child(q);
    if (count == 0) return;  // (a leaf keeps its P2M row)
    for (;;) {               // (children come earlier in the ticket order: their teams are running)
      int pending = 0;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(member, count), [&](const int j, int& p) { p += ready(f + j) ? 0 : 1; },
          pending);
      if (pending == 0) break;
    }
    batched.combine(member, q);
    DependencyFlags<memory_space>::release();
    member.team_barrier();
    if (member.team_rank() == 0) flags.publish(q);
  }
};

/// Teams of consecutive nodes of [first, last), root side first, one node per thread: a node waits until
/// its parent is outside the range or published, adds the parent's shifted local (L2LKernel::add_parent)
/// and publishes itself. A parent in the same team is waited for by polling with team scans, not by
/// spinning one thread on another.
template <int P, class ExecutionSpace, class Parent, class Centres, class Locals>
struct L2LPassKernel {
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using memory_space = typename ExecutionSpace::memory_space;
  using Batched = L2LKernel<P, Kokkos::View<const int*, memory_space>, Parent, Centres, Locals, true>;
  Batched batched;
  DependencyFlags<memory_space> flags;
  int first, last;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const long long ticket = flags.team_ticket(member);
    const long long node = first + ticket * member.team_size() + member.team_rank();
    const int c = static_cast<int>(node);
    bool done = node >= last;
    for (;;) {
      if (!done) {
        const int q = batched.parent(c);
        if (q < first || flags.published(q)) {
          batched.add_parent(c);
          flags.publish(c);
          done = true;
        }
      }
      const int pending = done ? 0 : 1;
      int total = member.team_scan(pending) + pending;
      member.team_broadcast(total, member.team_size() - 1);
      if (total == 0) break;
    }
  }
};

}  // namespace detail

/// Upward pass in one launch. For every node q in [first, last) with children, from the largest id
/// down, OVERWRITES row q of `multipoles` with the sum of its children's rows shifted to centres(q);
/// rows of childless nodes (leaves: their P2M rows) and of nodes at or beyond `last` are read as given.
/// Equals m2m (with keep_childless) called level by level, deepest first, bitwise.
///
/// Requires parent-first numbering: first_child(q) > q for every node with children in the range
/// (checked on the device with options.validate). One team per node; order 0..16 (compile-time orders
/// on GPUs). Throws kfmm::Error for a bad order or range, too few multipole columns or mismatched
/// extents.
template <class ExecutionSpace, class FirstChild, class NumChildren, class Centres, class Multipoles>
void m2m_pass(const ExecutionSpace& space, int order, int first, int last, const FirstChild& first_child,
              const NumChildren& num_children, const Centres& centres, const Multipoles& multipoles,
              TranslationPassWorkspace<typename ExecutionSpace::memory_space>& workspace,
              const ExpansionOptions& options = {}) {
  using Memory = typename ExecutionSpace::memory_space;
  const int num_nodes = detail::check_m2m_arguments<ExecutionSpace>("m2m_pass", order, first_child,
                                                                    num_children, centres, multipoles);
  const int nc = num_coefficients(order);
  require(0 <= first && first <= last && last <= num_nodes, "m2m_pass: node range [", first, ", ", last,
          ") is not inside [0, ", num_nodes, ")");
  if (options.validate) {
    const int bad = detail::count_bad(
        space, "kfmm::m2m_pass::check", last - first,
        detail::PassParentIsBad<FirstChild, NumChildren>{first_child, num_children, first, num_nodes});
    require(bad == 0, "m2m_pass: ", bad, " nodes of [", first, ", ", last,
            ") have more than 8 children, or children that are not node ids after their parent and below ",
            num_nodes, " (the pass needs parent-first numbering)");
  }
  if (last == first) return;

  const auto run = [&](auto p) {
    constexpr int P = decltype(p)::value;
    using Kernel = detail::M2MPassKernel<P, ExecutionSpace, FirstChild, NumChildren, Centres, Multipoles>;
    const int nodes = last - first;
    const unsigned epoch = workspace.prepare(space, num_nodes);
    const typename Kernel::Batched batched{
        Kokkos::View<const int*, Memory>(), first_child, num_children, centres, multipoles, order, nc, true};
    detail::launch_m2m_teams(space, "kfmm::m2m_pass", options.team_size, nc, nodes,
                             Kernel{batched, DependencyFlags<Memory>(workspace, epoch, nodes), first, last});
  };
  detail::dispatch_device_static_order<ExecutionSpace>(order, run);
}

/// Downward pass in one launch. For every node c in [first, last), from the smallest id up, ADDS to
/// row c of `locals` the local of parent(c) shifted to centres(c); parents below `first` are read as
/// given. Equals l2l called level by level, root side first, bitwise.
///
/// Requires parent-first numbering: 0 <= parent(c) < c for every c in the range (checked on the device
/// with options.validate). One thread per node, in teams of options.team_size (0: 1 on host backends,
/// 32 on GPUs); order 0..16. Throws kfmm::Error for a bad order or range, too few local columns or
/// mismatched extents.
template <class ExecutionSpace, class Parent, class Centres, class Locals>
void l2l_pass(const ExecutionSpace& space, int order, int first, int last, const Parent& parent,
              const Centres& centres, const Locals& locals,
              TranslationPassWorkspace<typename ExecutionSpace::memory_space>& workspace,
              const ExpansionOptions& options = {}) {
  using Memory = typename ExecutionSpace::memory_space;
  const int num_nodes =
      detail::check_l2l_arguments<ExecutionSpace>("l2l_pass", order, parent, centres, locals);
  require(0 <= first && first <= last && last <= num_nodes, "l2l_pass: node range [", first, ", ", last,
          ") is not inside [0, ", num_nodes, ")");
  if (options.validate) {
    const int bad = detail::count_bad(space, "kfmm::l2l_pass::check", last - first,
                                      detail::PassChildIsBad<Parent>{parent, first});
    require(bad == 0, "l2l_pass: ", bad, " nodes of [", first, ", ", last,
            ") have no parent or a parent id not below their own (the pass needs parent-first numbering)");
  }
  if (last == first) return;

  const auto run = [&](auto p) {
    constexpr int P = decltype(p)::value;
    using Kernel = detail::L2LPassKernel<P, ExecutionSpace, Parent, Centres, Locals>;
    using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
    const int nodes = last - first;
    const typename Kernel::Batched batched{Kokkos::View<const int*, Memory>(), parent, centres, locals,
                                           order};
    const int max_team =
        Policy(space, 1, 1)
            .team_size_max(Kernel{batched, DependencyFlags<Memory>(), first, last}, Kokkos::ParallelForTag());
    int team = options.team_size;
    require(team >= 0, "l2l_pass: team_size = ", team, " must be >= 0 (0: the backend's default)");
    if (team > 0) {
      require(team <= max_team, "l2l_pass: team_size = ", team, " exceeds the backend's maximum of ",
              max_team);
    } else {
      team = detail::is_host_execution_space<ExecutionSpace> ? 1 : (max_team < 32 ? max_team : 32);
    }
    const int teams = (nodes + team - 1) / team;
    const unsigned epoch = workspace.prepare(space, num_nodes);
    const Kernel kernel{batched, DependencyFlags<Memory>(workspace, epoch, teams), first, last};
    Kokkos::parallel_for("kfmm::l2l_pass", Policy(space, teams, team), kernel);
  };
  detail::dispatch_device_static_order<ExecutionSpace>(order, run);
}

}  // namespace kfmm
