// P2P near field and the O(N^2) direct sum against long-double references on the host.
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends.hpp"
#include "kfmm/core/error.hpp"
#include "kfmm/operators/direct_sum.hpp"
#include "kfmm/operators/p2p.hpp"

namespace {

struct HostParticles {
  std::vector<double> x, m;  // x: 3 per particle
  int n() const { return static_cast<int>(m.size()); }
};

HostParticles random_particles(int n, unsigned seed, bool negative_masses = false) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  HostParticles p;
  p.x.resize(3 * n);
  p.m.resize(n);
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) p.x[3 * i + d] = u(gen);
    p.m[i] = negative_masses ? u(gen) : 0.5 + 0.5 * std::abs(u(gen));
  }
  return p;
}

// Long-double reference of sum over (i, j in listed leaf pairs, j != i); r^2+eps^2 == 0 pairs skipped.
struct Reference {
  std::vector<long double> a, phi;
};

void add_pair(const HostParticles& p, int i, int j, long double G, long double eps2, Reference& out) {
  if (i == j) return;
  long double d[3], r2 = eps2;
  for (int c = 0; c < 3; ++c) {
    d[c] = static_cast<long double>(p.x[3 * i + c]) - static_cast<long double>(p.x[3 * j + c]);
    r2 += d[c] * d[c];
  }
  if (r2 == 0) return;
  const long double rinv = 1.0L / std::sqrt(r2);
  for (int c = 0; c < 3; ++c) out.a[3 * i + c] -= G * p.m[j] * d[c] * rinv * rinv * rinv;
  out.phi[i] -= G * p.m[j] * rinv;
}

Reference direct_reference(const HostParticles& p, double G, double eps) {
  Reference r{std::vector<long double>(3 * p.n(), 0.0L), std::vector<long double>(p.n(), 0.0L)};
  for (int i = 0; i < p.n(); ++i)
    for (int j = 0; j < p.n(); ++j) add_pair(p, i, j, G, static_cast<long double>(eps) * eps, r);
  return r;
}

// Leaves = consecutive runs of the given sizes; near list rows given on the host.
struct HostList {
  std::vector<int> ranges;  // 2 per leaf
  std::vector<int> targets, offsets{0}, sources;
  void row(int target, const std::vector<int>& src) {
    targets.push_back(target);
    sources.insert(sources.end(), src.begin(), src.end());
    offsets.push_back(static_cast<int>(sources.size()));
  }
};

HostList leaves_of_sizes(const std::vector<int>& sizes) {
  HostList l;
  int at = 0;
  for (int s : sizes) {
    l.ranges.push_back(at);
    l.ranges.push_back(at + s);
    at += s;
  }
  return l;
}

Reference list_reference(const HostParticles& p, const HostList& l, double G, double eps) {
  Reference r{std::vector<long double>(3 * p.n(), 0.0L), std::vector<long double>(p.n(), 0.0L)};
  const long double eps2 = static_cast<long double>(eps) * eps;
  for (size_t row = 0; row < l.targets.size(); ++row) {
    const int a = l.targets[row];
    for (int k = l.offsets[row]; k < l.offsets[row + 1]; ++k) {
      const int b = l.sources[k];
      for (int i = l.ranges[2 * a]; i < l.ranges[2 * a + 1]; ++i)
        for (int j = l.ranges[2 * b]; j < l.ranges[2 * b + 1]; ++j) add_pair(p, i, j, G, eps2, r);
    }
  }
  return r;
}

template <class Space>
struct DeviceProblem {
  using Mem = typename Space::memory_space;
  kfmm::InteractionList<Mem> list;
  Kokkos::View<int* [2], Mem> ranges;
};

template <class Space>
DeviceProblem<Space> upload(const HostList& l) {
  using Mem = typename Space::memory_space;
  DeviceProblem<Space> d;
  d.list.targets = kfmm_test::device_ints<Mem>(l.targets, "targets");
  d.list.offsets = kfmm_test::device_ints<Mem>(l.offsets, "offsets");
  d.list.sources = kfmm_test::device_ints<Mem>(l.sources, "sources");
  d.ranges = Kokkos::View<int* [2], Mem>("ranges", l.ranges.size() / 2);
  auto h = Kokkos::create_mirror_view(d.ranges);
  for (size_t i = 0; i < l.ranges.size() / 2; ++i) {
    h(i, 0) = l.ranges[2 * i];
    h(i, 1) = l.ranges[2 * i + 1];
  }
  Kokkos::deep_copy(d.ranges, h);
  return d;
}

template <class Real, class Space>
struct DeviceParticles {
  using Mem = typename Space::memory_space;
  Kokkos::View<Real*[3], Mem> x, a;
  Kokkos::View<Real*, Mem> m, phi;
};

template <class Real, class Space>
DeviceParticles<Real, Space> upload(const HostParticles& p) {
  using Mem = typename Space::memory_space;
  DeviceParticles<Real, Space> d;
  d.x = Kokkos::View<Real* [3], Mem>("x", p.n());
  d.a = Kokkos::View<Real* [3], Mem>("a", p.n());
  d.m = Kokkos::View<Real*, Mem>("m", p.n());
  d.phi = Kokkos::View<Real*, Mem>("phi", p.n());
  auto hx = Kokkos::create_mirror_view(d.x);
  auto hm = Kokkos::create_mirror_view(d.m);
  for (int i = 0; i < p.n(); ++i) {
    for (int c = 0; c < 3; ++c) hx(i, c) = static_cast<Real>(p.x[3 * i + c]);
    hm(i) = static_cast<Real>(p.m[i]);
  }
  Kokkos::deep_copy(d.x, hx);
  Kokkos::deep_copy(d.m, hm);
  return d;
}

