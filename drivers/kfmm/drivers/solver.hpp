/// \file solver.hpp
/// kfmm::Solver: the whole fast multipole evaluation of softened gravity (or Laplace) on Kokkos.
///
/// \code
///   kfmm::Options options;            // tolerance 1e-6 by default
///   options.softening = 1e-3;
///   kfmm::Solver<Kokkos::DefaultExecutionSpace, double> solver(options);
///   solver.evaluate(positions, masses, accelerations, potentials);   // Views on the device
///   // solver.chosen_order(), solver.chosen_theta(), solver.statistics()
/// \endcode
///
/// Pipeline of evaluate(): octree of the positions -> dual-tree walk (theta, softening margin) into far
/// and near lists -> P2M on the leaves -> M2M level by level up -> M2L over the far list -> L2L level
/// by level down -> P2P over the near list + L2P on the leaves -> results into the caller's order.
/// On CUDA two streams of the solver's own share the work (core/side_instance.hpp): P2M and M2M run
/// beside the walk, and the P2P beside M2L and L2L, at a lower priority than the critical path, so that
/// the walk's rounds and the level-by-level chains, which leave most of the GPU idle, overlap bulk work.
/// Events order them after the caller's earlier work on its instance (`space()`) and the caller's later
/// work after them; the host never waits for them.
/// reevaluate() repeats the pipeline from P2M for new masses on the same positions, keeping tree and
/// lists (the expansion centres stay those of the masses given to evaluate(): any centre whose radius
/// encloses a node's particles is valid, so the lists remain correct for any new masses).
///
/// The solver never prints, never initialises Kokkos and owns no global state; its work buffers are
/// kept between evaluations and only grow.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/particle_types.hpp"
#include "kfmm/core/side_instance.hpp"
#include "kfmm/core/stage_clock.hpp"
#include "kfmm/core/zero_fill.hpp"
#include "kfmm/drivers/options.hpp"
#include "kfmm/drivers/statistics.hpp"
#include "kfmm/drivers/tolerance.hpp"
#include "kfmm/operators/l2p.hpp"
#include "kfmm/operators/m2l.hpp"
#include "kfmm/operators/p2m.hpp"
#include "kfmm/operators/p2p.hpp"
#include "kfmm/operators/translation_passes.hpp"
#include "kfmm/tree/dual_tree_walk.hpp"
#include "kfmm/tree/octree.hpp"

