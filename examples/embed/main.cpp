// A host program built against the installed kfmm package (examples/embed/CMakeLists.txt).
// Placeholder until the solver lands: it exercises the core layer through the umbrella header.
#include <kfmm/kfmm.hpp>

#include <cstdio>

#if defined(KFMM_HAVE_KOKKOSKERNELS)  // set by kfmm::kfmm when kfmm was built with Kokkos Kernels
#include <KokkosKernels_config.h>
#endif

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  using Space = Kokkos::DefaultExecutionSpace;
  const int n = 1000;
  kfmm::PositionView<double, Space::memory_space> positions("positions", n);
  Kokkos::parallel_for(
      "embed_fill", Kokkos::RangePolicy<Space>(Space(), 0, n), KOKKOS_LAMBDA(const int i) {
        positions(i, 0) = 3.0 * i;
        positions(i, 1) = 4.0 * i;
        positions(i, 2) = 0.0;
      });
  double total = 0;
  Kokkos::parallel_reduce(
      "embed_norms", Kokkos::RangePolicy<Space>(Space(), 0, n),
      KOKKOS_LAMBDA(const int i, double& sum) {
        sum += kfmm::compat::sqrt(positions(i, 0) * positions(i, 0) + positions(i, 1) * positions(i, 1));
      },
      total);
  const double expected = 5.0 * n * (n - 1) / 2;
  bool threw = false;
  try {
    kfmm::check_order(kfmm::max_order + 1);
  } catch (const kfmm::Error&) {
    threw = true;
  }
  const bool ok = total == expected && threw && kfmm::num_coefficients(4) == 25;
  std::printf("embed: kfmm %s, Kokkos %s on %s: %s\n", kfmm::version_string(),
              kfmm::compat::kokkos_version_string(), Space::name(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