// Max over particles of |result - reference| / (max |reference| over all particles), per field.
template <class AccView, class PotView>
void expect_close(const AccView& a, const PotView& phi, const Reference& ref, double tol) {
  auto ha = kfmm_test::to_host(a);
  auto hp = kfmm_test::to_host(phi);
  const int n = static_cast<int>(ref.phi.size());
  long double amax = 0, pmax = 0, aerr = 0, perr = 0;
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      amax = std::max(amax, std::abs(ref.a[3 * i + c]));
      REQUIRE(std::isfinite(static_cast<double>(ha(i, c))));
      aerr = std::max(aerr, std::abs(static_cast<long double>(ha(i, c)) - ref.a[3 * i + c]));
    }
    REQUIRE(std::isfinite(static_cast<double>(hp(i))));
    pmax = std::max(pmax, std::abs(ref.phi[i]));
    perr = std::max(perr, std::abs(static_cast<long double>(hp(i)) - ref.phi[i]));
  }
  CHECK(static_cast<double>(aerr) <= tol * static_cast<double>(std::max(amax, 1e-300L)));
  CHECK(static_cast<double>(perr) <= tol * static_cast<double>(std::max(pmax, 1e-300L)));
}

template <class View>
bool bitwise_equal(const View& a, const View& b) {
  auto ha = kfmm_test::to_host(a);
  auto hb = kfmm_test::to_host(b);
  if (ha.size() != hb.size()) return false;
  return std::equal(ha.data(), ha.data() + ha.size(), hb.data());
}

// All leaves of the given sizes, every leaf against every leaf (self pair included): p2p == direct sum.
HostList all_pairs(const std::vector<int>& sizes) {
  HostList l = leaves_of_sizes(sizes);
  const int nl = static_cast<int>(sizes.size());
  for (int a = 0; a < nl; ++a) {
    std::vector<int> src;
    for (int b = 0; b < nl; ++b) src.push_back((a + b) % nl);  // self pair not first
    l.row(a, src);
  }
  return l;
}

// Team sizes to try: 0 (backend default) plus explicit teams, which on host backends run the GPU
// (team) kernel; odd sizes leave threads without a full slice.
template <class Space>
std::vector<int> team_sizes(const Space& space) {
  const int c = std::min(kfmm::compat::concurrency(space), 5);
  std::vector<int> t = {0, 1};
  if (c > 1) t.push_back(c);
  return t;
}

int total(const std::vector<int>& s) {
  int t = 0;
  for (int v : s) t += v;
  return t;
}

}  // namespace

namespace {

// Largest relative error of detail::rsqrt_lanes (W lanes at a time, Guard as in the P2P kernels) over
// normal inputs with random mantissas at every binary exponent of Real's range, and the range's ends.
template <class Real, int W, bool Guard>
double rsqrt_lanes_worst_error() {
  std::vector<Real> x;
  std::mt19937_64 gen(5);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  for (int e = std::numeric_limits<Real>::min_exponent - 1; e < std::numeric_limits<Real>::max_exponent;
       ++e) {
    x.push_back(static_cast<Real>(std::ldexp(1.0, e)));
    for (int k = 0; k < 7; ++k) {
      const Real r = static_cast<Real>(std::ldexp(mantissa(gen), e));
      if (std::isfinite(r)) x.push_back(r);
    }
  }
  x.push_back(std::numeric_limits<Real>::min());
  x.push_back(std::numeric_limits<Real>::max());
  while (x.size() % W != 0) x.push_back(Real(1));
  std::vector<Real> y(x.size());
  for (std::size_t b = 0; b < x.size(); b += W)
    kfmm::detail::rsqrt_lanes<W, Guard>(x.data() + b, y.data() + b);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const long double exact = 1.0L / std::sqrt(static_cast<long double>(x[i]));
    worst = std::max(worst, static_cast<double>(std::fabs((static_cast<long double>(y[i]) - exact) / exact)));
  }
  return worst;
}

}  // namespace

// The host P2P lanes' reciprocal square root (with AVX-512 in double: a 14-bit hardware seed and one
// third-order step instead of a square root and a division) keeps compat::rsqrt's 2 ulp in double.
TEST_CASE("host rsqrt_lanes match 1/sqrt over the normal range and are zero below it when guarded",
          "[kernels][p2p]") {
  constexpr int Wd = kfmm::detail::p2p_host_lanes<double>;
  constexpr int Wf = kfmm::detail::p2p_host_lanes<float>;
  CHECK(rsqrt_lanes_worst_error<double, Wd, false>() <= 2 * DBL_EPSILON);
  CHECK(rsqrt_lanes_worst_error<double, Wd, true>() <= 2 * DBL_EPSILON);
  CHECK(rsqrt_lanes_worst_error<float, Wf, false>() <= 2 * FLT_EPSILON);
  CHECK(rsqrt_lanes_worst_error<float, Wf, true>() <= 2 * FLT_EPSILON);
  // Squared distances below the smallest normal (r^2 + eps^2: never negative) give 0 when guarded.
  double below[Wd] = {0.0, std::numeric_limits<double>::denorm_min(), 1e-310, 1e-320, 0.0, 0.0, 0.0, 0.0};
  double out[Wd];
  kfmm::detail::rsqrt_lanes<Wd, true>(below, out);
  for (int l = 0; l < Wd; ++l) CHECK(out[l] == 0.0);
}