namespace kfmm {

namespace detail {

// The solver's small kernels are functors, not lambdas: nvcc's host-device lambdas in headers that
// several translation units instantiate crash host backends of CUDA builds (tree/bounding_box.hpp).

/// min over i of the first particle whose position (when given) or mass is NaN or infinite.
template <class PositionsView, class MassesView>
struct FirstNonFinite {
  using Real = typename MassesView::non_const_value_type;
  PositionsView positions;
  MassesView masses;
  bool with_positions;
  KOKKOS_INLINE_FUNCTION void operator()(const int i, int& first) const {
    // x - x is 0 for finite x and NaN for NaN and +-Inf.
    bool ok = masses(i) - masses(i) == Real(0);
    if (with_positions) {
      for (int d = 0; d < 3; ++d) ok = ok && positions(i, d) - positions(i, d) == Real(0);
    }
    if (!ok && i < first) first = i;
  }
};

/// Index of the first particle whose position or mass is NaN or infinite, or n when all are finite.
/// `positions` may be empty (masses only).
template <class ExecutionSpace, class PositionsView, class MassesView>
int first_non_finite(const ExecutionSpace& space, const PositionsView& positions, const MassesView& masses) {
  const int n = static_cast<int>(masses.extent(0));
  int first_bad = n;
  Kokkos::parallel_reduce(
      "kfmm::Solver::check_finite", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      FirstNonFinite<PositionsView, MassesView>{positions, masses, positions.extent(0) > 0},
      Kokkos::Min<int>(first_bad));
  return first_bad;
}

template <class PermView, class InView, class OutView>
struct GatherByPermutation {
  PermView perm;
  InView in;
  OutView out;
  KOKKOS_INLINE_FUNCTION void operator()(const int s) const { out(s) = in(perm(s)); }
};

/// out(s) = in(perm(s)) (masses into the tree's order).
template <class ExecutionSpace, class PermView, class InView, class OutView>
void gather_by_permutation(const ExecutionSpace& space, const PermView& perm, const InView& in,
                           const OutView& out, int n) {
  Kokkos::parallel_for("kfmm::Solver::gather_masses", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
                       GatherByPermutation<PermView, InView, OutView>{perm, in, out});
}

/// inverse(perm(s)) = s: the sorted slot of every caller index.
template <class PermView, class InverseView>
struct InvertPermutation {
  PermView perm;
  InverseView inverse;
  KOKKOS_INLINE_FUNCTION void operator()(const int s) const { inverse(perm(s)) = s; }
};

template <class ExecutionSpace, class PermView, class InverseView>
void invert_permutation(const ExecutionSpace& space, const PermView& perm, const InverseView& inverse,
                        int n) {
  Kokkos::parallel_for("kfmm::Solver::invert_permutation", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
                       InvertPermutation<PermView, InverseView>{perm, inverse});
}

template <class InverseView, class AccIn, class PotIn, class AccOut, class PotOut>
struct GatherOutputs {
  using Real = typename AccOut::non_const_value_type;
  InverseView inverse;
  AccIn acc;
  PotIn pot;
  AccOut accelerations;
  PotOut potentials;
  bool with_potentials, scaled;
  Real sa, sp;
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    const int s = inverse(i);
    if (scaled) {
      for (int a = 0; a < 3; ++a) accelerations(i, a) = acc(s, a) * sa;
      if (with_potentials) potentials(i) = pot(s) * sp;
    } else {
      for (int a = 0; a < 3; ++a) accelerations(i, a) = acc(s, a);
      if (with_potentials) potentials(i) = pot(s);
    }
  }
};

/// accelerations(i) = acc(inverse(i)), potentials(i) = pot(inverse(i)) (potentials skipped when empty),
/// i.e. the sorted results back in the caller's order. A gather in caller order: the writes are
/// coalesced and the random accesses are reads (the scatter by the permutation, random writes, took
/// 2.33 ms at 1e7 on the H200 where the tree build's gather of the positions takes a fraction of it).
/// (Both multiplied by acc_scale and pot_scale, the undoing of a length rescaling; exact for powers of 2.)
template <class ExecutionSpace, class InverseView, class AccIn, class PotIn, class AccOut, class PotOut>
void gather_outputs(const ExecutionSpace& space, const InverseView& inverse, const AccIn& acc,
                    const PotIn& pot, const AccOut& accelerations, const PotOut& potentials, int n,
                    double acc_scale, double pot_scale) {
  using Real = typename AccOut::non_const_value_type;
  Kokkos::parallel_for(
      "kfmm::Solver::gather_outputs", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      GatherOutputs<InverseView, AccIn, PotIn, AccOut, PotOut>{
          inverse, acc, pot, accelerations, potentials, potentials.extent(0) > 0,
          acc_scale != 1.0 || pot_scale != 1.0, static_cast<Real>(acc_scale), static_cast<Real>(pot_scale)});
}

template <class Targets, class Offsets, class Sources, class RangesView>
struct CountP2P {
  struct PerRow {};    ///< one work item per near-list row (host backends)
  struct PerChunk {};  ///< one work item per `chunk` consecutive leaf pairs (GPUs)
  static constexpr int chunk = 16;
  Targets targets;
  Offsets offsets;
  Sources sources;
  RangesView ranges;
  KOKKOS_INLINE_FUNCTION long long pairs(const int t, const int src) const {
    const long long nt = ranges(t, 1) - ranges(t, 0);
    return src == t ? nt * (nt - 1) : nt * (ranges(src, 1) - ranges(src, 0));
  }
  KOKKOS_INLINE_FUNCTION void operator()(PerRow, const int r, long long& sum) const {
    for (int k = offsets(r); k < offsets(r + 1); ++k) sum += pairs(targets(r), sources(k));
  }
  /// Entries [chunk c, chunk (c + 1)): the first one's row by bisection, then forward along the rows.
  KOKKOS_INLINE_FUNCTION void operator()(PerChunk, const int c, long long& sum) const {
    const int rows = static_cast<int>(targets.extent(0));
    const int end = offsets(rows), first = c * chunk, last = first + chunk < end ? first + chunk : end;
    if (first >= end) return;  // (the list's buffer may be longer than its entries)
    int lo = 0, hi = rows;     // the row of entry `first`: the last r with offsets(r) <= first
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (offsets(mid) <= first ? lo : hi) = mid;
    }
    for (int k = first, r = lo; k < last; ++k) {
      while (offsets(r + 1) <= k) ++r;  // (skips empty rows)
      sum += pairs(targets(r), sources(k));
    }
  }
};

