// The batched operators end to end (operators/kfmm/operators/{p2m,m2m,m2l_pair,l2l,l2p}.hpp):
// P2M -> M2M -> M2L -> L2L -> L2P between two well-separated two-level clusters against a long double
// direct sum; the error must fall geometrically with the order down to the precision floor. Also each
// translation on its own against its definition, and the L2P gradient against forward-mode
// differentiation of the L2P potential.
#if defined(__NVCC__)
// The long double references of these tests instantiate kfmm's host-device templates with long double,
// which nvcc also compiles (unused) for the device, warning that it is double there.
#pragma nv_diag_suppress 20208
#endif
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends.hpp"
#include "kfmm/operators/l2l.hpp"
#include "kfmm/operators/l2p.hpp"
#include "kfmm/operators/m2l_pair.hpp"
#include "kfmm/operators/m2m.hpp"
#include "kfmm/operators/p2m.hpp"
#include "test_operators_common.hpp"

namespace {

/// Two clusters of 8 leaves (the octants of a cube of side 1) with `per_leaf` particles each:
/// nodes 0 (source parent), 1..8 (source leaves), 9 (target parent), 10..17 (target leaves);
/// particles sorted by leaf; centres = centres of mass (positive masses); the target cluster is
/// offset by `offset`.
struct TwoClusters {
  int num_nodes = 18, num_particles = 0;
  std::vector<double> x, m;  // x: 3 per particle
  std::vector<int> begin, end, first_child, num_children, parent;
  std::vector<double> centre;  // 3 per node
};

TwoClusters make_clusters(int per_leaf, const double offset[3], unsigned seed) {
  TwoClusters c;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 0.5), mass(0.5, 1.5);
  c.begin.assign(18, 0);
  c.end.assign(18, 0);
  c.first_child.assign(18, 0);
  c.num_children.assign(18, 0);
  c.parent.assign(18, -1);
  c.centre.assign(18 * 3, 0.0);
  for (int cluster = 0; cluster < 2; ++cluster) {
    const int root = 9 * cluster;
    c.first_child[root] = root + 1;
    c.num_children[root] = 8;
    c.begin[root] = c.num_particles;
    for (int o = 0; o < 8; ++o) {
      const int leaf = root + 1 + o;
      c.parent[leaf] = root;
      c.begin[leaf] = c.num_particles;
      for (int j = 0; j < per_leaf; ++j) {
        for (int k = 0; k < 3; ++k) {
          const double corner = ((o >> k) & 1) ? 0.0 : -0.5;
          c.x.push_back(corner + u(rng) + (cluster ? offset[k] : 0.0));
        }
        c.m.push_back(mass(rng));
        ++c.num_particles;
      }
      c.end[leaf] = c.num_particles;
    }
    c.end[root] = c.num_particles;
  }
  for (int node = 0; node < 18; ++node) {
    double total = 0;
    for (int i = c.begin[node]; i < c.end[node]; ++i) {
      total += c.m[i];
      for (int k = 0; k < 3; ++k) c.centre[3 * node + k] += c.m[i] * c.x[3 * i + k];
    }
    for (int k = 0; k < 3; ++k) c.centre[3 * node + k] /= total;
  }
  return c;
}

/// Device copies of a TwoClusters in the precision Real.
template <class ExecutionSpace, class Real>
struct DeviceClusters {
  using Memory = typename ExecutionSpace::memory_space;
  Kokkos::View<Real*[3], Memory> positions, centres, accelerations;
  Kokkos::View<Real*, Memory> masses, potentials;
  Kokkos::View<int* [2], Memory> ranges;
  Kokkos::View<int*, Memory> first_child, num_children, parent;
  DeviceClusters(const TwoClusters& c)
      : positions("positions", c.num_particles),
        centres("centres", c.num_nodes),
        accelerations("accelerations", c.num_particles),
        masses("masses", c.num_particles),
        potentials("potentials", c.num_particles),
        ranges("ranges", c.num_nodes),
        first_child("first_child", c.num_nodes),
        num_children("num_children", c.num_nodes),
        parent("parent", c.num_nodes) {
    auto p = Kokkos::create_mirror_view(positions);
    auto ce = Kokkos::create_mirror_view(centres);
    auto ms = Kokkos::create_mirror_view(masses);
    auto r = Kokkos::create_mirror_view(ranges);
    auto fc = Kokkos::create_mirror_view(first_child);
    auto nch = Kokkos::create_mirror_view(num_children);
    auto pa = Kokkos::create_mirror_view(parent);
    for (int i = 0; i < c.num_particles; ++i) {
      for (int k = 0; k < 3; ++k) p(i, k) = static_cast<Real>(c.x[3 * i + k]);
      ms(i) = static_cast<Real>(c.m[i]);
    }
    for (int n = 0; n < c.num_nodes; ++n) {
      for (int k = 0; k < 3; ++k) ce(n, k) = static_cast<Real>(c.centre[3 * n + k]);
      r(n, 0) = c.begin[n];
      r(n, 1) = c.end[n];
      fc(n) = c.first_child[n];
      nch(n) = c.num_children[n];
      pa(n) = c.parent[n];
    }
    Kokkos::deep_copy(positions, p);
    Kokkos::deep_copy(centres, ce);
    Kokkos::deep_copy(masses, ms);
    Kokkos::deep_copy(ranges, r);
    Kokkos::deep_copy(first_child, fc);
    Kokkos::deep_copy(num_children, nch);
    Kokkos::deep_copy(parent, pa);
  }
};

