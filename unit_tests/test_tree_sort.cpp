// Morton keys and the sort seam against naive host references.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/tree/morton.hpp"
#include "kfmm/tree/sort.hpp"
#include "test_tree_inputs.hpp"

namespace {

// Bit-by-bit interleave: x bit b -> key bit 3b + 2, y -> 3b + 1, z -> 3b.
std::uint64_t naive_interleave(std::uint32_t x, std::uint32_t y, std::uint32_t z) {
  std::uint64_t key = 0;
  for (int b = 0; b < 21; ++b) {
    key |= static_cast<std::uint64_t>((x >> b) & 1u) << (3 * b + 2);
    key |= static_cast<std::uint64_t>((y >> b) & 1u) << (3 * b + 1);
    key |= static_cast<std::uint64_t>((z >> b) & 1u) << (3 * b);
  }
  return key;
}

int naive_common_level(std::uint64_t a, std::uint64_t b) {
  int l = 0;
  while (l < 21 && (a >> (3 * (20 - l))) == (b >> (3 * (20 - l)))) ++l;
  return l;
}

template <class Space, class Key, class Tiles = kfmm::detail::DefaultRadixTiles<Space>>
void check_sort(int n, int key_bits, int distinct, std::uint64_t seed, int begin_bit = 0) {
  using M = typename Space::memory_space;
  kfmm_tree_test::Rng rng(seed);
  std::vector<Key> keys(n);
  const std::uint64_t mask = key_bits >= 64 ? ~0ull : ((1ull << key_bits) - 1);
  std::vector<Key> pool(std::max(distinct, 1));
  for (auto& k : pool) k = static_cast<Key>(rng.bits() & mask);
  for (auto& k : keys) k = pool[rng.bits() % pool.size()];
  Kokkos::View<Key*, M> dk("keys", n + 3);  // longer than n: only the first n are sorted
  Kokkos::View<int*, M> dv("values", n + 3);
  auto hk = Kokkos::create_mirror_view(dk);
  auto hv = Kokkos::create_mirror_view(dv);
  for (int i = 0; i < n + 3; ++i) {
    hk(i) = i < n ? keys[i] : static_cast<Key>(0);
    hv(i) = i < n ? i : -7;
  }
  Kokkos::deep_copy(dk, hk);
  Kokkos::deep_copy(dv, hv);
  kfmm::SortWorkspace<M, Key, int> workspace;
  kfmm::detail::radix_sort<Tiles>(Space(), dk, dv, n, begin_bit, key_bits, workspace);
  Kokkos::deep_copy(hk, dk);
  Kokkos::deep_copy(hv, dv);
  std::vector<int> ref(n);
  std::iota(ref.begin(), ref.end(), 0);
  // Only bits [begin_bit, key_bits) count: keys equal there keep their order.
  std::stable_sort(ref.begin(), ref.end(),
                   [&](int a, int b) { return (keys[a] >> begin_bit) < (keys[b] >> begin_bit); });
  for (int i = 0; i < n; ++i) {
    INFO("n = " << n << " bits = [" << begin_bit << ", " << key_bits << ") i = " << i);
    REQUIRE(hv(i) == ref[i]);
    REQUIRE(hk(i) == keys[ref[i]]);
  }
  for (int i = n; i < n + 3; ++i) REQUIRE(hv(i) == -7);  // the tail is untouched
}

/// Device copies of `keys` and of their indices 0 .. n-1 (the payload a stable sort must permute alike).
template <class M, class Key>
std::pair<Kokkos::View<Key*, M>, Kokkos::View<int*, M>> upload_keys(const std::vector<Key>& keys) {
  const int n = static_cast<int>(keys.size());
  Kokkos::View<Key*, M> dk("keys", n);
  Kokkos::View<int*, M> dv("values", n);
  auto hk = Kokkos::create_mirror_view(dk);
  auto hv = Kokkos::create_mirror_view(dv);
  for (int i = 0; i < n; ++i) {
    hk(i) = keys[i];
    hv(i) = i;
  }
  Kokkos::deep_copy(dk, hk);
  Kokkos::deep_copy(dv, hv);
  return {dk, dv};
}

}  // namespace

TEST_CASE("morton encode decode and common level match naive bit loops", "[tree][morton]") {
  kfmm_tree_test::Rng rng(3);
  for (int t = 0; t < 20000; ++t) {
    const std::uint32_t x = rng.bits() & 0x1fffff, y = rng.bits() & 0x1fffff, z = rng.bits() & 0x1fffff;
    const auto key = kfmm::morton_encode(x, y, z);
    REQUIRE(key == naive_interleave(x, y, z));
    REQUIRE((key >> 63) == 0);
    std::uint32_t a, b, c;
    kfmm::morton_decode(key, a, b, c);
    REQUIRE(a == x);
    REQUIRE(b == y);
    REQUIRE(c == z);
    // Partners sharing a random number of leading digits.
    const int keep = static_cast<int>(rng.bits() % 22);
    const std::uint64_t low_mask = keep == 21 ? 0 : ((1ull << (3 * (21 - keep))) - 1);
    const std::uint64_t other = (key & ~low_mask) | (rng.bits() & low_mask);
    REQUIRE(kfmm::morton_common_level(key, other) == naive_common_level(key, other));
  }
  REQUIRE(kfmm::morton_common_level(0, 0) == 21);
  REQUIRE(kfmm::morton_common_level(0, 1) == 20);
  REQUIRE(kfmm::morton_common_level(0, 1ull << 62) == 0);
  REQUIRE(kfmm::detail::count_leading_zeros(0) == 64);
  REQUIRE(kfmm::detail::count_leading_zeros(1) == 63);
  REQUIRE(kfmm::detail::count_leading_zeros(~0ull) == 0);
}

