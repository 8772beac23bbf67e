// P2P near field on Plummer leaf lists: interactions per second (leaf 16, 32, 64; float, float with
// double accumulation, double), and the O(N^2) direct sum for comparison.
//
// p2p_solver_lists: the same kernel on the lists the solver makes (kfmm's octree and dual-tree walk on
// bench_solver's Plummer input, seed 2024) at the goal points of docs/benchmarks.md, by team size (0: the
// kernel's default for the tree's leaf size, the solver's choice). Leaves there hold 1 .. leaf particles
// (mean ~24 at leaf 80), so the team size decides how many threads a leaf's targets leave idle
// (docs/kernels.md, "P2P").
//
// The leaf lists are built here (benchmark-local, not library code): Plummer points sorted by a
// 63-bit Morton key, consecutive runs of `leaf` points cut into leaves, and leaf B in the near row of
// leaf A when their bounding spheres are not well separated, r_A + r_B > theta |c_A - c_B| with
// theta = 0.6 (what a dual-tree walk with that opening angle leaves to the near field). Each row
// holds the self pair once. "interactions" counts the evaluated (i, j) pairs, i != j.
//
//   bench_p2p --benchmark_out=p2p.json --benchmark_out_format=json
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark_common.hpp"
#include "kfmm/operators/direct_sum.hpp"
#include "kfmm/operators/p2p.hpp"
#include "solver_lists.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;

struct Problem {
  std::vector<double> x;  // 3 per particle, Morton-sorted
  std::vector<double> m;
  std::vector<int> ranges, targets, offsets, sources;
  double interactions = 0;
};

std::uint64_t spread_bits(std::uint64_t v) {  // 21 bits -> every third bit
  v &= 0x1fffff;
  v = (v | v << 32) & 0x1f00000000ffffULL;
  v = (v | v << 16) & 0x1f0000ff0000ffULL;
  v = (v | v << 8) & 0x100f00f00f00f00fULL;
  v = (v | v << 4) & 0x10c30c30c30c30c3ULL;
  v = (v | v << 2) & 0x1249249249249249ULL;
  return v;
}

// Plummer sphere (scale radius 1, cut at r <= 20), equal masses 1/N.
std::vector<double> plummer(int n, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> x(3 * n);
  for (int i = 0; i < n; ++i) {
    double r;
    do {
      r = 1.0 / std::sqrt(std::pow(u(gen), -2.0 / 3.0) - 1.0);
    } while (!(r <= 20.0));
    const double z = 2 * u(gen) - 1, phi = 2 * M_PI * u(gen), s = std::sqrt(1 - z * z);
    x[3 * i] = r * s * std::cos(phi);
    x[3 * i + 1] = r * s * std::sin(phi);
    x[3 * i + 2] = r * z;
  }
  return x;
}

