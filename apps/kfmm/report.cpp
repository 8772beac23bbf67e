#include "kfmm/report.hpp"

#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/version.hpp"
#include "kfmm/drivers/options.hpp"

namespace kfmm_cli {

namespace {
std::string printf_string(const char* format, double a) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, a);
  return buffer;
}
}  // namespace

std::string format_seconds(double s) {
  if (s < 1e-3) return printf_string("%.1f us", s * 1e6);
  if (s < 1.0) return printf_string("%.2f ms", s * 1e3);
  if (s < 120.0) return printf_string("%.2f s", s);
  return printf_string("%.1f min", s / 60);
}

std::string header_line(Precision precision) {
  std::ostringstream s;
  s << "kfmm " << kfmm::version_string() << " | Kokkos " << kfmm::compat::kokkos_version_string() << " | "
    << backend_description() << " | " << to_string(precision);
  return s.str();
}

std::string parameters_line(const kfmm::Statistics& st) {
  std::ostringstream s;
  s << "order p = " << st.order << ", theta = " << st.theta << ", leaf size " << st.leaf_size;
  if (st.parameters_from_tolerance) {
    s << " (chosen for tolerance " << st.tolerance << "; calibrated error "
      << printf_string("%.2g", st.predicted_error) << ")";
  } else {
    s << " (as given; calibrated error " << printf_string("%.2g", st.predicted_error) << ")";
  }
  if (st.min_separation > 0) s << ", softening margin " << printf_string("%.3g", st.min_separation);
  // (the concentration rule, named when it is not the default's)
  if (st.concentration_ratio != kfmm::Options().concentration_ratio) {
    if (st.concentration_ratio > 0) {
      s << ", concentration ratio " << st.concentration_ratio;
    } else {
      s << ", concentration rule off";
    }
  }
  // (shown when it reaches a millionth of the box and exceeds the softening margin: float at high orders)
  if (st.range_separation * st.length_scale > 1e-6 && st.range_separation > st.min_separation) {
    s << ", range margin " << printf_string("%.3g", st.range_separation);
  }
  return s.str();
}

std::string sizes_line(const kfmm::Statistics& st) {
  std::ostringstream s;
  const double n = st.num_particles > 0 ? st.num_particles : 1;
  s << st.num_particles << " particles, " << st.num_nodes << " nodes (" << st.num_leaves << " leaves, "
    << st.num_levels << " levels), " << st.far_pairs << " M2L pairs ("
    << printf_string("%.1f", st.far_pairs / n) << " per particle), " << st.near_pairs << " leaf pairs";
  if (st.p2p_interactions >= 0) {
    s << " (" << printf_string("%.0f", st.p2p_interactions / n) << " P2P interactions per particle)";
  }
  return s.str();
}

std::string stage_table(const std::array<double, kfmm::num_stages>& seconds, double evaluations) {
  double total = 0;
  for (double t : seconds) total += t;
  const double per = evaluations > 0 ? evaluations : 1;
  std::ostringstream s;
  char line[128];
  std::snprintf(line, sizeof line, "  %-8s %12s %7s\n", "stage", "ms", "share");
  s << line;
  for (int i = 0; i < kfmm::num_stages; ++i) {
    if (seconds[i] <= 0) continue;
    std::snprintf(line, sizeof line, "  %-8s %12.3f %6.1f%%\n", kfmm::stage_name(static_cast<kfmm::Stage>(i)),
                  seconds[i] * 1e3 / per, total > 0 ? 100 * seconds[i] / total : 0.0);
    s << line;
  }
  std::snprintf(line, sizeof line, "  %-8s %12.3f %6.1f%%\n", "total", total * 1e3 / per, 100.0);
  s << line;
  return s.str();
}

ProgressBar::ProgressBar(std::string label, long long total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled && total > 0),
      tty_(::isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  stop();
}

void ProgressBar::stop() {
  if (enabled_ && !finished_ && tty_ && drawn_) std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::update(long long done, const std::string& note) {
  draw(done, note, false);
}

void ProgressBar::finish(const std::string& note) {
  if (!enabled_ || finished_) return;
  if (tty_ || last_decile_ != 10) draw(total_, note, true);
  if (tty_) std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::draw(long long done, const std::string& note, bool force) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  const double fraction = total_ > 0 ? static_cast<double>(done) / total_ : 1.0;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (tty_) {
    if (!force && std::chrono::duration<double>(now - last_draw_).count() < 0.1 && done < total_) return;
  } else {
    const int decile = static_cast<int>(fraction * 10);
    if (!force && decile == last_decile_) return;
    last_decile_ = decile;
  }
  last_draw_ = now;
  constexpr int width = 30;
  const int filled = static_cast<int>(fraction * width);
  std::string bar(filled, '#');
  bar += std::string(width - filled, '.');
  const double eta = fraction > 0 ? elapsed * (1 - fraction) / fraction : 0;
  char text[256];
  std::snprintf(text, sizeof text, "%s [%s] %3.0f%% %lld/%lld, %s elapsed, %s left", label_.c_str(),
                bar.c_str(), 100 * fraction, done, total_, format_seconds(elapsed).c_str(),
                format_seconds(eta).c_str());
  if (tty_) {
    std::fprintf(stderr, "\r%s%s%s\x1b[K", text, note.empty() ? "" : ", ", note.c_str());
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s%s%s\n", text, note.empty() ? "" : ", ", note.c_str());
  }
  std::fflush(stderr);
}

}  // namespace kfmm_cli