TEST_CASE("morton cells clamp and resolve offsets far from the origin", "[tree][morton]") {
  kfmm::BoundingBox box;
  for (int a = 0; a < 3; ++a) {
    box.lo[a] = 1e6;
    box.hi[a] = 1e6 + 1;
  }
  const auto f = kfmm::MortonFrame::of(box);
  REQUIRE(kfmm::morton_cell(1e6, f.lo[0], f.scale) == 0);
  REQUIRE(kfmm::morton_cell(1e6 + 1, f.lo[0], f.scale) == (1u << 21) - 1);  // the top corner clamps
  REQUIRE(kfmm::morton_cell(1e6 - 1, f.lo[0], f.scale) == 0);
  REQUIRE(kfmm::morton_cell(1e6 + 0.5, f.lo[0], f.scale) == (1u << 20));
  // Two points 1e-6 apart at 1e6 get different finest cells (cell edge 2^-21 ~ 4.8e-7).
  REQUIRE(kfmm::morton_cell(1e6 + 0.25, f.lo[0], f.scale) !=
          kfmm::morton_cell(1e6 + 0.25 + 1e-6, f.lo[0], f.scale));
  // A single point: a unit cube, the point at cell 0.
  kfmm::BoundingBox point;
  for (int a = 0; a < 3; ++a) point.lo[a] = point.hi[a] = -3;
  const auto g = kfmm::MortonFrame::of(point);
  REQUIRE(g.scale == static_cast<double>(1u << 21));
  REQUIRE(kfmm::morton_cell(-3, g.lo[0], g.scale) == 0);
}

TEMPLATE_LIST_TEST_CASE("bounding box reduction matches the host and rejects non-finite input", "[tree][box]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  for (const char* name : {"uniform", "plummer", "line", "offset"}) {
    const auto in = kfmm_tree_test::make_input(name, 5000, 11);
    kfmm_tree_test::DeviceInput<Space, double> d(in);
    const auto box = kfmm::bounding_box(Space(), d.positions);
    for (int a = 0; a < 3; ++a) {
      double lo = in.x[a], hi = in.x[a];
      for (int i = 0; i < in.size(); ++i) {
        lo = std::min(lo, in.x[3 * i + a]);
        hi = std::max(hi, in.x[3 * i + a]);
      }
      REQUIRE(box.lo[a] == lo);
      REQUIRE(box.hi[a] == hi);
    }
  }
  kfmm_tree_test::DeviceInput<Space, float> empty(kfmm_tree_test::make_input("uniform", 0));
  REQUIRE(kfmm::bounding_box(Space(), empty.positions).empty());
  auto in = kfmm_tree_test::make_input("uniform", 100);
  in.x[3 * 57 + 1] = std::nan("");
  kfmm_tree_test::DeviceInput<Space, double> bad(in);
  REQUIRE_THROWS_AS(kfmm::bounding_box(Space(), bad.positions), kfmm::Error);
}

TEMPLATE_LIST_TEST_CASE("radix sort is a stable sort by key", "[tree][sort]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  for (int n : {0, 1, 2, 3, 100, 20000}) {
    check_sort<Space, std::uint64_t>(n, 63, n, 1 + n);
    check_sort<Space, std::uint64_t>(n, 64, n, 2 + n);
    check_sort<Space, std::uint64_t>(n, 63, 5, 3 + n);  // many duplicates: stability
    check_sort<Space, unsigned>(n, 17, n, 4 + n);
    check_sort<Space, unsigned>(n, 32, 37, 5 + n);
    check_sort<Space, unsigned>(n, 1, 2, 6 + n);
    check_sort<Space, unsigned>(n, 0, 1, 7 + n);  // nothing to compare: the order stays
    // A high bit range only (the octree sorts the top levels of its keys): low bits keep caller order.
    check_sort<Space, std::uint64_t>(n, 63, n, 8 + n, 27);
    check_sort<Space, std::uint64_t>(n, 63, n, 9 + n, 60);
    check_sort<Space, unsigned>(n, 20, n, 10 + n, 20);  // an empty range
  }
}