TEMPLATE_LIST_TEST_CASE("direct_sum matches a long double reference", "[kernels][direct_sum]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  Space space;
  for (int n : {0, 1, 2, 3, 37, 200}) {
    for (double eps : {0.0, 0.05}) {
      auto p = random_particles(n, 11 + n, /*negative_masses=*/n == 37);
      auto ref = direct_reference(p, 1.5, eps);
      auto d = upload<double, Space>(p);
      kfmm::direct_sum(space, d.x, d.m, 1.5, eps, d.a, d.phi);
      expect_close(d.a, d.phi, ref, 1e-13);
      for (int team : team_sizes(space)) {  // the GPU (team) variant, run on this backend
        if (team == 0) continue;
        Kokkos::View<const int*, typename Space::memory_space> none;
        kfmm::detail::direct_sum_impl<false>(space, d.x, d.m, 1.5, eps, none, n, d.a, d.phi, team);
        expect_close(d.a, d.phi, ref, 1e-13);
      }
      auto f = upload<float, Space>(p);
      // float inputs, double outputs: the reference of the rounded positions is met to double precision
      HostParticles pr = p;
      for (auto& v : pr.x) v = static_cast<float>(v);
      for (auto& v : pr.m) v = static_cast<float>(v);
      auto reff = direct_reference(pr, 1.5, eps);
      kfmm::direct_sum(space, f.x, f.m, 1.5, eps, d.a, d.phi);
      expect_close(d.a, d.phi, reff, 1e-13);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("direct_sum handles coincident points", "[kernels][direct_sum]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  Space space;
  HostParticles p;
  p.x = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};  // particles 0, 1, 3 coincide
  p.m = {1, 2, 3, 4};
  for (double eps : {0.0, 0.1}) {
    auto ref = direct_reference(p, 1.0, eps);
    auto d = upload<double, Space>(p);
    kfmm::direct_sum(space, d.x, d.m, 1.0, eps, d.a, d.phi);
    expect_close(d.a, d.phi, ref, 1e-14);
  }
}

TEMPLATE_LIST_TEST_CASE("direct_sum refuses non-finite inputs and overflowing coordinates",
                        "[kernels][direct_sum]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  using Catch::Matchers::ContainsSubstring;
  Space space;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto t = kfmm_test::device_ints<Mem>({0, 2}, "targets");
  Kokkos::View<double* [3], Mem> as("as", 2);
  Kokkos::View<double*, Mem> ps("ps", 2);
  const auto run = [&](const HostParticles& p) {
    auto d = upload<double, Space>(p);
    kfmm::direct_sum(space, d.x, d.m, 1.0, 0.0, d.a, d.phi);
    kfmm::direct_sum(space, d.x, d.m, 1.0, 0.0, as, ps, t);  // the sampled overload checks alike
  };
  const auto particles = [](double x, double m) {
    HostParticles p;
    p.x = {0, 0, 0, 1, 0, 0, 0, x, 0};
    p.m = {1, m, 1};
    return p;
  };
  run(particles(1e153, 1.0));  // the largest accepted magnitude: finite results
  CHECK_THROWS_WITH(run(particles(nan, 1.0)), ContainsSubstring("NaN or infinite"));
  CHECK_THROWS_WITH(run(particles(-inf, 1.0)), ContainsSubstring("NaN or infinite"));
  CHECK_THROWS_WITH(run(particles(2e153, 1.0)), ContainsSubstring("would overflow double"));
  CHECK_THROWS_WITH(run(particles(1.0, nan)), ContainsSubstring("1 masses are NaN or infinite"));
  CHECK_THROWS_WITH(run(particles(1.0, inf)), ContainsSubstring("1 masses are NaN or infinite"));
  // Accepted inputs give finite sums at the edge of the range.
  auto p = particles(-1e153, 2.0);
  auto d = upload<double, Space>(p);
  kfmm::direct_sum(space, d.x, d.m, 1.0, 0.0, d.a, d.phi);
  const auto a = kfmm_test::to_host(d.a);
  const auto phi = kfmm_test::to_host(d.phi);
  for (int i = 0; i < 3; ++i) {
    CHECK(std::isfinite(phi(i)));
    for (int c = 0; c < 3; ++c) CHECK(std::isfinite(a(i, c)));
  }
}

TEMPLATE_LIST_TEST_CASE("direct_sum on a subset equals the full sum", "[kernels][direct_sum]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  auto p = random_particles(301, 5);
  auto d = upload<float, Space>(p);
  Kokkos::View<double* [3], Mem> a("a", p.n());
  Kokkos::View<double*, Mem> phi("phi", p.n());
  kfmm::direct_sum(space, d.x, d.m, 1.0, 0.01, a, phi);
  const std::vector<int> sample = {300, 0, 17, 17, 150, 1, 299, 64};
  auto t = kfmm_test::device_ints<Mem>(sample, "targets");
  Kokkos::View<double* [3], Mem> as("as", sample.size());
  Kokkos::View<double*, Mem> ps("ps", sample.size());
  kfmm::direct_sum(space, d.x, d.m, 1.0, 0.01, as, ps, t);
  auto ha = kfmm_test::to_host(a);
  auto hp = kfmm_test::to_host(phi);
  auto has = kfmm_test::to_host(as);
  auto hps = kfmm_test::to_host(ps);
  for (size_t k = 0; k < sample.size(); ++k) {
    for (int c = 0; c < 3; ++c) CHECK(has(k, c) == ha(sample[k], c));
    CHECK(hps(k) == hp(sample[k]));
  }
  // an empty sample is fine; a bad index and bad sizes throw
  Kokkos::View<int*, Mem> none("none", 0);
  Kokkos::View<double* [3], Mem> a0("a0", 0);
  Kokkos::View<double*, Mem> p0("p0", 0);
  kfmm::direct_sum(space, d.x, d.m, 1.0, 0.0, a0, p0, none);
  auto bad = kfmm_test::device_ints<Mem>({0, 301}, "bad");
  Kokkos::View<double* [3], Mem> a2("a2", 2);
  Kokkos::View<double*, Mem> p2("p2", 2);
  CHECK_THROWS_AS(kfmm::direct_sum(space, d.x, d.m, 1.0, 0.0, a2, p2, bad), kfmm::Error);
  CHECK_THROWS_AS(kfmm::direct_sum(space, d.x, d.m, 1.0, 0.0, as, ps), kfmm::Error);
  CHECK_THROWS_AS(kfmm::direct_sum(space, d.x, d.m, 1.0, -1.0, a, phi), kfmm::Error);
}

TEMPLATE_LIST_TEST_CASE("p2p over all leaf pairs equals the direct sum", "[kernels][p2p]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  Space space;
  constexpr bool host = kfmm::detail::is_host_execution_space<Space>;
  // leaf sizes include empty leaves, single particles and leaves larger than a GPU team's block (128
  // targets in float, 256 in double by default) / host lane block
  const std::vector<std::vector<int>> layouts = {
      {}, {1}, {2}, {1, 1}, {5, 0, 17, 1, 33, 3}, {130, 7, 64, 65}, {300, 41, 1}};
  for (const auto& sizes : layouts) {
    const int n = total(sizes);
    auto list = all_pairs(sizes);
    auto dev = upload<Space>(list);
    for (double eps : {0.0, 0.03}) {
      auto p = random_particles(n, 100 + n, /*negative_masses=*/true);
      auto ref = direct_reference(p, 0.7, eps);
      auto d = upload<double, Space>(p);
      for (int team : team_sizes(space)) {
        for (int per_chunk : {0, 1, 2}) {
          Kokkos::deep_copy(d.a, 0.0);
          Kokkos::deep_copy(d.phi, 0.0);
          kfmm::P2POptions opt;
          opt.leaves_per_chunk = per_chunk;
          opt.team_size = team;
          // (a hint, not a bound: leaves above it are computed all the same)
          opt.expected_leaf_size = per_chunk == 1 ? 1 : per_chunk == 2 ? 300 : 0;
          kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 0.7, eps, d.a, d.phi, opt);
          expect_close(d.a, d.phi, ref, 1e-13);
        }
      }
      if (host) {  // Newton's third law over the (symmetric) all-pairs list
        Kokkos::deep_copy(d.a, 0.0);
        Kokkos::deep_copy(d.phi, 0.0);
        kfmm::P2POptions opt;
        opt.mutual = true;
        kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 0.7, eps, d.a, d.phi, opt);
        expect_close(d.a, d.phi, ref, 1e-13);
      }
      auto f = upload<float, Space>(p);
      // (the team kernel at every team size the backend runs, as in double)
      const std::vector<int> teams = team_sizes(space);
      for (int k = 0; k < 2 * static_cast<int>(teams.size()) + (host ? 2 : 0); ++k) {
        Kokkos::deep_copy(f.a, 0.0f);
        Kokkos::deep_copy(f.phi, 0.0f);
        kfmm::P2POptions opt;
        opt.accumulate_in_double = k % 2 == 1;
        opt.mutual = k >= 2 * static_cast<int>(teams.size());
        opt.team_size = opt.mutual ? 0 : teams[k / 2];
        kfmm::p2p(space, dev.list, dev.ranges, f.x, f.m, 0.7, eps, f.a, f.phi, opt);
        expect_close(f.a, f.phi, ref, 2e-5);
      }
    }
  }
}

