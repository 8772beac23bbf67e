// The whole force evaluation (issue 7, item 1): kfmm::Solver::evaluate, tree build included, over a
// sweep of particle counts, distributions, accuracies (tolerance, or order and theta), leaf sizes and
// precisions. Per case it reports the median time per evaluation (fenced, no stage fences), the time of
// every stage (medians of further evaluations with Options::timing: CUDA events on GPU builds, a fence
// per stage on host builds; stage_events says which), interaction counts per particle, kernel
// launches per evaluation (the first, and a steady-state one), on GPU builds the host round trips of a
// steady-state evaluation (device-to-host copies, counted through Kokkos Tools), peak device memory per
// particle, and the relative L2 error of the accelerations against the fp64 direct sum on 4096 sampled
// targets.
//
//   bench_solver [--tiny] [--sweep FILE] [--memory_breakdown] [--baseline FILE] [--write_baseline FILE]
//                [--gpu_trace FILE] [--benchmark_out=out.json --benchmark_out_format=json]
//
// --memory_breakdown prints, after the benchmarks, per case the allocations of the memory space live at
// the peak of the solver's evaluations, by label (bytes per particle; the inputs and outputs are "bench::*"),
// adding up to the bytes_per_particle counter.
//
// --gpu_trace FILE (CUDA builds with CUPTI) writes every kernel, copy and fill of the run to FILE, a CSV
// that scripts/nsys_gaps.py reads: the GPU's idle time inside each evaluation (perf_tests/gpu_trace.hpp).
//
// --write_baseline FILE writes the figures of the cases that do not depend on the machine's speed (work
// per particle, error, launches, round trips, memory) to FILE; --baseline FILE compares the run with such
// a file and exits with status 3 if a figure rose above its bound (perf_tests/work_baseline.hpp).
//
// The sweep file is flat YAML, one list per key (every combination runs; `order` and `theta` replace
// `tolerance` when given):
//   n: [100000, 1000000]
//   distribution: [plummer]          # uniform | plummer | clustered | disc
//   tolerance: [1.0e-4, 3.0e-5, 5.0e-8]
//   order: [4]                        # optional, with theta
//   theta: [0.6]
//   leaf_size: [0]                    # 0 = the solver's choice
//   precision: [fp64, fp32]
//   softening: [0]
//   concentration_ratio: [0.1]        # the walk's rule for compact masses (0: off)
//   list_build: [automatic]           # automatic | sort | scatter (kfmm::ListBuild; names get /lists:X)
//   targets: 4096
// or, instead of the lists n, tolerance, order, theta, leaf_size and precision, explicit points (one line
// each; every distribution, softening, concentration_ratio and list_build listed runs each point):
//   case: [200000, 7, 0.72, 64, fp32]  # n, order, theta, leaf_size, precision
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark_common.hpp"
#include "gpu_trace.hpp"
#include "kfmm/kfmm.hpp"
#include "work_baseline.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Memory = Space::memory_space;

// ------------------------------------------------------------------ sweep description
struct Sweep {
  std::vector<double> n{100000, 1000000};
  std::vector<std::string> distribution{"plummer"};
  std::vector<double> tolerance{1e-4, 3e-5, 5e-8};
  std::vector<double> order, theta;
  std::vector<double> leaf_size{0};
  std::vector<std::string> precision{"fp64"};
  std::vector<double> softening{0};
  std::vector<double> concentration_ratio{kfmm::Options().concentration_ratio};
  std::vector<kfmm::ListBuild> list_build{kfmm::ListBuild::automatic};
  int targets = 4096;
  int stage_repetitions = 5;  ///< evaluations whose stage times give the medians (after two warm-ups)
  struct Point {
    int n, order;
    double theta;
    int leaf_size;
    std::string precision;
  };
  std::vector<Point> cases;  ///< explicit points (`case:` lines), replacing the product of the lists
};

Sweep tiny_sweep() {
  Sweep s;
  s.n = {3000};
  s.distribution = {"plummer", "uniform"};
  s.tolerance = {1e-4, 1e-7};
  s.precision = {"fp64", "fp32"};
  s.targets = 512;
  return s;
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\"'");
  const auto e = s.find_last_not_of(" \t\r\"'");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

