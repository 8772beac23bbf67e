/// \file nbody.hpp
/// Pieces of an N-body integration on the device: the kick and drift of the leapfrog
/// (kick-drift-kick, second order, symplectic) and the energy, momentum and angular momentum of a
/// system (summed on the host in long double, so the log is reproducible).
///
/// One KDK step of length dt with a kfmm::Solver:
/// \code
///   kfmm::kick(space, velocities, accelerations, dt / 2);
///   kfmm::drift(space, positions, velocities, dt);
///   solver.evaluate(positions, masses, accelerations, potentials);
///   kfmm::kick(space, velocities, accelerations, dt / 2);
/// \endcode
#pragma once

#include <Kokkos_Core.hpp>

#include "kfmm/core/error.hpp"

namespace kfmm {

namespace detail {
/// y(i) += x(i) * h for rows of 3 (a functor: see drivers/kfmm/drivers/solver.hpp on nvcc's lambdas).
template <class Y, class X>
struct AddScaled {
  Y y;
  X x;
  typename Y::non_const_value_type h;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    for (int d = 0; d < 3; ++d) y(i, d) += x(i, d) * h;
  }
};
}  // namespace detail

/// v += a * dt for every particle. Views of shape (n, 3) in a memory space `space` can access.
template <class ExecutionSpace, class VelocityView, class AccelerationView>
void kick(const ExecutionSpace& space, const VelocityView& velocities, const AccelerationView& accelerations,
          double dt) {
  static_assert(
      Kokkos::SpaceAccessibility<ExecutionSpace, typename VelocityView::memory_space>::accessible &&
          Kokkos::SpaceAccessibility<ExecutionSpace, typename AccelerationView::memory_space>::accessible,
      "kick: the Views must be accessible from the execution space");
  require(velocities.extent(0) == accelerations.extent(0), "kick: velocities (", velocities.extent(0),
          ") and accelerations (", accelerations.extent(0), ") differ in length");
  using Real = typename VelocityView::non_const_value_type;
  const Real h = static_cast<Real>(dt);
  Kokkos::parallel_for("kfmm::kick", Kokkos::RangePolicy<ExecutionSpace>(space, 0, velocities.extent(0)),
                       detail::AddScaled<VelocityView, AccelerationView>{velocities, accelerations, h});
}

/// x += v * dt for every particle. Views of shape (n, 3) in a memory space `space` can access.
template <class ExecutionSpace, class PositionView_, class VelocityView>
void drift(const ExecutionSpace& space, const PositionView_& positions, const VelocityView& velocities,
           double dt) {
  static_assert(
      Kokkos::SpaceAccessibility<ExecutionSpace, typename PositionView_::memory_space>::accessible &&
          Kokkos::SpaceAccessibility<ExecutionSpace, typename VelocityView::memory_space>::accessible,
      "drift: the Views must be accessible from the execution space");
  require(positions.extent(0) == velocities.extent(0), "drift: positions (", positions.extent(0),
          ") and velocities (", velocities.extent(0), ") differ in length");
  using Real = typename PositionView_::non_const_value_type;
  const Real h = static_cast<Real>(dt);
  Kokkos::parallel_for("kfmm::drift", Kokkos::RangePolicy<ExecutionSpace>(space, 0, positions.extent(0)),
                       detail::AddScaled<PositionView_, VelocityView>{positions, velocities, h});
}

/// Conserved quantities of a self-gravitating system.
struct Diagnostics {
  double kinetic = 0;    ///< sum m v^2 / 2
  double potential = 0;  ///< sum m phi / 2 (phi excludes self-interaction, includes G and softening)
  double total = 0;      ///< kinetic + potential
  double momentum[3] = {0, 0, 0};
  double angular_momentum[3] = {0, 0, 0};
  double mass = 0;
  /// Virial ratio 2K / |W| (1 in equilibrium); 0 when W = 0.
  double virial_ratio() const {
    return potential != 0 ? 2 * kinetic / (potential < 0 ? -potential : potential) : 0;
  }
};

/// Energy, momentum and angular momentum from host (or host-accessible) Views; potentials are the
/// solver's phi (so W = sum m phi / 2 is the softened potential energy).
template <class PositionsView, class VelocitiesView, class MassesView, class PotentialsView>
Diagnostics diagnostics_host(const PositionsView& x, const VelocitiesView& v, const MassesView& m,
                             const PotentialsView& phi) {
  const int n = static_cast<int>(m.extent(0));
  require(x.extent(0) == m.extent(0) && v.extent(0) == m.extent(0) && phi.extent(0) == m.extent(0),
          "diagnostics: positions, velocities, masses and potentials differ in length");
  long double kinetic = 0, potential = 0, mass = 0, p[3] = {0, 0, 0}, l[3] = {0, 0, 0};
  for (int i = 0; i < n; ++i) {
    const long double mi = m(i);
    const long double vx = v(i, 0), vy = v(i, 1), vz = v(i, 2);
    const long double rx = x(i, 0), ry = x(i, 1), rz = x(i, 2);
    kinetic += 0.5L * mi * (vx * vx + vy * vy + vz * vz);
    potential += 0.5L * mi * static_cast<long double>(phi(i));
    mass += mi;
    p[0] += mi * vx;
    p[1] += mi * vy;
    p[2] += mi * vz;
    l[0] += mi * (ry * vz - rz * vy);
    l[1] += mi * (rz * vx - rx * vz);
    l[2] += mi * (rx * vy - ry * vx);
  }
  Diagnostics d;
  d.kinetic = static_cast<double>(kinetic);
  d.potential = static_cast<double>(potential);
  d.total = static_cast<double>(kinetic + potential);
  d.mass = static_cast<double>(mass);
  for (int k = 0; k < 3; ++k) {
    d.momentum[k] = static_cast<double>(p[k]);
    d.angular_momentum[k] = static_cast<double>(l[k]);
  }
  return d;
}

/// Diagnostics of Views in any memory space (fences `space`, then copies them to the host).
template <class ExecutionSpace, class PositionsView, class VelocitiesView, class MassesView,
          class PotentialsView>
Diagnostics diagnostics(const ExecutionSpace& space, const PositionsView& positions,
                        const VelocitiesView& velocities, const MassesView& masses,
                        const PotentialsView& potentials) {
  space.fence();
  auto x = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), positions);
  auto v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), velocities);
  auto m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), masses);
  auto phi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), potentials);
  return diagnostics_host(x, v, m, phi);
}

}  // namespace kfmm
