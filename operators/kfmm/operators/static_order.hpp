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
/// Highest compile-time order of the host M2L and L2P in double. Low tolerances in double are cheapest
/// at high orders with wide opening angles on a CPU (1e6 Plummer at 5e-8, two threads: p 10, theta
/// 0.44, 4.6 s; p 14, theta 0.58, 3.2 s; docs/benchmarks.md), and the runtime-order M2L lanes run 7x
/// slower per pair at p 11 than the compile-time ones. Float stops at max_static_order, as its automatic
/// orders do (tolerance.hpp): every order here is one more host kernel in each file that calls them.
inline constexpr int max_host_double_static_order = 16;

/// Calls f(std::integral_constant<int, P>) with P = order for Lo <= order <= Hi, P = -1 (runtime
/// order) otherwise.
template <int Lo, int Hi, class F>
void dispatch_order_range(int order, F&& f) {
  if constexpr (Lo > Hi) {
    f(std::integral_constant<int, -1>{});
  } else if (order == Lo) {
    f(std::integral_constant<int, Lo>{});
  } else {
    dispatch_order_range<Lo + 1, Hi>(order, f);
  }
}

/// Calls f(std::integral_constant<int, P>) with P = order for orders with a compile-time
/// specialisation, P = -1 (runtime order) otherwise.
template <class F>
void dispatch_static_order(int order, F&& f) {
  dispatch_order_range<min_static_order, max_static_order>(order, f);
}

/// Highest compile-time order of the M2L (and the host L2P) on ExecutionSpace in precision Real.
template <class ExecutionSpace, class Real>
inline constexpr int max_static_order_for =
    is_host_execution_space<ExecutionSpace>&& std::is_same<Real, double>::value ? max_host_double_static_order
                                                                                : max_static_order;

/// dispatch_static_order for the M2L and the host L2P on ExecutionSpace in precision Real (compile-time
/// orders up to max_static_order_for).
template <class ExecutionSpace, class Real, class F>
void dispatch_static_order_for(int order, F&& f) {
  dispatch_order_range<min_static_order, max_static_order_for<ExecutionSpace, Real>>(order, f);
}

/// dispatch_static_order on device backends; P = -1 (the runtime order) on host backends, whose
/// per-order kernels the compilers vectorise without compile-time orders (and whose build time stays
/// small). The batched P2M, M2M and L2L dispatch through this.
template <class ExecutionSpace, class F>
void dispatch_device_static_order(int order, F&& f) {
  if constexpr (is_host_execution_space<ExecutionSpace>) {
    f(std::integral_constant<int, -1>{});
  } else {
    dispatch_static_order(order, f);
  }
}

}  // namespace kfmm::detail
