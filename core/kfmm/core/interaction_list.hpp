/// \file interaction_list.hpp
/// Interaction lists exchanged between the tree layer (which builds them) and the operators (which
/// consume them): plain CSR Views, so host codes can bring lists built by their own trees.
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm {

/// Pairs (target node, source node) grouped by target, in compressed-row form.
/// Row r lists the sources `sources(offsets(r)) .. sources(offsets(r+1)-1)` of node `targets(r)`.
/// Rows need not cover every node; a node appears as the target of at most one row.
template <class MemorySpace>
struct InteractionList {
  using memory_space = MemorySpace;
  Kokkos::View<int*, MemorySpace> targets;  ///< target node of each row; size rows
  Kokkos::View<int*, MemorySpace> offsets;  ///< row starts; size rows + 1, offsets(0) == 0
  Kokkos::View<int*, MemorySpace> sources;  ///< source nodes; size offsets(rows)

  /// Number of rows (targets with at least one listed source, or all listed targets).
  int num_rows() const { return static_cast<int>(targets.extent(0)); }
  /// Number of pairs; read from the last offset (a device-to-host copy of one int).
  long long num_pairs() const {
    if (offsets.extent(0) == 0) return 0;
    int last = 0;
    Kokkos::deep_copy(last, Kokkos::subview(offsets, offsets.extent(0) - 1));
    return last;
  }
};

}  // namespace kfmm
