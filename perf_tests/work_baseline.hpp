// bench_solver's regression gate: the figures of a sweep's cases that do not depend on the machine's speed
// (work per particle, accuracy, kernel launches, host round trips, memory) written to a baseline file, and a
// later run compared with it (perf_tests/CMakeLists.txt runs the CI-sized sweep against
// perf_tests/baselines/ci_cases.txt). Times are printed by the benchmark but not gated: the CI machines are
// shared 2-core VMs whose speed swings by ~1.4x within seconds (docs/benchmarks.md, CPU section), so a time
// bound would either fail at random or let real regressions through.
//
// Baseline file, one figure per line ('#' starts a comment):
//   execution_space OpenMP
//   case solver/plummer/n:3000/p:4/theta:0.6/leaf:32/fp64
//   p2p_per_particle 1261.4986666666666
//   ...
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kfmm/core/error.hpp"

namespace kfmm_bench {

/// How far a figure may rise above its baseline before it counts as a regression: value <= baseline x (1 +
/// relative) + absolute. `same_backend`: compared only when the run's execution space (and, for memory,
/// its thread count: the host P2P keeps a buffer per thread) is the baseline's.
struct BaselineRule {
  const char* figure;
  double relative;
  double absolute;
  bool same_backend;
  bool same_threads;
};

/// The gated figures. Work and accuracy are the same on every backend for a given input (the walk's lists
/// are identical across backends: docs/tree.md; the error moves in its last digits with the summation
/// order, hence 25 %). A steady evaluation may launch a kernel or two more than another: each tile-scan
/// workspace (the walk's, the chunk tables') clears its flags once every 63 uses
/// (core/kfmm/core/tile_scan.hpp), and which evaluation that lands in depends on how many ran before
/// (Google Benchmark's iteration counts follow the machine's speed), so +2. Memory: +2 %, since Kokkos' own
/// unlabelled allocations (thread scratch) depend on what ran earlier in the process (0.6 % at 3000
/// particles between two builds of bench_solver).
inline const std::vector<BaselineRule>& baseline_rules() {
  static const std::vector<BaselineRule> rules{
      {"p2p_per_particle", 0.01, 0, false, false}, {"m2l_pairs_per_particle", 0.01, 0, false, false},
      {"leaf_pairs", 0.01, 0, false, false},       {"error", 0.25, 0, false, false},
      {"launches_steady", 0, 2, true, false},      {"round_trips_steady", 0, 0, true, false},
      {"bytes_per_particle", 0.02, 0, true, true},
  };
  return rules;
}

/// Figures of one case by name (the gated ones and "threads").
using CaseFigures = std::map<std::string, double>;

struct Baseline {
  std::string execution_space;
  std::vector<std::pair<std::string, CaseFigures>> cases;  // in file order
};

/// Writes the cases' figures (`cases`: name -> figures, in the order given) as a baseline file.
inline void write_baseline(const std::string& path, const std::string& execution_space,
                           const std::vector<std::pair<std::string, CaseFigures>>& cases,
                           const std::string& how) {
  std::ofstream out(path);
  kfmm::require(static_cast<bool>(out), "bench_solver: cannot write the baseline file '", path, "'");
  out << "# bench_solver baseline (perf_tests/work_baseline.hpp): the figures a later run may not exceed.\n";
  out << "# Made by: " << how << "\n";
  out << "execution_space " << execution_space << "\n";
  char value[64];
  for (const auto& [name, figures] : cases) {
    out << "case " << name << "\n";
    for (const auto& [figure, v] : figures) {
      std::snprintf(value, sizeof(value), "%.17g", v);
      out << figure << " " << value << "\n";
    }
  }
  kfmm::require(static_cast<bool>(out), "bench_solver: writing the baseline file '", path, "' failed");
}

/// Reads a baseline file; throws kfmm::Error naming the file and line of anything it cannot read.
inline Baseline read_baseline(const std::string& path) {
  std::ifstream in(path);
  kfmm::require(static_cast<bool>(in), "bench_solver: cannot open the baseline file '", path, "'");
  Baseline b;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string key, value, extra;
    if (!(words >> key)) continue;
    kfmm::require(static_cast<bool>(words >> value) && !(words >> extra), "bench_solver: baseline '", path,
                  "' line ", number, ": expected 'key value', got '", line, "'");
    if (key == "execution_space") {
      b.execution_space = value;
    } else if (key == "case") {
      b.cases.emplace_back(value, CaseFigures());
    } else {
      kfmm::require(!b.cases.empty(), "bench_solver: baseline '", path, "' line ", number, ": figure '", key,
                    "' before the first 'case' line");
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      kfmm::require(end != value.c_str() && *end == '\0' && std::isfinite(v), "bench_solver: baseline '",
                    path, "' line ", number, ": '", value, "' is not a finite number");
      b.cases.back().second[key] = v;
    }
  }
  kfmm::require(!b.execution_space.empty() && !b.cases.empty(), "bench_solver: baseline '", path,
                "' holds no 'execution_space' line or no case");
  return b;
}

