// Conventions shared by every kfmm benchmark:
// - manual timing: each iteration is fenced before and after, and only the work between is timed
//   (state.SetIterationTime), so asynchronous backends are measured honestly;
// - the median of the iterations' times is reported in the counters, with `ns_per_pair` (for pairwise
//   operators) or `ns_per_call` and `*_per_second` derived from it;
// - `--tiny` shrinks every benchmark to a size that runs in seconds (the CTest registration uses it);
// - JSON output through Google Benchmark's own --benchmark_out=FILE --benchmark_out_format=json.
#pragma once

#include <benchmark/benchmark.h>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kfmm_bench {

/// The machine that runs the default execution space, for the JSON context ("device"), so that every
/// result file names its card or CPU: on CUDA the device's name and UUID as nvidia-smi -L prints them,
/// its SMs and memory; on host backends the CPU's model name (Linux's /proc/cpuinfo).
inline std::string device_description() {
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<Kokkos::DefaultExecutionSpace, Kokkos::Cuda>) {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
      return "CUDA device (properties unavailable)";
    const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid),
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                  u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    char text[512];
    std::snprintf(text, sizeof(text), "%s (UUID: %s), %d SMs, %.1f GiB", prop.name, uuid,
                  prop.multiProcessorCount,
                  static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return text;
  }
#endif
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      const auto start = colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
      if (start != std::string::npos) return line.substr(start);
    }
  }
  return "unknown CPU";
}

/// The JSON context every benchmark program writes: the execution space and the machine (above).
inline void add_machine_context() {
  benchmark::AddCustomContext("kokkos_execution_space", Kokkos::DefaultExecutionSpace::name());
  benchmark::AddCustomContext("device", device_description());
}

/// True when the program was started with --tiny.
inline bool& tiny() {
  static bool value = false;
  return value;
}

/// Runs `work` once per benchmark iteration between two fences of `space` and records the time.
/// Returns the median iteration time in seconds (also stored as the counter `median_s`).
template <class ExecutionSpace, class Work>
double time_fenced(benchmark::State& state, const ExecutionSpace& space, Work&& work) {
  std::vector<double> seconds;
  work();  // warm-up: first-touch allocations, instruction caches
  space.fence();
  for (auto _ : state) {
    space.fence();
    Kokkos::Timer timer;
    work();
    space.fence();
    const double t = timer.seconds();
    state.SetIterationTime(t);
    seconds.push_back(t);
  }
  if (seconds.empty()) return 0.0;
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  const double median = seconds[seconds.size() / 2];
  state.counters["median_s"] = median;
  return median;
}

/// P2P particle interactions a near list (CSR of leaf pairs, kfmm::InteractionList) asks for: the sum
/// over its pairs of n_target x n_source, where `ranges(leaf, 0..1)` are the leaves' particle ranges; a
/// self pair (A, A) counts n (n - 1) with `exclude_self` (the pairs i != j a P2P evaluates), else n^2.
/// A host tally: copies the list and the ranges to the host.
template <class RangesView, class List>
double near_interactions(const RangesView& node_ranges, const List& near, bool exclude_self) {
  auto ranges = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), node_ranges);
  auto targets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), near.targets);
  auto offsets = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), near.offsets);
  auto sources = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), near.sources);
  double interactions = 0;
  for (std::size_t r = 0; r < targets.extent(0); ++r) {
    const double nt = ranges(targets(r), 1) - ranges(targets(r), 0);
    for (int k = offsets(r); k < offsets(r + 1); ++k) {
      const bool self = exclude_self && sources(k) == targets(r);
      interactions += nt * (self ? nt - 1 : ranges(sources(k), 1) - ranges(sources(k), 0));
    }
  }
  return interactions;
}

/// An int View in `Memory` holding `values` (CSR lists built on the host).
template <class Memory>
Kokkos::View<int*, Memory> device_ints(const std::vector<int>& values, const std::string& label) {
  Kokkos::View<int*, Memory> d(label, values.size());
  auto h = Kokkos::create_mirror_view(d);
  std::copy(values.begin(), values.end(), h.data());
  Kokkos::deep_copy(d, h);
  return d;
}

/// Sets ns_per_pair (and pairs_per_second) from a median time and the number of pairs per call.
inline void report_pairs(benchmark::State& state, double median_seconds, double pairs_per_call) {
  if (pairs_per_call <= 0 || median_seconds <= 0) return;
  state.counters["pairs"] = pairs_per_call;
  state.counters["ns_per_pair"] = median_seconds * 1e9 / pairs_per_call;
  state.counters["pairs_per_second"] = pairs_per_call / median_seconds;
}

/// True when the default execution space's memory is not host-accessible (a GPU build).
inline bool on_device() {
  return !Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                     Kokkos::DefaultExecutionSpace::memory_space>::accessible;
}

/// Registers every case (its leading arguments, named by `names` up to "team" and "chunk") once per
/// team size and chunk size given, as the two trailing arguments; manual time in milliseconds.
inline void add_team_chunk_cases(benchmark::internal::Benchmark* b, std::vector<std::string> names,
                                 const std::vector<std::vector<int>>& cases, const std::vector<int>& teams,
                                 const std::vector<int>& chunks) {
  names.push_back("team");
  names.push_back("chunk");
  b->ArgNames(names);
  for (const auto& c : cases)
    for (int team : teams)
      for (int chunk : chunks) {
        std::vector<int64_t> args(c.begin(), c.end());
        args.push_back(team);
        args.push_back(chunk);
        b->Args(args);
      }
  b->UseManualTime()->Unit(benchmark::kMillisecond);
}

/// Initialises Kokkos and Google Benchmark, strips --tiny, runs the registered benchmarks.
inline int run_main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tiny") == 0) {
      tiny() = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  // Thread binding for stable timings, unless the user chose one.
  setenv("OMP_PROC_BIND", "spread", /*overwrite=*/0);
  setenv("OMP_PLACES", "threads", /*overwrite=*/0);
  int n = static_cast<int>(args.size());
  Kokkos::initialize(n, args.data());
  int status = 0;
  {
    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) {
      status = 1;
    } else {
      add_machine_context();
      benchmark::RunSpecifiedBenchmarks();
      benchmark::Shutdown();
    }
  }
  Kokkos::finalize();
  return status;
}

}  // namespace kfmm_bench

/// Defines main() for a benchmark program.
#define KFMM_BENCHMARK_MAIN()                \
  int main(int argc, char** argv) {          \
    return kfmm_bench::run_main(argc, argv); \
  }
