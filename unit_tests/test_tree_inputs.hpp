// Inputs and slow, obviously right host references for the tree tests.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kfmm/tree/dual_tree_walk.hpp"
#include "kfmm/tree/octree.hpp"

namespace kfmm_tree_test {

/// A deterministic generator (SplitMix64) so inputs are identical everywhere.
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t bits() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(bits() >> 11) * 0x1.0p-53; }
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
};

/// Particles on the host, double precision, caller order.
struct Input {
  std::string name;
  std::vector<double> x;  // 3 n
  std::vector<double> m;  // n
  int size() const { return static_cast<int>(m.size()); }
};

inline Input make_input(const std::string& name, int n, std::uint64_t seed = 1) {
  Rng rng(seed);
  Input in;
  in.name = name;
  in.x.resize(3 * static_cast<size_t>(n));
  in.m.resize(n);
  for (int i = 0; i < n; ++i) {
    double p[3] = {rng.uniform(), rng.uniform(), rng.uniform()};
    double mass = rng.uniform(0.5, 1.5) / std::max(n, 1);
    if (name == "plummer") {
      // Plummer radii (a = 1) with a random direction, truncated at r = 30.
      double r;
      do {
        r = 1.0 / std::sqrt(std::pow(rng.uniform(1e-10, 1.0), -2.0 / 3.0) - 1.0);
      } while (r > 30);
      const double c = rng.uniform(-1, 1), phi = rng.uniform(0, 6.283185307179586);
      const double s = std::sqrt(1 - c * c);
      p[0] = r * s * std::cos(phi);
      p[1] = r * s * std::sin(phi);
      p[2] = r * c;
    } else if (name == "line") {
      p[1] = p[2] = 0;  // on the x axis
    } else if (name == "plane") {
      p[2] = 0.25;
    } else if (name == "coincident") {
      if (i % 4 != 3) p[0] = p[1] = p[2] = 0.5;  // three quarters share one point
    } else if (name == "offset") {
      for (double& v : p) v += 1e6;  // far from the origin, unit extent
    } else if (name == "mixed_sign") {
      mass = (i % 3 == 0 ? -1.0 : 1.0) * rng.uniform(0.5, 1.5);
    } else if (name == "zero_mass") {
      mass = 0;
    } else if (name == "two_clusters") {
      const double shift = (i % 2) ? 1000.0 : 0.0;
      for (double& v : p) v = v * 1e-3 + shift;
    }
    for (int a = 0; a < 3; ++a) in.x[3 * i + a] = p[a];
    in.m[i] = mass;
  }
  return in;
}

/// The named inputs every structural test runs on (small: the checks are quadratic).
inline std::vector<Input> standard_inputs() {
  std::vector<Input> v;
  for (const char* name : {"uniform", "plummer", "line", "plane", "coincident", "offset", "mixed_sign",
                           "zero_mass", "two_clusters"})
    v.push_back(make_input(name, 700, 7));
  v.push_back(make_input("uniform", 0));
  v.push_back(make_input("uniform", 1));
  v.push_back(make_input("uniform", 2));
  Input two_same = make_input("coincident", 2);
  two_same.name = "two_coincident";
  for (int a = 0; a < 3; ++a) two_same.x[3 + a] = two_same.x[a];
  v.push_back(two_same);
  return v;
}

/// Device Views of an input in Real.
template <class Space, class Real>
struct DeviceInput {
  Kokkos::View<Real* [3], typename Space::memory_space> positions;
  Kokkos::View<Real*, typename Space::memory_space> masses;
  explicit DeviceInput(const Input& in)
      : positions("test::positions", in.size()), masses("test::masses", in.size()) {
    auto hp = Kokkos::create_mirror_view(positions);
    auto hm = Kokkos::create_mirror_view(masses);
    for (int i = 0; i < in.size(); ++i) {
      for (int a = 0; a < 3; ++a) hp(i, a) = static_cast<Real>(in.x[3 * i + a]);
      hm(i) = static_cast<Real>(in.m[i]);
    }
    Kokkos::deep_copy(positions, hp);
    Kokkos::deep_copy(masses, hm);
  }
};

/// Host copy of everything in an Octree.
template <class Real>
struct HostTree {
  int n = 0, num_nodes = 0, num_leaves = 0, num_levels = 0, leaf_size = 0, sorted_levels = 0;
  int max_leaf_particles = 0;
  std::vector<int> level_offsets, permutation, parent, first_child, num_children, level, leaves, begin, end;
  std::vector<kfmm::MortonKey> keys;
  std::vector<Real> positions, masses, centres, radii, node_masses, node_abs_masses;

  template <class Space>
  explicit HostTree(const kfmm::Octree<Space, Real>& t)
      : n(t.num_particles),
        num_nodes(t.num_nodes),
        num_leaves(t.num_leaves),
        num_levels(t.num_levels),
        leaf_size(t.leaf_size),
        sorted_levels(t.sorted_levels),
        max_leaf_particles(t.max_leaf_particles),
        level_offsets(t.level_offsets) {
    auto vec = [](const auto& view) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
      std::vector<typename decltype(h)::non_const_value_type> out;
      for (size_t i = 0; i < h.extent(0); ++i) out.push_back(h(i));
      return out;
    };
    permutation = vec(t.permutation);
    parent = vec(t.parent);
    first_child = vec(t.first_child);
    num_children = vec(t.num_children);
    level = vec(t.level);
    leaves = vec(t.leaves);
    keys = vec(t.keys);
    masses = vec(t.masses);
    radii = vec(t.radii);
    node_masses = vec(t.node_masses);
    node_abs_masses = vec(t.node_abs_masses);
    auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.positions);
    auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.centres);
    auto hr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.ranges);
    for (int i = 0; i < n; ++i)
      for (int a = 0; a < 3; ++a) positions.push_back(hp(i, a));
    for (int k = 0; k < num_nodes; ++k) {
      for (int a = 0; a < 3; ++a) centres.push_back(hc(k, a));
      begin.push_back(hr(k, 0));
      end.push_back(hr(k, 1));
    }
  }
  bool is_leaf(int k) const { return num_children[k] == 0; }
};

/// Host copy of an InteractionList.
struct HostList {
  std::vector<int> targets, offsets, sources;
  template <class M>
  explicit HostList(const kfmm::InteractionList<M>& l) {
    auto t = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), l.targets);
    auto o = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), l.offsets);
    auto s = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), l.sources);
    targets.assign(t.data(), t.data() + t.extent(0));
    offsets.assign(o.data(), o.data() + o.extent(0));
    sources.assign(s.data(), s.data() + s.extent(0));
  }
  long long pairs() const { return offsets.empty() ? 0 : offsets.back(); }
  bool operator==(const HostList& o) const {
    return targets == o.targets && offsets == o.offsets && sources == o.sources;
  }
};

}  // namespace kfmm_tree_test
