// Command-line arguments of the kfmm subcommands: --name VALUE, --name=VALUE and --flag, strict
// number parsing, and --help text generated from the same declarations.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kfmm_cli {

/// A mistake in how the program was called (unknown option, missing value, ...): exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An input the program cannot work with (bad file, bad value, ...): exit status 1.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Why a text is not a finite double (parse_number).
enum class NumberProblem { none, not_a_number, not_finite, rounds_to_zero };
/// Parses all of `text` as a double into `value`: NumberProblem::none when it is a finite one. A subnormal
/// is accepted as the nearest double; a value that would round to 0 is not (rounds_to_zero).
NumberProblem parse_number(const std::string& text, double& value);
/// The problem as a message's predicate, e.g. "is not a number" ("" for none).
const char* to_string(NumberProblem problem);
/// Parses a double strictly (the whole text, finite); throws UsageError naming `what` otherwise.
double parse_double(const std::string& text, const std::string& what);
/// Parses an int strictly; throws UsageError naming `what` otherwise.
long long parse_integer(const std::string& text, const std::string& what);
/// Parses an unsigned 64-bit integer (a random seed: 0 .. 2^64 - 1, digits only); throws UsageError
/// naming `what` otherwise.
std::uint64_t parse_unsigned(const std::string& text, const std::string& what);

/// Declared options of one subcommand and, after parse(), their values.
class Arguments {
 public:
  Arguments(std::string command, std::string usage, std::string description)
      : command_(std::move(command)), usage_(std::move(usage)), description_(std::move(description)) {}

  /// Declares --name VALUE.
  void option(const std::string& name, const std::string& metavar, const std::string& help);
  /// Declares --name (no value).
  void flag(const std::string& name, const std::string& help);
  /// Adds a free paragraph at the end of --help (examples, notes).
  void epilog(const std::string& text) { epilog_ = text; }

  /// Parses the arguments after the subcommand name. Returns false when --help was given (the caller
  /// prints help() and exits 0). Throws UsageError for unknown options and missing values.
  bool parse(const std::vector<std::string>& args);

  bool has(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  double get_double(const std::string& name, double fallback) const;
  long long get_integer(const std::string& name, long long fallback) const;
  std::uint64_t get_unsigned(const std::string& name, std::uint64_t fallback) const;

  /// The --help text.
  std::string help() const;
  const std::string& command() const { return command_; }

 private:
  struct Spec {
    std::string name, metavar, help;
    bool takes_value = false;
    bool given = false;
    std::string value;
  };
  Spec* find(const std::string& name);
  const Spec* find(const std::string& name) const;

  std::string command_, usage_, description_, epilog_;
  std::vector<Spec> specs_;
};

}  // namespace kfmm_cli
