// Batched M2L in double: every lane against the long-double naive O(p^4) sum, relative error < 1e-12,
// at every order (the host's compile-time lanes reach p = 16 in double: static_order.hpp).
#include <catch2/catch_template_test_macros.hpp>

#include "test_kernels_m2l_common.hpp"

TEMPLATE_LIST_TEST_CASE("m2l lanes match the naive reference in double", "[kernels][m2l]",
                        kfmm_test::ExecutionSpaces) {
  for (int order = 0; order <= kfmm::max_order; ++order)  // (host: compile-time lanes up to 16)
    kfmm_test_m2l::check_against_naive<double, TestType>(order, 160, 1e-12);
}

TEMPLATE_LIST_TEST_CASE("m2l refuses bad requests in double", "[kernels][m2l]", kfmm_test::ExecutionSpaces) {
  kfmm_test_m2l::check_refusals<double, TestType>();
}

TEMPLATE_LIST_TEST_CASE("m2l lanes match the naive reference on a large list", "[kernels][m2l]",
                        kfmm_test::ExecutionSpaces) {
  kfmm_test_m2l::check_large_list<double, TestType>(1e-12);
}
