// The single-pass tile scan (decoupled look-back) against a host exclusive scan.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cstdint>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/execution_space.hpp"
#include "kfmm/core/tile_scan.hpp"

namespace {

/// One launch: each team sums its tile of counts (team_scan inside, TileScan across) and writes every
/// item's exclusive offset.
template <class Space>
struct ScanKernel {
  using memory_space = typename Space::memory_space;
  using Team = typename Kokkos::TeamPolicy<Space>::member_type;
  Kokkos::View<const unsigned long long*, memory_space> counts;
  Kokkos::View<unsigned long long*, memory_space> offsets;
  Kokkos::View<long long*, memory_space> order;  // per tile: the ticket it got (all tickets distinct)
  kfmm::TileScan<memory_space> scan;
  int n, items;
  KOKKOS_INLINE_FUNCTION void operator()(const Team& team) const {
    long long tile = 0;
    if (team.team_rank() == 0) tile = scan.take_ticket();
    team.team_broadcast(tile, 0);
    if (team.team_rank() == 0) order(tile) = tile;
    const long long first =
        tile * team.team_size() * items + static_cast<long long>(team.team_rank()) * items;
    unsigned long long sum = 0;
    for (int k = 0; k < items; ++k)
      if (first + k < n) sum += counts(first + k);
    const unsigned long long before = team.team_scan(sum);
    unsigned long long tile_sum = before + sum;
    team.team_broadcast(tile_sum, team.team_size() - 1);
    unsigned long long o = scan.exclusive_prefix(team, tile, tile_sum) + before;
    for (int k = 0; k < items; ++k) {
      if (first + k < n) {
        offsets(first + k) = o;
        o += counts(first + k);
      }
    }
  }
};

}  // namespace

TEMPLATE_LIST_TEST_CASE("tile scan gives the exclusive scan over many launches", "[core][scan]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using M = typename Space::memory_space;
  const bool host = kfmm::detail::is_host_execution_space<Space>;
  const int team = host ? 1 : 64, items = host ? 7 : 3;
  kfmm::TileScanWorkspace<M> original;
  // A copy used alternately with the original (as a copied Solver would): they share words and epochs.
  kfmm::TileScanWorkspace<M> copy = original;
  std::uint64_t state = 12345;
  // 70 launches: past the epoch wrap (63), with growing and shrinking tile counts (word reallocation),
  // every third one through the copy.
  for (int launch = 0; launch < 70; ++launch) {
    const int n = launch % 5 == 0 ? 0 : 1 + (launch * 7919) % (launch < 35 ? 3000 : 60000);
    std::vector<unsigned long long> counts(n), expect(n);
    unsigned long long run = 0;
    for (int i = 0; i < n; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      counts[i] = (state >> 33) % 1000;
      expect[i] = run;
      run += counts[i];
    }
    Kokkos::View<unsigned long long*, M> dc("counts", n), doff("offsets", n);
    auto hc = Kokkos::create_mirror_view(dc);
    for (int i = 0; i < n; ++i) hc(i) = counts[i];
    Kokkos::deep_copy(dc, hc);
    const long long tiles = n == 0 ? 1 : (n + team * items - 1) / (team * items);
    Kokkos::View<long long*, M> order("order", tiles);
    ScanKernel<Space> kernel{dc, doff, order, {}, n, items};
    kfmm::TileScanWorkspace<M>& workspace = launch % 3 == 1 ? copy : original;
    const unsigned long long epoch = workspace.prepare(Space(), tiles);
    REQUIRE(epoch >= 1);
    REQUIRE(epoch <= 63);
    kernel.scan = kfmm::TileScan<M>(workspace, epoch, tiles);
    Kokkos::parallel_for("test_tile_scan",
                         Kokkos::TeamPolicy<Space>(Space(), static_cast<int>(tiles), team)
                             .set_scratch_size(0, Kokkos::PerTeam(kfmm::TileScan<M>::scratch_bytes())),
                         kernel);
    auto hoff = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), doff);
    auto hord = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), order);
    INFO("launch " << launch << " n = " << n << " tiles = " << tiles);
    for (int i = 0; i < n; ++i) REQUIRE(hoff(i) == expect[i]);
    for (long long t = 0; t < tiles; ++t) REQUIRE(hord(t) == t);  // every ticket handed out once
  }
  // The ticket counter is back at 0 after every launch.
  auto ticket = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), original.state->ticket);
  REQUIRE(ticket(0) == 0);
}
