// kfmm demo (also `kfmm` with no arguments): a Plummer sphere's forces by the FMM, checked against the
// direct sum, with a per-stage timing table; then a short N-body run with its energy error.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kfmm/commands.hpp"
#include "kfmm/drivers/distributions.hpp"
#include "kfmm/drivers/tolerance.hpp"
#include "kfmm/engine.hpp"
#include "kfmm/report.hpp"

namespace kfmm_cli {

Arguments declare_demo() {
  Arguments a(
      "kfmm demo", "kfmm [demo] [--particles N] [--tolerance EPS] [--check NSAMPLES] [--steps S] ...",
      "The tour of kfmm: the forces of a Plummer sphere (Henon units) at a requested accuracy, checked\n"
      "against the O(N^2) direct sum on sampled particles, with the time of every stage; then a short\n"
      "leapfrog N-body run of a smaller Plummer sphere and its energy error.");
  a.option("particles", "N", "particles of the force demo (default 100000)");
  a.option("tolerance", "EPS", "requested relative L2 error of the accelerations (default 1e-6)");
  a.option("check", "NSAMPLES", "particles checked against the direct sum (default 1000)");
  a.option("precision", "fp32|fp64", "evaluation precision (default fp64)");
  a.option("nbody-particles", "N", "particles of the N-body run (default 10000; 0 skips it)");
  a.option("steps", "S", "leapfrog steps of the N-body run (default 64)");
  a.option("seed", "S", "random seed (default 1)");
  a.flag("no-progress", "no progress bar");
  return a;
}

int run_demo(const Arguments& a) {
  const long long n = a.get_integer("particles", 100000);
  const long long check = a.get_integer("check", 1000);
  const long long nbody_n = a.get_integer("nbody-particles", 10000);
  const long long steps = a.get_integer("steps", 64);
  const std::uint64_t seed = a.get_unsigned("seed", 1);
  const Precision precision = precision_from_string(a.get("precision", "fp64"));
  if (n < 0 || n > 2147483647LL)
    throw UsageError("--particles " + a.get("particles") + " must be in 0..2^31-1");
  // (one particle has no energy to conserve: dE/E would be 0/0)
  if (nbody_n == 1 || nbody_n < 0 || nbody_n > 2147483647LL)
    throw UsageError("--nbody-particles " + a.get("nbody-particles") +
                     " must be 0 (no N-body run) or in 2..2^31-1");
  if (check < 0) throw UsageError("--check must be >= 0");
  if (steps < 0) throw UsageError("--steps must be >= 0");
  kfmm::Options options;
  options.tolerance = a.get_double(
      "tolerance", precision == Precision::fp32 ? std::max(1e-6, kfmm::precision_floor<float>()) : 1e-6);
  if (!(options.tolerance > 0 && options.tolerance < 1)) throw UsageError("--tolerance must be in (0, 1)");
  options.timing = true;
  const bool progress = !a.has("no-progress");

  std::printf("%s\n\n", header_line(precision).c_str());
  std::printf("1. Forces of a Plummer sphere of %lld particles at tolerance %g\n", n, options.tolerance);
  std::fflush(stdout);
  auto engine = Engine::make(precision, options);
  const kfmm::HostParticles plummer = kfmm::plummer_sphere(static_cast<int>(n), seed);
  engine->load(plummer);
  Kokkos::Timer timer;
  engine->evaluate();
  Kokkos::fence();
  const double t_second = timer.seconds();
  const kfmm::Statistics st = engine->statistics();
  std::printf("   solver: %s\n", parameters_line(st).c_str());
  std::printf("   tree:   %s\n", sizes_line(st).c_str());
  std::printf("   time:   %s for the evaluation (tree build and first-touch allocations included)\n",
              format_seconds(t_second).c_str());
  std::printf("   per-stage time:\n%s", stage_table(st.seconds, 1).c_str());
  std::fflush(stdout);

  if (check > 0 && n > 0) {
    const auto targets = sample_targets(static_cast<int>(n), static_cast<int>(std::min(check, n)), 12345);
    timer.reset();
    const HostForces ref = direct_reference(plummer, targets, options.G, options.softening);
    const double t_ref = timer.seconds();
    const ErrorReport e = compare(engine->forces(), ref, targets);
    std::printf(
        "   check:  relative L2 error of the accelerations %.3g (max per particle %.3g, potentials %.3g)\n"
        "           against the fp64 direct sum on %zu sampled particles: %s the tolerance %g\n",
        e.relative_l2, e.max_relative, e.potential_relative_l2, targets.size(),
        e.relative_l2 <= options.tolerance ? "within" : "ABOVE", options.tolerance);
    const double full = t_ref * static_cast<double>(n) / static_cast<double>(targets.size());
    std::printf("           (direct sum: %s for the sample, ~%s for all %lld particles, %.0fx the FMM)\n",
                format_seconds(t_ref).c_str(), format_seconds(full).c_str(), n,
                t_second > 0 ? full / t_second : 0.0);
  }
  engine.reset();

  if (nbody_n > 0 && steps > 0) {
    kfmm::Options nb;
    // Plummer softening: the far field starts where the softened and plain kernels agree to the
    // tolerance, eps sqrt(3 / tol) = 0.55 here (docs/usage.md, "Accuracy control").
    nb.tolerance = std::max(1e-3, kfmm::precision_floor<float>());
    nb.softening = 0.01;
    nb.timing = true;
    const double dt = 1.0 / 128;
    std::printf(
        "\n2. N-body: Plummer sphere of %lld particles, %lld leapfrog steps of dt = 1/128 (t = %g),\n"
        "   tolerance %g, softening %g\n",
        nbody_n, steps, steps * dt, nb.tolerance, nb.softening);
    std::fflush(stdout);
    auto sim = Engine::make(precision, nb);
    sim->load(kfmm::plummer_sphere(static_cast<int>(nbody_n), seed + 1));
    sim->evaluate();
    const kfmm::Diagnostics d0 = sim->diagnostics();
    ProgressBar bar("   nbody", steps, progress);
    timer.reset();
    double max_error = 0;
    for (long long s = 1; s <= steps; ++s) {
      sim->step(dt);
      if (s % 8 == 0 || s == steps) {
        const double err = (sim->diagnostics().total - d0.total) / std::fabs(d0.total);
        max_error = std::max(max_error, std::fabs(err));
        char note[48];
        std::snprintf(note, sizeof note, "dE/E %+.2e", err);
        bar.update(s, note);
      }
    }
    const double t_run = timer.seconds();
    bar.finish();
    const kfmm::Diagnostics d = sim->diagnostics();
    std::printf("   solver: %s\n", parameters_line(sim->statistics()).c_str());
    std::printf(
        "   energy: E0 = %.8f, E = %.8f, relative error %+.2e (largest %.2e); virial ratio %.3f -> %.3f\n",
        d0.total, d.total, (d.total - d0.total) / std::fabs(d0.total), max_error, d0.virial_ratio(),
        d.virial_ratio());
    std::printf("   time:   %s per step (%s in all)\n", format_seconds(t_run / steps).c_str(),
                format_seconds(t_run).c_str());
  }
  std::printf("\nNext: kfmm forces --help, kfmm nbody --help (configs/*.yaml), docs/usage.md\n");
  return 0;
}

}  // namespace kfmm_cli
