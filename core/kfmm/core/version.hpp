/// \file version.hpp
#pragma once

namespace kfmm {
/// kfmm's version, "major.minor.patch".
inline const char* version_string() {
  return "0.1.0";
}
}  // namespace kfmm