/// Reads the flat-YAML sweep file (`key: [a, b]` or `key: a` per line, # comments).
Sweep read_sweep(const std::string& path) {
  std::ifstream in(path);
  kfmm::require(static_cast<bool>(in), "bench_solver: cannot open sweep file '", path, "'");
  Sweep s;
  std::string line;
  int number = 0;
  std::vector<std::string> product_keys;  // keys of the product that `case:` lines replace
  while (std::getline(in, line)) {
    ++number;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    if (trim(line).empty()) continue;
    const auto colon = line.find(':');
    kfmm::require(colon != std::string::npos, path, ":", number,
                  ": expected 'key: value' or 'key: [values]'");
    const std::string key = trim(line.substr(0, colon));
    std::string value = trim(line.substr(colon + 1));
    if (!value.empty() && value.front() == '[') {
      kfmm::require(value.back() == ']', path, ":", number, ": unterminated list");
      value = value.substr(1, value.size() - 2);
    }
    std::vector<std::string> items;
    std::stringstream ss(value);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!trim(item).empty()) items.push_back(trim(item));
    }
    auto numbers = [&]() {
      std::vector<double> v;
      for (const auto& t : items) {
        char* end = nullptr;
        const double x = std::strtod(t.c_str(), &end);
        kfmm::require(end != t.c_str() && *end == '\0' && std::isfinite(x), path, ":", number, ": key '", key,
                      "': '", t, "' is not a number");
        v.push_back(x);
      }
      return v;
    };
    if (key == "n" || key == "tolerance" || key == "order" || key == "theta" || key == "leaf_size" ||
        key == "precision") {
      product_keys.push_back(key);
    }
    if (key == "case") {
      kfmm::require(items.size() == 5, path, ":", number,
                    ": a case is [n, order, theta, leaf_size, precision], got ", items.size(), " values");
      const std::string precision = items[4];
      kfmm::require(precision == "fp32" || precision == "fp64", path, ":", number, ": precision '", precision,
                    "' is neither fp32 nor fp64");
      items.pop_back();
      const std::vector<double> v = numbers();
      kfmm::require(v[0] >= 1 && v[0] == std::floor(v[0]), path, ":", number, ": n = ", v[0],
                    " is not a positive integer");
      kfmm::require(v[1] >= 0 && v[1] == std::floor(v[1]), path, ":", number, ": order = ", v[1],
                    " is not a non-negative integer");
      kfmm::require(v[3] >= 0 && v[3] == std::floor(v[3]), path, ":", number, ": leaf_size = ", v[3],
                    " is not a non-negative integer");
      s.cases.push_back(
          {static_cast<int>(v[0]), static_cast<int>(v[1]), v[2], static_cast<int>(v[3]), precision});
    } else if (key == "n") {
      s.n = numbers();
    } else if (key == "distribution") {
      s.distribution = items;
    } else if (key == "tolerance") {
      s.tolerance = numbers();
    } else if (key == "order") {
      s.order = numbers();
    } else if (key == "theta") {
      s.theta = numbers();
    } else if (key == "leaf_size") {
      s.leaf_size = numbers();
    } else if (key == "precision") {
      s.precision = items;
    } else if (key == "softening") {
      s.softening = numbers();
    } else if (key == "concentration_ratio") {
      s.concentration_ratio = numbers();
      for (double r : s.concentration_ratio) {
        kfmm::require(r >= 0 && r <= 1, path, ":", number, ": concentration_ratio ", r, " is outside [0, 1]");
      }
    } else if (key == "list_build") {
      s.list_build.clear();
      for (const auto& name : items) {
        kfmm::ListBuild build{};
        kfmm::require(kfmm::list_build_from_string(name, build), path, ":", number, ": list_build '", name,
                      "' is not automatic, sort or scatter");
        s.list_build.push_back(build);
      }
    } else if (key == "targets") {
      s.targets = static_cast<int>(numbers().at(0));
    } else if (key == "stage_repetitions") {
      s.stage_repetitions = static_cast<int>(numbers().at(0));
      kfmm::require(s.stage_repetitions >= 1, path, ":", number, ": stage_repetitions must be >= 1");
    } else {
      kfmm::require(false, path, ":", number, ": unknown key '", key,
                    "' (known: n, distribution, tolerance, order, theta, leaf_size, precision, softening, "
                    "concentration_ratio, list_build, targets, stage_repetitions, case)");
    }
  }
  kfmm::require(s.order.empty() == s.theta.empty(), path, ": give both order and theta, or neither");
  kfmm::require(s.cases.empty() || product_keys.empty(), path,
                ": 'case' lines replace the lists n, tolerance, ",
                "order, theta, leaf_size and precision; this file also gives '",
                product_keys.empty() ? std::string() : product_keys.front(), "'");
  return s;
}

