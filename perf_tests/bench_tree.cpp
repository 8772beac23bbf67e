// Tree build and dual-tree walk versus N and leaf size, on Plummer and uniform inputs (fp32).
// Counters: nodes, leaves, levels, walk rounds, and per particle: directed far pairs (M2L),
// near leaf pairs, and P2P particle interactions (sum over near pairs of n_target * n_source / N);
// BM_walk runs both list builds (kfmm::ListBuild sort and scatter) and reports its workspace's bytes.
//   bench_tree [--tiny] [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark_common.hpp"
#include "kfmm/tree/dual_tree_walk.hpp"
#include "kfmm/tree/octree.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Memory = Space::memory_space;
using Real = float;

constexpr double kTheta = 0.6;

struct Particles {
  Kokkos::View<Real* [3], Memory> positions;
  Kokkos::View<Real*, Memory> masses;
};

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double uniform(std::uint64_t& s) {
  return static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53;
}

/// distribution 0: Plummer sphere (scale radius 1, radii beyond 100 redrawn); 1: uniform unit cube.
Particles make_particles(int n, int distribution) {
  Particles p{Kokkos::View<Real* [3], Memory>("bench::positions", n),
              Kokkos::View<Real*, Memory>("bench::masses", n)};
  auto hp = Kokkos::create_mirror_view(p.positions);
  auto hm = Kokkos::create_mirror_view(p.masses);
  std::uint64_t s = 12345;
  for (int i = 0; i < n; ++i) {
    if (distribution == 0) {
      double r;
      do {
        r = 1.0 / std::sqrt(std::pow(uniform(s) * (1 - 1e-12) + 1e-12, -2.0 / 3.0) - 1.0);
      } while (r > 100);
      const double c = 2 * uniform(s) - 1, phi = 6.283185307179586 * uniform(s), sn = std::sqrt(1 - c * c);
      hp(i, 0) = static_cast<Real>(r * sn * std::cos(phi));
      hp(i, 1) = static_cast<Real>(r * sn * std::sin(phi));
      hp(i, 2) = static_cast<Real>(r * c);
    } else {
      for (int a = 0; a < 3; ++a) hp(i, a) = static_cast<Real>(uniform(s));
    }
    hm(i) = static_cast<Real>(1.0 / n);
  }
  Kokkos::deep_copy(p.positions, hp);
  Kokkos::deep_copy(p.masses, hm);
  return p;
}

/// Host tally of the lists: near leaf pairs and P2P particle interactions.
template <class Tree, class Lists>
void report_lists(benchmark::State& state, const Tree& tree, const Lists& lists) {
  const double n = tree.num_particles;
  const double interactions = kfmm_bench::near_interactions(tree.ranges, lists.near, false);
  state.counters["nodes"] = tree.num_nodes;
  state.counters["leaves"] = tree.num_leaves;
  state.counters["levels"] = tree.num_levels;
  state.counters["mean_leaf_occupancy"] = n / tree.num_leaves;
  state.counters["rounds"] = lists.statistics.rounds;
  state.counters["peak_entries"] = static_cast<double>(lists.statistics.peak_entries);
  state.counters["far_pairs_per_particle"] = static_cast<double>(lists.far.num_pairs()) / n;
  state.counters["near_pairs_per_particle"] = static_cast<double>(lists.near.num_pairs()) / n;
  state.counters["p2p_per_particle"] = interactions / n;
}

std::string distribution_name(int d) {
  return d == 0 ? "plummer" : "uniform";
}

void BM_build(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), leaf = static_cast<int>(state.range(1));
  const int dist = static_cast<int>(state.range(2));
  state.SetLabel(distribution_name(dist));
  const Space space;
  const auto p = make_particles(n, dist);
  kfmm::Octree<Space, Real> tree;
  kfmm::OctreeWorkspace<Memory> ws;  // steady state: arrays and temporaries reused between builds
  const double t = kfmm_bench::time_fenced(
      state, space, [&] { kfmm::build_octree(space, p.positions, p.masses, leaf, tree, ws); });
  state.counters["ns_per_particle"] = t * 1e9 / n;
  state.counters["nodes"] = tree.num_nodes;
  state.counters["levels"] = tree.num_levels;
}

