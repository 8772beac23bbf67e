// The one main of the unit tests: initialises Kokkos around the Catch2 session, so every test can
// run on every enabled backend. Kokkos arguments (--kokkos-threads=N, ...) are consumed first.
#include <Kokkos_Core.hpp>
#include <catch2/catch_session.hpp>

#include <cstdlib>

int main(int argc, char* argv[]) {
  // Kokkos' advice for unit tests, and it keeps its OpenMP binding warning out of test discovery.
  setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
  Kokkos::initialize(argc, argv);
  int result = 0;
  {
    Catch::Session session;
    result = session.run(argc, argv);
  }
  Kokkos::finalize();
  return result;
}
