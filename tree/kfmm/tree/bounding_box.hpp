/// \file bounding_box.hpp
/// The axis-aligned bounding box of a particle set, by one parallel reduction on the execution space,
/// together with a count of non-finite inputs so that NaN or infinite coordinates (and masses) are
/// rejected before they can poison the Morton keys.
#pragma once

#include <Kokkos_Core.hpp>

#include <cfloat>
#include <cstdint>
#include <cstring>
#include <string>

#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/host_copy.hpp"
#include "kfmm/core/view_capacity.hpp"

namespace kfmm {

/// Axis-aligned bounding box in double precision (exact for float and double inputs).
/// An empty box has lo = +DBL_MAX and hi = -DBL_MAX on every axis.
struct BoundingBox {
  double lo[3] = {DBL_MAX, DBL_MAX, DBL_MAX};
  double hi[3] = {-DBL_MAX, -DBL_MAX, -DBL_MAX};

  /// True when the box contains no point.
  KOKKOS_INLINE_FUNCTION bool empty() const { return !(lo[0] <= hi[0]); }
  /// Largest edge length (0 for a single point, negative for an empty box).
  KOKKOS_INLINE_FUNCTION double max_extent() const {
    double e = hi[0] - lo[0];
    for (int a = 1; a < 3; ++a) e = (hi[a] - lo[a]) > e ? (hi[a] - lo[a]) : e;
    return e;
  }
};

namespace detail {

/// True unless x is NaN or infinite. Tests the exponent bits, so it stays correct under fast-math
/// flags that let compilers assume finite arithmetic.
KOKKOS_INLINE_FUNCTION bool is_finite(double x) {
  std::uint64_t bits = 0;
  memcpy(&bits, &x, sizeof(bits));
  return ((bits >> 52) & 0x7ffu) != 0x7ffu;
}

/// Reduction value of the bounding-box pass: box, the number of non-finite inputs and the sum of the
/// finite masses' magnitudes (which bounds every expansion coefficient's mass factor). Its `+=` is the
/// merge of two partial results; it also reads volatile partials (other teams' results).
struct BoxReduction {
  double lo[3], hi[3];
  long long non_finite;
  double abs_mass;

  KOKKOS_INLINE_FUNCTION BoxReduction()
      : lo{DBL_MAX, DBL_MAX, DBL_MAX}, hi{-DBL_MAX, -DBL_MAX, -DBL_MAX}, non_finite(0), abs_mass(0) {}
  KOKKOS_INLINE_FUNCTION void operator+=(const volatile BoxReduction& o) {
    for (int a = 0; a < 3; ++a) {
      const double olo = o.lo[a], ohi = o.hi[a];
      lo[a] = olo < lo[a] ? olo : lo[a];
      hi[a] = ohi > hi[a] ? ohi : hi[a];
    }
    non_finite += o.non_finite;
    abs_mass += o.abs_mass;
  }
};

/// The box pass as one kernel of `teams` teams. Each thread reduces its share of the points (GPUs: a
/// stride of all threads, coalesced; host: a contiguous chunk per team), the team combines its threads
/// in scratch along a fixed tree, and the team that finishes last (a counter, reset by that team)
/// combines the teams' results in team order into partials(teams). Minima, maxima and counts are exact
/// in any order, so the box is the same on every backend. (Kokkos 3.4's parallel_reduce with this
/// 56-byte value took ~78 us for 1e6 points on the H200, where its 16 MB take ~4 us at 4.3 TB/s.) A functor,
/// not a lambda: nvcc's host-device lambdas crash host backends of CUDA builds when several translation units
/// instantiate them (a null deleter in the lambda's type-erased holder, seen on the H200).
template <class ExecutionSpace, class PositionsView, class MassesView>
struct BoxTeams {
  using memory_space = typename ExecutionSpace::memory_space;
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  using Scratch = Kokkos::View<BoxReduction*, typename ExecutionSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr bool host = is_host_execution_space<ExecutionSpace>;
  static constexpr int team_size = host ? 1 : 256;  // a power of two (the tree below)
  PositionsView positions;
  MassesView masses;
  Kokkos::View<BoxReduction*, memory_space> partials;  // teams + 1; the last is the result
  Kokkos::View<unsigned*, memory_space> done;          // teams finished (0 between launches)
  int n, n_pos, n_mass, teams;

  KOKKOS_INLINE_FUNCTION void add(BoxReduction& acc, const int i) const {
    if (i < n_pos) {
      for (int a = 0; a < 3; ++a) {
        const double x = static_cast<double>(positions(i, a));
        if (is_finite(x)) {
          acc.lo[a] = x < acc.lo[a] ? x : acc.lo[a];
          acc.hi[a] = x > acc.hi[a] ? x : acc.hi[a];
        } else {
          acc.non_finite += 1;
        }
      }
    }
    if (i < n_mass) {
      const double m = static_cast<double>(masses(i));
      if (is_finite(m)) {
        acc.abs_mass += m < 0 ? -m : m;
      } else {
        acc.non_finite += 1;
      }
    }
  }