/// Particle-particle interactions of a near list (self pairs n (n - 1)). GPUs: a work item per 16
/// consecutive leaf pairs, whatever the rows' lengths (one thread per row took 1.84 ms for the ~138
/// source leaves per row of fp64 1e6 at p 10, 0.47, 128 on the H200, a warp per row 0.42 ms and lost on
/// float's short rows: docs/benchmarks.md, twenty-fourth session). `per_chunk` picks the GPU form (the
/// tests run both on every backend).
template <class ExecutionSpace, class List, class RangesView>
long long count_p2p_interactions(const ExecutionSpace& space, const List& near, const RangesView& ranges,
                                 const bool per_chunk = !is_host_execution_space<ExecutionSpace>) {
  long long total = 0;
  using Count = CountP2P<decltype(near.targets), decltype(near.offsets), decltype(near.sources), RangesView>;
  if (near.num_rows() == 0) return 0;
  const Count count{near.targets, near.offsets, near.sources, ranges};
  if (per_chunk) {
    const int chunks = static_cast<int>((near.sources.extent(0) + Count::chunk - 1) / Count::chunk);
    Kokkos::parallel_reduce("kfmm::Solver::count_p2p",
                            Kokkos::RangePolicy<ExecutionSpace, typename Count::PerChunk>(space, 0, chunks),
                            count, total);
  } else {
    Kokkos::parallel_reduce(
        "kfmm::Solver::count_p2p",
        Kokkos::RangePolicy<ExecutionSpace, typename Count::PerRow>(space, 0, near.num_rows()), count, total);
  }
  return total;
}

}  // namespace detail

/// Fast multipole solver for softened gravity on `ExecutionSpace` in precision `Real` (float or double).
/// Not thread-safe: one solver per host thread (or per execution space instance).
template <class ExecutionSpace = Kokkos::DefaultExecutionSpace, class Real = double>
class Solver {
  static_assert(std::is_same_v<Real, float> || std::is_same_v<Real, double>,
                "kfmm::Solver: Real is float or double");

 public:
  using execution_space = ExecutionSpace;
  using memory_space = typename ExecutionSpace::memory_space;
  using real_type = Real;
  /// Input positions (n, 3) and masses (n): any non-const View of the same type converts.
  using const_positions_type = Kokkos::View<const Real* [3], memory_space>;
  using const_masses_type = Kokkos::View<const Real*, memory_space>;
  /// Outputs: accelerations (n, 3), potentials (n); an empty potentials View skips the potentials.
  using accelerations_type = Kokkos::View<Real* [3], memory_space>;
  using potentials_type = Kokkos::View<Real*, memory_space>;

  /// Validates `options` and chooses the order and theta (throws kfmm::Error when the options are
  /// invalid or the tolerance is below the precision floor of Real). Allocates nothing yet.
  explicit Solver(const Options& options = Options(), const ExecutionSpace& space = ExecutionSpace())
      : space_(space) {
    set_options(options);
  }

  /// Replaces the options (and so the chosen parameters); the next evaluation rebuilds everything.
  void set_options(const Options& options) {
    options.validate();
    // (a float G beyond float's range would be infinite in the kernels: every sum inf or NaN)
    require_finite_constant<Real>(options.G, "Options::G");
    const double floor = precision_floor<Real>();
    if (!options.explicit_parameters()) {
      require(options.tolerance >= floor, "Options::tolerance = ", options.tolerance,
              " is below the precision floor ", floor, " of ", sizeof(Real) == 4 ? "float" : "double",
              sizeof(Real) == 4 ? " (use double)" : "");
    }
    const ParameterChoice choice =
        choose_parameters<ExecutionSpace, Real>(options.tolerance, options.order, options.theta, floor,
                                                highest_automatic_order<Real, ExecutionSpace>());
    options_ = options;
    order_ = choice.order;
    theta_ = choice.theta;
    // The leaf size balances near and far work on this backend (default_leaf_size).
    leaf_size_ = options.leaf_size > 0 ? options.leaf_size : choice.leaf_size;
    predicted_error_ = choice.predicted_error;
    // Explicit (p, theta): keep the softening error below the truncation error the calibration predicts
    // for them; tolerance mode: below the requested tolerance.
    const double soft_tol =
        options.explicit_parameters() ? std::max(choice.predicted_error, floor) : options.tolerance;
    min_separation_ = softening_min_separation(options.softening, soft_tol);
    has_tree_ = false;
  }

  const Options& options() const { return options_; }
  /// Expansion order p in use.
  int chosen_order() const { return order_; }
  /// Opening angle theta in use.
  double chosen_theta() const { return theta_; }
  /// Leaf size in use: Options::leaf_size, or default_leaf_size for the chosen order and the last
  /// evaluation's N (before the first evaluation: for an unknown N).
  int chosen_leaf_size() const { return leaf_size_; }
  /// Smallest particle distance of a far (expansion) pair, from the softening and the tolerance.
  double min_separation() const { return min_separation_; }
  /// Calibrated worst-case relative L2 acceleration error for the chosen (p, theta).
  double predicted_error() const { return predicted_error_; }
  /// Statistics of the last evaluation.
  const Statistics& statistics() const { return stats_; }
  const ExecutionSpace& space() const { return space_; }