// ------------------------------------------------------------------ Kokkos Tools counters
// Memory counts only allocations in the solver's memory space (on a GPU build: device memory, not the
// host mirrors of the inputs). With --memory_breakdown the live allocations at the peak are kept by label.
struct ToolCounters {
  long long launches = 0;
  long long copies_to_host = 0;  // device-to-host deep copies: each is a host round trip (the host waits)
  long long live_bytes = 0, peak_bytes = 0;
  bool breakdown = false;
  std::map<const void*, std::pair<std::string, long long>> live;  // (only with breakdown)
  std::map<std::string, long long> at_peak;                       // label -> bytes at the peak
  long long freed_earlier = 0;          // bytes freed in this case that were allocated before it
  long long freed_earlier_at_peak = 0;  // (e.g. Kokkos' internal scratch, replaced by a larger one)
};
ToolCounters g_tools;
// Allocation callbacks can come from several threads at once: a View whose last copy lives in a functor
// is freed on the host thread that drops that copy (OpenMP workers too). Unguarded, the breakdown's maps
// were corrupted (heap-corruption aborts in ~4 % of two-thread --memory_breakdown runs).
std::mutex g_tools_mutex;

void on_begin_kernel(const char*, uint32_t, uint64_t*) {
  ++g_tools.launches;
}
bool counted(const Kokkos_Profiling_SpaceHandle& handle) {
  return std::strcmp(handle.name, Memory::name()) == 0;
}
/// True when the solver's memory is not the host's (a GPU build): then copies from it to the host are
/// host round trips.
bool device_memory() {
  return std::strcmp(Memory::name(), Kokkos::HostSpace::name()) != 0;
}
void on_begin_deep_copy(Kokkos_Profiling_SpaceHandle dst, const char*, const void*,
                        Kokkos_Profiling_SpaceHandle src, const char*, const void*, uint64_t) {
  if (device_memory() && counted(src) && std::strcmp(dst.name, Kokkos::HostSpace::name()) == 0)
    ++g_tools.copies_to_host;
}
void on_allocate(Kokkos_Profiling_SpaceHandle handle, const char* label, const void* ptr, uint64_t size) {
  if (!counted(handle)) return;
  const std::lock_guard<std::mutex> lock(g_tools_mutex);
  g_tools.live_bytes += static_cast<long long>(size);
  if (g_tools.breakdown) g_tools.live[ptr] = {label, static_cast<long long>(size)};
  if (g_tools.live_bytes > g_tools.peak_bytes) {
    g_tools.peak_bytes = g_tools.live_bytes;
    if (g_tools.breakdown) {
      g_tools.at_peak.clear();
      for (const auto& entry : g_tools.live) g_tools.at_peak[entry.second.first] += entry.second.second;
      g_tools.freed_earlier_at_peak = g_tools.freed_earlier;
    }
  }
}
void on_deallocate(Kokkos_Profiling_SpaceHandle handle, const char*, const void* ptr, uint64_t size) {
  if (!counted(handle)) return;
  const std::lock_guard<std::mutex> lock(g_tools_mutex);
  g_tools.live_bytes -= static_cast<long long>(size);
  if (g_tools.breakdown && g_tools.live.erase(ptr) == 0)
    g_tools.freed_earlier += static_cast<long long>(size);
}
/// The gated figures of every case (work_baseline.hpp), by name; the last run of a case is kept, as Google
/// Benchmark reports its counters. g_case_order: the names in the order the cases first ran.
std::map<std::string, kfmm_bench::CaseFigures> g_figures;
std::vector<std::string> g_case_order;

/// The breakdown of every case, by name in the order the cases first ran. Google Benchmark may run a case
/// more than once and reports the counters of its last run, so the last run's breakdown is kept, and all
/// are printed after the benchmarks.
std::vector<std::pair<std::string, std::string>> g_breakdowns;