TEMPLATE_LIST_TEST_CASE("sort_by_key_bits orders by a bit range on every backend", "[tree][sort]",
                        kfmm_test::ExecutionSpaces) {
  // The public entry point (CUB on CUDA builds): keys with random low bits, sorted by the top 12.
  using Space = TestType;
  using M = typename Space::memory_space;
  const int n = 5000;
  kfmm_tree_test::Rng rng(77);
  std::vector<std::uint64_t> keys(n);
  for (auto& k : keys) k = rng.bits() & ((1ull << 63) - 1);
  const auto [dk, dv] = upload_keys<M>(keys);
  kfmm::SortWorkspace<M, std::uint64_t, int> workspace;
  kfmm::sort_by_key_bits(Space(), dk, dv, n, 51, 63, workspace);
  const auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dk);
  const auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dv);
  std::vector<int> ref(n);
  std::iota(ref.begin(), ref.end(), 0);
  std::stable_sort(ref.begin(), ref.end(), [&](int a, int b) { return (keys[a] >> 51) < (keys[b] >> 51); });
  for (int i = 0; i < n; ++i) {
    REQUIRE(hv(i) == ref[i]);
    REQUIRE(hk(i) == keys[ref[i]]);
  }
  REQUIRE_THROWS_AS(kfmm::sort_by_key_bits(Space(), dk, dv, n, 10, 9, workspace), kfmm::Error);
  REQUIRE_THROWS_AS(kfmm::sort_by_key_bits(Space(), dk, dv, n, -1, 9, workspace), kfmm::Error);
  REQUIRE_THROWS_AS(kfmm::sort_by_key_bits(Space(), dk, dv, n, 0, 65, workspace), kfmm::Error);
}

TEMPLATE_LIST_TEST_CASE("sort_by_key_bits_in_either leaves the sorted pairs in one of the two buffers",
                        "[tree][sort]", kfmm_test::ExecutionSpaces) {
  // The walk's entry point: no copy back. Whichever buffers it names hold the stable sort, for 1-24 key
  // bits (1-3 passes of the host's 8-bit digits; CUB picks its own digit widths).
  using Space = TestType;
  using M = typename Space::memory_space;
  const int n = 20000;
  bool named_first = false, named_second = false;
  for (const int bits : {1, 5, 8, 9, 13, 16, 17, 20, 24}) {
    kfmm_tree_test::Rng rng(500 + bits);
    std::vector<unsigned> keys(n);
    for (auto& k : keys) k = static_cast<unsigned>(rng.bits() & ((1ull << bits) - 1));
    const auto [dk, dv] = upload_keys<M>(keys);
    kfmm::SortWorkspace<M, unsigned, int> workspace;
    const bool second = kfmm::sort_by_key_bits_in_either(Space(), dk, dv, n, 0, bits, workspace);
    (second ? named_second : named_first) = true;
    const auto rk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), second ? workspace.keys : dk);
    const auto rv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), second ? workspace.values : dv);
    std::vector<int> ref(n);
    std::iota(ref.begin(), ref.end(), 0);
    std::stable_sort(ref.begin(), ref.end(), [&](int a, int b) { return keys[a] < keys[b]; });
    INFO("bits = " << bits << ", result in the " << (second ? "second" : "first") << " buffers");
    for (int i = 0; i < n; ++i) {
      REQUIRE(rv(i) == ref[i]);
      REQUIRE(rk(i) == keys[ref[i]]);
    }
  }
  if (kfmm::detail::is_host_execution_space<Space>) {  // 8-bit digits: 1 and 3 passes name the second buffers
    REQUIRE(named_first);
    REQUIRE(named_second);
  }
}

#if defined(KOKKOS_ENABLE_OPENMP)
TEST_CASE("radix sort with multi-thread teams on the host", "[tree][sort]") {
  // The device geometry (many threads per tile, each with its own counters) exercised on OpenMP.
  if (Kokkos::OpenMP().concurrency() < 2) return;
  using Tiles = kfmm::detail::RadixTiles<2, 5>;
  for (int n : {2, 9, 10, 11, 1000, 5003}) {
    check_sort<Kokkos::OpenMP, std::uint64_t, Tiles>(n, 63, n, 10 + n);
    check_sort<Kokkos::OpenMP, std::uint64_t, Tiles>(n, 63, 3, 11 + n);
    check_sort<Kokkos::OpenMP, unsigned, Tiles>(n, 13, 40, 12 + n);
  }
}
#endif

TEMPLATE_LIST_TEST_CASE("radix sort rejects bad arguments", "[tree][sort]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using M = typename Space::memory_space;
  Kokkos::View<unsigned*, M> k("k", 4);
  Kokkos::View<int*, M> v("v", 3);
  REQUIRE_THROWS_AS(kfmm::sort_by_key(Space(), k, v, 4, 8), kfmm::Error);   // n > values
  REQUIRE_THROWS_AS(kfmm::sort_by_key(Space(), k, v, -1, 8), kfmm::Error);  // n < 0
  REQUIRE_THROWS_AS(kfmm::sort_by_key(Space(), k, v, 3, 33), kfmm::Error);  // bits > key width
}
