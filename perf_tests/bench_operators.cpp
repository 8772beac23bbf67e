// Expansion operators (operators/kfmm/operators/{p2m,m2m,m2l_pair,l2l,l2p}.hpp): ns per operator call
// at p = 2, 4, 6, 8 on one thread (Kokkos::Serial) and on all threads (Kokkos::OpenMP, and the
// default device space of a GPU build), float and double; plus the dense-block study of
// docs/dense_blocks.md (hand-written sparse loops against Kokkos Kernels' SerialGemv / TeamGemv).
//
// Counters: ns_per_call = median time / number of operator calls (a leaf for P2M / L2P, a child shift
// for M2M / L2L, a pair for M2L, an expansion for the block kernels), ns_per_particle for P2M / L2P.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "benchmark_common.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/l2l.hpp"
#include "kfmm/operators/l2p.hpp"
#include "kfmm/operators/m2l_pair.hpp"
#include "kfmm/operators/m2m.hpp"
#include "kfmm/operators/p2m.hpp"

namespace {

constexpr int leaf_size = 32;
int num_leaves() {
  return kfmm_bench::tiny() ? 64 : 4096;
}
int num_targets() {
  return kfmm_bench::tiny() ? 64 : 4096;
}
int pairs_per_target() {
  return kfmm_bench::tiny() ? 8 : 64;
}

template <class Space>
std::string space_name() {
  return Space::name();
}

/// Random problem data on Space: num_leaves leaves of leaf_size particles in [0,1]^3 cells, parents
/// of 8 consecutive leaves, random expansions.
template <class Space, class Real>
struct Data {
  using Memory = typename Space::memory_space;
  int leaves, nodes, parents;
  Kokkos::View<Real*[3], Memory> x, centres, acc;
  Kokkos::View<Real*, Memory> m, phi;
  Kokkos::View<int* [2], Memory> ranges;
  Kokkos::View<int*, Memory> leaf_ids, parent_ids, first_child, num_children, parent;
  kfmm::ExpansionView<Real, Memory> M, L;
  Data(int order) {
    leaves = num_leaves();
    parents = leaves / 8;
    nodes = leaves + parents;  // leaves 0..leaves-1, parents after
    const int n = leaves * leaf_size, nc = kfmm::num_coefficients(order);
    x = decltype(x)("x", n);
    acc = decltype(acc)("acc", n);
    m = decltype(m)("m", n);
    phi = decltype(phi)("phi", n);
    centres = decltype(centres)("centres", nodes);
    ranges = decltype(ranges)("ranges", nodes);
    leaf_ids = decltype(leaf_ids)("leaf_ids", leaves);
    parent_ids = decltype(parent_ids)("parent_ids", parents);
    first_child = decltype(first_child)("first_child", nodes);
    num_children = decltype(num_children)("num_children", nodes);
    parent = decltype(parent)("parent", nodes);
    M = decltype(M)("M", nodes, nc);
    L = decltype(L)("L", nodes, nc);
    auto xh = Kokkos::create_mirror_view(x);
    auto mh = Kokkos::create_mirror_view(m);
    auto ch = Kokkos::create_mirror_view(centres);
    auto rh = Kokkos::create_mirror_view(ranges);
    auto lh = Kokkos::create_mirror_view(leaf_ids);
    auto ph = Kokkos::create_mirror_view(parent_ids);
    auto fh = Kokkos::create_mirror_view(first_child);
    auto nh = Kokkos::create_mirror_view(num_children);
    auto pah = Kokkos::create_mirror_view(parent);
    auto Mh = Kokkos::create_mirror_view(M);
    std::mt19937 rng(1);
    std::uniform_real_distribution<double> u(0, 1);
    for (int leaf = 0; leaf < leaves; ++leaf) {
      const double base[3] = {double(leaf % 16), double((leaf / 16) % 16), double(leaf / 256)};
      for (int k = 0; k < 3; ++k) ch(leaf, k) = static_cast<Real>(base[k] + 0.5);
      rh(leaf, 0) = leaf * leaf_size;
      rh(leaf, 1) = (leaf + 1) * leaf_size;
      lh(leaf) = leaf;
      pah(leaf) = leaves + leaf / 8;
      for (int j = leaf * leaf_size; j < (leaf + 1) * leaf_size; ++j) {
        for (int k = 0; k < 3; ++k) xh(j, k) = static_cast<Real>(base[k] + u(rng));
        mh(j) = static_cast<Real>(0.5 + u(rng));
      }
    }
    for (int q = 0; q < parents; ++q) {
      const int node = leaves + q;
      ph(q) = node;
      fh(node) = 8 * q;
      nh(node) = 8;
      pah(node) = -1;
      for (int k = 0; k < 3; ++k) ch(node, k) = ch(8 * q, k) + static_cast<Real>(0.3);
    }
    for (int node = 0; node < nodes; ++node)
      for (int k = 0; k < nc; ++k) Mh(node, k) = static_cast<Real>(u(rng) - 0.5);
    Kokkos::deep_copy(x, xh);
    Kokkos::deep_copy(m, mh);
    Kokkos::deep_copy(centres, ch);
    Kokkos::deep_copy(ranges, rh);
    Kokkos::deep_copy(leaf_ids, lh);
    Kokkos::deep_copy(parent_ids, ph);
    Kokkos::deep_copy(first_child, fh);
    Kokkos::deep_copy(num_children, nh);
    Kokkos::deep_copy(parent, pah);
    Kokkos::deep_copy(M, Mh);
    Kokkos::deep_copy(L, Mh);
  }
};

void set_calls(benchmark::State& state, double median, double calls, double particles = 0) {
  if (median <= 0) return;
  state.counters["calls"] = calls;
  state.counters["ns_per_call"] = median * 1e9 / calls;
  if (particles > 0) state.counters["ns_per_particle"] = median * 1e9 / particles;
}

template <class Space, class Real>
void bm_p2m(benchmark::State& state, int order) {
  const Space space;
  Data<Space, Real> d(order);
  const double t = kfmm_bench::time_fenced(
      state, space, [&] { kfmm::p2m(space, order, d.x, d.m, d.ranges, d.leaf_ids, d.centres, d.M); });
  set_calls(state, t, d.leaves, double(d.leaves) * leaf_size);
}

template <class Space, class Real>
void bm_m2m(benchmark::State& state, int order) {
  const Space space;
  Data<Space, Real> d(order);
  const double t = kfmm_bench::time_fenced(state, space, [&] {
    kfmm::m2m(space, order, d.parent_ids, d.first_child, d.num_children, d.centres, d.M);
  });
  set_calls(state, t, 8.0 * d.parents);
}

template <class Space, class Real>
void bm_l2l(benchmark::State& state, int order) {
  const Space space;
  Data<Space, Real> d(order);
  const double t = kfmm_bench::time_fenced(
      state, space, [&] { kfmm::l2l(space, order, d.leaf_ids, d.parent, d.centres, d.L); });
  set_calls(state, t, d.leaves);
}

template <class Space, class Real>
void bm_l2p(benchmark::State& state, int order) {
  const Space space;
  Data<Space, Real> d(order);
  const double t = kfmm_bench::time_fenced(state, space, [&] {
    kfmm::l2p(space, order, 1.0, d.leaf_ids, d.ranges, d.centres, d.L, d.x, d.acc, d.phi);
  });
  set_calls(state, t, d.leaves, double(d.leaves) * leaf_size);
}

/// M2L building block: every target (one thread) translates pairs_per_target() random sources into
/// its own local row. Variant 0: runtime order; 1: compile-time order P; 2: the naive O(p^4) reference.
template <class Space, class Real, int P>
void bm_m2l_pair(benchmark::State& state, int variant) {
  using Memory = typename Space::memory_space;
  const Space space;
  const int T = num_targets(), K = pairs_per_target(), nc = kfmm::num_coefficients(P);
  kfmm::ExpansionView<Real, Memory> M("M", T, nc), L("L", T, nc);
  Kokkos::View<Real* [3], Memory> c("c", T);
  Kokkos::View<int**, Kokkos::LayoutRight, Memory> src("src", T, K);
  auto Mh = Kokkos::create_mirror_view(M);
  auto ch = Kokkos::create_mirror_view(c);
  auto sh = Kokkos::create_mirror_view(src);
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> pick(0, T - 1);
  for (int t = 0; t < T; ++t) {
    for (int k = 0; k < 3; ++k) ch(t, k) = static_cast<Real>(u(rng));
    for (int k = 0; k < nc; ++k) Mh(t, k) = static_cast<Real>(u(rng));
  }
  for (int t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) {
      int s;
      do {
        s = pick(rng);
      } while (s == t);
      sh(t, k) = s;  // random directions; coincident centres are (nearly) impossible
    }
  Kokkos::deep_copy(M, Mh);
  Kokkos::deep_copy(c, ch);
  Kokkos::deep_copy(src, sh);
  const double t = kfmm_bench::time_fenced(state, space, [&] {
    Kokkos::parallel_for(
        "bench_m2l_pair", Kokkos::RangePolicy<Space>(space, 0, T), KOKKOS_LAMBDA(int target) {
          Real* out = &L(target, 0);
          for (int k = 0; k < K; ++k) {
            const int s = src(target, k);
            const Real dx = c(target, 0) - c(s, 0), dy = c(target, 1) - c(s, 1), dz = c(target, 2) - c(s, 2);
            if (variant == 0) {
              kfmm::m2l_rotation_pair(P, &M(s, 0), dx, dy, dz, out);
            } else if (variant == 1) {
              kfmm::m2l_rotation_pair<P>(&M(s, 0), dx, dy, dz, out);
            } else {
              kfmm::m2l_naive_pair(P, &M(s, 0), dx, dy, dz, out);
            }
          }
        });
  });
  kfmm_bench::report_pairs(state, t, double(T) * K);
  set_calls(state, t, double(T) * K);
}

// ---------------------------------------------------------------------------------------------------
// Dense blocks (docs/dense_blocks.md): the normalised swap blocks applied to E expansions.
//   variant 0: one thread per expansion, hand-written sparse loop (kfmm::apply_swap, production)
//   variant 1: one thread per expansion, Kokkos Kernels SerialGemv per degree on the dense block
//   variant 2: one team per expansion, hand-written: team threads over the rows of each degree
//   variant 3: one team per expansion, Kokkos Kernels TeamGemv per degree
// z-translation (the m2l degree operator) applied to E expansions:
//   variant 0: hand-written (kfmm::m2l_z_translate), variant 1: SerialGemv on the dense
//   (p+1) x (p+1) matrix of each column m, built per expansion (it depends on the distance)
template <class Space, class Real>
struct Blocks {
  using Memory = typename Space::memory_space;
  Kokkos::View<Real*, Memory> dense;  // block n at offset swap_block_offset(n), row-major (2n+1)^2
  Blocks() : dense("dense_swap", kfmm::detail::swap_table_size) {
    auto h = Kokkos::create_mirror_view(dense);
    for (int n = 0; n <= kfmm::max_order; ++n)
      for (int a = -n; a <= n; ++a)
        for (int b = -n; b <= n; ++b)
          h(kfmm::detail::swap_block_offset(n) + (a + n) * (2 * n + 1) + (b + n)) =
              static_cast<Real>(kfmm::normalised_swap_coefficient(n, a, b));
    Kokkos::deep_copy(dense, h);
  }
};

int num_expansions() {
  return kfmm_bench::tiny() ? 256 : 65536;
}

template <class Space, class Real>
void bm_swap_blocks(benchmark::State& state, int order, int variant) {
  using Memory = typename Space::memory_space;
  using Policy = Kokkos::TeamPolicy<Space>;
  using Member = typename Policy::member_type;
  using Scratch = Kokkos::View<Real*, typename Space::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const Space space;
  const int E = num_expansions(), nc = kfmm::num_coefficients(order), p = order;
  kfmm::ExpansionView<Real, Memory> A("A", E, nc);
  Kokkos::deep_copy(A, Real(0.5));
  Blocks<Space, Real> blocks;
  auto dense = blocks.dense;
  double t = 0;
  if (variant == 0) {
    t = kfmm_bench::time_fenced(state, space, [&] {
      Kokkos::parallel_for(
          "swap_hand_thread", Kokkos::RangePolicy<Space>(space, 0, E),
          KOKKOS_LAMBDA(int e) { kfmm::apply_swap(p, &A(e, 0)); });
    });
  } else if (variant == 2) {
    t = kfmm_bench::time_fenced(state, space, [&] {
      Kokkos::parallel_for(
          "swap_hand_team",
          Policy(space, E, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(nc))),
          KOKKOS_LAMBDA(const Member& member) {
            const int e = member.league_rank();
            Scratch tmp(member.team_scratch(0), nc);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int i) { tmp(i) = A(e, i); });
            member.team_barrier();
            for (int n = 1; n <= p; ++n) {
              Kokkos::parallel_for(Kokkos::TeamThreadRange(member, 2 * n + 1), [&](int row) {
                const int mm = row - n, sign = kfmm::swap_column_sign(n, mm);
                Real acc = Real(0);
                for (int j = kfmm::swap_first_column(n, mm); j <= n; j += 2)
                  acc += static_cast<Real>(kfmm::normalised_swap_coefficient(n, mm, sign * j)) *
                         tmp(n * n + n + sign * j);
                A(e, n * n + row) = acc;
              });
            }
          });
    });
  }
