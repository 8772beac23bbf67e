/// \file l2p.hpp
/// L2P: evaluation of local expansions at particles. A local L about a centre s represents
///   Phi(x) = sum_{n <= p} sum_m L_n^m R_n^m(x - s)  ~  sum_j mu_j / |x - x_j|   (far sources only),
/// and L2P adds the physical far field (G the gravitational constant):
///   potential     phi(x) = -G Phi(x)                (a unit point mass gives -G / r),
///   acceleration  a(x)   = -grad phi = G grad Phi   (a unit point mass gives -G (x - x_j) / r^3).
/// The gradient is exact for the truncated expansion and costs no finite differences: each
/// derivative lowers the degree by one (solid_harmonics.hpp, harmonic_lowering_x/y, d/dz R_n^m =
/// R_{n-1}^m), so grad Phi = sum_{n <= p-1} (Gx, Gy, Gz)_n^m R_n^m(x - s) with gradient coefficients
///   Gx_n^k = sum_m L_{n+1}^m lx(m, k),  Gy_n^k = sum_m L_{n+1}^m ly(m, k),  Gz_n^k = L_{n+1}^k,
/// computed once per leaf; particles then need the harmonics only, by streaming recurrences.
#pragma once

#include <Kokkos_Core.hpp>

#include <type_traits>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/expansion_checks.hpp"
#include "kfmm/operators/simd_pack.hpp"
#include "kfmm/operators/solid_harmonics.hpp"
#include "kfmm/operators/static_order.hpp"

