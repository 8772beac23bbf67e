/// \file expansion_checks.hpp
/// Argument checks and launch helpers shared by the batched expansion operators (p2m, m2m, l2l,
/// l2p): View ranks, value types and extents, node ids and particle ranges (validated on the
/// execution space before any kernel dereferences them), and the team size of the team kernels.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"

namespace kfmm {

/// Launch options of the batched expansion operators (p2m, m2m, l2p; l2l runs one thread per child).
struct ExpansionOptions {
  /// Threads per team; 0 = backend default (1 on host backends, 32 on GPUs, fewer when the team
  /// scratch of high orders would not fit). A negative value, or one above the backend's maximum,
  /// throws; so does any value but 0 for l2l, which runs one thread per child. Host backends accept
  /// > 1 where Kokkos allows it (how the tests exercise the GPU code path on a CPU).
  int team_size = 0;
  /// Check the listed node ids and particle ranges on the device before the kernel runs (one
  /// reduction and one host round trip per call). A caller whose lists are consistent by construction
  /// (kfmm::Solver, with the tree it built) may turn it off; a bad id then reads out of bounds.
  bool validate = true;
  /// m2m only: leave the rows of listed nodes without children untouched instead of zeroing them, so
  /// that a caller may list a whole level of a tree, leaves (whose P2M rows stay) included.
  bool keep_childless = false;
};

namespace detail {

/// Compile-time checks of one View argument: rank, and memory reachable from the execution space.
template <class ExecutionSpace, class View, int Rank>
constexpr void static_check_view() {
  static_assert(Kokkos::is_view<View>::value, "kfmm: expected a Kokkos::View");
  static_assert(static_cast<int>(View::rank) == Rank, "kfmm: View argument has the wrong rank");
  static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, typename View::memory_space>::accessible,
                "kfmm: View memory space not accessible from the execution space");
}

/// Number of i in [0, n) with bad(i) true, counted on `space` (a fence follows). `bad` is a functor
/// struct, not a lambda: an extended host-device lambda captured inside another one is where an nvcc
/// build of the bad-argument tests crashed on the host backends (docs/gpu.md).
template <class Predicate>
struct CountTrue {
  Predicate bad;
  KOKKOS_INLINE_FUNCTION void operator()(int i, int& c) const {
    if (bad(i)) ++c;
  }
};

template <class ExecutionSpace, class Predicate>
int count_bad(const ExecutionSpace& space, const char* label, int n, const Predicate& bad) {
  if (n <= 0) return 0;
  int count = 0;
  Kokkos::parallel_reduce(label, Kokkos::RangePolicy<ExecutionSpace>(space, 0, n), CountTrue<Predicate>{bad},
                          count);
  return count;
}

/// A valid node of a far list (m2l): an id in [0, num_nodes). size() is 0: nodes have no bound here.
struct ValidNodeId {
  int num_nodes;
  KOKKOS_INLINE_FUNCTION bool operator()(int q) const { return q >= 0 && q < num_nodes; }
  KOKKOS_INLINE_FUNCTION int size(int) const { return 0; }
  std::string describe() const { return "node ids in [0, " + std::to_string(num_nodes) + ")"; }
};

/// A valid leaf of a near list, P2M or L2P: a node id in [0, num_nodes) whose particle range lies inside
/// [0, num_particles]; size() is its number of particles.
template <class Ranges>
struct ValidLeaf {
  Ranges ranges;
  int num_nodes, num_particles;
  KOKKOS_INLINE_FUNCTION bool operator()(int leaf) const {
    if (leaf < 0 || leaf >= num_nodes) return false;
    const int b = ranges(leaf, 0), e = ranges(leaf, 1);
    return b >= 0 && b <= e && e <= num_particles;
  }
  KOKKOS_INLINE_FUNCTION int size(int leaf) const { return ranges(leaf, 1) - ranges(leaf, 0); }
  std::string describe() const {
    return "node ids in [0, " + std::to_string(num_nodes) + ") with a particle range inside [0, " +
           std::to_string(num_particles) + "]";
  }
};

/// A listed leaf that is no ValidLeaf.
template <class Leaves, class Ranges>
struct LeafRangeIsBad {
  Leaves leaves;
  ValidLeaf<Ranges> valid;
  KOKKOS_INLINE_FUNCTION bool operator()(int i) const { return !valid(leaves(i)); }
};

/// A listed parent that is no node id in [0, num_nodes) or whose children leave [0, num_nodes) (M2M).
template <class Parents, class FirstChild, class NumChildren>
struct ParentIsBad {
  Parents parents;
  FirstChild first_child;
  NumChildren num_children;
  int num_nodes;
  KOKKOS_INLINE_FUNCTION bool operator()(int i) const {
    const int q = parents(i);
    if (q < 0 || q >= num_nodes) return true;
    const int f = first_child(q), k = num_children(q);
    return k < 0 || (k > 0 && (f < 0 || f > num_nodes - k));
  }
};

/// A listed child that is no node id in [0, num_nodes) or has no parent in [0, num_nodes) (L2L).
template <class Children, class Parent>
struct ChildIsBad {
  Children children;
  Parent parent;
  int num_nodes;
  KOKKOS_INLINE_FUNCTION bool operator()(int i) const {
    const int c = children(i);
    if (c < 0 || c >= num_nodes) return true;
    const int q = parent(c);
    return q < 0 || q >= num_nodes || q == c;
  }
};

/// Throws unless every listed leaf is a ValidLeaf (one device reduction). Shared by P2M and L2P, which
/// read the same leaf ranges.
template <class ExecutionSpace, class Leaves, class Ranges>
void check_leaf_ranges(const ExecutionSpace& space, const char* op, const Leaves& leaves,
                       const Ranges& ranges, int num_nodes, int num_particles) {
  const int num_leaves = static_cast<int>(leaves.extent(0));
  const ValidLeaf<Ranges> valid{ranges, num_nodes, num_particles};
  const int bad = count_bad(space, op, num_leaves, LeafRangeIsBad<Leaves, Ranges>{leaves, valid});
  require(bad == 0, op, ": ", bad, " of the ", num_leaves, " listed leaves are not ", valid.describe());
}

/// Team size for a team kernel whose team scratch is `fixed_bytes + per_thread_bytes * team`:
/// the requested size if given (checked against the backend), else 1 on host backends and the
/// largest power of two <= `gpu_default` that keeps the scratch within 32 KiB on devices.
template <class ExecutionSpace, class Policy, class Functor>
int choose_team_size(const char* op, int requested, int gpu_default, std::size_t fixed_bytes,
                     std::size_t per_thread_bytes, const Policy& probe, const Functor& functor) {
  require(requested >= 0, op, ": team_size = ", requested, " must be >= 0 (0: the backend's default)");
  const int max_team = probe.team_size_max(functor, Kokkos::ParallelForTag());
  if (requested > 0) {
    require(requested <= max_team, op, ": team_size = ", requested, " exceeds the backend's maximum of ",
            max_team);
    return requested;
  }
  if (is_host_execution_space<ExecutionSpace>) return 1;
  int team = gpu_default < max_team ? gpu_default : max_team;
  while (team > 1 && fixed_bytes + per_thread_bytes * static_cast<std::size_t>(team) > 32 * 1024) team /= 2;
  return team;
}

}  // namespace detail
}  // namespace kfmm
