// The tree and interaction lists the solver makes on bench_solver's Plummer input, for the operator
// benchmarks that time a kernel on them (bench_p2p's p2p_solver_*, bench_m2l_csr's m2l_solver_*): kfmm's
// octree and dual-tree walk at a given leaf size and opening angle, as kfmm::Solver calls them (its
// concentration rule at the default ratio). No minimum separation: the solver's, from the softening
// margin and the expansions' range, moves no pair at the goal points (the M2L pair counts here equal
// bench_solver's to the printed digits there).
#pragma once

#include <Kokkos_Core.hpp>

#include <map>
#include <utility>
#include <vector>

#include "benchmark_common.hpp"
#include "kfmm/drivers/distributions.hpp"
#include "kfmm/tree/dual_tree_walk.hpp"
#include "kfmm/tree/octree.hpp"

namespace kfmm_bench {

/// bench_solver's Plummer input of n particles (seed 2024), made once per n for every case that uses it
/// (kept in plain vectors: a static cache of Kokkos Views would outlive Kokkos::finalize).
struct SolverInput {
  std::vector<double> positions, masses;  // n x 3 (row-major), n
};
inline const SolverInput& solver_input(int n) {
  static std::map<int, SolverInput> cache;
  auto it = cache.find(n);
  if (it == cache.end()) {
    const kfmm::HostParticles p = kfmm::make_distribution(kfmm::Distribution::plummer, n, 2024);
    SolverInput in{std::vector<double>(p.positions.data(), p.positions.data() + 3 * static_cast<size_t>(n)),
                   std::vector<double>(p.masses.data(), p.masses.data() + n)};
    it = cache.emplace(n, std::move(in)).first;
  }
  return it->second;
}

/// The solver's octree (leaves of at most `leaf` particles) and lists (opening angle `theta`) of
/// solver_input(n) in precision Real on `space`.
template <class Real, class ExecutionSpace>
struct SolverLists {
  using memory_space = typename ExecutionSpace::memory_space;
  kfmm::Octree<ExecutionSpace, Real> tree;
  kfmm::InteractionLists<memory_space> lists;

  SolverLists(const ExecutionSpace& space, int n, int leaf, double theta) {
    const SolverInput& input = solver_input(n);
    using Unmanaged = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
    const Kokkos::View<const double* [3], Kokkos::HostSpace, Unmanaged> host_positions(input.positions.data(),
                                                                                       n);
    const Kokkos::View<const double*, Kokkos::HostSpace, Unmanaged> host_masses(input.masses.data(), n);
    Kokkos::View<Real* [3], memory_space> positions("positions", n);
    Kokkos::View<Real*, memory_space> masses("masses", n);
    kfmm::copy_to(positions, host_positions);
    kfmm::copy_to(masses, host_masses);
    tree = kfmm::build_octree(space, positions, masses, leaf);
    kfmm::WalkOptions walk;
    walk.theta = theta;
    lists = kfmm::dual_tree_walk(space, tree, walk);
  }
};

/// SolverLists for a benchmark case whose first three arguments are {n, leaf, theta x 100} (--tiny: n =
/// 10000, said in the label).
template <class Real, class ExecutionSpace>
SolverLists<Real, ExecutionSpace> solver_lists_for_case(const ExecutionSpace& space,
                                                        benchmark::State& state) {
  if (tiny()) state.SetLabel("tiny: n 10000");
  const int n = tiny() ? 10000 : static_cast<int>(state.range(0));
  return SolverLists<Real, ExecutionSpace>(space, n, static_cast<int>(state.range(1)),
                                           static_cast<double>(state.range(2)) / 100);
}

}  // namespace kfmm_bench
