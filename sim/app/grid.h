// Grids of scenario overrides for sweep and compare: each --set key=v1,v2,... is one axis.
#pragma once

#include <string>
#include <vector>

namespace moesim {

struct Axis {
  std::string key;
  std::vector<std::string> values;
};

// Splits "1,2,{"x":1,"y":2}" at top-level commas (not inside brackets, braces or quotes).
std::vector<std::string> split_values(const std::string& s);

// One axis per "key=v1,v2,..."; throws InputError naming the --set that is malformed.
std::vector<Axis> parse_axes(const std::vector<std::string>& sets);

}  // namespace moesim
