/// \file direct_sum.hpp
/// The O(N^2) direct sum on the execution space: the accuracy reference for users, tests and
/// benchmarks. Same physics as kfmm::p2p (docs/architecture.md):
///   a_i = -G sum_{j != i} m_j (x_i - x_j) (r^2+eps^2)^(-3/2),  phi_i = -G sum_{j != i} m_j
///   (r^2+eps^2)^(-1/2),
/// evaluated and accumulated in double whatever the input precision, in the caller's particle order.
/// Pairs with r^2 + eps^2 == 0 (coincident particles without softening) are skipped, i == j always.
/// Each target is summed by one thread over j = 0..N-1 in order, so results are bitwise reproducible.
#pragma once

#include <Kokkos_Core.hpp>

#include <limits>
#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/csr_chunks.hpp"
#include "kfmm/operators/p2p_pair.hpp"

namespace kfmm {
namespace detail {

/// Direct-sum kernels (host: operator()(int), GPU: operator()(member); an explicit team_size runs
/// the team variant on a host backend too, which is how the tests cover it). Subset: target k is particle
/// targets(k); otherwise target k is particle k.
template <class ExecutionSpace, bool Subset, bool GuardZero, class PosView, class MassView, class TgtView,
          class AccView, class PotView>
struct DirectSumKernel {
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int W = 8;  // host lanes (doubles)
  PosView positions;
  MassView masses;
  TgtView targets;
  AccView accelerations;
  PotView potentials;
  int n_sources;
  int n_targets;
  double G;
  double eps2;

  KOKKOS_INLINE_FUNCTION int target(int k) const {
    if constexpr (Subset) {
      return targets(k);
    } else {
      return k;
    }
  }

  KOKKOS_INLINE_FUNCTION void write(int k, double ax, double ay, double az, double ph) const {
    using A = typename AccView::non_const_value_type;
    using P = typename PotView::non_const_value_type;
    accelerations(k, 0) = static_cast<A>(G * ax);
    accelerations(k, 1) = static_cast<A>(G * ay);
    accelerations(k, 2) = static_cast<A>(G * az);
    potentials(k) = static_cast<P>(-G * ph);
  }

  /// Host: one thread per block of W targets, the lane loop vectorises.
  KOKKOS_INLINE_FUNCTION void operator()(int block) const {
    const int k0 = block * W;
    const int nl = (n_targets - k0) < W ? (n_targets - k0) : W;
    double xi[W], yi[W], zi[W], ax[W], ay[W], az[W], ph[W];
    int idx[W];
    for (int l = 0; l < W; ++l) {
      idx[l] = target(k0 + (l < nl ? l : nl - 1));
      xi[l] = static_cast<double>(positions(idx[l], 0));
      yi[l] = static_cast<double>(positions(idx[l], 1));
      zi[l] = static_cast<double>(positions(idx[l], 2));
      ax[l] = ay[l] = az[l] = ph[l] = 0;
    }
    for (int j = 0; j < n_sources; ++j) {
      const double xj = static_cast<double>(positions(j, 0));
      const double yj = static_cast<double>(positions(j, 1));
      const double zj = static_cast<double>(positions(j, 2));
      const double mj = static_cast<double>(masses(j));
      for (int l = 0; l < W; ++l) {
        const bool self = idx[l] == j;
        p2p_pair<GuardZero>(xj - xi[l], yj - yi[l], zj - zi[l], self ? 0.0 : mj, self ? 1.0 : eps2, ax[l],
                            ay[l], az[l], ph[l]);
      }
    }
    for (int l = 0; l < nl; ++l) write(k0 + l, ax[l], ay[l], az[l], ph[l]);
  }

