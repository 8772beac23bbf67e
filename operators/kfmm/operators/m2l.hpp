/// \file m2l.hpp
/// The batched multipole-to-local operator over a CSR far list: kfmm::m2l.
///
/// For every row r of the far list (target node t = far_list.targets(r)) and every source node s of
/// the row, adds to locals(t, .) the rotation-based M2L (m2l_pair.hpp: rotate, z-translate, rotate
/// back; O(p^3)) of multipoles(s, .) with displacement centres(t) - centres(s). Two lanes
/// (M2LLane) compute the same sums with different data flow:
///   - fused (m2l_fused.hpp): target-owned, everything on chip, one write per local coefficient;
///   - baseline (m2l_baseline.hpp): per-pair results in a global buffer, segmented-scan reduction.
/// The fused lane is specialised on the order at compile time for p = 2..10 (runtime dispatch to the
/// specialisation; other orders run the runtime-order path), in float and double, and on host backends
/// in double up to p = 16 (static_order.hpp); the baseline lane is specialised up to p = 10 on host
/// backends and runs the runtime-order maths on GPUs. Both are deterministic. docs/kernels.md
/// describes the design and the measured costs.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/list_checks.hpp"
#include "kfmm/operators/m2l_baseline.hpp"
#include "kfmm/operators/m2l_csr_options.hpp"
#include "kfmm/operators/m2l_fused.hpp"

