/// \file node_moments.hpp
/// Per-node expansion centres, radii and masses of an octree, bottom-up on the execution space.
///
/// - Centre: the |m|-weighted centre of mass, accumulated in double (also for float), so negative
///   (Laplace) charges cannot push it out of the node; the midpoint of the node's particle bounding
///   box when the node's |m| sum is zero.
/// - Radius about that centre (as stored, i.e. after rounding to Real), rounded up so that it bounds
///   every particle when evaluated in double:
///   leaves: exact, the largest particle distance;
///   internal nodes: min(max over children of |c_child - c| + r_child, distance from c to the farthest
///   corner of the node's particle bounding box), a bound that is exact up to the curvature of the
///   children's spheres and never looser than the box corner.
/// - Mass: the sum of the signed masses; absolute mass: the sum of |m| (the walk's concentration rule).
/// One kernel does the whole tree: a thread per leaf computes its leaf, then counts itself in at its
/// parent (an atomic arrival counter); the child that arrives last computes the parent from all its
/// children and goes on up (the bottom-up scheme of Karras, "Maximizing parallelism in the construction
/// of BVHs, octrees, and k-d trees", HPG 2012). Nothing waits, so no schedule can deadlock. Every node
/// is computed by one thread in a fixed order (particles, then children in id order), whichever
/// thread it is, so the results are bitwise identical run after run and across backends. (A kernel per
/// level cost ~8-12 us of latency per level on the H200 whatever its size.)
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/particle_types.hpp"

namespace kfmm {
namespace detail {

/// The double value of r rounded up to Real (so that a bound stays a bound after rounding).
template <class Real>
KOKKOS_INLINE_FUNCTION Real round_up(double r) {
  Real rr = static_cast<Real>(r);
  if (static_cast<double>(rr) < r) {
    const Real eps =
        sizeof(Real) == 4 ? static_cast<Real>(1.1920929e-7) : static_cast<Real>(2.220446049250313e-16);
    rr = static_cast<Real>(rr + rr * eps);
  }
  return rr;
}

/// A point in double precision (captured by value into kernels).
struct Point3 {
  double v[3];
};

}  // namespace detail

/// Per-node double-precision accumulators that the bottom-up pass carries from children to parents
/// (indexed by node id; reusable across calls, grown on demand).
template <class MemorySpace>
struct MomentSums {
  Kokkos::View<double* [4], Kokkos::LayoutRight, MemorySpace> weights;  ///< sum |m|, |m| x, |m| y, |m| z
  Kokkos::View<double* [6], Kokkos::LayoutRight, MemorySpace> boxes;    ///< particle box: lo xyz, hi xyz
  Kokkos::View<double*, MemorySpace> mass;                              ///< sum m
  /// Children counted in per node during the bottom-up kernel; zero between calls (the thread that
  /// finishes a node resets its counter).
  Kokkos::View<int*, MemorySpace> arrivals;

  void reserve(int num_nodes) {
    if (static_cast<int>(mass.extent(0)) >= num_nodes) return;
    arrivals = decltype(arrivals)();
    arrivals = decltype(arrivals)("kfmm::moments::arrivals", num_nodes);  // (zeroed)
    const auto alloc = [](const char* label) {
      return Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label));
    };
    weights = decltype(weights)(alloc("kfmm::moments::weights"), num_nodes);
    boxes = decltype(boxes)(alloc("kfmm::moments::boxes"), num_nodes);
    mass = decltype(mass)(alloc("kfmm::moments::mass"), num_nodes);
  }
};