#if defined(KFMM_HAVE_KOKKOSKERNELS)
  else if (variant == 1) {
    t = kfmm_bench::time_fenced(state, space, [&] {
      Kokkos::parallel_for(
          "swap_kk_serial", Kokkos::RangePolicy<Space>(space, 0, E), KOKKOS_LAMBDA(int e) {
            Real tmp[2 * kfmm::max_order + 1];
            for (int n = 1; n <= p; ++n) {
              const int w = 2 * n + 1;
              Kokkos::View<const Real**, Kokkos::LayoutRight, Memory, Kokkos::MemoryUnmanaged> B(
                  dense.data() + kfmm::detail::swap_block_offset(n), w, w);
              Kokkos::View<Real*, Kokkos::LayoutRight, Memory, Kokkos::MemoryUnmanaged> x(&A(e, n * n), w);
              Kokkos::View<Real*, Kokkos::LayoutRight, Kokkos::AnonymousSpace, Kokkos::MemoryUnmanaged> y(tmp,
                                                                                                          w);
              kfmm::compat::SerialGemvN::invoke(Real(1), B, x, Real(0), y);
              for (int i = 0; i < w; ++i) x(i) = y(i);
            }
          });
    });
  } else if (variant == 3) {
    t = kfmm_bench::time_fenced(state, space, [&] {
      Kokkos::parallel_for(
          "swap_kk_team",
          Policy(space, E, Kokkos::AUTO).set_scratch_size(0, Kokkos::PerTeam(Scratch::shmem_size(nc))),
          KOKKOS_LAMBDA(const Member& member) {
            const int e = member.league_rank();
            Scratch tmp(member.team_scratch(0), nc);
            Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nc), [&](int i) { tmp(i) = A(e, i); });
            member.team_barrier();
            for (int n = 1; n <= p; ++n) {
              const int w = 2 * n + 1;
              Kokkos::View<const Real**, Kokkos::LayoutRight, Memory, Kokkos::MemoryUnmanaged> B(
                  dense.data() + kfmm::detail::swap_block_offset(n), w, w);
              auto x = Kokkos::subview(tmp, Kokkos::make_pair(n * n, n * n + w));
              Kokkos::View<Real*, Kokkos::LayoutRight, Memory, Kokkos::MemoryUnmanaged> y(&A(e, n * n), w);
              kfmm::compat::TeamGemvN<Member>::invoke(member, Real(1), B, x, Real(0), y);
            }
          });
    });
  }
