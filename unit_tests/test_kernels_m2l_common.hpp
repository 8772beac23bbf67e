// Shared body of the batched M2L tests (test_kernels_m2l_double.cpp, test_kernels_m2l_float.cpp):
// random far lists with empty, one-pair and very long rows and on-axis displacements; every lane and
// kernel variant against a long-double sum of the naive O(p^4) per-pair M2L.
#pragma once

#if defined(__NVCC__)
// The long double reference instantiates kfmm's host-device m2l_naive_pair with long double, which nvcc
// also compiles (unused) for the device, warning that it is double there.
#pragma nv_diag_suppress 20208
#endif

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/operators/m2l.hpp"
#include "kfmm/operators/m2l_pair.hpp"
#include "kfmm/operators/rotation.hpp"
#include "kfmm/operators/solid_harmonics.hpp"

namespace kfmm_test_m2l {

struct FarProblem {
  int order = 0;
  int nodes = 0;
  std::vector<double> centres;     // 3 per node
  std::vector<double> multipoles;  // nc per node
  std::vector<int> targets, offsets{0}, sources;
  int nc() const { return kfmm::num_coefficients(order); }
};

inline double distance(const FarProblem& f, int a, int b) {
  double s = 0;
  for (int c = 0; c < 3; ++c)
    s += (f.centres[3 * a + c] - f.centres[3 * b + c]) * (f.centres[3 * a + c] - f.centres[3 * b + c]);
  return std::sqrt(s);
}

// Nodes 0..3 on the z axis and 4..5 on the x axis (on-axis pairs in both directions), the rest
// uniform in [-1, 1]^3. Multipoles are those of a few positive point masses near each centre.
// Rows: some nodes have no row, some an empty row, some one pair, one a very long row (duplicates
// included), the others a few random sources with |delta| >= 0.3.
inline FarProblem make_problem(int order, int nodes, unsigned seed, bool rounded_to_float) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  FarProblem f;
  f.order = order;
  f.nodes = nodes;
  f.centres.resize(3 * nodes);
  for (int i = 0; i < nodes; ++i)
    for (int c = 0; c < 3; ++c) f.centres[3 * i + c] = u(gen);
  const double axis[6][3] = {{0, 0, -0.9}, {0, 0, 0.8}, {0, 0, 0.1}, {0, 0, -0.4}, {-0.7, 0, 0}, {0.6, 0, 0}};
  for (int i = 0; i < 6 && i < nodes; ++i)
    for (int c = 0; c < 3; ++c) f.centres[3 * i + c] = axis[i][c];
  const int nc = f.nc();
  f.multipoles.resize(static_cast<size_t>(nc) * nodes);
  std::vector<double> R(nc);
  for (int i = 0; i < nodes; ++i) {
    // the multipole of 6 positive point masses within 0.1 of the centre: a realisable expansion
    for (int j = 0; j < 6; ++j) {
      const double mass = 0.5 + 0.5 * std::abs(u(gen));
      kfmm::regular_harmonics(order, 0.058 * u(gen), 0.058 * u(gen), 0.058 * u(gen), R.data());
      for (int c = 0; c < nc; ++c) f.multipoles[static_cast<size_t>(i) * nc + c] += mass * R[c];
    }
  }
  if (rounded_to_float) {
    for (auto& v : f.centres) v = static_cast<float>(v);
    for (auto& v : f.multipoles) v = static_cast<float>(v);
  }
  auto add_row = [&](int t, const std::vector<int>& src) {
    f.targets.push_back(t);
    f.sources.insert(f.sources.end(), src.begin(), src.end());
    f.offsets.push_back(static_cast<int>(f.sources.size()));
  };
  for (int t = 0; t < nodes; ++t) {
    std::vector<int> src;
    if (t < 6) {  // on-axis rows: the other axis nodes (z-axis pairs along +z and -z, x-axis pairs)
      for (int s = 0; s < 6 && s < nodes; ++s)
        if (s != t) src.push_back(s);
    } else if (t % 9 == 1) {
      continue;  // no row
    } else if (t % 9 == 2) {
      // empty row
    } else if (t % 9 == 3) {
      int s = static_cast<int>(gen() % nodes);
      while (s == t || distance(f, s, t) < 0.3) s = static_cast<int>(gen() % nodes);
      src.push_back(s);
    } else if (t == 7) {  // very long row: every far node, then again (duplicates)
      for (int rep = 0; rep < 2; ++rep)
        for (int s = 0; s < nodes; ++s)
          if (s != t && distance(f, s, t) >= 0.3) src.push_back(s);
    } else {
      const int count = 1 + static_cast<int>(gen() % 12);
      while (static_cast<int>(src.size()) < count) {
        const int s = static_cast<int>(gen() % nodes);
        if (s != t && distance(f, s, t) >= 0.3) src.push_back(s);
      }
    }
    add_row(t, src);
  }
  return f;
}

