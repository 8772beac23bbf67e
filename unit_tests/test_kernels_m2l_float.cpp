// Batched M2L in float: every lane against the long-double naive O(p^4) sum of the float-rounded
// inputs, relative error < 1e-5.
#include <catch2/catch_template_test_macros.hpp>

#include "test_kernels_m2l_common.hpp"

TEMPLATE_LIST_TEST_CASE("m2l lanes match the naive reference in float", "[kernels][m2l]",
                        kfmm_test::ExecutionSpaces) {
  for (int order = 0; order <= 12; ++order)
    kfmm_test_m2l::check_against_naive<float, TestType>(order, 160, 1e-5);
}

TEMPLATE_LIST_TEST_CASE("m2l refuses bad requests in float", "[kernels][m2l]", kfmm_test::ExecutionSpaces) {
  kfmm_test_m2l::check_refusals<float, TestType>();
}
