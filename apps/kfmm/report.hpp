// What the kfmm command prints: the run header (version, backend, precision), solver summaries,
// per-stage timing tables and a progress bar on stderr.
#pragma once

#include <chrono>
#include <string>

#include "kfmm/drivers/statistics.hpp"
#include "kfmm/engine.hpp"

namespace kfmm_cli {

/// "kfmm 0.1.0 | Kokkos 3.4.1 | OpenMP (2 threads) | fp64".
std::string header_line(Precision precision);

/// p, theta, leaf size, how they were chosen, softening margin.
std::string parameters_line(const kfmm::Statistics& s);

/// Tree and list sizes: particles, nodes, leaves, levels, far/near pairs (per particle).
std::string sizes_line(const kfmm::Statistics& s);

/// A per-stage timing table (ms and share) of one or several evaluations (`evaluations` divides the
/// sums); `seconds` indexed by kfmm::Stage.
std::string stage_table(const std::array<double, kfmm::num_stages>& seconds, double evaluations);

/// A progress bar on stderr: redrawn in place on a terminal (at most 10 times a second), a line every
/// 10 % otherwise; silent when disabled.
class ProgressBar {
 public:
  ProgressBar(std::string label, long long total, bool enabled = true);
  ~ProgressBar();
  /// `done` of `total` finished; `note` is shown after the counts (e.g. the energy error).
  void update(long long done, const std::string& note = "");
  /// Ends the bar (a final redraw and a newline).
  void finish(const std::string& note = "");
  /// Ends the bar where it stands (a newline on a terminal, no redraw): what a failed run prints next
  /// starts on its own line.
  void stop();

 private:
  void draw(long long done, const std::string& note, bool force);
  std::string label_;
  long long total_;
  bool enabled_, tty_, finished_ = false, drawn_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

/// Seconds as "12.3 ms", "1.23 s", ...
std::string format_seconds(double seconds);

}  // namespace kfmm_cli
