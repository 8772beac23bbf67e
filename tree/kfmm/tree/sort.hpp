/// \file sort.hpp
/// The sort seam of the tree layer: a stable ascending sort of unsigned integer keys that permutes a
/// payload alongside. Everything in tree/ sorts through `sort_by_key` and its variants (a bit range; a
/// result left in either buffer), so a faster backend-specific sort can replace the portable one here
/// without touching the callers.
///
/// The portable implementation is a least-significant-digit radix sort with up to 8-bit digits, three
/// kernels per digit: per-tile digit counts, one exclusive scan over the (digit, tile) count matrix,
/// and a stable scatter. Within a tile every thread owns a contiguous run of elements and its own
/// column of counters in team scratch memory, so ranks come from plain prefix sums: no atomics, and
/// the output is the same on every backend (the sort is stable, so it is fully determined).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kfmm/core/bit_width.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/core/scan.hpp"
#include "kfmm/core/view_capacity.hpp"

// Opt-in CUB backend of the sort seam for CUDA builds (-DKFMM_ENABLE_CUB_SORT): a onesweep radix
// sort, much faster than the portable one. Stable too, so the results are identical.
#if defined(KOKKOS_ENABLE_CUDA) && defined(KFMM_ENABLE_CUB_SORT)
#include <cub/device/device_radix_sort.cuh>
#define KFMM_TREE_HAVE_CUB_SORT 1
#endif

namespace kfmm {

/// Reusable temporaries of sort_by_key (grown on demand), so repeated sorts allocate nothing. keys and
/// values are the sort's second buffers, which sort_by_key_bits_in_either may leave the result in (the
/// walk also keeps its open-pair queues there between sorts).
template <class MemorySpace, class Key, class Value>
struct SortWorkspace {
  Kokkos::View<Key*, MemorySpace> keys;
  Kokkos::View<Value*, MemorySpace> values;
  Kokkos::View<int*, MemorySpace> counts;
  Kokkos::View<unsigned char*, MemorySpace> bytes;  ///< temporary storage of a vendor sort

  void reserve(int n, int num_counts) {
    if (static_cast<long long>(keys.extent(0)) < n || static_cast<long long>(values.extent(0)) < n) {
      keys = Kokkos::View<Key*, MemorySpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::sort::keys")), n);
      values = Kokkos::View<Value*, MemorySpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::sort::values")), n);
    }
    if (static_cast<int>(counts.extent(0)) < num_counts) {
      counts = Kokkos::View<int*, MemorySpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kfmm::sort::counts")), num_counts);
    }
  }
};

namespace detail {

/// Tile geometry of the radix sort: teams of TeamSize threads, each owning Items consecutive elements.
template <int TeamSize, int Items>
struct RadixTiles {
  static constexpr int team_size = TeamSize;
  static constexpr int items = Items;
  static constexpr int tile = team_size * items;
  static_assert(tile < 65536, "radix sort tiles must fit 16-bit counters");
  /// Tiles covering n elements (in 64 bits: n may be near INT_MAX).
  static int count(int n) { return static_cast<int>((static_cast<long long>(n) + tile - 1) / tile); }
};

/// Default geometry: host spaces use one thread per long tile; device spaces teams of 64 threads
/// with 32 elements each (256 digits x 64 threads x 2 bytes = 32 KiB of team scratch).
template <class ExecutionSpace>
using DefaultRadixTiles = std::conditional_t<
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecutionSpace::memory_space>::accessible,
    RadixTiles<1, 8192>, RadixTiles<64, 32>>;

/// One radix pass: digit `(key >> shift) & (2^digit_bits - 1)` from `*_in` to `*_out`.
template <class ExecutionSpace, class Tiles, class KeyIn, class ValueIn, class KeyOut, class ValueOut,
          class Counts>
struct RadixPass {
  using Scratch = Kokkos::View<unsigned short*, typename ExecutionSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using IntScratch = Kokkos::View<int*, typename ExecutionSpace::scratch_memory_space,
                                  Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Team = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  static constexpr int T = Tiles::team_size;
  static constexpr int I = Tiles::items;
  struct CountTag {};
  struct ScatterTag {};

  KeyIn keys_in;
  ValueIn values_in;
  KeyOut keys_out;
  ValueOut values_out;
  Counts counts;  // (digit, tile) matrix, digit-major
  int n, shift, radix, tiles;
  unsigned mask;