/// Keeps the allocations live at the peak, largest first, in bytes per particle, as the breakdown of
/// case `name`.
void keep_breakdown(const std::string& name, int n) {
  std::vector<std::pair<long long, std::string>> rows;
  for (const auto& entry : g_tools.at_peak) rows.emplace_back(entry.second, entry.first);
  std::sort(rows.rbegin(), rows.rend());
  std::string text = "memory at the peak, " + name + " (bytes per particle, " + Memory::name() + "):\n";
  char line[256];
  const auto add = [&](const std::string& label, long long bytes) {
    std::snprintf(line, sizeof line, "  %-40s %9.1f\n", label.c_str(),
                  static_cast<double>(bytes) / std::max(1, n));
    text += line;
  };
  long long total = 0, small = 0;
  for (const auto& row : rows) {
    total += row.first;
    if (row.first >= n / 10) {
      add(row.second.empty() ? "(no label)" : row.second, row.first);
    } else {
      small += row.first;
    }
  }
  if (small > 0) add("(other, each under 0.1 B per particle)", small);
  if (g_tools.freed_earlier_at_peak > 0) {
    total -= g_tools.freed_earlier_at_peak;
    add("(allocated before the case, freed)", -g_tools.freed_earlier_at_peak);
  }
  add("total (bytes_per_particle)", total);
  for (auto& kept : g_breakdowns) {
    if (kept.first == name) {
      kept.second = text;
      return;
    }
  }
  g_breakdowns.emplace_back(name, text);
}
void install_tools() {
  static bool done = false;
  if (done) return;
  done = true;
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(on_begin_kernel);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(on_begin_kernel);
  Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(on_begin_kernel);
  Kokkos::Tools::Experimental::set_allocate_data_callback(on_allocate);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(on_deallocate);
}

// ------------------------------------------------------------------ cached inputs and references
struct Input {
  kfmm::HostParticles particles;
  std::vector<int> targets;
  /// By (softening, positions rounded to float first): the fp32 cases' second reference is the exact sum
  /// over the positions the float solver is given.
  std::map<std::pair<double, bool>, Kokkos::View<double* [3], Kokkos::HostSpace>> reference;
};

std::map<std::pair<std::string, int>, std::shared_ptr<Input>>& inputs() {
  static std::map<std::pair<std::string, int>, std::shared_ptr<Input>> cache;
  return cache;
}

std::shared_ptr<Input> input(const std::string& distribution, int n, int ntargets) {
  auto& slot = inputs()[{distribution, n}];
  if (!slot) {
    slot = std::make_shared<Input>();
    slot->particles = kfmm::make_distribution(kfmm::distribution_from_string(distribution), n, 2024);
    // Sampled targets (seed 12345), sorted.
    kfmm::Random rng(12345);
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    const int k = std::min(ntargets, n);
    for (int i = 0; i < k; ++i)
      std::swap(all[i], all[i + static_cast<int>(rng.uniform() * (n - i)) % (n - i)]);
    all.resize(k);
    std::sort(all.begin(), all.end());
    slot->targets = all;
  }
  return slot;
}

/// fp64 direct-sum accelerations of the sampled targets (cached per softening); `rounded`: over the
/// positions and masses rounded to float first (what a float solver is given).
const Kokkos::View<double* [3], Kokkos::HostSpace>& reference(Input& in, double softening,
                                                              bool rounded = false) {
  auto it = in.reference.find({softening, rounded});
  if (it != in.reference.end()) return it->second;
  const int n = in.particles.size(), nt = static_cast<int>(in.targets.size());
  Kokkos::View<double*[3], Memory> x("bench::x", n), a("bench::a_ref", nt);
  Kokkos::View<double*, Memory> m("bench::m", n), phi("bench::phi_ref", nt);
  Kokkos::View<int*, Memory> t("bench::targets", nt);
  if (rounded) {
    Kokkos::View<double* [3], Kokkos::HostSpace> rx("bench::rounded_positions", n);
    Kokkos::View<double*, Kokkos::HostSpace> rm("bench::rounded_masses", n);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) rx(i, d) = static_cast<float>(in.particles.positions(i, d));
      rm(i) = static_cast<float>(in.particles.masses(i));
    }
    kfmm::copy_to(x, rx);
    kfmm::copy_to(m, rm);
  } else {
    kfmm::copy_to(x, in.particles.positions);
    kfmm::copy_to(m, in.particles.masses);
  }
  auto th = Kokkos::create_mirror_view(t);
  for (int k = 0; k < nt; ++k) th(k) = in.targets[k];
  Kokkos::deep_copy(t, th);
  kfmm::direct_sum(Space(), x, m, 1.0, softening, a, phi, Kokkos::View<const int*, Memory>(t));
  // A mirror of the device View's layout (LayoutLeft on CUDA) is copied, then indexed as (k, axis).
  auto mirror = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  Kokkos::View<double* [3], Kokkos::HostSpace> host("bench::reference", nt);
  for (int k = 0; k < nt; ++k)
    for (int d = 0; d < 3; ++d) host(k, d) = mirror(k, d);
  return in.reference.emplace(std::make_pair(softening, rounded), host).first->second;
}