// Rotation-invariant weight of local coefficient (n, m): the normalised coefficients D^{-1} L of
// rotation.hpp are those of an orthonormal basis, so per degree their Euclidean norm is what a rotation
// preserves (raw coefficients of one degree differ by factorial scales).
inline long double local_weight(int n, int m) {
  return static_cast<long double>(kfmm::expansion_inverse_scale(n, m));
}

// Long-double reference: locals(t) = sum over the row of the naive O(p^4) M2L; `magnitude` gets, per
// (target, degree), the sum over the row of the pairs' weighted degree norms (the scale of the round-off
// of a sum of many contributions, which may cancel).
inline std::vector<long double> reference_locals(const FarProblem& f, std::vector<long double>& magnitude) {
  const int nc = f.nc();
  std::vector<long double> L(static_cast<size_t>(nc) * f.nodes, 0.0L);
  magnitude.assign(static_cast<size_t>(f.order + 1) * f.nodes, 0.0L);
  std::vector<long double> M(nc), one(nc);
  for (size_t r = 0; r < f.targets.size(); ++r) {
    const int t = f.targets[r];
    for (int k = f.offsets[r]; k < f.offsets[r + 1]; ++k) {
      const int s = f.sources[k];
      for (int i = 0; i < nc; ++i) M[i] = f.multipoles[static_cast<size_t>(s) * nc + i];
      const long double dx = static_cast<long double>(f.centres[3 * t + 0]) - f.centres[3 * s + 0];
      const long double dy = static_cast<long double>(f.centres[3 * t + 1]) - f.centres[3 * s + 1];
      const long double dz = static_cast<long double>(f.centres[3 * t + 2]) - f.centres[3 * s + 2];
      std::fill(one.begin(), one.end(), 0.0L);
      kfmm::m2l_naive_pair(f.order, M.data(), dx, dy, dz, one.data());
      for (int i = 0; i < nc; ++i) L[static_cast<size_t>(t) * nc + i] += one[i];
      for (int n = 0; n <= f.order; ++n) {
        long double norm2 = 0;
        for (int m = -n; m <= n; ++m) {
          const long double v = one[kfmm::coefficient_index(n, m)] * local_weight(n, m);
          norm2 += v * v;
        }
        magnitude[static_cast<size_t>(t) * (f.order + 1) + n] += std::sqrt(norm2);
      }
    }
  }
  return L;
}

template <class Real, class Space>
struct DeviceFar {
  using Mem = typename Space::memory_space;
  kfmm::InteractionList<Mem> list;
  Kokkos::View<Real* [3], Mem> centres;
  kfmm::ExpansionView<Real, Mem> multipoles, locals;
};