  /// Accelerations and potentials of every particle from all others, in the caller's order:
  ///   a_i = -G sum_{j != i} m_j (x_i - x_j) (r^2 + eps^2)^(-3/2),
  ///   phi_i = -G sum_{j != i} m_j (r^2 + eps^2)^(-1/2).
  /// `positions` (n, 3) and `masses` (n) are read; `accelerations` (n, 3) and `potentials` (n, or
  /// empty to skip) are overwritten. All Views live in ExecutionSpace::memory_space. Builds the tree
  /// and the interaction lists, kept for reevaluate(). Throws kfmm::Error for mismatched sizes and
  /// NaN/Inf inputs (naming the first such particle).
  void evaluate(const const_positions_type& positions, const const_masses_type& masses,
                const accelerations_type& accelerations, const potentials_type& potentials) {
    Kokkos::Timer total;
    check_sizes(positions.extent(0), masses.extent(0), accelerations, potentials);
    begin_stats(static_cast<int>(positions.extent(0)), true);
    Fork fork(*this);
    Clock clock(*this);
    const int n = static_cast<int>(positions.extent(0));
    has_tree_ = false;
    // The default leaf size may depend on N (on GPUs in float: default_leaf_size).
    if (options_.leaf_size == 0) leaf_size_ = default_leaf_size<ExecutionSpace, Real>(order_, n);
    if (n == 0) {
      tree_ = Octree_();
      finish_stats(total);
      return;
    }
    // Lengths are rescaled by a power of two (exact) when the extent is far from 1, so the solid
    // harmonics (r^n and r^-(n+1) up to n = 2p + 1) neither overflow nor underflow in any unit system.
    // After the first evaluation the build assumes the last evaluation's scale and reduces the box on
    // the device (its one host round trip brings the box back with the level sizes); a build whose box
    // asks for another scale, or that failed (NaN or infinite inputs), is redone the checked way.
    bool built = false;
    double abs_mass = 0;  // sum of |m|: the expansions' range (expansion_range_separation)
    if (scale_known_) {
      try {
        build_octree(work_, positions, masses, leaf_size_, tree_, tree_workspace_, nullptr, scale_);
        built = length_scale(tree_.box) == scale_;
        abs_mass = tree_.abs_mass;
      } catch (const Error&) {
        built = false;  // (reported below, by the checked path, with the first bad particle named)
      }
      stats_.scale_rebuild = !built;
    }
    if (!built) {
      // Bounding box and NaN/Inf count in one pass (the tree's box kernel) and a host round trip; the
      // first bad particle is looked up only when there is one.
      const detail::BoxReduction box = detail::reduce_box(work_, positions, masses, tree_workspace_.box);
      if (box.non_finite > 0) report_non_finite(masses, detail::first_non_finite(work_, positions, masses));
      scale_ = length_scale(detail::scaled_box(box, 1.0));
      abs_mass = box.abs_mass;
      clock.stop(Stage::check);  // (with the time of a speculative build that was not kept)
      // The box of the scaled positions (a power of two: exact), already checked: the build skips its
      // own reduction, and scales the positions as it sorts them (no scaled copy of the caller's).
      const BoundingBox tree_box = detail::scaled_box(box, scale_);
      build_octree(work_, positions, masses, leaf_size_, tree_, tree_workspace_, &tree_box, scale_);
      scale_known_ = true;
    }
    stats_.length_scale = scale_;
    detail::resize_exact(inverse_permutation_, n, "kfmm::Solver::inverse_permutation");
    detail::invert_permutation(work_, tree_.permutation, inverse_permutation_, n);
    clock.stop(Stage::tree);
    // P2M and M2M of every level (the walk, which tells the shallowest far pair, runs beside them).
    upward_pass(tree_.masses, 0, clock);
    walk_lists(abs_mass);
    clock.stop(Stage::walk);
    has_tree_ = true;
    far_and_near(tree_.masses, accelerations, potentials, clock);
    finish_stats(total);
  }

