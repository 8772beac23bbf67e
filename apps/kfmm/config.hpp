// The YAML run file of `kfmm nbody`: every key, its type and default; unknown keys and wrong types are
// errors that name the key and its line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kfmm/drivers/options.hpp"

namespace kfmm_cli {

/// A `kfmm nbody` run, as read from its YAML file.
struct NBodyConfig {
  std::string path;  ///< the YAML file

  struct InitialConditions {
    std::string kind = "plummer";  ///< plummer | uniform | file
    long long particles = 10000;
    std::uint64_t seed = 1;
    double total_mass = 1.0;
    double scale_radius = 0;    ///< plummer: 0 = Henon units (3 pi / 16)
    double max_radius = 20.0;   ///< plummer: cut, in scale radii
    double radius = 1.0;        ///< uniform: sphere radius
    double virial_ratio = 0.0;  ///< uniform: 2K/|W| of the initial velocities
    std::string file;           ///< file: CSV with x,y,z,m and optionally vx,vy,vz
  } initial_conditions;

  struct Solver {
    std::optional<double> tolerance;
    std::optional<long long> order;
    std::optional<double> theta;
    long long leaf_size = 0;
    double softening = 0.0;
    double G = 1.0;
    double concentration_ratio = kfmm::Options().concentration_ratio;  ///< its default too
    std::string precision = "fp64";
    std::string list_build = "automatic";  ///< automatic | sort | scatter (kfmm::ListBuild)
  } solver;

  struct Integrator {
    double time_step = 0;  ///< required
    long long steps = 0;   ///< required
  } integrator;

  struct Output {
    std::string directory;         ///< default: the YAML file's name without extension + "_run"
    long long snapshot_every = 0;  ///< 0: only the first and the last step
    long long log_every = 1;
    bool restart = true;  ///< continue from the last snapshot in `directory` when there is one
  } output;
};

/// Reads and checks a run file. Throws InputError "FILE:LINE: ..." for YAML syntax errors, unknown
/// keys, wrong types, missing required keys and out-of-range values.
NBodyConfig load_nbody_config(const std::string& path);

/// The documented schema (for `kfmm nbody --help`).
std::string nbody_config_help();

}  // namespace kfmm_cli
