// Keys of compiled programs: the op plus everything that shapes its program (non-tensor arguments,
// input shapes, dtypes and view geometry), as a flat list of 64-bit words.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace torchtpu::cache {

// Every field that reaches the program must be appended; a field left out is a visible choice at the
// call site, never an accident of this type.
class ProgramKey {
 public:
  ProgramKey() { words_.reserve(64); }  // a typical op's key fits; no regrowth on the hot path
  void add(int64_t word) {
    words_.push_back(word);
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
  bool operator==(const ProgramKey& other) const { return words_ == other.words_; }

 private:
  std::vector<int64_t> words_;
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

struct ProgramKeyHash {
  size_t operator()(const ProgramKey& key) const { return key.hash(); }
};

}  // namespace torchtpu::cache