template <class Real, class Space>
DeviceFar<Real, Space> upload(const FarProblem& f) {
  using Mem = typename Space::memory_space;
  DeviceFar<Real, Space> d;
  d.list.targets = kfmm_test::device_ints<Mem>(f.targets, "targets");
  d.list.offsets = kfmm_test::device_ints<Mem>(f.offsets, "offsets");
  d.list.sources = kfmm_test::device_ints<Mem>(f.sources, "sources");
  const int nc = f.nc();
  d.centres = Kokkos::View<Real* [3], Mem>("centres", f.nodes);
  d.multipoles = kfmm::ExpansionView<Real, Mem>("multipoles", f.nodes, nc);
  d.locals = kfmm::ExpansionView<Real, Mem>("locals", f.nodes, nc);
  auto hc = Kokkos::create_mirror_view(d.centres);
  auto hm = Kokkos::create_mirror_view(d.multipoles);
  for (int i = 0; i < f.nodes; ++i) {
    for (int c = 0; c < 3; ++c) hc(i, c) = static_cast<Real>(f.centres[3 * i + c]);
    for (int j = 0; j < nc; ++j) hm(i, j) = static_cast<Real>(f.multipoles[static_cast<size_t>(i) * nc + j]);
  }
  Kokkos::deep_copy(d.centres, hc);
  Kokkos::deep_copy(d.multipoles, hm);
  return d;
}

// Worst over targets and degrees n of |L_n - ref_n| / magnitude_n in the weighted (rotation-invariant)
// degree norm: the error of each degree of each local relative to the size of the terms summed into it.
template <class LocalView>
double worst_relative_error(const LocalView& locals, const std::vector<long double>& ref,
                            const std::vector<long double>& magnitude, int order) {
  auto h = kfmm_test::to_host(locals);
  const int nc = kfmm::num_coefficients(order);
  double worst = 0;
  for (size_t t = 0; t < h.extent(0); ++t) {
    for (int n = 0; n <= order; ++n) {
      long double err2 = 0;
      for (int m = -n; m <= n; ++m) {
        const int i = kfmm::coefficient_index(n, m);
        const long double v = h(t, i);
        if (!std::isfinite(static_cast<double>(v))) return INFINITY;
        const long double e = (v - ref[t * nc + i]) * local_weight(n, m);
        err2 += e * e;
      }
      const long double scale = magnitude[t * (order + 1) + n];
      const long double err = std::sqrt(err2);
      worst = std::max(worst, static_cast<double>(scale > 0 ? err / scale : err));
    }
  }
  return worst;
}

// The same measure between two computed results (fused against baseline).
template <class LocalView>
double worst_relative_difference(const LocalView& a, const LocalView& b,
                                 const std::vector<long double>& magnitude, int order) {
  auto hb = kfmm_test::to_host(b);
  std::vector<long double> ref(hb.size());
  for (size_t t = 0; t < hb.extent(0); ++t)
    for (size_t i = 0; i < hb.extent(1); ++i) ref[t * hb.extent(1) + i] = hb(t, i);
  return worst_relative_error(a, ref, magnitude, order);
}

template <class View>
bool bitwise_equal(const View& a, const View& b) {
  auto ha = kfmm_test::to_host(a);
  auto hb = kfmm_test::to_host(b);
  return ha.size() == hb.size() && std::equal(ha.data(), ha.data() + ha.size(), hb.data());
}

// The lane / kernel variants every order is checked with.
template <class Real, class Space>
std::vector<std::pair<std::string, kfmm::M2LOptions>> variants(const Space& space, int order) {
  std::vector<std::pair<std::string, kfmm::M2LOptions>> v;
  kfmm::M2LOptions o;
  v.emplace_back("automatic", o);
  o.lane = kfmm::M2LLane::fused;
  v.emplace_back("fused", o);
  o.pairs_per_chunk = 3;  // long rows split into many chunks
  v.emplace_back("fused split rows", o);
  const int team = std::min(kfmm::compat::concurrency(space), 3);
  o.team_size = team;  // the GPU (team) kernel, on this backend
  o.accumulator = kfmm::M2LAccumulator::scratch;
  v.emplace_back("fused team scratch", o);
  // the register accumulator needs a compile-time order (2..10 on GPUs, 4 where the team kernel is a
  // host test path) whose local fits in m2l_register_bytes (m2l_fused.hpp)
  const bool registers =
      (kfmm::detail::is_host_execution_space<Space>
           ? order == 4
           : order >= kfmm::detail::min_static_order && order <= kfmm::detail::max_static_order) &&
      kfmm::num_coefficients(order) * sizeof(Real) <= kfmm::detail::m2l_register_bytes;
  if (registers) {
    o.accumulator = kfmm::M2LAccumulator::registers;
    o.pairs_per_chunk = 0;
    v.emplace_back("fused team registers", o);
  }
  kfmm::M2LOptions b;
  b.lane = kfmm::M2LLane::baseline;
  v.emplace_back("baseline", b);
  b.baseline_batch = 7;  // rows spanning batches
  v.emplace_back("baseline small batches", b);
#if defined(KFMM_HAVE_KOKKOSKERNELS)
  b.baseline_kokkos_kernels = true;
  v.emplace_back("baseline kokkos kernels", b);
#endif
  return v;
}

