#include "sim/scenario/line_reader.h"

#include <filesystem>

#include "sim/engine/check.h"

namespace moesim {

LineReader::LineReader(const std::string& file) : file_(file) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw InputError(file, "is a folder, not a trace file");
  in_.open(file, std::ios::binary);
  if (!in_) throw InputError(file, "cannot open the trace file");
}

bool LineReader::next(std::string& line) {
  line.clear();
  std::streambuf* buf = in_.rdbuf();
  bool any = false;
  for (;;) {
    const int c = buf->sbumpc();
    if (c == std::char_traits<char>::eof()) break;
    any = true;
    if (c == '\n') break;
    if (line.size() == kMaxLineBytes) {
      throw InputError(file_ + ":" + std::to_string(line_number_ + 1),
                       "the line is longer than " + std::to_string(kMaxLineBytes >> 20) +
                           " MiB (no trace row is); is it a trace file?");
    }
    line.push_back(static_cast<char>(c));
  }
  if (!any) return false;
  if (++line_number_ > kMaxLines) {
    throw InputError(where(), "more than " + std::to_string(kMaxLines) +
                                  " lines; split the trace (or is it a trace file?)");
  }
  return true;
}

}  // namespace moesim