  /// GPU: one team per block of team_size targets, sources staged through scratch in tiles.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int T = m.team_size();
    const int k = m.league_rank() * T + m.team_rank();
    const bool active = k < n_targets;
    const int i = active ? target(k) : 0;
    auto* buf = static_cast<P2PSource<double>*>(
        m.team_shmem().get_shmem_aligned(sizeof(P2PSource<double>) * T, alignof(P2PSource<double>)));
    const double xi = n_sources > 0 ? static_cast<double>(positions(i, 0)) : 0.0;
    const double yi = n_sources > 0 ? static_cast<double>(positions(i, 1)) : 0.0;
    const double zi = n_sources > 0 ? static_cast<double>(positions(i, 2)) : 0.0;
    double ax = 0, ay = 0, az = 0, ph = 0;
    for (int base = 0; base < n_sources; base += T) {
      const int take = (n_sources - base) < T ? (n_sources - base) : T;
      const int q = m.team_rank();
      if (q < take) {
        P2PSource<double> b;
        b.x = static_cast<double>(positions(base + q, 0));
        b.y = static_cast<double>(positions(base + q, 1));
        b.z = static_cast<double>(positions(base + q, 2));
        b.m = static_cast<double>(masses(base + q));
        buf[q] = b;
      }
      m.team_barrier();
      if (active) {
        const int self = i - base;  // masked when 0 <= self < take
        if (self >= 0 && self < take) {
          p2p_target_vs_sources<GuardZero, true>(xi, yi, zi, buf, 0, take, 1, eps2, self, ax, ay, az, ph);
        } else {
          p2p_target_vs_sources<GuardZero, false>(xi, yi, zi, buf, 0, take, 1, eps2, -1, ax, ay, az, ph);
        }
      }
      m.team_barrier();
    }
    if (active) write(k, ax, ay, az, ph);
  }
};

template <bool Subset, class ExecutionSpace, class PosView, class MassView, class TgtView, class AccView,
          class PotView>
void direct_sum_impl(const ExecutionSpace& space, const PosView& positions, const MassView& masses, double G,
                     double softening, const TgtView& targets, int n_targets, const AccView& accelerations,
                     const PotView& potentials, int team_size = 0) {
  if (n_targets == 0) return;
  const double eps2 = softening * softening;
  auto launch = [&](auto kernel) {
    using K = decltype(kernel);
    if (is_host_execution_space<ExecutionSpace> && team_size == 0) {
      const int blocks = (n_targets + K::W - 1) / K::W;
      Kokkos::parallel_for(
          "kfmm::direct_sum",
          Kokkos::RangePolicy<ExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0, blocks), kernel);
    } else {
      const int team = team_size > 0 ? team_size : 128;
      using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
      const auto scratch = Kokkos::PerTeam(sizeof(P2PSource<double>) * team + 64);
      const int max_team =
          Policy(space, 1, 1).set_scratch_size(0, scratch).team_size_max(kernel, Kokkos::ParallelForTag());
      require(team <= max_team, "direct_sum: team size ", team, " exceeds the backend's maximum of ",
              max_team);
      Kokkos::parallel_for("kfmm::direct_sum",
                           Policy(space, (n_targets + team - 1) / team, team).set_scratch_size(0, scratch),
                           kernel);
    }
  };
  const int n = static_cast<int>(positions.extent(0));
  if (eps2 >= compat::smallest_normal<double>()) {  // (else the guarded pair term: p2p.hpp)
    launch(DirectSumKernel<ExecutionSpace, Subset, false, PosView, MassView, TgtView, AccView, PotView>{
        positions, masses, targets, accelerations, potentials, n, n_targets, G, eps2});
  } else {
    launch(DirectSumKernel<ExecutionSpace, Subset, true, PosView, MassView, TgtView, AccView, PotView>{
        positions, masses, targets, accelerations, potentials, n, n_targets, G, eps2});
  }
}

template <class ExecutionSpace, class PosView, class MassView, class AccView, class PotView>
void check_direct_sum_args(const PosView& positions, const MassView& masses, double G, double softening,
                           const AccView& accelerations, const PotView& potentials, size_t n_targets) {
  static_assert(PosView::rank == 2 && AccView::rank == 2 && MassView::rank == 1 && PotView::rank == 1,
                "kfmm::direct_sum: positions/accelerations are Real*[3], masses/potentials Real*");
  static_assert(Kokkos::SpaceAccessibility<ExecutionSpace, typename PosView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecutionSpace, typename MassView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecutionSpace, typename AccView::memory_space>::accessible &&
                    Kokkos::SpaceAccessibility<ExecutionSpace, typename PotView::memory_space>::accessible,
                "kfmm::direct_sum: Views must be accessible from the execution space");
  require(positions.extent(1) == 3, "direct_sum: positions must have 3 columns, has ", positions.extent(1));
  require(accelerations.extent(1) == 3, "direct_sum: accelerations must have 3 columns, has ",
          accelerations.extent(1));
  require(masses.extent(0) == positions.extent(0), "direct_sum: masses has ", masses.extent(0),
          " entries, positions ", positions.extent(0));
  require(positions.extent(0) < 2147483647u, "direct_sum: too many particles (", positions.extent(0), ")");
  require(accelerations.extent(0) == n_targets, "direct_sum: accelerations has ", accelerations.extent(0),
          " rows, expected ", n_targets);
  require(potentials.extent(0) == n_targets, "direct_sum: potentials has ", potentials.extent(0),
          " entries, expected ", n_targets);
  require(softening >= 0 && softening < 1e300, "direct_sum: softening = ", softening,
          " must be finite and >= 0");
  require(G == G && G > -1e300 && G < 1e300, "direct_sum: G = ", G, " must be finite");
}

