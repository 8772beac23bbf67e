// A host program that embeds kfmm (built against the installed package, examples/embed/CMakeLists.txt):
// forces of 100000 Plummer-sphere particles at a relative accuracy of 1e-5, on the default Kokkos device.
#include <kfmm/kfmm.hpp>

#include <cstdio>

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  using Space = Kokkos::DefaultExecutionSpace;
  const kfmm::HostParticles stars = kfmm::plummer_sphere(100000, /*seed=*/1);  // or your own data
  const int n = stars.size();
  Kokkos::View<double*[3], Space::memory_space> x("x", n), a("a", n);
  Kokkos::View<double*, Space::memory_space> m("m", n), phi("phi", n);
  kfmm::copy_to(x, stars.positions);
  kfmm::copy_to(m, stars.masses);

  kfmm::Options options;
  options.tolerance = 1e-5;  // relative L2 error of the accelerations; kfmm picks p and theta
  options.softening = 1e-4;  // the far field starts at softening * sqrt(3 / tolerance)
  kfmm::Solver<Space, double> solver(options);
  solver.evaluate(x, m, a, phi);  // a, phi in the same (caller's) order as x, m

  auto a_host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  std::printf("embed: kfmm %s on %s: p = %d, theta = %g, a[0] = (%.6g, %.6g, %.6g), %.3f s\n",
              kfmm::version_string(), Space::name(), solver.chosen_order(), solver.chosen_theta(),
              a_host(0, 0), a_host(0, 1), a_host(0, 2), solver.statistics().total_seconds);
  return 0;
}