/// Relative L2 errors (acceleration, potential) of the FMM chain at the target particles, against a
/// long double direct sum over the source particles (G = 1.5).
template <class ExecutionSpace, class Real>
std::pair<double, double> chain_error(const TwoClusters& c, int order, int team_size) {
  using Memory = typename ExecutionSpace::memory_space;
  const ExecutionSpace space;
  DeviceClusters<ExecutionSpace, Real> d(c);
  const int nc = kfmm::num_coefficients(order);
  kfmm::ExpansionView<Real, Memory> multipoles("multipoles", c.num_nodes, nc),
      locals("locals", c.num_nodes, nc);
  Kokkos::deep_copy(multipoles, Real(7));  // P2M and M2M overwrite
  const kfmm::ExpansionOptions options{team_size};
  const double G = 1.5;
  kfmm::p2m(space, order, d.positions, d.masses, d.ranges,
            kfmm_test::device_ints<Memory>({1, 2, 3, 4, 5, 6, 7, 8}), d.centres, multipoles, options);
  kfmm::m2m(space, order, kfmm_test::device_ints<Memory>({0}), d.first_child, d.num_children, d.centres,
            multipoles, options);
  auto M = multipoles;
  auto centres = d.centres;
  Kokkos::parallel_for(
      "m2l", Kokkos::RangePolicy<ExecutionSpace>(space, 0, 1), KOKKOS_LAMBDA(int) {
        kfmm::m2l_rotation_pair(order, &M(0, 0), centres(9, 0) - centres(0, 0), centres(9, 1) - centres(0, 1),
                                centres(9, 2) - centres(0, 2), &locals(9, 0));
      });
  kfmm::l2l(space, order, kfmm_test::device_ints<Memory>({10, 11, 12, 13, 14, 15, 16, 17}), d.parent,
            d.centres, locals);
  kfmm::l2p(space, order, G, kfmm_test::device_ints<Memory>({10, 11, 12, 13, 14, 15, 16, 17}), d.ranges,
            d.centres, locals, d.positions, d.accelerations, d.potentials, options);
  auto a = kfmm_test::to_host(d.accelerations);
  auto phi = kfmm_test::to_host(d.potentials);
  auto xs = kfmm_test::to_host(d.positions);
  auto ms = kfmm_test::to_host(d.masses);
  long double num_a = 0, den_a = 0, num_p = 0, den_p = 0;
  for (int i = c.begin[9]; i < c.end[9]; ++i) {
    long double ref[3] = {0, 0, 0}, ref_phi = 0;
    for (int j = c.begin[0]; j < c.end[0]; ++j) {
      long double dx[3], r2 = 0;
      for (int k = 0; k < 3; ++k) {
        dx[k] = static_cast<long double>(xs(i, k)) - static_cast<long double>(xs(j, k));
        r2 += dx[k] * dx[k];
      }
      const long double rinv = 1.0L / std::sqrt(r2);
      ref_phi -= G * ms(j) * rinv;
      for (int k = 0; k < 3; ++k) ref[k] -= G * ms(j) * dx[k] * rinv * rinv * rinv;
    }
    for (int k = 0; k < 3; ++k) {
      num_a += (a(i, k) - ref[k]) * (a(i, k) - ref[k]);
      den_a += ref[k] * ref[k];
    }
    num_p += (phi(i) - ref_phi) * (phi(i) - ref_phi);
    den_p += ref_phi * ref_phi;
  }
  // Source particles have no far field: untouched zeros.
  for (int i = c.begin[0]; i < c.end[0]; ++i) CHECK(phi(i) == Real(0));
  return {static_cast<double>(std::sqrt(num_a / den_a)), static_cast<double>(std::sqrt(num_p / den_p))};
}