template <class Real, class Space>
void check_against_naive(int order, int nodes, double tolerance) {
  Space space;
  const FarProblem f = make_problem(order, nodes, 1234 + order, std::is_same_v<Real, float>);
  std::vector<long double> magnitude;
  const auto ref = reference_locals(f, magnitude);
  auto d = upload<Real, Space>(f);
  std::vector<kfmm::ExpansionView<Real, typename Space::memory_space>> results;
  for (const auto& [name, options] : variants<Real>(space, order)) {
    INFO("order " << order << ", variant " << name);
    Kokkos::deep_copy(d.locals, Real(0));
    kfmm::m2l(space, order, d.list, d.centres, d.multipoles, d.locals, options);
    CHECK(worst_relative_error(d.locals, ref, magnitude, order) < tolerance);
    kfmm::ExpansionView<Real, typename Space::memory_space> copy("copy", f.nodes, f.nc());
    Kokkos::deep_copy(copy, d.locals);
    results.push_back(copy);
  }
  // determinism: the default lane again, bitwise equal
  Kokkos::deep_copy(d.locals, Real(0));
  kfmm::m2l(space, order, d.list, d.centres, d.multipoles, d.locals);
  CHECK(bitwise_equal(d.locals, results.front()));
  // rows longer than (p+1)^2: one extra column (rows not 16-byte aligned: scalar row reads) and the
  // solver's kfmm::expansion_row_length (16-byte rows: the GPU M2L reads them in 16-byte blocks): the
  // same bits, and the extra columns are left alone
  for (const int row : {f.nc() + 1, kfmm::expansion_row_length(order)}) {
    if (row == f.nc()) continue;
    INFO("order " << order << ", row length " << row);
    using Mem = typename Space::memory_space;
    const int nc = f.nc();
    const auto head = std::make_pair(0, nc);
    kfmm::ExpansionView<Real, Mem> mp("multipoles_padded", f.nodes, row), lp("locals_padded", f.nodes, row);
    Kokkos::deep_copy(mp, Real(1e30));  // poisoned extra multipole columns must not be used
    Kokkos::deep_copy(Kokkos::subview(mp, Kokkos::ALL(), head), d.multipoles);
    Kokkos::deep_copy(lp, Real(7));
    Kokkos::deep_copy(Kokkos::subview(lp, Kokkos::ALL(), head), Real(0));
    kfmm::m2l(space, order, d.list, d.centres, mp, lp);
    kfmm::ExpansionView<Real, Mem> packed("packed", f.nodes, nc);
    Kokkos::deep_copy(packed, Kokkos::subview(lp, Kokkos::ALL(), head));
    CHECK(bitwise_equal(packed, results.front()));
    auto hl = kfmm_test::to_host(lp);
    bool untouched = true;
    for (int i = 0; i < f.nodes; ++i)
      for (int e = nc; e < row; ++e) untouched = untouched && hl(i, e) == Real(7);
    CHECK(untouched);
  }
  // baseline again, bitwise equal
  kfmm::M2LOptions b;
  b.lane = kfmm::M2LLane::baseline;
  Kokkos::deep_copy(d.locals, Real(0));
  kfmm::m2l(space, order, d.list, d.centres, d.multipoles, d.locals, b);
  const auto v = variants<Real>(space, order);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].first == "baseline") CHECK(bitwise_equal(d.locals, results[i]));
  // fused == baseline, directly
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = 0; j < v.size(); ++j)
      if (v[i].first == "fused" && v[j].first == "baseline") {
        INFO("order " << order << ": fused against baseline");
        CHECK(worst_relative_difference(results[i], results[j], magnitude, order) < tolerance);
      }
}