// ------------------------------------------------------------------ one case
struct Case {
  std::string distribution;
  int n = 0;
  double tolerance = 0;
  int order = -1;
  double theta = 0;
  int leaf_size = 0;
  bool fp32 = false;
  double softening = 0;
  double concentration_ratio = kfmm::Options().concentration_ratio;
  kfmm::ListBuild list_build = kfmm::ListBuild::automatic;
  int targets = 4096;
  int stage_repetitions = 5;

  std::string name() const {
    char suffix[96] = "";
    if (concentration_ratio != kfmm::Options().concentration_ratio) {
      std::snprintf(suffix, sizeof suffix, "/conc:%g", concentration_ratio);
    }
    if (list_build != kfmm::ListBuild::automatic) {
      std::snprintf(suffix + std::strlen(suffix), sizeof suffix - std::strlen(suffix), "/lists:%s",
                    kfmm::to_string(list_build));
    }
    char buf[256];
    if (order >= 0) {
      std::snprintf(buf, sizeof buf, "solver/%s/n:%d/p:%d/theta:%g/leaf:%s/%s%s%s", distribution.c_str(), n,
                    order, theta, leaf_size > 0 ? std::to_string(leaf_size).c_str() : "auto",
                    fp32 ? "fp32" : "fp64",
                    softening > 0 ? ("/soft:" + std::to_string(softening)).c_str() : "", suffix);
    } else {
      std::snprintf(buf, sizeof buf, "solver/%s/n:%d/tol:%.0e/leaf:%s/%s%s%s", distribution.c_str(), n,
                    tolerance, leaf_size > 0 ? std::to_string(leaf_size).c_str() : "auto",
                    fp32 ? "fp32" : "fp64",
                    softening > 0 ? ("/soft:" + std::to_string(softening)).c_str() : "", suffix);
    }
    return buf;
  }
};

