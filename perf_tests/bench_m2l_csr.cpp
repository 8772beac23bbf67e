// M2L over a CSR far list: the fused and baseline lanes side by side, ns per pair.
//
// The seed's microbenchmark (jaccpot bench/m2l_csr_microbench.py), extended: 12,500 nodes uniform in
// [-1, 1]^3, random multipoles, random directed pairs with |delta| >= 0.3 grouped by target (CSR),
// 1M and 6M pairs (--tiny: 4096), orders 2, 4, 6, 8, 9, 10, float and double, both lanes in the same run;
// on host backends also the fused lane in double at orders 12, 14 and 16 (1M pairs).
// Each iteration is one kfmm::m2l call (locals accumulate; the time does not depend on their values).
//
// m2l_solver_lists: the fused lane on the far lists the solver makes (kfmm's octree and dual-tree walk on
// bench_solver's Plummer input, perf_tests/solver_lists.hpp) with the multipoles its P2M and M2M make, at
// the goal points of docs/benchmarks.md, by team size and pairs per chunk (0: the backend's defaults,
// the solver's choice).
//
//   bench_m2l_csr --benchmark_out=m2l.json --benchmark_out_format=json
//   bench_m2l_csr --benchmark_filter='m2l/fp32/.*/pairs:1000000/p:4'
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "benchmark_common.hpp"
#include "kfmm/operators/m2l.hpp"
#include "kfmm/operators/p2m.hpp"
#include "kfmm/operators/translation_passes.hpp"
#include "solver_lists.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;

constexpr int kNodes = 12500;

struct Host {
  std::vector<double> centres;
  std::vector<int> targets, offsets, sources;
};

// Nodes uniform in [-1,1]^3; `pairs` random directed pairs with |delta| >= 0.3, grouped by target.
const Host& host_problem(long long pairs) {
  static std::map<long long, Host> cache;
  auto it = cache.find(pairs);
  if (it != cache.end()) return it->second;
  Host h;
  std::mt19937_64 gen(42);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  h.centres.resize(3 * kNodes);
  for (auto& c : h.centres) c = u(gen);
  std::vector<int> t(pairs), s(pairs);
  std::uniform_int_distribution<int> node(0, kNodes - 1);
  for (long long k = 0; k < pairs; ++k) {
    int a, b;
    double d2;
    do {
      a = node(gen);
      b = node(gen);
      d2 = 0;
      for (int c = 0; c < 3; ++c)
        d2 += (h.centres[3 * a + c] - h.centres[3 * b + c]) * (h.centres[3 * a + c] - h.centres[3 * b + c]);
    } while (d2 < 0.09);
    t[k] = a;
    s[k] = b;
  }
  // counting sort by target; rows for every node that has pairs
  std::vector<int> count(kNodes + 1, 0);
  for (long long k = 0; k < pairs; ++k) ++count[t[k] + 1];
  for (int i = 0; i < kNodes; ++i) count[i + 1] += count[i];
  std::vector<int> sorted(pairs), fill(count.begin(), count.end() - 1);
  for (long long k = 0; k < pairs; ++k) sorted[fill[t[k]]++] = s[k];
  h.offsets.push_back(0);
  for (int i = 0; i < kNodes; ++i) {
    if (count[i + 1] == count[i]) continue;
    h.targets.push_back(i);
    h.offsets.push_back(count[i + 1]);
  }
  h.sources = std::move(sorted);
  return cache.emplace(pairs, std::move(h)).first->second;
}

