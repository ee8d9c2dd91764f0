#include "sim/app/grid.h"

#include "sim/engine/check.h"

namespace moesim {

std::vector<std::string> split_values(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  bool quoted = false;
  for (const char c : s) {
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == '[' || c == '{')) ++depth;
    if (!quoted && (c == ']' || c == '}')) --depth;
    if (c == ',' && depth == 0 && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<Axis> parse_axes(const std::vector<std::string>& sets) {
  std::vector<Axis> axes;
  for (const auto& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InputError("--set " + s, "expected path.to.key=value or key=v1,v2,...");
    }
    Axis a{s.substr(0, eq), split_values(s.substr(eq + 1))};
    for (const auto& v : a.values) {
      if (v.empty()) throw InputError("--set " + s, "empty value in the list");
    }
    axes.push_back(std::move(a));
  }
  return axes;
}

}  // namespace moesim