template <class ExecutionSpace, class Real>
void check_convergence(double floor, int team_size) {
  // Cluster radius about 0.6 each, centres 12 apart: the M2L converges like ((0.6 + 0.6) / 12)^p ~ 0.1^p.
  const double offset[3] = {9.0, -6.0, 5.4};
  const TwoClusters c = make_clusters(6, offset, 42);
  std::vector<double> err(kfmm::max_order + 1);
  for (int p = 0; p <= kfmm::max_order; ++p) {
    const auto e = chain_error<ExecutionSpace, Real>(c, p, team_size);
    err[p] = e.first;
    INFO("p " << p << " acceleration error " << e.first << " potential error " << e.second);
    CHECK(e.first <= 1.0);  // p = 0: a constant local, no acceleration (error exactly 1)
    CHECK(e.second < 1.0);
  }
  // Geometric decrease: over every two orders the error drops at least 10x (measured: about 0.1 per
  // order, ~(r_source + r_target) / distance), until it reaches the floor of the precision.
  int p = 0;
  for (; p + 2 <= kfmm::max_order && err[p + 2] > 30 * floor; ++p) {
    INFO("p " << p << ": " << err[p] << " -> p + 2: " << err[p + 2]);
    CHECK(err[p + 2] < 0.1 * err[p]);
  }
  INFO("reached " << err[kfmm::max_order] << " at p = 16; geometric phase ended at p = " << p);
  CHECK(p >= (floor < 1e-10 ? 10 : 3));  // the geometric phase is long (measured: 11 in double, 3 in float)
  CHECK(err[kfmm::max_order] < 30 * floor);  // and the floor is reached
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("P2M M2M M2L L2L L2P chain converges geometrically in double", "[operators][chain]",
                        kfmm_test::ExecutionSpaces) {
  check_convergence<TestType, double>(1e-15, 0);
}

TEMPLATE_LIST_TEST_CASE("P2M M2M M2L L2L L2P chain converges geometrically in float", "[operators][chain]",
                        kfmm_test::ExecutionSpaces) {
  check_convergence<TestType, float>(1e-7, 0);
}

TEST_CASE("team kernels with several threads per team agree with one thread per team", "[operators][chain]") {
  // The GPU code path (several threads per team, chunked scratch reductions) on the host.
  using Space = Kokkos::DefaultHostExecutionSpace;
  const int max_team = kfmm_test::host_max_team_size();
  if (max_team < 2) {
    SUCCEED("host backend allows one thread per team only");
    return;
  }
  const double offset[3] = {4.0, 0.0, -4.0};
  const TwoClusters c = make_clusters(5, offset, 3);
  for (int p : {0, 3, 8}) {
    const auto one = chain_error<Space, double>(c, p, 1);
    const auto many = chain_error<Space, double>(c, p, max_team < 4 ? max_team : 4);
    CHECK(std::abs(one.first - many.first) < 1e-12 * (1 + one.first));
    CHECK(std::abs(one.second - many.second) < 1e-12 * (1 + one.second));
  }
}

TEMPLATE_LIST_TEST_CASE("m2m over a whole level keeps the rows of leaves when asked", "[operators][chain]",
                        kfmm_test::ExecutionSpaces) {
  // Listing the root and its eight leaves: with keep_childless the leaves keep their P2M rows and the
  // root equals the M2M of the leaves alone; by default, listed childless nodes get zeros.
  using Memory = typename TestType::memory_space;
  const TestType space;
  const double offset[3] = {6.0, 1.0, -2.0};
  const TwoClusters c = make_clusters(4, offset, 3);
  DeviceClusters<TestType, double> d(c);
  const int p = 5, nc = kfmm::num_coefficients(p);
  kfmm::ExpansionView<double, Memory> M("M", c.num_nodes, nc), ref("ref", c.num_nodes, nc);
  const auto leaves = kfmm_test::device_ints<Memory>({1, 2, 3, 4, 5, 6, 7, 8});
  const auto level = kfmm_test::device_ints<Memory>({0, 1, 2, 3, 4, 5, 6, 7, 8});
  for (auto* rows : {&M, &ref})
    kfmm::p2m(space, p, d.positions, d.masses, d.ranges, leaves, d.centres, *rows);
  kfmm::m2m(space, p, kfmm_test::device_ints<Memory>({0}), d.first_child, d.num_children, d.centres, ref);
  kfmm::ExpansionOptions keep;
  keep.keep_childless = true;
  kfmm::m2m(space, p, level, d.first_child, d.num_children, d.centres, M, keep);
  auto M_h = kfmm_test::to_host(M);
  auto ref_h = kfmm_test::to_host(ref);
  for (int q = 0; q <= 8; ++q)
    for (int k = 0; k < nc; ++k) CHECK(M_h(q, k) == ref_h(q, k));
  kfmm::m2m(space, p, leaves, d.first_child, d.num_children, d.centres, M);  // (the default)
  M_h = kfmm_test::to_host(M);
  for (int q = 1; q <= 8; ++q)
    for (int k = 0; k < nc; ++k) CHECK(M_h(q, k) == 0.0);
}

TEMPLATE_LIST_TEST_CASE("each translation matches its definition", "[operators][chain]",
                        kfmm_test::ExecutionSpaces) {
  // P2M of all source particles about the parent centre == M2M of the leaf multipoles (exact);
  // L2L of a local == the same polynomial about the new centre (exact); both to round-off.
  using Memory = typename TestType::memory_space;
  const TestType space;
  const double offset[3] = {6.0, 1.0, -2.0};
  const TwoClusters c = make_clusters(4, offset, 5);
  DeviceClusters<TestType, double> d(c);
  const int p = 9, nc = kfmm::num_coefficients(p);
  kfmm::ExpansionView<double, Memory> M("M", c.num_nodes, nc), direct("direct", c.num_nodes, nc);
  kfmm::p2m(space, p, d.positions, d.masses, d.ranges,
            kfmm_test::device_ints<Memory>({1, 2, 3, 4, 5, 6, 7, 8}), d.centres, M);
  kfmm::m2m(space, p, kfmm_test::device_ints<Memory>({0}), d.first_child, d.num_children, d.centres, M);
  kfmm::p2m(space, p, d.positions, d.masses, d.ranges, kfmm_test::device_ints<Memory>({0}), d.centres,
            direct);
  auto M_h = kfmm_test::to_host(M);
  auto direct_h = kfmm_test::to_host(direct);
  std::vector<long double> ref(nc);
  for (int k = 0; k < nc; ++k) ref[k] = direct_h(0, k);
  // About the centre of mass the dipole vanishes: compare the whole expansion, degree n weighted by
  // (0.9 / 2)^n (cluster radius / evaluation distance).
  CHECK(kfmm_test::ops::weighted_error(p, &M_h(0, 0), ref.data(), /*multipole=*/true, 0.45) < 1e-14);

  // L2L: a random local about centre 9 shifted to centre 12 must represent the same polynomial:
  // compare the potential at a few points near centre 12.
  kfmm::ExpansionView<double, Memory> L("L", c.num_nodes, nc);
  auto L_h = Kokkos::create_mirror_view(L);
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int k = 0; k < nc; ++k) L_h(9, k) = u(rng);
  Kokkos::deep_copy(L, L_h);
  kfmm::l2l(space, p, kfmm_test::device_ints<Memory>({12}), d.parent, d.centres, L);
  L_h = kfmm_test::to_host(L);
  for (int trial = 0; trial < 5; ++trial) {
    const double x[3] = {c.centre[3 * 12] + 0.2 * u(rng), c.centre[3 * 12 + 1] + 0.2 * u(rng),
                         c.centre[3 * 12 + 2] + 0.2 * u(rng)};
    std::vector<double> Rp(nc), Rc(nc);
    kfmm::regular_harmonics(p, x[0] - c.centre[27], x[1] - c.centre[28], x[2] - c.centre[29], Rp.data());
    kfmm::regular_harmonics(p, x[0] - c.centre[36], x[1] - c.centre[37], x[2] - c.centre[38], Rc.data());
    double from_parent = 0, from_child = 0, size = 0;
    for (int k = 0; k < nc; ++k) {
      from_parent += L_h(9, k) * Rp[k];
      from_child += L_h(12, k) * Rc[k];
      size += std::abs(L_h(9, k) * Rp[k]);
    }
    CHECK(std::abs(from_parent - from_child) < 1e-13 * size);
  }
}