template <class Real>
void bm_m2l(benchmark::State& state, kfmm::M2LLane lane, bool kokkos_kernels = false) {
  // --tiny: 4096 and 8192 pairs instead of 1M and 6M
  const long long pairs = kfmm_bench::tiny() ? (state.range(0) > 1000000 ? 8192 : 4096) : state.range(0);
  const int order = static_cast<int>(state.range(1));
  const int nc = kfmm::num_coefficients(order);
  const Host& h = host_problem(pairs);
  Space space;
  kfmm::InteractionList<Mem> list;
  list.targets = kfmm_bench::device_ints<Mem>(h.targets, "targets");
  list.offsets = kfmm_bench::device_ints<Mem>(h.offsets, "offsets");
  list.sources = kfmm_bench::device_ints<Mem>(h.sources, "sources");
  Kokkos::View<Real* [3], Mem> centres("centres", kNodes);
  // Rows as the solver stores them (kfmm::expansion_row_length: 16-byte rows, read in 16-byte loads).
  const int row = kfmm::expansion_row_length(order);
  kfmm::ExpansionView<Real, Mem> multipoles("multipoles", kNodes, row), locals("locals", kNodes, row);
  {
    auto hc = Kokkos::create_mirror_view(centres);
    auto hm = Kokkos::create_mirror_view(multipoles);
    std::mt19937 gen(7);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int i = 0; i < kNodes; ++i) {
      for (int c = 0; c < 3; ++c) hc(i, c) = static_cast<Real>(h.centres[3 * i + c]);
      for (int j = 0; j < nc; ++j) hm(i, j) = static_cast<Real>(u(gen));
    }
    Kokkos::deep_copy(centres, hc);
    Kokkos::deep_copy(multipoles, hm);
  }
  kfmm::M2LOptions options;
  options.lane = lane;
  options.baseline_kokkos_kernels = kokkos_kernels;
  // (The list is consistent by construction: the kernel is timed without validate's passes over the
  // rows, the pairs and the nodes, as the solver calls it.)
  options.validate = false;
  const double t = kfmm_bench::time_fenced(
      state, space, [&] { kfmm::m2l(space, order, list, centres, multipoles, locals, options); });
  kfmm_bench::report_pairs(state, t, static_cast<double>(pairs));
  state.counters["order"] = order;
  state.counters["rows"] = static_cast<double>(h.targets.size());
  state.SetLabel(std::string(kfmm::to_string(lane)) +
                 (kokkos_kernels ? " (Kokkos Kernels z-translation)" : "") +
                 (sizeof(Real) == 4 ? " fp32" : " fp64"));
}

