// bits_for against the obvious host count (the smallest b with max_value < 2^b), on the host and inside a
// kernel of every backend: every power of two, its neighbours, and the extremes.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <vector>

#include "backends.hpp"
#include "kfmm/core/bit_width.hpp"

namespace {

int bits_by_comparison(unsigned long long value) {
  for (int b = 0; b < 64; ++b) {
    if (value < (1ULL << b)) return b;
  }
  return 64;
}

std::vector<unsigned long long> bit_width_inputs() {
  std::vector<unsigned long long> v = {0, ~0ULL, ~0ULL - 1};
  for (int s = 0; s < 64; ++s) {
    const unsigned long long p = 1ULL << s;
    v.push_back(p - 1);
    v.push_back(p);
    v.push_back(p + 1);
  }
  return v;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("bits_for counts the bits of every value, log2 of a power of two minus one", "[core]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  const std::vector<unsigned long long> inputs = bit_width_inputs();
  const int n = static_cast<int>(inputs.size());
  Kokkos::View<unsigned long long*, Kokkos::HostSpace> host_in("host_in", n);
  for (int i = 0; i < n; ++i) host_in(i) = inputs[i];
  const auto in = Kokkos::create_mirror_view_and_copy(typename Space::memory_space(), host_in);
  Kokkos::View<int*, typename Space::memory_space> out("out", n);
  Kokkos::parallel_for(
      "bits_for", Kokkos::RangePolicy<Space>(0, n),
      KOKKOS_LAMBDA(const int i) { out(i) = kfmm::bits_for(in(i)); });
  const auto host_out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  for (int i = 0; i < n; ++i) {
    INFO("value " << inputs[i]);
    CHECK(host_out(i) == bits_by_comparison(inputs[i]));
    CHECK(kfmm::bits_for(inputs[i]) == host_out(i));
  }
  for (int s = 0; s < 64; ++s) CHECK(kfmm::bits_for((1ULL << s) - 1) == s);  // the team sort's log2
  CHECK(kfmm::bits_for(0) == 0);
  CHECK(kfmm::bits_for(1) == 1);
  CHECK(kfmm::bits_for(255) == 8);
  CHECK(kfmm::bits_for(256) == 9);
  CHECK(kfmm::bits_for(~0ULL) == 64);
}
