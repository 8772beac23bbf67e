#include "kfmm/engine.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kfmm/arguments.hpp"
#include "kfmm/kfmm.hpp"

namespace kfmm_cli {

Precision precision_from_string(const std::string& text) {
  if (text == "fp32" || text == "float") return Precision::fp32;
  if (text == "fp64" || text == "double") return Precision::fp64;
  throw UsageError("precision '" + text + "' is not one of fp32, fp64");
}

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Memory = Space::memory_space;

template <class Real>
class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(const kfmm::Options& options) : solver_(options, Space()) {}

  void load(const kfmm::HostParticles& p) override {
    const int n = p.size();
    x_ = Kokkos::View<Real* [3], Memory>("kfmm::cli::positions", n);
    v_ = Kokkos::View<Real* [3], Memory>("kfmm::cli::velocities", n);
    m_ = Kokkos::View<Real*, Memory>("kfmm::cli::masses", n);
    a_ = Kokkos::View<Real* [3], Memory>("kfmm::cli::accelerations", n);
    phi_ = Kokkos::View<Real*, Memory>("kfmm::cli::potentials", n);
    auto xh = Kokkos::create_mirror_view(x_);
    auto vh = Kokkos::create_mirror_view(v_);
    auto mh = Kokkos::create_mirror_view(m_);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) {
        xh(i, d) = static_cast<Real>(p.positions(i, d));
        vh(i, d) = static_cast<Real>(p.velocities(i, d));
      }
      mh(i) = static_cast<Real>(p.masses(i));
    }
    Kokkos::deep_copy(x_, xh);
    Kokkos::deep_copy(v_, vh);
    Kokkos::deep_copy(m_, mh);
  }

  void store(kfmm::HostParticles& p) const override {
    const int n = size();
    if (p.size() != n) p = kfmm::HostParticles(n);
    auto xh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x_);
    auto vh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v_);
    auto mh = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m_);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) {
        p.positions(i, d) = xh(i, d);
        p.velocities(i, d) = vh(i, d);
      }
      p.masses(i) = mh(i);
    }
  }

  void evaluate() override { solver_.evaluate(x_, m_, a_, phi_); }

  void step(double dt) override {
    const Space space = solver_.space();
    kfmm::kick(space, v_, a_, dt / 2);
    kfmm::drift(space, x_, v_, dt);
    solver_.evaluate(x_, m_, a_, phi_);
    kfmm::kick(space, v_, a_, dt / 2);
  }

  HostForces forces() const override {
    const int n = size();
    HostForces f{Kokkos::View<double* [3], Kokkos::HostSpace>("kfmm::cli::accelerations", n),
                 Kokkos::View<double*, Kokkos::HostSpace>("kfmm::cli::potentials", n)};
    auto ah = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a_);
    auto ph = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), phi_);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) f.accelerations(i, d) = ah(i, d);
      f.potentials(i) = ph(i);
    }
    return f;
  }

  kfmm::Diagnostics diagnostics() const override {
    return kfmm::diagnostics(solver_.space(), x_, v_, m_, phi_);
  }

  const kfmm::Statistics& statistics() const override { return solver_.statistics(); }
  int order() const override { return solver_.chosen_order(); }
  double theta() const override { return solver_.chosen_theta(); }
  int leaf_size() const override { return solver_.chosen_leaf_size(); }
  Precision precision() const override { return sizeof(Real) == 4 ? Precision::fp32 : Precision::fp64; }
  int size() const override { return static_cast<int>(m_.extent(0)); }

 private:
  kfmm::Solver<Space, Real> solver_;
  Kokkos::View<Real*[3], Memory> x_, v_, a_;
  Kokkos::View<Real*, Memory> m_, phi_;
};

}  // namespace

std::unique_ptr<Engine> Engine::make(Precision precision, const kfmm::Options& options) {
  if (precision == Precision::fp32) return std::make_unique<EngineImpl<float>>(options);
  return std::make_unique<EngineImpl<double>>(options);
}

HostForces direct_reference(const kfmm::HostParticles& p, const std::vector<int>& targets, double G,
                            double softening) {
  const int n = p.size();
  const int nt = static_cast<int>(targets.size());
  Kokkos::View<double* [3], Memory> x("kfmm::cli::ref_positions", n);
  Kokkos::View<double*, Memory> m("kfmm::cli::ref_masses", n);
  Kokkos::View<int*, Memory> t("kfmm::cli::ref_targets", nt);
  Kokkos::View<double* [3], Memory> a("kfmm::cli::ref_accelerations", nt);
  Kokkos::View<double*, Memory> phi("kfmm::cli::ref_potentials", nt);
  auto xh = Kokkos::create_mirror_view(x);
  auto mh = Kokkos::create_mirror_view(m);
  auto th = Kokkos::create_mirror_view(t);
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) xh(i, d) = p.positions(i, d);
    mh(i) = p.masses(i);
  }
  for (int k = 0; k < nt; ++k) th(k) = targets[k];
  Kokkos::deep_copy(x, xh);
  Kokkos::deep_copy(m, mh);
  Kokkos::deep_copy(t, th);
  kfmm::direct_sum(Space(), x, m, G, softening, a, phi, Kokkos::View<const int*, Memory>(t));
  HostForces f{Kokkos::View<double* [3], Kokkos::HostSpace>("kfmm::cli::ref_accelerations", nt),
               Kokkos::View<double*, Kokkos::HostSpace>("kfmm::cli::ref_potentials", nt)};
  // Device Views of rank 2 may be LayoutLeft (CUDA): copy through a mirror of their own layout.
  auto ah = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  for (int k = 0; k < nt; ++k)
    for (int d = 0; d < 3; ++d) f.accelerations(k, d) = ah(k, d);
  Kokkos::deep_copy(f.potentials, phi);
  return f;
}

ErrorReport compare(const HostForces& forces, const HostForces& reference, const std::vector<int>& targets) {
  ErrorReport r;
  long double num = 0, den = 0, pnum = 0, pden = 0;
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const int i = targets[k];
    double e2 = 0, r2 = 0;
    for (int d = 0; d < 3; ++d) {
      const double diff = forces.accelerations(i, d) - reference.accelerations(k, d);
      e2 += diff * diff;
      r2 += reference.accelerations(k, d) * reference.accelerations(k, d);
    }
    num += e2;
    den += r2;
    if (r2 > 0) r.max_relative = std::max(r.max_relative, std::sqrt(e2 / r2));
    const double dp = forces.potentials(i) - reference.potentials(k);
    pnum += dp * dp;
    pden += reference.potentials(k) * reference.potentials(k);
  }
  r.relative_l2 = den > 0 ? static_cast<double>(std::sqrt(num / den)) : static_cast<double>(std::sqrt(num));
  r.potential_relative_l2 = pden > 0 ? static_cast<double>(std::sqrt(pnum / pden)) : 0.0;
  return r;
}

std::vector<int> sample_targets(int n, int count, std::uint64_t seed) {
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  if (count >= n) return all;
  kfmm::Random rng(seed);
  // Partial Fisher-Yates shuffle, then sorted for memory locality.
  for (int k = 0; k < count; ++k) {
    const int j = k + static_cast<int>(rng.uniform() * (n - k));
    std::swap(all[k], all[std::min(j, n - 1)]);
  }
  all.resize(count);
  std::sort(all.begin(), all.end());
  return all;
}

std::string backend_description() {
  std::ostringstream s;
  s << Space::name() << " (" << kfmm::compat::concurrency(Space())
    << (Space::concurrency() == 1 ? " thread" : " threads") << ")";
  return s.str();
}

}  // namespace kfmm_cli