// A list large enough that a scan block of a GPU holds many more (coefficient, pair) elements than
// threads (here ~160k pairs x 25 coefficients; Kokkos' CUDA scan then accumulates strided elements per
// thread, which broke the earlier non-commutative segmented operator): both lanes against the naive sum.
template <class Real, class Space>
void check_large_list(double tolerance) {
  Space space;
  const int order = 4;
  const FarProblem f = make_problem(order, 30000, 99, std::is_same_v<Real, float>);
  REQUIRE(static_cast<long long>(f.sources.size()) * f.nc() > 3000000);  // > 16384 blocks x 128
  std::vector<long double> magnitude;
  const auto ref = reference_locals(f, magnitude);
  auto d = upload<Real, Space>(f);
  for (auto lane : {kfmm::M2LLane::fused, kfmm::M2LLane::baseline}) {
    INFO("lane " << kfmm::to_string(lane));
    kfmm::M2LOptions o;
    o.lane = lane;
    Kokkos::deep_copy(d.locals, Real(0));
    kfmm::m2l(space, order, d.list, d.centres, d.multipoles, d.locals, o);
    CHECK(worst_relative_error(d.locals, ref, magnitude, order) < tolerance);
  }
}

template <class Real, class Space>
void check_refusals() {
  using Mem = typename Space::memory_space;
  Space space;
  const FarProblem f = make_problem(4, 20, 5, false);
  auto d = upload<Real, Space>(f);
  CHECK_THROWS_AS(kfmm::m2l(space, 5, d.list, d.centres, d.multipoles, d.locals), kfmm::Error);
  CHECK_THROWS_AS(kfmm::m2l(space, -1, d.list, d.centres, d.multipoles, d.locals), kfmm::Error);
  CHECK_THROWS_AS(kfmm::m2l(space, kfmm::max_order + 1, d.list, d.centres, d.multipoles, d.locals),
                  kfmm::Error);
  kfmm::ExpansionView<Real, Mem> short_locals("short", f.nodes - 1, f.nc());
  CHECK_THROWS_AS(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, short_locals), kfmm::Error);
  kfmm::M2LOptions bad;
  bad.lane = static_cast<kfmm::M2LLane>(7);
  CHECK_THROWS_AS(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, bad), kfmm::Error);
  kfmm::M2LOptions huge;
  huge.lane = kfmm::M2LLane::fused;
  huge.team_size = 1 << 20;
  CHECK_THROWS_AS(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, huge), kfmm::Error);
  kfmm::M2LOptions negative;
  negative.pairs_per_chunk = -1;
  CHECK_THROWS_AS(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, negative), kfmm::Error);
  // the register accumulator needs a compile-time order: refused, not replaced, at order 12
  const FarProblem g = make_problem(12, 10, 6, false);
  auto e = upload<Real, Space>(g);
  kfmm::M2LOptions regs;
  regs.lane = kfmm::M2LLane::fused;
  regs.team_size = 1;
  regs.accumulator = kfmm::M2LAccumulator::registers;
  CHECK_THROWS_AS(kfmm::m2l(space, 12, e.list, e.centres, e.multipoles, e.locals, regs), kfmm::Error);
  // ... and a local that fits in m2l_register_bytes: 81 coefficients at order 8 do not, in float or double
  const FarProblem h8 = make_problem(8, 10, 7, false);
  auto e8 = upload<Real, Space>(h8);
  CHECK_THROWS_AS(kfmm::m2l(space, 8, e8.list, e8.centres, e8.multipoles, e8.locals, regs), kfmm::Error);
  // an option of the other lane would be ignored: refused, also where lane = automatic chose the lane
  {
    using Catch::Matchers::ContainsSubstring;
    kfmm::M2LOptions o;
    o.lane = kfmm::M2LLane::baseline;
    o.team_size = 1;
    CHECK_THROWS_WITH(
        kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, o),
        ContainsSubstring("are options of the fused lane; the baseline lane takes none of them"));
    o.team_size = 0;
    o.pairs_per_chunk = 8;
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, o),
                      ContainsSubstring("pairs_per_chunk = 8"));
    o.pairs_per_chunk = 0;
    o.accumulator = kfmm::M2LAccumulator::scratch;
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, o),
                      ContainsSubstring("accumulator = scratch are options of the fused lane"));
    kfmm::M2LOptions f;
    f.baseline_batch = 5;  // lane automatic: the fused lane on every backend
    CHECK_THROWS_WITH(
        kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, f),
        ContainsSubstring("baseline_batch = 5 and baseline_kokkos_kernels = false are options of the "
                          "baseline lane; the fused lane (chosen by lane = automatic) takes neither"));
    f.baseline_batch = 0;
    f.accumulator = static_cast<kfmm::M2LAccumulator>(9);
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, f),
                      ContainsSubstring("unknown accumulator value 9"));
    // on a host backend team_size 0 runs the one-thread-per-chunk kernel, which has no accumulator
    f.accumulator = kfmm::M2LAccumulator::registers;
    if (kfmm::detail::is_host_execution_space<Space>) {
      CHECK_THROWS_WITH(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, f),
                        ContainsSubstring("accumulator = registers places the team kernel's partial locals"));
    } else {  // (GPUs run the team kernel by default; its accuracy is checked in variants())
      CHECK_NOTHROW(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, f));
    }
  }