  /// Same as evaluate() for new masses on the positions of the last evaluate(), reusing the tree and
  /// the interaction lists (the expansion centres stay those of the first masses). Throws kfmm::Error
  /// when there was no evaluate() or the number of particles differs.
  void reevaluate(const const_masses_type& masses, const accelerations_type& accelerations,
                  const potentials_type& potentials) {
    Kokkos::Timer total;
    require(has_tree_ || (evaluations_ > 0 && stats_.num_particles == 0),
            "Solver::reevaluate: call evaluate() first (no tree to reuse)");
    const int n = tree_.num_particles;
    check_sizes(static_cast<std::size_t>(n), masses.extent(0), accelerations, potentials);
    begin_stats(n, false);
    Fork fork(*this);
    Clock clock(*this);
    if (n == 0) {
      finish_stats(total);
      return;
    }
    // Non-finite masses and sum |m| in one pass and round trip.
    const detail::BoxReduction r =
        detail::reduce_box(work_, const_positions_type(), masses, tree_workspace_.box);
    if (r.non_finite > 0)
      report_non_finite(masses, detail::first_non_finite(work_, const_positions_type(), masses));
    stats_.length_scale = scale_;
    // Larger masses than the lists were made for: node pairs they would push out of Real's range go to
    // the near field (a new walk on the same tree).
    if (walk_separation(r.abs_mass) > walk_separation(walk_abs_mass_)) walk_lists(r.abs_mass);
    clock.stop(Stage::check);
    if (static_cast<int>(masses_sorted_.extent(0)) != n) {
      masses_sorted_ = Kokkos::View<Real*, memory_space>(
          Kokkos::view_alloc(work_, Kokkos::WithoutInitializing, "kfmm::Solver::masses_sorted"), n);
    }
    detail::gather_by_permutation(work_, tree_.permutation, masses, masses_sorted_, n);
    clock.stop(Stage::gather);
    upward_pass(masses_sorted_, lists_.top_far_level >= 0 ? lists_.top_far_level : tree_.num_levels, clock);
    far_and_near(masses_sorted_, accelerations, potentials, clock);
    finish_stats(total);
  }

 private:
  using Octree_ = Octree<ExecutionSpace, Real>;
  using Lists_ = InteractionLists<memory_space>;

  /// Marks the end of each stage on the solver's StageClock when Options::timing is on (events on CUDA,
  /// fences elsewhere; finish_stats reads the times), else does nothing.
  /// Stages of the side instance are marked on the clock's lane 1 (side_stop); a lane's wait for the
  /// other is no stage (skip).
  struct Clock {
    Solver& solver;
    bool side_started = false;
    explicit Clock(Solver& s) : solver(s) {
      if (solver.options_.timing) solver.stage_clock_.start(solver.work_);
    }
    void stop(Stage stage) {
      if (solver.options_.timing) solver.stage_clock_.mark(static_cast<int>(stage));
    }
    void side_stop(Stage stage) {
      if (solver.options_.timing) solver.stage_clock_.mark(static_cast<int>(stage), 1);
    }
    void skip(int lane) {
      if (!solver.options_.timing) return;
      if (lane == 1 && !side_started) {
        solver.stage_clock_.start_lane(1, solver.side());
        side_started = true;
      } else {
        solver.stage_clock_.mark(StageClock<ExecutionSpace>::not_timed, lane);
      }
    }
  };

  /// The instance of the work that may overlap the caller's (the caller's own instance except on CUDA).
  ExecutionSpace side() { return side_instance_.side(space_); }
  /// side(), its work submitted from now on ordered after the main work submitted so far.
  ExecutionSpace side_after_main(Clock& clock) {
    side_instance_.side_waits_for_main();
    clock.skip(1);
    return side();
  }
  /// Expansion options for the solver's own tree and lists, consistent by construction: no per-call device
  /// validation (each would cost a reduction and a host round trip, two per level for M2M and L2L).
  static ExpansionOptions trusted_options() {
    ExpansionOptions trusted;
    trusted.validate = false;
    return trusted;
  }

  /// The evaluation's instances for its duration: its main work (on work_) waits for the caller's earlier
  /// work, and the caller's later work waits for all of the evaluation's, also when it throws.
  struct Fork {
    Solver& solver;
    explicit Fork(Solver& s) : solver(s) {
      solver.work_ = solver.side_instance_.main(solver.space_);
      solver.side_instance_.main_waits_for_caller(solver.space_);
    }
    Fork(const Fork&) = delete;
    Fork& operator=(const Fork&) = delete;
    ~Fork() {
      try {
        solver.side_instance_.main_waits_for_side();
        solver.side_instance_.caller_waits_for_main(solver.space_);
      } catch (...) {  // (no throw from a destructor: a failing CUDA call shows at the caller's next one)
      }
    }
  };

  void check_sizes(std::size_t n, std::size_t n_masses, const accelerations_type& accelerations,
                   const potentials_type& potentials) const {
    require(n <= static_cast<std::size_t>(2147483646), "Solver: ", n,
            " particles exceed the int index range");
    require(n_masses == n, "Solver: masses has ", n_masses, " entries, positions ", n);
    require(accelerations.extent(0) == n, "Solver: accelerations has ", accelerations.extent(0),
            " rows, expected ", n);
    require(potentials.extent(0) == n || potentials.extent(0) == 0, "Solver: potentials has ",
            potentials.extent(0), " entries, expected ", n, " (or an empty View to skip them)");
  }

