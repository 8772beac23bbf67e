// Core layer: expansion layout, order checks and the error type.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"

TEST_CASE("expansion layout packs degree n at slots n^2 to n^2+2n", "[core]") {
  int expected = 0;
  for (int n = 0; n <= kfmm::max_order; ++n) {
    for (int m = -n; m <= n; ++m) CHECK(kfmm::coefficient_index(n, m) == expected++);
    CHECK(kfmm::num_coefficients(n) == expected);
  }
}

TEST_CASE("expansion rows hold every coefficient, are 16-byte multiples and avoid strides of 16 reals",
          "[core]") {
  for (int p = 0; p <= kfmm::max_order; ++p) {
    const int nc = kfmm::num_coefficients(p), row = kfmm::expansion_row_length(p);
    INFO("order " << p);
    CHECK(row >= nc);
    CHECK(row < nc + 8);
    CHECK(row % 4 == 0);
    CHECK(row % 16 != 0);
    CHECK((row / 4) % 2 == 1);
  }
  CHECK(kfmm::expansion_row_length(7) == 68);
  CHECK(kfmm::expansion_row_length(6) == 52);
  CHECK(kfmm::expansion_row_length(5) == 36);
  CHECK(kfmm::expansion_row_length(0) == 4);
}

TEST_CASE("order checks name the argument and the range", "[core]") {
  CHECK_NOTHROW(kfmm::check_order(0));
  CHECK_NOTHROW(kfmm::check_order(kfmm::max_order));
  CHECK_THROWS_WITH(kfmm::check_order(17, "p2m order"),
                    Catch::Matchers::ContainsSubstring("p2m order = 17 is out of range"));
  CHECK_THROWS_AS(kfmm::check_order(-1), kfmm::Error);
}