  /// Counts each thread's digits into its own scratch column cnt[d * T + t].
  KOKKOS_INLINE_FUNCTION void count_digits(const Team& team, const Scratch& cnt) const {
    const int t = team.team_rank();
    for (int d = 0; d < radix; ++d) cnt(d * T + t) = 0;
    const long long begin =
        static_cast<long long>(team.league_rank()) * Tiles::tile + static_cast<long long>(t) * I;
    const long long end = begin + I < n ? begin + I : n;
    for (long long i = begin; i < end; ++i) {
      const unsigned d = static_cast<unsigned>(keys_in(i) >> shift) & mask;
      cnt(d * T + t) = static_cast<unsigned short>(cnt(d * T + t) + 1);
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(CountTag, const Team& team) const {
    Scratch cnt(team.team_scratch(0), static_cast<size_t>(radix) * T);
    count_digits(team, cnt);
    team.team_barrier();
    for (int d = team.team_rank(); d < radix; d += T) {
      int sum = 0;
      for (int u = 0; u < T; ++u) sum += cnt(d * T + u);
      counts(d * tiles + team.league_rank()) = sum;
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(ScatterTag, const Team& team) const {
    if constexpr (T == 1) {
      // One thread per tile (host): its counts are the tile's, so the scanned offsets are its ranks.
      IntScratch next(team.team_scratch(0), static_cast<size_t>(radix));
      const int tile = team.league_rank();
      for (int d = 0; d < radix; ++d) next(d) = counts(d * tiles + tile);
      const long long begin = static_cast<long long>(tile) * I;
      const long long end = begin + I < n ? begin + I : n;
      for (long long i = begin; i < end; ++i) {
        const auto key = keys_in(i);
        const int pos = next(static_cast<unsigned>(key >> shift) & mask)++;
        keys_out(pos) = key;
        values_out(pos) = values_in(i);
      }
      return;
    }
    Scratch cnt(team.team_scratch(0), static_cast<size_t>(radix) * T);
    count_digits(team, cnt);
    team.team_barrier();
    // Exclusive prefix of each digit's column over the threads (thread order = element order).
    for (int d = team.team_rank(); d < radix; d += T) {
      unsigned short run = 0;
      for (int u = 0; u < T; ++u) {
        const unsigned short c = cnt(d * T + u);
        cnt(d * T + u) = run;
        run = static_cast<unsigned short>(run + c);
      }
    }
    team.team_barrier();
    const int t = team.team_rank();
    const int tile = team.league_rank();
    const long long begin = static_cast<long long>(tile) * Tiles::tile + static_cast<long long>(t) * I;
    const long long end = begin + I < n ? begin + I : n;
    for (long long i = begin; i < end; ++i) {
      const auto key = keys_in(i);
      const unsigned d = static_cast<unsigned>(key >> shift) & mask;
      const int pos = counts(static_cast<int>(d) * tiles + tile) + cnt(d * T + t);
      cnt(d * T + t) = static_cast<unsigned short>(cnt(d * T + t) + 1);
      keys_out(pos) = key;
      values_out(pos) = values_in(i);
    }
  }

  void run(const ExecutionSpace& space) const {
    const size_t scratch_bytes = Scratch::shmem_size(static_cast<size_t>(radix) * T) +
                                 IntScratch::shmem_size(static_cast<size_t>(radix));
    Kokkos::parallel_for("kfmm::radix_sort::count",
                         Kokkos::TeamPolicy<ExecutionSpace, CountTag>(space, tiles, T)
                             .set_scratch_size(0, Kokkos::PerTeam(scratch_bytes)),
                         *this);
    Kokkos::parallel_scan("kfmm::radix_sort::offsets",
                          Kokkos::RangePolicy<ExecutionSpace>(space, 0, radix * tiles),
                          ExclusiveScanInPlace<Counts>{counts});
    Kokkos::parallel_for("kfmm::radix_sort::scatter",
                         Kokkos::TeamPolicy<ExecutionSpace, ScatterTag>(space, tiles, T)
                             .set_scratch_size(0, Kokkos::PerTeam(scratch_bytes)),
                         *this);
  }
};

template <class ExecutionSpace, class Tiles, class KeyIn, class ValueIn, class KeyOut, class ValueOut,
          class Counts>
void radix_pass(const ExecutionSpace& space, const KeyIn& keys_in, const ValueIn& values_in,
                const KeyOut& keys_out, const ValueOut& values_out, const Counts& counts, int n, int shift,
                int digit_bits) {
  RadixPass<ExecutionSpace, Tiles, KeyIn, ValueIn, KeyOut, ValueOut, Counts> pass{
      keys_in, values_in, keys_out,        values_out,      counts,
      n,       shift,     1 << digit_bits, Tiles::count(n), (1u << digit_bits) - 1u};
  pass.run(space);
}

/// Checks the arguments of every sort entry point (the message names the call's bit range).
template <class Key, class KeysView, class ValuesView>
void check_sort_arguments(const KeysView& keys, const ValuesView& values, int n, int begin_bit, int end_bit) {
  static_assert(std::is_unsigned<Key>::value, "sort_by_key: keys must be an unsigned integer type");
  require(n >= 0 && n <= static_cast<int>(keys.extent(0)) && n <= static_cast<int>(values.extent(0)),
          "sort_by_key: n = ", n, " exceeds the keys (", keys.extent(0), ") or values (", values.extent(0),
          ")");
  require(begin_bit >= 0 && begin_bit <= end_bit && end_bit <= static_cast<int>(8 * sizeof(Key)),
          "sort_by_key: key bits [", begin_bit, ", ", end_bit, ") are out of range for a ", 8 * sizeof(Key),
          "-bit key");
}

/// The radix sort with an explicit tile geometry (tests use it to run device-like teams on the host),
/// comparing key bits [begin_bit, end_bit). With `copy_back` the result ends in keys / values; without,
/// it stays where the last pass wrote it, and the return value says where: true for
/// workspace.keys / workspace.values (an odd number of passes), false for keys / values.
template <class Tiles, class ExecutionSpace, class Key, class Value, class... KeyProps, class... ValueProps>
bool radix_sort(const ExecutionSpace& space, const Kokkos::View<Key*, KeyProps...>& keys,
                const Kokkos::View<Value*, ValueProps...>& values, int n, int begin_bit, int end_bit,
                SortWorkspace<typename ExecutionSpace::memory_space, Key, Value>& workspace,
                bool copy_back = true) {
  check_sort_arguments<Key>(keys, values, n, begin_bit, end_bit);
  const int key_bits = end_bit - begin_bit;
  if (n <= 1 || key_bits == 0) return false;
  const int passes = (key_bits + 7) / 8;
  const int tiles = Tiles::count(n);
  workspace.reserve(n, 256 * tiles);
  auto k_main = Kokkos::subview(keys, Kokkos::make_pair(0, n));
  auto v_main = Kokkos::subview(values, Kokkos::make_pair(0, n));
  auto k_tmp = Kokkos::subview(workspace.keys, Kokkos::make_pair(0, n));
  auto v_tmp = Kokkos::subview(workspace.values, Kokkos::make_pair(0, n));
  // Spread the bits evenly over the passes: smaller digits mean smaller count matrices.
  int shift = begin_bit;
  for (int p = 0; p < passes; ++p) {
    const int bits = (end_bit - shift + (passes - p) - 1) / (passes - p);
    if (p % 2 == 0) {
      radix_pass<ExecutionSpace, Tiles>(space, k_main, v_main, k_tmp, v_tmp, workspace.counts, n, shift,
                                        bits);
    } else {
      radix_pass<ExecutionSpace, Tiles>(space, k_tmp, v_tmp, k_main, v_main, workspace.counts, n, shift,
                                        bits);
    }
    shift += bits;
  }
  if (passes % 2 == 0) return false;
  if (!copy_back) return true;
  Kokkos::deep_copy(space, k_main, k_tmp);
  Kokkos::deep_copy(space, v_main, v_tmp);
  return false;
}

#if defined(KFMM_TREE_HAVE_CUB_SORT)
/// The CUB path: ping-pongs between the caller's arrays and the workspace; copies back if the result
/// ended in the workspace and `copy_back`, else returns where it is (as radix_sort).
template <class Key, class Value, class... KeyProps, class... ValueProps>
bool cub_sort(const Kokkos::Cuda& space, const Kokkos::View<Key*, KeyProps...>& keys,
              const Kokkos::View<Value*, ValueProps...>& values, int n, int begin_bit, int end_bit,
              SortWorkspace<typename Kokkos::Cuda::memory_space, Key, Value>& workspace, bool copy_back) {
  workspace.reserve(n, 0);
  cub::DoubleBuffer<Key> k(keys.data(), workspace.keys.data());
  cub::DoubleBuffer<Value> v(values.data(), workspace.values.data());
  size_t temp_bytes = 0;
  cudaError_t status =
      cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k, v, n, begin_bit, end_bit, space.cuda_stream());
  require(status == cudaSuccess,
          "sort_by_key: cub temporary-size query failed: ", cudaGetErrorString(status));
  detail::reserve_at_least(workspace.bytes, static_cast<long long>(temp_bytes), "kfmm::sort::bytes");
  status = cub::DeviceRadixSort::SortPairs(workspace.bytes.data(), temp_bytes, k, v, n, begin_bit, end_bit,
                                           space.cuda_stream());
  require(status == cudaSuccess, "sort_by_key: cub radix sort failed: ", cudaGetErrorString(status));
  const bool keys_moved = k.Current() != keys.data(), values_moved = v.Current() != values.data();
  require(keys_moved == values_moved, "sort_by_key: cub left keys and values in different buffers");
  if (!keys_moved) return false;
  if (!copy_back) return true;
  Kokkos::deep_copy(space, Kokkos::subview(keys, Kokkos::make_pair(0, n)),
                    Kokkos::subview(workspace.keys, Kokkos::make_pair(0, n)));
  Kokkos::deep_copy(space, Kokkos::subview(values, Kokkos::make_pair(0, n)),
                    Kokkos::subview(workspace.values, Kokkos::make_pair(0, n)));
  return false;
}
#endif

}  // namespace detail

/// Sorts keys(0 .. n-1) stably by their bits [begin_bit, end_bit), applying the same permutation to
/// values(0 .. n-1), and leaves the result where the sort's last pass wrote it: returns true when that is
/// workspace.keys(0 .. n-1) / workspace.values(0 .. n-1), false when it is keys / values. For callers that
/// can read either (a sort of an odd number of passes then saves copying both arrays back: at 1e7
/// particles the walk's pair sort takes three, and the copies took ~0.45 ms on an H100). The workspace's
/// buffers must not overlap keys or values; other arguments as sort_by_key_bits.
template <class ExecutionSpace, class Key, class Value, class... KeyProps, class... ValueProps>
bool sort_by_key_bits_in_either(const ExecutionSpace& space, const Kokkos::View<Key*, KeyProps...>& keys,
                                const Kokkos::View<Value*, ValueProps...>& values, int n, int begin_bit,
                                int end_bit,
                                SortWorkspace<typename ExecutionSpace::memory_space, Key, Value>& workspace,
                                bool copy_back = false) {
#if defined(KFMM_TREE_HAVE_CUB_SORT)
  if constexpr (std::is_same<ExecutionSpace, Kokkos::Cuda>::value) {
    detail::check_sort_arguments<Key>(keys, values, n, begin_bit, end_bit);
    return n > 1 && end_bit > begin_bit &&
           detail::cub_sort(space, keys, values, n, begin_bit, end_bit, workspace, copy_back);
  }
#endif
  return detail::radix_sort<detail::DefaultRadixTiles<ExecutionSpace>>(space, keys, values, n, begin_bit,
                                                                       end_bit, workspace, copy_back);
}

/// Sorts keys(0 .. n-1) stably by their bits [begin_bit, end_bit) and applies the same permutation to
/// values(0 .. n-1); bits outside the range do not take part (keys equal in the range keep their
/// order). 0 <= begin_bit <= end_bit <= the key width. Runs on `space`; temporaries come from
/// `workspace` (grown as needed).
template <class ExecutionSpace, class Key, class Value, class... KeyProps, class... ValueProps>
void sort_by_key_bits(const ExecutionSpace& space, const Kokkos::View<Key*, KeyProps...>& keys,
                      const Kokkos::View<Value*, ValueProps...>& values, int n, int begin_bit, int end_bit,
                      SortWorkspace<typename ExecutionSpace::memory_space, Key, Value>& workspace) {
  sort_by_key_bits_in_either(space, keys, values, n, begin_bit, end_bit, workspace, true);
}

/// Sorts keys(0 .. n-1) ascending, stably, and applies the same permutation to values(0 .. n-1).
/// Only the low `key_bits` bits are compared: every key must be below 2^key_bits (0 <= key_bits <= 64).
/// Runs on `space`; temporaries come from `workspace` (grown as needed).
template <class ExecutionSpace, class Key, class Value, class... KeyProps, class... ValueProps>
void sort_by_key(const ExecutionSpace& space, const Kokkos::View<Key*, KeyProps...>& keys,
                 const Kokkos::View<Value*, ValueProps...>& values, int n, int key_bits,
                 SortWorkspace<typename ExecutionSpace::memory_space, Key, Value>& workspace) {
  sort_by_key_bits(space, keys, values, n, 0, key_bits, workspace);
}

/// sort_by_key with temporaries allocated for this call.
template <class ExecutionSpace, class Key, class Value, class... KeyProps, class... ValueProps>
void sort_by_key(const ExecutionSpace& space, const Kokkos::View<Key*, KeyProps...>& keys,
                 const Kokkos::View<Value*, ValueProps...>& values, int n, int key_bits) {
  SortWorkspace<typename ExecutionSpace::memory_space, Key, Value> workspace;
  sort_by_key(space, keys, values, n, key_bits, workspace);
}

}  // namespace kfmm