TEST_CASE("p2p default team holds two slices of a full leaf's block", "[kernels][p2p]") {
  using kfmm::detail::p2p_default_team_size;
  // float: two targets per thread; double: one. Unknown leaves count as 64; 64 .. 256 threads.
  CHECK(p2p_default_team_size<float>(0) == 64);
  CHECK(p2p_default_team_size<float>(1) == 64);
  CHECK(p2p_default_team_size<float>(64) == 64);
  CHECK(p2p_default_team_size<float>(65) == 128);
  CHECK(p2p_default_team_size<float>(80) == 128);
  CHECK(p2p_default_team_size<float>(128) == 128);
  CHECK(p2p_default_team_size<float>(129) == 256);
  CHECK(p2p_default_team_size<float>(100000) == 256);
  CHECK(p2p_default_team_size<double>(0) == 128);
  CHECK(p2p_default_team_size<double>(32) == 64);
  CHECK(p2p_default_team_size<double>(33) == 128);
  CHECK(p2p_default_team_size<double>(64) == 128);
  CHECK(p2p_default_team_size<double>(80) == 256);
  CHECK(p2p_default_team_size<double>(100000) == 256);
}

TEST_CASE("p2p default chunk: 256 source leaves in double on GPUs, else 64", "[kernels][p2p]") {
  using kfmm::detail::p2p_default_leaves_per_chunk;
  CHECK(p2p_default_leaves_per_chunk<float, Kokkos::DefaultHostExecutionSpace>() == 64);
  CHECK(p2p_default_leaves_per_chunk<double, Kokkos::DefaultHostExecutionSpace>() == 64);
#if defined(KOKKOS_ENABLE_CUDA)
  CHECK(p2p_default_leaves_per_chunk<float, Kokkos::Cuda>() == 64);
  CHECK(p2p_default_leaves_per_chunk<double, Kokkos::Cuda>() == 256);
#endif
}