#if !defined(KFMM_HAVE_KOKKOSKERNELS)
  kfmm::M2LOptions kk;
  kk.lane = kfmm::M2LLane::baseline;
  kk.baseline_kokkos_kernels = true;
  CHECK_THROWS_AS(kfmm::m2l(space, 4, d.list, d.centres, d.multipoles, d.locals, kk), kfmm::Error);
#endif
  CHECK_THROWS_AS(kfmm::m2l_lane_from_string("fastest"), kfmm::Error);
  CHECK(kfmm::m2l_lane_from_string(kfmm::to_string(kfmm::M2LLane::baseline)) == kfmm::M2LLane::baseline);
  // offsets that start elsewhere than 0 or run backwards: refused on both lanes (the baseline lane would
  // write its per-pair rows past their buffer)
  for (const std::vector<int>& offsets : {std::vector<int>{0, 10, 5}, std::vector<int>{2, 3, 5}}) {
    kfmm::InteractionList<Mem> backwards;
    backwards.targets = kfmm_test::device_ints<Mem>({0, 1}, "targets");
    backwards.offsets = kfmm_test::device_ints<Mem>(offsets, "offsets");
    backwards.sources = kfmm_test::device_ints<Mem>({2, 3, 4, 5, 6}, "sources");
    for (auto lane : {kfmm::M2LLane::fused, kfmm::M2LLane::baseline}) {
      kfmm::M2LOptions o;
      o.lane = lane;
      CHECK_THROWS_WITH(
          kfmm::m2l(space, 4, backwards, d.centres, d.multipoles, d.locals, o),
          Catch::Matchers::ContainsSubstring("far_list.offsets must start at 0 and never decrease"));
    }
  }
  // node ids outside [0, nodes) and a node that is the target of two rows (two teams would add to its
  // local at once): refused on both lanes
  const int nodes = static_cast<int>(d.centres.extent(0));
  const auto two_rows = [](std::vector<int> targets, std::vector<int> sources) {
    kfmm::InteractionList<Mem> l;
    l.targets = kfmm_test::device_ints<Mem>(targets, "targets");
    l.offsets = kfmm_test::device_ints<Mem>({0, 1, 2}, "offsets");
    l.sources = kfmm_test::device_ints<Mem>(sources, "sources");
    return l;
  };
  const std::string ids = " are not node ids in [0, " + std::to_string(nodes) + ")";
  for (auto lane : {kfmm::M2LLane::fused, kfmm::M2LLane::baseline}) {
    using Catch::Matchers::ContainsSubstring;
    kfmm::M2LOptions o;
    o.lane = lane;
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, two_rows({0, nodes}, {1, 2}), d.centres, d.multipoles, d.locals, o),
                      ContainsSubstring("m2l: 1 of the 2 targets of far_list" + ids));
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, two_rows({0, 1}, {-1, 2}), d.centres, d.multipoles, d.locals, o),
                      ContainsSubstring("m2l: 1 of the 2 sources of far_list" + ids));
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, two_rows({3, 3}, {1, 2}), d.centres, d.multipoles, d.locals, o),
                      ContainsSubstring("m2l: 1 node is the target of more than one row of far_list"));
    CHECK_NOTHROW(kfmm::m2l(space, 4, two_rows({3, 4}, {1, 2}), d.centres, d.multipoles, d.locals, o));
    // fewer sources than the last offset says: refused before any kernel reads past them
    kfmm::InteractionList<Mem> short_sources = two_rows({3, 4}, {1, 2});
    short_sources.sources = kfmm_test::device_ints<Mem>({1}, "sources");
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, short_sources, d.centres, d.multipoles, d.locals, o),
                      ContainsSubstring("m2l: far_list.sources has 1 entries, fewer than its 2 pairs"));
  }
  // A list of 12,000 pairs (one row per node, list_checks.hpp's pass: eight indices a thread, strided by the
  // thread count on GPUs): one bad source near its end, then one repeated target at its end, are found.
  {
    using Catch::Matchers::ContainsSubstring;
    std::vector<int> targets, offsets{0}, sources;
    const int per_row = (12000 + nodes - 1) / nodes;
    for (int t = 0; t < nodes; ++t) {
      targets.push_back(t);
      for (int k = 0; k < per_row; ++k) sources.push_back((t + 1 + k) % nodes);
      offsets.push_back(static_cast<int>(sources.size()));
    }
    const auto list_of = [&](const std::vector<int>& tg, const std::vector<int>& src) {
      kfmm::InteractionList<Mem> l;
      l.targets = kfmm_test::device_ints<Mem>(tg, "targets");
      l.offsets = kfmm_test::device_ints<Mem>(offsets, "offsets");
      l.sources = kfmm_test::device_ints<Mem>(src, "sources");
      return l;
    };
    std::vector<int> bad_source = sources;
    bad_source[bad_source.size() - 3] = nodes;
    CHECK_THROWS_WITH(
        kfmm::m2l(space, 4, list_of(targets, bad_source), d.centres, d.multipoles, d.locals),
        ContainsSubstring("m2l: 1 of the " + std::to_string(sources.size()) + " sources of far_list" + ids));
    std::vector<int> repeated = targets;
    repeated.back() = 0;
    CHECK_THROWS_WITH(kfmm::m2l(space, 4, list_of(repeated, sources), d.centres, d.multipoles, d.locals),
                      ContainsSubstring("m2l: 1 node is the target of more than one row of far_list"));
  }
  // an empty list and a list with only empty rows do nothing
  kfmm::InteractionList<Mem> empty;
  empty.offsets = Kokkos::View<int*, Mem>("offsets", 1);
  Kokkos::deep_copy(d.locals, Real(1));
  kfmm::m2l(space, 4, empty, d.centres, d.multipoles, d.locals);
  kfmm::InteractionList<Mem> rows;
  rows.targets = kfmm_test::device_ints<Mem>({0, 1, 2}, "targets");
  rows.offsets = Kokkos::View<int*, Mem>("offsets", 4);
  for (auto lane : {kfmm::M2LLane::fused, kfmm::M2LLane::baseline}) {
    kfmm::M2LOptions o;
    o.lane = lane;
    kfmm::m2l(space, 4, rows, d.centres, d.multipoles, d.locals, o);
  }
  auto h = kfmm_test::to_host(d.locals);
  bool all_one = true;
  for (size_t i = 0; i < h.extent(0); ++i)
    for (size_t j = 0; j < h.extent(1); ++j) all_one = all_one && h(i, j) == Real(1);
  CHECK(all_one);
}

}  // namespace kfmm_test_m2l