namespace kfmm {

/// ADDS to locals(far_list.targets(r), .) the M2L of multipoles(s, .) for every source s of row r
/// (displacement centres(target) - centres(s); the ops conventions of m2l_pair.hpp).
///  - `order` in 0..max_order (checked); multipoles and locals are ExpansionView-shaped (nodes x at
///    least (order+1)^2, LayoutRight; columns beyond are untouched), centres Real*[3]; all three sized by the
///    same number of nodes; node ids in the list must be valid and each target must have one row
///    (checked with `options.validate`, the default).
///  - `options.lane` picks the implementation; an explicit lane is honoured or refused with a
///    kfmm::Error, never replaced.
/// All Views live in `ExecutionSpace::memory_space`; kernels run on `space`. `workspace` holds the
/// fused lane's chunk table and partial sums between calls (csr_chunks.hpp).
template <class ExecutionSpace, class CentresView, class MultipoleView, class LocalView>
void m2l(const ExecutionSpace& space, int order,
         const InteractionList<typename ExecutionSpace::memory_space>& far_list, const CentresView& centres,
         const MultipoleView& multipoles, const LocalView& locals, const M2LOptions& options,
         CsrWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  using Real = typename LocalView::non_const_value_type;
  static_assert(std::is_floating_point_v<Real>, "kfmm::m2l: locals must hold float or double");
  static_assert(std::is_same_v<std::remove_const_t<typename MultipoleView::value_type>, Real>,
                "kfmm::m2l: multipoles and locals must have the same real type");
  static_assert(std::is_same_v<std::remove_const_t<typename CentresView::value_type>, Real>,
                "kfmm::m2l: centres must have the expansions' real type");
  static_assert(CentresView::rank == 2 && MultipoleView::rank == 2 && LocalView::rank == 2,
                "kfmm::m2l: centres are Real*[3], multipoles and locals Real** (nodes x coefficients)");
  static_assert(
      std::is_same_v<typename MultipoleView::array_layout, Kokkos::LayoutRight> &&
          std::is_same_v<typename LocalView::array_layout, Kokkos::LayoutRight>,
      "kfmm::m2l: expansions must be LayoutRight (kfmm::ExpansionView): one contiguous row per node");
  static_assert(
      Kokkos::SpaceAccessibility<ExecutionSpace, typename CentresView::memory_space>::accessible &&
          Kokkos::SpaceAccessibility<ExecutionSpace, typename MultipoleView::memory_space>::accessible &&
          Kokkos::SpaceAccessibility<ExecutionSpace, typename LocalView::memory_space>::accessible,
      "kfmm::m2l: Views must be accessible from the execution space");
  check_order(order);
  const size_t nc = static_cast<size_t>(num_coefficients(order));
  require(multipoles.extent(1) >= nc, "m2l: multipoles has ", multipoles.extent(1),
          " coefficients per node, order ", order, " needs ", nc);
  require(locals.extent(1) >= nc, "m2l: locals has ", locals.extent(1), " coefficients per node, order ",
          order, " needs ", nc);
  require(centres.extent(1) == 3, "m2l: centres must have 3 columns, has ", centres.extent(1));
  require(multipoles.extent(0) == centres.extent(0) && locals.extent(0) == centres.extent(0),
          "m2l: centres, multipoles and locals must have one row per node; they have ", centres.extent(0),
          ", ", multipoles.extent(0), " and ", locals.extent(0));
  require(far_list.offsets.extent(0) == far_list.targets.extent(0) + 1, "m2l: far_list.offsets has ",
          far_list.offsets.extent(0), " entries, expected rows + 1 = ", far_list.targets.extent(0) + 1);
  require(options.pairs_per_chunk >= 0, "m2l: pairs_per_chunk = ", options.pairs_per_chunk, " must be >= 0");
  require(options.team_size >= 0, "m2l: team_size = ", options.team_size, " must be >= 0");
  require(options.baseline_batch >= 0, "m2l: baseline_batch = ", options.baseline_batch, " must be >= 0");
  require(options.lane == M2LLane::automatic || options.lane == M2LLane::fused ||
              options.lane == M2LLane::baseline,
          "m2l: unknown lane value ", static_cast<int>(options.lane));
  require(options.accumulator == M2LAccumulator::automatic ||
              options.accumulator == M2LAccumulator::registers ||
              options.accumulator == M2LAccumulator::scratch,
          "m2l: unknown accumulator value ", static_cast<int>(options.accumulator));
  const M2LLane lane =
      options.lane == M2LLane::automatic ? m2l_automatic_lane<ExecutionSpace>() : options.lane;
  // An option of the other lane would be silently ignored: refused.
  const char* const chosen = options.lane == M2LLane::automatic ? " (chosen by lane = automatic)" : "";
  if (lane == M2LLane::baseline) {
    require(options.team_size == 0 && options.pairs_per_chunk == 0 &&
                options.accumulator == M2LAccumulator::automatic,
            "m2l: team_size = ", options.team_size, ", pairs_per_chunk = ", options.pairs_per_chunk,
            " and accumulator = ", to_string(options.accumulator),
            " are options of the fused lane; the baseline lane", chosen, " takes none of them");
  } else {
    require(options.baseline_batch == 0 && !options.baseline_kokkos_kernels,
            "m2l: baseline_batch = ", options.baseline_batch,
            " and baseline_kokkos_kernels = ", options.baseline_kokkos_kernels ? "true" : "false",
            " are options of the baseline lane; the fused lane", chosen, " takes neither");
    require(!detail::is_host_execution_space<ExecutionSpace> || options.team_size > 0 ||
                options.accumulator == M2LAccumulator::automatic,
            "m2l: accumulator = ", to_string(options.accumulator),
            " places the team kernel's partial locals; with team_size = 0 a host backend runs the "
            "one-thread-per-chunk kernel, which has none (give a team_size to run the team kernel)");
  }
  if (far_list.num_rows() == 0) return;
  if (options.validate) {
    detail::check_interaction_list(space, "m2l", "far_list", far_list,
                                   detail::ValidNodeId{static_cast<int>(centres.extent(0))}, 0,
                                   workspace.list_check);
  }

  detail::dispatch_static_order_for<ExecutionSpace, Real>(order, [&](auto p) {
    constexpr int P = decltype(p)::value;
    if (lane == M2LLane::baseline) {
      // On GPUs the baseline (reference and fallback) runs the runtime-order maths: one kernel for all
      // orders instead of nine, which halves nvcc's compile time of every file that calls m2l. On host
      // backends it is specialised up to max_static_order only (the fused lane's high orders are for speed).
      constexpr int PB =
          detail::is_host_execution_space<ExecutionSpace> && P <= detail::max_static_order ? P : -1;
      detail::m2l_baseline<PB>(space, order, far_list, centres, multipoles, locals, options);
    } else {
      detail::m2l_fused<P>(space, order, far_list, centres, multipoles, locals, options, workspace);
    }
  });
}

/// m2l (above) with its temporaries allocated for this call.
template <class ExecutionSpace, class CentresView, class MultipoleView, class LocalView>
void m2l(const ExecutionSpace& space, int order,
         const InteractionList<typename ExecutionSpace::memory_space>& far_list, const CentresView& centres,
         const MultipoleView& multipoles, const LocalView& locals, const M2LOptions& options = {}) {
  CsrWorkspace<typename ExecutionSpace::memory_space> workspace;
  m2l(space, order, far_list, centres, multipoles, locals, options, workspace);
}

}  // namespace kfmm
