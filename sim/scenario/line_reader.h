// Line-by-line reading of input files (traces) in one pass, with limits: a FIFO or process substitution
// reads like a file, and a file with no newlines (/dev/zero) or endless blank lines is refused with its
// file:line instead of being read until memory or patience runs out.
#pragma once

#include <cstddef>
#include <fstream>
#include <string>
#include <string_view>

namespace moesim {

// The longest line: a Mooncake row of the largest prompt (1e8 tokens = 195,313 hash ids of up to 20
// digits) takes about 4 MiB.
inline constexpr std::size_t kMaxLineBytes = std::size_t{16} << 20;
// Lines per file: 100 million (a 1 GB Azure trace has about 20 million).
inline constexpr std::size_t kMaxLines = 100000000;
// Rows a trace may hold (32 bytes each: 3.2 GB at most).
inline constexpr std::size_t kMaxTraceRows = 100000000;

class LineReader {
 public:
  // Opens `file`; InputError naming it when it cannot be opened or is a folder.
  explicit LineReader(const std::string& file);

  // The next line (without its '\n'), false at the end of the file. InputError at file:line for a line
  // longer than kMaxLineBytes, beyond kMaxLines lines, or on a read error.
  bool next(std::string& line);
  // "file:line" of the line last returned.
  [[nodiscard]] std::string where() const { return file_ + ":" + std::to_string(line_number_); }
  [[nodiscard]] std::size_t line_number() const { return line_number_; }

 private:
  std::string file_;
  std::ifstream in_;
  std::size_t line_number_ = 0;
};

}  // namespace moesim