namespace detail {

/// The centre of a node from its sums w = (sum |m|, sum |m| x, ...) and particle box (lo xyz, hi xyz),
/// stored to centres(node) and returned in c as stored (the radius is about the stored centre). Works
/// from the caller's registers: reading the sums back from memory cost the GPU two more latencies.
template <class Real, class Centres>
KOKKOS_INLINE_FUNCTION void finish_centre(const int node, const double w[4], const double box[6],
                                          const Point3& origin, const Centres& centres, double c[3]) {
  for (int a = 0; a < 3; ++a) {
    double v = w[0] > 0 ? origin.v[a] + w[1 + a] / w[0] : 0.5 * (box[a] + box[3 + a]);
    // The true centre lies in the particles' box; clamping undoes rounding (a lone particle is its
    // own centre exactly, radius 0).
    v = v < box[a] ? box[a] : (v > box[3 + a] ? box[3 + a] : v);
    const Real stored = static_cast<Real>(v);
    centres(node, a) = stored;
    c[a] = static_cast<double>(stored);
  }
}

/// Leaf k of `leaves`: sums, box, centre and exact radius from its particles (one thread).
template <class PositionsView, class MassesView, class Ranges, class IntView, class Centres, class Radii,
          class NodeMasses, class MemorySpace>
struct LeafMoments {
  using Real = typename Centres::non_const_value_type;
  PositionsView positions;
  MassesView masses;
  Ranges ranges;
  IntView leaves;
  Centres centres;
  Radii radii;
  NodeMasses node_masses, node_abs_masses;
  MomentSums<MemorySpace> s;
  Point3 origin;
  KOKKOS_INLINE_FUNCTION void operator()(const int k) const {
    const int node = leaves(k);
    const int begin = ranges(node, 0), end = ranges(node, 1);
    double w = 0, wx = 0, wy = 0, wz = 0, m = 0;
    double lo[3] = {positions(begin, 0), positions(begin, 1), positions(begin, 2)};
    double hi[3] = {lo[0], lo[1], lo[2]};
    for (int i = begin; i < end; ++i) {
      const double mi = static_cast<double>(masses(i));
      const double am = mi < 0 ? -mi : mi;
      const double x[3] = {static_cast<double>(positions(i, 0)), static_cast<double>(positions(i, 1)),
                           static_cast<double>(positions(i, 2))};
      w += am;
      wx += am * (x[0] - origin.v[0]);
      wy += am * (x[1] - origin.v[1]);
      wz += am * (x[2] - origin.v[2]);
      m += mi;
      for (int a = 0; a < 3; ++a) {
        lo[a] = x[a] < lo[a] ? x[a] : lo[a];
        hi[a] = x[a] > hi[a] ? x[a] : hi[a];
      }
    }
    s.weights(node, 0) = w;
    s.weights(node, 1) = wx;
    s.weights(node, 2) = wy;
    s.weights(node, 3) = wz;
    s.mass(node) = m;
    for (int a = 0; a < 3; ++a) {
      s.boxes(node, a) = lo[a];
      s.boxes(node, 3 + a) = hi[a];
    }
    const double sums[4] = {w, wx, wy, wz};
    const double box[6] = {lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]};
    double c[3];
    finish_centre<Real>(node, sums, box, origin, centres, c);
    double r2 = 0;
    for (int i = begin; i < end; ++i) {
      const double dx = static_cast<double>(positions(i, 0)) - c[0];
      const double dy = static_cast<double>(positions(i, 1)) - c[1];
      const double dz = static_cast<double>(positions(i, 2)) - c[2];
      const double d2 = dx * dx + dy * dy + dz * dz;
      r2 = d2 > r2 ? d2 : r2;
    }
    radii(node) = detail::round_up<Real>(compat::sqrt(r2));
    node_masses(node) = static_cast<Real>(m);
    node_abs_masses(node) = static_cast<Real>(w);
  }
};

/// Internal node `node` (it has children): combined from them by one thread. Other threads of the same
/// kernel computed the children, so their values are read with compat::coherent_load().
template <class IntView, class Centres, class Radii, class NodeMasses, class MemorySpace>
struct InternalMoments {
  using Real = typename Centres::non_const_value_type;
  IntView first_child, num_children;
  Centres centres;
  Radii radii;
  NodeMasses node_masses, node_abs_masses;
  MomentSums<MemorySpace> s;
  Point3 origin;
  KOKKOS_INLINE_FUNCTION void operator()(const int node) const {
    const int first = first_child(node), count = num_children(node);  // (count >= 1: a parent)
    // Children are read in batches of 4 at clamped (always valid) ids without branches, so that a GPU
    // has a batch's loads in flight together; only children below `count` are added, in order. (A loop
    // to `count` waited one memory latency per child and value: ~12 us per level on the H200.)
    const int last = first + count - 1;
    double w[4] = {0, 0, 0, 0}, m = 0;
    double box[6];
    for (int q = 0; q < 6; ++q) box[q] = compat::coherent_load(s.boxes(first, q));
    for (int batch = 0; batch < 8; batch += 4) {
      double cw[4][4], cm[4], cb[4][6];
      for (int j = 0; j < 4; ++j) {
        const int c = first + batch + j < last ? first + batch + j : last;
        for (int q = 0; q < 4; ++q) cw[j][q] = compat::coherent_load(s.weights(c, q));
        cm[j] = compat::coherent_load(s.mass(c));
        for (int q = 0; q < 6; ++q) cb[j][q] = compat::coherent_load(s.boxes(c, q));
      }
      for (int j = 0; j < 4; ++j) {
        if (batch + j < count) {  // (no break: the loops stay unrolled, the arrays in registers)
          for (int q = 0; q < 4; ++q) w[q] += cw[j][q];
          m += cm[j];
          for (int a = 0; a < 3; ++a) {
            box[a] = cb[j][a] < box[a] ? cb[j][a] : box[a];
            box[3 + a] = cb[j][3 + a] > box[3 + a] ? cb[j][3 + a] : box[3 + a];
          }
        }
      }
    }
    for (int q = 0; q < 4; ++q) s.weights(node, q) = w[q];
    for (int q = 0; q < 6; ++q) s.boxes(node, q) = box[q];
    s.mass(node) = m;
    double ctr[3];
    finish_centre<Real>(node, w, box, origin, centres, ctr);
    // Bound 1: the children's spheres (all 8 read at once, the same way).
    double cc[8][3], cr[8];
    for (int j = 0; j < 8; ++j) {
      const int c = first + j < last ? first + j : last;
      for (int a = 0; a < 3; ++a) cc[j][a] = static_cast<double>(compat::coherent_load(centres(c, a)));
      cr[j] = static_cast<double>(compat::coherent_load(radii(c)));
    }
    double r_children = 0;
    for (int j = 0; j < 8; ++j) {
      if (j < count) {
        const double dx = cc[j][0] - ctr[0], dy = cc[j][1] - ctr[1], dz = cc[j][2] - ctr[2];
        const double r = compat::sqrt(dx * dx + dy * dy + dz * dz) + cr[j];
        r_children = r > r_children ? r : r_children;
      }
    }
    // Bound 2: the farthest corner of the particles' bounding box.
    double corner2 = 0;
    for (int a = 0; a < 3; ++a) {
      const double dlo = ctr[a] - box[a], dhi = box[3 + a] - ctr[a];
      const double e = dlo > dhi ? dlo : dhi;
      corner2 += e * e;
    }
    const double r_box = compat::sqrt(corner2);
    radii(node) = detail::round_up<Real>(r_children < r_box ? r_children : r_box);
    node_masses(node) = static_cast<Real>(m);
    node_abs_masses(node) = static_cast<Real>(w[0]);
  }
};

