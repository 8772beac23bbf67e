/// \file options.hpp
/// kfmm::Options: how a kfmm::Solver evaluates forces. Either an accuracy (`tolerance`, the default:
/// the solver then chooses the expansion order p and the opening angle theta) or an explicit order and
/// theta, plus the physics (softening, G) and implementation choices (leaf size, accumulation
/// precision, M2L lane, list build, determinism, timing).
#pragma once

#include <cmath>
#include <optional>

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/operators/m2l_csr_options.hpp"  // kfmm::M2LLane
#include "kfmm/tree/list_build.hpp"

namespace kfmm {

/// Precision of the sums that collect many contributions per particle (near field, L2P).
enum class Accumulation {
  working,  ///< in the evaluation type Real (fastest)
  wide      ///< in double whatever Real is (helps float at large N; costs time on GPUs)
};

/// Name of an accumulation mode ("working", "wide").
inline const char* to_string(Accumulation a) {
  return a == Accumulation::wide ? "wide" : "working";
}
/// Configuration of a kfmm::Solver.
///
/// Accuracy is set in one of two ways:
/// - `tolerance` alone (the default, 1e-6): the solver picks the cheapest (order, theta) whose
///   measured relative L2 acceleration error is at most `tolerance` on uniform, Plummer, clustered and
///   disc distributions (see kfmm/drivers/tolerance.hpp for the calibration);
/// - `order` and/or `theta`: when both are set they are used as given and `tolerance` is not used (the
///   softening margin, see below, is then sized by the error the calibration predicts for them); when
///   only one is set, the other is chosen for `tolerance`.
///
/// Physics: a_i = -G sum_{j != i} m_j (x_i - x_j) (r^2 + eps^2)^(-3/2),
///          phi_i = -G sum_{j != i} m_j (r^2 + eps^2)^(-1/2), eps = `softening`.
/// The far field (expansions) is unsoftened; pairs of nodes closer than softening allows for the
/// requested accuracy are sent to the near field (kfmm::softening_min_separation).
struct Options {
  /// Requested relative L2 error of the accelerations (against the softened direct sum).
  double tolerance = 1e-6;
  /// Expansion order p in 0..kfmm::max_order; empty: chosen from `tolerance`.
  std::optional<int> order;
  /// Opening angle theta in (0, 1): node pairs with (r_A + r_B) <= theta * d interact through
  /// expansions (subject to `concentration_ratio`). Empty: chosen from `tolerance`.
  std::optional<double> theta;
  /// The walk's concentration rule (kfmm::concentration_accepts), in [0, 1]: when a node is heavier
  /// (sum |m|) than its partner and its radius is below this fraction of the partner's, the partner
  /// may take at most theta d / 2 of the opening angle. It keeps the tolerance on compact heavy masses
  /// (coincident particles, a black hole) for a few per cent more pairs where dense cores face halo
  /// nodes (docs/tree.md, "Walk"); 0 turns it off (the plain MAC, as other codes use it).
  double concentration_ratio = 0.1;
  /// Maximum number of particles per leaf (>= 1); 0: chosen with the order (kfmm::default_leaf_size:
  /// the calibrated size on host backends; on GPUs, where the near field is cheaper, 80 up to order 10
  /// (in float 88 from 1e6 particles on, 96 from 5e6) and the calibrated size above).
  int leaf_size = 0;
  /// Plummer softening length eps >= 0.
  double softening = 0;
  /// Gravitational constant G (finite; the Solver takes |G| < 1e300 and, in float, within float's
  /// range; use 1 for Laplace/N-body units).
  double G = 1;
  /// Precision of the per-particle sums.
  Accumulation accumulation = Accumulation::working;
  /// M2L implementation (kfmm::M2LLane of the operators).
  M2LLane m2l_lane = M2LLane::automatic;
  /// How the walk builds its interaction lists (kfmm::ListBuild): the same lists either way; `scatter`
  /// holds about half the walk's memory (the default on host backends, where it is also faster),
  /// `sort` is the GPUs' default until scatter has been timed there.
  ListBuild list_build = ListBuild::automatic;
  /// Bitwise reproducible results run after run on one backend (no atomics in reductions).
  bool deterministic = true;
  /// Record per-stage times and particle-pair counts in kfmm::Solver::statistics(): on CUDA from events
  /// on the solver's stream (no fences between stages), on host backends with a fence at every stage
  /// boundary (kfmm::StageClock); the evaluation ends with a fence. Off: only the cheap counts are
  /// recorded (no events, no extra fences).
  bool timing = false;

  /// True when both order and theta are given, so tolerance does not choose them.
  bool explicit_parameters() const { return order.has_value() && theta.has_value(); }

  /// Throws kfmm::Error naming the first invalid field.
  void validate() const {
    if (order) check_order(*order, "Options::order");
    if (theta) {
      require(std::isfinite(*theta) && *theta > 0 && *theta < 1, "Options::theta = ", *theta,
              " is outside (0, 1)");
    }
    require(std::isfinite(tolerance) && tolerance > 0 && tolerance < 1, "Options::tolerance = ", tolerance,
            " must be in (0, 1)");
    require(std::isfinite(concentration_ratio) && concentration_ratio >= 0 && concentration_ratio <= 1,
            "Options::concentration_ratio = ", concentration_ratio, " must lie in [0, 1] (0: off)");
    require(is_valid(list_build), "Options::list_build = ", static_cast<int>(list_build),
            " is not a ListBuild (automatic, sort, scatter)");
    require(leaf_size >= 0, "Options::leaf_size = ", leaf_size, " must be >= 1 (or 0 for automatic)");
    require(std::isfinite(softening) && softening >= 0, "Options::softening = ", softening,
            " must be finite and >= 0");
    require(std::isfinite(G), "Options::G = ", G, " must be finite");
  }
};

}  // namespace kfmm
