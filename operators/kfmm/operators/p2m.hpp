/// \file p2m.hpp
/// P2M: multipole expansions of particles about expansion centres,
///   M_n^m = sum_j mu_j R_n^m(x_j - c)      (R the regular real solid harmonics, solid_harmonics.hpp),
/// so that sum_j mu_j / |x - x_j| = sum_{n,m} w_m M_n^m I_n^m(x - c) outside the particles' sphere.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/simd_pack.hpp"
#include "kfmm/operators/solid_harmonics.hpp"
#include "kfmm/operators/static_order.hpp"

namespace kfmm {

/// Adds the multipole of one particle (mass `mass` at (dx, dy, dz) = x - c relative to the centre c)
/// to M (order `order` <= 16): M_n^m += mass * R_n^m(dx, dy, dz). Streaming recurrences, no buffer.
/// P >= 0: the compile-time order P (`order` ignored; unrolled on devices, for_each_regular_harmonic).
template <class Real, int P = -1>
KOKKOS_INLINE_FUNCTION void p2m_particle(int order, Real mass, Real dx, Real dy, Real dz, Real* M) {
  for_each_regular_harmonic<P>(order, dx, dy, dz, [&](int n, int m, Real c, Real s) {
    M[coefficient_index(n, m)] += mass * c;
    if (m > 0) M[coefficient_index(n, -m)] += mass * s;
  });
}

namespace detail {
/// Particles per host P2M lane block (as l2p_host_lanes: one 512-bit register of doubles).
template <class Real>
inline constexpr int p2m_host_lanes = 8;

/// The batched P2M kernel: one team per listed leaf (see kfmm::p2m). A functor rather than a lambda:
/// an extended host-device lambda inside an operator instantiated in several nvcc-compiled files crashed
/// on host backends (a call through a null pointer in the lambda wrapper; docs/gpu.md). P >= 0: the
/// order is the compile-time constant P (recurrences unroll, coefficient indices are immediates).
template <int P, class ExecutionSpace, class Positions, class Masses, class Ranges, class Leaves,
          class Centres, class Multipoles>
struct P2MKernel {
  using Real = typename Multipoles::non_const_value_type;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = Kokkos::View<Real*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  Positions positions;
  Masses masses;
  Ranges ranges;
  Leaves leaves;
  Centres centres;
  Multipoles multipoles;
  int order, nc;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int order = P >= 0 ? P : this->order;
    const int nc = P >= 0 ? num_coefficients(P) : this->nc;
    const int leaf = leaves(member.league_rank());
    const int begin = ranges(leaf, 0), end = ranges(leaf, 1);
    const Real cx = centres(leaf, 0), cy = centres(leaf, 1), cz = centres(leaf, 2);
    Real* out = &multipoles(leaf, 0);
    const int team = member.team_size();
    if constexpr (is_host_execution_space<ExecutionSpace> && P >= 0) {
      if (team == 1) {
        // Host, compile-time order: blocks of W particles in SIMD lanes, each lane summing its own
        // multipole (padding lanes have mass 0), the lanes summed in a fixed order at the end. 1e6
        // Plummer, one core, p 14: docs/operators.md.
        constexpr int W = p2m_host_lanes<Real>;
        constexpr int NC = num_coefficients(P);
        using V = Pack<Real, W>;
        V sums[NC];
        for (int k = 0; k < NC; ++k) sums[k] = V(Real(0));
        for (int first = begin; first < end; first += W) {
          const int count = end - first < W ? end - first : W;
          V dx(Real(0)), dy(Real(0)), dz(Real(0)), mass(Real(0));
          for (int l = 0; l < count; ++l) {
            dx.v[l] = positions(first + l, 0) - cx;
            dy.v[l] = positions(first + l, 1) - cy;
            dz.v[l] = positions(first + l, 2) - cz;
            mass.v[l] = masses(first + l);
          }
          for_each_regular_harmonic(P, dx, dy, dz, [&](int n, int m, const V& c, const V& s) {
            sums[coefficient_index(n, m)] += mass * c;
            if (m > 0) sums[coefficient_index(n, -m)] += mass * s;
          });
        }
        for (int k = 0; k < NC; ++k) {
          Real sum = sums[k].v[0];
          for (int l = 1; l < W; ++l) sum += sums[k].v[l];
          out[k] = sum;
        }
        return;
      }
    }
    if (team == 1) {
      for (int k = 0; k < nc; ++k) out[k] = Real(0);
      for (int i = begin; i < end; ++i)
        p2m_particle(order, masses(i), positions(i, 0) - cx, positions(i, 1) - cy, positions(i, 2) - cz, out);
      return;
    }
    const int stride = expansion_scratch_stride(nc);  // (odd: no bank conflicts)
    Scratch acc(member.team_scratch(0), nc);
    Scratch rows(member.team_scratch(0), static_cast<std::size_t>(team) * stride);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int k) { acc(k) = Real(0); });
    for (int chunk = begin; chunk < end; chunk += team) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, team), [&](int t) {
        Real* row = &rows(static_cast<std::size_t>(t) * stride);
        for (int k = 0; k < nc; ++k) row[k] = Real(0);
        const int i = chunk + t;
        if (i < end)
          p2m_particle<Real, P>(order, masses(i), positions(i, 0) - cx, positions(i, 1) - cy,
                                positions(i, 2) - cz, row);
      });
      member.team_barrier();
      const int used = end - chunk < team ? end - chunk : team;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int k) {
        Real s = acc(k);
        for (int t = 0; t < used; ++t) s += rows(static_cast<std::size_t>(t) * stride + k);
        acc(k) = s;
      });
      member.team_barrier();
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int k) { out[k] = acc(k); });
  }
};
}  // namespace detail

