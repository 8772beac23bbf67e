#include "kfmm/arguments.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace kfmm_cli {

NumberProblem parse_number(const std::string& text, double& value) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  value = std::strtod(begin, &end);
  if (text.empty() || end == begin || *end != '\0') return NumberProblem::not_a_number;
  // (strtod sets ERANGE for an overflow, which is infinite, and for a result below DBL_MIN: a subnormal
  // is the nearest double and kept, a value that rounds to zero is refused rather than made 0)
  if (!std::isfinite(value)) return NumberProblem::not_finite;
  if (errno == ERANGE && value == 0) return NumberProblem::rounds_to_zero;
  return NumberProblem::none;
}

const char* to_string(NumberProblem problem) {
  switch (problem) {
    case NumberProblem::none:
      return "";
    case NumberProblem::not_a_number:
      return "is not a number";
    case NumberProblem::not_finite:
      return "is not a finite number";
    case NumberProblem::rounds_to_zero:
      return "is below the smallest double (4.9e-324) and would be 0";
  }
  return "";
}

double parse_double(const std::string& text, const std::string& what) {
  double value = 0;
  const NumberProblem problem = parse_number(text, value);
  if (problem != NumberProblem::none) throw UsageError(what + ": '" + text + "' " + to_string(problem));
  return value;
}

std::uint64_t parse_unsigned(const std::string& text, const std::string& what) {
  const UsageError refused(what + ": '" + text + "' is not an integer in 0..18446744073709551615");
  // Digits only: the whole range, through strtoull (which would negate a "-1" into 2^64 - 1).
  if (!text.empty() &&
      std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); })) {
    const char* begin = text.c_str();
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(begin, &end, 10);
    if (*end != '\0' || errno == ERANGE) throw refused;
    return static_cast<std::uint64_t>(value);
  }
  // Otherwise the forms parse_integer takes (+7, 1e5, 100000.0), when not negative.
  long long value = -1;
  try {
    value = parse_integer(text, what);
  } catch (const UsageError&) {
    throw refused;
  }
  if (value < 0) throw refused;
  return static_cast<std::uint64_t>(value);
}

long long parse_integer(const std::string& text, const std::string& what) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(begin, &end, 10);
  if (text.empty() || end == begin || *end != '\0' || errno == ERANGE) {
    // Accept integral values written as floating point (1e5, 100000.0).
    char* end2 = nullptr;
    const double d = std::strtod(begin, &end2);
    if (!text.empty() && end2 != begin && *end2 == '\0' && std::isfinite(d) && d == std::floor(d) &&
        std::fabs(d) < 9.0e15) {
      return static_cast<long long>(d);
    }
    throw UsageError(what + ": '" + text + "' is not an integer");
  }
  return value;
}

void Arguments::option(const std::string& name, const std::string& metavar, const std::string& help) {
  specs_.push_back({name, metavar, help, true, false, ""});
}

void Arguments::flag(const std::string& name, const std::string& help) {
  specs_.push_back({name, "", help, false, false, ""});
}

Arguments::Spec* Arguments::find(const std::string& name) {
  for (auto& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const Arguments::Spec* Arguments::find(const std::string& name) const {
  for (const auto& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool Arguments::parse(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      throw UsageError("unexpected argument '" + arg + "'");
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    const auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    Spec* spec = find(name);
    if (!spec) throw UsageError("unknown option '--" + name + "'");
    if (spec->given) throw UsageError("option '--" + name + "' given twice");
    if (spec->takes_value) {
      if (!inline_value) {
        if (i + 1 >= args.size())
          throw UsageError("option '--" + name + "' needs a value (" + spec->metavar + ")");
        value = args[++i];
      }
      spec->value = value;
    } else if (inline_value) {
      throw UsageError("option '--" + name + "' takes no value");
    }
    spec->given = true;
  }
  return true;
}

bool Arguments::has(const std::string& name) const {
  const Spec* s = find(name);
  return s && s->given;
}

std::string Arguments::get(const std::string& name, const std::string& fallback) const {
  const Spec* s = find(name);
  return s && s->given ? s->value : fallback;
}

double Arguments::get_double(const std::string& name, double fallback) const {
  return has(name) ? parse_double(get(name), "--" + name) : fallback;
}

long long Arguments::get_integer(const std::string& name, long long fallback) const {
  return has(name) ? parse_integer(get(name), "--" + name) : fallback;
}

std::uint64_t Arguments::get_unsigned(const std::string& name, std::uint64_t fallback) const {
  return has(name) ? parse_unsigned(get(name), "--" + name) : fallback;
}

std::string Arguments::help() const {
  std::ostringstream out;
  out << "usage: " << usage_ << "\n\n" << description_ << "\n\noptions:\n";
  std::size_t width = 0;
  for (const auto& s : specs_) {
    width = std::max(width, s.name.size() + (s.takes_value ? s.metavar.size() + 1 : 0));
  }
  for (const auto& s : specs_) {
    std::string left = "--" + s.name + (s.takes_value ? " " + s.metavar : "");
    out << "  " << left << std::string(width + 4 - left.size() + 2, ' ') << s.help << "\n";
  }
  out << "  --help" << std::string(width + 4 - 6 + 2, ' ') << "show this help and exit\n";
  if (!epilog_.empty()) out << "\n" << epilog_ << "\n";
  return out.str();
}

}  // namespace kfmm_cli
