/// \file view_capacity.hpp
/// Grow-only capacity of the reusable buffers every layer keeps in its workspaces.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

namespace kfmm::detail {

/// Makes the rank-1 View `v` hold at least n entries. Contents are not kept; the old buffer is released
/// before the new one is allocated (so the two never coexist), uninitialised, under `label`.
template <class View>
void reserve_at_least(View& v, long long n, const char* label) {
  if (static_cast<long long>(v.extent(0)) < n) {
    v = View();
    v = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), static_cast<size_t>(n));
  }
}

}  // namespace kfmm::detail
