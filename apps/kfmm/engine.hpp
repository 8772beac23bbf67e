// The kfmm command's bridge to the library: particles resident on the device with a solver in float
// or double, behind one precision-independent interface (so each Solver instantiation is compiled
// once, in engine.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kfmm/drivers/distributions.hpp"
#include "kfmm/drivers/nbody.hpp"
#include "kfmm/drivers/options.hpp"
#include "kfmm/drivers/statistics.hpp"

namespace kfmm_cli {

enum class Precision { fp32, fp64 };
inline const char* to_string(Precision p) {
  return p == Precision::fp32 ? "fp32" : "fp64";
}
/// "fp32" or "fp64" (also "float", "double"); throws UsageError otherwise.
Precision precision_from_string(const std::string& text);

/// Host-side results in double.
struct HostForces {
  Kokkos::View<double* [3], Kokkos::HostSpace> accelerations;
  Kokkos::View<double*, Kokkos::HostSpace> potentials;
};

/// Particles on the device and a solver.
class Engine {
 public:
  virtual ~Engine() = default;
  /// Makes an engine in the given precision on Kokkos::DefaultExecutionSpace; throws kfmm::Error for
  /// invalid options (theta, order, a tolerance below the precision floor, ...).
  static std::unique_ptr<Engine> make(Precision precision, const kfmm::Options& options);

  /// Copies positions, velocities and masses to the device.
  virtual void load(const kfmm::HostParticles& particles) = 0;
  /// Copies the device state back (positions, velocities, masses in double).
  virtual void store(kfmm::HostParticles& particles) const = 0;
  /// Accelerations and potentials of the current positions (rebuilding the tree).
  virtual void evaluate() = 0;
  /// One leapfrog kick-drift-kick step of length dt (needs the accelerations of the current positions:
  /// call evaluate() once first; each step leaves them current).
  virtual void step(double dt) = 0;
  /// The latest accelerations and potentials in double on the host.
  virtual HostForces forces() const = 0;
  /// Energy, momentum and angular momentum (needs current potentials).
  virtual kfmm::Diagnostics diagnostics() const = 0;

  virtual const kfmm::Statistics& statistics() const = 0;
  virtual int order() const = 0;
  virtual double theta() const = 0;
  virtual int leaf_size() const = 0;
  virtual Precision precision() const = 0;
  virtual int size() const = 0;
};

/// Accelerations (and potentials) of the listed targets from all particles by the O(N^2) direct sum
/// in double on the device: the accuracy reference.
HostForces direct_reference(const kfmm::HostParticles& particles, const std::vector<int>& targets, double G,
                            double softening);

/// Relative L2 error of the accelerations, sqrt(sum |a - a_ref|^2 / sum |a_ref|^2), over the targets
/// (forces holds all particles, reference only the targets, in order); also the largest per-particle
/// relative error.
struct ErrorReport {
  double relative_l2 = 0;
  double max_relative = 0;
  double potential_relative_l2 = 0;
};
ErrorReport compare(const HostForces& forces, const HostForces& reference, const std::vector<int>& targets);

/// `count` distinct target indices out of n, reproducibly from a seed (all when count >= n).
std::vector<int> sample_targets(int n, int count, std::uint64_t seed);

/// "OpenMP (2 threads)", "Cuda (NVIDIA ...)", ...: the execution space the engine runs on.
std::string backend_description();

}  // namespace kfmm_cli
