// The one exception type for everything the PJRT plugin, or the runtime around it, reports.
#pragma once

#include <stdexcept>
#include <string>

namespace torchtpu::runtime {

class PjrtError : public std::runtime_error {
 public:
  // `code` follows absl status codes (PJRT_Error_Code); 2 = UNKNOWN when the runtime itself fails.
  PjrtError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace torchtpu::runtime