/// Largest coordinate magnitude direct_sum accepts: the double sums form r^2 = dx^2 + dy^2 + dz^2 with
/// |dx| <= 2 max|x|, which stays finite below 3.8e153; beyond it a pair would give inf - inf = NaN.
inline constexpr double direct_sum_max_coordinate = 1e153;

/// Refuses non-finite positions or masses and coordinates whose squared distances overflow double
/// (one pass over the particles: O(N) against the sum's O(N x targets)).
template <class ExecutionSpace, class PosView, class MassView>
void check_direct_sum_values(const ExecutionSpace& space, const PosView& positions, const MassView& masses) {
  const int n = static_cast<int>(positions.extent(0));
  const double inf = std::numeric_limits<double>::infinity();
  double largest = 0;  // +inf when a coordinate is NaN or infinite
  Kokkos::parallel_reduce(
      "kfmm::direct_sum::check_positions", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      KOKKOS_LAMBDA(int i, double& widest) {
        for (int d = 0; d < 3; ++d) {
          const double v = static_cast<double>(positions(i, d));
          const double a = (v - v == 0.0) ? (v < 0 ? -v : v) : inf;  // (v - v is NaN for NaN and +-inf)
          widest = a > widest ? a : widest;
        }
      },
      Kokkos::Max<double>(largest));
  require(largest < inf, "direct_sum: a position coordinate is NaN or infinite");
  require(largest <= direct_sum_max_coordinate, "direct_sum: a position coordinate of magnitude ", largest,
          " exceeds ", direct_sum_max_coordinate,
          ": squared distances would overflow double (rescale the lengths first)");
  int bad_masses = 0;
  Kokkos::parallel_reduce(
      "kfmm::direct_sum::check_masses", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      KOKKOS_LAMBDA(int i, int& bad) {
        const double m = static_cast<double>(masses(i));
        bad += (m - m == 0.0) ? 0 : 1;
      },
      bad_masses);
  require(bad_masses == 0, "direct_sum: ", bad_masses, " masses are NaN or infinite");
}

}  // namespace detail

/// O(N^2) reference: OVERWRITES accelerations(i, 0..2) and potentials(i) of every particle i with the
/// softened field of all other particles (physics in the file comment), computed in double on the
/// execution space. Inputs and outputs may be float or double independently (e.g. float particles,
/// double reference). Every View lives in `ExecutionSpace::memory_space`.
template <class ExecutionSpace, class PosView, class MassView, class AccView, class PotView>
void direct_sum(const ExecutionSpace& space, const PosView& positions, const MassView& masses, double G,
                double softening, const AccView& accelerations, const PotView& potentials) {
  detail::check_direct_sum_args<ExecutionSpace>(positions, masses, G, softening, accelerations, potentials,
                                                positions.extent(0));
  detail::check_direct_sum_values(space, positions, masses);
  Kokkos::View<const int*, typename ExecutionSpace::memory_space> none;
  detail::direct_sum_impl<false>(space, positions, masses, G, softening, none,
                                 static_cast<int>(positions.extent(0)), accelerations, potentials);
}

/// O(N^2) reference on a sample of targets: OVERWRITES accelerations(k, .) and potentials(k) with the
/// field at particle targets(k) of all particles j != targets(k). Outputs are sized like `targets`.
/// Throws kfmm::Error when a target index is outside [0, N). Both overloads refuse NaN or infinite
/// positions and masses, and coordinates above 1e153 in magnitude (squared distances overflow double).
template <class ExecutionSpace, class PosView, class MassView, class AccView, class PotView>
void direct_sum(const ExecutionSpace& space, const PosView& positions, const MassView& masses, double G,
                double softening, const AccView& accelerations, const PotView& potentials,
                const Kokkos::View<const int*, typename ExecutionSpace::memory_space>& targets) {
  detail::check_direct_sum_args<ExecutionSpace>(positions, masses, G, softening, accelerations, potentials,
                                                targets.extent(0));
  const int nt = static_cast<int>(targets.extent(0));
  const int n = static_cast<int>(positions.extent(0));
  int bad = 0;
  Kokkos::parallel_reduce(
      "kfmm::direct_sum::check_targets", Kokkos::RangePolicy<ExecutionSpace>(space, 0, nt),
      KOKKOS_LAMBDA(int k, int& count) { count += (targets(k) < 0 || targets(k) >= n) ? 1 : 0; }, bad);
  require(bad == 0, "direct_sum: ", bad, " of the ", nt, " target indices are outside [0, ", n, ")");
  detail::check_direct_sum_values(space, positions, masses);
  detail::direct_sum_impl<true>(space, positions, masses, G, softening, targets, nt, accelerations,
                                potentials);
}

}  // namespace kfmm