const Problem& problem(int n, int leaf) {
  static std::map<std::pair<int, int>, Problem> cache;
  auto it = cache.find({n, leaf});
  if (it != cache.end()) return it->second;
  const std::vector<double> raw = plummer(n, 1);
  double lo[3] = {1e300, 1e300, 1e300}, hi[3] = {-1e300, -1e300, -1e300};
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min(lo[c], raw[3 * i + c]);
      hi[c] = std::max(hi[c], raw[3 * i + c]);
    }
  double extent = 0;
  for (int c = 0; c < 3; ++c) extent = std::max(extent, hi[c] - lo[c]);
  std::vector<std::uint64_t> key(n);
  for (int i = 0; i < n; ++i) {
    std::uint64_t k = 0;
    for (int c = 0; c < 3; ++c) {
      const auto q = static_cast<std::uint64_t>((raw[3 * i + c] - lo[c]) / extent * 2097151.0);
      k |= spread_bits(q) << c;
    }
    key[i] = k;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return key[a] < key[b]; });
  Problem p;
  p.x.resize(3 * n);
  p.m.assign(n, 1.0 / n);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) p.x[3 * i + c] = raw[3 * order[i] + c];
  const int leaves = (n + leaf - 1) / leaf;
  std::vector<double> centre(3 * leaves), radius(leaves);
  for (int a = 0; a < leaves; ++a) {
    const int b = a * leaf, e = std::min(n, b + leaf);
    p.ranges.push_back(b);
    p.ranges.push_back(e);
    double l[3] = {1e300, 1e300, 1e300}, h[3] = {-1e300, -1e300, -1e300};
    for (int i = b; i < e; ++i)
      for (int c = 0; c < 3; ++c) {
        l[c] = std::min(l[c], p.x[3 * i + c]);
        h[c] = std::max(h[c], p.x[3 * i + c]);
      }
    double r2 = 0;
    for (int c = 0; c < 3; ++c) centre[3 * a + c] = 0.5 * (l[c] + h[c]);
    for (int i = b; i < e; ++i) {
      double d2 = 0;
      for (int c = 0; c < 3; ++c)
        d2 += (p.x[3 * i + c] - centre[3 * a + c]) * (p.x[3 * i + c] - centre[3 * a + c]);
      r2 = std::max(r2, d2);
    }
    radius[a] = std::sqrt(r2);
  }
  const double theta = 0.6;
  p.offsets.push_back(0);
  for (int a = 0; a < leaves; ++a) {
    const int na = p.ranges[2 * a + 1] - p.ranges[2 * a];
    for (int b = 0; b < leaves; ++b) {
      double d2 = 0;
      for (int c = 0; c < 3; ++c)
        d2 += (centre[3 * a + c] - centre[3 * b + c]) * (centre[3 * a + c] - centre[3 * b + c]);
      const double s = radius[a] + radius[b];
      if (a == b || s * s > theta * theta * d2) {
        p.sources.push_back(b);
        const int nb = p.ranges[2 * b + 1] - p.ranges[2 * b];
        p.interactions += static_cast<double>(na) * (a == b ? na - 1 : nb);
      }
    }
    p.targets.push_back(a);
    p.offsets.push_back(static_cast<int>(p.sources.size()));
  }
  return cache.emplace(std::make_pair(n, leaf), std::move(p)).first->second;
}

template <class Real>
struct Particles {
  Kokkos::View<Real*[3], Mem> x, a;
  Kokkos::View<Real*, Mem> m, phi;
};

template <class Real>
Particles<Real> upload(const Problem& p) {
  const int n = static_cast<int>(p.m.size());
  Particles<Real> d{Kokkos::View<Real* [3], Mem>("x", n), Kokkos::View<Real* [3], Mem>("a", n),
                    Kokkos::View<Real*, Mem>("m", n), Kokkos::View<Real*, Mem>("phi", n)};
  auto hx = Kokkos::create_mirror_view(d.x);
  auto hm = Kokkos::create_mirror_view(d.m);
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) hx(i, c) = static_cast<Real>(p.x[3 * i + c]);
    hm(i) = static_cast<Real>(p.m[i]);
  }
  Kokkos::deep_copy(d.x, hx);
  Kokkos::deep_copy(d.m, hm);
  return d;
}

int particles() {
  return kfmm_bench::tiny() ? 4096 : 1 << 18;
}

template <class Real>
void bm_p2p(benchmark::State& state, bool accumulate_in_double, bool mutual = false) {
  const int leaf = static_cast<int>(state.range(0));
  const Problem& p = problem(particles(), leaf);
  Space space;
  kfmm::InteractionList<Mem> list;
  list.targets = kfmm_bench::device_ints<Mem>(p.targets, "targets");
  list.offsets = kfmm_bench::device_ints<Mem>(p.offsets, "offsets");
  list.sources = kfmm_bench::device_ints<Mem>(p.sources, "sources");
  Kokkos::View<int* [2], Mem> ranges("ranges", p.ranges.size() / 2);
  {
    auto h = Kokkos::create_mirror_view(ranges);
    for (size_t i = 0; i < p.ranges.size() / 2; ++i) {
      h(i, 0) = p.ranges[2 * i];
      h(i, 1) = p.ranges[2 * i + 1];
    }
    Kokkos::deep_copy(ranges, h);
  }
  auto d = upload<Real>(p);
  kfmm::P2POptions options;
  options.accumulate_in_double = accumulate_in_double;
  options.mutual = mutual;
  // (The list is consistent by construction: the kernel is timed without validate's passes over the
  // rows, the pairs and the leaves, as the solver calls it.)
  options.validate = false;
  const double t = kfmm_bench::time_fenced(
      state, space, [&] { kfmm::p2p(space, list, ranges, d.x, d.m, 1.0, 1e-3, d.a, d.phi, options); });
  kfmm_bench::report_pairs(state, t, p.interactions);
  state.counters["interactions_per_second"] = p.interactions / t;
  state.counters["near_pairs_per_particle"] = p.interactions / static_cast<double>(p.m.size());
  state.counters["leaves"] = static_cast<double>(p.targets.size());
}