/// Compares a run's figures with the baseline: prints one line per gated figure and a summary line, and
/// returns the number of regressions (a figure above its bound, a baseline case that did not run, a gated
/// figure the run lacks).
inline int compare_with_baseline(const std::string& path, const Baseline& baseline,
                                 const std::string& execution_space,
                                 const std::map<std::string, CaseFigures>& run, std::FILE* out) {
  const bool same_backend = baseline.execution_space == execution_space;
  int regressions = 0, checked = 0, improved = 0;
  std::fprintf(out, "\nbench_solver baseline %s (%s; this run: %s)\n", path.c_str(),
               baseline.execution_space.c_str(), execution_space.c_str());
  for (const auto& [name, want] : baseline.cases) {
    const auto it = run.find(name);
    if (it == run.end()) {
      std::fprintf(out, "  %s: REGRESSED: the case did not run\n", name.c_str());
      ++regressions;
      continue;
    }
    const CaseFigures& got = it->second;
    const auto threads = [](const CaseFigures& f) {
      const auto t = f.find("threads");
      return t == f.end() ? -1.0 : t->second;
    };
    for (const BaselineRule& rule : baseline_rules()) {
      const auto w = want.find(rule.figure);
      if (w == want.end()) continue;  // (not in the baseline: e.g. round trips on host backends)
      if (rule.same_backend && !same_backend) continue;
      if (rule.same_threads && threads(want) != threads(got)) continue;
      const auto g = got.find(rule.figure);
      if (g == got.end()) {
        std::fprintf(out, "  %s %s: REGRESSED: not reported by this run\n", name.c_str(), rule.figure);
        ++regressions;
        continue;
      }
      const double bound = w->second * (1 + rule.relative) + rule.absolute;
      const double floor = w->second * (1 - rule.relative) - rule.absolute;
      const char* verdict = "ok";
      if (!(g->second <= bound)) {
        verdict = "REGRESSED";
        ++regressions;
      } else if (g->second < floor) {
        verdict = "better (update the baseline)";
        ++improved;
      }
      ++checked;
      std::fprintf(out, "  %s %s: %.6g (baseline %.6g, bound %.6g) %s\n", name.c_str(), rule.figure,
                   g->second, w->second, bound, verdict);
    }
  }
  if (regressions > 0) {
    std::fprintf(out,
                 "bench_solver baseline: %d REGRESSED of %d figures. If the change is intended, write a new "
                 "baseline with --write_baseline (perf_tests/CMakeLists.txt names the command).\n",
                 regressions, checked + regressions);
  } else {
    std::fprintf(out, "bench_solver baseline: all %d figures of %zu cases within their bounds (%d better)\n",
                 checked, baseline.cases.size(), improved);
  }
  return regressions;
}

}  // namespace kfmm_bench
