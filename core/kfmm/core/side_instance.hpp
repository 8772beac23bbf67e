/// \file side_instance.hpp
/// kfmm::detail::SideInstance: two instances of an execution space for one caller's work, a main one for
/// the critical path and a side one for work that may run at the same time, ordered against each other
/// and against the caller's instance by explicit waits.
///
/// Why: stages whose kernels leave most of a GPU idle (the level-by-level M2M and L2L chains, the walk's
/// small rounds) finish sooner when an independent stage (P2M and M2M beside the walk, the P2P beside
/// M2L and L2L) fills the rest of the device. On CUDA both are non-blocking streams of their own (Kokkos
/// 3.4's default instance is the legacy default stream, which would otherwise serialise with them), the
/// main one at the device's highest priority and the side one at its lowest, so the block scheduler
/// serves the critical path first and the side work takes what it leaves; the waits are events, nothing
/// blocks the host. Every other backend uses the caller's instance for both: the work runs in submission
/// order and the waits are no-ops.
#pragma once

#include <Kokkos_Core.hpp>

#include <memory>

#include "kfmm/core/error.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace kfmm::detail {

/// Every backend but CUDA: the caller's instance is the main and the side instance, so submission order
/// is execution order. See the file comment.
template <class ExecutionSpace>
class SideInstance {
 public:
  /// True when the main and side instances' work may overlap.
  static constexpr bool concurrent = false;
  /// The instance for the critical path of work submitted on behalf of `caller`.
  ExecutionSpace main(const ExecutionSpace& caller) { return caller; }
  /// The instance for work that may overlap the main instance's.
  ExecutionSpace side(const ExecutionSpace& caller) { return caller; }
  /// Main work submitted from now on starts after the caller's work submitted so far.
  void main_waits_for_caller(const ExecutionSpace&) {}
  /// The caller's work submitted from now on starts after the main work submitted so far.
  void caller_waits_for_main(const ExecutionSpace&) {}
  /// Side work submitted from now on starts after the main work submitted so far.
  void side_waits_for_main() {}
  /// Main work submitted from now on starts after the side work submitted so far.
  void main_waits_for_side() {}
};

#if defined(KOKKOS_ENABLE_CUDA)
/// CUDA: two non-blocking streams, made on first use (a copy makes its own), and an event recorded on
/// one stream and waited for by another (it may be recorded again as soon as the wait is queued).
template <>
class SideInstance<Kokkos::Cuda> {
 public:
  static constexpr bool concurrent = true;

  SideInstance() = default;
  SideInstance(const SideInstance&) {}
  SideInstance& operator=(const SideInstance&) { return *this; }

  Kokkos::Cuda main(const Kokkos::Cuda&) { return state().main.instance; }
  Kokkos::Cuda side(const Kokkos::Cuda&) { return state().side.instance; }
  void main_waits_for_caller(const Kokkos::Cuda& caller) { order(state().main.stream, caller.cuda_stream()); }
  void caller_waits_for_main(const Kokkos::Cuda& caller) { order(caller.cuda_stream(), state().main.stream); }
  void side_waits_for_main() { order(state().side.stream, state().main.stream); }
  void main_waits_for_side() { order(state().main.stream, state().side.stream); }

 private:
  static void check(cudaError_t status, const char* call) {
    require(status == cudaSuccess, "SideInstance: ", call, " failed: ", cudaGetErrorString(status));
  }
  /// A stream of the given priority and its Kokkos instance (released before the stream).
  struct Lane {
    cudaStream_t stream = nullptr;
    Kokkos::Cuda instance;
    explicit Lane(int priority) : stream(make_stream(priority)), instance(stream) {}
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;
    ~Lane() {
      instance.fence();
      instance = Kokkos::Cuda();  // (no throw from a destructor)
      cudaStreamDestroy(stream);
    }
    static cudaStream_t make_stream(int priority) {
      cudaStream_t s = nullptr;
      check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority),
            "cudaStreamCreateWithPriority");
      return s;
    }
  };
  struct State {
    Lane main, side;
    cudaEvent_t event = nullptr;
    State(int greatest, int least) : main(greatest), side(least) {
      check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    ~State() { cudaEventDestroy(event); }
  };
  State& state() {
    if (!state_) {
      int least = 0, greatest = 0;  // (numerically: the lowest priority is the largest number)
      check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
      state_ = std::make_unique<State>(greatest, least);
    }
    return *state_;
  }
  /// `waiter`'s work submitted from now on starts after `signaller`'s work submitted so far.
  void order(cudaStream_t waiter, cudaStream_t signaller) {
    check(cudaEventRecord(state().event, signaller), "cudaEventRecord");
    check(cudaStreamWaitEvent(waiter, state().event, 0), "cudaStreamWaitEvent");
  }
  std::unique_ptr<State> state_;
};
#endif

}  // namespace kfmm::detail
