// What a host round trip costs on the default execution space, and what validate's list pass costs
// (operators/kfmm/operators/list_checks.hpp) on the solver's own lists:
//  - round_trip_fence: a one-thread kernel and a fence (the launch and the wait, nothing copied back);
//  - round_trip_copy_pageable: the same kernel, then kfmm::detail::copy_to_host of 8 ints into a stack
//    array (pageable host memory), as every round trip of the library does it;
//  - round_trip_copy_pinned (CUDA builds only): the same into page-locked host memory; the difference
//    is what a pinned staging buffer would save per round trip;
//  - list_check_{near,far}_fp32: the whole check of p2p's near list and m2l's far list at the 2e5 and 1e6
//    goal points (the counters' zero fill, the pass, the copy back), as a validated call pays it.
// Every case times one call between fences; medians over the iterations (benchmark_common.hpp).
#include <benchmark/benchmark.h>
#include <Kokkos_Core.hpp>

#include "benchmark_common.hpp"
#include "kfmm/core/host_copy.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/list_checks.hpp"
#include "solver_lists.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;

struct WriteEight {
  Kokkos::View<int*, Mem> v;
  KOKKOS_INLINE_FUNCTION void operator()(int i) const {
    for (int k = 0; k < 8; ++k) v(k) = i + k;
  }
};

void round_trip_fence(benchmark::State& state) {
  Space space;
  Kokkos::View<int*, Mem> v("v", 8);
  kfmm_bench::time_fenced(state, space, [&] {
    Kokkos::parallel_for("round_trip", Kokkos::RangePolicy<Space>(space, 0, 1), WriteEight{v});
    space.fence();
  });
}

void round_trip_copy_pageable(benchmark::State& state) {
  Space space;
  Kokkos::View<int*, Mem> v("v", 8);
  int host[8];
  kfmm_bench::time_fenced(state, space, [&] {
    Kokkos::parallel_for("round_trip", Kokkos::RangePolicy<Space>(space, 0, 1), WriteEight{v});
    kfmm::detail::copy_to_host(space, host, v, 8);
  });
  benchmark::DoNotOptimize(host[7]);
}

#if defined(KOKKOS_ENABLE_CUDA)
void round_trip_copy_pinned(benchmark::State& state) {
  Space space;
  Kokkos::View<int*, Mem> v("v", 8);
  Kokkos::View<int*, Kokkos::CudaHostPinnedSpace> host("host", 8);
  kfmm_bench::time_fenced(state, space, [&] {
    Kokkos::parallel_for("round_trip", Kokkos::RangePolicy<Space>(space, 0, 1), WriteEight{v});
    kfmm::detail::copy_to_host(space, host.data(), v, 8);
  });
  benchmark::DoNotOptimize(host(7));
}
#endif

template <bool Near>
void list_check(benchmark::State& state) {
  Space space;
  const auto solver = kfmm_bench::solver_lists_for_case<float>(space, state);
  const auto& tree = solver.tree;
  Kokkos::View<int*, Mem> scratch;  // (a CsrWorkspace's list_check buffer)
  long long pairs = 0;
  const double t = kfmm_bench::time_fenced(state, space, [&] {
    if constexpr (Near) {
      const kfmm::detail::ValidLeaf<decltype(tree.ranges)> valid{
          tree.ranges, static_cast<int>(tree.ranges.extent(0)), tree.num_particles};
      pairs = kfmm::detail::check_interaction_list(space, "p2p", "near_list", solver.lists.near, valid, 0,
                                                   scratch)
                  .pairs;
    } else {
      const kfmm::detail::ValidNodeId valid{static_cast<int>(tree.centres.extent(0))};
      pairs =
          kfmm::detail::check_interaction_list(space, "m2l", "far_list", solver.lists.far, valid, 0, scratch)
              .pairs;
    }
  });
  state.counters["pairs"] = static_cast<double>(pairs);
  state.counters["source_entries"] =  // (the pass runs over these: a list's capacity may exceed its pairs)
      static_cast<double>((Near ? solver.lists.near : solver.lists.far).sources.extent(0));
  state.counters["ns_per_pair"] = pairs > 0 ? 1e9 * t / static_cast<double>(pairs) : 0.0;
}
void list_check_near_fp32(benchmark::State& state) {
  list_check<true>(state);
}
void list_check_far_fp32(benchmark::State& state) {
  list_check<false>(state);
}

void micro(benchmark::internal::Benchmark* b) {
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}
// {n, leaf, theta x 100}: the 2e5 and 1e6 goal points (bench_p2p's and bench_m2l_csr's validated cases)
void goal_points(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "leaf", "theta100"});
  b->Args({200000, 64, 72});
  b->Args({1000000, 128, 75});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(round_trip_fence)->Apply(micro);
BENCHMARK(round_trip_copy_pageable)->Apply(micro);
#if defined(KOKKOS_ENABLE_CUDA)
BENCHMARK(round_trip_copy_pinned)->Apply(micro);
#endif
BENCHMARK(list_check_near_fp32)->Apply(goal_points);
BENCHMARK(list_check_far_fp32)->Apply(goal_points);

}  // namespace

KFMM_BENCHMARK_MAIN();
