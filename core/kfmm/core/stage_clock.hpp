/// \file stage_clock.hpp
/// kfmm::StageClock: the time of each stage of a series of work submitted to one execution space
/// instance (the solver's Options::timing).
///
/// CUDA: an event is recorded on the instance's stream at the start and at every mark, and the elapsed
/// times are read once, in finish(). Nothing waits between stages, so a timed evaluation keeps the
/// overlap of host and device that an untimed one has (kernels queued while earlier ones run). Each
/// stage's time is the device time line between two marks: its kernels, and the idle gaps where the
/// device waited for the host to submit them (launch latency, host round trips) - the stages add up to
/// the time from start() to the last mark.
/// Every other backend: a mark fences the instance and reads a host timer (on the host the work runs
/// at submission; a fence per stage costs nothing there).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <vector>

#include "kfmm/core/error.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kfmm {

/// How a StageClock measures.
enum class StageClockMethod {
  fenced_host_timer,  ///< a fence at every mark and a host timer
  device_events       ///< events on the instance's stream (CUDA), no fences between stages
};

/// Short name of a method ("fenced host timer", "device events").
inline const char* stage_clock_method_name(StageClockMethod m) {
  return m == StageClockMethod::device_events ? "device events" : "fenced host timer";
}

namespace detail {
/// seconds[stage] += s, refusing a stage outside the array.
template <class Seconds>
void add_stage_seconds(Seconds& seconds, int stage, double s) {
  require(stage >= 0 && static_cast<std::size_t>(stage) < seconds.size(), "StageClock: stage ", stage,
          " is outside the ", seconds.size(), " slots given to finish()");
  seconds[static_cast<std::size_t>(stage)] += s;
}
}  // namespace detail

/// Times consecutive stages of the work submitted to an execution space instance: start(), then
/// mark(stage) after each stage's work is submitted, then finish(seconds) adds every stage's time to
/// seconds[stage] (a stage marked twice gets both times). Marks cost a fence on host backends, an
/// event record on CUDA. A series abandoned before finish() (an exception) is discarded by the next
/// start().
template <class ExecutionSpace>
class StageClock {
 public:
  static constexpr StageClockMethod method = StageClockMethod::fenced_host_timer;

  /// Begins a series on `space`: what is submitted from now on is timed.
  void start(const ExecutionSpace& space) {
    space_ = space;
    space_.fence();
    pending_.clear();
    started_ = true;
    timer_.reset();
  }
  /// The work submitted since the last mark (or start) belongs to `stage` (>= 0).
  void mark(int stage) {
    require(started_, "StageClock: mark(", stage, ") before start()");
    space_.fence();
    pending_.push_back({stage, timer_.seconds()});
    timer_.reset();
  }
  /// Waits for the marked work and adds each stage's time in seconds to seconds[stage]; ends the series.
  template <class Seconds>
  void finish(Seconds& seconds) {
    for (const Entry& e : pending_) detail::add_stage_seconds(seconds, e.stage, e.seconds);
    pending_.clear();
    started_ = false;
  }

 private:
  struct Entry {
    int stage;
    double seconds;
  };
  ExecutionSpace space_;
  Kokkos::Timer timer_;
  std::vector<Entry> pending_;
  bool started_ = false;
};

#if defined(KOKKOS_ENABLE_CUDA)
/// CUDA: events on the instance's stream. Events are made on first use and kept for later series (a
/// copy of the clock makes its own).
template <>
class StageClock<Kokkos::Cuda> {
 public:
  static constexpr StageClockMethod method = StageClockMethod::device_events;

  StageClock() = default;
  StageClock(const StageClock&) {}
  StageClock& operator=(const StageClock&) { return *this; }
  ~StageClock() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);  // (no throw from a destructor)
  }

  void start(const Kokkos::Cuda& space) {
    stream_ = space.cuda_stream();
    stages_.clear();
    recorded_ = 0;
    record();
  }
  void mark(int stage) {
    require(recorded_ > 0, "StageClock: mark(", stage, ") before start()");
    stages_.push_back(stage);
    record();
  }
  template <class Seconds>
  void finish(Seconds& seconds) {
    if (recorded_ == 0) return;
    check(cudaEventSynchronize(events_[recorded_ - 1]), "cudaEventSynchronize");
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
      detail::add_stage_seconds(seconds, stages_[i], 1e-3 * static_cast<double>(ms));
    }
    stages_.clear();
    recorded_ = 0;
  }

 private:
  static void check(cudaError_t status, const char* call) {
    require(status == cudaSuccess, "StageClock: ", call, " failed: ", cudaGetErrorString(status));
  }
  void record() {
    if (recorded_ == events_.size()) {
      cudaEvent_t e;
      check(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    check(cudaEventRecord(events_[recorded_], stream_), "cudaEventRecord");
    ++recorded_;
  }

  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;  ///< events_[0 .. recorded_) hold this series' start and marks
  std::size_t recorded_ = 0;
  std::vector<int> stages_;  ///< stages_[i]: the stage between events_[i] and events_[i + 1]
};
#endif

}  // namespace kfmm
