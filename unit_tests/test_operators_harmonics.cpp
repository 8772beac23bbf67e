// Real solid harmonics and rotations (operators/kfmm/operators/{solid_harmonics,rotation}.hpp):
// closed forms of low degrees, an independent long-double evaluation from the explicit Legendre
// polynomials, the degree-lowering relations, the swap blocks (R(S y) = B R(y)), and rotation round
// trips, on the host and inside kernels on every backend.
#if defined(__NVCC__)
// The long double references of these tests instantiate kfmm's host-device templates with long double,
// which nvcc also compiles (unused) for the device, warning that it is double there.
#pragma nv_diag_suppress 20208
#endif
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "backends.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/solid_harmonics.hpp"
#include "test_operators_common.hpp"

namespace {

/// Independent reference: R_n^m and I_n^m from the explicit Legendre polynomial
/// P_n(t) = 2^-n sum_k (-1)^k C(n,k) C(2n-2k, n) t^(n-2k), its m-th derivative, and atan2 / cos / sin,
/// all in long double.
struct Reference {
  std::vector<long double> R, I;
};

long double binomial(int n, int k) {
  long double b = 1.0L;
  for (int i = 1; i <= k; ++i) b = b * (n - k + i) / i;
  return b;
}

Reference reference_harmonics(int order, long double x, long double y, long double z) {
  Reference out;
  out.R.assign(kfmm::num_coefficients(order), 0.0L);
  out.I.assign(kfmm::num_coefficients(order), 0.0L);
  const long double r = std::sqrt(x * x + y * y + z * z);
  const long double t = z / r, st = std::sqrt(x * x + y * y) / r, phi = std::atan2(y, x);
  for (int n = 0; n <= order; ++n) {
    for (int m = 0; m <= n; ++m) {
      // d^m/dt^m P_n(t) from the explicit coefficients; P_n^m = (1-t^2)^(m/2) d^m P_n (no Condon-Shortley
      // phase).
      long double d = 0.0L;
      for (int k = 0; 2 * k <= n; ++k) {
        const int power = n - 2 * k;
        if (power < m) continue;
        long double c =
            binomial(n, k) * binomial(2 * n - 2 * k, n) / std::pow(2.0L, n) * ((k & 1) ? -1.0L : 1.0L);
        for (int j = 0; j < m; ++j) c *= power - j;
        d += c * std::pow(t, power - m);
      }
      const long double pnm = std::pow(st, m) * d;
      long double fnm = 1.0L, fnm_minus = 1.0L;  // (n+m)!, (n-m)!
      for (int i = 2; i <= n + m; ++i) fnm *= i;
      for (int i = 2; i <= n - m; ++i) fnm_minus *= i;
      const long double reg = std::pow(r, n) * pnm / fnm, irr = fnm_minus * pnm / std::pow(r, n + 1);
      out.R[kfmm::coefficient_index(n, m)] = reg * std::cos(m * phi);
      out.I[kfmm::coefficient_index(n, m)] = irr * std::cos(m * phi);
      if (m > 0) {
        out.R[kfmm::coefficient_index(n, -m)] = reg * std::sin(m * phi);
        out.I[kfmm::coefficient_index(n, -m)] = irr * std::sin(m * phi);
      }
    }
  }
  return out;
}

std::vector<std::array<double, 3>> sample_points() {
  std::vector<std::array<double, 3>> pts = {{0, 0, 1},        {0, 0, -0.7}, {1.3, 0, 0},     {0, -0.4, 0},
                                            {0.3, -0.4, 0.5}, {1e-9, 0, 2}, {-2, 1.5, -0.25}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  for (int i = 0; i < 10; ++i) pts.push_back({u(rng), u(rng), u(rng)});
  return pts;
}

}  // namespace

TEST_CASE("solid harmonics match closed forms of degrees 0 to 2", "[operators][harmonics]") {
  const double x = 0.3, y = -0.7, z = 1.1, r2 = x * x + y * y + z * z, r = std::sqrt(r2);
  double R[9], I[9];
  kfmm::regular_harmonics(2, x, y, z, R);
  kfmm::irregular_harmonics(2, x, y, z, I);
  auto at = [](const double* v, int n, int m) { return v[kfmm::coefficient_index(n, m)]; };
  const double tol = 1e-15;
  CHECK(at(R, 0, 0) == 1.0);
  CHECK(std::abs(at(R, 1, 0) - z) < tol);
  CHECK(std::abs(at(R, 1, 1) - x / 2) < tol);
  CHECK(std::abs(at(R, 1, -1) - y / 2) < tol);
  CHECK(std::abs(at(R, 2, 0) - (2 * z * z - x * x - y * y) / 4) < tol);
  CHECK(std::abs(at(R, 2, 1) - x * z / 2) < tol);
  CHECK(std::abs(at(R, 2, -1) - y * z / 2) < tol);
  CHECK(std::abs(at(R, 2, 2) - (x * x - y * y) / 8) < tol);
  CHECK(std::abs(at(R, 2, -2) - x * y / 4) < tol);
  const double r3 = r * r2, r5 = r3 * r2;
  CHECK(std::abs(at(I, 0, 0) - 1 / r) < tol);
  CHECK(std::abs(at(I, 1, 0) - z / r3) < tol);
  CHECK(std::abs(at(I, 1, 1) - x / r3) < tol);
  CHECK(std::abs(at(I, 1, -1) - y / r3) < tol);
  CHECK(std::abs(at(I, 2, 0) - (3 * z * z - r2) / r5) < tol);
  CHECK(std::abs(at(I, 2, 1) - 3 * x * z / r5) < tol);
  CHECK(std::abs(at(I, 2, -1) - 3 * y * z / r5) < tol);
  CHECK(std::abs(at(I, 2, 2) - 3 * (x * x - y * y) / r5) < tol);
  CHECK(std::abs(at(I, 2, -2) - 6 * x * y / r5) < tol);
  // The addition theorem: 1/|x - y| = sum w_m R_n^m(y) I_n^m(x) for |y| < |x|.
  const int p = 16;
  std::vector<double> Ry(kfmm::num_coefficients(p)), Ix(kfmm::num_coefficients(p));
  kfmm::regular_harmonics(p, 0.1, 0.05, -0.08, Ry.data());
  kfmm::irregular_harmonics(p, x, y, z, Ix.data());
  double sum = 0;
  for (int n = 0; n <= p; ++n)
    for (int m = -n; m <= n; ++m)
      sum += kfmm::harmonic_weight(m) * Ry[kfmm::coefficient_index(n, m)] * Ix[kfmm::coefficient_index(n, m)];
  const double exact =
      1.0 / std::sqrt((x - 0.1) * (x - 0.1) + (y - 0.05) * (y - 0.05) + (z + 0.08) * (z + 0.08));
  CHECK(std::abs(sum - exact) < 1e-14 * exact);
}

TEMPLATE_LIST_TEST_CASE("solid harmonics match a long double Legendre evaluation in kernels",
                        "[operators][harmonics]", kfmm_test::ExecutionSpaces) {
  using Memory = typename TestType::memory_space;
  const int p = kfmm::max_order, nc = kfmm::num_coefficients(p);
  const auto pts = sample_points();
  const int count = static_cast<int>(pts.size());
  Kokkos::View<double* [3], Memory> X("X", count);
  Kokkos::View<float* [3], Memory> Xf("Xf", count);
  Kokkos::View<double**, Kokkos::LayoutRight, Memory> R("R", count, nc), I("I", count, nc), S("S", count, nc);
  Kokkos::View<float**, Kokkos::LayoutRight, Memory> Rf("Rf", count, nc), If("If", count, nc);
  auto X_h = Kokkos::create_mirror_view(X);
  auto Xf_h = Kokkos::create_mirror_view(Xf);
  for (int i = 0; i < count; ++i)
    for (int k = 0; k < 3; ++k) {
      Xf_h(i, k) = static_cast<float>(pts[i][k]);
      X_h(i, k) = Xf_h(i, k);  // same point in both precisions
    }
  Kokkos::deep_copy(X, X_h);
  Kokkos::deep_copy(Xf, Xf_h);
  Kokkos::parallel_for(
      "harmonics", Kokkos::RangePolicy<TestType>(TestType(), 0, count), KOKKOS_LAMBDA(int i) {
        kfmm::regular_harmonics(p, X(i, 0), X(i, 1), X(i, 2), &R(i, 0));
        kfmm::irregular_harmonics(p, X(i, 0), X(i, 1), X(i, 2), &I(i, 0));
        kfmm::regular_harmonics(p, Xf(i, 0), Xf(i, 1), Xf(i, 2), &Rf(i, 0));
        kfmm::irregular_harmonics(p, Xf(i, 0), Xf(i, 1), Xf(i, 2), &If(i, 0));
        // The streaming form must give the same values as the buffered one.
        kfmm::for_each_regular_harmonic(p, X(i, 0), X(i, 1), X(i, 2), [&](int n, int m, double c, double s) {
          S(i, kfmm::coefficient_index(n, m)) = c;
          if (m > 0) S(i, kfmm::coefficient_index(n, -m)) = s;
        });
      });
  auto R_h = kfmm_test::to_host(R);
  auto I_h = kfmm_test::to_host(I);
  auto S_h = kfmm_test::to_host(S);
  auto Rf_h = kfmm_test::to_host(Rf);
  auto If_h = kfmm_test::to_host(If);
  for (int i = 0; i < count; ++i) {
    INFO("point (" << X_h(i, 0) << ", " << X_h(i, 1) << ", " << X_h(i, 2) << ")");
    const Reference ref = reference_harmonics(p, X_h(i, 0), X_h(i, 1), X_h(i, 2));
    // Per degree in the rotation-invariant norm (an L2 norm over the sphere).
    CHECK(kfmm_test::ops::degree_errors(p, &R_h(i, 0), ref.R.data(), /*multipole=*/true) < 1e-13);
    CHECK(kfmm_test::ops::degree_errors(p, &I_h(i, 0), ref.I.data()) < 1e-13);
    CHECK(kfmm_test::ops::degree_errors(p, &S_h(i, 0), ref.R.data(), /*multipole=*/true) < 1e-13);
    CHECK(kfmm_test::ops::degree_errors(p, &Rf_h(i, 0), ref.R.data(), /*multipole=*/true) < 1e-5);
    CHECK(kfmm_test::ops::degree_errors(p, &If_h(i, 0), ref.I.data()) < 1e-5);
  }
}

TEST_CASE("regular harmonics are exact at the origin", "[operators][harmonics]") {
  std::vector<double> R(kfmm::num_coefficients(8));
  kfmm::regular_harmonics(8, 0.0, 0.0, 0.0, R.data());
  for (std::size_t i = 0; i < R.size(); ++i) CHECK(R[i] == (i == 0 ? 1.0 : 0.0));
}

TEST_CASE("degree lowering relations give the harmonics' gradients", "[operators][harmonics]") {
  // d/da R_n^m (central differences in long double, h = 1e-5: error ~1e-10 relative) against the
  // lowering coefficients harmonic_lowering_x/y and d/dz R_n^m = R_{n-1}^m.
  const int p = 10, nc = kfmm::num_coefficients(p);
  const long double x = 0.31L, y = -0.52L, z = 0.44L, h = 1e-5L;
  std::vector<long double> R(nc), Rp(nc), Rm(nc);
  kfmm::regular_harmonics<long double>(p, x, y, z, R.data());
  for (int axis = 0; axis < 3; ++axis) {
    long double xp[3] = {x, y, z}, xm[3] = {x, y, z};
    xp[axis] += h;
    xm[axis] -= h;
    kfmm::regular_harmonics<long double>(p, xp[0], xp[1], xp[2], Rp.data());
    kfmm::regular_harmonics<long double>(p, xm[0], xm[1], xm[2], Rm.data());
    for (int n = 1; n <= p; ++n) {
      for (int m = -n; m <= n; ++m) {
        long double predicted = 0.0L;
        for (int k = -(n - 1); k <= n - 1; ++k) {
          const long double g = axis == 0   ? kfmm::harmonic_lowering_x(m, k)
                                : axis == 1 ? kfmm::harmonic_lowering_y(m, k)
                                            : (k == m ? 1.0L : 0.0L);
          predicted += g * R[kfmm::coefficient_index(n - 1, k)];
        }
        const long double numeric =
            (Rp[kfmm::coefficient_index(n, m)] - Rm[kfmm::coefficient_index(n, m)]) / (2 * h);
        INFO("axis " << axis << " n " << n << " m " << m);
        CHECK(std::abs(static_cast<double>(numeric - predicted)) < 1e-9 * (1 + std::abs((double)predicted)));
      }
    }
  }
}

TEST_CASE("swap blocks map R of the swapped point and are involutions", "[operators][rotation]") {
  // B = A(S) for S(x, y, z) = (x, z, y): R_n(S y) = B_n R_n(y); B_n^2 = 1; the normalised blocks are
  // orthogonal and symmetric; the tabulated sparsity pattern holds every non-zero.
  const int p = kfmm::max_order, nc = kfmm::num_coefficients(p);
  const long double x = 0.37L, y = -0.81L, z = 0.55L;
  std::vector<long double> R(nc), Rs(nc);
  kfmm::regular_harmonics<long double>(p, x, y, z, R.data());
  kfmm::regular_harmonics<long double>(p, x, z, y, Rs.data());
  for (int n = 0; n <= p; ++n) {
    long double scale = 0.0L;
    for (int m = -n; m <= n; ++m)
      scale = std::max(scale, std::abs(Rs[kfmm::coefficient_index(n, m)]) * kfmm::expansion_scale(n, m));
    for (int m = -n; m <= n; ++m) {
      long double v = 0.0L;
      for (int k = -n; k <= n; ++k) v += kfmm::swap_coefficient(n, m, k) * R[kfmm::coefficient_index(n, k)];
      INFO("n " << n << " m " << m);
      // Normalised comparison: D_n^m R_n^m(S y) has the size of the degree's orthonormal components.
      CHECK(std::abs(static_cast<double>((v - Rs[kfmm::coefficient_index(n, m)]) *
                                         kfmm::expansion_scale(n, m))) < 1e-13 * static_cast<double>(scale));
      for (int k = -n; k <= n; ++k) {
        double square = 0.0, orth = 0.0;
        for (int j = -n; j <= n; ++j) {
          square += kfmm::swap_coefficient(n, m, j) * kfmm::swap_coefficient(n, j, k);
          orth += kfmm::normalised_swap_coefficient(n, m, j) * kfmm::normalised_swap_coefficient(n, k, j);
        }
        CHECK(std::abs(square - (m == k ? 1.0 : 0.0)) < 1e-9);
        CHECK(std::abs(orth - (m == k ? 1.0 : 0.0)) < 1e-14);
        CHECK(std::abs(kfmm::normalised_swap_coefficient(n, m, k) -
                       kfmm::normalised_swap_coefficient(n, k, m)) < 1e-14);
        const int sign = kfmm::swap_column_sign(n, m);
        bool in_pattern = (k >= 0) == (sign > 0) && !(k == 0 && sign < 0);
        in_pattern = in_pattern && ((k < 0 ? -k : k) - kfmm::swap_first_column(n, m)) % 2 == 0 &&
                     (k < 0 ? -k : k) >= kfmm::swap_first_column(n, m);
        if (!in_pattern) CHECK(kfmm::swap_coefficient(n, m, k) == 0.0);
      }
    }
  }
}

TEMPLATE_LIST_TEST_CASE("rotations to the z axis and back are the identity in kernels",
                        "[operators][rotation]", kfmm_test::ExecutionSpaces) {
  using Memory = typename TestType::memory_space;
  const int p = kfmm::max_order, nc = kfmm::num_coefficients(p);
  const std::vector<std::array<double, 3>> dirs = {{0, 0, 1}, {0, 0, -2}, {1e-7, 0, 1},     {0, 1e-7, -1},
                                                   {1, 0, 0}, {0, 1, 0},  {0.3, -0.4, 0.5}, {-2, 1, 0.1}};
  const int count = static_cast<int>(dirs.size());
  Kokkos::View<double**, Kokkos::LayoutRight, Memory> A("A", count, nc), Z("Z", count, nc);
  Kokkos::View<double* [3], Memory> D("D", count);
  auto A_h = Kokkos::create_mirror_view(A);
  auto D_h = Kokkos::create_mirror_view(D);
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < count; ++i) {
    for (int k = 0; k < nc; ++k) A_h(i, k) = u(rng);
    for (int k = 0; k < 3; ++k) D_h(i, k) = dirs[i][k];
  }
  Kokkos::deep_copy(A, A_h);
  Kokkos::deep_copy(D, D_h);
  Kokkos::parallel_for(
      "rotations", Kokkos::RangePolicy<TestType>(TestType(), 0, count), KOKKOS_LAMBDA(int i) {
        const auto g = kfmm::rotation_angles(D(i, 0), D(i, 1), D(i, 2));
        double a[kfmm::num_coefficients(kfmm::max_order)];
        for (int k = 0; k < nc; ++k) a[k] = A(i, k);
        kfmm::rotate_to_z(p, g, a);
        for (int k = 0; k < nc; ++k) Z(i, k) = a[k];
        kfmm::rotate_from_z(p, g, a);
        for (int k = 0; k < nc; ++k) A(i, k) = a[k];
      });
  auto back = kfmm_test::to_host(A);
  auto Z_h = kfmm_test::to_host(Z);
  for (int i = 0; i < count; ++i) {
    double err = 0, norm_a = 0, norm_z = 0;
    for (int k = 0; k < nc; ++k) {
      err = std::max(err, std::abs(back(i, k) - A_h(i, k)));
      norm_a += A_h(i, k) * A_h(i, k);
      norm_z += Z_h(i, k) * Z_h(i, k);
    }
    INFO("direction " << i);
    CHECK(err < 1e-14);
    CHECK(std::abs(std::sqrt(norm_z) - std::sqrt(norm_a)) < 1e-13 * std::sqrt(norm_a));  // orthogonal
  }
  // The rotation to z really aligns: the regular harmonics of the displacement itself become those of
  // |t| e_z (only m = 0: |t|^n / n!).
  for (int i = 0; i < count; ++i) {
    std::vector<double> R(nc);
    kfmm::regular_harmonics(p, D_h(i, 0), D_h(i, 1), D_h(i, 2), R.data());
    for (int n = 0; n <= p; ++n)
      for (int m = -n; m <= n; ++m) R[kfmm::coefficient_index(n, m)] *= kfmm::expansion_scale(n, m);
    const auto g = kfmm::rotation_angles(D_h(i, 0), D_h(i, 1), D_h(i, 2));
    kfmm::rotate_to_z(p, g, R.data());
    for (int n = 0; n <= p; ++n) {
      double fact = 1;
      for (int j = 2; j <= n; ++j) fact *= j;
      const double expected = std::pow(g.r, n) / fact * kfmm::expansion_scale(n, 0);
      for (int m = -n; m <= n; ++m) {
        INFO("direction " << i << " n " << n << " m " << m);
        CHECK(std::abs(R[kfmm::coefficient_index(n, m)] - (m == 0 ? expected : 0.0)) < 1e-13 * expected);
      }
    }
  }
}
