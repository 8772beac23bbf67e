/// \file morton.hpp
/// 63-bit Morton (Z-order) keys, 21 bits per axis, quantised relative to a cube that contains the
/// particles' bounding box. The quantisation is done in double precision relative to the box corner,
/// so particles far from the origin (1e6 offsets with unit extent) still resolve to all 21 levels.
///
/// Level l (0 = the whole cube, 21 = the finest cell) of a key is its top 3 l bits: the octant digit
/// that selects the level-l child inside its level-(l-1) parent is `(key >> 3 (21 - l)) & 7`, with
/// x in the most significant bit of the digit, then y, then z.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kfmm/tree/bounding_box.hpp"

namespace kfmm {

/// Morton key type: 63 significant bits (bit 63 is always zero).
using MortonKey = std::uint64_t;

/// Number of octree levels a key resolves below the root.
inline constexpr int morton_levels = 21;
/// Number of significant bits of a key.
inline constexpr int morton_bits = 3 * morton_levels;

/// The cube the keys quantise: corner `lo`, and `scale` = 2^21 / edge length, so that a coordinate x
/// maps to the integer cell floor((x - lo) * scale) in [0, 2^21).
struct MortonFrame {
  double lo[3] = {0, 0, 0};
  double scale = 1;

  /// The frame of a bounding box: the cube with the box's low corner and its largest extent (1 if
  /// the box is a single point), so that every point of the box maps to a valid cell.
  KOKKOS_INLINE_FUNCTION static MortonFrame of(const BoundingBox& box) {
    MortonFrame f;
    if (box.empty()) return f;
    double edge = box.max_extent();
    if (!(edge > 0)) edge = 1;
    for (int a = 0; a < 3; ++a) f.lo[a] = box.lo[a];
    f.scale = static_cast<double>(1u << morton_levels) / edge;
    return f;
  }
};

namespace detail {

/// Spreads the low 21 bits of v so that bit b moves to bit 3 b.
KOKKOS_INLINE_FUNCTION std::uint64_t spread_bits_by_3(std::uint64_t v) {
  v &= 0x1fffffull;
  v = (v | (v << 32)) & 0x1f00000000ffffull;
  v = (v | (v << 16)) & 0x1f0000ff0000ffull;
  v = (v | (v << 8)) & 0x100f00f00f00f00full;
  v = (v | (v << 4)) & 0x10c30c30c30c30c3ull;
  v = (v | (v << 2)) & 0x1249249249249249ull;
  return v;
}

/// Gathers every third bit (bits 0, 3, 6, ...) of v into the low 21 bits.
KOKKOS_INLINE_FUNCTION std::uint64_t compact_bits_by_3(std::uint64_t v) {
  v &= 0x1249249249249249ull;
  v = (v | (v >> 2)) & 0x10c30c30c30c30c3ull;
  v = (v | (v >> 4)) & 0x100f00f00f00f00full;
  v = (v | (v >> 8)) & 0x1f0000ff0000ffull;
  v = (v | (v >> 16)) & 0x1f00000000ffffull;
  v = (v | (v >> 32)) & 0x1fffffull;
  return v;
}

/// Number of leading zero bits of a 64-bit word (64 for 0), by binary search: portable to every
/// backend without intrinsics, and cheap next to the loads around it.
KOKKOS_INLINE_FUNCTION int count_leading_zeros(std::uint64_t x) {
  if (x == 0) return 64;
  int n = 0;
  if ((x >> 32) == 0) {
    n += 32;
    x <<= 32;
  }
  if ((x >> 48) == 0) {
    n += 16;
    x <<= 16;
  }
  if ((x >> 56) == 0) {
    n += 8;
    x <<= 8;
  }
  if ((x >> 60) == 0) {
    n += 4;
    x <<= 4;
  }
  if ((x >> 62) == 0) {
    n += 2;
    x <<= 2;
  }
  if ((x >> 63) == 0) {
    n += 1;
  }
  return n;
}

}  // namespace detail

/// Integer cell (0 .. 2^21 - 1) of coordinate x on one axis of the frame.
KOKKOS_INLINE_FUNCTION std::uint32_t morton_cell(double x, double lo, double scale) {
  const double q = (x - lo) * scale;
  if (!(q > 0)) return 0;  // also catches rounding just below the corner
  const double top = static_cast<double>((1u << morton_levels) - 1);
  return q >= top ? (1u << morton_levels) - 1 : static_cast<std::uint32_t>(q);
}

/// Morton key of the integer cell (ix, iy, iz), each in [0, 2^21).
KOKKOS_INLINE_FUNCTION MortonKey morton_encode(std::uint32_t ix, std::uint32_t iy, std::uint32_t iz) {
  return (detail::spread_bits_by_3(ix) << 2) | (detail::spread_bits_by_3(iy) << 1) |
         detail::spread_bits_by_3(iz);
}

/// Inverse of morton_encode.
KOKKOS_INLINE_FUNCTION void morton_decode(MortonKey key, std::uint32_t& ix, std::uint32_t& iy,
                                          std::uint32_t& iz) {
  ix = static_cast<std::uint32_t>(detail::compact_bits_by_3(key >> 2));
  iy = static_cast<std::uint32_t>(detail::compact_bits_by_3(key >> 1));
  iz = static_cast<std::uint32_t>(detail::compact_bits_by_3(key));
}

/// Deepest level at which keys a and b lie in the same cell: 21 if a == b, 0 if they differ in the
/// first octant digit.
KOKKOS_INLINE_FUNCTION int morton_common_level(MortonKey a, MortonKey b) {
  const MortonKey x = a ^ b;
  if (x == 0) return morton_levels;
  // Bit 63 is never set, so the 63-bit prefix has clz - 1 leading equal bits.
  return (detail::count_leading_zeros(x) - 1) / 3;
}

namespace detail {

/// keys(i) = the Morton key of positions(i) in `frame`, or, when `box` is not empty, in the frame of
/// the device-resident reduction box(0) times `position_scale` (every thread derives the same frame
/// from it, with the host's arithmetic: build_octree reads the box later, with its level sizes, instead
/// of waiting for it before the keys); with `permutation` non-empty also permutation(i) = i (the
/// octree's sort payload). (Kernels of kfmm's headers are functors, not lambdas: nvcc's host-device
/// lambdas in headers that several translation units instantiate crash host backends of CUDA builds,
/// see bounding_box.hpp.)
template <class PositionsView, class KeysView, class PermutationView>
struct MortonKeys {
  PositionsView positions;
  KeysView keys;
  PermutationView permutation;
  MortonFrame frame;
  double position_scale = 1;  ///< a power of two applied to the positions first (exact)
  Kokkos::View<const BoxReduction*, typename KeysView::memory_space> box = {};
  KOKKOS_INLINE_FUNCTION void operator()(const int i) const {
    const double s = position_scale;
    const MortonFrame f = box.extent(0) > 0 ? MortonFrame::of(scaled_box(box(0), s)) : frame;
    keys(i) = morton_encode(morton_cell(static_cast<double>(positions(i, 0)) * s, f.lo[0], f.scale),
                            morton_cell(static_cast<double>(positions(i, 1)) * s, f.lo[1], f.scale),
                            morton_cell(static_cast<double>(positions(i, 2)) * s, f.lo[2], f.scale));
    if (permutation.extent(0) > 0) permutation(i) = i;
  }
};

}  // namespace detail

/// Computes the keys of n positions on `space` into `keys` (size >= n).
template <class ExecutionSpace, class PositionsView, class KeysView>
void compute_morton_keys(const ExecutionSpace& space, const MortonFrame& frame,
                         const PositionsView& positions, const KeysView& keys) {
  const int n = static_cast<int>(positions.extent(0));
  using Permutation = Kokkos::View<int*, typename KeysView::memory_space>;
  Kokkos::parallel_for(
      "kfmm::morton_keys", Kokkos::RangePolicy<ExecutionSpace>(space, 0, n),
      detail::MortonKeys<PositionsView, KeysView, Permutation>{positions, keys, Permutation(), frame});
}

}  // namespace kfmm