  void begin_stats(int n, bool rebuild) {
    const long long evaluations = stats_.evaluations;
    if (rebuild) {
      stats_ = Statistics();
    } else {
      stats_.seconds = {};
      stats_.p2p_interactions = -1;
    }
    stats_.evaluations = evaluations;
    stats_.order = order_;
    stats_.theta = theta_;
    stats_.leaf_size = leaf_size_;
    stats_.min_separation = min_separation_;
    stats_.concentration_ratio = options_.concentration_ratio;
    stats_.parameters_from_tolerance = !options_.explicit_parameters();
    stats_.tolerance = options_.tolerance;
    stats_.predicted_error = predicted_error_;
    stats_.num_particles = n;
    stats_.tree_rebuilt = rebuild;
    stats_.timed = options_.timing;
    stats_.stage_clock = StageClock<ExecutionSpace>::method;
  }

  void finish_stats(const Kokkos::Timer& total) {
    if (options_.timing) {
      stage_clock_.finish(stats_.seconds);
      work_.fence();
    }
    stats_.total_seconds = total.seconds();
    ++stats_.evaluations;
    ++evaluations_;
  }

  /// The interaction lists of the current tree for masses summing to `abs_mass` in |m|, and the level
  /// statistics.
  void walk_lists(double abs_mass) {
    WalkOptions walk;
    walk.theta = theta_;
    walk.min_separation = walk_separation(abs_mass);
    walk.concentration_ratio = options_.concentration_ratio;
    walk.list_build = options_.list_build;
    walk_abs_mass_ = abs_mass;
    stats_.range_separation = expansion_range_separation<Real>(order_, abs_mass) / scale_;
    lists_ = Lists_();  // (the last lists view the walk's buffers: let a buffer the walk grows be freed)
    lists_ = dual_tree_walk(work_, tree_, walk, walk_workspace_);
    prepare_levels();
  }

  /// The walk's smallest far-pair gap in scaled lengths: the softening margin's, or the distance below
  /// which order-p expansions of masses summing to `abs_mass` in |m| would leave Real's range.
  double walk_separation(double abs_mass) const {
    return std::max(min_separation_ * scale_, expansion_range_separation<Real>(order_, abs_mass));
  }

  /// The power of two that brings the largest extent of `box` within [2^-4, 2^4] (1 when it already is,
  /// and for a single point).
  static double length_scale(const BoundingBox& box) {
    // Half extents: finite coordinates near +-DBL_MAX have an extent that overflows to inf.
    double half = 0;
    for (int a = 0; a < 3; ++a) half = std::max(half, 0.5 * box.hi[a] - 0.5 * box.lo[a]);
    int e = 0;
    if (half > 0) std::frexp(half, &e);
    e += 1;  // (the exponent of the full extent)
    return (half > 0 && (e > 4 || e < -3)) ? std::ldexp(1.0, -e) : 1.0;
  }