namespace kfmm {

/// Gradient coefficient k = n^2 + n + m (n <= order - 1) of the local L (order `order`): writes
/// (Gx, Gy, Gz)_n^m such that grad Phi = sum (G.)_n^m R_n^m. See the file comment. With the lowering
/// coefficients (harmonic_lowering_x/y: halves, and -1 at order 0) written out, each sum
/// Gx_n^m = sum_j L_{n+1}^j lx(j, m) keeps at most two terms (L^j = L_{n+1}^j):
///   Gx_n^m = (L^{m+1} - L^{m-1}) / 2 (m >= 2),  L^2 / 2 - L^0 (m = 1),  L^1 / 2 (m = 0),
///            (L^{m-1} - L^{m+1}) / 2 (m <= -2),  L^-2 / 2 (m = -1);
///   Gy_n^m = (L^{-m-1} + L^{-m+1}) / 2 (m >= 2),  L^-2 / 2 (m = 1),  L^-1 / 2 (m = 0),
///            -(L^{-m+1} + L^{-m-1}) / 2 (m <= -2),  -L^2 / 2 - L^0 (m = -1);
///   Gz_n^m = L^m.
/// (The GPU L2P builds these per leaf: summed over four candidate orders with the lowering functions they
/// took 18 % of its instructions, docs/benchmarks.md, forty-sixth session;
/// unit_tests/test_operators_chain.cpp checks them against those sums.)
template <class Real>
KOKKOS_INLINE_FUNCTION void l2p_gradient_coefficient(int n, int m, const Real* L, Real& gx, Real& gy,
                                                     Real& gz) {
  const Real* Ln = L + coefficient_index(n + 1, 0);  // L_{n+1}^j = Ln[j]
  const Real h = Real(0.5);
  if (m >= 2) {
    gx = h * Ln[m + 1] - h * Ln[m - 1];
    gy = h * Ln[-m - 1] + h * Ln[-m + 1];
  } else if (m == 1) {
    gx = h * Ln[2] - Ln[0];
    gy = h * Ln[-2];
  } else if (m == 0) {
    gx = h * Ln[1];
    gy = h * Ln[-1];
  } else if (m == -1) {
    gx = h * Ln[-2];
    gy = -(h * Ln[2]) - Ln[0];
  } else {
    gx = h * Ln[m - 1] - h * Ln[m + 1];
    gy = -(h * Ln[-m + 1]) - h * Ln[-m - 1];
  }
  gz = Ln[m];
}

/// Writes the gradient coefficients of L (order `order` >= 0) to Gx, Gy, Gz (num_coefficients(order-1)
/// values each; nothing for order 0).
template <class Real>
KOKKOS_INLINE_FUNCTION void l2p_gradient_coefficients(int order, const Real* L, Real* Gx, Real* Gy,
                                                      Real* Gz) {
  for (int n = 0; n < order; ++n)
    for (int m = -n; m <= n; ++m) {
      const int k = coefficient_index(n, m);
      l2p_gradient_coefficient(n, m, L, Gx[k], Gy[k], Gz[k]);
    }
}

/// Evaluates at (dx, dy, dz) = x - s the potential sum L_n^m R_n^m and its gradient (from the
/// gradient coefficients of l2p_gradient_coefficients), ADDING them to phi and (gx, gy, gz). No
/// physical constants: L2P scales by -G (potential) and G (acceleration). Value is Real, or a
/// detail::Pack of Reals for W points at once (the host lanes of kfmm::l2p).
template <class Real, class Value = Real>
KOKKOS_INLINE_FUNCTION void l2p_particle(int order, const Real* L, const Real* Gx, const Real* Gy,
                                         const Real* Gz, Value dx, Value dy, Value dz, Value& phi, Value& gx,
                                         Value& gy, Value& gz) {
  Value p(Real(0)), x(Real(0)), y(Real(0)), z(Real(0));
  for_each_regular_harmonic(order, dx, dy, dz, [&](int n, int m, const Value& c, const Value& s) {
    const int i = coefficient_index(n, m), j = coefficient_index(n, -m);
    if (m == 0) {
      p += Value(L[i]) * c;
      if (n < order) x += Value(Gx[i]) * c, y += Value(Gy[i]) * c, z += Value(Gz[i]) * c;
    } else {
      p += Value(L[i]) * c + Value(L[j]) * s;
      if (n < order) {
        x += Value(Gx[i]) * c + Value(Gx[j]) * s;
        y += Value(Gy[i]) * c + Value(Gy[j]) * s;
        z += Value(Gz[i]) * c + Value(Gz[j]) * s;
      }
    }
  });
  phi += p;
  gx += x;
  gy += y;
  gz += z;
}

/// One term of a leaf's L2P stream (the GPU L2P): the coefficients that multiply the harmonic pair
/// (R_n^m, R_n^-m) of one degree n and order m >= 0, and the constants of the recurrence step that
/// produces that pair from the previous term's (solid_harmonics.hpp, for_each_regular_harmonic):
///   column start (n == m >= 1): R_m^{+-m} from R_{m-1}^{+-(m-1)},      k = 0,      a = 1/(2m);
///   down the column (n > m):     R_n^{+-m} = (k z R_{n-1} - r^2 R_{n-2}) a, k = 2n - 1, a = 1/((n+m)(n-m)).
/// c = (L, Gx, Gy, Gz) at (n, m), s the same at (n, -m) (zero for m == 0, and zero gradients for n == p).
/// The terms run m outer, n inner, (p+1)(p+2)/2 of them; the first, (0, 0), is R = 1 and is not stepped.
template <class Real>
struct alignas(16) L2PTerm {
  Real c[4];
  Real s[4];
  Real k;
  Real a;
};

/// Number of terms of an L2P stream at order p: one per (n, m) with 0 <= m <= n <= p.
KOKKOS_INLINE_FUNCTION constexpr int l2p_stream_length(int order) {
  return (order + 1) * (order + 2) / 2;
}

/// Writes term t of the L2P stream of the local L (order `order`; see L2PTerm).
template <class Real>
KOKKOS_INLINE_FUNCTION void l2p_stream_term(int order, int t, const Real* L, L2PTerm<Real>& term) {
  int m = 0, first = 0;  // column m holds degrees m..order: order + 1 - m terms
  while (first + order + 1 - m <= t) first += order + 1 - m, ++m;
  const int n = m + (t - first);
  const int i = coefficient_index(n, m), j = coefficient_index(n, -m);
  term.c[0] = L[i];
  term.s[0] = m == 0 ? Real(0) : L[j];
  for (int d = 1; d < 4; ++d) term.c[d] = term.s[d] = Real(0);
  if (n < order) {
    l2p_gradient_coefficient(n, m, L, term.c[1], term.c[2], term.c[3]);
    if (m > 0) l2p_gradient_coefficient(n, -m, L, term.s[1], term.s[2], term.s[3]);
  }
  if (n == m) {
    term.k = Real(0);
    term.a = m == 0 ? Real(1) : Real(1) / Real(2 * m);
  } else {
    term.k = Real(2 * n - 1);
    term.a = static_cast<Real>(regular_recurrence_inverse(n, m));  // (the table of for_each_regular_harmonic)
  }
}

/// Evaluates a leaf's L2P stream (`length` terms, see L2PTerm) at (dx, dy, dz) = x - s, ADDING the
/// potential sum L_n^m R_n^m to phi and its gradient to (gx, gy, gz): l2p_particle's sums with the
/// coefficient indices, the divisors and the tests on n and m moved into the per-leaf terms. The loop
/// stays rolled on purpose: unrolled (compile-time order) the GPU L2P held 255 registers, spilled and
/// ran 1.2-7x slower (docs/benchmarks.md, "Twenty-fifth session"); rolled over 16-byte aligned terms
/// it is 1.12-1.23x faster than l2p_particle's rolled loops on the H200 ("Twenty-sixth session").
template <class Real>
KOKKOS_INLINE_FUNCTION void l2p_stream_particle(int length, const L2PTerm<Real>* terms, Real dx, Real dy,
                                                Real dz, Real& phi, Real& gx, Real& gy, Real& gz) {
  const Real r2 = dx * dx + dy * dy + dz * dz;
  Real p = terms[0].c[0], x = terms[0].c[1], y = terms[0].c[2], z = terms[0].c[3];  // R_0^0 = 1
  Real cd = Real(1), sd = Real(0);                                                  // R_m^m, R_m^-m
  Real c1 = Real(1), s1 = Real(0), c2 = Real(0), s2 = Real(0);                      // R_{n-1}, R_{n-2}
  KFMM_PRAGMA_UNROLL_BY(1)
  for (int t = 1; t < length; ++t) {
    const L2PTerm<Real>& term = terms[t];
    if (term.k == Real(0)) {
      const Real cn = (dx * cd - dy * sd) * term.a;
      sd = (dy * cd + dx * sd) * term.a;
      cd = cn;
      c1 = cd, s1 = sd, c2 = Real(0), s2 = Real(0);
    } else {
      const Real kz = term.k * dz;
      const Real cn = (kz * c1 - r2 * c2) * term.a;
      const Real sn = (kz * s1 - r2 * s2) * term.a;
      c2 = c1, s2 = s1, c1 = cn, s1 = sn;
    }
    p += term.c[0] * c1 + term.s[0] * s1;
    x += term.c[1] * c1 + term.s[1] * s1;
    y += term.c[2] * c1 + term.s[2] * s1;
    z += term.c[3] * c1 + term.s[3] * s1;
  }
  phi += p;
  gx += x;
  gy += y;
  gz += z;
}

namespace detail {
/// Particles per host L2P lane block: one 512-bit register of doubles, two 256-bit ones.
template <class Real>
inline constexpr int l2p_host_lanes = 8;

/// The batched L2P kernel: one team per listed leaf (see kfmm::l2p). A functor rather than a lambda, for
/// the reason given at detail::P2MKernel. P >= 0: the order is the compile-time constant P (the
/// harmonic recurrences unroll, their coefficient indices become immediates); -1: runtime `order`.
template <int P, class ExecutionSpace, class Leaves, class Ranges, class Centres, class Locals,
          class Positions, class Accelerations, class Potentials>
struct L2PKernel {
  using Real = typename Accelerations::non_const_value_type;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = Kokkos::View<Real*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  using Terms =
      Kokkos::View<L2PTerm<Real>*, typename ExecutionSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  Leaves leaves;
  Ranges ranges;
  Centres centres;
  Locals locals;
  Positions positions;
  Accelerations accelerations;
  Potentials potentials;
  Real g;
  int order, nc, ng;

