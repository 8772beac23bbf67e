// kfmm forces: accelerations and potentials of the particles of a CSV file.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "kfmm/commands.hpp"
#include "kfmm/drivers/tolerance.hpp"
#include "kfmm/engine.hpp"
#include "kfmm/files.hpp"
#include "kfmm/report.hpp"

namespace kfmm_cli {

Arguments declare_forces() {
  Arguments a(
      "kfmm forces",
      "kfmm forces --input IN.csv --output OUT.csv [--order P --theta T | --tolerance EPS]\n"
      "                   [--leaf-size L] [--softening EPS] [--G G] [--precision fp32|fp64] [--check "
      "NSAMPLES]\n"
      "                   [--concentration-ratio R] [--list-build automatic|sort|scatter] [--seed S]",
      "Accelerations and potentials of every particle of IN.csv (header x,y,z,m; masses may be negative)\n"
      "from all the others, by the fast multipole method:\n"
      "  a_i = -G sum_{j!=i} m_j (x_i - x_j) (r^2+eps^2)^(-3/2),  phi_i = -G sum_{j!=i} m_j "
      "(r^2+eps^2)^(-1/2).\n"
      "OUT.csv gets the header ax,ay,az,phi and one row per input particle in input order, at full "
      "precision\n"
      "(%.17g in fp64, %.9g in fp32). OUT.csv is replaced only when complete (written to a temporary file\n"
      "next to it and renamed).");
  a.option("input", "IN.csv", "particles: CSV with header x,y,z,m (vx,vy,vz ignored; # comments skipped)");
  a.option("output", "OUT.csv", "results: CSV with header ax,ay,az,phi");
  a.option("tolerance", "EPS", "relative L2 error of the accelerations (default 1e-6; fp32: its floor)");
  a.option("order", "P", "expansion order 0..16 (with --theta: used as given)");
  a.option("theta", "T", "opening angle in (0, 1) (with --order: used as given)");
  a.option("leaf-size", "L", "particles per leaf, >= 1 (default: chosen with the order)");
  a.option("softening", "EPS", "Plummer softening length >= 0 (default 0)");
  a.option("G", "G", "gravitational constant (default 1)");
  a.option("concentration-ratio", "R",
           "the walk's concentration rule for compact heavy masses, in [0, 1] (default 0.1; 0: off)");
  a.option(
      "list-build", "automatic|sort|scatter",
      "how the walk builds its lists, same results (scatter: half the walk's memory; default: scatter on "
      "CPUs, sort on GPUs)");
  a.option(
      "precision", "fp32|fp64",
      "evaluation precision (default fp64; fp32 takes positions relative to their bounding box's centre)");
  a.option("check", "NSAMPLES",
           "compare with the direct sum on NSAMPLES random particles and print the error");
  a.option("seed", "S", "seed of the --check sample (default 12345)");
  a.epilog(
      "examples:\n"
      "  kfmm forces --input stars.csv --output forces.csv --tolerance 1e-8 --check 1000\n"
      "  kfmm forces --input charges.csv --output field.csv --order 6 --theta 0.5 --precision fp32");
  return a;
}

kfmm::Options solver_options(const Arguments& a) {
  kfmm::Options o;
  if (a.has("tolerance") && a.has("order") && a.has("theta")) {
    throw UsageError("give --order and --theta, or --tolerance (optionally with one of them), not all three");
  }
  o.tolerance = a.get_double("tolerance", o.tolerance);
  if (a.has("order")) {
    const long long p = a.get_integer("order", 0);
    if (p < 0 || p > kfmm::max_order) {
      throw UsageError("--order " + a.get("order") + " is out of range: kfmm supports orders 0.." +
                       std::to_string(kfmm::max_order));
    }
    o.order = static_cast<int>(p);
  }
  if (a.has("theta")) {
    const double t = a.get_double("theta", 0.5);
    if (!(t > 0 && t < 1)) throw UsageError("--theta " + a.get("theta") + " is outside (0, 1)");
    o.theta = t;
  }
  if (a.has("tolerance") && !(o.tolerance > 0 && o.tolerance < 1)) {
    throw UsageError("--tolerance " + a.get("tolerance") + " must be in (0, 1)");
  }
  const long long leaf = a.get_integer("leaf-size", 0);
  if (a.has("leaf-size") && (leaf < 1 || leaf > 1000000)) {
    throw UsageError("--leaf-size " + a.get("leaf-size") + " must be in 1..1000000");
  }
  o.leaf_size = static_cast<int>(leaf);
  o.softening = a.get_double("softening", 0.0);
  if (o.softening < 0) throw UsageError("--softening " + a.get("softening") + " must be >= 0");
  o.G = a.get_double("G", 1.0);
  o.concentration_ratio = a.get_double("concentration-ratio", o.concentration_ratio);
  if (!(o.concentration_ratio >= 0 && o.concentration_ratio <= 1)) {
    throw UsageError("--concentration-ratio " + a.get("concentration-ratio") + " must be in [0, 1]");
  }
  if (a.has("list-build") && !kfmm::list_build_from_string(a.get("list-build"), o.list_build)) {
    throw UsageError("--list-build '" + a.get("list-build") + "' is not one of automatic, sort, scatter");
  }
  o.timing = true;
  return o;
}

int run_forces(const Arguments& a) {
  if (!a.has("input")) throw UsageError("--input IN.csv is required");
  if (!a.has("output")) throw UsageError("--output OUT.csv is required");
  const std::string input = a.get("input"), output = a.get("output");
  kfmm::Options options = solver_options(a);
  const Precision precision = precision_from_string(a.get("precision", "fp64"));
  const long long check = a.get_integer("check", 0);
  if (check < 0) throw UsageError("--check " + a.get("check") + " must be >= 0");
  const std::uint64_t seed = a.get_unsigned("seed", 12345);
  if (precision == Precision::fp32 && !a.has("tolerance") && !(a.has("order") && a.has("theta"))) {
    options.tolerance = std::max(options.tolerance, kfmm::precision_floor<float>());
  }
  // Fail before any work when the options are invalid or the output cannot be written.
  auto engine = Engine::make(precision, options);
  check_writable(output);

  Kokkos::Timer timer;
  // Velocity columns are accepted (and ignored) so that nbody snapshots work as input.
  const CsvTable table = read_csv(input, {"x", "y", "z", "m"}, {"vx", "vy", "vz"});
  const double t_read = timer.seconds();
  const int n = static_cast<int>(table.rows());
  kfmm::HostParticles particles(n);
  const int cx = table.column("x"), cy = table.column("y"), cz = table.column("z"), cm = table.column("m");
  for (int i = 0; i < n; ++i) {
    particles.positions(i, 0) = table.at(i, cx);
    particles.positions(i, 1) = table.at(i, cy);
    particles.positions(i, 2) = table.at(i, cz);
    particles.masses(i) = table.at(i, cm);
  }
  std::string recentred;
  if (precision == Precision::fp32) {
    check_fits_fp32(table, input, {"x", "y", "z", "m"});
    // Forces are translation invariant: an fp32 run is given the positions relative to the centre of
    // their bounding box, subtracted in double, so that rounding to fp32 costs digits of the extent only,
    // not of an offset (a clump 1e-3 wide at 1000 kept ~4 bits of its extent in raw fp32 coordinates).
    double lo[3], hi[3];
    for (int d = 0; d < 3; ++d) lo[d] = hi[d] = n > 0 ? particles.positions(0, d) : 0.0;
    for (int i = 1; i < n; ++i) {
      for (int d = 0; d < 3; ++d) {
        lo[d] = std::min(lo[d], particles.positions(i, d));
        hi[d] = std::max(hi[d], particles.positions(i, d));
      }
    }
    const double centre[3] = {0.5 * (lo[0] + hi[0]), 0.5 * (lo[1] + hi[1]), 0.5 * (lo[2] + hi[2])};
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) particles.positions(i, d) -= centre[d];
    char line[200];
    std::snprintf(
        line, sizeof(line),
        "fp32: positions taken relative to (%.17g, %.17g, %.17g), the centre of their bounding box\n",
        centre[0], centre[1], centre[2]);
    recentred = line;
  }