  /// Throws kfmm::Error naming particle `bad`, whose position or mass is NaN or infinite.
  [[noreturn]] void report_non_finite(const const_masses_type& masses, int bad) {
    auto m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), Kokkos::subview(masses, bad));
    const bool mass_bad = !std::isfinite(static_cast<double>(m()));
    throw Error(detail::concat("Solver: ", mass_bad ? "the mass" : "the position", " of particle ", bad,
                               " is NaN or infinite"));
  }

  /// Statistics of the current tree and lists. (M2M and L2L take ranges of node ids: nodes are numbered
  /// level by level and the level offsets are on the host from the tree build, so no per-level lists of
  /// internal nodes and no host round trip; such lists cost ~70 us at 2e5 particles on the H200.)
  void prepare_levels() {
    const int num_nodes = tree_.num_nodes;
    const int num_levels = tree_.num_levels;
    stats_.num_nodes = num_nodes;
    stats_.num_leaves = tree_.num_leaves;
    stats_.num_levels = num_levels;
    // The walk's sources Views hold exactly their pairs: no device-to-host copy of the last offsets.
    stats_.far_pairs = static_cast<long long>(lists_.far.sources.extent(0));
    stats_.near_pairs = static_cast<long long>(lists_.near.sources.extent(0));
    stats_.list_build = lists_.statistics.list_build;
  }

  /// Multipoles of the current tree for masses in the tree's order, on the side instance after the work
  /// submitted so far: P2M on the leaves, then M2M from the deepest parents up to level `top` (one launch;
  /// levels above the shallowest far pair have no multipole that M2L reads).
  void upward_pass(const Kokkos::View<const Real*, memory_space>& masses_sorted, int top, Clock& clock) {
    const int num_nodes = tree_.num_nodes;
    const int ncoef = expansion_row_length(order_);  // (padded: see expansion_row_length)
    if (static_cast<int>(multipole_storage_.extent(0)) < num_nodes ||
        static_cast<int>(multipole_storage_.extent(1)) != ncoef ||
        local_storage_.extent(0) != multipole_storage_.extent(0) ||
        local_storage_.extent(1) != multipole_storage_.extent(1)) {
      const int rows = num_nodes + num_nodes / 4 + 16;
      multipole_storage_ = Expansions();
      local_storage_ = Expansions();
      multipole_storage_ = Expansions(
          Kokkos::view_alloc(work_, Kokkos::WithoutInitializing, "kfmm::Solver::multipoles"), rows, ncoef);
      local_storage_ = Expansions(
          Kokkos::view_alloc(work_, Kokkos::WithoutInitializing, "kfmm::Solver::locals"), rows, ncoef);
    }
    const Expansions multipoles =
        Kokkos::subview(multipole_storage_, std::make_pair(0, num_nodes), Kokkos::ALL());
    const ExecutionSpace side = side_after_main(clock);
    const int p = order_;
    const auto& t = tree_;
    const ExpansionOptions trusted = trusted_options();
    p2m(side, p, t.positions, masses_sorted, t.ranges, t.leaves, t.centres, multipoles, trusted);
    clock.side_stop(Stage::p2m);
    // M2M: parents on levels top .. num_levels - 2 (the deepest level holds leaves only). Nodes are
    // numbered level by level, parents first (translation_passes.hpp): level-by-level launches cost ~7 us
    // each near the root on the H200.
    const int m2m_first = t.level_offsets[std::min(top, t.num_levels - 1)];
    m2m_pass(side, p, m2m_first, t.level_offsets[t.num_levels - 1], t.first_child, t.num_children, t.centres,
             multipoles, pass_workspace_, trusted);
    clock.side_stop(Stage::m2m);
  }

  /// M2L, L2L and L2P (the main instance) and P2P (the side instance, beside M2L and L2L) on the current
  /// tree and lists after upward_pass, then the gather into the caller's order.
  void far_and_near(const Kokkos::View<const Real*, memory_space>& masses_sorted,
                    const accelerations_type& accelerations, const potentials_type& potentials,
                    Clock& clock) {
    const int n = tree_.num_particles;
    const int num_nodes = tree_.num_nodes;
    if (static_cast<int>(outputs_sorted_.extent(0)) != n) {
      outputs_sorted_ = SortedOutputs();  // (released first: the old one never adds to the peak)
      outputs_sorted_ = SortedOutputs(
          Kokkos::view_alloc(work_, Kokkos::WithoutInitializing, "kfmm::Solver::outputs_sorted"), n);
    }
    const auto acc_sorted = Kokkos::subview(outputs_sorted_, Kokkos::ALL(), std::make_pair(0, 3));
    const auto pot_sorted = Kokkos::subview(outputs_sorted_, Kokkos::ALL(), 3);
    const Expansions multipoles =
        Kokkos::subview(multipole_storage_, std::make_pair(0, num_nodes), Kokkos::ALL());
    const Expansions locals = Kokkos::subview(local_storage_, std::make_pair(0, num_nodes), Kokkos::ALL());
    const int p = order_;
    const auto& t = tree_;
    const ExpansionOptions trusted = trusted_options();
    const int top = lists_.top_far_level >= 0 ? lists_.top_far_level : t.num_levels;
    P2POptions p2p_options;
    p2p_options.accumulate_in_double = options_.accumulation == Accumulation::wide;
    p2p_options.deterministic = options_.deterministic;
    p2p_options.validate = false;                           // (the walk's lists: tested sizes and symmetry)
    p2p_options.expected_leaf_size = t.max_leaf_particles;  // (picks the GPU team size)
    // (Not max_target_particles = t.max_leaf_particles: it saves the chunk totals' round trip, 20-30 us
    // per evaluation on the H200, but sizes the partial buffer for the leaf bound, +23 to +54 bytes per
    // particle at the goal points and at 1e8: docs/benchmarks.md, thirteenth session.)
    // Host backends evaluate each near leaf pair once for both leaves (Newton's third law; 1.2x there).
    p2p_options.mutual = detail::is_host_execution_space<ExecutionSpace>;
    // The side reads the walk's lists; M2L (main) reads the side's multipoles.
    const ExecutionSpace side = side_after_main(clock);
    side_instance_.main_waits_for_side();
    clock.skip(0);
    // The P2P's chunk table first, on the side, ready as soon as the walk is done, beside the zero fills and
    // ahead of the M2L: submitted behind the M2L (at the same priority or lower), the table's kernel
    // waited for the M2L's last wave and the P2P started 30-40 us after the M2L ended (docs/benchmarks.md,
    // thirty-second session). Its totals come back in p2p below, once the M2L and L2L are submitted.
    p2p_prepare(side, lists_.near, t.ranges, t.positions, p2p_options, p2p_workspace_);
    // Both cleared as flat ranges in 16-byte stores (core/kfmm/core/zero_fill.hpp; Kokkos 3.4 fills a 2-D
    // View with a slow 2-D kernel, and a 1-D one a value per thread).
    detail::zero_fill(work_, outputs_sorted_.data(), outputs_sorted_.span());
    detail::zero_fill(work_, locals.data(), locals.span());
    clock.stop(Stage::gather);
    side_instance_.side_waits_for_main();  // (the side's P2P adds to the cleared outputs)

    // Far field: M2L over the far list, then L2L from the root side down (one launch).
    M2LOptions m2l_options;
    m2l_options.lane = options_.m2l_lane;
    m2l_options.deterministic = options_.deterministic;
    m2l_options.validate = false;  // (the walk's lists: sources hold exactly their pairs)
    m2l(work_, p, lists_.far, t.centres, multipoles, locals, m2l_options, m2l_workspace_);
    clock.stop(Stage::m2l);
    // L2L: every node below level max(1, top + 1) takes its parent's local.
    l2l_pass(work_, p, t.level_offsets[std::min(std::max(1, top + 1), t.num_levels)], num_nodes, t.parent,
             t.centres, locals, pass_workspace_, trusted);
    clock.stop(Stage::l2l);
    // Near field on the side, submitted after M2L and L2L: its table's totals come back (a host round trip
    // that waits for the side only, whose table was built beside the zero fills), and its kernel's teams
    // take the SMs as the M2L's last wave leaves them.
    p2p(side, lists_.near, t.ranges, t.positions, masses_sorted, options_.G, options_.softening * scale_,
        acc_sorted, pot_sorted, p2p_options, p2p_workspace_);
    clock.side_stop(Stage::p2p);
    // L2P adds the far field to the near field's sums (a fixed order on every backend).
    side_instance_.main_waits_for_side();
    clock.skip(0);
    l2p(work_, p, options_.G, t.leaves, t.ranges, t.centres, locals, t.positions, acc_sorted, pot_sorted,
        trusted);
    clock.stop(Stage::l2p);
    // Back into the caller's order.
    detail::gather_outputs(work_, inverse_permutation_, acc_sorted, pot_sorted, accelerations, potentials, n,
                           scale_ * scale_, scale_);
    clock.stop(Stage::scatter);
    // (After the last stage, so that its time is not booked to any stage.)
    if (options_.timing)
      stats_.p2p_interactions = detail::count_p2p_interactions(work_, lists_.near, t.ranges);
  }

  using Expansions = ExpansionView<Real, memory_space>;

  ExecutionSpace space_;  ///< the caller's instance
  ExecutionSpace work_;   ///< the instance of an evaluation's main work (side_instance_.main(space_))
  Options options_;
  int order_ = 0;
  double theta_ = 0;
  int leaf_size_ = 0;
  double predicted_error_ = 0;
  double min_separation_ = 0;
  double walk_abs_mass_ = 0;  // the sum |m| the current lists were walked for
  Statistics stats_;
  StageClock<ExecutionSpace> stage_clock_;              ///< stage times with Options::timing
  detail::SideInstance<ExecutionSpace> side_instance_;  ///< the instance of P2M, M2M and P2P
  long long evaluations_ = 0;

  bool has_tree_ = false;
  Octree_ tree_;
  Lists_ lists_;
  OctreeWorkspace<memory_space> tree_workspace_;
  WalkWorkspace<memory_space> walk_workspace_;
  CsrWorkspace<memory_space> m2l_workspace_, p2p_workspace_;  // chunk tables and partial sums
  TranslationPassWorkspace<memory_space> pass_workspace_;     // M2M / L2L pass flags
  Kokkos::View<Real*, memory_space> masses_sorted_;
  /// The results in the tree's order, one record (ax, ay, az, phi) per particle: the gather back into the
  /// caller's order reads one 16-byte (float) record at each random slot, one memory sector, where four
  /// separate arrays cost four (at 1e7 particles they outgrow the GPU's L2; docs/benchmarks.md).
  using SortedOutputs = Kokkos::View<Real* [4], Kokkos::LayoutRight, memory_space>;
  SortedOutputs outputs_sorted_;
  Kokkos::View<int*, memory_space> inverse_permutation_;  ///< caller index -> sorted slot (the tree's)
  double scale_ = 1;          ///< positions are multiplied by this power of two before the tree is built
  bool scale_known_ = false;  ///< scale_ is that of an earlier evaluation (the next build assumes it)
  Expansions multipole_storage_, local_storage_;
};

}  // namespace kfmm
