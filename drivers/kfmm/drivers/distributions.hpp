/// \file distributions.hpp
/// Particle distributions generated on the host, reproducibly from a seed on every platform: the
/// Plummer sphere in virial equilibrium (Aarseth, Henon & Wielen 1974), a uniform sphere with
/// isotropic velocities of a chosen virial ratio, and the test distributions used to calibrate and
/// check the accuracy control (uniform cube, Plummer, clustered, disc).
/// Everything here runs on the host into HostSpace Views (deep_copy them to the device).
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "kfmm/core/error.hpp"

namespace kfmm {

/// A reproducible random number generator (SplitMix64-seeded xoshiro256**): the same stream on every
/// compiler and standard library, unlike std:: distributions.
class Random {
 public:
  explicit Random(std::uint64_t seed) {
    std::uint64_t z = seed;
    for (auto& s : state_) {
      z += 0x9E3779B97F4A7C15ull;
      std::uint64_t x = z;
      x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
      s = x ^ (x >> 31);
    }
  }
  /// Next 64 random bits.
  std::uint64_t bits() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(bits() >> 11) * 0x1.0p-53; }
  /// Uniform in (0, 1].
  double uniform_open0() { return 1.0 - uniform(); }
  /// Uniform in [a, b).
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  /// Standard normal (Box-Muller).
  double normal() {
    const double u = uniform_open0(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * 3.14159265358979323846 * v);
  }
  /// Uniform on the unit sphere.
  void unit_vector(double& x, double& y, double& z) {
    const double c = uniform(-1.0, 1.0), phi = uniform(0.0, 2.0 * 3.14159265358979323846);
    const double s = std::sqrt(1.0 - c * c);
    x = s * std::cos(phi);
    y = s * std::sin(phi);
    z = c;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t state_[4];
};

/// Particles on the host in double precision.
struct HostParticles {
  Kokkos::View<double* [3], Kokkos::HostSpace> positions;
  Kokkos::View<double* [3], Kokkos::HostSpace> velocities;  ///< zero where a distribution has none
  Kokkos::View<double*, Kokkos::HostSpace> masses;

  HostParticles() = default;
  /// n particles, all fields zero.
  explicit HostParticles(int n)
      : positions("kfmm::HostParticles::positions", n),
        velocities("kfmm::HostParticles::velocities", n),
        masses("kfmm::HostParticles::masses", n) {}
  int size() const { return static_cast<int>(masses.extent(0)); }
};

/// Copies a host View of particle data (n or n x 3, e.g. HostParticles::positions) into a View of any
/// memory space, layout and real type (a plain deep_copy needs matching layouts: on CUDA, device Views
/// of rank 2 default to LayoutLeft while host Views are LayoutRight).
template <class Destination, class Source>
void copy_to(const Destination& destination, const Source& source) {
  static_assert(static_cast<int>(Destination::rank) == static_cast<int>(Source::rank),
                "kfmm::copy_to: the Views must have the same rank");
  require(destination.extent(0) == source.extent(0), "copy_to: destination has ", destination.extent(0),
          " rows, source ", source.extent(0));
  auto mirror = Kokkos::create_mirror_view(destination);
  using Value = typename Destination::non_const_value_type;
  for (std::size_t i = 0; i < source.extent(0); ++i) {
    if constexpr (Destination::rank == 1) {
      mirror(i) = static_cast<Value>(source(i));
    } else {
      for (std::size_t d = 0; d < source.extent(1); ++d) mirror(i, d) = static_cast<Value>(source(i, d));
    }
  }
  Kokkos::deep_copy(destination, mirror);
}

namespace detail {
inline void shift_to_centre_of_mass(HostParticles& p) {
  const int n = p.size();
  double m = 0, x[3] = {0, 0, 0}, v[3] = {0, 0, 0};
  for (int i = 0; i < n; ++i) {
    m += p.masses(i);
    for (int d = 0; d < 3; ++d) {
      x[d] += p.masses(i) * p.positions(i, d);
      v[d] += p.masses(i) * p.velocities(i, d);
    }
  }
  if (!(m > 0)) return;
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      p.positions(i, d) -= x[d] / m;
      p.velocities(i, d) -= v[d] / m;
    }
  }
}
}  // namespace detail

/// Scale radius of the Plummer sphere in Henon units (G = M = 1, total energy -1/4): 3 pi / 16.
inline constexpr double henon_plummer_radius = 3.0 * 3.14159265358979323846 / 16.0;

