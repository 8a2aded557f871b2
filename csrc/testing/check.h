// A minimal test harness for the C++ unit tests: no dependency beyond the standard library.
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace torchtpu::testing {

struct TestCase {
  const char* name;
  std::function<void()> body;
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> cases;
  return cases;
}

struct Register {
  Register(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

struct Failure : std::exception {
  explicit Failure(std::string m) : message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string message;
};

// Runs every registered case and prints one line per case plus a summary; returns the exit status.
inline int run_all() {
  int failed = 0;
  for (const TestCase& test : registry()) {
    try {
      test.body();
      std::printf("PASS %s\n", test.name);
    } catch (const std::exception& e) {
      ++failed;
      std::printf("FAIL %s: %s\n", test.name, e.what());
    }
  }
  std::printf("%zu passed, %d failed\n", registry().size() - failed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace torchtpu::testing

#define TT_CONCAT_INNER(a, b) a##b
#define TT_CONCAT(a, b) TT_CONCAT_INNER(a, b)
#define TEST_CASE(name)                                                                     \
  static void TT_CONCAT(test_body_, __LINE__)();                                           \
  static ::torchtpu::testing::Register TT_CONCAT(test_reg_, __LINE__)(name, &TT_CONCAT(test_body_, __LINE__)); \
  static void TT_CONCAT(test_body_, __LINE__)()
#define EXPECT(cond)                                                                                  \
  do {                                                                                              \
    if (!(cond)) throw ::torchtpu::testing::Failure(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #cond); \
  } while (0)