/// The whole bottom-up pass, one thread per leaf (see the file comment): the leaf, then every ancestor
/// whose last child this thread finished.
template <class Leaf, class Internal, class IntView, class MemorySpace>
struct BottomUpMoments {
  Leaf leaf;
  Internal internal;
  IntView parent;
  Kokkos::View<int*, MemorySpace> arrivals;
  KOKKOS_INLINE_FUNCTION void operator()(const int k) const {
    leaf(k);
    for (int node = leaf.leaves(k);;) {
      const int up = parent(node);
      if (up < 0) return;
      Kokkos::memory_fence();  // this node's results are visible before its arrival is
      if (Kokkos::atomic_fetch_add(&arrivals(up), 1) != internal.num_children(up) - 1) return;  // not last
      Kokkos::memory_fence();  // the siblings' results, visible before their arrivals, are read after
      arrivals(up) = 0;        // (ready for the next call)
      internal(up);
      node = up;
    }
  }
};

}  // namespace detail

/// Computes centres, radii, masses and absolute masses (sum |m|) of every node from particle positions and
/// masses in tree (sorted) order; `origin_in` is a point near the particles (e.g. the box corner) that the
/// double-precision weighted sums are taken relative to. `leaves` lists the leaf nodes, `parent` the
/// parent of every node (-1 for the root); internal nodes are combined from their children (contiguous
/// ids, 1 to 8 per internal node, as in an octree), each as soon as its last child is done, in one
/// kernel. `sums` provides the per-node temporaries.
template <class ExecutionSpace, class PositionsView, class MassesView, class Ranges, class IntView,
          class Centres, class Radii, class NodeMasses>
void compute_node_moments(const ExecutionSpace& space, const PositionsView& positions,
                          const MassesView& masses, const Ranges& ranges, const IntView& parent,
                          const IntView& first_child, const IntView& num_children, const IntView& leaves,
                          const double origin_in[3], const Centres& centres, const Radii& radii,
                          const NodeMasses& node_masses, const NodeMasses& node_abs_masses,
                          MomentSums<typename ExecutionSpace::memory_space>& sums) {
  using memory_space = typename ExecutionSpace::memory_space;
  const int num_nodes = static_cast<int>(ranges.extent(0));
  const int num_leaves = static_cast<int>(leaves.extent(0));
  if (num_nodes == 0) return;
  // Weighted sums are taken relative to `origin` (the box corner): far from the origin of
  // coordinates, absolute sums would lose the digits that resolve a node.
  const detail::Point3 origin{{origin_in[0], origin_in[1], origin_in[2]}};
  sums.reserve(num_nodes);
  const MomentSums<memory_space> s = sums;
  using Leaf = detail::LeafMoments<PositionsView, MassesView, Ranges, IntView, Centres, Radii, NodeMasses,
                                   memory_space>;
  using Internal = detail::InternalMoments<IntView, Centres, Radii, NodeMasses, memory_space>;
  // (light weight: the functor is over 512 bytes; see compat::light_weight)
  Kokkos::parallel_for(
      "kfmm::moments", compat::light_weight(Kokkos::RangePolicy<ExecutionSpace>(space, 0, num_leaves)),
      detail::BottomUpMoments<Leaf, Internal, IntView, memory_space>{
          Leaf{positions, masses, ranges, leaves, centres, radii, node_masses, node_abs_masses, s, origin},
          Internal{first_child, num_children, centres, radii, node_masses, node_abs_masses, s, origin},
          parent, s.arrivals});
}

}  // namespace kfmm