  /// Host, compile-time order, one thread per team (the default there): blocks of W particles in SIMD
  /// lanes, which want l2p_particle's arrays rather than the stream of terms.
  static constexpr bool host_lanes = is_host_execution_space<ExecutionSpace> && P >= 0;

  /// Team scratch bytes: the local row, then its gradient coefficients (host lanes) or its L2P stream.
  static std::size_t scratch_bytes(int order, int nc, int ng) {
    const std::size_t arrays = 3 * Scratch::shmem_size(ng > 0 ? ng : 1);
    const std::size_t stream = Terms::shmem_size(l2p_stream_length(order));
    return Scratch::shmem_size(nc) + (host_lanes && arrays > stream ? arrays : stream);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int leaf = leaves(member.league_rank());
    const int begin = ranges(leaf, 0), end = ranges(leaf, 1);
    if (begin == end) return;
    Scratch L(member.team_scratch(0), nc);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int k) { L(k) = locals(leaf, k); });
    member.team_barrier();
    const Real cx = centres(leaf, 0), cy = centres(leaf, 1), cz = centres(leaf, 2);
    if constexpr (host_lanes) {
      // Blocks of W particles in SIMD lanes (padding lanes evaluate at the centre and are not stored).
      // Measured at 1e6 Plummer, p 9, one core: docs/kernels.md. Larger host teams run the GPU code
      // below (how the tests check it).
      if (member.team_size() == 1) {
        Scratch Gx(member.team_scratch(0), ng > 0 ? ng : 1);
        Scratch Gy(member.team_scratch(0), ng > 0 ? ng : 1);
        Scratch Gz(member.team_scratch(0), ng > 0 ? ng : 1);
        l2p_gradient_coefficients(order, L.data(), Gx.data(), Gy.data(), Gz.data());
        constexpr int W = l2p_host_lanes<Real>;
        const int blocks = (end - begin + W - 1) / W;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, blocks), [&](int b) {
          const int first = begin + b * W;
          const int count = end - first < W ? end - first : W;
          using V = Pack<Real, W>;
          V dx(Real(0)), dy(Real(0)), dz(Real(0)), phi(Real(0)), gx(Real(0)), gy(Real(0)), gz(Real(0));
          for (int l = 0; l < count; ++l) {
            dx.v[l] = positions(first + l, 0) - cx;
            dy.v[l] = positions(first + l, 1) - cy;
            dz.v[l] = positions(first + l, 2) - cz;
          }
          l2p_particle<Real, V>(P, L.data(), Gx.data(), Gy.data(), Gz.data(), dx, dy, dz, phi, gx, gy, gz);
          for (int l = 0; l < count; ++l) {
            const int i = first + l;
            potentials(i) -= g * phi.v[l];
            accelerations(i, 0) += g * gx.v[l];
            accelerations(i, 1) += g * gy.v[l];
            accelerations(i, 2) += g * gz.v[l];
          }
        });
        return;
      }
    }
    // GPUs (and host teams of several threads): the team writes the leaf's stream of terms, then each
    // thread walks it for its particles.
    const int length = l2p_stream_length(order);
    Terms terms(member.team_scratch(0), length);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, length),
                         [&](int t) { l2p_stream_term(order, t, L.data(), terms(t)); });
    member.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, begin, end), [&](int i) {
      Real phi = Real(0), gx = Real(0), gy = Real(0), gz = Real(0);
      l2p_stream_particle(length, terms.data(), positions(i, 0) - cx, positions(i, 1) - cy,
                          positions(i, 2) - cz, phi, gx, gy, gz);
      potentials(i) -= g * phi;
      accelerations(i, 0) += g * gx;
      accelerations(i, 1) += g * gy;
      accelerations(i, 2) += g * gz;
    });
  }
};
}  // namespace detail

