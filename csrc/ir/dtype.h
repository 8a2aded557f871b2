// Element types shared by the IR, the lowering rules and the runtime.
// Kept free of ATen and PJRT so every layer can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace torchtpu {

enum class DType : uint8_t {
  kBool,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,   // complex<f32>
  kC128,  // complex<f64>
};

size_t element_size(DType dtype);
bool is_floating(DType dtype);
bool is_integral(DType dtype);  // bool excluded
bool is_complex(DType dtype);
// The element type of a complex type's real and imaginary parts (f32 for c64), and the complex type whose
// parts are `part` (c64 for f32 and narrower floats).
DType complex_part(DType dtype);
DType complex_of(DType part);
bool is_unsigned(DType dtype);
// MLIR spelling of the element type, e.g. "f32", "i64", "ui8", "i1".
const char* mlir_name(DType dtype);

}  // namespace torchtpu