  std::printf("%s\n", header_line(precision).c_str());
  std::printf("forces: %d particles from %s\n", n, input.c_str());
  std::printf("%s", recentred.c_str());
  std::fflush(stdout);
  engine->load(particles);
  timer.reset();
  engine->evaluate();
  Kokkos::fence();
  const double t_eval = timer.seconds();
  const kfmm::Statistics& st = engine->statistics();
  const HostForces forces = engine->forces();

  timer.reset();
  write_atomically(output, [&](std::FILE* f) {
    std::fputs("ax,ay,az,phi\n", f);
    const bool single = precision == Precision::fp32;
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) {
        write_number(f, forces.accelerations(i, d), single);
        std::fputc(',', f);
      }
      write_number(f, forces.potentials(i), single);
      std::fputc('\n', f);
    }
  });
  const double t_write = timer.seconds();

  std::printf("solver: %s\n", parameters_line(st).c_str());
  std::printf("tree: %s\n", sizes_line(st).c_str());
  std::printf("per-stage time:\n%s", stage_table(st.seconds, 1).c_str());
  std::printf("time: read %s, evaluate %s, write %s\n", format_seconds(t_read).c_str(),
              format_seconds(t_eval).c_str(), format_seconds(t_write).c_str());
  if (check > 0 && n > 0) {
    const auto targets = sample_targets(n, static_cast<int>(std::min<long long>(check, n)), seed);
    timer.reset();
    const HostForces ref = direct_reference(particles, targets, options.G, options.softening);
    const double t_ref = timer.seconds();
    const ErrorReport e = compare(forces, ref, targets);
    std::printf(
        "check: relative L2 error of the accelerations %.3g (max per particle %.3g), potentials %.3g,\n"
        "       against the fp64 direct sum on %zu particles (%s)\n",
        e.relative_l2, e.max_relative, e.potential_relative_l2, targets.size(),
        format_seconds(t_ref).c_str());
    // An fp32 evaluation is given the inputs rounded to fp32: its tolerance holds against their exact sum,
    // and the difference to the error above is what that rounding costs (docs/usage.md, "Accuracy").
    double own_error = e.relative_l2;
    if (precision == Precision::fp32) {
      kfmm::HostParticles rounded(n);
      for (int i = 0; i < n; ++i) {
        for (int d = 0; d < 3; ++d) rounded.positions(i, d) = static_cast<float>(particles.positions(i, d));
        rounded.masses(i) = static_cast<float>(particles.masses(i));
      }
      own_error = compare(forces, direct_reference(rounded, targets, options.G, options.softening), targets)
                      .relative_l2;
      std::printf(
          "       %.3g against the fp64 direct sum of the inputs rounded to fp32 (what the fp32 evaluation\n"
          "       is given)\n",
          own_error);
    }
    if (st.parameters_from_tolerance) {
      std::printf("       %s the requested tolerance %.3g%s\n",
                  own_error <= st.tolerance ? "within" : "ABOVE", st.tolerance,
                  precision == Precision::fp32 && own_error <= st.tolerance && e.relative_l2 > st.tolerance
                      ? "; rounding the input to fp32 costs the rest (run in fp64 where its digits matter)"
                      : "");
    }
  }
  std::printf("wrote %d rows to %s\n", n, output.c_str());
  return 0;
}

}  // namespace kfmm_cli
