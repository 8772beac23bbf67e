/// \file list_build.hpp
/// kfmm::ListBuild: how the dual-tree walk (dual_tree_walk.hpp) turns its final node pairs into the CSR
/// rows of the interaction lists. Its own header so that option structs (kfmm::Options) can name it
/// without the walk's kernels.
#pragma once

#include <string>

namespace kfmm {

/// How dual_tree_walk builds the CSR rows of its lists. Every choice gives the same lists, entry for
/// entry (the same rows, each with the same sources in the same order); they differ in memory and time.
enum class ListBuild {
  /// scatter on host backends, sort on GPUs (where scatter saves 20-37 % of the device memory but its
  /// walk took 1.3-1.9x the sort's on H100s: docs/benchmarks.md, "Thirty-sixth session").
  automatic,
  /// Every final pair in both directions, one stable radix sort by (near, target): the sort's keys and
  /// values and their second buffers, ~16 bytes per list entry at the peak.
  sort,
  /// Every final pair once, rows counted and the pairs placed in both directions where the stable sort
  /// would put them: the pairs and the lists, ~8 bytes per list entry (host backends: sliced counting,
  /// no atomics; GPUs: atomic row cursors, then each row put in order).
  scatter
};

/// Name of a list build ("automatic", "sort", "scatter"; "invalid" for a value outside the enum).
inline const char* to_string(ListBuild b) {
  switch (b) {
    case ListBuild::automatic:
      return "automatic";
    case ListBuild::sort:
      return "sort";
    case ListBuild::scatter:
      return "scatter";
  }
  return "invalid";
}

/// True for the enum's values (a cast integer may be none of them).
inline bool is_valid(ListBuild b) {
  return b == ListBuild::automatic || b == ListBuild::sort || b == ListBuild::scatter;
}

/// Sets `build` to the list build named `name` ("automatic", "sort", "scatter", as to_string writes them)
/// and returns true; returns false, leaving `build` as it was, for any other name.
inline bool list_build_from_string(const std::string& name, ListBuild& build) {
  for (const ListBuild b : {ListBuild::automatic, ListBuild::sort, ListBuild::scatter}) {
    if (name == to_string(b)) {
      build = b;
      return true;
    }
  }
  return false;
}

}  // namespace kfmm
