/// \file list_checks.hpp
/// What a CSR operator (m2l, p2p) checks of an InteractionList before its kernels read it, with
/// `validate` on: offsets that start at 0 and never decrease, at least as many sources as pairs, targets
/// and sources that are valid nodes (ValidNodeId for m2l, ValidLeaf for p2p), one row per target, and
/// optionally a bound on the target nodes' sizes. All of it is one device pass and one host round trip
/// (~27 us on an H100 whatever the list's length); the separate checks before, four or five round trips
/// and an allocation, cost validated calls 0.10-0.15 ms (docs/kernels.md, "Deviations and open points").
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <string>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/host_copy.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/view_capacity.hpp"

namespace kfmm::detail {

/// Slots of the counters the pass writes at the front of its scratch View (the per-node row counts
/// follow them).
enum ListCheckSlot : int {
  bad_offsets,         // offsets(0) != 0 or offsets(i) < offsets(i - 1)
  last_offset,         // offsets(rows): the number of pairs
  bad_targets,         // targets that are no valid node
  bad_sources,         // sources among the first last_offset that are no valid node
  repeated_targets,    // nodes that are the target of more than one row
  largest_over_bound,  // the largest target node size above the bound (0: none above it)
  list_check_slots
};

/// Index i in [0, max(rows + 1, listed source entries)) checks offset entry i and row i's target (i <= rows,
/// i < rows) and source entry i (i < offsets(rows)). Counters are added atomically only when something is
/// wrong, so a consistent list costs no contention. A node counted twice in `rows_of` is repeated: the
/// thread that lifts its count from 1 to 2 counts it, once per node. Each thread takes `per_thread`
/// indices: on GPUs strided by the thread count (each step a coalesced load, the steps' loads independent,
/// so a thread has them in flight at once: one index per thread ran at ~10 us per million pairs on an
/// H100, docs/kernels.md), on host backends consecutive (one stream per thread).
template <class ExecutionSpace, class ValidNode>
struct ListCheckPass {
  using Mem = typename ExecutionSpace::memory_space;
  static constexpr int per_thread = 8;
  Kokkos::View<const int*, Mem> targets, offsets, sources;
  Kokkos::View<int*, Mem> counts, rows_of;
  ValidNode valid;
  int rows, source_entries, size_bound, threads;
  int end;  // max(rows + 1, source_entries): the indices checked

  KOKKOS_INLINE_FUNCTION void check(int i, int last) const {
    if (i <= rows && (i == 0 ? offsets(0) != 0 : offsets(i) < offsets(i - 1)))
      Kokkos::atomic_add(&counts(bad_offsets), 1);
    if (i < rows) {
      const int t = targets(i);
      if (!valid(t)) {
        Kokkos::atomic_add(&counts(bad_targets), 1);
      } else {
        if (Kokkos::atomic_fetch_add(&rows_of(t), 1) == 1) Kokkos::atomic_add(&counts(repeated_targets), 1);
        const int size = valid.size(t);
        if (size > size_bound) Kokkos::atomic_fetch_max(&counts(largest_over_bound), size);
      }
    }
    if (i < source_entries && i < last && !valid(sources(i))) Kokkos::atomic_add(&counts(bad_sources), 1);
  }

  KOKKOS_INLINE_FUNCTION void operator()(int t) const {
    const int last = offsets(rows);
    if (t == 0) counts(last_offset) = last;
    KFMM_PRAGMA_UNROLL
    for (int k = 0; k < per_thread; ++k) {
      const long long i = is_host_execution_space<ExecutionSpace> ? static_cast<long long>(t) * per_thread + k
                                                                  : t + static_cast<long long>(k) * threads;
      if (i < end) check(static_cast<int>(i), last);
    }
  }
};

/// What check_interaction_list found besides the errors it throws for.
struct ListCheck {
  long long pairs = 0;         ///< the list's number of pairs (its last offset)
  int largest_over_bound = 0;  ///< the largest target node size above the bound asked for (0: none)
};

/// Checks `list` for the CSR operator `op` (its name in messages: `name`) against `valid`, a node rule
/// (ValidNodeId or ValidLeaf, expansion_checks.hpp: operator() says whether an id is a valid node, size()
/// how large it is, describe() the rule in words), and throws a kfmm::Error naming the first problem:
/// offsets, too few sources, targets, sources, repeated targets. `size_bound` > 0 asks for the largest
/// target above it (the caller words that error). `scratch` (a workspace's buffer, grown here) holds the
/// counters and one row count per node. Requires list.offsets to hold rows + 1 entries.
template <class ExecutionSpace, class ValidNode>
ListCheck check_interaction_list(const ExecutionSpace& space, const char* op, const char* name,
                                 const InteractionList<typename ExecutionSpace::memory_space>& list,
                                 const ValidNode& valid, int size_bound,
                                 Kokkos::View<int*, typename ExecutionSpace::memory_space>& scratch) {
  const int rows = list.num_rows();
  const int entries = rows + 1;
  const long long listed = static_cast<long long>(list.sources.extent(0));
  const int source_entries = listed < INT_MAX ? static_cast<int>(listed) : INT_MAX;  // (offsets are int)
  reserve_at_least(scratch, list_check_slots + static_cast<long long>(valid.num_nodes),
                   "kfmm::list_checks::scratch");
  const auto used = Kokkos::subview(scratch, Kokkos::make_pair(0, list_check_slots + valid.num_nodes));
  Kokkos::deep_copy(space, used, 0);
  using Pass = ListCheckPass<ExecutionSpace, ValidNode>;
  const int end = entries > source_entries ? entries : source_entries;
  const int threads =
      static_cast<int>((static_cast<long long>(end) + Pass::per_thread - 1) / Pass::per_thread);
  Pass pass{
      list.targets,
      list.offsets,
      list.sources,
      Kokkos::subview(scratch, Kokkos::make_pair(0, int(list_check_slots))),
      Kokkos::subview(scratch, Kokkos::make_pair(int(list_check_slots), list_check_slots + valid.num_nodes)),
      valid,
      rows,
      source_entries,
      size_bound > 0 ? size_bound : INT_MAX,
      threads,
      end};
  Kokkos::parallel_for(op, Kokkos::RangePolicy<ExecutionSpace>(space, 0, threads), pass);
  int c[list_check_slots];
  copy_to_host(space, c, scratch, list_check_slots);

  require(c[bad_offsets] == 0, op, ": ", name, ".offsets must start at 0 and never decrease; ",
          c[bad_offsets], " of its ", entries, " entries do not");
  const long long pairs = c[last_offset];
  require(listed >= pairs, op, ": ", name, ".sources has ", listed, " entries, fewer than its ", pairs,
          " pairs");
  if (c[bad_targets] != 0)
    throw_error(op, ": ", c[bad_targets], " of the ", rows, " targets of ", name, " are not ",
                valid.describe());
  if (c[bad_sources] != 0)
    throw_error(op, ": ", c[bad_sources], " of the ", pairs, " sources of ", name, " are not ",
                valid.describe());
  const int repeated = c[repeated_targets];
  require(repeated == 0, op, ": ", repeated, repeated == 1 ? " node is" : " nodes are",
          " the target of more than one row of ", name,
          " (a node's sources belong in one row: two rows would add to its outputs at the same time)");
  return {pairs, c[largest_over_bound]};
}

}  // namespace kfmm::detail