/// Plummer sphere of n equal masses in virial equilibrium, sampled as Aarseth, Henon & Wielen (1974):
/// radii from the inverted cumulative mass, isotropic directions, speeds q v_esc with q drawn from
/// g(q) = q^2 (1 - q^2)^(7/2) by rejection. Radii beyond `max_radius` scale radii are redrawn. Centre of
/// mass and mean velocity are moved to zero. Defaults: Henon units.
inline HostParticles plummer_sphere(int n, std::uint64_t seed, double total_mass = 1.0,
                                    double scale_radius = henon_plummer_radius, double G = 1.0,
                                    double max_radius = 20.0) {
  require(n >= 0, "plummer_sphere: n = ", n, " must be >= 0");
  require(scale_radius > 0 && max_radius > 0, "plummer_sphere: scale_radius and max_radius must be > 0");
  require(G >= 0 && total_mass >= 0, "plummer_sphere: G and total_mass must be >= 0");
  HostParticles p(n);
  Random rng(seed);
  const double a = scale_radius;
  const double v_scale = std::sqrt(G * total_mass / a);
  // Mass fraction inside max_radius, M(r) / M = r^3 (1 + r^2)^(-3/2). While it is at least 1/2, radii
  // beyond the cut are redrawn (the streams of earlier versions, on which the published figures were
  // measured); below, the cumulative mass is inverted on (0, M(max_radius)] directly, since rejection
  // would need 1 / M(max_radius) draws per particle (1e9 at max_radius 1e-3).
  const double inside = std::pow(1.0 + 1.0 / (max_radius * max_radius), -1.5);  // (1 at infinity)
  const bool truncate_by_rejection = inside >= 0.5;
  for (int i = 0; i < n; ++i) {
    double r;
    do {
      const double x = rng.uniform_open0() * (truncate_by_rejection ? 1.0 : inside);
      r = 1.0 / std::sqrt(std::pow(x, -2.0 / 3.0) - 1.0);  // in units of a
    } while (!(r <= max_radius) && truncate_by_rejection);
    r = std::min(r, max_radius);  // (the inversion's rounding at x = M(max_radius))
    double ux, uy, uz;
    rng.unit_vector(ux, uy, uz);
    p.positions(i, 0) = a * r * ux;
    p.positions(i, 1) = a * r * uy;
    p.positions(i, 2) = a * r * uz;
    double q, g;
    do {
      q = rng.uniform();
      g = 0.1 * rng.uniform();
    } while (g > q * q * std::pow(1.0 - q * q, 3.5));
    const double v = q * std::sqrt(2.0) * std::pow(1.0 + r * r, -0.25) * v_scale;
    rng.unit_vector(ux, uy, uz);
    p.velocities(i, 0) = v * ux;
    p.velocities(i, 1) = v * uy;
    p.velocities(i, 2) = v * uz;
    p.masses(i) = total_mass / n;
  }
  detail::shift_to_centre_of_mass(p);
  return p;
}

/// Homogeneous sphere of n equal masses and the given radius; isotropic Gaussian velocities scaled so
/// that the virial ratio 2K/|W| equals `virial_ratio` against the sphere's potential energy
/// W = -3 G M^2 / (5 R) (0: a cold start). Centre of mass and mean velocity at zero.
inline HostParticles uniform_sphere(int n, std::uint64_t seed, double total_mass = 1.0, double radius = 1.0,
                                    double virial_ratio = 0.0, double G = 1.0) {
  require(n >= 0, "uniform_sphere: n = ", n, " must be >= 0");
  require(radius > 0, "uniform_sphere: radius = ", radius, " must be > 0");
  require(virial_ratio >= 0, "uniform_sphere: virial_ratio = ", virial_ratio, " must be >= 0");
  // 2K = virial_ratio |W| needs a bound sphere: W = -3 G M^2 / (5 R) < 0, i.e. G > 0 and M != 0.
  require(virial_ratio == 0 || (G > 0 && total_mass != 0), "uniform_sphere: virial_ratio = ", virial_ratio,
          " needs G > 0 and total_mass != 0 (G = ", G, ", total_mass = ", total_mass,
          "); use virial_ratio = 0 for a cold start");
  HostParticles p(n);
  Random rng(seed);
  for (int i = 0; i < n; ++i) {
    double x, y, z;
    do {
      x = rng.uniform(-1, 1);
      y = rng.uniform(-1, 1);
      z = rng.uniform(-1, 1);
    } while (x * x + y * y + z * z > 1);
    p.positions(i, 0) = radius * x;
    p.positions(i, 1) = radius * y;
    p.positions(i, 2) = radius * z;
    p.masses(i) = total_mass / n;
    if (virial_ratio > 0) {
      for (int d = 0; d < 3; ++d) p.velocities(i, d) = rng.normal();
    }
  }
  detail::shift_to_centre_of_mass(p);
  if (virial_ratio > 0 && n > 1) {
    double kinetic = 0;
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) kinetic += 0.5 * p.masses(i) * p.velocities(i, d) * p.velocities(i, d);
    }
    const double w = 3.0 * G * total_mass * total_mass / (5.0 * radius);
    const double scale = kinetic > 0 ? std::sqrt(virial_ratio * w / (2.0 * kinetic)) : 0.0;
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) p.velocities(i, d) *= scale;
    }
  }
  return p;
}

