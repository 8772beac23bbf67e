/// \file m2l_fused.hpp
/// The fused M2L lane: target-owned CSR kernels over the far list, nothing per pair in global memory.
///
/// The far list is cut into chunks of at most `pairs_per_chunk` pairs of one target row
/// (csr_chunks.hpp): short rows are one chunk, long rows several, empty rows none.
///   - GPU backends (team kernel): one team per chunk. Thread t takes the pairs t, t + T, ... of the
///     chunk, one pair at a time: angles, rotation to z, z-translation and rotation back of the ops
///     building block m2l_rotation_pair<P> run in registers (compile-time order: loops unroll and the
///     swap-block entries are immediates), and add to the thread's partial local, kept in registers
///     or in the thread's column of team scratch (M2LAccumulator). The T partials are then summed per
///     coefficient in thread order (fixed: deterministic) and added once to the target's local row
///     (or, for a split row, stored in the chunk's partial block and combined in chunk order).
///   - host backends: one thread per chunk with the partial local on the stack; W pairs at a time
///     through the same building blocks on W-lane packs (m2l_csr_lanes.hpp), so the compiler vectorises
///     across pairs; the next block's multipole rows are prefetched while a block computes.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kfmm/core/error.hpp"
#include "kfmm/core/expansion_layout.hpp"
#include "kfmm/core/interaction_list.hpp"
#include "kfmm/core/kokkos_compat.hpp"
#include "kfmm/operators/csr_chunks.hpp"
#include "kfmm/operators/m2l_csr_lanes.hpp"
#include "kfmm/operators/m2l_csr_options.hpp"

namespace kfmm::detail {

/// Default chunk of the team kernel, in pairs per thread: 32 in float and 64 in double, i.e. 1024 and
/// 2048 pairs for the default team of 32. Each chunk pays a start (a chain of dependent loads from the
/// chunk table to the first source row), a team reduction and its output writes, and a split row its
/// partial blocks and their combination, with few warps per SM to hide it (the kernel holds 124-255
/// registers per thread): the likely cause, not profiled. Measured on one H200 on the solver's own far
/// lists (bench_m2l_csr m2l_solver_lists_*, docs/kernels.md) against the earlier 4 per thread (128
/// pairs): 1024 pairs took the M2L 10-19 % less time at the goal points, float and double; 2048 gained
/// another 3-4 % in double (flat up to 16384) but 0-1 % in float, where 4096 lost 29 % at 2e5 (its few
/// long rows, one team each, finish last). Fewer chunks also shrink the partial buffer's bound,
/// (p+1)^2 x pairs / chunk.
template <class Real>
inline constexpr int m2l_team_pairs_per_thread = sizeof(Real) == 8 ? 64 : 32;

/// Shared state of the fused kernels.
template <class Mem, class CentresView, class MultipoleView, class LocalView>
struct M2LFusedData {
  using Real = typename LocalView::non_const_value_type;
  Kokkos::View<const int*, Mem> targets, sources;
  Kokkos::View<const int*, Mem> chunk_row, chunk_begin, chunk_end, chunk_partial;
  Kokkos::View<const int*, Mem> chunk_totals;  ///< (0): chunks; launches cover the table's capacity
  CentresView centres;
  MultipoleView multipoles;
  LocalView locals;
  Kokkos::View<Real*, Mem> partial;
  int order;
  int nc;
  /// Every multipole row starts on a 16-byte boundary (expansion_row_length rows): read rows in 16 bytes.
  bool quad_rows = false;

  /// 16 bytes of a multipole row: one load instruction on GPUs.
  struct alignas(16) Quad {
    Real v[16 / sizeof(Real)];
  };

