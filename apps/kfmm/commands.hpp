// The subcommands of the kfmm program. Each declares its options (so --help works before Kokkos
// starts) and runs with Kokkos initialised; errors are thrown (UsageError, InputError, kfmm::Error)
// and turned into one message and an exit status by main().
#pragma once

#include <string>
#include <vector>

#include "kfmm/arguments.hpp"

namespace kfmm_cli {

struct Command {
  const char* name;
  const char* summary;
  Arguments (*declare)();
  int (*run)(const Arguments&);
};

/// All subcommands, in the order `kfmm --help` lists them.
const std::vector<Command>& commands();

Arguments declare_demo();
int run_demo(const Arguments& args);
Arguments declare_forces();
int run_forces(const Arguments& args);
Arguments declare_nbody();
int run_nbody(const Arguments& args);
Arguments declare_calibrate();
int run_calibrate(const Arguments& args);

/// Set by SIGINT/SIGTERM while a command that can stop cleanly runs (nbody, calibrate).
bool interrupted();
/// Installs the SIGINT/SIGTERM handlers that set interrupted().
void catch_interrupts();

}  // namespace kfmm_cli