namespace {
/// Forward-mode dual number with a 3-vector of derivatives: the analytic gradient of any rational
/// function of (x, y, z) evaluated with it (here the L2P potential through regular_harmonics).
/// Host and device annotations only because the kfmm functions it runs through are host-device.
struct Dual {
  long double v = 0, d[3] = {0, 0, 0};
  KOKKOS_INLINE_FUNCTION Dual() {}
  KOKKOS_INLINE_FUNCTION Dual(long double value)
      : v(value) {}  // NOLINT: constants convert implicitly, as Real(1) does
  KOKKOS_INLINE_FUNCTION friend Dual operator+(Dual a, const Dual& b) {
    a.v += b.v;
    for (int k = 0; k < 3; ++k) a.d[k] += b.d[k];
    return a;
  }
  KOKKOS_INLINE_FUNCTION friend Dual operator-(Dual a, const Dual& b) {
    a.v -= b.v;
    for (int k = 0; k < 3; ++k) a.d[k] -= b.d[k];
    return a;
  }
  KOKKOS_INLINE_FUNCTION friend Dual operator*(const Dual& a, const Dual& b) {
    Dual r(a.v * b.v);
    for (int k = 0; k < 3; ++k) r.d[k] = a.d[k] * b.v + a.v * b.d[k];
    return r;
  }
  KOKKOS_INLINE_FUNCTION friend Dual operator/(const Dual& a, const Dual& b) {
    Dual r(a.v / b.v);
    for (int k = 0; k < 3; ++k) r.d[k] = (a.d[k] * b.v - a.v * b.d[k]) / (b.v * b.v);
    return r;
  }
  KOKKOS_INLINE_FUNCTION Dual& operator+=(const Dual& b) { return *this = *this + b; }
};
}  // namespace