#endif
  else {
    state.SkipWithError("Kokkos Kernels not available");
    return;
  }
  set_calls(state, t, E);
}

template <class Space, class Real>
void bm_z_translate(benchmark::State& state, int order, int variant) {
  using Memory = typename Space::memory_space;
  const Space space;
  const int E = num_expansions(), nc = kfmm::num_coefficients(order), p = order;
  kfmm::ExpansionView<Real, Memory> A("A", E, nc);
  Kokkos::deep_copy(A, Real(0.5));
  double t = 0;
  if (variant == 0) {
    t = kfmm_bench::time_fenced(state, space, [&] {
      Kokkos::parallel_for(
          "z_hand", Kokkos::RangePolicy<Space>(space, 0, E),
          KOKKOS_LAMBDA(int e) { kfmm::m2l_z_translate<-1, true>(p, Real(1) / Real(2 + e % 7), &A(e, 0)); });
    });
  }
#if defined(KFMM_HAVE_KOKKOSKERNELS)
  else if (variant == 1) {
    t = kfmm_bench::time_fenced(state, space, [&] {
      Kokkos::parallel_for(
          "z_kk_serial", Kokkos::RangePolicy<Space>(space, 0, E), KOKKOS_LAMBDA(int e) {
            using Unmanaged =
                Kokkos::View<Real**, Kokkos::LayoutRight, Kokkos::AnonymousSpace, Kokkos::MemoryUnmanaged>;
            using Vec =
                Kokkos::View<Real*, Kokkos::LayoutRight, Kokkos::AnonymousSpace, Kokkos::MemoryUnmanaged>;
            const Real rinv = Real(1) / Real(2 + e % 7);
            Real f[kfmm::max_order + 1], mat[(kfmm::max_order + 1) * (kfmm::max_order + 1)];
            Real xin[kfmm::max_order + 1], yout[kfmm::max_order + 1];
            f[0] = rinv;
            for (int j = 1; j <= p; ++j) f[j] = f[j - 1] * Real(j) * rinv;
            for (int mm = -p; mm <= p; ++mm) {
              const int am = mm < 0 ? -mm : mm, len = p - am + 1;
              // The column's dense (len x len) matrix, normalisation folded in (as the hand loop does).
              for (int a = 0; a < len; ++a)
                for (int b = 0; b < len; ++b) {
                  const int n = am + a, k = am + b;
                  const Real sw =
                      Real(((n + am) & 1) ? -kfmm::harmonic_weight(mm) : kfmm::harmonic_weight(mm));
                  mat[a * len + b] = n + k <= p ? sw * f[n + k] *
                                                      static_cast<Real>(kfmm::expansion_inverse_scale(n, mm) *
                                                                        kfmm::expansion_inverse_scale(k, mm))
                                                : Real(0);
                }
              for (int b = 0; b < len; ++b) xin[b] = A(e, kfmm::coefficient_index(am + b, mm));
              Unmanaged Z(mat, len, len);
              Vec x(xin, len), y(yout, len);
              kfmm::compat::SerialGemvN::invoke(Real(1), Z, x, Real(0), y);
              for (int a = 0; a < len; ++a) A(e, kfmm::coefficient_index(am + a, mm)) = y(a);
            }
          });
    });
  }
#endif
  else {
    state.SkipWithError("Kokkos Kernels not available");
    return;
  }
  set_calls(state, t, E);
}

