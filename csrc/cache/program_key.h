// Keys of compiled programs: the op plus everything that shapes its program (non-tensor arguments that are
// compile-time constants, input shapes, dtypes and view geometry), as a flat list of 64-bit words.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace torchtpu::cache {

// Every field that reaches the program must be appended; a field left out is a visible choice at the
// call site, never an accident of this type. A typical op's key fits inline, so building one on the hot
// path allocates nothing.
class ProgramKey {
 public:
  void add(int64_t word) {
    if (size_ < inline_.size()) {
      inline_[size_] = word;
    } else {
      spill_.push_back(word);
    }
    ++size_;
    hash_ = (hash_ ^ static_cast<uint64_t>(word)) * 0x100000001b3ULL;  // FNV-1a over words
  }
  void add_double(double value) {
    int64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    add(bits);
  }
  void add_list(const int64_t* data, size_t n) {
    add(static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) add(data[i]);
  }
  void add_string(const std::string& text) {
    add(static_cast<int64_t>(text.size()));
    for (char c : text) add(c);
  }
  size_t hash() const { return static_cast<size_t>(hash_); }
  bool operator==(const ProgramKey& other) const {
    if (size_ != other.size_ || hash_ != other.hash_) return false;
    const size_t n = std::min(size_, inline_.size());
    return std::memcmp(inline_.data(), other.inline_.data(), n * sizeof(int64_t)) == 0 && spill_ == other.spill_;
  }

 private:
  std::array<int64_t, 48> inline_;
  std::vector<int64_t> spill_;  // words past the inline ones
  size_t size_ = 0;
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

struct ProgramKeyHash {
  size_t operator()(const ProgramKey& key) const { return key.hash(); }
};

}  // namespace torchtpu::cache