/// Bytes the walk's workspace holds in its arrays (of a size per pair, per open pair, per node or per
/// round; the look-back scans' few words left out).
long long workspace_bytes(const kfmm::WalkWorkspace<Memory>& ws) {
  long long bytes = 0;
  const auto add = [&](const auto& v) { bytes += static_cast<long long>(v.span()) * sizeof(v.data()[0]); };
  add(ws.node_storage);
  add(ws.pair_keys);
  add(ws.pair_sources);
  add(ws.bounds);
  add(ws.far_rows);
  add(ws.far_offsets);
  add(ws.near_rows);
  add(ws.near_offsets);
  add(ws.sort.keys);
  add(ws.sort.values);
  add(ws.sort.counts);
  add(ws.sort.bytes);
  add(ws.row_counts);
  add(ws.state);
  add(ws.split);
  return bytes;
}

/// The walk alone with a reused workspace, its lists built by ListBuild `build` (0 sort, 1 scatter).
void BM_walk(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), leaf = static_cast<int>(state.range(1));
  const int dist = static_cast<int>(state.range(2));
  const bool scatter = state.range(3) == 1;
  state.SetLabel(distribution_name(dist));
  const Space space;
  const auto p = make_particles(n, dist);
  const auto tree = kfmm::build_octree(space, p.positions, p.masses, leaf);
  kfmm::WalkWorkspace<Memory> ws;
  kfmm::InteractionLists<Memory> lists;
  kfmm::WalkOptions options{kTheta};
  options.list_build = scatter ? kfmm::ListBuild::scatter : kfmm::ListBuild::sort;
  const double t =
      kfmm_bench::time_fenced(state, space, [&] { lists = kfmm::dual_tree_walk(space, tree, options, ws); });
  state.counters["ns_per_particle"] = t * 1e9 / n;
  state.counters["workspace_bytes_per_particle"] = static_cast<double>(workspace_bytes(ws)) / n;
  state.counters["pairs_visited_per_particle"] = static_cast<double>(lists.statistics.pairs_visited) / n;
  state.counters["planned_rounds"] = lists.statistics.planned_rounds;  // steady state: every round
  state.counters["replanned"] = lists.statistics.replanned ? 1 : 0;
  report_lists(state, tree, lists);
}

void BM_tree_and_lists(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), leaf = static_cast<int>(state.range(1));
  const int dist = static_cast<int>(state.range(2));
  state.SetLabel(distribution_name(dist));
  const Space space;
  const auto p = make_particles(n, dist);
  kfmm::WalkWorkspace<Memory> ws;
  kfmm::OctreeWorkspace<Memory> tree_ws;
  kfmm::Octree<Space, Real> tree;
  kfmm::InteractionLists<Memory> lists;
  const double t = kfmm_bench::time_fenced(state, space, [&] {
    kfmm::build_octree(space, p.positions, p.masses, leaf, tree, tree_ws);
    lists = kfmm::dual_tree_walk(space, tree, kfmm::WalkOptions{kTheta}, ws);
  });
  state.counters["ns_per_particle"] = t * 1e9 / n;
  report_lists(state, tree, lists);
}

/// n, leaf and distribution (and with `builds` the walk's ListBuild, 0 sort, 1 scatter).
void sizes(benchmark::internal::Benchmark* b, bool builds) {
  const bool device = !Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible;
  std::vector<int> ns = {10000, 100000, 1000000};
  if (device) ns.push_back(10000000);
  if (kfmm_bench::tiny()) ns = {10000};
  for (int dist : {0, 1})
    for (int leaf : {16, 32, 64, 128})
      for (int n : ns)
        for (int build = 0; build <= (builds ? 1 : 0); ++build)
          b->Args(builds ? std::vector<int64_t>{n, leaf, dist, build} : std::vector<int64_t>{n, leaf, dist});
  if (builds) {
    b->ArgNames({"n", "leaf", "plummer0_uniform1", "sort0_scatter1"});
  } else {
    b->ArgNames({"n", "leaf", "plummer0_uniform1"});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

}  // namespace

int main(int argc, char** argv) {
  // Benchmarks are registered after looking for --tiny (run_main strips and records it later).
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--tiny") kfmm_bench::tiny() = true;
  benchmark::RegisterBenchmark("BM_build", BM_build)->Apply([](benchmark::internal::Benchmark* b) {
    sizes(b, false);
  });
  benchmark::RegisterBenchmark("BM_walk", BM_walk)->Apply([](benchmark::internal::Benchmark* b) {
    sizes(b, true);
  });
  benchmark::RegisterBenchmark("BM_tree_and_lists", BM_tree_and_lists)
      ->Apply([](benchmark::internal::Benchmark* b) { sizes(b, false); });
  return kfmm_bench::run_main(argc, argv);
}