/// Batched L2P. For every node id in `leaves` and each particle i in ranges(leaf, 0) .. ranges(leaf, 1) - 1,
/// ADDS the far field of the local expansion locals(leaf) (order `order`, about centres(leaf)):
///   potentials(i) += -G Phi(x_i),   accelerations(i, :) += G grad Phi(x_i).
/// With a local built by P2M -> (M2M) -> M2L -> (L2L) this equals what P2P computes with softening 0
/// for the far sources, up to the truncation at order p.
///
/// One team per listed leaf: the team loads the local row into team scratch and turns it into the
/// leaf's stream of terms (L2PTerm; on the host with one thread per team: gradient coefficients for
/// SIMD lanes of particles), then its threads take the leaf's particles; every particle is written by one
/// thread (listed leaves must have disjoint particle ranges, as a tree's leaves do). Deterministic.
///
/// Throws kfmm::Error for an order outside 0..16, a locals View with fewer than (order+1)^2 columns,
/// mismatched extents, a non-finite G, or listed ids / ranges out of bounds (checked on the device first).
template <class ExecutionSpace, class Leaves, class Ranges, class Centres, class Locals, class Positions,
          class Accelerations, class Potentials>
void l2p(const ExecutionSpace& space, int order, double G, const Leaves& leaves, const Ranges& ranges,
         const Centres& centres, const Locals& locals, const Positions& positions,
         const Accelerations& accelerations, const Potentials& potentials,
         const ExpansionOptions& options = {}) {
  using Real = typename Accelerations::non_const_value_type;
  detail::static_check_view<ExecutionSpace, Leaves, 1>();
  detail::static_check_view<ExecutionSpace, Ranges, 2>();
  detail::static_check_view<ExecutionSpace, Centres, 2>();
  detail::static_check_view<ExecutionSpace, Locals, 2>();
  detail::static_check_view<ExecutionSpace, Positions, 2>();
  detail::static_check_view<ExecutionSpace, Accelerations, 2>();
  detail::static_check_view<ExecutionSpace, Potentials, 1>();
  static_assert(std::is_floating_point<Real>::value, "kfmm::l2p: accelerations must hold float or double");
  static_assert(
      std::is_same<typename Positions::non_const_value_type, Real>::value &&
          std::is_same<typename Potentials::non_const_value_type, Real>::value &&
          std::is_same<typename Centres::non_const_value_type, Real>::value &&
          std::is_same<typename Locals::non_const_value_type, Real>::value,
      "kfmm::l2p: positions, centres, locals, accelerations and potentials must share one real type");
  static_assert(std::is_same<typename Locals::array_layout, Kokkos::LayoutRight>::value,
                "kfmm::l2p: locals must be LayoutRight (one contiguous row per node)");

  check_order(order, "l2p order");
  const int nc = num_coefficients(order);
  const int ng = num_coefficients(order - 1);
  require(static_cast<int>(locals.extent(1)) >= nc, "l2p: locals has ", locals.extent(1), " columns, order ",
          order, " needs ", nc);
  require_finite_constant<Real>(G, "l2p: G");
  require(positions.extent(1) == 3, "l2p: positions must have 3 columns, has ", positions.extent(1));
  require(accelerations.extent(1) == 3, "l2p: accelerations must have 3 columns, has ",
          accelerations.extent(1));
  require(centres.extent(1) == 3, "l2p: centres must have 3 columns, has ", centres.extent(1));
  require(ranges.extent(1) == 2, "l2p: ranges must have 2 columns, has ", ranges.extent(1));
  const int num_particles = static_cast<int>(positions.extent(0));
  require(static_cast<int>(accelerations.extent(0)) == num_particles &&
              static_cast<int>(potentials.extent(0)) == num_particles,
          "l2p: accelerations (", accelerations.extent(0), ") and potentials (", potentials.extent(0),
          ") must have one entry per position (", num_particles, ")");
  const int num_nodes = static_cast<int>(locals.extent(0));
  require(static_cast<int>(centres.extent(0)) >= num_nodes && static_cast<int>(ranges.extent(0)) >= num_nodes,
          "l2p: centres (", centres.extent(0), " rows) and ranges (", ranges.extent(0),
          " rows) must cover the locals' ", num_nodes, " rows");
  const int num_leaves = static_cast<int>(leaves.extent(0));
  if (options.validate) detail::check_leaf_ranges(space, "l2p", leaves, ranges, num_nodes, num_particles);
  if (num_leaves == 0) return;

  using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
  // Compile-time orders on the host, up to p = 16 for double (static_order.hpp): the per-particle
  // recurrences see a constant order and run in SIMD lanes of particles (1e6 Plummer at p 13 on one
  // core: 0.42 s at the runtime order). Devices walk the stream of terms, whose rolled loop a
  // compile-time order would not change: one kernel per real type.
  const auto run = [&](auto p) {
    constexpr int P = decltype(p)::value;
    const detail::L2PKernel<P, ExecutionSpace, Leaves, Ranges, Centres, Locals, Positions, Accelerations,
                            Potentials>
        kernel{leaves, ranges, centres, locals, positions, accelerations, potentials, static_cast<Real>(G),
               order,  nc,     ng};
    const std::size_t bytes = decltype(kernel)::scratch_bytes(order, nc, ng);
    const int team = detail::choose_team_size<ExecutionSpace>("l2p", options.team_size, 32, bytes, 0,
                                                              Policy(space, num_leaves, 1), kernel);
    Policy policy(space, num_leaves, team);
    policy.set_scratch_size(0, Kokkos::PerTeam(bytes));
    Kokkos::parallel_for("kfmm::l2p", policy, kernel);
  };
  if constexpr (detail::is_host_execution_space<ExecutionSpace>) {
    detail::dispatch_static_order_for<ExecutionSpace, Real>(order, run);
  } else {
    run(std::integral_constant<int, -1>{});
  }
}

}  // namespace kfmm
