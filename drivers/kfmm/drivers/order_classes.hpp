/// \file order_classes.hpp
/// Far pairs by the expansion order they need: the solver's M2L with per-pair orders.
///
/// The MAC accepts a pair (A, B) when rho = (r_A + r_B) / d <= theta, and the truncation error of an
/// order-p M2L falls like rho^(p+1) (times the source's multipole bound over d; Dehnen 2014, section 3).
/// The walk's accepted pairs spread over theta/2 < rho <= theta (a split halves one node's radius): at
/// 1e6 Plummer particles and theta 0.75 half of them have rho < 0.7 theta, where a much lower order
/// reaches the bound of the worst accepted pair. Since the rotation-based M2L costs ~(p+1)^3, giving
/// such pairs a lower order saves most of the far field's arithmetic at a bounded cost in accuracy.
///
/// Classes: class 0 has the full order p and takes every pair no lower class takes; class k >= 1 has
/// order p - 2k and takes the pairs with rho^(p - 2k + 1) <= margin theta^(p+1), i.e. whose
/// truncation bound is at most `margin` times that of the worst pair the MAC accepts. The split is
/// three kernels (count per row and class, one scan, fill) and one host copy of the class sizes; each
/// class then is a plain CSR far list (rows as in the input, some empty) for kfmm::m2l at its order.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <vector>

#include "kfmm/core/error.hpp"
#include "kfmm/core/interaction_list.hpp"

namespace kfmm {

/// Most classes of far pairs (orders p, p - 2, p - 4, p - 6).
inline constexpr int max_order_classes = 4;

/// The classes of one split (host values): orders and squared ratio bounds, class 0 first.
struct OrderClasses {
  int count = 1;
  int order[max_order_classes] = {};
  double ratio_squared[max_order_classes] = {};  ///< class k >= 1 takes rho^2 <= ratio_squared[k]
};

/// Classes for order p, opening angle theta, at most `requested` classes and the error margin (see the
/// file comment). Orders below 1 are not used (a monopole-only M2L would not save enough to matter).
inline OrderClasses make_order_classes(int p, double theta, int requested, double margin) {
  require(requested >= 1 && requested <= max_order_classes, "order classes: ", requested, " is outside 1..",
          max_order_classes);
  require(std::isfinite(margin) && margin > 0 && margin <= 1, "order classes: margin ", margin,
          " is outside (0, 1]");
  OrderClasses c;
  c.order[0] = p;
  c.ratio_squared[0] = theta * theta;
  const double bound = std::log(margin) + (p + 1) * std::log(theta);  // log of margin theta^(p+1)
  for (int k = 1; k < requested && p - 2 * k >= 1; ++k) {
    c.order[k] = p - 2 * k;
    const double rho = std::exp(bound / (p - 2 * k + 1));
    c.ratio_squared[k] = rho * rho;
    c.count = k + 1;
  }
  return c;
}

namespace detail {

/// The class of far pair (t, s): the lowest order whose ratio bound holds, else 0 (device).
template <class Centres, class Radii>
KOKKOS_INLINE_FUNCTION int order_class(const Centres& centres, const Radii& radii, const int t, const int s,
                                       const OrderClasses& classes) {
  const double dx = static_cast<double>(centres(t, 0)) - static_cast<double>(centres(s, 0));
  const double dy = static_cast<double>(centres(t, 1)) - static_cast<double>(centres(s, 1));
  const double dz = static_cast<double>(centres(t, 2)) - static_cast<double>(centres(s, 2));
  const double r = static_cast<double>(radii(t)) + static_cast<double>(radii(s));
  const double d2 = dx * dx + dy * dy + dz * dz;
  for (int k = classes.count - 1; k >= 1; --k)
    if (r * r <= classes.ratio_squared[k] * d2) return k;
  return 0;
}

/// Per row r and class k: the number of pairs, into counts(k rows + r).
template <class Memory, class Centres, class Radii>
struct CountOrderClasses {
  InteractionList<Memory> far;
  Centres centres;
  Radii radii;
  Kokkos::View<int*, Memory> counts;
  OrderClasses classes;
  int rows;
  KOKKOS_INLINE_FUNCTION void operator()(const int r) const {
    int n[max_order_classes] = {};
    const int t = far.targets(r);
    for (int j = far.offsets(r); j < far.offsets(r + 1); ++j) ++n[order_class(centres, radii, t, far.sources(j), classes)];
    for (int k = 0; k < classes.count; ++k) counts(k * rows + r) = n[k];
  }
};

/// Exclusive scan of counts (K rows entries, then one closing entry) into first(i).
template <class Memory>
struct ScanOrderClasses {
  using value_type = int;
  Kokkos::View<const int*, Memory> counts;
  Kokkos::View<int*, Memory> first;
  int entries;
  KOKKOS_INLINE_FUNCTION void operator()(const int i, int& sum, const bool final) const {
    if (final) first(i) = sum;
    if (i < entries) sum += counts(i);
  }
};

/// Per row r: every class's offsets (relative to the class's first pair) and its sources, in list order.
/// Row 0 also writes the classes' first pairs, bases(k), and the total, bases(K).
template <class Memory, class Centres, class Radii>
struct FillOrderClasses {
  InteractionList<Memory> far;
  Centres centres;
  Radii radii;
  Kokkos::View<const int*, Memory> first;
  Kokkos::View<int*, Memory> offsets, sources, bases;
  OrderClasses classes;
  int rows;
  KOKKOS_INLINE_FUNCTION void operator()(const int r) const {
    int at[max_order_classes];
    for (int k = 0; k < classes.count; ++k) {
      const int base = first(k * rows);
      at[k] = first(k * rows + r);
      offsets(k * (rows + 1) + r) = at[k] - base;
      if (r == rows - 1) offsets(k * (rows + 1) + rows) = first((k + 1) * rows) - base;
      if (r == 0) bases(k) = base;
    }
    if (r == 0) bases(classes.count) = first(classes.count * rows);
    const int t = far.targets(r);
    for (int j = far.offsets(r); j < far.offsets(r + 1); ++j) {
      const int s = far.sources(j);
      sources(at[order_class(centres, radii, t, s, classes)]++) = s;
    }
  }
};

}  // namespace detail

/// The far pairs of one list split into order classes (the returned lists share this object's memory).
template <class Memory>
struct FarListsByOrder {
  std::vector<int> orders;                      ///< order of each non-empty class, highest first
  std::vector<InteractionList<Memory>> lists;   ///< the class's pairs, rows as in the input
  Kokkos::View<int*, Memory> counts, first, offsets, sources, bases;  ///< storage (reused between splits)