TEMPLATE_LIST_TEST_CASE("p2p adds and handles coincident points", "[kernels][p2p]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  Space space;
  HostParticles p;
  p.x = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0.5, 0.5, 0.5};  // 0, 1, 3 coincide
  p.m = {1, 2, 3, 4, 5};
  auto list = all_pairs({2, 3});
  auto dev = upload<Space>(list);
  for (double eps : {0.0, 0.2}) {
    auto ref = direct_reference(p, 1.0, eps);
    auto d = upload<double, Space>(p);
    // results are ADDED: start from 1 and subtract it on the host side of the reference
    Kokkos::deep_copy(d.a, 1.0);
    Kokkos::deep_copy(d.phi, 1.0);
    for (auto& v : ref.a) v += 1;
    for (auto& v : ref.phi) v += 1;
    kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, eps, d.a, d.phi);
    expect_close(d.a, d.phi, ref, 1e-14);
    if (kfmm::detail::is_host_execution_space<Space>) {  // and both directions at once: adds the same
      kfmm::P2POptions opt;
      opt.mutual = true;
      kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, eps, d.a, d.phi, opt);
      for (size_t i = 0; i < ref.a.size(); ++i) ref.a[i] = 2 * ref.a[i] - 1;
      for (size_t i = 0; i < ref.phi.size(); ++i) ref.phi[i] = 2 * ref.phi[i] - 1;
      expect_close(d.a, d.phi, ref, 1e-14);
    }
  }
}

// 60 leaves of 0-39 particles (`sizes`) and a random near list over them: empty rows, leaves without a
// row, and one very long row (every leaf, twice) that chunks of a few leaves split.
HostList sparse_list(std::vector<int>& sizes) {
  std::mt19937 gen(3);
  sizes.clear();
  for (int i = 0; i < 60; ++i) sizes.push_back(static_cast<int>(gen() % 40));
  HostList list = leaves_of_sizes(sizes);
  for (int a = 0; a < 60; ++a) {
    std::vector<int> src;
    if (a % 7 == 3) {      // empty row
    } else if (a == 10) {  // very long row: every leaf, twice (sources may repeat), self once
      for (int b = 0; b < 60; ++b)
        if (b != a) src.push_back(b);
      for (int b = 0; b < 60; ++b) src.push_back(b);
    } else {
      for (int b = 0; b < 60; ++b)
        if (b == a || gen() % 5 == 0) src.push_back(b);
    }
    if (a % 11 != 5) list.row(a, src);  // some leaves have no row at all
  }
  return list;
}

TEMPLATE_LIST_TEST_CASE("p2p on sparse random lists with long and empty rows", "[kernels][p2p]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  Space space;
  std::vector<int> sizes;
  const HostList list = sparse_list(sizes);
  const int n = total(sizes);
  auto dev = upload<Space>(list);
  auto p = random_particles(n, 9);
  auto ref = list_reference(p, list, 2.0, 0.0);
  auto d = upload<double, Space>(p);
  std::vector<Kokkos::View<double* [3], typename Space::memory_space>> runs;
  kfmm::CsrWorkspace<typename Space::memory_space> ws;  // reused by every call below
  const int* chunk_rows = nullptr;
  for (int rep = 0; rep < 4; ++rep) {
    Kokkos::deep_copy(d.a, 0.0);
    Kokkos::deep_copy(d.phi, 0.0);
    kfmm::P2POptions opt;
    opt.leaves_per_chunk = 4;
    opt.team_size = rep < 2 ? 0 : team_sizes(space).back();
    kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 2.0, 0.0, d.a, d.phi, opt, ws);
    REQUIRE(kfmm::detail::csr_chunk_totals(ws.chunks).split_rows > 0);  // the long row is split
    if (rep > 0) REQUIRE(ws.chunks.chunk_row.data() == chunk_rows);     // the table was rebuilt in place
    chunk_rows = ws.chunks.chunk_row.data();
    expect_close(d.a, d.phi, ref, 1e-13);
    Kokkos::View<double* [3], typename Space::memory_space> copy("copy", n);
    Kokkos::deep_copy(copy, d.a);
    runs.push_back(copy);
  }
  CHECK(bitwise_equal(runs[0], runs[1]));  // deterministic, host kernel
  CHECK(bitwise_equal(runs[2], runs[3]));  // deterministic, team kernel

  // A bound on the target leaves (the largest holds 39 or fewer particles) sizes the partial buffer
  // without the totals' round trip: the same table, the same sums, bit for bit; a bound below the
  // largest leaf is refused when validated.
  int largest = 0;
  for (int a = 0; a < 60; ++a)
    if (a % 11 != 5) largest = std::max(largest, sizes[a]);
  for (const int bound : {largest, 40, 1000}) {
    for (int rep = 0; rep < 2; ++rep) {
      Kokkos::deep_copy(d.a, 0.0);
      Kokkos::deep_copy(d.phi, 0.0);
      kfmm::P2POptions opt;
      opt.leaves_per_chunk = 4;
      opt.team_size = rep == 0 ? 0 : team_sizes(space).back();
      opt.max_target_particles = bound;
      kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 2.0, 0.0, d.a, d.phi, opt, ws);
      CHECK_FALSE(ws.chunks.exact);  // (capacities from the bound: no copy of the totals)
      CHECK(ws.chunks.partial_capacity >= kfmm::detail::csr_chunk_totals(ws.chunks).partial);
      CHECK(bitwise_equal(d.a, runs[2 * rep]));
    }
  }
  kfmm::P2POptions low;
  low.leaves_per_chunk = 4;
  low.max_target_particles = largest - 1;
  REQUIRE_THROWS_WITH(
      kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 2.0, 0.0, d.a, d.phi, low, ws),
      Catch::Matchers::ContainsSubstring("max_target_particles = " + std::to_string(largest - 1)) &&
          Catch::Matchers::ContainsSubstring("holds " + std::to_string(largest) + " particles"));
  // Unvalidated, a broken bound stays inside the buffers (the long row's later sums are dropped).
  low.validate = false;
  low.max_target_particles = 1;
  for (const int team : {0, team_sizes(space).back()}) {
    low.team_size = team;
    kfmm::CsrWorkspace<typename Space::memory_space> fresh;  // (no buffer left over from larger calls)
    kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 2.0, 0.0, d.a, d.phi, low, fresh);
    space.fence();
  }
}

