// kfmm: the command-line door to the solver.
//   kfmm [demo]                      Plummer sphere: FMM forces checked against the direct sum, then N-body
//   kfmm forces --input IN.csv ...   forces of the particles of a CSV file
//   kfmm nbody --config RUN.yaml     leapfrog N-body run with snapshots, energy log and restart
//   kfmm calibrate ...               the accuracy sweep behind the tolerance -> (p, theta) table
// Arguments starting with --kokkos- go to Kokkos; every error is one line on stderr and a non-zero
// exit status (2: how the program was called, 1: the inputs or the computation, 130: interrupted).
#include <yaml-cpp/exceptions.h>
#include <Kokkos_Core.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kfmm/commands.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/core/version.hpp"

namespace kfmm_cli {

namespace {
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_signal(int) {
  g_interrupted = 1;
}
}  // namespace

bool interrupted() {
  return g_interrupted != 0;
}

void catch_interrupts() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

const std::vector<Command>& commands() {
  static const std::vector<Command> list = {
      {"demo",
       "Plummer sphere of 1e5: FMM forces at tolerance 1e-6 checked against the direct sum, then N-body",
       declare_demo, run_demo},
      {"forces", "accelerations and potentials of the particles of a CSV file (x,y,z,m -> ax,ay,az,phi)",
       declare_forces, run_forces},
      {"nbody", "leapfrog N-body run from a YAML file: snapshots, energy log, restart", declare_nbody,
       run_nbody},
      {"calibrate", "measure error and cost over orders and opening angles (the tolerance table)",
       declare_calibrate, run_calibrate},
  };
  return list;
}

}  // namespace kfmm_cli

namespace {

std::string general_help() {
  std::string s =
      "usage: kfmm [COMMAND] [OPTIONS]   (no command: kfmm demo)\n\n"
      "kfmm: fast multipole method for softened gravity (Laplace), on Kokkos.\n\ncommands:\n";
  for (const auto& c : kfmm_cli::commands()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-10s %s\n", c.name, c.summary);
    s += line;
  }
  s += "\n`kfmm COMMAND --help` describes a command's options. Arguments starting with --kokkos- are passed\n"
       "to Kokkos (e.g. --kokkos-threads=2). Exit status: 0 success, 1 bad input or failed computation,\n"
       "2 bad command line, 130 interrupted.\n";
  return s;
}

std::string strip_prefix(std::string message) {
  const std::string prefix = "kfmm: ";
  if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
  return message;
}

}  // namespace

int main(int argc, char* argv[]) {
  std::vector<std::string> own;
  std::vector<char*> kokkos_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--kokkos-", 0) == 0) {
      kokkos_args.push_back(argv[i]);
    } else {
      own.push_back(a);
    }
  }
  std::string name = own.empty() ? "demo" : own.front();
  if (!own.empty()) own.erase(own.begin());
  if (name == "--help" || name == "-h" || name == "help") {
    std::fputs(general_help().c_str(), stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("kfmm %s (Kokkos %s)\n", kfmm::version_string(), kfmm::compat::kokkos_version_string());
    return 0;
  }
  const kfmm_cli::Command* command = nullptr;
  for (const auto& c : kfmm_cli::commands()) {
    if (name == c.name) command = &c;
  }
  if (!command) {
    std::fprintf(
        stderr,
        "kfmm: error: unknown command '%s' (commands: demo, forces, nbody, calibrate; see kfmm --help)\n",
        name.c_str());
    return 2;
  }
  const std::string who = std::string("kfmm ") + command->name;
  kfmm_cli::Arguments args = command->declare();
  try {
    if (!args.parse(own)) {
      std::fputs(args.help().c_str(), stdout);
      return 0;
    }
  } catch (const kfmm_cli::UsageError& e) {
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", who.c_str(), e.what(), who.c_str());
    return 2;
  }

  // Kokkos' advice for OpenMP (and no warning about it), unless the user chose otherwise.
  setenv("OMP_PROC_BIND", "spread", 0);
  setenv("OMP_PLACES", "threads", 0);
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  kokkos_args.push_back(nullptr);
  Kokkos::ScopeGuard kokkos(kokkos_argc, kokkos_args.data());
  try {
    return command->run(args);
  } catch (const kfmm_cli::UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", who.c_str(), e.what(), who.c_str());
    return 2;
  } catch (const kfmm_cli::InputError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
  } catch (const kfmm::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), strip_prefix(e.what()).c_str());
  } catch (const YAML::Exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: YAML: %s\n", who.c_str(), e.what());
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: out of memory\n", who.c_str());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what());
  }
  return 1;
}