TEST_CASE("L2P gradient equals the analytic gradient of the L2P potential", "[operators][l2p]") {
  std::mt19937 rng(23);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int p : {0, 1, 2, 5, 9, 16}) {
    const int nc = kfmm::num_coefficients(p), ng = kfmm::num_coefficients(p - 1);
    std::vector<double> L(nc), Gx(ng > 0 ? ng : 1), Gy(ng > 0 ? ng : 1), Gz(ng > 0 ? ng : 1);
    for (int k = 0; k < nc; ++k) L[k] = u(rng);
    kfmm::l2p_gradient_coefficients(p, L.data(), Gx.data(), Gy.data(), Gz.data());
    for (int trial = 0; trial < 4; ++trial) {
      const double x = 0.4 * u(rng), y = 0.4 * u(rng), z = trial == 0 ? 0.0 : 0.4 * u(rng);
      double phi = 0, gx = 0, gy = 0, gz = 0;
      kfmm::l2p_particle(p, L.data(), Gx.data(), Gy.data(), Gz.data(), x, y, z, phi, gx, gy, gz);
      Dual X(x), Y(y), Z(z);
      X.d[0] = Y.d[1] = Z.d[2] = 1;
      std::vector<Dual> R(nc);
      kfmm::regular_harmonics<Dual>(p, X, Y, Z, R.data());
      Dual pot;
      long double size = 0;
      for (int k = 0; k < nc; ++k) {
        pot += Dual(L[k]) * R[k];
        size += std::abs(L[k] * R[k].v) + std::abs(L[k] * R[k].d[0]) + std::abs(L[k] * R[k].d[1]) +
                std::abs(L[k] * R[k].d[2]);
      }
      INFO("p " << p << " trial " << trial);
      const double tol = 1e-14 * static_cast<double>(size) + 1e-300;
      CHECK(std::abs(phi - static_cast<double>(pot.v)) <= tol);
      CHECK(std::abs(gx - static_cast<double>(pot.d[0])) <= tol);
      CHECK(std::abs(gy - static_cast<double>(pot.d[1])) <= tol);
      CHECK(std::abs(gz - static_cast<double>(pot.d[2])) <= tol);
    }
  }
}

namespace {
/// The gradient coefficients of l2p_gradient_coefficient, computed the obvious way: every lowering
/// coefficient of degree n + 1 (harmonic_lowering_x/y, d/dz R_n^m = R_{n-1}^m), zeros included.
template <class Real>
void check_gradient_coefficients_against_lowering_sums(unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int p = 1; p <= kfmm::max_order; ++p) {
    std::vector<Real> L(kfmm::num_coefficients(p));
    for (auto& l : L) l = static_cast<Real>(u(rng));
    for (int n = 0; n < p; ++n) {
      for (int m = -n; m <= n; ++m) {
        Real sx = 0, sy = 0;
        for (int j = -(n + 1); j <= n + 1; ++j) {
          const Real l = L[kfmm::coefficient_index(n + 1, j)];
          sx += static_cast<Real>(kfmm::harmonic_lowering_x(j, m)) * l;
          sy += static_cast<Real>(kfmm::harmonic_lowering_y(j, m)) * l;
        }
        Real gx = -7, gy = -7, gz = -7;
        kfmm::l2p_gradient_coefficient(n, m, L.data(), gx, gy, gz);
        INFO("p " << p << " n " << n << " m " << m);
        // At most two products by 1/2 or 1, all exact: the sums agree bitwise in any order.
        CHECK(gx == sx);
        CHECK(gy == sy);
        CHECK(gz == L[kfmm::coefficient_index(n + 1, m)]);
      }
    }
  }
}
}  // namespace