template <class Real>
void run_case(benchmark::State& state, const Case& c) {
  install_tools();
  auto in = input(c.distribution, c.n, c.targets);
  const auto& ref = reference(*in, c.softening);
  kfmm::Options options;
  if (c.order >= 0) {
    options.order = c.order;
    options.theta = c.theta;
  } else {
    options.tolerance = c.tolerance;
  }
  options.leaf_size = c.leaf_size;
  options.softening = c.softening;
  options.concentration_ratio = c.concentration_ratio;
  options.list_build = c.list_build;

  const int n = c.n;
  const long long bytes_before = g_tools.live_bytes;
  g_tools.peak_bytes = g_tools.live_bytes;
  g_tools.at_peak.clear();
  g_tools.live.clear();  // (the breakdown shows this case's allocations only, not the cached inputs)
  g_tools.freed_earlier = g_tools.freed_earlier_at_peak = 0;
  Kokkos::View<Real*[3], Memory> x("bench::positions", n), a("bench::accelerations", n);
  Kokkos::View<Real*, Memory> m("bench::masses", n), phi("bench::potentials", n);
  {
    auto xh = Kokkos::create_mirror_view(x);
    auto mh = Kokkos::create_mirror_view(m);
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < 3; ++d) xh(i, d) = static_cast<Real>(in->particles.positions(i, d));
      mh(i) = static_cast<Real>(in->particles.masses(i));
    }
    Kokkos::deep_copy(x, xh);
    Kokkos::deep_copy(m, mh);
  }
  std::unique_ptr<kfmm::Solver<Space, Real>> solver;
  try {
    solver = std::make_unique<kfmm::Solver<Space, Real>>(options);
  } catch (const kfmm::Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  // Launches of the first evaluation (it also allocates the solver's buffers); its memory peak is read
  // after the steady-state evaluation below, as the peak over all of this solver's evaluations.
  const long long launches_before = g_tools.launches;
  solver->evaluate(x, m, a, phi);
  Space().fence();
  const long long launches = g_tools.launches - launches_before;

  const double median = kfmm_bench::time_fenced(state, Space(), [&] { solver->evaluate(x, m, a, phi); });
  // Launches of a steady-state evaluation (warm workspaces, the walk's planned rounds), as a time step
  // runs them; the first evaluation's count above also holds its counted rounds and their re-runs.
  // Its host round trips: device-to-host copies, counted in this evaluation only (with a deep-copy
  // callback, Kokkos reads every copied View's label from its device-side header: a copy of its own that
  // slowed the timed evaluations by ~5 % on the H200).
  const long long steady_before = g_tools.launches, copies_before = g_tools.copies_to_host;
  Kokkos::Tools::Experimental::set_begin_deep_copy_callback(on_begin_deep_copy);
  solver->evaluate(x, m, a, phi);
  Space().fence();
  Kokkos::Tools::Experimental::set_begin_deep_copy_callback(nullptr);
  const long long launches_steady = g_tools.launches - steady_before;
  const long long round_trips_steady = g_tools.copies_to_host - copies_before;
  // The peak over every evaluation of this solver (the first allocates; the second may grow a buffer once).
  const long long peak = g_tools.peak_bytes - bytes_before;
  if (g_tools.breakdown) keep_breakdown(c.name(), n);

  // Error against the fp64 direct sum (of the double inputs; in float also of the inputs rounded to
  // float, which the solver is given: the difference is what rounding the input costs).
  auto ah = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  const auto error_against = [&](const Kokkos::View<double* [3], Kokkos::HostSpace>& r) {
    long double num = 0, den = 0;
    for (std::size_t k = 0; k < in->targets.size(); ++k) {
      const int i = in->targets[k];
      for (int d = 0; d < 3; ++d) {
        const double diff = static_cast<double>(ah(i, d)) - r(k, d);
        num += diff * diff;
        den += r(k, d) * r(k, d);
      }
    }
    return den > 0 ? static_cast<double>(std::sqrt(num / den)) : 0.0;
  };
  const double error = error_against(ref);
  const double error_rounded_input = c.fp32 ? error_against(reference(*in, c.softening, true)) : error;

  // Per-stage times: medians over stage_repetitions (5) evaluations with Options::timing (CUDA: events,
  // no fences between stages; host backends: a fence per stage), after two warm-up evaluations (the
  // first allocates; the second plans the walk's rounds from the first and may grow its buffers once).
  // ms_timed (the median total of those evaluations) against ms shows what the timing itself costs.
  kfmm::Options timed = options;
  timed.timing = true;
  kfmm::Solver<Space, Real> stage_solver(timed);
  stage_solver.evaluate(x, m, a, phi);
  stage_solver.evaluate(x, m, a, phi);
  std::vector<std::vector<double>> stage_seconds(kfmm::num_stages);
  std::vector<double> timed_totals, stage_sums;
  for (int rep = 0; rep < c.stage_repetitions; ++rep) {
    stage_solver.evaluate(x, m, a, phi);
    const kfmm::Statistics& st = stage_solver.statistics();
    for (int i = 0; i < kfmm::num_stages; ++i) stage_seconds[i].push_back(st.seconds[i]);
    timed_totals.push_back(st.total_seconds);
    stage_sums.push_back(st.stage_sum());
  }
  std::sort(timed_totals.begin(), timed_totals.end());
  std::sort(stage_sums.begin(), stage_sums.end());
  for (int i = 0; i < kfmm::num_stages; ++i) {
    std::sort(stage_seconds[i].begin(), stage_seconds[i].end());
    const double median_stage = stage_seconds[i][stage_seconds[i].size() / 2];
    if (median_stage > 0) {
      state.counters[std::string("ms_") + kfmm::stage_name(static_cast<kfmm::Stage>(i))] = median_stage * 1e3;
    }
  }
  const kfmm::Statistics& s = stage_solver.statistics();
  state.counters["ms"] = median * 1e3;
  state.counters["ms_timed"] = timed_totals[timed_totals.size() / 2] * 1e3;
  state.counters["ms_stage_sum"] = stage_sums[stage_sums.size() / 2] * 1e3;
  state.counters["stage_events"] = s.stage_clock == kfmm::StageClockMethod::device_events ? 1 : 0;
  state.counters["lists_scattered"] = s.list_build == kfmm::ListBuild::scatter ? 1 : 0;
  state.counters["particles_per_second"] = median > 0 ? n / median : 0;
  state.counters["error"] = error;
  if (c.fp32) state.counters["error_rounded_input"] = error_rounded_input;
  state.counters["order"] = s.order;
  state.counters["theta"] = s.theta;
  state.counters["leaf_size"] = s.leaf_size;
  state.counters["nodes"] = s.num_nodes;
  state.counters["leaves"] = s.num_leaves;
  state.counters["m2l_pairs_per_particle"] = static_cast<double>(s.far_pairs) / std::max(1, n);
  state.counters["leaf_pairs"] = static_cast<double>(s.near_pairs);
  state.counters["p2p_per_particle"] = static_cast<double>(s.p2p_interactions) / std::max(1, n);
  state.counters["launches"] = static_cast<double>(launches);
  state.counters["launches_steady"] = static_cast<double>(launches_steady);
  if (device_memory()) state.counters["round_trips_steady"] = static_cast<double>(round_trips_steady);
  state.counters["bytes_per_particle"] = static_cast<double>(peak) / std::max(1, n);
  state.counters["threads"] = kfmm::compat::concurrency(Space());
  if (g_figures.find(c.name()) == g_figures.end()) g_case_order.push_back(c.name());
  kfmm_bench::CaseFigures& figures = g_figures[c.name()];
  figures.clear();
  for (const kfmm_bench::BaselineRule& rule : kfmm_bench::baseline_rules()) {
    const auto it = state.counters.find(rule.figure);
    if (it != state.counters.end()) figures[rule.figure] = it->second.value;
  }
  figures["threads"] = state.counters["threads"].value;
  state.SetLabel(
      c.tolerance > 0 && c.order < 0 ? (error <= c.tolerance ? "within tolerance" : "ABOVE tolerance") : "");
}

