// kfmm calibrate: the measurement behind the tolerance -> (p, theta) rule. For every order p it first
// picks the cheapest leaf size at a middle theta, then measures, for every theta, the relative L2
// acceleration error against the direct sum on sampled targets of each distribution, the interaction
// counts and the stage times. Cost = counts x unit costs, the unit costs being the fastest rates seen
// over the whole sweep (robust when other work shares the machine). It writes the raw results (CSV)
// and, on request, the generated table drivers/kfmm/drivers/calibration_table.hpp (worst error over
// the distributions, summed modelled cost).
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kfmm/commands.hpp"
#include "kfmm/drivers/distributions.hpp"
#include "kfmm/drivers/tolerance.hpp"
#include "kfmm/engine.hpp"
#include "kfmm/files.hpp"
#include "kfmm/report.hpp"

namespace kfmm_cli {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

/// An integer option checked against [lo, hi] before it is narrowed (no wrap-around of 5e9 or -1).
int integer_in(const std::string& text, long long lo, long long hi, const std::string& what) {
  const long long v = parse_integer(text, what);
  if (v < lo || v > hi) {
    throw UsageError(what + ": " + text + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return static_cast<int>(v);
}

/// Orders, singly or as ranges "a-b", each in 0..max_order and none twice (a repeated order would be
/// measured twice and, with --header, stand in for a missing one).
std::vector<int> parse_orders(const std::string& text) {
  std::vector<int> orders;
  for (const auto& item : split_list(text)) {
    const auto dash = item.find('-');
    if (dash != std::string::npos && dash > 0) {
      const int a = integer_in(item.substr(0, dash), 0, kfmm::max_order, "--orders");
      const int b = integer_in(item.substr(dash + 1), 0, kfmm::max_order, "--orders");
      if (a > b) throw UsageError("--orders: range " + item + " is empty (write it low-high)");
      for (int p = a; p <= b; ++p) orders.push_back(p);
    } else {
      orders.push_back(integer_in(item, 0, kfmm::max_order, "--orders"));
    }
  }
  std::vector<int> sorted = orders;
  std::sort(sorted.begin(), sorted.end());
  const auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
  if (repeated != sorted.end()) {
    throw UsageError("--orders: order " + std::to_string(*repeated) + " is listed twice");
  }
  return orders;
}

/// Thrown when a signal stops the measurement: the command then exits with 130, as documented.
struct Interrupted {};

struct Case {
  kfmm::Distribution distribution;
  kfmm::HostParticles particles;
  std::vector<int> targets;
  HostForces reference;
};

/// One evaluation setting on one distribution: error, counts, and per-stage times (fastest of the
/// repeats, stage by stage).
struct Sample {
  std::string distribution;
  int order = 0, leaf = 0;
  double theta = 0;
  double error = 0;
  double n = 0, far = 0, near = 0, p2p = 0, nodes = 0;
  std::array<double, kfmm::num_stages> seconds{};
  double total = 0;
};

Sample measure(Case& c, Precision precision, int order, double theta, int leaf, int repeat) {
  kfmm::Options o;
  o.order = order;
  o.theta = theta;
  o.leaf_size = leaf;
  o.timing = true;
  auto engine = Engine::make(precision, o);
  engine->load(c.particles);
  Sample m;
  m.distribution = kfmm::to_string(c.distribution);
  m.order = order;
  m.theta = theta;
  m.leaf = leaf;
  m.seconds.fill(std::numeric_limits<double>::infinity());
  m.total = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeat; ++r) {
    engine->evaluate();
    const auto& s = engine->statistics();
    for (int i = 0; i < kfmm::num_stages; ++i) m.seconds[i] = std::min(m.seconds[i], s.seconds[i]);
    m.total = std::min(m.total, s.stage_sum());
  }
  m.error = compare(engine->forces(), c.reference, c.targets).relative_l2;
  const auto& s = engine->statistics();
  m.n = s.num_particles;
  m.far = static_cast<double>(s.far_pairs);
  m.near = static_cast<double>(s.near_pairs);
  m.p2p = static_cast<double>(s.p2p_interactions);
  m.nodes = s.num_nodes;
  return m;
}

/// Unit costs (seconds per item) estimated as the smallest ratio seen over all samples: on a shared
/// machine the least-disturbed measurement is the closest to the machine's real rate.
struct CostModel {
  double tree = 1e300, walk = 1e300, p2p = 1e300;  // per particle, per listed pair, per interaction
  double m2l[kfmm::max_order + 1], particle[kfmm::max_order + 1], node[kfmm::max_order + 1];
  CostModel() {
    for (int p = 0; p <= kfmm::max_order; ++p) m2l[p] = particle[p] = node[p] = 1e300;
  }
  static double sec(const Sample& s, kfmm::Stage st) { return s.seconds[static_cast<int>(st)]; }
  void learn(const Sample& s) {
    using kfmm::Stage;
    if (s.n > 0) {
      tree = std::min(tree, (sec(s, Stage::check) + sec(s, Stage::tree) + sec(s, Stage::gather) +
                             sec(s, Stage::scatter)) /
                                s.n);
      particle[s.order] = std::min(particle[s.order], (sec(s, Stage::p2m) + sec(s, Stage::l2p)) / s.n);
    }
    if (s.far + s.near > 0) walk = std::min(walk, sec(s, Stage::walk) / (s.far + s.near));
    if (s.p2p > 0) p2p = std::min(p2p, sec(s, Stage::p2p) / s.p2p);
    if (s.far > 0) m2l[s.order] = std::min(m2l[s.order], sec(s, Stage::m2l) / s.far);
    if (s.nodes > 0)
      node[s.order] = std::min(node[s.order], (sec(s, Stage::m2m) + sec(s, Stage::l2l)) / s.nodes);
  }
  /// Modelled seconds of a sample's evaluation (unknown unit costs count as zero).
  double cost(const Sample& s) const {
    auto known = [](double v) { return v < 1e299 ? v : 0.0; };
    return s.n * (known(tree) + known(particle[s.order])) + (s.far + s.near) * known(walk) +
           s.p2p * known(p2p) + s.far * known(m2l[s.order]) + s.nodes * known(node[s.order]);
  }
};

}  // namespace

Arguments declare_calibrate() {
  Arguments a(
      "kfmm calibrate",
      "kfmm calibrate [--particles N] [--orders LIST] [--thetas LIST] ... [--csv FILE] [--header FILE]",
      "Measures the relative L2 acceleration error (against the fp64 direct sum on sampled targets) and\n"
      "the cost (interaction counts x the fastest unit costs seen) for every expansion order and opening\n"
      "angle on the calibration distributions (uniform, plummer, clustered, disc). For each order the\n"
      "cheapest leaf size is picked first at\n"
      "--leaf-theta. --header writes the table the tolerance rule uses (see docs/usage.md).");
  a.option("particles", "LIST",
           "particle counts per distribution (default 2000,12000; the worst error counts)");
  a.option("safety", "S", "chosen parameters satisfy error * S <= tolerance (default 3)");
  a.option("distributions", "LIST", "comma-separated (default uniform,plummer,clustered,disc)");
  a.option("orders", "LIST", "orders, ranges allowed (default 0-16)");
  a.option("thetas", "LIST", "opening angles (default 0.3,0.4,0.5,0.6,0.7,0.8)");
  a.option("leaf-sizes", "LIST", "leaf sizes tried per order (default 16,32,64,128,256)");
  a.option("leaf-theta", "T", "theta at which the leaf size is chosen (default 0.5)");
  a.option("targets", "N", "sampled targets per distribution for the error (default 4096)");
  a.option("repeat", "R", "evaluations per point, the fastest counts (default 2)");
  a.option("precision", "fp32|fp64", "evaluation precision (default fp64)");
  a.option("seed", "S", "seed of the distributions (default 7)");
  a.option("csv", "FILE", "write every measurement to FILE");
  a.option("header", "FILE", "write the generated calibration table header to FILE");
  a.option("float-floor", "EPS", "float tolerance floor recorded in the header (default: the current one)");
  a.flag("no-progress", "no progress bar");
  return a;
}

namespace {

int calibrate(const Arguments& a) {
  std::vector<int> counts;
  for (const auto& t : split_list(a.get("particles", "2000,12000"))) {
    counts.push_back(integer_in(t, 2, 100000000, "--particles"));
  }
  const double safety = a.get_double("safety", 3.0);
  if (!(safety >= 1)) throw UsageError("--safety must be >= 1");
  const auto orders = parse_orders(a.get("orders", "0-16"));
  std::vector<double> thetas;
  for (const auto& t : split_list(a.get("thetas", "0.3,0.4,0.5,0.6,0.7,0.8"))) {
    thetas.push_back(parse_double(t, "--thetas"));
    if (!(thetas.back() > 0 && thetas.back() < 1)) throw UsageError("--thetas: " + t + " is outside (0, 1)");
    // (the table is read as error rising with theta: a repeat or a step back would break that)
    if (thetas.size() > 1 && !(thetas.back() > thetas[thetas.size() - 2])) {
      throw UsageError("--thetas: " + t + " must be larger than the angle before it (list them increasing)");
    }
  }
  std::vector<int> leaves;
  for (const auto& t : split_list(a.get("leaf-sizes", "16,32,64,128,256"))) {
    leaves.push_back(integer_in(t, 1, 1000000, "--leaf-sizes"));
  }
  const double leaf_theta = a.get_double("leaf-theta", 0.5);
  if (!(leaf_theta > 0 && leaf_theta < 1)) {
    throw UsageError("--leaf-theta " + a.get("leaf-theta") + " is outside (0, 1)");
  }
  const int ntargets = a.has("targets") ? integer_in(a.get("targets"), 1, 100000000, "--targets") : 4096;
  const int repeat = a.has("repeat") ? integer_in(a.get("repeat"), 1, 1000, "--repeat") : 2;
  const Precision precision = precision_from_string(a.get("precision", "fp64"));
  const std::uint64_t seed = a.get_unsigned("seed", 7);
  const double float_floor = a.get_double("float-floor", kfmm::precision_floor<float>());
  if (!(float_floor > 0 && float_floor < 1)) {
    throw UsageError("--float-floor " + a.get("float-floor") + " is outside (0, 1)");
  }
  const std::string csv = a.get("csv"), header = a.get("header");
  if (!csv.empty()) check_writable(csv);
  if (!header.empty()) check_writable(header);
  if (header.empty() == false && (orders.size() != kfmm::max_order + 1)) {
    throw UsageError("--header needs every order 0-16");
  }

  std::printf("%s\n", header_line(precision).c_str());
  std::vector<Case> cases;
  std::string count_list;
  for (int n : counts) {
    count_list += (count_list.empty() ? "" : ", ") + std::to_string(n);
    for (const auto& name : split_list(a.get("distributions", "uniform,plummer,clustered,disc"))) {
      Case c;
      c.distribution = kfmm::distribution_from_string(name);
      c.particles = kfmm::make_distribution(c.distribution, n, seed);
      c.targets = sample_targets(n, ntargets, 12345);
      c.reference = direct_reference(c.particles, c.targets, 1.0, 0.0);
      cases.push_back(std::move(c));
    }
  }
  std::printf(
      "calibrate: %zu cases (%s particles x distributions), %zu orders x %zu thetas, error on %d targets\n",
      cases.size(), count_list.c_str(), orders.size(), thetas.size(), ntargets);
  std::fflush(stdout);

  catch_interrupts();
  std::vector<Sample> samples;
  CostModel model;
  std::map<int, int> best_leaf;
  ProgressBar bar("calibrate", static_cast<long long>(orders.size() * (leaves.size() + thetas.size())),
                  !a.has("no-progress"));
  long long done = 0;
  for (int p : orders) {
    // Leaf size: the cheapest (by the cost model) at leaf_theta.
    std::vector<Sample> leaf_samples;
    for (int leaf : leaves) {
      for (auto& c : cases) {
        leaf_samples.push_back(measure(c, precision, p, leaf_theta, leaf, repeat));
        model.learn(leaf_samples.back());
      }
      bar.update(++done);
      if (interrupted()) throw Interrupted();
    }
    double best = std::numeric_limits<double>::infinity();
    for (int leaf : leaves) {
      double t = 0;
      for (const auto& s : leaf_samples) t += s.leaf == leaf ? model.cost(s) : 0.0;
      if (t < best) {
        best = t;
        best_leaf[p] = leaf;
      }
    }
    for (double theta : thetas) {
      for (auto& c : cases) {
        samples.push_back(measure(c, precision, p, theta, best_leaf[p], repeat));
        model.learn(samples.back());
      }
      bar.update(++done);
      if (interrupted()) throw Interrupted();
    }
  }
  bar.finish();
  std::map<std::pair<int, int>, double> worst, cost;
  std::ostringstream rows;
  rows << "distribution,particles,order,theta,leaf_size,error,seconds,model_seconds,m2l_pairs_per_particle,"
          "leaf_pairs_per_particle,p2p_per_particle,nodes\n";
  for (const auto& s : samples) {
    const int ti = static_cast<int>(std::find(thetas.begin(), thetas.end(), s.theta) - thetas.begin());
    worst[{s.order, ti}] = std::max(worst[{s.order, ti}], s.error);
    cost[{s.order, ti}] += model.cost(s);
    char line[320];
    std::snprintf(line, sizeof line, "%s,%.0f,%d,%g,%d,%.4e,%.4e,%.4e,%.3f,%.3f,%.1f,%.0f\n",
                  s.distribution.c_str(), s.n, s.order, s.theta, s.leaf, s.error, s.total, model.cost(s),
                  s.far / s.n, s.near / s.n, s.p2p / s.n, s.nodes);
    rows << line;
  }
  std::printf(
      "unit costs (fastest seen): P2P %.2f ns/interaction, tree %.0f ns/particle, walk %.0f ns/pair\n",
      model.p2p * 1e9, model.tree * 1e9, model.walk * 1e9);
  std::printf("  M2L ns/pair by order:");
  for (int p : orders) std::printf(" %d:%.0f", p, model.m2l[p] < 1e299 ? model.m2l[p] * 1e9 : 0.0);
  std::printf("\n");

  // Summary: worst error per (p, theta).
  std::printf("worst relative L2 error over the distributions (rows p, columns theta):\n      ");
  for (double t : thetas) std::printf(" %8.2f", t);
  std::printf("\n");
  double smallest = std::numeric_limits<double>::infinity();
  for (int p : orders) {
    std::printf("  p%2d ", p);
    for (std::size_t ti = 0; ti < thetas.size(); ++ti) {
      const double w = worst[{p, static_cast<int>(ti)}];
      smallest = std::min(smallest, w);
      std::printf(" %8.1e", w);
    }
    std::printf("   leaf %d\n", best_leaf[p]);
  }
  std::printf("smallest worst-case error reached: %.2e\n", smallest);
  if (!csv.empty()) {
    write_atomically(csv, [&](std::FILE* f) { std::fputs(rows.str().c_str(), f); });
    std::printf("wrote %s\n", csv.c_str());
  }
  if (!header.empty()) {
    write_atomically(header, [&](std::FILE* f) {
      std::fprintf(f,
                   "/// \\file calibration_table.hpp\n"
                   "/// GENERATED by `kfmm calibrate --header` (docs/usage.md, \"Calibration\"); do not edit "
                   "by hand.\n"
                   "/// Measured with %s particles per distribution (%s), error against the fp64 direct sum\n"
                   "/// on %d sampled targets, %s, on %s.\n"
                   "#pragma once\n\nnamespace kfmm::detail::calibration {\n\n/// Opening angles measured.\n"
                   "inline constexpr double thetas[] = {",
                   count_list.c_str(), a.get("distributions", "uniform,plummer,clustered,disc").c_str(),
                   ntargets, to_string(precision), backend_description().c_str());
      for (std::size_t t = 0; t < thetas.size(); ++t) std::fprintf(f, "%s%g", t ? ", " : "", thetas[t]);
      std::fprintf(
          f,
          "};\n/// errors[p][t]: worst relative L2 error of the accelerations over the distributions.\n"
          "inline constexpr double errors[17][%zu] = {\n",
          thetas.size());
      for (int p = 0; p <= kfmm::max_order; ++p) {
        std::fprintf(f, "    {");
        for (std::size_t t = 0; t < thetas.size(); ++t) {
          std::fprintf(f, "%s%.3e", t ? ", " : "", worst[{p, static_cast<int>(t)}]);
        }
        std::fprintf(f, "},\n");
      }
      std::fprintf(
          f,
          "};\n/// costs[p][t]: modelled seconds to evaluate all the distributions once (counts times the\n"
          "/// fastest unit costs seen: robust on a shared machine).\n"
          "inline constexpr double costs[17][%zu] = {\n",
          thetas.size());
      for (int p = 0; p <= kfmm::max_order; ++p) {
        std::fprintf(f, "    {");
        for (std::size_t t = 0; t < thetas.size(); ++t) {
          std::fprintf(f, "%s%.3e", t ? ", " : "", cost[{p, static_cast<int>(t)}]);
        }
        std::fprintf(f, "},\n");
      }
      std::fprintf(f,
                   "};\n/// Leaf size per order (the fastest at theta = %g).\ninline constexpr int "
                   "leaf_size_for_order[17] = {",
                   leaf_theta);
      for (int p = 0; p <= kfmm::max_order; ++p) std::fprintf(f, "%s%d", p ? ", " : "", best_leaf[p]);
      std::fprintf(
          f,
          "};\n/// Chosen parameters satisfy errors * safety <= tolerance.\n"
          "inline constexpr double safety = %g;\n"
          "/// Smallest tolerance accepted in float (measured with --precision fp32) and in double.\n"
          "inline constexpr double float_floor = %g;\n"
          "inline constexpr double double_floor = %.1e;\n\n}  // namespace kfmm::detail::calibration\n",
          safety, float_floor, std::max(1e-12, smallest * safety));
    });
    std::printf("wrote %s\n", header.c_str());
  }
  return 0;
}

}  // namespace

int run_calibrate(const Arguments& a) {
  try {
    return calibrate(a);
  } catch (const Interrupted&) {
    std::fprintf(stderr, "kfmm calibrate: interrupted; nothing written\n");
    return 130;
  }
}

}  // namespace kfmm_cli
