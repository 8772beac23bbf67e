// A GPU timeline for the benchmarks where Nsight Systems is not installed (the device machines here have
// Nsight Compute only, which runs kernels one at a time and so cannot show overlap or idle gaps).
// While a GpuTrace lives, CUPTI's activity API records every kernel, copy and fill the program runs
// (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: the kernels keep overlapping, as without the trace); at its end
// the records are written as CSV in the columns of Nsight Systems' `cuda_gpu_trace` report that
// scripts/nsys_gaps.py reads: Start (ns), Duration (ns), Strm, Name (kernels demangled, copies and fills
// named as nsys names them). CUDA builds with CUPTI only (KFMM_BENCH_CUPTI, set by
// perf_tests/CMakeLists.txt).
#pragma once

#if defined(KFMM_BENCH_CUPTI)

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace kfmm_bench {

class GpuTrace {
 public:
  /// Starts recording; the CSV goes to `path` when the object is destroyed (or at write()).
  explicit GpuTrace(std::string path) : path_(std::move(path)) {
    check(cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed),
          "cuptiActivityRegisterCallbacks");
    for (CUpti_ActivityKind k : kinds_) check(cuptiActivityEnable(k), "cuptiActivityEnable");
  }
  GpuTrace(const GpuTrace&) = delete;
  GpuTrace& operator=(const GpuTrace&) = delete;
  ~GpuTrace() {
    try {
      write();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_solver: --gpu_trace: %s\n", e.what());
    }
  }

  /// Stops recording, flushes CUPTI's buffers and writes the CSV (once). Throws naming the file or the
  /// CUPTI call that failed, and when CUPTI dropped records (the timeline would have holes).
  void write() {
    if (written_) return;
    written_ = true;
    for (CUpti_ActivityKind k : kinds_) cuptiActivityDisable(k);
    check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    std::vector<Row> rows;
    std::size_t lost = 0;
    {
      const std::lock_guard<std::mutex> lock(mutex());
      rows.swap(records());
      lost = dropped();
    }
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.start < b.start; });
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write '" + path_ + "'");
    std::fprintf(f, "Start (ns),Duration (ns),Strm,Name\n");
    const std::uint64_t origin = rows.empty() ? 0 : rows.front().start;
    for (const Row& r : rows) {
      std::string quoted;  // (CSV: template arguments hold commas)
      for (char c : r.name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
      std::fprintf(f, "%llu,%llu,%u,\"%s\"\n", static_cast<unsigned long long>(r.start - origin),
                   static_cast<unsigned long long>(r.end - r.start), r.stream, quoted.c_str());
    }
    const bool ok = std::fclose(f) == 0;
    if (!ok) throw std::runtime_error("writing '" + path_ + "' failed");
    std::printf("bench_solver: --gpu_trace wrote %zu kernels, copies and fills to %s\n", rows.size(),
                path_.c_str());
    if (lost > 0)
      throw std::runtime_error("CUPTI dropped " + std::to_string(lost) + " records: '" + path_ +
                               "' has holes (trace fewer cases at a time)");
  }

 private:
  struct Row {
    std::uint64_t start, end;
    std::uint32_t stream;
    std::string name;
  };
  static constexpr CUpti_ActivityKind kinds_[3] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                                   CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

  static void check(CUptiResult r, const char* call) {
    if (r == CUPTI_SUCCESS) return;
    const char* text = nullptr;
    cuptiGetResultString(r, &text);
    throw std::runtime_error(std::string("--gpu_trace: ") + call + " failed: " + (text ? text : "?"));
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<Row>& records() {
    static std::vector<Row> r;
    return r;
  }
  static std::size_t& dropped() {
    static std::size_t d = 0;
    return d;
  }
  static std::string demangled(const char* name) {
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : name;
    std::free(d);
    return s;
  }
  static const char* copy_name(std::uint8_t kind) {
    switch (kind) {
      case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
        return "[CUDA memcpy Host-to-Device]";
      case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
        return "[CUDA memcpy Device-to-Host]";
      case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
        return "[CUDA memcpy Device-to-Device]";
      default:
        return "[CUDA memcpy other]";
    }
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    constexpr size_t bytes = 8 << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, bytes));
    *size = *buffer ? bytes : 0;
    *max_records = 0;  // (as many as fit)
  }
  static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                                        size_t valid) {
    std::vector<Row> rows;
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
          record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        rows.push_back({k->start, k->end, k->streamId, demangled(k->name)});
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* c = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        rows.push_back({c->start, c->end, c->streamId, copy_name(c->copyKind)});
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        rows.push_back({m->start, m->end, m->streamId, "[CUDA memset]"});
      }
    }
    size_t lost = 0;
    cuptiActivityGetNumDroppedRecords(context, stream, &lost);
    std::free(buffer);
    const std::lock_guard<std::mutex> lock(mutex());
    dropped() += lost;
    records().insert(records().end(), std::make_move_iterator(rows.begin()),
                     std::make_move_iterator(rows.end()));
  }

  std::string path_;
  bool written_ = false;
};

}  // namespace kfmm_bench

#endif
