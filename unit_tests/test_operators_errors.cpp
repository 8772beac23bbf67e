// Bad arguments to the batched expansion operators throw kfmm::Error with a message that names the
// operator, the argument and the problem, before any kernel touches the data; empty lists are fine.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "backends.hpp"
#include "kfmm/operators/l2l.hpp"
#include "kfmm/operators/l2p.hpp"
#include "kfmm/operators/m2m.hpp"
#include "kfmm/operators/p2m.hpp"

using Catch::Matchers::ContainsSubstring;

TEMPLATE_LIST_TEST_CASE("expansion operators reject bad arguments", "[operators][errors]",
                        kfmm_test::ExecutionSpaces) {
  using Memory = typename TestType::memory_space;
  const TestType space;
  const int nodes = 3, particles = 4, p = 4, nc = kfmm::num_coefficients(p);
  Kokkos::View<double*[3], Memory> x("x", particles), centres("centres", nodes), acc("acc", particles);
  Kokkos::View<double*, Memory> m("m", particles), phi("phi", particles);
  Kokkos::View<int* [2], Memory> ranges("ranges", nodes);
  Kokkos::View<int*, Memory> first_child("first_child", nodes), num_children("num_children", nodes),
      parent("parent", nodes);
  kfmm::ExpansionView<double, Memory> M("M", nodes, nc), small("small", nodes, nc - 1);
  auto r = Kokkos::create_mirror_view(ranges);
  r(0, 0) = 0, r(0, 1) = 4, r(1, 0) = 0, r(1, 1) = 2, r(2, 0) = 2, r(2, 1) = 4;
  Kokkos::deep_copy(ranges, r);
  auto fc = Kokkos::create_mirror_view(first_child);
  auto nch = Kokkos::create_mirror_view(num_children);
  auto pa = Kokkos::create_mirror_view(parent);
  fc(0) = 1, nch(0) = 2, pa(0) = -1, pa(1) = 0, pa(2) = 0;
  Kokkos::deep_copy(first_child, fc);
  Kokkos::deep_copy(num_children, nch);
  Kokkos::deep_copy(parent, pa);
  auto leaves = kfmm_test::device_ints<Memory>({1, 2});

  // Orders out of range.
  CHECK_THROWS_WITH(kfmm::p2m(space, 17, x, m, ranges, leaves, centres, M),
                    ContainsSubstring("p2m order = 17 is out of range"));
  CHECK_THROWS_WITH(
      kfmm::m2m(space, -1, kfmm_test::device_ints<Memory>({0}), first_child, num_children, centres, M),
      ContainsSubstring("m2m order = -1 is out of range"));
  CHECK_THROWS_WITH(kfmm::l2l(space, 99, leaves, parent, centres, M), ContainsSubstring("l2l order = 99"));
  CHECK_THROWS_WITH(kfmm::l2p(space, 17, 1.0, leaves, ranges, centres, M, x, acc, phi),
                    ContainsSubstring("l2p order = 17"));
  // Expansion Views too narrow for the order.
  CHECK_THROWS_WITH(kfmm::p2m(space, p, x, m, ranges, leaves, centres, small),
                    ContainsSubstring("p2m: multipoles has 24 columns, order 4 needs 25"));
  CHECK_THROWS_WITH(
      kfmm::m2m(space, p, kfmm_test::device_ints<Memory>({0}), first_child, num_children, centres, small),
      ContainsSubstring("m2m: multipoles has 24 columns"));
  CHECK_THROWS_WITH(kfmm::l2l(space, p, leaves, parent, centres, small),
                    ContainsSubstring("l2l: locals has 24"));
  CHECK_THROWS_WITH(kfmm::l2p(space, p, 1.0, leaves, ranges, centres, small, x, acc, phi),
                    ContainsSubstring("l2p: locals has 24"));
  // Mismatched or too-small per-node / per-particle Views.
  Kokkos::View<double*, Memory> m_short("m_short", particles - 1), phi_short("phi_short", particles - 1);
  Kokkos::View<double* [3], Memory> centres_short("centres_short", nodes - 1);
  CHECK_THROWS_WITH(kfmm::p2m(space, p, x, m_short, ranges, leaves, centres, M),
                    ContainsSubstring("p2m: masses has 3 entries, positions 4"));
  CHECK_THROWS_WITH(kfmm::p2m(space, p, x, m, ranges, leaves, centres_short, M),
                    ContainsSubstring("must cover the multipoles' 3 rows"));
  CHECK_THROWS_WITH(kfmm::l2p(space, p, 1.0, leaves, ranges, centres, M, x, acc, phi_short),
                    ContainsSubstring("one entry per position"));
  CHECK_THROWS_WITH(kfmm::l2p(space, p, std::nan(""), leaves, ranges, centres, M, x, acc, phi),
                    ContainsSubstring("l2p: G = nan must be finite"));
  {  // in float a G beyond float's range would be infinite in the kernel: refused
    Kokkos::View<float*[3], Memory> xf("xf", particles), centres_f("centres_f", nodes),
        acc_f("acc_f", particles);
    Kokkos::View<float*, Memory> phi_f("phi_f", particles);
    kfmm::ExpansionView<float, Memory> Mf("Mf", nodes, nc);
    CHECK_THROWS_WITH(kfmm::l2p(space, p, 4e38, leaves, ranges, centres_f, Mf, xf, acc_f, phi_f),
                      ContainsSubstring("l2p: G = 4e+38 exceeds the range of float"));
  }
  // Node ids and ranges out of bounds (validated on the execution space before the kernel).
  CHECK_THROWS_WITH(kfmm::p2m(space, p, x, m, ranges, kfmm_test::device_ints<Memory>({1, 3}), centres, M),
                    ContainsSubstring("p2m: 1 of the 2 listed leaves are not node ids in [0, 3)"));
  CHECK_THROWS_WITH(
      kfmm::l2p(space, p, 1.0, kfmm_test::device_ints<Memory>({-1}), ranges, centres, M, x, acc, phi),
      ContainsSubstring("l2p: 1 of the 1 listed leaves"));
  CHECK_THROWS_WITH(
      kfmm::m2m(space, p, kfmm_test::device_ints<Memory>({0, 7}), first_child, num_children, centres, M),
      ContainsSubstring("m2m: 1 of the 2 listed parents"));
  CHECK_THROWS_WITH(kfmm::l2l(space, p, kfmm_test::device_ints<Memory>({0}), parent, centres, M),
                    ContainsSubstring("l2l: 1 of the 1 listed children"));  // the root has no parent
  r(2, 1) = 5;                                                              // past the last particle
  Kokkos::deep_copy(ranges, r);
  CHECK_THROWS_WITH(kfmm::p2m(space, p, x, m, ranges, leaves, centres, M),
                    ContainsSubstring("particle range inside [0, 4]"));
  r(2, 0) = 3, r(2, 1) = 2;  // reversed
  Kokkos::deep_copy(ranges, r);
  CHECK_THROWS_AS(kfmm::l2p(space, p, 1.0, leaves, ranges, centres, M, x, acc, phi), kfmm::Error);
  nch(0) = 3;  // children 1..3: node 3 does not exist
  Kokkos::deep_copy(num_children, nch);
  CHECK_THROWS_AS(
      kfmm::m2m(space, p, kfmm_test::device_ints<Memory>({0}), first_child, num_children, centres, M),
      kfmm::Error);
  // A team size above the backend's maximum.
  kfmm::ExpansionOptions huge;
  huge.team_size = 1 << 20;
  CHECK_THROWS_WITH(kfmm::p2m(space, p, x, m, ranges, kfmm_test::device_ints<Memory>({1}), centres, M, huge),
                    ContainsSubstring("p2m: team_size = 1048576 exceeds"));
  // A negative team size is refused, not replaced by the default; l2l has no teams to size.
  kfmm::ExpansionOptions negative;
  negative.team_size = -2;
  CHECK_THROWS_WITH(
      kfmm::p2m(space, p, x, m, ranges, kfmm_test::device_ints<Memory>({1}), centres, M, negative),
      ContainsSubstring("p2m: team_size = -2 must be >= 0"));
  CHECK_THROWS_WITH(kfmm::l2p(space, p, 1.0, kfmm_test::device_ints<Memory>({1}), ranges, centres, M, x, acc,
                              phi, negative),
                    ContainsSubstring("team_size = -2 must be >= 0"));
  kfmm::ExpansionOptions teams;
  teams.team_size = 1;
  CHECK_THROWS_WITH(kfmm::l2l(space, p, kfmm_test::device_ints<Memory>({1}), parent, centres, M, teams),
                    ContainsSubstring("l2l: team_size = 1 asks for teams"));

  // Empty lists are valid and touch nothing; N = 0 particles and an empty leaf give zeros.
  Kokkos::View<int*, Memory> none("none", 0);
  Kokkos::deep_copy(M, 5.0);
  CHECK_NOTHROW(kfmm::p2m(space, p, x, m, ranges, none, centres, M));
  CHECK_NOTHROW(kfmm::m2m(space, p, none, first_child, num_children, centres, M));
  CHECK_NOTHROW(kfmm::l2l(space, p, none, parent, centres, M));
  CHECK_NOTHROW(kfmm::l2p(space, p, 1.0, none, ranges, centres, M, x, acc, phi));
  Kokkos::View<double*[3], Memory> x0("x0", 0), acc0("acc0", 0);
  Kokkos::View<double*, Memory> m0("m0", 0), phi0("phi0", 0);
  r(0, 0) = r(0, 1) = r(1, 0) = r(1, 1) = r(2, 0) = r(2, 1) = 0;
  Kokkos::deep_copy(ranges, r);
  CHECK_NOTHROW(kfmm::p2m(space, p, x0, m0, ranges, leaves, centres, M));
  CHECK_NOTHROW(kfmm::l2p(space, p, 1.0, leaves, ranges, centres, M, x0, acc0, phi0));
  auto M_h = kfmm_test::to_host(M);
  for (int k = 0; k < nc; ++k) {
    CHECK(M_h(0, k) == 5.0);  // not listed: untouched
    CHECK(M_h(1, k) == 0.0);  // empty leaf: zeros
    CHECK(M_h(2, k) == 0.0);
  }
}

