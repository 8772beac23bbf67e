/// \file m2l_csr_options.hpp
/// Options of the batched M2L operator (kfmm::m2l in m2l.hpp) and what its two lanes share:
/// the lane names, the compile-time order dispatch and the per-pair translation call.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/operators/m2l_pair.hpp"
#include "kfmm/operators/static_order.hpp"

namespace kfmm {

/// Implementation ("lane") of the batched M2L. Both give the same results to round-off and are
/// deterministic; they differ in data flow (docs/kernels.md).
enum class M2LLane {
  automatic,  ///< the faster lane on the current backend (fused on every backend measured so far)
  fused,      ///< one team per target row: translations in registers, partial locals reduced on chip
  baseline,   ///< per-pair translations to a global buffer, reduced per target by a segmented scan
};

/// Where a thread of the fused lane's GPU team keeps its partial local expansion.
enum class M2LAccumulator {
  automatic,  ///< registers when (p+1)^2 reals fit in 256 bytes (fp32 p <= 7, fp64 p <= 4), else scratch
  registers,  ///< a local array kept in registers (compile-time orders whose local fits in 256 bytes)
  scratch,    ///< the thread's own column of team scratch (saves (p+1)^2 registers at high p)
};

/// Options of kfmm::m2l. Defaults suit every backend; the tuning fields exist for benchmarks.
struct M2LOptions {
  M2LLane lane = M2LLane::automatic;
  /// Both lanes are deterministic by construction (fixed work decomposition, fixed-order reductions,
  /// no atomics): the same inputs give bitwise identical locals on a backend. The flag therefore
  /// costs nothing; it is accepted so callers can state the requirement.
  bool deterministic = true;
  /// Fused lane: most pairs of a row one work item takes (longer rows are split and their partial
  /// locals combined in a fixed order). 0 = backend default (32 x team size for the team kernel in
  /// float and 64 x in double, i.e. 1024 and 2048 on GPUs; 256 for the host kernel).
  int pairs_per_chunk = 0;
  /// Fused lane: threads per team of the team (GPU) kernel; 0 = backend default (32 on GPUs; host
  /// backends then run the one-thread-per-chunk kernel). A value on a host backend runs the team
  /// kernel there (the tests use this to check the GPU code path on a CPU).
  int team_size = 0;
  /// Fused lane, team kernel: where partial locals live (see M2LAccumulator).
  M2LAccumulator accumulator = M2LAccumulator::automatic;
  /// Baseline lane: pairs translated per batch (the global buffer holds batch x (p+1)^2 reals);
  /// 0 = as many as fit in 32 MiB.
  int baseline_batch = 0;
  /// Baseline lane: apply the z-axis translation as one dense (p+1) x (p+1) by (p+1) x (2p+1) product
  /// per pair with Kokkos Kernels' SerialGemm (only when kfmm is built with Kokkos Kernels; requesting
  /// it without throws). Off by default: the structured loop is faster (docs/kernels.md).
  bool baseline_kokkos_kernels = false;
  /// Check that far_list.offsets start at 0 and never decrease, that far_list.sources holds the list's
  /// last offset of pairs, that every target and source is a node id and that no node is the target of
  /// two rows: one device pass over the rows and the pairs and one host round trip (list_checks.hpp; the
  /// counters live in the workspace). A caller whose lists come from kfmm::dual_tree_walk may turn it off.
  bool validate = true;
};

/// Name of a lane ("automatic", "fused", "baseline").
inline const char* to_string(M2LLane lane) {
  switch (lane) {
    case M2LLane::fused:
      return "fused";
    case M2LLane::baseline:
      return "baseline";
    default:
      return "automatic";
  }
}

/// Name of an accumulator ("automatic", "registers", "scratch"; "invalid" for other values).
inline const char* to_string(M2LAccumulator accumulator) {
  switch (accumulator) {
    case M2LAccumulator::automatic:
      return "automatic";
    case M2LAccumulator::registers:
      return "registers";
    case M2LAccumulator::scratch:
      return "scratch";
    default:
      return "invalid";
  }
}

/// Parses a lane name as written by to_string; throws kfmm::Error naming the valid choices.
inline M2LLane m2l_lane_from_string(const std::string& name) {
  if (name == "automatic" || name == "auto") return M2LLane::automatic;
  if (name == "fused") return M2LLane::fused;
  if (name == "baseline") return M2LLane::baseline;
  throw Error("unknown M2L lane '" + name + "' (expected automatic, fused or baseline)");
}

/// The lane `automatic` selects on ExecutionSpace: fused everywhere (perf_tests/bench_m2l_csr.cpp
/// measures both lanes side by side; docs/kernels.md has the figures).
template <class ExecutionSpace>
constexpr M2LLane m2l_automatic_lane() {
  return M2LLane::fused;
}

namespace detail {

/// Largest partial local (bytes) the fused GPU kernel keeps in registers: fp32 p <= 7, fp64 p <= 4.
inline constexpr std::size_t m2l_register_bytes = 256;

/// Capacity of a per-pair coefficient buffer for compile-time order P (P = -1: max_order).
template <int P>
inline constexpr int m2l_capacity = P >= 0 ? num_coefficients(P) : num_coefficients(max_order);

/// The per-pair rotation M2L of the ops layer at compile-time order P (P = -1: runtime `order`).
template <int P, class Real>
KOKKOS_FORCEINLINE_FUNCTION void m2l_pair_dispatch(int order, const Real* M, Real dx, Real dy, Real dz,
                                                   Real* L) {
  if constexpr (P >= 0) {
    m2l_rotation_pair<P>(M, dx, dy, dz, L);
  } else {
    m2l_rotation_pair(order, M, dx, dy, dz, L);
  }
}

}  // namespace detail
}  // namespace kfmm