  /// Adds the M2L of pair k (sources(k) -> target node t) to L (compile-time order P, -1: runtime).
  template <int P>
  KOKKOS_FORCEINLINE_FUNCTION void pair(int t, int k, Real* L) const {
    const int s = sources(k);
    const Real dx = static_cast<Real>(centres(t, 0) - centres(s, 0));
    const Real dy = static_cast<Real>(centres(t, 1) - centres(s, 1));
    const Real dz = static_cast<Real>(centres(t, 2) - centres(s, 2));
    if constexpr (P >= 0) {
      // The source row into registers first, in 16-byte loads where the rows allow: the 32 threads of
      // a warp read 32 different rows, so a load per coefficient cost 32 L1 requests per coefficient
      // (Nsight Compute at p = 7: L1 80 % busy, 7.8x the ideal L2 sectors) and a 16-byte load covers 4.
      constexpr int W = 16 / static_cast<int>(sizeof(Real));
      constexpr int nq = (num_coefficients(P) + W - 1) / W;
      Real M[nq * W];
      const Real* row = &multipoles(s, 0);
      if (quad_rows) {
        const Quad* q = reinterpret_cast<const Quad*>(row);
        KFMM_PRAGMA_UNROLL
        for (int j = 0; j < nq; ++j) {
          const Quad v = q[j];
          KFMM_PRAGMA_UNROLL
          for (int w = 0; w < W; ++w) M[j * W + w] = v.v[w];
        }
      } else {
        KFMM_PRAGMA_UNROLL
        for (int i = 0; i < nq * W; ++i) M[i] = i < num_coefficients(P) ? row[i] : Real(0);
      }
      m2l_pair_dispatch<P>(order, M, dx, dy, dz, L);
    } else {
      m2l_pair_dispatch<P>(order, &multipoles(s, 0), dx, dy, dz, L);
    }
  }

  /// Chunk c is past the table (the launch covers the table's capacity).
  KOKKOS_FORCEINLINE_FUNCTION bool past_end(int c) const { return c >= chunk_totals(0); }

  /// Coefficient i of chunk c's result: added to the target's local (a row's first chunk), or stored in
  /// the chunk's partial block.
  KOKKOS_FORCEINLINE_FUNCTION void emit(int c, int t, int i, Real value) const {
    const int slot = chunk_partial(c);
    if (slot >= 0) {
      partial(slot + i) = value;
    } else {
      locals(t, i) += value;
    }
  }
};

/// Host variant: one thread per chunk. Compile-time orders go through the lanes of
/// m2l_csr_lanes.hpp (W pairs at once, vectorised across pairs); the runtime order pair by pair.
template <int P, class Data>
struct M2LFusedHostKernel {
  using Real = typename Data::Real;
  Data d;
  KOKKOS_INLINE_FUNCTION void operator()(int c) const {
    if (d.past_end(c)) return;
    const int t = d.targets(d.chunk_row(c));
    const int k0 = d.chunk_begin(c);
    const int k1 = d.chunk_end(c);
    if constexpr (P >= 0) {
      constexpr int W = m2l_host_lanes<Real>;
      constexpr int nc = num_coefficients(P);
      Pack<Real, W> L[nc];
      for (int i = 0; i < nc; ++i) L[i] = Pack<Real, W>(Real(0));
      Real zeros[nc];  // the multipole of an idle lane
      for (int i = 0; i < nc; ++i) zeros[i] = Real(0);
      const Real* M[W];
      Real dx[W], dy[W], dz[W];
      for (int k = k0; k < k1; k += W) {
        for (int l = 0; l < W; ++l) {
          if (k + l < k1) {
            const int s = d.sources(k + l);
            M[l] = &d.multipoles(s, 0);
            dx[l] = static_cast<Real>(d.centres(t, 0) - d.centres(s, 0));
            dy[l] = static_cast<Real>(d.centres(t, 1) - d.centres(s, 1));
            dz[l] = static_cast<Real>(d.centres(t, 2) - d.centres(s, 2));
          } else {  // idle lane: zero multipole, any non-degenerate displacement
            M[l] = zeros;
            dx[l] = Real(1);
            dy[l] = dz[l] = Real(0);
          }
        }
        // The next block's multipoles, while this block computes (sources are scattered in memory).
        for (int l = 0; l < W && k + W + l < k1; ++l)
          compat::prefetch(&d.multipoles(d.sources(k + W + l), 0), nc * static_cast<int>(sizeof(Real)));
        m2l_lanes<P, W>(M, dx, dy, dz, L);
      }
      for (int i = 0; i < nc; ++i) {  // lanes summed in a fixed order
        Real sum = L[i].v[0];
        for (int l = 1; l < W; ++l) sum += L[i].v[l];
        d.emit(c, t, i, sum);
      }
    } else {
      Real L[m2l_capacity<P>];
      for (int i = 0; i < d.nc; ++i) L[i] = Real(0);
      for (int k = k0; k < k1; ++k) d.template pair<P>(t, k, L);
      for (int i = 0; i < d.nc; ++i) d.emit(c, t, i, L[i]);
    }
  }
};

/// GPU variant: one team per chunk, one pair per thread at a time (see the file comment).
/// InRegisters: the partial local is a register array; otherwise the thread's scratch column.
template <int P, bool InRegisters, class ExecutionSpace, class Data>
struct M2LFusedTeamKernel {
  using Real = typename Data::Real;
  using Member = typename Kokkos::TeamPolicy<ExecutionSpace>::member_type;
  Data d;
  int level;   // scratch level
  int stride;  // scratch column length: nc rounded up to an odd number (no bank conflicts)

