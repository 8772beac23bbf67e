/// \file stage_clock.hpp
/// kfmm::StageClock: the time of each stage of a series of work submitted to an execution space instance,
/// or to two instances whose work may overlap (lanes: the solver's main and side instances,
/// core/side_instance.hpp) (the solver's Options::timing).
///
/// CUDA: an event is recorded on the lane's stream at the start and at every mark, and the elapsed
/// times are read once, in finish(). Nothing waits between stages, so a timed evaluation keeps the
/// overlap of host and device that an untimed one has (kernels queued while earlier ones run). Each
/// stage's time is the device time line of its lane between two marks: its kernels, and the idle gaps
/// where the device waited for the host to submit them (launch latency, host round trips). The stages of
/// one lane add up to the time from its start to its last mark; stages of two lanes may overlap, so
/// their sum may exceed the wall time.
/// Every other backend: a mark fences the instance and reads a host timer (on the host the work runs
/// at submission, in the order of the marks, whatever the lane; a fence per stage costs nothing there).
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

/// Times consecutive stages of the work submitted to an execution space instance (lane 0) and, optionally,
/// to a second instance (lane 1): start(), start_lane(1, side) before the second lane's first mark, then
/// mark(stage, lane) after each stage's work is submitted, then finish(seconds) adds every stage's time
/// to seconds[stage] (a stage marked twice gets both times). mark(not_timed, lane) ends an interval
/// that belongs to no stage (a lane's wait for the other). Marks cost a fence on host backends, an event
/// record on CUDA. A series abandoned before finish() (an exception) is discarded by the next start().
template <class ExecutionSpace>
class StageClock {
 public:
  static constexpr StageClockMethod method = StageClockMethod::fenced_host_timer;
  /// Lanes of a series.
  static constexpr int lanes = 2;
  /// The "stage" of an interval that is not timed.
  static constexpr int not_timed = -1;

  /// Begins a series on `space` (lane 0): what is submitted from now on is timed.
  void start(const ExecutionSpace& space) {
    space_ = space;
    space_.fence();
    pending_.clear();
    started_ = true;
    timer_.reset();
  }
  /// Lane `lane` (1) submits to `space` from now on (here: the work of both lanes runs in submission
  /// order, timed by one host timer).
  void start_lane(int lane, const ExecutionSpace& space) {
    require(started_, "StageClock: start_lane(", lane, ") before start()");
    require(lane > 0 && lane < lanes, "StageClock: lane ", lane, " is not 1");
    mark(not_timed, lane);
    (void)space;
  }
  /// The work submitted to `lane` since its last mark (or start) belongs to `stage` (>= 0, or
  /// not_timed).
  void mark(int stage, int lane = 0) {
    require(started_, "StageClock: mark(", stage, ") before start()");
    require(lane >= 0 && lane < lanes, "StageClock: lane ", lane, " is not 0 or 1");
    space_.fence();
    if (stage != not_timed) pending_.push_back({stage, timer_.seconds()});
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
/// CUDA: events on the lanes' streams. Events are made on first use and kept for later series (a copy of
/// the clock makes its own).
template <>
class StageClock<Kokkos::Cuda> {
 public:
  static constexpr StageClockMethod method = StageClockMethod::device_events;
  static constexpr int lanes = 2;
  static constexpr int not_timed = -1;

  StageClock() = default;
  StageClock(const StageClock&) {}
  StageClock& operator=(const StageClock&) { return *this; }
  ~StageClock() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);  // (no throw from a destructor)
  }

  void start(const Kokkos::Cuda& space) {
    entries_.clear();
    recorded_ = 0;
    for (int l = 0; l < lanes; ++l) last_[l] = -1;
    begin_lane(0, space);
  }
  void start_lane(int lane, const Kokkos::Cuda& space) {
    require(recorded_ > 0, "StageClock: start_lane(", lane, ") before start()");
    require(lane > 0 && lane < lanes, "StageClock: lane ", lane, " is not 1");
    begin_lane(lane, space);
  }
  void mark(int stage, int lane = 0) {
    require(recorded_ > 0, "StageClock: mark(", stage, ") before start()");
    require(lane >= 0 && lane < lanes && last_[lane] >= 0, "StageClock: lane ", lane,
            " was not started (start_lane)");
    const int from = last_[lane];
    last_[lane] = record(streams_[lane]);
    if (stage != not_timed) entries_.push_back({stage, from, last_[lane]});
  }
  template <class Seconds>
  void finish(Seconds& seconds) {
    if (recorded_ == 0) return;
    for (int l = 0; l < lanes; ++l) {
      if (last_[l] >= 0) check(cudaEventSynchronize(events_[last_[l]]), "cudaEventSynchronize");
    }
    for (const Entry& e : entries_) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[e.from], events_[e.to]), "cudaEventElapsedTime");
      detail::add_stage_seconds(seconds, e.stage, 1e-3 * static_cast<double>(ms));
    }
    entries_.clear();
    recorded_ = 0;
  }

 private:
  struct Entry {
    int stage, from, to;  ///< the stage between events_[from] and events_[to] (one lane's)
  };
  static void check(cudaError_t status, const char* call) {
    require(status == cudaSuccess, "StageClock: ", call, " failed: ", cudaGetErrorString(status));
  }
  void begin_lane(int lane, const Kokkos::Cuda& space) {
    streams_[lane] = space.cuda_stream();
    last_[lane] = record(streams_[lane]);
  }
  /// Records the next event on `stream`; returns its index.
  int record(cudaStream_t stream) {
    if (recorded_ == events_.size()) {
      cudaEvent_t e;
      check(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
    check(cudaEventRecord(events_[recorded_], stream), "cudaEventRecord");
    return static_cast<int>(recorded_++);
  }

  cudaStream_t streams_[lanes] = {};
  int last_[lanes] = {-1, -1};       ///< each lane's last event (-1: lane not started)
  std::vector<cudaEvent_t> events_;  ///< events_[0 .. recorded_) hold this series' starts and marks
  std::size_t recorded_ = 0;
  std::vector<Entry> entries_;
};
#endif

}  // namespace kfmm