TEST_CASE("L2P gradient coefficients equal the sums over the lowering coefficients", "[operators][l2p]") {
  check_gradient_coefficients_against_lowering_sums<double>(31);
  check_gradient_coefficients_against_lowering_sums<float>(37);
}

TEST_CASE("L2P stream of terms equals l2p_particle at every order, on the axes and at the centre",
          "[operators][l2p]") {
  std::mt19937 rng(29);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int p = 0; p <= kfmm::max_order; ++p) {
    const int nc = kfmm::num_coefficients(p), ng = kfmm::num_coefficients(p - 1);
    const int length = kfmm::l2p_stream_length(p);
    std::vector<double> L(nc), Gx(ng > 0 ? ng : 1), Gy(ng > 0 ? ng : 1), Gz(ng > 0 ? ng : 1);
    for (int k = 0; k < nc; ++k) L[k] = u(rng);
    kfmm::l2p_gradient_coefficients(p, L.data(), Gx.data(), Gy.data(), Gz.data());
    std::vector<kfmm::L2PTerm<double>> terms(length);
    for (int t = 0; t < length; ++t) kfmm::l2p_stream_term(p, t, L.data(), terms[t]);
    const double points[][3] = {
        {0, 0, 0},    {0, 0, 0.4},      {0, 0, -0.3},        {0.35, 0, 0},
        {0, -0.3, 0}, {0.2, -0.1, 0.3}, {1e-9, 2e-9, -1e-9}, {u(rng) * 0.4, u(rng) * 0.4, u(rng) * 0.4}};
    for (const auto& x : points) {
      double phi = 0.5, gx = -1, gy = 2, gz = 0.25;  // both ADD to what is there
      kfmm::l2p_stream_particle(length, terms.data(), x[0], x[1], x[2], phi, gx, gy, gz);
      double rphi = 0.5, rgx = -1, rgy = 2, rgz = 0.25;
      kfmm::l2p_particle(p, L.data(), Gx.data(), Gy.data(), Gz.data(), x[0], x[1], x[2], rphi, rgx, rgy, rgz);
      const double scale = 4 + std::abs(rphi) + std::abs(rgx) + std::abs(rgy) + std::abs(rgz);
      INFO("p " << p << " at (" << x[0] << ", " << x[1] << ", " << x[2] << ")");
      CHECK(std::abs(phi - rphi) <= 1e-14 * scale);
      CHECK(std::abs(gx - rgx) <= 1e-14 * scale);
      CHECK(std::abs(gy - rgy) <= 1e-14 * scale);
      CHECK(std::abs(gz - rgz) <= 1e-14 * scale);
    }
  }
}

namespace {

/// Orders the batched P2M / L2P tests run: the runtime orders 0, 1 and compile-time ones up to 16 (the
/// host's double lanes reach 16; static_order.hpp).
const int lane_test_orders[] = {0, 1, 2, 4, 7, 9, 10, 11, 12, 13, 14, 15, 16};

/// Leaves of 0, 1, 7, 8, 9 and 21 particles (empty, partial and full lane blocks of 8) for the batched
/// P2M / L2P tests: random centres in [-1, 1]^3, each leaf's particles within 0.5 of its centre along
/// every axis, masses in [-1, 1]; host copies and device Views of each.
template <class ExecutionSpace, class Real>
struct LaneLeaves {
  using Memory = typename ExecutionSpace::memory_space;
  std::vector<int> first{0};  ///< first particle of each leaf, the total last
  int leaves = 0, n = 0;
  Kokkos::View<Real*[3], Memory> centres, positions;
  Kokkos::View<Real*, Memory> masses;
  Kokkos::View<int* [2], Memory> ranges;
  decltype(Kokkos::create_mirror_view(Kokkos::View<Real*[3], Memory>())) hc, hx;
  decltype(Kokkos::create_mirror_view(Kokkos::View<Real*, Memory>())) hm;

