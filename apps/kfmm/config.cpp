#include "kfmm/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "kfmm/arguments.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/files.hpp"

namespace kfmm_cli {

namespace {

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  std::string at(const YAML::Node& node) const {
    const YAML::Mark m = node.Mark();
    return m.is_null() ? path_ + ": " : path_ + ":" + std::to_string(m.line + 1) + ": ";
  }
  [[noreturn]] void fail(const YAML::Node& node, const std::string& message) const {
    throw InputError(at(node) + message);
  }

  std::string scalar(const YAML::Node& node, const std::string& key, const char* type) const {
    if (!node.IsScalar()) {
      fail(node, "key '" + key + "' must be " + type + ", got " +
                     (node.IsMap()        ? "a mapping"
                      : node.IsSequence() ? "a list"
                                          : "nothing"));
    }
    return node.Scalar();
  }

  double real(const YAML::Node& node, const std::string& key) const {
    const std::string text = scalar(node, key, "a number");
    double value = 0;
    const NumberProblem problem = parse_number(text, value);
    if (problem == NumberProblem::none) return value;
    if (problem == NumberProblem::rounds_to_zero) {
      fail(node, "key '" + key + "' = '" + text + "' " + to_string(problem));
    }
    fail(node, "key '" + key + "' must be a finite number, got '" + text + "'");
  }

  long long integer(const YAML::Node& node, const std::string& key) const {
    const std::string text = scalar(node, key, "an integer");
    try {
      return parse_integer(text, key);
    } catch (const UsageError&) {
      fail(node, "key '" + key + "' must be an integer, got '" + text + "'");
    }
  }

  std::uint64_t unsigned_integer(const YAML::Node& node, const std::string& key) const {
    const std::string text = scalar(node, key, "an integer");
    try {
      return parse_unsigned(text, key);
    } catch (const UsageError&) {
      fail(node, "key '" + key + "' must be an integer in 0..18446744073709551615, got '" + text + "'");
    }
  }

  bool boolean(const YAML::Node& node, const std::string& key) const {
    std::string text = scalar(node, key, "true or false");
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    if (text == "true" || text == "yes" || text == "on") return true;
    if (text == "false" || text == "no" || text == "off") return false;
    fail(node, "key '" + key + "' must be true or false, got '" + node.Scalar() + "'");
  }

  std::string string(const YAML::Node& node, const std::string& key) const {
    return scalar(node, key, "a string");
  }

