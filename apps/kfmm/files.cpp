#include "kfmm/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kfmm/arguments.hpp"

namespace kfmm_cli {

namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string system_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    const auto comma = line.find(',', start);
    fields.push_back(
        trim(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return fields;
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? "," : "") + names[i];
  return s;
}

}  // namespace

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string join_path(const std::string& folder, const std::string& name) {
  if (folder.empty() || folder == ".") return name;
  return folder.back() == '/' ? folder + name : folder + "/" + name;
}

void make_directories(const std::string& path) {
  if (path.empty() || is_directory(path)) return;
  const std::string parent = folder_of(path);
  if (parent != path && parent != "." && parent != "/") make_directories(parent);
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST) {
    throw InputError(system_error("cannot create folder", path));
  }
  if (!is_directory(path)) throw InputError("'" + path + "' exists and is not a folder");
}

std::vector<std::string> list_directory(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) throw InputError(system_error("cannot list folder", path));
  while (dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

void check_writable(const std::string& path) {
  if (path.empty()) throw InputError("empty output path");
  if (is_directory(path)) throw InputError("output '" + path + "' is a folder");
  const std::string folder = folder_of(path);
  if (!is_directory(folder)) throw InputError("output folder '" + folder + "' does not exist");
  if (::access(folder.c_str(), W_OK) != 0) throw InputError(system_error("cannot write into folder", folder));
}

void write_atomically(const std::string& path, const std::function<void(std::FILE*)>& writer) {
  check_writable(path);
  std::string temp = join_path(folder_of(path), "." + name_of(path) + ".tmp-XXXXXX");
  std::vector<char> buffer(temp.begin(), temp.end());
  buffer.push_back('\0');
  const int fd = ::mkstemp(buffer.data());
  if (fd < 0) throw InputError(system_error("cannot create a temporary file next to", path));
  temp = buffer.data();
  std::FILE* f = ::fdopen(fd, "w");
  if (!f) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw InputError(system_error("cannot open temporary file", temp));
  }
  bool ok = false;
  try {
    writer(f);
    ok = std::fflush(f) == 0 && !std::ferror(f) && ::fsync(fd) == 0;
  } catch (...) {
    std::fclose(f);
    ::unlink(temp.c_str());
    throw;
  }
  const int saved_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    ::unlink(temp.c_str());
    errno = saved_errno;
    throw InputError(system_error("cannot write", path));
  }
  // Files made by mkstemp are private (0600); give the result the usual permissions.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(temp.c_str(), 0666 & ~mask);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(temp.c_str());
    errno = e;
    throw InputError(system_error("cannot replace", path));
  }
  // Make the rename itself durable.
  const int dfd = ::open(folder_of(path).c_str(), O_RDONLY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  if (is_directory(path)) throw InputError("'" + path + "' is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(system_error("cannot open", path));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw InputError(system_error("cannot read", path));
  return s.str();
}

int CsvTable::column(const std::string& name) const {
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

CsvTable read_csv(const std::string& path, const std::vector<std::string>& required,
                  const std::vector<std::string>& optional) {
  const std::string text = read_file(path);
  CsvTable table;
  std::size_t pos = 0;
  int line_number = 0;
  bool have_header = false;
  std::string expected = join(required);
  if (!optional.empty()) expected += " (optionally " + join(optional) + ")";
  auto where = [&](int line) { return path + ":" + std::to_string(line) + ": "; };
  while (pos < text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    const std::string stripped = trim(line);
    if (stripped.empty()) continue;
    if (stripped[0] == '#') {
      if (!have_header) table.comments.push_back(stripped.substr(1));
      continue;
    }
    if (line.find('\0') != std::string::npos)
      throw InputError(where(line_number) + "binary data in a CSV file");
    std::vector<std::string> fields = split(line);
    if (!have_header) {
      for (const auto& name : fields) {
        if (name.empty()) throw InputError(where(line_number) + "empty column name in the header");
        bool known = false;
        for (const auto& r : required) known = known || r == name;
        for (const auto& o : optional) known = known || o == name;
        if (!known) {
          // A header of numbers means the header is missing.
          char* e = nullptr;
          std::strtod(name.c_str(), &e);
          if (e != name.c_str() && *e == '\0') {
            throw InputError(where(line_number) + "the header line is missing (expected " + expected + ")");
          }
          throw InputError(where(line_number) + "unknown column '" + name + "' (expected " + expected + ")");
        }
        for (const auto& c : table.columns) {
          if (c == name) throw InputError(where(line_number) + "column '" + name + "' appears twice");
        }
        table.columns.push_back(name);
      }
      for (const auto& r : required) {
        if (table.column(r) < 0) {
          throw InputError(where(line_number) + "missing column '" + r + "' (expected " + expected + ")");
        }
      }
      have_header = true;
      continue;
    }
    if (fields.size() != table.columns.size()) {
      throw InputError(where(line_number) + "expected " + std::to_string(table.columns.size()) + " fields (" +
                       join(table.columns) + "), found " + std::to_string(fields.size()));
    }
    for (std::size_t c = 0; c < fields.size(); ++c) {
      const std::string& field = fields[c];
      const std::string col = "column '" + table.columns[c] + "'";
      if (field.empty()) throw InputError(where(line_number) + col + " is empty");
      char* e = nullptr;
      errno = 0;
      const double v = std::strtod(field.c_str(), &e);
      if (e == field.c_str() || *e != '\0') {
        throw InputError(where(line_number) + col + ": '" + field + "' is not a number");
      }
      if (std::isnan(v)) throw InputError(where(line_number) + col + " is NaN");
      if (std::isinf(v) || (errno == ERANGE && std::fabs(v) > 1)) {
        throw InputError(where(line_number) + col + ": '" + field + "' is infinite or out of range");
      }
      table.values.push_back(v);
    }
    table.lines.push_back(line_number);
  }
  if (!have_header) throw InputError(path + ": no header line (expected " + expected + ")");
  return table;
}

bool fits_fp32(double value) {
  return !(std::fabs(value) > 3.0e38);  // (as the checks always compared)
}

void check_fits_fp32(const CsvTable& t, const std::string& path, const std::vector<std::string>& columns) {
  std::vector<int> index;  // (looked up once, not per row)
  for (const auto& name : columns) index.push_back(t.column(name));
  for (std::size_t r = 0; r < t.rows(); ++r) {
    for (std::size_t k = 0; k < columns.size(); ++k) {
      if (index[k] >= 0 && !fits_fp32(t.at(r, index[k]))) {
        throw InputError(path + ":" + std::to_string(t.lines[r]) + ": column '" + columns[k] +
                         "' does not fit in fp32");
      }
    }
  }
}

void write_number(std::FILE* f, double value, bool single_precision) {
  std::fprintf(f, single_precision ? "%.9g" : "%.17g", value);
}

}  // namespace kfmm_cli