  explicit LaneLeaves(std::mt19937& rng) {
    for (const int size : {0, 1, 7, 8, 9, 21}) first.push_back(first.back() + size);
    leaves = static_cast<int>(first.size()) - 1;
    n = first[leaves];
    centres = Kokkos::View<Real* [3], Memory>("centres", leaves);
    positions = Kokkos::View<Real* [3], Memory>("positions", n);
    masses = Kokkos::View<Real*, Memory>("masses", n);
    ranges = Kokkos::View<int* [2], Memory>("ranges", leaves);
    hc = Kokkos::create_mirror_view(centres);
    hx = Kokkos::create_mirror_view(positions);
    hm = Kokkos::create_mirror_view(masses);
    auto hr = Kokkos::create_mirror_view(ranges);
    std::uniform_real_distribution<double> u(-1, 1);
    for (int l = 0; l < leaves; ++l) {
      for (int a = 0; a < 3; ++a) hc(l, a) = static_cast<Real>(u(rng));
      hr(l, 0) = first[l];
      hr(l, 1) = first[l + 1];
      for (int i = first[l]; i < first[l + 1]; ++i) {
        for (int a = 0; a < 3; ++a) hx(i, a) = static_cast<Real>(hc(l, a) + 0.5 * u(rng));
        hm(i) = static_cast<Real>(u(rng));
      }
    }
    Kokkos::deep_copy(centres, hc);
    Kokkos::deep_copy(positions, hx);
    Kokkos::deep_copy(masses, hm);
    Kokkos::deep_copy(ranges, hr);
  }
};

/// Batched l2p against l2p_particle, particle by particle, for leaves of 0, 1, 7, 8, 9 and 21 particles
/// (on host backends the compile-time orders run in lanes of 8 particles: partial and empty blocks;
/// `team_size` > 1 there runs the GPU kernel: the stream of terms, L2PTerm).
template <class ExecutionSpace, class Real>
void check_batched_l2p(double tolerance, int team_size = 0) {
  using Memory = typename ExecutionSpace::memory_space;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int p : lane_test_orders) {
    INFO("order " << p);
    const LaneLeaves<ExecutionSpace, Real> f(rng);
    const int nc = kfmm::num_coefficients(p), ng = kfmm::num_coefficients(p - 1);
    Kokkos::View<Real**, Kokkos::LayoutRight, Memory> locals("locals", f.leaves, nc);
    Kokkos::View<Real* [3], Memory> acc("acc", f.n);
    Kokkos::View<Real*, Memory> pot("pot", f.n);
    auto hl = Kokkos::create_mirror_view(locals);
    for (int l = 0; l < f.leaves; ++l)
      for (int k = 0; k < nc; ++k) hl(l, k) = static_cast<Real>(u(rng) / (1 + k));
    Kokkos::deep_copy(locals, hl);
    const double G = 1.25;
    kfmm::ExpansionOptions options;
    options.team_size = team_size;
    kfmm::l2p(ExecutionSpace(), p, G, kfmm_test::device_ints<Memory>({0, 1, 2, 3, 4, 5}), f.ranges, f.centres,
              locals, f.positions, acc, pot, options);
    const auto ha = kfmm_test::to_host(acc);
    const auto hp = kfmm_test::to_host(pot);
    const auto& first = f.first;
    const auto& hx = f.hx;
    const auto& hc = f.hc;
    for (int l = 0; l < f.leaves; ++l) {
      std::vector<Real> L(nc), Gx(ng > 0 ? ng : 1), Gy(ng > 0 ? ng : 1), Gz(ng > 0 ? ng : 1);
      for (int k = 0; k < nc; ++k) L[k] = hl(l, k);
      kfmm::l2p_gradient_coefficients(p, L.data(), Gx.data(), Gy.data(), Gz.data());
      for (int i = first[l]; i < first[l + 1]; ++i) {
        Real phi = 0, gx = 0, gy = 0, gz = 0;
        kfmm::l2p_particle(p, L.data(), Gx.data(), Gy.data(), Gz.data(), hx(i, 0) - hc(l, 0),
                           hx(i, 1) - hc(l, 1), hx(i, 2) - hc(l, 2), phi, gx, gy, gz);
        const double scale = 1 + std::abs(static_cast<double>(phi)) + std::abs(static_cast<double>(gx)) +
                             std::abs(static_cast<double>(gy)) + std::abs(static_cast<double>(gz));
        CHECK(std::abs(hp(i) + G * phi) <= tolerance * G * scale);
        CHECK(std::abs(ha(i, 0) - G * gx) <= tolerance * G * scale);
        CHECK(std::abs(ha(i, 1) - G * gy) <= tolerance * G * scale);
        CHECK(std::abs(ha(i, 2) - G * gz) <= tolerance * G * scale);
      }
    }
  }
}

