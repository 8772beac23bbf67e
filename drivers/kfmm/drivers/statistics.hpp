/// \file statistics.hpp
/// What a kfmm::Solver reports about its last evaluation: the parameters it used, the size of the
/// tree and the interaction lists, and (with Options::timing) the time of every stage.
#pragma once

#include <array>

#include "kfmm/core/stage_clock.hpp"
#include "kfmm/tree/list_build.hpp"

namespace kfmm {

/// Stages of one evaluation, in pipeline order.
enum class Stage : int {
  check,    ///< box and NaN/Inf check on their own (first evaluation, changed scale); else inside `tree`
  tree,     ///< octree build (Morton sort, nodes, centres, radii)
  walk,     ///< dual-tree walk: far and near interaction lists
  gather,   ///< masses into the tree's order, zeroing of outputs
  p2m,      ///< multipoles of the leaves
  m2m,      ///< multipoles up the tree, level by level
  m2l,      ///< multipole-to-local over the far list
  l2l,      ///< locals down the tree, level by level
  l2p,      ///< far field at the particles
  p2p,      ///< near field over the near list
  scatter,  ///< results back into the caller's order
  count_    ///< number of stages (not a stage)
};

/// Number of stages.
inline constexpr int num_stages = static_cast<int>(Stage::count_);

/// Short name of a stage ("tree", "m2l", ...).
inline const char* stage_name(Stage s) {
  constexpr const char* names[num_stages] = {"check", "tree", "walk", "gather", "p2m",    "m2m",
                                             "m2l",   "l2l",  "l2p",  "p2p",    "scatter"};
  const int i = static_cast<int>(s);
  return i >= 0 && i < num_stages ? names[i] : "?";
}

/// Statistics of the last evaluation (evaluate or reevaluate) of a kfmm::Solver.
struct Statistics {
  // Parameters used.
  int order = 0;                   ///< expansion order p
  double theta = 0;                ///< opening angle
  int leaf_size = 0;               ///< maximum particles per leaf
  double min_separation = 0;       ///< smallest particle distance of a far pair (softening margin)
  double concentration_ratio = 0;  ///< the walk's concentration rule (Options::concentration_ratio; 0: off)
  /// How the walk built the lists: ListBuild::sort or ListBuild::scatter (Options::list_build resolved).
  ListBuild list_build = ListBuild::sort;
  /// Smallest distance of a far node pair that keeps the expansions inside the precision's range
  /// (kfmm::expansion_range_separation, in the caller's lengths); closer pairs go to P2P.
  double range_separation = 0;
  /// Power of two the positions were multiplied by internally (1 unless their extent is far from 1).
  double length_scale = 1;
  bool parameters_from_tolerance = false;  ///< true when p and/or theta came from Options::tolerance
  double tolerance = 0;                    ///< the requested tolerance
  double predicted_error = 0;              ///< the calibration's error estimate for (p, theta)

  // Sizes.
  int num_particles = 0;
  int num_nodes = 0;
  int num_leaves = 0;
  int num_levels = 0;
  long long far_pairs = 0;   ///< (target node, source node) M2L pairs
  long long near_pairs = 0;  ///< (target leaf, source leaf) P2P pairs, self pairs included
  /// Particle-particle interactions of the near field (sum over near pairs of n_target * n_source,
  /// self pairs counted as n (n - 1)); -1 unless Options::timing.
  long long p2p_interactions = -1;

  // Times in seconds (all zero unless Options::timing, except total).
  bool timed = false;  ///< per-stage times are valid
  /// How the stage times were taken: device events on CUDA (no fences between stages; each stage's time
  /// is the device time line between its marks, idle gaps included), a fence per stage elsewhere.
  StageClockMethod stage_clock = StageClockMethod::fenced_host_timer;
  std::array<double, num_stages> seconds{};  ///< per stage, indexed by Stage
  /// Wall time of the call on the host. With Options::timing the work is complete; without, the
  /// kernels may still be running when the call returns (no final fence).
  double total_seconds = 0;
  bool tree_rebuilt = true;  ///< false for reevaluate (tree and lists reused)
  /// The tree was built twice: the first build assumed the last evaluation's length scale (box reduced on
  /// the device, no round trip of its own) and the box asked for another, or the inputs were bad.
  bool scale_rebuild = false;
  long long evaluations = 0;  ///< evaluations since the solver was made

  /// Time of one stage in seconds.
  double time(Stage s) const { return seconds[static_cast<int>(s)]; }
  /// Sum of the per-stage times.
  double stage_sum() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
};

}  // namespace kfmm