  /// Calls handlers[key](value) for each entry of a mapping; unknown and repeated keys are errors.
  void mapping(const YAML::Node& node, const std::string& prefix,
               const std::map<std::string, std::function<void(const YAML::Node&, const std::string&)>>&
                   handlers) const {
    if (node.IsNull()) return;
    if (!node.IsMap()) fail(node, "'" + prefix + "' must be a mapping of keys to values");
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key_node = it->first;
      const std::string key = key_node.IsScalar() ? key_node.Scalar() : "?";
      const std::string full = prefix.empty() ? key : prefix + "." + key;
      auto h = handlers.find(key);
      if (h == handlers.end()) {
        std::string known;
        for (const auto& kv : handlers) known += (known.empty() ? "" : ", ") + kv.first;
        fail(key_node, "unknown key '" + full + "' (known keys" + (prefix.empty() ? "" : " of " + prefix) +
                           ": " + known + ")");
      }
      if (!seen.insert(key).second) fail(key_node, "key '" + full + "' appears twice");
      h->second(it->second, full);
    }
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string default_directory(const std::string& path) {
  std::string name = path;
  const auto slash = name.find_last_of('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  const auto dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return name + "_run";
}

}  // namespace

NBodyConfig load_nbody_config(const std::string& path) {
  NBodyConfig c;
  c.path = path;
  Reader r(path);
  YAML::Node root;
  try {
    // (LoadFile would read the first document and drop the rest: a second one after '---' is refused)
    const std::vector<YAML::Node> documents = YAML::LoadAllFromFile(path);
    if (documents.size() > 1) {
      r.fail(documents[1], "the file holds " + std::to_string(documents.size()) +
                               " YAML documents (separated by '---'); a run file is one document");
    }
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::BadFile&) {
    throw InputError("cannot open configuration '" + path + "'");
  } catch (const YAML::ParserException& e) {
    throw InputError(path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  if (root.IsNull())
    throw InputError(path + ": the file is empty (needs at least integrator.time_step and integrator.steps)");
  if (!root.IsMap())
    r.fail(root,
           "the file must be a mapping with the sections initial_conditions, solver, integrator, output");

  // Where each key was found, for range errors after parsing.
  std::map<std::string, YAML::Node> where;
  auto keep = [&](const YAML::Node& n, const std::string& key) { where[key] = n; };
  auto check = [&](bool ok, const std::string& key, const std::string& message) {
    if (ok) return;
    auto it = where.find(key);
    if (it != where.end()) r.fail(it->second, "'" + key + "' " + message);
    throw InputError(path + ": '" + key + "' " + message);
  };

  auto& ic = c.initial_conditions;
  auto& s = c.solver;
  auto& in = c.integrator;
  auto& out = c.output;
  r.mapping(root, "",
            {{"initial_conditions",
              [&](const YAML::Node& n, const std::string& p) {
                r.mapping(n, p,
                          {{"kind",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.kind = r.string(v, k);
                            }},
                           {"particles",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.particles = r.integer(v, k);
                            }},
                           {"seed",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.seed = r.unsigned_integer(v, k);
                            }},
                           {"total_mass",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.total_mass = r.real(v, k);
                            }},
                           {"scale_radius",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.scale_radius = r.real(v, k);
                            }},
                           {"max_radius",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.max_radius = r.real(v, k);
                            }},
                           {"radius",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.radius = r.real(v, k);
                            }},
                           {"virial_ratio",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.virial_ratio = r.real(v, k);
                            }},
                           {"file", [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              ic.file = r.string(v, k);
                            }}});
              }},
             {"solver",
              [&](const YAML::Node& n, const std::string& p) {
                r.mapping(n, p,
                          {{"tolerance",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.tolerance = r.real(v, k);
                            }},
                           {"order",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.order = r.integer(v, k);
                            }},
                           {"theta",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.theta = r.real(v, k);
                            }},
                           {"leaf_size",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.leaf_size = r.integer(v, k);
                            }},
                           {"softening",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.softening = r.real(v, k);
                            }},
                           {"G",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.G = r.real(v, k);
                            }},
                           {"concentration_ratio",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.concentration_ratio = r.real(v, k);
                            }},
                           {"precision",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.precision = r.string(v, k);
                            }},
                           {"list_build", [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              s.list_build = r.string(v, k);
                            }}});
              }},
             {"integrator",
              [&](const YAML::Node& n, const std::string& p) {
                r.mapping(n, p,
                          {{"time_step",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              in.time_step = r.real(v, k);
                            }},
                           {"steps", [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              in.steps = r.integer(v, k);
                            }}});
              }},
             {"output", [&](const YAML::Node& n, const std::string& p) {
                r.mapping(n, p,
                          {{"directory",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              out.directory = r.string(v, k);
                            }},
                           {"snapshot_every",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              out.snapshot_every = r.integer(v, k);
                            }},
                           {"log_every",
                            [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              out.log_every = r.integer(v, k);
                            }},
                           {"restart", [&](const YAML::Node& v, const std::string& k) {
                              keep(v, k);
                              out.restart = r.boolean(v, k);
                            }}});
              }}});

  // Required keys and ranges.
  check(where.count("integrator.time_step") > 0, "integrator.time_step", "is required");
  check(where.count("integrator.steps") > 0, "integrator.steps", "is required");
  check(in.time_step > 0, "integrator.time_step", "must be > 0");
  check(in.steps >= 0 && in.steps <= 2147483647LL, "integrator.steps", "must be in 0..2147483647");
  check(ic.kind == "plummer" || ic.kind == "uniform" || ic.kind == "file", "initial_conditions.kind",
        "must be one of plummer, uniform, file (got '" + ic.kind + "')");
  if (ic.kind == "file") {
    check(!ic.file.empty(), "initial_conditions.file", "is required when initial_conditions.kind is file");
    for (const char* k : {"initial_conditions.particles", "initial_conditions.seed"}) {
      check(where.count(k) == 0, k, "has no meaning for kind: file (the file sets the particles)");
    }
  } else {
    check(ic.file.empty(), "initial_conditions.file", "is only used with kind: file");
  }
  // A key of another kind would be silently ignored (say radius: with kind: plummer): refuse it.
  const std::vector<std::pair<std::string, std::vector<std::string>>> kinds_of_key = {
      {"total_mass", {"plummer", "uniform"}},
      {"scale_radius", {"plummer"}},
      {"max_radius", {"plummer"}},
      {"radius", {"uniform"}},
      {"virial_ratio", {"uniform"}}};
  for (const auto& [key, kinds] : kinds_of_key) {
    const std::string full = "initial_conditions." + key;
    if (where.count(full) == 0 || std::find(kinds.begin(), kinds.end(), ic.kind) != kinds.end()) continue;
    std::string list;
    for (const auto& k : kinds) list += (list.empty() ? "" : ", ") + k;
    check(false, full, "has no meaning for kind: " + ic.kind + " (only for " + list + ")");
  }
  check(ic.particles >= 0 && ic.particles <= 2147483646LL, "initial_conditions.particles",
        "must be in 0..2147483646 (the solver's int index range)");
  check(ic.total_mass > 0, "initial_conditions.total_mass", "must be > 0");
  check(ic.scale_radius >= 0, "initial_conditions.scale_radius", "must be > 0 (or 0 for Henon units)");
  check(ic.max_radius > 0, "initial_conditions.max_radius", "must be > 0");
  check(ic.radius > 0, "initial_conditions.radius", "must be > 0");
  check(ic.virial_ratio >= 0, "initial_conditions.virial_ratio", "must be >= 0");
  check(ic.virial_ratio == 0 || s.G > 0, "initial_conditions.virial_ratio",
        "needs solver.G > 0 (a bound sphere; use 0 for a cold start)");
  check(ic.kind != "plummer" || s.G >= 0, "solver.G",
        "must be >= 0 for initial_conditions.kind: plummer (its velocities are drawn for a bound sphere)");
  if (s.tolerance) check(*s.tolerance > 0 && *s.tolerance < 1, "solver.tolerance", "must be in (0, 1)");
  if (s.order) {
    check(*s.order >= 0 && *s.order <= kfmm::max_order, "solver.order",
          "is out of range: kfmm supports orders 0.." + std::to_string(kfmm::max_order));
  }
  if (s.theta) check(*s.theta > 0 && *s.theta < 1, "solver.theta", "must be in (0, 1)");
  check(!(s.tolerance && s.order && s.theta), "solver.tolerance",
        "cannot be combined with both solver.order and solver.theta (give order and theta, or tolerance)");
  check(s.leaf_size >= 0 && s.leaf_size <= 1000000, "solver.leaf_size",
        "must be in 1..1000000 (or 0 for automatic)");
  check(s.softening >= 0, "solver.softening", "must be >= 0");
  check(s.concentration_ratio >= 0 && s.concentration_ratio <= 1, "solver.concentration_ratio",
        "must be in [0, 1] (0: off)");
  check(s.precision == "fp32" || s.precision == "fp64", "solver.precision",
        "must be fp32 or fp64 (got '" + s.precision + "')");
  // In fp32 the solver works with float G and softening: beyond float's range they would be infinite.
  check(s.precision != "fp32" || fits_fp32(s.G), "solver.G", "is beyond the range of fp32 (3e38); use fp64");
  check(s.precision != "fp32" || fits_fp32(s.softening), "solver.softening",
        "is beyond the range of fp32 (3e38); use fp64");
  kfmm::ListBuild build{};
  check(kfmm::list_build_from_string(s.list_build, build), "solver.list_build",
        "must be automatic, sort or scatter (got '" + s.list_build + "')");
  check(out.snapshot_every >= 0, "output.snapshot_every", "must be >= 0 (0: only the first and last step)");
  check(out.log_every >= 1, "output.log_every", "must be >= 1");
  check(where.count("output.directory") == 0 || !out.directory.empty(), "output.directory",
        "is empty (leave the key out for the default, " + default_directory(path) + ")");
  if (out.directory.empty()) out.directory = default_directory(path);
  return c;
}

