// kfmm nbody: a leapfrog (kick-drift-kick) N-body run from a YAML file, with snapshots, an energy and
// momentum log, a progress bar and restart from the last snapshot. Every file is written atomically.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "kfmm/commands.hpp"
#include "kfmm/config.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/drivers/distributions.hpp"
#include "kfmm/drivers/tolerance.hpp"
#include "kfmm/engine.hpp"
#include "kfmm/files.hpp"
#include "kfmm/report.hpp"

namespace kfmm_cli {

namespace {

const char* const energy_columns[] = {"step", "time", "kinetic", "potential", "total", "energy_error",
                                      "px",   "py",   "pz",      "lx",        "ly",    "lz"};
constexpr int num_energy_columns = 12;

std::string snapshot_name(long long step) {
  char name[64];
  std::snprintf(name, sizeof name, "snapshot_%08lld.csv", step);
  return name;
}

/// Step numbers of the snapshot_STEP.csv files in a folder, sorted.
std::vector<long long> snapshot_steps(const std::string& dir) {
  std::vector<long long> steps;
  if (!is_directory(dir)) return steps;
  for (const auto& name : list_directory(dir)) {
    const std::string prefix = "snapshot_", suffix = ".csv";
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (digits.size() > 18) {  // (beyond any run's integrator.steps, and beyond long long from 19 digits)
      throw InputError(
          "output folder '" + dir + "' holds '" + name +
          "', whose step number is out of range; move it away or choose another output.directory");
    }
    steps.push_back(std::stoll(digits));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

void write_snapshot(const std::string& path, const kfmm::HostParticles& p, long long step, double time,
                    double time_step, bool single, const std::string& run) {
  write_atomically(path, [&](std::FILE* f) {
    std::fprintf(f,
                 "# kfmm nbody snapshot\n# step=%lld time=%.17g time_step=%.17g precision=%s\n# %s\n"
                 "x,y,z,m,vx,vy,vz\n",
                 step, time, time_step, single ? "fp32" : "fp64", run.c_str());
    for (int i = 0; i < p.size(); ++i) {
      for (int d = 0; d < 3; ++d) {
        write_number(f, p.positions(i, d), single);
        std::fputc(',', f);
      }
      write_number(f, p.masses(i), single);
      for (int d = 0; d < 3; ++d) {
        std::fputc(',', f);
        write_number(f, p.velocities(i, d), single);
      }
      std::fputc('\n', f);
    }
  });
}

kfmm::HostParticles particles_from_table(const CsvTable& t, const std::string& path, bool single) {
  if (single) check_fits_fp32(t, path, {"x", "y", "z", "m", "vx", "vy", "vz"});
  const int n = static_cast<int>(t.rows());
  kfmm::HostParticles p(n);
  const int c[7] = {t.column("x"),  t.column("y"),  t.column("z"), t.column("m"),
                    t.column("vx"), t.column("vy"), t.column("vz")};
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      p.positions(i, d) = t.at(i, c[d]);
      p.velocities(i, d) = c[4 + d] >= 0 ? t.at(i, c[4 + d]) : 0.0;
    }
    p.masses(i) = t.at(i, c[3]);
  }
  return p;
}

std::string exact_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

/// The value of `key=` in a snapshot's '#' lines, or "" when absent (snapshots of earlier versions).
std::string snapshot_field(const CsvTable& t, const std::string& key) {
  for (const auto& line : t.comments) {
    std::size_t at = 0;
    while ((at = line.find(key + "=", at)) != std::string::npos) {
      if (at == 0 || line[at - 1] == ' ') {
        const std::size_t begin = at + key.size() + 1;
        return line.substr(begin, line.find(' ', begin) - begin);
      }
      at += key.size();
    }
  }
  return "";
}

/// `text` with '%', blanks and control characters as %XX, so that it is one field of a snapshot's '#' line.
std::string field_text(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (c <= ' ' || c == '%' || c == 127) {
      char code[4];
      std::snprintf(code, sizeof code, "%%%02X", c);
      out += code;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

/// What makes a run the same run: the run file's keys that set the initial conditions and the forces
/// (key, value as written in the snapshots). A restart under other values would splice two runs into
/// one log, so the snapshots record them and a restart compares.
std::vector<std::pair<std::string, std::string>> run_identity(const NBodyConfig& cfg) {
  const auto& ic = cfg.initial_conditions;
  std::vector<std::pair<std::string, std::string>> id = {{"initial_conditions.kind", ic.kind}};
  if (ic.kind == "file") {
    id.emplace_back("initial_conditions.file", field_text(ic.file));
  } else {
    id.emplace_back("initial_conditions.particles", std::to_string(ic.particles));
    id.emplace_back("initial_conditions.seed", std::to_string(ic.seed));
    id.emplace_back("initial_conditions.total_mass", exact_number(ic.total_mass));
  }
  if (ic.kind == "plummer") {
    id.emplace_back("initial_conditions.scale_radius", exact_number(ic.scale_radius));
    id.emplace_back("initial_conditions.max_radius", exact_number(ic.max_radius));
  } else if (ic.kind == "uniform") {
    id.emplace_back("initial_conditions.radius", exact_number(ic.radius));
    id.emplace_back("initial_conditions.virial_ratio", exact_number(ic.virial_ratio));
  }
  id.emplace_back("solver.G", exact_number(cfg.solver.G));
  id.emplace_back("solver.softening", exact_number(cfg.solver.softening));
  return id;
}

std::string run_line(const NBodyConfig& cfg) {
  std::string line;
  for (const auto& [key, value] : run_identity(cfg)) line += (line.empty() ? "" : " ") + key + "=" + value;
  return line;
}

/// The particles the run file describes (Plummer, uniform sphere or CSV file); throws on bad ones.
kfmm::HostParticles initial_particles(const NBodyConfig& cfg, bool single) {
  const auto& ic = cfg.initial_conditions;
  if (ic.kind == "file") {
    return particles_from_table(read_csv(ic.file, {"x", "y", "z", "m"}, {"vx", "vy", "vz"}), ic.file, single);
  }
  const bool plummer = ic.kind == "plummer";
  kfmm::HostParticles p =
      plummer ? kfmm::plummer_sphere(static_cast<int>(ic.particles), ic.seed, ic.total_mass,
                                     ic.scale_radius > 0 ? ic.scale_radius : kfmm::henon_plummer_radius,
                                     cfg.solver.G, ic.max_radius)
              : kfmm::uniform_sphere(static_cast<int>(ic.particles), ic.seed, ic.total_mass, ic.radius,
                                     ic.virial_ratio, cfg.solver.G);
  // The generated values must be finite (in double, huge masses or G give infinite velocities and then
  // NaN ones) and in fp32 fit float, as a file's must (files.hpp, check_fits_fp32): beyond it they would
  // turn into infinities on the way to the solver.
  const double inf = std::numeric_limits<double>::infinity();
  const auto magnitude = [inf](double v) { return std::isfinite(v) ? std::fabs(v) : inf; };
  double largest[3] = {0, 0, 0};  // |position|, |velocity|, |mass| (inf for NaN or inf)
  for (int i = 0; i < p.size(); ++i) {
    for (int d = 0; d < 3; ++d) {
      largest[0] = std::max(largest[0], magnitude(p.positions(i, d)));
      largest[1] = std::max(largest[1], magnitude(p.velocities(i, d)));
    }
    largest[2] = std::max(largest[2], magnitude(p.masses(i)));
  }
  const char* what[3] = {"a position", "a velocity", "a mass"};
  const std::string keys = plummer ? "initial_conditions.scale_radius, max_radius, total_mass or solver.G"
                                   : "initial_conditions.radius, total_mass, virial_ratio or solver.G";
  for (int k = 0; k < 3; ++k) {
    if (largest[k] == inf) {
      throw InputError(cfg.path + ": the " + ic.kind + " initial conditions overflow double (" + what[k] +
                       " is NaN or infinite); choose smaller " + keys);
    }
    if (single && !fits_fp32(largest[k])) {
      throw InputError(cfg.path + ": the " + ic.kind + " initial conditions do not fit in fp32 (" + what[k] +
                       " of " + exact_number(largest[k]) + "); choose smaller " + keys +
                       ", or precision fp64");
    }
  }
  return p;
}

using EnergyRow = std::vector<double>;

void write_energy_log(const std::string& path, const std::vector<EnergyRow>& rows) {
  write_atomically(path, [&](std::FILE* f) {
    for (int c = 0; c < num_energy_columns; ++c) std::fprintf(f, "%s%s", c ? "," : "", energy_columns[c]);
    std::fputc('\n', f);
    for (const auto& row : rows) {
      std::fprintf(f, "%lld", static_cast<long long>(row[0]));
      for (int c = 1; c < num_energy_columns; ++c) {
        std::fputc(',', f);
        write_number(f, row[c], false);
      }
      std::fputc('\n', f);
    }
  });
}

EnergyRow energy_row(long long step, double time, const kfmm::Diagnostics& d, double e0) {
  const double error = e0 != 0 ? (d.total - e0) / std::fabs(e0) : d.total - e0;
  return {static_cast<double>(step),
          time,
          d.kinetic,
          d.potential,
          d.total,
          error,
          d.momentum[0],
          d.momentum[1],
          d.momentum[2],
          d.angular_momentum[0],
          d.angular_momentum[1],
          d.angular_momentum[2]};
}

/// A run that leaves the range of its precision (a time step, masses or G too large for it) stops with
/// the keys that set them and the last snapshot to go back to, rather than the solver's message about a
/// NaN position of some particle. `what` says what overflowed; `last_snapshot` < 0: none was written.
[[noreturn]] void out_of_range(const NBodyConfig& cfg, long long step, const std::string& what,
                               long long last_snapshot) {
  throw InputError(
      cfg.path + ": step " + std::to_string(step) + ": " + what + "; the run left the range of " +
      cfg.solver.precision +
      " (smaller masses or solver.G, or a smaller integrator.time_step, keep it finite" +
      (last_snapshot >= 0 ? "; the last snapshot is step " + std::to_string(last_snapshot) : "") + ")");
}

/// Index of the first particle of `p` whose position or velocity is NaN or infinite, or -1.
int first_non_finite_particle(const kfmm::HostParticles& p) {
  for (int i = 0; i < p.size(); ++i) {
    for (int c = 0; c < 3; ++c) {
      if (!std::isfinite(p.positions(i, c)) || !std::isfinite(p.velocities(i, c))) return i;
    }
  }
  return -1;
}

/// out_of_range when a particle of `engine` has a NaN or infinite position or velocity.
void refuse_non_finite_particles(const Engine& engine, const NBodyConfig& cfg, long long step,
                                 long long last_snapshot) {
  kfmm::HostParticles state;
  engine.store(state);
  const int bad = first_non_finite_particle(state);
  if (bad >= 0) {
    out_of_range(cfg, step, "particle " + std::to_string(bad) + " has a NaN or infinite position or velocity",
                 last_snapshot);
  }
}

/// The diagnostics of `engine`. An energy beyond double's range (the log could not record it) is
/// refused: with non-finite particles as out_of_range, else naming the masses and G that set it.
kfmm::Diagnostics finite_diagnostics(Engine& engine, const NBodyConfig& cfg, long long step,
                                     long long last_snapshot) {
  const kfmm::Diagnostics d = engine.diagnostics();
  if (std::isfinite(d.kinetic) && std::isfinite(d.potential) && std::isfinite(d.total)) return d;
  refuse_non_finite_particles(engine, cfg, step, last_snapshot);
  char energy[160];
  std::snprintf(energy, sizeof energy, "(kinetic %g, potential %g)", d.kinetic, d.potential);
  throw InputError(cfg.path + ": step " + std::to_string(step) + ": the energy " + energy +
                   " is beyond double's range, which the energy log cannot record; smaller masses or "
                   "solver.G keep it finite");
}

/// Runs one step; a kfmm::Error from it is reported by out_of_range when the particles overflowed
/// (the solver then refuses their NaN or infinite positions), else with the step it happened at.
void checked_step(Engine& engine, double dt, const NBodyConfig& cfg, long long step,
                  long long last_snapshot) {
  try {
    engine.step(dt);
  } catch (const kfmm::Error& e) {
    refuse_non_finite_particles(engine, cfg, step, last_snapshot);
    std::string message = e.what();
    const std::string prefix = "kfmm: ";
    if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
    throw InputError(cfg.path + ": step " + std::to_string(step) + ": " + message);
  }
}

}  // namespace

Arguments declare_nbody() {
  Arguments a(
      "kfmm nbody", "kfmm nbody --config RUN.yaml [--no-progress] [--dry-run]",
      "Leapfrog (kick-drift-kick, fixed step) N-body run described by a YAML file: initial conditions\n"
      "(Plummer sphere in virial equilibrium, uniform sphere, or a CSV file), forces by the FMM,\n"
      "snapshots every K steps, an energy and momentum log, and restart from the last snapshot.\n"
      "Snapshots and the log are replaced atomically, so a crash or Ctrl-C never leaves a partial\n"
      "file; Ctrl-C stops after the current step and writes a snapshot to restart from. Running the\n"
      "same command again continues the run (output.restart: true).");
  a.option("config", "RUN.yaml", "the run file (required)");
  a.flag("no-progress", "no progress bar");
  a.flag("dry-run", "check the run file and the solver options, print the plan, run nothing");
  a.epilog(nbody_config_help() + "\n\nexample: kfmm nbody --config configs/plummer.yaml");
  return a;
}

int run_nbody(const Arguments& a) {
  if (!a.has("config")) throw UsageError("--config RUN.yaml is required");
  const NBodyConfig cfg = load_nbody_config(a.get("config"));
  const auto& sc = cfg.solver;
  kfmm::Options options;
  if (sc.tolerance) options.tolerance = *sc.tolerance;
  if (sc.order) options.order = static_cast<int>(*sc.order);
  if (sc.theta) options.theta = *sc.theta;
  options.leaf_size = static_cast<int>(sc.leaf_size);
  options.softening = sc.softening;
  options.G = sc.G;
  options.concentration_ratio = sc.concentration_ratio;
  kfmm::list_build_from_string(sc.list_build, options.list_build);  // (checked by load_nbody_config)
  options.timing = true;
  const Precision precision = precision_from_string(sc.precision);
  if (precision == Precision::fp32 && !sc.tolerance && !(sc.order && sc.theta)) {
    options.tolerance = std::max(options.tolerance, kfmm::precision_floor<float>());
  }
  auto engine = Engine::make(precision, options);
  const bool single = precision == Precision::fp32;
  if (a.has("dry-run")) {
    initial_particles(cfg, single);  // (the initial conditions are checked too, not only the file's keys)
    std::printf("%s\n", header_line(precision).c_str());
    std::printf("nbody: %s is valid: %s initial conditions, %lld steps of %g, output in %s/\n",
                cfg.path.c_str(), cfg.initial_conditions.kind.c_str(), cfg.integrator.steps,
                cfg.integrator.time_step, cfg.output.directory.c_str());
    std::printf("solver: order p = %d, theta = %g, leaf size %d\n", engine->order(), engine->theta(),
                engine->leaf_size());
    return 0;
  }

  const std::string dir = cfg.output.directory;
  const std::string run = run_line(cfg);
  const std::string log_path = join_path(dir, "energy.csv");
  const double dt = cfg.integrator.time_step;
  const long long steps = cfg.integrator.steps;
  const auto existing = snapshot_steps(dir);
  kfmm::HostParticles particles;
  std::vector<EnergyRow> log;
  long long first_step = 0;
  double e0 = 0;
  bool restarted = false;
  // The energy log on disk holds exactly `log` (a restart's file may also hold rows after its snapshot,
  // which it drops from `log`).
  bool log_on_disk = true;
  if (!existing.empty()) {
    const long long latest = existing.back();
    const std::string snap = join_path(dir, snapshot_name(latest));
    if (!cfg.output.restart) {
      throw InputError(
          "output folder '" + dir + "' already holds snapshots (latest " + snap +
          "); set output.restart: true to continue that run, or choose another output.directory");
    }
    if (latest > steps) {
      throw InputError("the run in '" + dir + "' is already at step " + std::to_string(latest) +
                       ", beyond integrator.steps = " + std::to_string(steps));
    }
    const CsvTable table = read_csv(snap, {"x", "y", "z", "m", "vx", "vy", "vz"});
    // Continuing with another time step or precision would mix two runs in one log: refuse it.
    const std::string snap_dt = snapshot_field(table, "time_step");
    const std::string snap_time = snapshot_field(table, "time");
    const bool same_dt = !snap_dt.empty()     ? std::strtod(snap_dt.c_str(), nullptr) == dt
                         : !snap_time.empty() ? std::fabs(std::strtod(snap_time.c_str(), nullptr) -
                                                          latest * dt) <= 1e-12 * std::fabs(latest * dt)
                                              : true;
    if (!same_dt) {
      throw InputError("the run in '" + dir + "' was made with another time step (" + snap +
                       (snap_dt.empty() ? ": time=" + snap_time : ": time_step=" + snap_dt) +
                       ") than integrator.time_step = " + exact_number(dt) +
                       "; restore the time step or choose another output.directory");
    }
    const std::string snap_precision = snapshot_field(table, "precision");
    if (!snap_precision.empty() && snap_precision != sc.precision) {
      throw InputError("the run in '" + dir + "' was made in " + snap_precision + " (" + snap +
                       "), not in solver.precision = " + sc.precision +
                       "; restore the precision or choose another output.directory");
    }
    // Continuing with other initial conditions, G or softening would splice two runs: refuse it too.
    for (const auto& [key, value] : run_identity(cfg)) {
      const std::string recorded = snapshot_field(table, key);
      if (!recorded.empty() && recorded != value) {
        throw InputError("the run in '" + dir + "' was made with " + key + " = " + recorded + " (" + snap +
                         "), not " + value + " as " + cfg.path + " says; restore " + key +
                         " or choose another output.directory");
      }
    }
    particles = particles_from_table(table, snap, single);
    first_step = latest;
    restarted = true;
    if (file_exists(log_path)) {
      const CsvTable t =
          read_csv(log_path, std::vector<std::string>(energy_columns, energy_columns + num_energy_columns));
      for (std::size_t r = 0; r < t.rows(); ++r) {
        EnergyRow row(num_energy_columns);
        for (int c = 0; c < num_energy_columns; ++c) row[c] = t.at(r, t.column(energy_columns[c]));
        if (row[0] <= latest) log.push_back(row);
      }
      log_on_disk = t.rows() == log.size();
    }
  } else {
    if (file_exists(log_path)) {  // (an energy log without a snapshot to continue from: not ours to replace)
      throw InputError("output folder '" + dir + "' holds " + log_path +
                       " but no snapshot to continue from; move it away or choose another output.directory");
    }
    particles = initial_particles(cfg, single);
    make_directories(dir);
  }
  const int n = particles.size();

  std::printf("%s\n", header_line(precision).c_str());
  if (restarted) {
    std::printf("nbody: %s: restarting from step %lld of %lld (%s)\n", cfg.path.c_str(), first_step, steps,
                snapshot_name(first_step).c_str());
  } else {
    std::printf("nbody: %s: %d particles (%s), %lld steps of %g -> %s/\n", cfg.path.c_str(), n,
                cfg.initial_conditions.kind.c_str(), steps, dt, dir.c_str());
  }
  std::fflush(stdout);

  Kokkos::Timer total_timer;
  engine->load(particles);
  engine->evaluate();
  std::array<double, kfmm::num_stages> stage_seconds{};
  long long evaluations = 0;
  auto add_stats = [&] {
    const auto& s = engine->statistics();
    for (int i = 0; i < kfmm::num_stages; ++i) stage_seconds[i] += s.seconds[i];
    ++evaluations;
  };
  add_stats();
  kfmm::Diagnostics d = finite_diagnostics(*engine, cfg, first_step, restarted ? first_step : -1);
  if (!log.empty() && log.front()[0] == 0) {
    e0 = log.front()[4];
  } else {
    e0 = d.total;  // restart without the step-0 row: measure from here
  }
  const kfmm::Diagnostics d_first = d;
  if (!restarted) {
    log.push_back(energy_row(0, 0.0, d, e0));
    write_snapshot(join_path(dir, snapshot_name(0)), particles, 0, 0.0, dt, single, run);
    write_energy_log(log_path, log);
  }
  std::printf("solver: %s\n", parameters_line(engine->statistics()).c_str());
  std::printf("tree: %s\n", sizes_line(engine->statistics()).c_str());
  std::fflush(stdout);

  catch_interrupts();
  ProgressBar bar("nbody", steps - first_step, !a.has("no-progress"));
  long long step = first_step;
  long long last_snapshot = first_step;
  double max_error = 0;
  for (const auto& row : log) max_error = std::max(max_error, std::fabs(row[5]));
  Kokkos::Timer step_timer;
  bool stopped = false;
  while (step < steps) {
    try {
      checked_step(*engine, dt, cfg, step + 1, last_snapshot);
      add_stats();
      ++step;
      const double time = step * dt;
      const bool last = step == steps;
      stopped = interrupted() && !last;
      const bool snapshot =
          last || stopped || (cfg.output.snapshot_every > 0 && step % cfg.output.snapshot_every == 0);
      if (last || snapshot || step % cfg.output.log_every == 0) {
        d = finite_diagnostics(*engine, cfg, step, last_snapshot);
        log.push_back(energy_row(step, time, d, e0));
        log_on_disk = false;
        max_error = std::max(max_error, std::fabs(log.back()[5]));
      }
      if (snapshot) {
        engine->store(particles);
        write_snapshot(join_path(dir, snapshot_name(step)), particles, step, time, dt, single, run);
        write_energy_log(log_path, log);
        log_on_disk = true;
        last_snapshot = step;
      }
    } catch (...) {
      // A run that fails leaves the rows logged before the failure on disk, for the post-mortem (a
      // restart drops those after its snapshot). The failure's own error is the one reported.
      bar.stop();
      if (!log_on_disk) {
        try {
          write_energy_log(log_path, log);
        } catch (const std::exception& w) {
          std::fprintf(stderr, "kfmm nbody: the energy log of the failed run was not written: %s\n",
                       w.what());
        }
      }
      throw;
    }
    char note[64];
    std::snprintf(note, sizeof note, "dE/E %+.2e", log.back()[5]);
    bar.update(step - first_step, note);
    if (stopped) break;
  }
  const double run_seconds = step_timer.seconds();
  if (!stopped) {
    char note[64];
    std::snprintf(note, sizeof note, "dE/E %+.2e", log.empty() ? 0.0 : log.back()[5]);
    bar.finish(note);
  } else {
    bar.stop();  // (the summary below starts on its own line)
  }
  if (first_step == steps) d = d_first;

  const long long done = step - first_step;
  std::printf("%s: %d particles, steps %lld -> %lld (dt %g, t = %g)\n", stopped ? "interrupted" : "done", n,
              first_step, step, dt, step * dt);
  std::printf("energy: E0 = %.10g, E = %.10g, relative error %+.3e (largest in the log %.3e)\n", e0, d.total,
              e0 != 0 ? (d.total - e0) / std::fabs(e0) : 0.0, max_error);
  std::printf("momentum: |P| = %.3e, |L| = %.6g (initial |L| = %.6g); virial ratio 2K/|W| = %.4f\n",
              std::sqrt(d.momentum[0] * d.momentum[0] + d.momentum[1] * d.momentum[1] +
                        d.momentum[2] * d.momentum[2]),
              std::sqrt(d.angular_momentum[0] * d.angular_momentum[0] +
                        d.angular_momentum[1] * d.angular_momentum[1] +
                        d.angular_momentum[2] * d.angular_momentum[2]),
              std::sqrt(d_first.angular_momentum[0] * d_first.angular_momentum[0] +
                        d_first.angular_momentum[1] * d_first.angular_momentum[1] +
                        d_first.angular_momentum[2] * d_first.angular_momentum[2]),
              d.virial_ratio());
  std::printf("time: %s total, %s per step over %lld steps; per-stage time per evaluation:\n%s",
              format_seconds(total_timer.seconds()).c_str(),
              format_seconds(done > 0 ? run_seconds / done : 0).c_str(), done,
              stage_table(stage_seconds, static_cast<double>(evaluations)).c_str());
  std::printf("output: %s (latest snapshot %s, energy.csv)\n", dir.c_str(),
              snapshot_name(last_snapshot).c_str());
  if (stopped) {
    std::printf("stopped by a signal after step %lld; run the same command again to continue\n", step);
    return 130;
  }
  return 0;
}

}  // namespace kfmm_cli