/// Batched p2m against the sum of p2m_particle over each leaf's particles in long double, for leaves of
/// 0, 1, 7, 8, 9 and 21 particles (on host backends the compile-time orders sum in lanes of 8
/// particles: partial and empty blocks, masses of both signs; `team_size` as in check_batched_l2p).
template <class ExecutionSpace, class Real>
void check_batched_p2m(double tolerance, int team_size = 0) {
  using Memory = typename ExecutionSpace::memory_space;
  std::mt19937 rng(6);
  for (int p : lane_test_orders) {
    INFO("order " << p);
    const LaneLeaves<ExecutionSpace, Real> f(rng);
    const int nc = kfmm::num_coefficients(p);
    Kokkos::View<Real**, Kokkos::LayoutRight, Memory> multipoles("multipoles", f.leaves, nc);
    Kokkos::deep_copy(multipoles, Real(7));  // overwritten, empty leaves with zeros
    kfmm::ExpansionOptions options;
    options.team_size = team_size;
    kfmm::p2m(ExecutionSpace(), p, f.positions, f.masses, f.ranges,
              kfmm_test::device_ints<Memory>({0, 1, 2, 3, 4, 5}), f.centres, multipoles, options);
    const auto hM = kfmm_test::to_host(multipoles);
    const auto& first = f.first;
    const auto& hx = f.hx;
    const auto& hc = f.hc;
    const auto& hm = f.hm;
    for (int l = 0; l < f.leaves; ++l) {
      // (scale: per degree n, the sum over particles of the largest |mass R_n^m|; a single coefficient
      // can be far smaller than its degree's, and its recurrence cancels)
      std::vector<long double> ref(nc, 0.0L), magnitude(p + 1, 0.0L);
      for (int i = first[l]; i < first[l + 1]; ++i) {
        std::vector<long double> one(nc, 0.0L);
        kfmm::p2m_particle<long double>(p, hm(i), static_cast<long double>(hx(i, 0)) - hc(l, 0),
                                        static_cast<long double>(hx(i, 1)) - hc(l, 1),
                                        static_cast<long double>(hx(i, 2)) - hc(l, 2), one.data());
        for (int d = 0; d <= p; ++d) {
          long double largest = 0;
          for (int k = d * d; k < (d + 1) * (d + 1); ++k) largest = std::max(largest, std::abs(one[k]));
          magnitude[d] += largest;
        }
        for (int k = 0; k < nc; ++k) ref[k] += one[k];
      }
      for (int d = 0; d <= p; ++d) {
        for (int k = d * d; k < (d + 1) * (d + 1); ++k) {
          INFO("leaf " << l << ", coefficient " << k);
          CHECK(std::abs(static_cast<long double>(hM(l, k)) - ref[k]) <= tolerance * magnitude[d]);
        }
      }
    }
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("batched L2P equals l2p_particle at every order and leaf size", "[operators][l2p]",
                        kfmm_test::ExecutionSpaces) {
  check_batched_l2p<TestType, double>(1e-13);
  check_batched_l2p<TestType, float>(2e-5);
}

TEMPLATE_LIST_TEST_CASE("batched P2M equals the sum of p2m_particle at every order and leaf size",
                        "[operators][p2m]", kfmm_test::ExecutionSpaces) {
  check_batched_p2m<TestType, double>(1e-13);
  check_batched_p2m<TestType, float>(2e-5);
}

TEST_CASE("batched P2M and L2P in teams (the GPU kernels on the host) equal the per-particle references",
          "[operators][p2m][l2p]") {
  using Space = Kokkos::DefaultHostExecutionSpace;
  const int max_team = kfmm_test::host_max_team_size();
  if (max_team < 2) {
    SUCCEED("host backend allows one thread per team only");
    return;
  }
  const int team = max_team < 3 ? max_team : 3;  // (3: chunks of a leaf that end mid-team)
  check_batched_l2p<Space, double>(1e-13, team);
  check_batched_l2p<Space, float>(2e-5, team);
  check_batched_p2m<Space, double>(1e-13, team);
  check_batched_p2m<Space, float>(2e-5, team);
}