void register_case(const Case& c) {
  auto* b = c.fp32 ? benchmark::RegisterBenchmark(c.name().c_str(),
                                                  [c](benchmark::State& st) { run_case<float>(st, c); })
                   : benchmark::RegisterBenchmark(c.name().c_str(),
                                                  [c](benchmark::State& st) { run_case<double>(st, c); });
  b->UseManualTime()->Unit(benchmark::kMillisecond);
  if (kfmm_bench::tiny()) b->Iterations(2);
}

/// Registers case c once per concentration ratio and list build of the sweep.
void register_case_per_ratio(Case c, const Sweep& s) {
  for (double ratio : s.concentration_ratio) {
    for (const kfmm::ListBuild build : s.list_build) {
      c.concentration_ratio = ratio;
      c.list_build = build;
      register_case(c);
    }
  }
}

void register_sweep(const Sweep& s) {
  for (const auto& dist : s.distribution) kfmm::distribution_from_string(dist);  // (refuses unknown names)
  Case common;
  common.targets = s.targets;
  common.stage_repetitions = s.stage_repetitions;
  if (!s.cases.empty()) {  // explicit points
    for (const auto& dist : s.distribution) {
      for (const auto& point : s.cases) {
        for (double soft : s.softening) {
          Case c = common;
          c.distribution = dist;
          c.n = point.n;
          c.order = point.order;
          c.theta = point.theta;
          c.leaf_size = point.leaf_size;
          c.fp32 = point.precision == "fp32";
          c.softening = soft;
          register_case_per_ratio(c, s);
        }
      }
    }
    return;
  }
  std::vector<std::pair<int, double>> accuracy;  // (order, theta) or (-1, tolerance)
  if (!s.order.empty()) {
    for (double p : s.order) {
      for (double t : s.theta) accuracy.emplace_back(static_cast<int>(p), t);
    }
  } else {
    for (double tol : s.tolerance) accuracy.emplace_back(-1, tol);
  }
  for (const auto& prec : s.precision) {
    kfmm::require(prec == "fp32" || prec == "fp64", "bench_solver: precision '", prec,
                  "' is not fp32 or fp64");
    const double floor = prec == "fp32" ? kfmm::precision_floor<float>() : kfmm::precision_floor<double>();
    for (const auto& dist : s.distribution) {
      for (double n : s.n) {
        for (const auto& acc : accuracy) {
          if (acc.first < 0 && acc.second < floor) continue;  // below the precision's floor
          for (double leaf : s.leaf_size) {
            for (double soft : s.softening) {
              Case c = common;
              c.distribution = dist;
              c.n = static_cast<int>(n);
              c.order = acc.first;
              if (acc.first >= 0) {
                c.theta = acc.second;
              } else {
                c.tolerance = acc.second;
              }
              c.leaf_size = static_cast<int>(leaf);
              c.fp32 = prec == "fp32";
              c.softening = soft;
              register_case_per_ratio(c, s);
            }
          }
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --sweep, --tiny, --memory_breakdown, --baseline and --write_baseline are ours; Kokkos and Google
  // Benchmark take the rest. (Not kfmm_bench::run_main: the cached inputs must be released before
  // Kokkos::finalize.)
  std::vector<char*> args;
  std::string sweep_file, baseline_file, write_baseline_file, gpu_trace_file;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sweep" && i + 1 < argc) {
      sweep_file = argv[++i];
    } else if (a.rfind("--sweep=", 0) == 0) {
      sweep_file = a.substr(8);
    } else if (a == "--baseline" && i + 1 < argc) {
      baseline_file = argv[++i];
    } else if (a.rfind("--baseline=", 0) == 0) {
      baseline_file = a.substr(11);
    } else if (a == "--write_baseline" && i + 1 < argc) {
      write_baseline_file = argv[++i];
    } else if (a.rfind("--write_baseline=", 0) == 0) {
      write_baseline_file = a.substr(17);
    } else if (a == "--gpu_trace" && i + 1 < argc) {
      gpu_trace_file = argv[++i];
    } else if (a.rfind("--gpu_trace=", 0) == 0) {
      gpu_trace_file = a.substr(12);
    } else if (a == "--tiny") {
      kfmm_bench::tiny() = true;
    } else if (a == "--memory_breakdown") {
      g_tools.breakdown = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  setenv("OMP_PROC_BIND", "spread", /*overwrite=*/0);
  setenv("OMP_PLACES", "threads", /*overwrite=*/0);
  int n = static_cast<int>(args.size());
  Kokkos::initialize(n, args.data());
  int status = 0;
  {
    try {
      // (read first: a bad baseline file is refused before the benchmarks run)
      std::optional<kfmm_bench::Baseline> baseline;
      if (!baseline_file.empty()) baseline = kfmm_bench::read_baseline(baseline_file);
      register_sweep(!sweep_file.empty()  ? read_sweep(sweep_file)
                     : kfmm_bench::tiny() ? tiny_sweep()
                                          : Sweep());
      benchmark::Initialize(&n, args.data());
      if (benchmark::ReportUnrecognizedArguments(n, args.data())) {
        status = 1;
      } else {
#if defined(KFMM_BENCH_CUPTI)
        std::optional<kfmm_bench::GpuTrace> trace;
        if (!gpu_trace_file.empty()) trace.emplace(gpu_trace_file);
#else
        if (!gpu_trace_file.empty())
          throw kfmm::Error(kfmm::detail::concat("--gpu_trace ", gpu_trace_file,
                                                 ": this build has no GPU trace (it needs a CUDA build with "
                                                 "CUPTI; this one runs on ",
                                                 Space::name(), ")"));
#endif
        kfmm_bench::add_machine_context();
        benchmark::AddCustomContext("kfmm_version", kfmm::version_string());
        benchmark::AddCustomContext("kokkos_version", kfmm::compat::kokkos_version_string());
        benchmark::RunSpecifiedBenchmarks();
        benchmark::Shutdown();
#if defined(KFMM_BENCH_CUPTI)
        if (trace) trace->write();
#endif
        for (const auto& kept : g_breakdowns) std::printf("%s", kept.second.c_str());
        if (!write_baseline_file.empty()) {
          std::vector<std::pair<std::string, kfmm_bench::CaseFigures>> cases;
          for (const auto& name : g_case_order) cases.emplace_back(name, g_figures[name]);
          kfmm_bench::write_baseline(write_baseline_file, Space::name(), cases,
                                     "bench_solver --sweep " +
                                         (sweep_file.empty() ? "(default)" : sweep_file) +
                                         " --write_baseline " + write_baseline_file + " (" +
                                         std::to_string(kfmm::compat::concurrency(Space())) + " threads)");
          std::printf("bench_solver: wrote the baseline %s (%zu cases)\n", write_baseline_file.c_str(),
                      cases.size());
        }
        if (baseline &&
            kfmm_bench::compare_with_baseline(baseline_file, *baseline, Space::name(), g_figures, stdout) > 0)
          status = 3;
      }
    } catch (const std::runtime_error& e) {  // (kfmm::Error, and the GPU trace's CUPTI and file errors)
      std::fprintf(stderr, "bench_solver: %s\n", e.what());
      status = 2;
    }
    inputs().clear();
  }
  Kokkos::finalize();
  return status;
}