std::string nbody_config_help() {
  return R"(run file (YAML; every key optional unless marked required):
  initial_conditions:
    kind: plummer          # plummer (virial equilibrium) | uniform (sphere) | file
    particles: 10000       # plummer, uniform
    seed: 1                # plummer, uniform
    total_mass: 1.0
    scale_radius: 0        # plummer; 0 = Henon units (3 pi/16: G = M = 1, E = -1/4)
    max_radius: 20         # plummer: radii beyond this many scale radii are redrawn
    radius: 1.0            # uniform
    virial_ratio: 0.0      # uniform: 2K/|W| of isotropic Gaussian velocities (0 = cold)
    file: ics.csv          # file: CSV with header x,y,z,m[,vx,vy,vz]
  solver:
    tolerance: 1.0e-6      # relative L2 error of the accelerations; or order + theta
    order: 8               # 0..16
    theta: 0.5             # (0, 1)
    leaf_size: 0           # 0 = chosen with the order
    softening: 0.0         # Plummer softening length
    G: 1.0
    concentration_ratio: 0.1  # the walk's rule for compact heavy masses, [0, 1]; 0 = off
    precision: fp64        # fp32 | fp64
    list_build: automatic  # automatic | sort | scatter: how the walk builds its lists (the same lists;
                           # scatter: about half the walk's memory, the CPU default; sort: the GPU default)
  integrator:              # leapfrog kick-drift-kick, fixed step
    time_step: 0.01        # required
    steps: 1000            # required
  output:
    directory: NAME_run    # default: the run file's name + _run (relative to the current folder)
    snapshot_every: 100    # 0 = first and last step only; files snapshot_STEP.csv (x,y,z,m,vx,vy,vz)
    log_every: 1           # energy.csv: step,time,kinetic,potential,total,energy_error,px,py,pz,lx,ly,lz
    restart: true          # continue from the last snapshot in directory if there is one)";
}

}  // namespace kfmm_cli