TEMPLATE_LIST_TEST_CASE("p2p_prepare builds the table ahead: the same sums, taken once, by its own list only",
                        "[kernels][p2p]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  std::vector<int> sizes;
  const HostList list = sparse_list(sizes);
  const int n = total(sizes);
  const auto dev = upload<Space>(list);
  const HostList everything = all_pairs(sizes);  // another list over the same leaves
  const auto other = upload<Space>(everything);
  const auto p = random_particles(n, 9);
  const auto other_ref = list_reference(p, everything, 2.0, 0.0);
  auto d = upload<double, Space>(p);
  const auto run = [&](const DeviceProblem<Space>& problem, const kfmm::P2POptions& opt,
                       kfmm::CsrWorkspace<Mem>& ws) {
    Kokkos::deep_copy(d.a, 0.0);
    Kokkos::deep_copy(d.phi, 0.0);
    kfmm::p2p(space, problem.list, problem.ranges, d.x, d.m, 2.0, 0.0, d.a, d.phi, opt, ws);
    Kokkos::View<double* [3], Mem> copy("copy", n);
    Kokkos::deep_copy(copy, d.a);
    return copy;
  };
  for (const int team : {0, team_sizes(space).back()}) {
    for (const int bound : {0, 40}) {  // (exact totals, a round trip in p2p; capacities from a bound)
      INFO("team_size = " << team << ", max_target_particles = " << bound);
      kfmm::P2POptions opt;
      opt.leaves_per_chunk = 4;  // (the long row is split: partial sums)
      opt.team_size = team;
      opt.max_target_particles = bound;
      kfmm::CsrWorkspace<Mem> fresh;
      const auto reference = run(dev, opt, fresh);
      kfmm::CsrWorkspace<Mem> ws;
      kfmm::p2p_prepare(space, dev.list, dev.ranges, d.x, opt, ws);
      REQUIRE(ws.prepared.valid);
      CHECK(ws.chunks.totals_pending == (bound == 0));
      CHECK(bitwise_equal(run(dev, opt, ws), reference));
      CHECK_FALSE(ws.prepared.valid);  // (taken)
      // p2p takes the prepared table as it is: a table changed after p2p_prepare changes the sums (every
      // chunk emptied), where a table built again would not.
      kfmm::p2p_prepare(space, dev.list, dev.ranges, d.x, opt, ws);
      Kokkos::deep_copy(space, ws.chunks.chunk_end, ws.chunks.chunk_begin);
      CHECK_FALSE(bitwise_equal(run(dev, opt, ws), reference));
      // Prepared for this list, called for another: that call builds its own table; and a later call
      // for the first list without a new p2p_prepare builds its own too.
      kfmm::p2p_prepare(space, dev.list, dev.ranges, d.x, opt, ws);
      run(other, opt, ws);
      CHECK_FALSE(ws.prepared.valid);
      expect_close(d.a, d.phi, other_ref, 1e-13);
      CHECK(bitwise_equal(run(dev, opt, ws), reference));
      // Prepared with another chunking (3 source leaves per chunk): not taken by a call with 4.
      kfmm::P2POptions three = opt;
      three.leaves_per_chunk = 3;
      kfmm::p2p_prepare(space, dev.list, dev.ranges, d.x, three, ws);
      CHECK(bitwise_equal(run(dev, opt, ws), reference));
    }
  }
  kfmm::CsrWorkspace<Mem> ws;
  if constexpr (kfmm::detail::is_host_execution_space<Space>) {  // (mutual builds no table)
    kfmm::P2POptions mutual;
    mutual.mutual = true;
    kfmm::p2p_prepare(space, other.list, other.ranges, d.x, mutual, ws);  // (all pairs: symmetric)
    CHECK_FALSE(ws.prepared.valid);
  }
  // What p2p refuses, p2p_prepare refuses, naming itself.
  kfmm::InteractionList<Mem> broken = dev.list;
  broken.offsets = Kokkos::View<int*, Mem>("offsets", 1);
  CHECK_THROWS_WITH(kfmm::p2p_prepare(space, broken, dev.ranges, d.x, kfmm::P2POptions(), ws),
                    Catch::Matchers::ContainsSubstring("p2p_prepare: near_list.offsets has 1 entries"));
  kfmm::P2POptions low;
  low.max_target_particles = 1;
  CHECK_THROWS_WITH(
      kfmm::p2p_prepare(space, dev.list, dev.ranges, d.x, low, ws),
      Catch::Matchers::ContainsSubstring("p2p_prepare: max_target_particles = 1 but a target leaf"));
  CHECK_FALSE(ws.prepared.valid);
}