  /// The team's values merged along a fixed tree in scratch; the result in s(0) for every thread.
  KOKKOS_INLINE_FUNCTION static void combine(const Team& team, const Scratch& s, const BoxReduction& value) {
    const int r = team.team_rank();
    s(r) = value;
    team.team_barrier();
    for (int h = team_size / 2; h > 0; h /= 2) {
      if (r < h) s(r) += s(r + h);
      team.team_barrier();
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Team& team) const {
    const int r = team.team_rank(), league = team.league_rank();
    BoxReduction acc;
    if (host) {
      const long long chunk = (static_cast<long long>(n) + teams - 1) / teams;
      const long long end = (league + 1) * chunk < n ? (league + 1) * chunk : n;
      for (long long i = league * chunk; i < end; ++i) add(acc, static_cast<int>(i));
    } else {
      const long long stride = static_cast<long long>(teams) * team_size;
      for (long long i = static_cast<long long>(league) * team_size + r; i < n; i += stride)
        add(acc, static_cast<int>(i));
    }
    Scratch s(team.team_scratch(0), team_size);
    combine(team, s, acc);
    int last = 0;
    if (r == 0) {
      partials(league) = s(0);
      Kokkos::memory_fence();  // the partial is visible before the count says so
      last = Kokkos::atomic_fetch_add(&done(0), 1u) == static_cast<unsigned>(teams - 1) ? 1 : 0;
    }
    team.team_broadcast(last, 0);
    if (last == 0) return;
    // The last team: every thread merges a stride of the teams' partials (read past this core's cache,
    // volatile: other cores wrote them), then the same tree. (One thread merging them in sequence
    // waited one memory latency per team: ~0.1 ms for 256 teams on the H200.)
    Kokkos::memory_fence();
    BoxReduction mine;
    for (int t = r; t < teams; t += team_size) mine += static_cast<const volatile BoxReduction&>(partials(t));
    combine(team, s, mine);
    if (r == 0) {
      partials(teams) = s(0);
      done(0) = 0;
    }
  }
};

/// Reusable device buffers of reduce_box: the teams' partial results and the finished-team counter.
template <class MemorySpace>
struct BoxWorkspace {
  Kokkos::View<BoxReduction*, MemorySpace> partials;
  Kokkos::View<unsigned*, MemorySpace> done;  ///< zero between launches (the last team resets it)
};

/// One pass over positions (n x 3) and masses (n, or 0 to skip them), enqueued on `space`: the box of
/// the finite coordinates and the number of non-finite coordinates and masses, left on the device in the
/// returned one-element View (a view of the workspace, valid until its next use; empty when n = 0).
template <class ExecutionSpace, class PositionsView, class MassesView>
Kokkos::View<const BoxReduction*, typename ExecutionSpace::memory_space> reduce_box_on_device(
    const ExecutionSpace& space, const PositionsView& positions, const MassesView& masses,
    BoxWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  using memory_space = typename ExecutionSpace::memory_space;
  using Kernel = BoxTeams<ExecutionSpace, PositionsView, MassesView>;
  const int n_pos = static_cast<int>(positions.extent(0));
  const int n_mass = static_cast<int>(masses.extent(0));
  const int n = n_pos > n_mass ? n_pos : n_mass;
  if (n == 0) return {};
  // GPUs: at most 2^16 threads (see reduction_items); host: one chunk per thread of the space.
  const int want =
      Kernel::host ? space.concurrency() : reduction_items<ExecutionSpace>(n) / Kernel::team_size;
  const int teams = want < 1 ? 1 : (want > n ? n : want);
  reserve_at_least(workspace.partials, teams + 1LL, "kfmm::bounding_box::partials");
  if (workspace.done.extent(0) == 0)
    workspace.done = Kokkos::View<unsigned*, memory_space>("kfmm::bounding_box::done", 1);
  const auto partials = workspace.partials;
  Kokkos::parallel_for(
      "kfmm::bounding_box",
      Kokkos::TeamPolicy<ExecutionSpace>(space, teams, Kernel::team_size)
          .set_scratch_size(0, Kokkos::PerTeam(Kernel::Scratch::shmem_size(Kernel::team_size))),
      Kernel{positions, masses, partials, workspace.done, n, n_pos, n_mass, teams});
  return Kokkos::subview(partials, Kokkos::make_pair(teams, teams + 1));
}

/// reduce_box_on_device, copied to the host (the caller's round trip).
template <class ExecutionSpace, class PositionsView, class MassesView>
BoxReduction reduce_box(const ExecutionSpace& space, const PositionsView& positions, const MassesView& masses,
                        BoxWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  BoxReduction result;
  const auto on_device = reduce_box_on_device(space, positions, masses, workspace);
  if (on_device.extent(0) == 0) return result;
  detail::copy_to_host(space, &result, on_device, 1);
  return result;
}

/// The box of a reduction's finite coordinates times the power of two `scale` (exact unless it overflows).
KOKKOS_INLINE_FUNCTION BoundingBox scaled_box(const BoxReduction& r, const double scale) {
  BoundingBox box;
  if (!(r.lo[0] <= r.hi[0])) return box;  // no finite point
  for (int a = 0; a < 3; ++a) {
    box.lo[a] = r.lo[a] * scale;
    box.hi[a] = r.hi[a] * scale;
  }
  return box;
}

}  // namespace detail

/// Bounding box of `positions` (a View of n x 3 coordinates accessible from `space`), computed by a
/// parallel reduction on `space`. Throws kfmm::Error if a coordinate is NaN or infinite.
template <class ExecutionSpace, class PositionsView>
BoundingBox bounding_box(const ExecutionSpace& space, const PositionsView& positions) {
  detail::BoxWorkspace<typename ExecutionSpace::memory_space> workspace;
  const auto r = detail::reduce_box(
      space, positions, Kokkos::View<const double*, typename ExecutionSpace::memory_space>(), workspace);
  require(r.non_finite == 0, "positions: ", r.non_finite, " coordinates are NaN or infinite");
  BoundingBox box;
  for (int a = 0; a < 3; ++a) {
    box.lo[a] = r.lo[a];
    box.hi[a] = r.hi[a];
  }
  return box;
}

}  // namespace kfmm
