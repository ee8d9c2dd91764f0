#include "sim/scenario/catalog.h"

#include <map>
#include <mutex>

namespace moesim {

std::string_view embedded_file(std::string_view path) {
  for (const auto& [name, text] : embedded_files()) {
    if (name == path) return text;
  }
  throw InternalError("embedded file missing: " + std::string(path));
}

const Json& catalog(std::string_view path) {
  static std::mutex mu;
  static std::map<std::string, Json, std::less<>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it == cache.end()) {
    it = cache.emplace(std::string(path), parse_json_text(embedded_file(path), std::string(path))).first;
  }
  return it->second;
}

std::vector<std::string> catalog_names(std::string_view catalog_path) {
  std::vector<std::string> names;
  for (auto it = catalog(catalog_path).begin(); it != catalog(catalog_path).end(); ++it)
    names.push_back(it.key());
  return names;
}

Json resolve_entry(const Json& value, std::string_view catalog_path, const std::string& path) {
  const Json& cat = catalog(catalog_path);
  auto lookup = [&](const std::string& name, const std::string& where) -> Json {
    const auto it = cat.find(name);
    if (it == cat.end()) {
      std::string known;
      for (const auto& n : catalog_names(catalog_path)) known += (known.empty() ? "" : ", ") + n;
      throw InputError(where, "unknown name \"" + printable(name) + "\" (known: " + known + ")");
    }
    return *it;
  };
  if (value.is_string()) return lookup(value.get<std::string>(), path);
  if (!value.is_object()) {
    throw InputError(path, "expected a catalog name or an object, got " + json_type_name(value));
  }
  const auto base = value.find("base");
  if (base == value.end()) return value;
  if (!base->is_string()) throw InputError(path + ".base", "expected a catalog name (string)");
  Json merged = lookup(base->get<std::string>(), path + ".base");
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it.key() != "base") merged[it.key()] = it.value();
  }
  return merged;
}

}  // namespace moesim
