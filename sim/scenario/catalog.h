// Catalogs shipped in the repo (scenarios/catalog/*.json, compiled in): models and GPUs by name, and
// the default scenario. An entry can be referenced by name or as {"base": name, ...overrides}.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/scenario/json_reader.h"

namespace moesim {

const std::vector<std::pair<std::string_view, std::string_view>>& embedded_files();

// The text of an embedded file by repo-relative path; throws InternalError when absent.
std::string_view embedded_file(std::string_view path);

// The catalog file (e.g. "scenarios/catalog/models.json") as JSON.
const Json& catalog(std::string_view path);

// Resolves a catalog reference at `path`: a name (string), an object with "base" plus overrides, or a
// full object. Unknown names list the known ones.
Json resolve_entry(const Json& value, std::string_view catalog_path, const std::string& path);

std::vector<std::string> catalog_names(std::string_view catalog_path);

}  // namespace moesim