/// Batched P2M. For every node id in `leaves`, OVERWRITES row `leaf` of `multipoles` with the
/// multipole (order `order`) about `centres(leaf)` of the particles ranges(leaf, 0) .. ranges(leaf, 1) - 1
/// of `positions` / `masses` (an empty range gives zeros). Rows of nodes not listed are untouched.
///
/// One team per listed leaf owns its output row (no atomics): on host backends (team size 1) the
/// particles are summed in lanes of 8 (at compile-time orders; else in order) straight into the row; on GPUs
/// each thread evaluates the harmonics of one particle of a chunk into team scratch and the chunk is summed
/// per coefficient in particle order. Deterministic: the same inputs give the same bits on one backend and
/// team size.
///
/// Throws kfmm::Error for an order outside 0..16, a multipoles View with fewer than (order+1)^2
/// columns, mismatched extents, or listed ids / ranges out of bounds (checked on the device first).
template <class ExecutionSpace, class Positions, class Masses, class Ranges, class Leaves, class Centres,
          class Multipoles>
void p2m(const ExecutionSpace& space, int order, const Positions& positions, const Masses& masses,
         const Ranges& ranges, const Leaves& leaves, const Centres& centres, const Multipoles& multipoles,
         const ExpansionOptions& options = {}) {
  using Real = typename Multipoles::non_const_value_type;
  detail::static_check_view<ExecutionSpace, Positions, 2>();
  detail::static_check_view<ExecutionSpace, Masses, 1>();
  detail::static_check_view<ExecutionSpace, Ranges, 2>();
  detail::static_check_view<ExecutionSpace, Leaves, 1>();
  detail::static_check_view<ExecutionSpace, Centres, 2>();
  detail::static_check_view<ExecutionSpace, Multipoles, 2>();
  static_assert(std::is_floating_point<Real>::value, "kfmm::p2m: multipoles must hold float or double");
  static_assert(std::is_same<typename Positions::non_const_value_type, Real>::value &&
                    std::is_same<typename Masses::non_const_value_type, Real>::value &&
                    std::is_same<typename Centres::non_const_value_type, Real>::value,
                "kfmm::p2m: positions, masses, centres and multipoles must share one real type");
  static_assert(std::is_same<typename Multipoles::array_layout, Kokkos::LayoutRight>::value,
                "kfmm::p2m: multipoles must be LayoutRight (one contiguous row per node)");

  check_order(order, "p2m order");
  const int nc = num_coefficients(order);
  require(static_cast<int>(multipoles.extent(1)) >= nc, "p2m: multipoles has ", multipoles.extent(1),
          " columns, order ", order, " needs ", nc);
  require(positions.extent(1) == 3, "p2m: positions must have 3 columns, has ", positions.extent(1));
  require(centres.extent(1) == 3, "p2m: centres must have 3 columns, has ", centres.extent(1));
  require(ranges.extent(1) == 2, "p2m: ranges must have 2 columns, has ", ranges.extent(1));
  require(masses.extent(0) == positions.extent(0), "p2m: masses has ", masses.extent(0),
          " entries, positions ", positions.extent(0));
  const int num_nodes = static_cast<int>(multipoles.extent(0));
  require(static_cast<int>(centres.extent(0)) >= num_nodes && static_cast<int>(ranges.extent(0)) >= num_nodes,
          "p2m: centres (", centres.extent(0), " rows) and ranges (", ranges.extent(0),
          " rows) must cover the multipoles' ", num_nodes, " rows");
  const int num_leaves = static_cast<int>(leaves.extent(0));
  const int num_particles = static_cast<int>(positions.extent(0));
  if (options.validate) detail::check_leaf_ranges(space, "p2m", leaves, ranges, num_nodes, num_particles);
  if (num_leaves == 0) return;

  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  using Scratch = Kokkos::View<Real*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  // Compile-time orders (the recurrences unroll; on the host they run in SIMD lanes of particles), up
  // to p = 16 for double on the host (static_order.hpp, as the M2L and the L2P).
  const auto run = [&](auto p) {
    constexpr int P = decltype(p)::value;
    const detail::P2MKernel<P, ExecutionSpace, Positions, Masses, Ranges, Leaves, Centres, Multipoles> kernel{
        positions, masses, ranges, leaves, centres, multipoles, order, nc};
    const int stride = expansion_scratch_stride(nc);
    const std::size_t row_bytes = Scratch::shmem_size(nc);
    const int team = detail::choose_team_size<ExecutionSpace>("p2m", options.team_size, 32, row_bytes,
                                                              Scratch::shmem_size(stride),
                                                              Policy(space, num_leaves, 1), kernel);
    Policy policy(space, num_leaves, team);
    if (team > 1)
      policy.set_scratch_size(0,
                              Kokkos::PerTeam(row_bytes + Scratch::shmem_size(std::size_t(team) * stride)));
    Kokkos::parallel_for("kfmm::p2m", policy, kernel);
  };
  detail::dispatch_static_order_for<ExecutionSpace, Real>(order, run);
}

}  // namespace kfmm
