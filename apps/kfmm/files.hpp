// Files of the kfmm command: atomic writes (a temporary file in the same folder, flushed, synced and
// renamed over the target, so a reader never sees half a file and a crash or Ctrl-C never leaves a
// partial output), and particle CSV files with line-numbered errors.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kfmm_cli {

/// Writes `path` atomically: `writer` fills a temporary file next to it, which then replaces `path`
/// by rename(2). On any failure the temporary is removed, `path` is left as it was, and InputError
/// is thrown.
void write_atomically(const std::string& path, const std::function<void(std::FILE*)>& writer);

/// Throws InputError unless a file can be created at `path` (its folder exists and is writable, and
/// `path` is not a folder). Called before long computations so they do not end in an unwritable path.
void check_writable(const std::string& path);

/// Whole contents of a file; throws InputError naming the file when it cannot be read.
std::string read_file(const std::string& path);

bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
/// Creates a folder and its parents (like mkdir -p); throws InputError on failure.
void make_directories(const std::string& path);
/// Names of the entries of a folder (no "." or "..").
std::vector<std::string> list_directory(const std::string& path);
/// Joins a folder and a name with '/'.
std::string join_path(const std::string& folder, const std::string& name);

/// A table of numbers read from a CSV file: named columns, rows of doubles.
struct CsvTable {
  std::vector<std::string> columns;
  std::vector<double> values;         ///< row-major, rows() * columns.size()
  std::vector<int> lines;             ///< source line of each row (1-based)
  std::vector<std::string> comments;  ///< '#' lines before the header, without the '#'
  std::size_t rows() const { return columns.empty() ? 0 : values.size() / columns.size(); }
  /// Index of a column or -1.
  int column(const std::string& name) const;
  double at(std::size_t row, int col) const { return values[row * columns.size() + col]; }
};

/// Reads a CSV file with a header line of column names. `required` columns must all be present;
/// `optional` ones may be; any other column is an error. Blank lines and lines starting with '#'
/// are skipped. Every field must be a finite number. Errors are InputError with "FILE:LINE: ...".
CsvTable read_csv(const std::string& path, const std::vector<std::string>& required,
                  const std::vector<std::string>& optional = {});

/// Whether |value| is not beyond float's range (a run in fp32 would turn a larger one into inf).
bool fits_fp32(double value);

/// Throws InputError "FILE:LINE: column 'c' does not fit in fp32" for the first value of a column of `t`
/// beyond float's range (a run in fp32 would turn it into inf); absent columns are skipped.
void check_fits_fp32(const CsvTable& t, const std::string& path, const std::vector<std::string>& columns);

/// Formats a number so that it reads back to the same value (%.17g for double, %.9g for float).
void write_number(std::FILE* f, double value, bool single_precision);

}  // namespace kfmm_cli