  /// Splits `far` (rows of targets, sources) by the classes; centres Real*[3] and radii Real* per node.
  template <class ExecutionSpace, class Centres, class Radii>
  void split(const ExecutionSpace& space, const InteractionList<Memory>& far, const Centres& centres,
             const Radii& radii, const OrderClasses& classes) {
    orders.clear();
    lists.clear();
    const int rows = far.num_rows();
    const int pairs = static_cast<int>(far.sources.extent(0));
    const int K = classes.count;
    if (rows == 0 || pairs == 0) return;
    grow(counts, K * rows, "kfmm::FarListsByOrder::counts");
    grow(first, K * rows + 1, "kfmm::FarListsByOrder::first");
    grow(offsets, K * (rows + 1), "kfmm::FarListsByOrder::offsets");
    grow(sources, pairs, "kfmm::FarListsByOrder::sources");
    grow(bases, K + 1, "kfmm::FarListsByOrder::bases");
    using Policy = Kokkos::RangePolicy<ExecutionSpace>;
    Kokkos::parallel_for("kfmm::FarListsByOrder::count", Policy(space, 0, rows),
                         detail::CountOrderClasses<Memory, Centres, Radii>{far, centres, radii, counts, classes, rows});
    Kokkos::parallel_scan("kfmm::FarListsByOrder::scan", Policy(space, 0, K * rows + 1),
                          detail::ScanOrderClasses<Memory>{counts, first, K * rows});
    Kokkos::parallel_for(
        "kfmm::FarListsByOrder::fill", Policy(space, 0, rows),
        detail::FillOrderClasses<Memory, Centres, Radii>{far, centres, radii, first, offsets, sources, bases,
                                                         classes, rows});
    int host_bases[max_order_classes + 1] = {};
    Kokkos::deep_copy(space, Kokkos::View<int*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>(host_bases, K + 1),
                      Kokkos::subview(bases, std::make_pair(0, K + 1)));
    space.fence();
    require(host_bases[K] == pairs, "FarListsByOrder: ", host_bases[K], " pairs classified, the list has ", pairs);
    for (int k = 0; k < K; ++k) {
      if (host_bases[k + 1] == host_bases[k]) continue;
      InteractionList<Memory> list;
      list.targets = far.targets;
      list.offsets = Kokkos::subview(offsets, std::make_pair(k * (rows + 1), (k + 1) * (rows + 1)));
      list.sources = Kokkos::subview(sources, std::make_pair(host_bases[k], host_bases[k + 1]));
      orders.push_back(classes.order[k]);
      lists.push_back(list);
    }
  }

 private:
  static void grow(Kokkos::View<int*, Memory>& v, int n, const char* label) {
    if (static_cast<int>(v.extent(0)) >= n) return;
    v = Kokkos::View<int*, Memory>();
    v = Kokkos::View<int*, Memory>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                                   n + n / 4 + 16);
  }
};

}  // namespace kfmm