template <class Space, class Real>
void register_space() {
  const std::string s = space_name<Space>(), r = std::is_same<Real, float>::value ? "float" : "double";
  for (int p : {2, 4, 6, 8}) {
    const std::string tag = "/" + s + "/" + r + "/p" + std::to_string(p);
    benchmark::RegisterBenchmark(("p2m" + tag).c_str(), [p](benchmark::State& st) {
      bm_p2m<Space, Real>(st, p);
    })->UseManualTime();
    benchmark::RegisterBenchmark(("m2m" + tag).c_str(), [p](benchmark::State& st) {
      bm_m2m<Space, Real>(st, p);
    })->UseManualTime();
    benchmark::RegisterBenchmark(("l2l" + tag).c_str(), [p](benchmark::State& st) {
      bm_l2l<Space, Real>(st, p);
    })->UseManualTime();
    benchmark::RegisterBenchmark(("l2p" + tag).c_str(), [p](benchmark::State& st) {
      bm_l2p<Space, Real>(st, p);
    })->UseManualTime();
    for (int v : {0, 1, 2, 3}) {
      const char* names[] = {"hand_thread", "kk_serial_gemv", "hand_team", "kk_team_gemv"};
      benchmark::RegisterBenchmark(("swap_blocks_" + std::string(names[v]) + tag).c_str(),
                                   [p, v](benchmark::State& st) { bm_swap_blocks<Space, Real>(st, p, v); })
          ->UseManualTime();
    }
    for (int v : {0, 1}) {
      const char* names[] = {"hand", "kk_serial_gemv"};
      benchmark::RegisterBenchmark(("z_translate_" + std::string(names[v]) + tag).c_str(),
                                   [p, v](benchmark::State& st) { bm_z_translate<Space, Real>(st, p, v); })
          ->UseManualTime();
    }
  }
  const char* variants[] = {"m2l_pair_runtime", "m2l_pair_fixed", "m2l_pair_naive"};
  for (int v : {0, 1, 2}) {
    const std::string base = std::string(variants[v]) + "/" + s + "/" + r + "/p";
    benchmark::RegisterBenchmark((base + "2").c_str(), [v](benchmark::State& st) {
      bm_m2l_pair<Space, Real, 2>(st, v);
    })->UseManualTime();
    benchmark::RegisterBenchmark((base + "4").c_str(), [v](benchmark::State& st) {
      bm_m2l_pair<Space, Real, 4>(st, v);
    })->UseManualTime();
    benchmark::RegisterBenchmark((base + "6").c_str(), [v](benchmark::State& st) {
      bm_m2l_pair<Space, Real, 6>(st, v);
    })->UseManualTime();
    benchmark::RegisterBenchmark((base + "8").c_str(), [v](benchmark::State& st) {
      bm_m2l_pair<Space, Real, 8>(st, v);
    })->UseManualTime();
  }
}

const bool registered = [] {
#if defined(KOKKOS_ENABLE_SERIAL)
  register_space<Kokkos::Serial, float>();
  register_space<Kokkos::Serial, double>();
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
  register_space<Kokkos::OpenMP, float>();
  register_space<Kokkos::OpenMP, double>();
#endif
  if constexpr (!Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible) {
    register_space<Kokkos::DefaultExecutionSpace, float>();
    register_space<Kokkos::DefaultExecutionSpace, double>();
  }
  return true;
}();

}  // namespace

KFMM_BENCHMARK_MAIN();