/// The distributions the accuracy control is calibrated and tested on.
enum class Distribution {
  uniform,    ///< uniform in the unit cube [0, 1)^3
  plummer,    ///< Plummer sphere, Henon units, cut at 20 scale radii
  clustered,  ///< 10 % uniform background and 12 Plummer clumps of very different sizes and masses
  disc        ///< exponential disc (scale length 1, sech^2 thickness 0.02) with a small Plummer bulge
};

/// Name of a distribution ("uniform", "plummer", "clustered", "disc").
inline const char* to_string(Distribution d) {
  switch (d) {
    case Distribution::uniform:
      return "uniform";
    case Distribution::plummer:
      return "plummer";
    case Distribution::clustered:
      return "clustered";
    default:
      return "disc";
  }
}

/// Distribution from its name; throws kfmm::Error naming the accepted names otherwise.
inline Distribution distribution_from_string(const std::string& name) {
  for (Distribution d :
       {Distribution::uniform, Distribution::plummer, Distribution::clustered, Distribution::disc}) {
    if (name == to_string(d)) return d;
  }
  require(false, "unknown distribution '", name, "' (expected uniform, plummer, clustered or disc)");
  return Distribution::uniform;
}

/// n particles of total mass 1 (equal masses) from one of the test distributions; velocities zero
/// except for the Plummer sphere.
inline HostParticles make_distribution(Distribution d, int n, std::uint64_t seed) {
  require(n >= 0, "make_distribution: n = ", n, " must be >= 0");
  if (d == Distribution::plummer) return plummer_sphere(n, seed);
  HostParticles p(n);
  Random rng(seed);
  constexpr double two_pi = 2.0 * 3.14159265358979323846;
  if (d == Distribution::uniform) {
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < 3; ++k) p.positions(i, k) = rng.uniform();
      p.masses(i) = 1.0 / n;
    }
  } else if (d == Distribution::clustered) {
    constexpr int clumps = 12;
    double centre[clumps][3], radius[clumps], weight[clumps], total = 0;
    for (int c = 0; c < clumps; ++c) {
      for (int k = 0; k < 3; ++k) centre[c][k] = rng.uniform();
      radius[c] = 0.002 * std::pow(25.0, rng.uniform());  // 0.002 .. 0.05
      weight[c] = 0.2 + rng.uniform();
      total += weight[c];
    }
    for (int i = 0; i < n; ++i) {
      const double u = rng.uniform();
      if (u < 0.1) {
        for (int k = 0; k < 3; ++k) p.positions(i, k) = rng.uniform();
      } else {
        double acc = 0, target = (u - 0.1) / 0.9 * total;
        int c = 0;
        while (c < clumps - 1 && acc + weight[c] < target) acc += weight[c++];
        double r;
        do {
          r = 1.0 / std::sqrt(std::pow(rng.uniform_open0(), -2.0 / 3.0) - 1.0);
        } while (!(r <= 10.0));
        double ux, uy, uz;
        rng.unit_vector(ux, uy, uz);
        p.positions(i, 0) = centre[c][0] + radius[c] * r * ux;
        p.positions(i, 1) = centre[c][1] + radius[c] * r * uy;
        p.positions(i, 2) = centre[c][2] + radius[c] * r * uz;
      }
      p.masses(i) = 1.0 / n;
    }
  } else {  // disc
    for (int i = 0; i < n; ++i) {
      if (rng.uniform() < 0.1) {  // bulge
        double r;
        do {
          r = 1.0 / std::sqrt(std::pow(rng.uniform_open0(), -2.0 / 3.0) - 1.0);
        } while (!(r <= 10.0));
        double ux, uy, uz;
        rng.unit_vector(ux, uy, uz);
        p.positions(i, 0) = 0.1 * r * ux;
        p.positions(i, 1) = 0.1 * r * uy;
        p.positions(i, 2) = 0.1 * r * uz;
      } else {
        const double R = -std::log(rng.uniform_open0() * rng.uniform_open0());  // Gamma(2, 1)
        const double phi = two_pi * rng.uniform();
        const double u = rng.uniform(-0.999999, 0.999999);
        p.positions(i, 0) = R * std::cos(phi);
        p.positions(i, 1) = R * std::sin(phi);
        p.positions(i, 2) = 0.02 * std::atanh(u);
      }
      p.masses(i) = 1.0 / n;
    }
  }
  return p;
}

}  // namespace kfmm