template <class Real>
void bm_direct(benchmark::State& state) {
  const int n = kfmm_bench::tiny() ? 2048 : 32768;
  const Problem& p = problem(n, 64);
  Space space;
  auto d = upload<Real>(p);
  Kokkos::View<double* [3], Mem> a("a", n);
  Kokkos::View<double*, Mem> phi("phi", n);
  const double t =
      kfmm_bench::time_fenced(state, space, [&] { kfmm::direct_sum(space, d.x, d.m, 1.0, 1e-3, a, phi); });
  const double pairs = static_cast<double>(n) * (n - 1);
  kfmm_bench::report_pairs(state, t, pairs);
  state.counters["interactions_per_second"] = pairs / t;
}

void leaves(benchmark::internal::Benchmark* b) {
  b->ArgNames({"leaf"});
  for (int leaf : {16, 32, 64}) b->Args({leaf});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

void p2p_fp32(benchmark::State& state) {
  bm_p2p<float>(state, false);
}
void p2p_fp32_accumulate_fp64(benchmark::State& state) {
  bm_p2p<float>(state, true);
}
void p2p_fp64(benchmark::State& state) {
  bm_p2p<double>(state, false);
}
// Host backends: each unordered leaf pair once for both leaves (P2POptions::mutual; "interactions"
// still counts ordered pairs, so the rate compares with p2p_fp64's).
void p2p_fp64_mutual(benchmark::State& state) {
  if (!kfmm::detail::is_host_execution_space<Space>) {
    state.SkipWithError("mutual P2P runs on host backends only");
    return;
  }
  bm_p2p<double>(state, false, true);
}
void direct_sum_fp32_inputs(benchmark::State& state) {
  bm_direct<float>(state);
}

BENCHMARK(p2p_fp32)->Apply(leaves);
BENCHMARK(p2p_fp32_accumulate_fp64)->Apply(leaves);
BENCHMARK(p2p_fp64)->Apply(leaves);
void host_leaves(benchmark::internal::Benchmark* b) {
  b->ArgNames({"leaf"});
  for (int leaf : {32, 64, 128}) b->Args({leaf});
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(p2p_fp64_mutual)->Apply(host_leaves);
BENCHMARK(direct_sum_fp32_inputs)->UseManualTime()->Unit(benchmark::kMillisecond);

/// P2P over the solver's own near list: Plummer (bench_solver's input), kfmm's octree and walk. With
/// Validate, as an embedding code calls it by default (P2POptions::validate: the list checks, their
/// device reductions and host round trips, timed with the kernel).
template <class Real, bool Validate = false>
void bm_p2p_solver_lists(benchmark::State& state) {
  const int team = static_cast<int>(state.range(3));
  const int per_chunk = static_cast<int>(state.range(4));  // source leaves per chunk (0: the default)
  Space space;
  const auto solver = kfmm_bench::solver_lists_for_case<Real>(space, state);
  const auto& tree = solver.tree;
  const int n = tree.num_particles;
  const auto& lists = solver.lists;
  const double interactions = kfmm_bench::near_interactions(tree.ranges, lists.near, true);  // (i != j)
  Kokkos::View<Real* [3], Mem> acc("acc", n);
  Kokkos::View<Real*, Mem> pot("pot", n);
  kfmm::P2POptions options;
  options.team_size = team;
  options.leaves_per_chunk = per_chunk;
  options.validate = Validate;                           // (off: as the solver calls it)
  options.expected_leaf_size = tree.max_leaf_particles;  // (the solver's hint: team 0 is its choice)
  kfmm::CsrWorkspace<Mem> workspace;
  const double t = kfmm_bench::time_fenced(state, space, [&] {
    kfmm::p2p(space, lists.near, tree.ranges, tree.positions, tree.masses, 1.0, 0.0, acc, pot, options,
              workspace);
  });
  kfmm_bench::report_pairs(state, t, interactions);
  state.counters["interactions_per_second"] = interactions / t;
  state.counters["interactions_per_particle"] = interactions / n;
  state.counters["mean_leaf_occupancy"] = static_cast<double>(n) / tree.num_leaves;
}

// Each case {n, leaf, theta x 100} at every team size and source leaves per chunk given (0: the default).
void add_solver_cases(benchmark::internal::Benchmark* b, const std::vector<std::vector<int>>& cases,
                      const std::vector<int>& teams, const std::vector<int>& chunks) {
  kfmm_bench::add_team_chunk_cases(b, {"n", "leaf", "theta100"}, cases, teams, chunks);
}
// GPU: the team kernel at several team sizes; host: the default kernel only (team 0).
std::vector<int> team_sizes() {
  return kfmm_bench::on_device() ? std::vector<int>{0, 64, 128, 256} : std::vector<int>{0};
}
// The goal points of docs/benchmarks.md first, then neighbouring leaf sizes and sizes (the team size that
// fills a leaf's block depends on the leaf bound; at 1e7 the inputs no longer fit the GPU's L2, where
// occupancy hides the misses).
void solver_lists(benchmark::internal::Benchmark* b) {
  add_solver_cases(b,
                   {{1000000, 80, 75},
                    {200000, 64, 72},
                    {10000000, 64, 70},
                    {1000000, 64, 75},
                    {200000, 80, 72},
                    {10000000, 80, 70},
                    {1000000, 128, 75},
                    {1000000, 88, 63},  // (near the fp32 tolerance mode's points at 1e-4: p 8, theta
                    {200000, 80, 63}},  // 0.629, leaf 88 / 80)
                   team_sizes(), {0});
}
void solver_lists_fp64(benchmark::internal::Benchmark* b) {
  add_solver_cases(b, {{1000000, 80, 42}, {1000000, 64, 42}, {1000000, 128, 42}, {200000, 80, 42}},
                   team_sizes(), {0});
}
// Source leaves per chunk at the default team (the solver's), on the goal points' lists: a chunk is one
// team's work, so with 128-256 threads per team a chunk of 64 leaves of ~24 particles is 3-6 tiles.
std::vector<int> chunk_sizes() {
  return kfmm_bench::on_device() ? std::vector<int>{16, 32, 64, 128, 256} : std::vector<int>{64};
}
void p2p_solver_lists_fp32(benchmark::State& state) {
  bm_p2p_solver_lists<float>(state);
}
void p2p_solver_lists_fp64(benchmark::State& state) {
  bm_p2p_solver_lists<double>(state);
}
void p2p_solver_lists_validated_fp32(benchmark::State& state) {
  bm_p2p_solver_lists<float, true>(state);
}
BENCHMARK(p2p_solver_lists_fp32)->Apply(solver_lists);
BENCHMARK(p2p_solver_lists_fp64)->Apply(solver_lists_fp64);
// What validate costs (against p2p_solver_lists_fp32 of the same case): the 2e5 and 1e6 goal points.
BENCHMARK(p2p_solver_lists_validated_fp32)->Apply([](benchmark::internal::Benchmark* b) {
  add_solver_cases(b, {{200000, 64, 72}, {1000000, 128, 75}}, {0}, {0});
});
BENCHMARK(p2p_solver_lists_fp32)
    ->Name("p2p_solver_chunks_fp32")
    ->Apply([](benchmark::internal::Benchmark* b) {
      // (and near the fp32 tolerance mode's points at 1e-4: p 8, theta 0.629, leaf 88 / 80)
      add_solver_cases(
          b, {{1000000, 128, 75}, {10000000, 96, 70}, {200000, 64, 72}, {1000000, 88, 63}, {200000, 80, 63}},
          {0}, chunk_sizes());
    });
BENCHMARK(p2p_solver_lists_fp64)
    ->Name("p2p_solver_chunks_fp64")
    ->Apply([](benchmark::internal::Benchmark* b) {
      // (the fp64 goal point, the same at 2e5, and the fp64 tolerance mode's 1e-7 point)
      add_solver_cases(b, {{1000000, 96, 42}, {200000, 96, 42}, {1000000, 80, 34}}, {0}, chunk_sizes());
    });

}  // namespace

KFMM_BENCHMARK_MAIN();
