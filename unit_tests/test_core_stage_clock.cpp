// kfmm::StageClock: each stage's work lands in its own slot, device work is timed where it runs (events
// on CUDA, fences elsewhere), and misuse is refused.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <array>

#include "backends.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/stage_clock.hpp"

namespace {

/// y(i) <- a chain of `steps` dependent multiply-adds from i: work whose time grows with n * steps.
template <class Space>
void busy_work(const Space& space, const Kokkos::View<double*, typename Space::memory_space>& y, int steps) {
  Kokkos::parallel_for(
      "busy_work", Kokkos::RangePolicy<Space>(space, 0, static_cast<int>(y.extent(0))),
      KOKKOS_LAMBDA(const int i) {
        double v = 1e-9 * i;
        for (int s = 0; s < steps; ++s) v = v * 0.999999 + 1e-7;
        y(i) = v;
      });
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("StageClock books each stage's device work to its slot", "[core][stage_clock]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const Space space;
  // (GPUs: enough threads that the work outlasts a launch by far; hosts: a few ms per launch)
  const int n = kfmm::detail::is_host_execution_space<Space> ? (1 << 16) : (1 << 24);
  const int steps = 128;
  Kokkos::View<double*, typename Space::memory_space> y("y", n);
  busy_work(space, y, steps);  // (warm-up: first launch)
  space.fence();

  // The same three launches, fenced and timed on the host: what the clock must see of stage 1. The fastest
  // of three timings: on a shared machine a preempted run is slower, never faster, and a slow reference
  // would make the lower bound below fail for a correct clock.
  double fenced_seconds = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Kokkos::Timer fenced;
    for (int k = 0; k < 3; ++k) busy_work(space, y, steps);
    space.fence();
    fenced_seconds = attempt == 0 ? fenced.seconds() : std::min(fenced_seconds, fenced.seconds());
  }

  kfmm::StageClock<Space> clock;
  std::array<double, 4> seconds{0, 0, 0, 1.0};  // (slot 3 is never marked: it must keep its 1.0)
  Kokkos::Timer wall;
  clock.start(space);
  busy_work(space, y, steps);
  clock.mark(2);
  clock.mark(0);  // (no work)
  for (int k = 0; k < 3; ++k) busy_work(space, y, steps);
  clock.mark(1);
  busy_work(space, y, steps);
  clock.mark(2);  // (stage 2 again: both times add up)
  clock.finish(seconds);
  const double wall_seconds = wall.seconds();

  INFO("stages " << seconds[0] << " / " << seconds[1] << " / " << seconds[2] << " s, fenced three launches "
                 << fenced_seconds << " s, wall " << wall_seconds << " s");
  CHECK(kfmm::StageClock<Space>::method ==
        (kfmm::detail::is_host_execution_space<Space> ? kfmm::StageClockMethod::fenced_host_timer
                                                      : kfmm::StageClockMethod::device_events));
  CHECK(seconds[0] >= 0);
  CHECK(seconds[0] < seconds[1]);
  CHECK(seconds[2] > 0);
  // Asynchronous launches return at once: only a clock that times the device sees their run time.
  CHECK(seconds[1] >= 0.25 * fenced_seconds);
  CHECK(seconds[3] == 1.0);
  // (events' milliseconds are floats: 1 us of slack)
  CHECK(seconds[0] + seconds[1] + seconds[2] <= wall_seconds + 1e-6);

  // A clock is reusable, and finish() adds to what the slots hold.
  const double stage1 = seconds[1];
  clock.start(space);
  busy_work(space, y, steps);
  clock.mark(1);
  clock.finish(seconds);
  CHECK(seconds[1] > stage1);
  CHECK(seconds[3] == 1.0);
}

TEMPLATE_LIST_TEST_CASE("StageClock refuses a mark before start and a stage without a slot",
                        "[core][stage_clock]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  kfmm::StageClock<Space> clock;
  CHECK_THROWS_WITH(clock.mark(0), Catch::Matchers::ContainsSubstring("mark(0) before start()"));
  std::array<double, 2> seconds{};
  clock.start(Space());
  clock.mark(5);
  CHECK_THROWS_WITH(clock.finish(seconds),
                    Catch::Matchers::ContainsSubstring("stage 5 is outside the 2 slots given to finish()"));
  // (the next series starts clean)
  clock.start(Space());
  clock.mark(1);
  CHECK_NOTHROW(clock.finish(seconds));
  CHECK(seconds[1] >= 0);
}