TEMPLATE_LIST_TEST_CASE("p2p refuses inconsistent sizes", "[kernels][p2p]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  auto list = all_pairs({3});
  auto dev = upload<Space>(list);
  auto p = random_particles(3, 1);
  auto d = upload<double, Space>(p);
  Kokkos::View<double*, Mem> short_phi("phi", 2);
  CHECK_THROWS_AS(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, short_phi), kfmm::Error);
  CHECK_THROWS_AS(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, -0.1, d.a, d.phi), kfmm::Error);
  kfmm::InteractionList<Mem> broken = dev.list;
  broken.offsets = Kokkos::View<int*, Mem>("offsets", 1);
  CHECK_THROWS_AS(kfmm::p2p(space, broken, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi), kfmm::Error);
  kfmm::P2POptions huge_team;
  huge_team.team_size = 1 << 20;
  CHECK_THROWS_AS(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, huge_team),
                  kfmm::Error);
  kfmm::P2POptions negative_hint;
  negative_hint.expected_leaf_size = -1;
  CHECK_THROWS_WITH(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, negative_hint),
                    Catch::Matchers::ContainsSubstring("expected_leaf_size = -1"));
  CHECK_THROWS_WITH(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, std::nan(""), 0.0, d.a, d.phi),
                    Catch::Matchers::ContainsSubstring("p2p: G = nan must be finite"));
  // In float a G beyond float's range would make every sum inf or NaN: refused (double takes it).
  auto f = upload<float, Space>(p);
  CHECK_THROWS_WITH(kfmm::p2p(space, dev.list, dev.ranges, f.x, f.m, -1e39, 0.0, f.a, f.phi),
                    Catch::Matchers::ContainsSubstring("p2p: G = -1e+39 exceeds the range of float"));
  kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1e39, 0.0, d.a, d.phi);
  // ... and so would a softening whose square is infinite in float (every force zero)
  CHECK_THROWS_WITH(
      kfmm::p2p(space, dev.list, dev.ranges, f.x, f.m, 1.0, 2e19, f.a, f.phi),
      Catch::Matchers::ContainsSubstring("p2p: softening = 2e+19: its square exceeds the range of float"));
  kfmm::p2p(space, dev.list, dev.ranges, f.x, f.m, 1.0, 1e19, f.a, f.phi);
}

TEMPLATE_LIST_TEST_CASE(
    "p2p refuses offsets that run backwards, leaves outside the particles, repeated targets",
    "[kernels][p2p]", kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Catch::Matchers::ContainsSubstring;
  Space space;
  const HostList list = all_pairs({2, 3});  // two rows of two sources: offsets {0, 2, 4}
  const auto p = random_particles(5, 1);
  const auto d = upload<double, Space>(p);
  const auto run = [&](const HostList& l) {
    const auto dev = upload<Space>(l);
    kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi);
  };
  CHECK_NOTHROW(run(list));
  HostList backwards = list;
  backwards.offsets[1] = 3;  // {0, 3, 2}: row 1 would run from 3 down to 2
  backwards.offsets[2] = 2;
  backwards.sources.resize(4);
  CHECK_THROWS_WITH(run(backwards),
                    ContainsSubstring("near_list.offsets must start at 0 and never decrease"));
  HostList late_start = list;
  late_start.offsets[0] = 1;
  CHECK_THROWS_WITH(run(late_start), ContainsSubstring("1 of its 3 entries do not"));
  HostList beyond = list;
  beyond.ranges[3] = 7;  // leaf 1 would end at particle 7 of 5: its sums would land beyond the outputs
  CHECK_THROWS_WITH(run(beyond), ContainsSubstring("p2p: 1 of the 2 targets of near_list are not node ids"));
  HostList unknown_target = list;
  unknown_target.targets[1] = 2;  // no row 2 in ranges
  CHECK_THROWS_WITH(run(unknown_target), ContainsSubstring("not node ids in [0, 2)"));
  HostList unknown_source = list;
  unknown_source.sources[3] = -1;  // would be read before the particles
  CHECK_THROWS_WITH(run(unknown_source),
                    ContainsSubstring("p2p: 1 of the 4 sources of near_list are not node ids"));
  HostList repeated_target = list;
  repeated_target.targets[1] = 0;  // leaf 0's sums written by two rows at once
  CHECK_THROWS_WITH(run(repeated_target),
                    ContainsSubstring("p2p: 1 node is the target of more than one row of near_list"));
  // The checks run in one device pass (list_checks.hpp): entries of sources beyond the last offset are not
  // pairs and are not read; a node repeated three times counts once; the counters and row counts kept in a
  // workspace start from zero in every call, so a refused list leaves no trace in the next call.
  HostList spare = list;
  spare.sources.push_back(-7);  // (capacity beyond the 4 pairs)
  CHECK_NOTHROW(run(spare));
  const HostList three = all_pairs({1, 1, 1, 1});  // rows of targets 0..3
  HostList repeated_twice = three;
  repeated_twice.targets = {2, 2, 2, 3};
  CHECK_THROWS_WITH(run(repeated_twice),
                    ContainsSubstring("p2p: 1 node is the target of more than one row of near_list"));
  repeated_twice.targets = {1, 3, 1, 3};
  CHECK_THROWS_WITH(run(repeated_twice),
                    ContainsSubstring("p2p: 2 nodes are the target of more than one row of near_list"));
  {
    kfmm::CsrWorkspace<typename Space::memory_space> ws;
    const auto bad = upload<Space>(repeated_twice);
    const auto good = upload<Space>(three);
    const auto p4 = upload<double, Space>(random_particles(4, 2));
    for (int rep = 0; rep < 2; ++rep) {
      CHECK_THROWS_AS(kfmm::p2p(space, bad.list, bad.ranges, p4.x, p4.m, 1.0, 0.0, p4.a, p4.phi, {}, ws),
                      kfmm::Error);
      CHECK_NOTHROW(kfmm::p2p(space, good.list, good.ranges, p4.x, p4.m, 1.0, 0.0, p4.a, p4.phi, {}, ws));
    }
  }
  HostList short_sources = list;
  short_sources.sources.resize(3);  // the last offset says 4 pairs
  CHECK_THROWS_WITH(run(short_sources),
                    ContainsSubstring("p2p: near_list.sources has 3 entries, fewer than its 4 pairs"));
  // 10,000 pairs (the pass takes eight indices a thread, strided by the thread count on GPUs): a bad source
  // near the end and a repeated target at the end are found, the list itself passes.
  {
    const HostList wide = all_pairs(std::vector<int>(100, 1));
    const auto p100 = upload<double, Space>(random_particles(100, 3));
    const auto run100 = [&](const HostList& l) {
      const auto dev100 = upload<Space>(l);
      kfmm::p2p(space, dev100.list, dev100.ranges, p100.x, p100.m, 1.0, 0.0, p100.a, p100.phi);
    };
    CHECK_NOTHROW(run100(wide));
    HostList bad_source = wide;
    bad_source.sources[9997] = 100;
    CHECK_THROWS_WITH(run100(bad_source),
                      ContainsSubstring("p2p: 1 of the 10000 sources of near_list are not node ids"));
    HostList repeated_last = wide;
    repeated_last.targets.back() = 0;
    CHECK_THROWS_WITH(run100(repeated_last),
                      ContainsSubstring("p2p: 1 node is the target of more than one row of near_list"));
  }
  // Unvalidated (a caller with lists consistent by construction) the checks cost nothing and do not run.
  kfmm::P2POptions trusted;
  trusted.validate = false;
  const auto dev = upload<Space>(list);
  CHECK_NOTHROW(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, trusted));
}

