// zero_fill against the obvious loop: every value of the range cleared, nothing outside it touched, for
// starts at every offset from a 16-byte boundary and every length up to ten 16-byte blocks.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cstddef>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/zero_fill.hpp"

namespace {

template <class Space, class T>
void check_zero_fill() {
  using M = typename Space::memory_space;
  constexpr std::size_t per_block = 16 / sizeof(T);
  const std::size_t size = 4096;
  Kokkos::View<T*, M> buffer("buffer", size);
  const auto host = Kokkos::create_mirror_view(buffer);
  std::vector<std::size_t> counts = {1000, 3001};  // and every length up to ten blocks
  for (std::size_t count = 0; count <= 10 * per_block; ++count) counts.push_back(count);
  for (std::size_t offset = 0; offset < 2 * per_block; ++offset) {
    for (const std::size_t count : counts) {
      for (std::size_t i = 0; i < size; ++i) host(i) = static_cast<T>(1 + i % 7);
      Kokkos::deep_copy(buffer, host);
      Space space;
      kfmm::detail::zero_fill(space, buffer.data() + offset, count);
      space.fence();
      Kokkos::deep_copy(host, buffer);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < size; ++i) {
        const bool inside = i >= offset && i < offset + count;
        const T expected = inside ? T(0) : static_cast<T>(1 + i % 7);
        if (host(i) != expected) ++wrong;
      }
      INFO("offset " << offset << ", count " << count);
      CHECK(wrong == 0);
    }
  }
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("zero_fill clears exactly its range at any alignment and length", "[core]",
                        kfmm_test::ExecutionSpaces) {
  check_zero_fill<TestType, float>();
  check_zero_fill<TestType, double>();
  check_zero_fill<TestType, int>();
}
