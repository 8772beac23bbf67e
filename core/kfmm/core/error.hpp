/// \file error.hpp
/// The exception kfmm throws for every invalid argument or unrecoverable condition, and the checks
/// that raise it. Messages name the offending input and the problem; nothing is printed.
#pragma once

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kfmm {

/// Thrown for invalid input (an order out of range, a View too small, NaN coordinates, ...) and for
/// conditions kfmm refuses to handle silently (a capacity that cannot grow, an unsupported lane).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error("kfmm: " + what) {}
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

/// Throws kfmm::Error with the concatenated message parts. [[noreturn]]: where a compiler does not inline
/// the throw, it still knows that a failed require does not continue (g++ had warned -Warray-bounds at an
/// index that a require before it had rejected).
template <class... Parts>
[[noreturn]] void throw_error(Parts&&... message_parts) {
  throw Error(concat(std::forward<Parts>(message_parts)...));
}
}  // namespace detail

/// Throws kfmm::Error with the concatenated message parts unless `condition` holds.
template <class... Parts>
void require(bool condition, Parts&&... message_parts) {
  if (!condition) detail::throw_error(std::forward<Parts>(message_parts)...);
}

/// The real type's name in messages: "float", else "the real type".
template <class Real>
constexpr const char* real_type_name() {
  return sizeof(Real) == 4 ? "float" : "the real type";
}

/// Throws kfmm::Error unless the physical constant `value` (G, say) is finite with a magnitude below
/// 1e300 (G times a sum stays finite in double) and, for a float kernel, within float's range: cast to
/// float it would be infinite and turn every sum, even 0, into inf or NaN. `label` names it in the
/// message ("p2p: G").
template <class Real>
void require_finite_constant(double value, const char* label) {
  require(value == value && value > -1e300 && value < 1e300, label, " = ", value,
          " must be finite with a magnitude below 1e300");
  const double largest = static_cast<double>(std::numeric_limits<Real>::max());
  require(!(value > largest || value < -largest), label, " = ", value, " exceeds the range of ",
          real_type_name<Real>(), " (", largest, ")");
}

}  // namespace kfmm
