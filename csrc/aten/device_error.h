// Runtime errors as the exceptions PyTorch users catch. Header-only: every aten entry point that calls the
// runtime shares it.
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "runtime/error.h"

namespace torchtpu::aten {

// Raises `error` as PyTorch would on CUDA: an allocation failure becomes torch.OutOfMemoryError (a
// RuntimeError) whose message names the request and the device's live and peak bytes; everything else is a
// RuntimeError. Both say what failed (`what`, e.g. the op) and keep the PJRT status name in the message.
[[noreturn]] inline void throw_device_error(const std::string& what, const runtime::PjrtError& error) {
  if (dynamic_cast<const runtime::OutOfMemory*>(&error) != nullptr) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, error.what(), " (in ", what, ")");
  }
  TORCH_CHECK(false, what, " on tpu failed: ", error.what());
}

}  // namespace torchtpu::aten