TEMPLATE_LIST_TEST_CASE("single particle P2M and L2P at the centre and on the axis", "[operators][errors]",
                        kfmm_test::ExecutionSpaces) {
  // N = 1: a particle exactly at its leaf centre has only a monopole; L2P at the centre of a local
  // returns L_0^0 and the degree-1 gradient, with no NaN from the zero radius.
  using Memory = typename TestType::memory_space;
  const TestType space;
  const int p = 6, nc = kfmm::num_coefficients(p);
  Kokkos::View<float*[3], Memory> x("x", 1), centres("centres", 1), acc("acc", 1);
  Kokkos::View<float*, Memory> m("m", 1), phi("phi", 1);
  Kokkos::View<int* [2], Memory> ranges("ranges", 1);
  kfmm::ExpansionView<float, Memory> M("M", 1, nc);
  Kokkos::deep_copy(m, 2.5f);
  auto r = Kokkos::create_mirror_view(ranges);
  r(0, 0) = 0, r(0, 1) = 1;
  Kokkos::deep_copy(ranges, r);
  auto leaf = kfmm_test::device_ints<Memory>({0});
  kfmm::p2m(space, p, x, m, ranges, leaf, centres, M);
  auto M_h = kfmm_test::to_host(M);
  for (int k = 0; k < nc; ++k) CHECK(M_h(0, k) == (k == 0 ? 2.5f : 0.0f));
  // Local: L_0^0 = 3, L_1^0 = 0.5, L_1^1 = -2: Phi = 3 + 0.5 z - 2 (x/2) = 3 + 0.5 z - x.
  auto L_h = Kokkos::create_mirror_view(M);
  Kokkos::deep_copy(L_h, 0.0f);
  L_h(0, 0) = 3.0f, L_h(0, kfmm::coefficient_index(1, 0)) = 0.5f,
         L_h(0, kfmm::coefficient_index(1, 1)) = -2.0f;
  Kokkos::deep_copy(M, L_h);
  kfmm::l2p(space, p, 2.0, leaf, ranges, centres, M, x, acc, phi);
  auto acc_h = kfmm_test::to_host(acc);
  auto phi_h = kfmm_test::to_host(phi);
  CHECK(phi_h(0) == -6.0f);     // -G Phi
  CHECK(acc_h(0, 0) == -2.0f);  // G dPhi/dx
  CHECK(acc_h(0, 1) == 0.0f);
  CHECK(acc_h(0, 2) == 1.0f);
}