  static size_t scratch_bytes(int team, int nc) {
    return sizeof(Real) * static_cast<size_t>(team) * static_cast<size_t>(expansion_scratch_stride(nc)) + 64;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& m) const {
    const int c = m.league_rank();
    if (d.past_end(c)) return;
    const int t = d.targets(d.chunk_row(c));
    const int k0 = d.chunk_begin(c);
    const int k1 = d.chunk_end(c);
    const int T = m.team_size();
    const int tid = m.team_rank();
    const int nc = d.nc;
    Real* red = static_cast<Real*>(m.team_scratch(level).get_shmem_aligned(sizeof(Real) * T * stride, 16));
    Real* mine = red + tid * stride;
    if constexpr (InRegisters) {
      Real L[m2l_capacity<P>];
      KFMM_PRAGMA_UNROLL
      for (int i = 0; i < m2l_capacity<P>; ++i) L[i] = Real(0);
      for (int k = k0 + tid; k < k1; k += T) d.template pair<P>(t, k, L);
      KFMM_PRAGMA_UNROLL
      for (int i = 0; i < m2l_capacity<P>; ++i) mine[i] = L[i];
    } else {
      for (int i = 0; i < nc; ++i) mine[i] = Real(0);
      for (int k = k0 + tid; k < k1; k += T) d.template pair<P>(t, k, mine);
    }
    m.team_barrier();
    // fixed-order sum over the threads that had a pair
    const int used = (k1 - k0) < T ? (k1 - k0) : T;
    for (int i = tid; i < nc; i += T) {
      Real sum = red[i];
      for (int u = 1; u < used; ++u) sum += red[u * stride + i];
      d.emit(c, t, i, sum);
    }
  }
};

template <class Kernel>
using m2l_kernel_real = typename Kernel::Real;

/// Runs the fused lane at compile-time order P (P = -1: runtime order).
template <int P, class ExecutionSpace, class CentresView, class MultipoleView, class LocalView>
void m2l_fused(const ExecutionSpace& space, int order,
               const InteractionList<typename ExecutionSpace::memory_space>& far, const CentresView& centres,
               const MultipoleView& multipoles, const LocalView& locals, const M2LOptions& options,
               CsrWorkspace<typename ExecutionSpace::memory_space>& workspace) {
  using Mem = typename ExecutionSpace::memory_space;
  using Data = M2LFusedData<Mem, CentresView, MultipoleView, LocalView>;
  using Real = typename Data::Real;
  constexpr bool host = is_host_execution_space<ExecutionSpace>;
  const int nc = num_coefficients(order);
  const bool team_kernel = !host || options.team_size > 0;
  const int team = options.team_size > 0 ? options.team_size : (host ? 1 : 32);
  const int per_chunk = options.pairs_per_chunk > 0
                            ? options.pairs_per_chunk
                            : (team_kernel ? m2l_team_pairs_per_thread<Real> * team : 256);
  auto block = KOKKOS_LAMBDA(int) {
    return nc;
  };
  // (Every block is nc entries: the table's capacities are bounds known on the host, so building it
  // needs no host round trip.)
  make_csr_chunks(space, far, per_chunk, block, nc, workspace.chunks);
  const CsrChunks<Mem>& chunks = workspace.chunks;
  if (chunks.chunk_capacity == 0) return;

  Data d;
  d.targets = far.targets;
  d.sources = far.sources;
  d.chunk_row = chunks.chunk_row;
  d.chunk_begin = chunks.chunk_begin;
  d.chunk_end = chunks.chunk_end;
  d.chunk_partial = chunks.chunk_partial;
  d.chunk_totals = chunks.totals;
  d.centres = centres;
  d.multipoles = multipoles;
  d.locals = locals;
  d.partial = workspace.template partial<Real>(chunks.partial_capacity);
  d.order = order;
  d.nc = nc;
  // (rows of a multiple of 16 bytes from a 16-byte aligned start; a row then holds whole 16-byte
  // blocks up to nc rounded up)
  d.quad_rows = (multipoles.stride(0) * sizeof(Real)) % 16 == 0 &&
                reinterpret_cast<std::uintptr_t>(multipoles.data()) % 16 == 0;

  bool done = false;
  if constexpr (host) {  // the host kernel is never instantiated for device backends
    if (!team_kernel) {
      Kokkos::parallel_for("kfmm::m2l::fused",
                           Kokkos::RangePolicy<ExecutionSpace, Kokkos::Schedule<Kokkos::Dynamic>>(
                               space, 0, chunks.chunk_capacity),
                           M2LFusedHostKernel<P, Data>{d});
      done = true;
    }
  }
  if (!done) {
    // On host backends the team kernel is a test path (the GPU code run on the CPU): to bound compile
    // time it is specialised only at p = 4 there and runs the runtime-order maths at other orders.
    constexpr int PT = (host && P != 4) ? -1 : P;
    // One kernel per order keeps nvcc's compile time in check: registers where the (p+1)^2 partial
    // local fits in m2l_register_bytes (fp32 p <= 7, fp64 p <= 4), else the thread's scratch column; an
    // explicit scratch request at a register order runs the runtime-order scratch kernel.
    constexpr bool fits_registers = PT >= 0 && m2l_capacity<PT> * sizeof(Real) <= m2l_register_bytes;
    require(!(options.accumulator == M2LAccumulator::registers && !fits_registers),
            "m2l: the register accumulator needs an order with a compile-time specialisation (",
            host ? "4 on host backends" : "2..10", ") whose ", nc, " coefficients fit in ",
            m2l_register_bytes, " bytes; order = ", order);
    const bool in_registers = fits_registers && options.accumulator != M2LAccumulator::scratch;
    using Policy = Kokkos::TeamPolicy<ExecutionSpace>;
    auto run = [&](auto kernel) {
      using K = decltype(kernel);
      const size_t bytes = K::scratch_bytes(team, nc);
      kernel.level = bytes <= static_cast<size_t>(Policy::scratch_size_max(0)) ? 0 : 1;
      kernel.stride = expansion_scratch_stride(nc);
      require(bytes <= static_cast<size_t>(Policy::scratch_size_max(kernel.level)), "m2l: team_size = ", team,
              " at order ", order, " needs ", bytes, " bytes of team scratch, more than the backend allows");
      const auto scratch = Kokkos::PerTeam(bytes);
      const int max_team = Policy(space, 1, 1)
                               .set_scratch_size(kernel.level, scratch)
                               .team_size_max(kernel, Kokkos::ParallelForTag());
      require(team <= max_team, "m2l: team_size = ", team, " exceeds the backend's maximum of ", max_team,
              " at order ", order);
      Kokkos::parallel_for("kfmm::m2l::fused",
                           Policy(space, chunks.chunk_capacity, team).set_scratch_size(kernel.level, scratch),
                           kernel);
    };
    if constexpr (fits_registers) {
      if (in_registers) {
        run(M2LFusedTeamKernel<PT, true, ExecutionSpace, Data>{d, 0, 0});
      } else {
        run(M2LFusedTeamKernel<-1, false, ExecutionSpace, Data>{d, 0, 0});
      }
    } else {
      run(M2LFusedTeamKernel<PT, false, ExecutionSpace, Data>{d, 0, 0});
    }
  }

  auto partial = d.partial;
  auto targets = d.targets;
  // A row is one block of (p+1)^2 coefficients split into few chunks: one warp-sized slice per
  // coefficient range, no more (empty teams over the split bound cost their width).
  const int combine_team = nc <= 32 ? 32 : nc <= 64 ? 64 : 128;
  combine_split_rows(
      space, chunks, partial, block, combine_team,
      KOKKOS_LAMBDA(int r, int i, Real sum) { locals(targets(r), i) += sum; });
}

}  // namespace kfmm::detail
