// The chunk table of the CSR operators (operators/kfmm/operators/csr_chunks.hpp) against a host
// construction: every row cut into chunks of at most m pairs, a row's first chunk direct (-1), the
// others' partial blocks consecutive in row order, split rows ascending, the device totals, and host
// capacities that bound them (bounded mode) or equal them (exact mode).
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "backends.hpp"
#include "kfmm/operators/csr_chunks.hpp"

namespace {

/// Block size of row r: a per-row value from a View (the operators use (p+1)^2 or 4 x targets).
template <class Memory>
struct BlockOf {
  Kokkos::View<const int*, Memory> blocks;
  KOKKOS_INLINE_FUNCTION long long operator()(const int r) const { return blocks(r); }
};

struct HostTable {
  std::vector<int> row, begin, end, partial, split_rows, split_partial, split_chunks;
  int partial_total = 0;
};

HostTable host_table(const std::vector<int>& offsets, const std::vector<int>& blocks, int m) {
  HostTable t;
  const int rows = static_cast<int>(offsets.size()) - 1;
  for (int r = 0; r < rows; ++r) {
    const int n = offsets[r + 1] - offsets[r];
    const int k = (n + m - 1) / m;
    if (k > 1) {
      t.split_rows.push_back(r);
      t.split_partial.push_back(t.partial_total);
      t.split_chunks.push_back(k);
    }
    for (int j = 0; j < k; ++j) {
      t.row.push_back(r);
      t.begin.push_back(offsets[r] + j * m);
      t.end.push_back(j + 1 == k ? offsets[r + 1] : offsets[r] + (j + 1) * m);
      t.partial.push_back(j == 0 ? -1 : t.partial_total + (j - 1) * blocks[r]);
    }
    if (k > 1) t.partial_total += (k - 1) * blocks[r];
  }
  return t;
}

template <class View>
std::vector<int> prefix(const View& v, int n) {
  auto h = kfmm_test::to_host(v);
  return std::vector<int>(h.data(), h.data() + n);
}

/// Random row lengths: empty rows, rows of exactly m and m + 1 pairs, long rows.
std::vector<int> random_offsets(int rows, int m, std::mt19937& gen) {
  std::vector<int> offsets{0};
  for (int r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(gen() % 6);
    const int n = kind == 0   ? 0
                  : kind == 1 ? m
                  : kind == 2 ? m + 1
                  : kind == 3 ? static_cast<int>(gen() % (8 * m + 1))
                              : static_cast<int>(gen() % (m + 1));
    offsets.push_back(offsets.back() + n);
  }
  return offsets;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("csr chunk table matches a host construction", "[kernels][csr]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  std::mt19937 gen(17);
  kfmm::detail::CsrChunks<Mem> table;  // reused across cases: grows, never shrinks
  // Random lists, then lists at the capacity bounds: every row m + 1 pairs (split rows = pairs / (m + 1)),
  // every row 2m pairs (two chunks each), one pair per row at m = 1 (chunks = pairs).
  struct Case {
    int rows, m, fixed_length;  // fixed_length < 0: random lengths
  };
  std::vector<Case> cases;
  for (const int rows : {0, 1, 7, 300, 5000})
    for (const int m : {1, 3, 64}) cases.push_back({rows, m, -1});
  for (const int m : {1, 3, 64}) {
    cases.push_back({700, m, m + 1});
    cases.push_back({700, m, 2 * m});
  }
  cases.push_back({700, 1, 1});
  for (const Case& k : cases) {
    const int rows = k.rows, m = k.m;
    std::vector<int> offsets{0};
    if (k.fixed_length < 0) {
      offsets = random_offsets(rows, m, gen);
    } else {
      for (int r = 0; r < rows; ++r) offsets.push_back(offsets.back() + k.fixed_length);
    }
    std::vector<int> blocks(rows), targets(rows);
    int max_block = 1;
    for (int r = 0; r < rows; ++r) {
      blocks[r] = k.fixed_length < 0 ? 1 + static_cast<int>(gen() % 40) : 5;
      max_block = std::max(max_block, blocks[r]);
      targets[r] = r;
    }
    kfmm::InteractionList<Mem> list;
    list.targets = kfmm_test::device_ints<Mem>(targets);
    list.offsets = kfmm_test::device_ints<Mem>(offsets);
    list.sources = kfmm_test::device_ints<Mem>(std::vector<int>(offsets.back(), 0));
    const BlockOf<Mem> block{kfmm_test::device_ints<Mem>(blocks)};
    const HostTable ref = host_table(offsets, blocks, m);
    for (const int mode : {0, 1, 2}) {
      const bool bounded = mode != 1;
      table.pack_scans = mode != 2;  // mode 2: bounded, the three-scan path
      INFO("rows " << rows << ", m " << m << ", row length " << k.fixed_length
                   << (bounded ? ", bounded" : ", exact") << (table.pack_scans ? "" : ", three scans"));
      // (a sentinel in every entry first, so that a build that writes nothing cannot pass on the last
      // build's table)
      for (auto* v : {&table.chunk_row, &table.chunk_begin, &table.chunk_end, &table.chunk_partial,
                      &table.split_rows, &table.split_partial, &table.split_chunks, &table.totals})
        Kokkos::deep_copy(*v, -7);
      kfmm::detail::make_csr_chunks(space, list, m, block, bounded ? max_block : 0, table);
      const auto totals = kfmm::detail::csr_chunk_totals(table);
      const int chunks = static_cast<int>(ref.row.size());
      const int split = static_cast<int>(ref.split_rows.size());
      REQUIRE(totals.chunks == chunks);
      REQUIRE(totals.split_rows == split);
      REQUIRE(totals.partial == ref.partial_total);
      REQUIRE(table.exact == (!bounded || offsets.back() == 0));
      if (table.exact) {
        CHECK(table.chunk_capacity == chunks);
        CHECK(table.split_capacity == split);
        CHECK(table.partial_capacity == ref.partial_total);
      } else {
        CHECK(table.chunk_capacity >= chunks);
        CHECK(table.split_capacity >= split);
        CHECK(table.partial_capacity >= ref.partial_total);
        // where the bounds are attained, they are attained exactly
        if (k.fixed_length == m + 1) CHECK(table.split_capacity == split);
        if (k.fixed_length == 1 && m == 1) CHECK(table.chunk_capacity == chunks);
      }
      if (chunks == 0) continue;
      CHECK(prefix(table.chunk_row, chunks) == ref.row);
      CHECK(prefix(table.chunk_begin, chunks) == ref.begin);
      CHECK(prefix(table.chunk_end, chunks) == ref.end);
      CHECK(prefix(table.chunk_partial, chunks) == ref.partial);
      CHECK(prefix(table.split_rows, split) == ref.split_rows);
      CHECK(prefix(table.split_partial, split) == ref.split_partial);
      CHECK(prefix(table.split_chunks, split) == ref.split_chunks);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("csr chunk table refuses a chunk size below 1", "[kernels][csr]",
                        kfmm_test::ExecutionSpaces) {
  using Mem = typename TestType::memory_space;
  kfmm::InteractionList<Mem> list;
  list.targets = kfmm_test::device_ints<Mem>({0});
  list.offsets = kfmm_test::device_ints<Mem>({0, 2});
  list.sources = kfmm_test::device_ints<Mem>({0, 0});
  kfmm::detail::CsrChunks<Mem> table;
  const BlockOf<Mem> block{kfmm_test::device_ints<Mem>({1})};
  CHECK_THROWS_WITH(kfmm::detail::make_csr_chunks(TestType(), list, 0, block, 1, table),
                    Catch::Matchers::ContainsSubstring("must be at least 1"));
}

TEMPLATE_LIST_TEST_CASE("csr chunk table counts exactly when the partial bound exceeds the int range",
                        "[kernels][csr]", kfmm_test::ExecutionSpaces) {
  using Mem = typename TestType::memory_space;
  kfmm::InteractionList<Mem> list;  // one row of 5 pairs, chunks of 1: four later chunks of block 3
  list.targets = kfmm_test::device_ints<Mem>({0});
  list.offsets = kfmm_test::device_ints<Mem>({0, 5});
  list.sources = kfmm_test::device_ints<Mem>({0, 0, 0, 0, 0});
  kfmm::detail::CsrChunks<Mem> table;
  const BlockOf<Mem> block{kfmm_test::device_ints<Mem>({3})};
  // a claimed largest block of 2^30 bounds the buffer by 5 x 2^30 entries: counted instead
  kfmm::detail::make_csr_chunks(TestType(), list, 1, block, 1LL << 30, table);
  CHECK(table.exact);
  CHECK(table.chunk_capacity == 5);
  CHECK(table.split_capacity == 1);
  CHECK(table.partial_capacity == 12);
}
