/// \file bit_width.hpp
/// The number of bits a value needs, callable on host and device: the radix sort's passes and the team
/// sort's shifts (log2 of a power of two p is bits_for(p - 1)) count with the same function.
#pragma once

#include <Kokkos_Core.hpp>

namespace kfmm {

/// Number of bits needed to represent every value in [0, max_value] (0 for max_value 0).
KOKKOS_INLINE_FUNCTION int bits_for(unsigned long long max_value) {
  int b = 0;
  while (b < 64 && (max_value >> b) != 0) ++b;
  return b;
}

}  // namespace kfmm