// Registration: for each precision, size and order the fused lane and then the baseline lane, so the
// two appear side by side in the output.
const bool registered = [] {
  for (int precision = 0; precision < 2; ++precision)
    for (long long pairs : {1000000LL, 6000000LL})
      for (int p : {2, 4, 6, 8, 9, 10})
        for (kfmm::M2LLane lane : {kfmm::M2LLane::fused, kfmm::M2LLane::baseline}) {
          const std::string name =
              std::string("m2l/") + (precision == 0 ? "fp32/" : "fp64/") + kfmm::to_string(lane);
          auto* b = precision == 0
                        ? benchmark::RegisterBenchmark(
                              name.c_str(), [lane](benchmark::State& s) { bm_m2l<float>(s, lane); })
                        : benchmark::RegisterBenchmark(
                              name.c_str(), [lane](benchmark::State& s) { bm_m2l<double>(s, lane); });
          b->ArgNames({"pairs", "p"})->Args({pairs, p})->UseManualTime()->Unit(benchmark::kMillisecond);
        }
  // Host backends, double: the fused lane at the high orders of the CPU's low tolerances (compile-time up
  // to max_host_double_static_order there; the CPU 5e-8 goal point runs p 14).
  if (!kfmm_bench::on_device()) {
    for (int p : {12, 14, 16}) {
      benchmark::RegisterBenchmark("m2l/fp64/fused",
                                   [](benchmark::State& s) { bm_m2l<double>(s, kfmm::M2LLane::fused); })
          ->ArgNames({"pairs", "p"})
          ->Args({1000000, p})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
#if defined(KFMM_HAVE_KOKKOSKERNELS)
  // the baseline with its z-translation as one SerialGemm per pair (runtime-order maths)
  for (int p : {4, 8}) {
    benchmark::RegisterBenchmark("m2l/fp32/baseline_kokkos_kernels",
                                 [](benchmark::State& s) { bm_m2l<float>(s, kfmm::M2LLane::baseline, true); })
        ->ArgNames({"pairs", "p"})
        ->Args({1000000, p})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
#endif
  return true;
}();

/// The fused M2L over the solver's far list at order p: Plummer (bench_solver's input), kfmm's octree and
/// walk, multipoles from P2M and M2M; the locals accumulate (the time does not depend on their values).
/// With Validate, as an embedding code calls it by default (M2LOptions::validate: the list checks, their
/// device reductions and host round trips, timed with the kernel).
template <class Real, bool Validate = false>
void bm_m2l_solver_lists(benchmark::State& state) {
  const int order = static_cast<int>(state.range(3));
  Space space;
  const auto solver = kfmm_bench::solver_lists_for_case<Real>(space, state);
  const auto& t = solver.tree;
  const int n = t.num_particles;
  const int row = kfmm::expansion_row_length(order);
  kfmm::ExpansionView<Real, Mem> multipoles("multipoles", t.num_nodes, row),
      locals("locals", t.num_nodes, row);
  kfmm::p2m(space, order, t.positions, t.masses, t.ranges, t.leaves, t.centres, multipoles);
  kfmm::TranslationPassWorkspace<Mem> passes;
  kfmm::m2m_pass(space, order, 0, t.level_offsets[t.num_levels - 1], t.first_child, t.num_children, t.centres,
                 multipoles, passes);
  kfmm::M2LOptions options;
  options.lane = kfmm::M2LLane::fused;
  options.team_size = static_cast<int>(state.range(4));
  options.pairs_per_chunk = static_cast<int>(state.range(5));
  options.validate = Validate;  // (off: as the solver calls it)
  kfmm::CsrWorkspace<Mem> workspace;
  try {
    const double seconds = kfmm_bench::time_fenced(state, space, [&] {
      kfmm::m2l(space, order, solver.lists.far, t.centres, multipoles, locals, options, workspace);
    });
    const double pairs = static_cast<double>(solver.lists.far.sources.extent(0));
    kfmm_bench::report_pairs(state, seconds, pairs);
    state.counters["pairs_per_particle"] = pairs / n;
  } catch (const kfmm::Error& e) {  // (a team size the backend cannot run at this order is refused)
    state.SkipWithError(e.what());
  }
}

// Each case {n, leaf, theta x 100, p} at the default team and every pairs per chunk given (0: the
// default). (Teams of 64 and 128 threads, measured in the first run, took 1.1-1.9x the time in float and
// 4-9x in double, whose scratch accumulator then no longer fits the fast team scratch; 128 pairs was
// the default chunk before.)
void add_solver_cases(benchmark::internal::Benchmark* b, const std::vector<std::vector<int>>& cases) {
  const std::vector<int> chunks =
      kfmm_bench::on_device() ? std::vector<int>{0, 128, 512, 2048, 4096, 16384} : std::vector<int>{0};
  kfmm_bench::add_team_chunk_cases(b, {"n", "leaf", "theta100", "p"}, cases, {0}, chunks);
}
void m2l_solver_lists_fp32(benchmark::State& state) {
  bm_m2l_solver_lists<float>(state);
}
void m2l_solver_lists_fp64(benchmark::State& state) {
  bm_m2l_solver_lists<double>(state);
}
void m2l_solver_lists_validated_fp32(benchmark::State& state) {
  bm_m2l_solver_lists<float, true>(state);
}
// The goal points of docs/benchmarks.md (perf_tests/sweeps/h200_goals.yaml).
BENCHMARK(m2l_solver_lists_fp32)->Apply([](benchmark::internal::Benchmark* b) {
  // (and near the fp32 tolerance mode's points at 1e-4: p 8, theta 0.629, leaf 88 / 80)
  add_solver_cases(b, {{200000, 64, 72, 7},
                       {1000000, 128, 75, 7},
                       {10000000, 96, 70, 6},
                       {1000000, 88, 63, 8},
                       {200000, 80, 63, 8}});
});
BENCHMARK(m2l_solver_lists_fp64)->Apply([](benchmark::internal::Benchmark* b) {
  add_solver_cases(b, {{1000000, 96, 42, 9}, {200000, 96, 42, 9}});
});
// What validate costs (against m2l_solver_lists_fp32 of the same case): the 2e5 and 1e6 goal points.
BENCHMARK(m2l_solver_lists_validated_fp32)->Apply([](benchmark::internal::Benchmark* b) {
  kfmm_bench::add_team_chunk_cases(b, {"n", "leaf", "theta100", "p"},
                                   {{200000, 64, 72, 7}, {1000000, 128, 75, 7}}, {0}, {0});
});

}  // namespace

KFMM_BENCHMARK_MAIN();
