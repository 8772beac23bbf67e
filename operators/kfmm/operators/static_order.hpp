/// \file static_order.hpp
/// The compile-time order dispatch of the translation kernels (M2L, M2M, L2L): orders with a
/// compile-time specialisation run code whose loops unroll and whose coefficients live in registers;
/// other orders run the runtime-order code. One list for every operator keeps the set of compiled
/// kernels (and nvcc's compile time) predictable.
#pragma once

#include <type_traits>

#include "kfmm/core/execution_space.hpp"

namespace kfmm::detail {

/// Lowest and highest orders with a compile-time specialisation; others use the runtime-order path.
inline constexpr int min_static_order = 2;
inline constexpr int max_static_order = 10;

/// Calls f(std::integral_constant<int, P>) with P = order for orders with a compile-time
/// specialisation, P = -1 (runtime order) otherwise.
template <class F>
void dispatch_static_order(int order, F&& f) {
  switch (order) {
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    case 4:
      f(std::integral_constant<int, 4>{});
      break;
    case 5:
      f(std::integral_constant<int, 5>{});
      break;
    case 6:
      f(std::integral_constant<int, 6>{});
      break;
    case 7:
      f(std::integral_constant<int, 7>{});
      break;
    case 8:
      f(std::integral_constant<int, 8>{});
      break;
    case 9:
      f(std::integral_constant<int, 9>{});
      break;
    case 10:
      f(std::integral_constant<int, 10>{});
      break;
    default:
      f(std::integral_constant<int, -1>{});
      break;
  }
}

/// dispatch_static_order on device backends; P = -1 (the runtime order) on host backends, whose
/// per-order kernels the compilers vectorise without compile-time orders (and whose build time stays
/// small). The batched P2M, M2M, L2L and L2P all dispatch through this.
template <class ExecutionSpace, class F>
void dispatch_device_static_order(int order, F&& f) {
  if constexpr (is_host_execution_space<ExecutionSpace>) {
    f(std::integral_constant<int, -1>{});
  } else {
    dispatch_static_order(order, f);
  }
}

}  // namespace kfmm::detail