// Newton's third law (P2POptions::mutual, host backends): a symmetric random list with repeated pairs,
// empty leaves and leaves wider than the lanes equals the one-directional reference; asymmetric lists,
// GPU backends and an explicit team size are refused.
TEMPLATE_LIST_TEST_CASE("p2p mutual on symmetric lists, refused otherwise", "[kernels][p2p]",
                        kfmm_test::ExecutionSpaces) {
  using Space = TestType;
  using Mem = typename Space::memory_space;
  Space space;
  std::mt19937 gen(5);
  const int leaves = 45;
  std::vector<int> sizes;
  for (int i = 0; i < leaves; ++i) sizes.push_back(i == 7 ? 70 : static_cast<int>(gen() % 23));
  std::vector<std::vector<int>> rows(leaves);
  for (int a = 0; a < leaves; ++a) {
    rows[a].push_back(a);
    for (int b = a + 1; b < leaves; ++b) {
      const int times = gen() % 4 == 0 ? 1 + (b % 9 == 0) : 0;  // some pairs twice
      for (int t = 0; t < times; ++t) {
        rows[a].push_back(b);
        rows[b].push_back(a);
      }
    }
  }
  HostList list = leaves_of_sizes(sizes);
  for (int a = 0; a < leaves; ++a) {
    std::shuffle(rows[a].begin(), rows[a].end(), gen);
    list.row((a * 17) % leaves, rows[(a * 17) % leaves]);  // rows in no particular order
  }
  const int n = total(sizes);
  auto dev = upload<Space>(list);
  auto p = random_particles(n, 21, /*negative_masses=*/true);
  kfmm::P2POptions opt;
  opt.mutual = true;
  auto d = upload<double, Space>(p);
  if (!kfmm::detail::is_host_execution_space<Space>) {
    CHECK_THROWS_AS(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, opt), kfmm::Error);
    return;
  }
  kfmm::CsrWorkspace<Mem> ws;
  std::vector<Kokkos::View<double* [3], Mem>> runs;
  for (double eps : {0.0, 0.05}) {
    auto ref = list_reference(p, list, 1.5, eps);
    for (int rep = 0; rep < 2; ++rep) {
      Kokkos::deep_copy(d.a, 0.0);
      Kokkos::deep_copy(d.phi, 0.0);
      kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.5, eps, d.a, d.phi, opt, ws);
      expect_close(d.a, d.phi, ref, 1e-13);
      Kokkos::View<double* [3], Mem> copy("copy", n);
      Kokkos::deep_copy(copy, d.a);
      runs.push_back(copy);
    }
  }
  CHECK(bitwise_equal(runs[0], runs[1]));  // deterministic
  CHECK(bitwise_equal(runs[2], runs[3]));
  // one pair dropped from one row: asymmetric, refused (and accepted unchecked only without validate)
  HostList broken = list;
  broken.sources.erase(broken.sources.begin() + broken.offsets[3]);
  for (size_t r = 4; r < broken.offsets.size(); ++r) --broken.offsets[r];
  auto bad = upload<Space>(broken);
  CHECK_THROWS_AS(kfmm::p2p(space, bad.list, bad.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, opt), kfmm::Error);
  // a source leaf without a row of its own
  HostList orphan = leaves_of_sizes({3, 4});
  orphan.row(0, {0, 1});
  auto o = upload<Space>(orphan);
  auto q = upload<double, Space>(random_particles(7, 2));
  CHECK_THROWS_AS(kfmm::p2p(space, o.list, o.ranges, q.x, q.m, 1.0, 0.0, q.a, q.phi, opt), kfmm::Error);
  kfmm::P2POptions team = opt;
  team.team_size = 1;
  CHECK_THROWS_AS(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, team), kfmm::Error);
  // nor chunks or a partial-buffer bound: refused, not ignored
  kfmm::P2POptions chunked = opt;
  chunked.leaves_per_chunk = 2;
  CHECK_THROWS_WITH(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, chunked),
                    Catch::Matchers::ContainsSubstring("leaves_per_chunk = 2 and max_target_particles = 0"));
  kfmm::P2POptions bounded = opt;
  bounded.max_target_particles = 64;
  CHECK_THROWS_AS(kfmm::p2p(space, dev.list, dev.ranges, d.x, d.m, 1.0, 0.0, d.a, d.phi, bounded),
                  kfmm::Error);
}
