// kfmm command-line entry point (placeholder until the solver lands; see issue 6).
#include <Kokkos_Core.hpp>

#include <cstdio>

#include "kfmm/kfmm.hpp"

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  std::printf("kfmm %s on Kokkos %s (%s)\n", kfmm::version_string(), kfmm::compat::kokkos_version_string(),
              Kokkos::DefaultExecutionSpace::name());
  std::printf("the solver is not implemented yet: this is a placeholder demo\n");
  return 0;
}
