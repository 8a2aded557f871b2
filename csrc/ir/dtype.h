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
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,   // complex<f32>
  kC128,  // complex<f64>
  // The float8 formats torch names float8_e4m3fn, float8_e5m2, float8_e4m3fnuz and float8_e5m2fnuz.
  kF8E4M3FN,
  kF8E5M2,
  kF8E4M3FNUZ,
  kF8E5M2FNUZ,
};

size_t element_size(DType dtype);
bool is_floating(DType dtype);  // float8 formats included
bool is_float8(DType dtype);
// The largest finite value of a floating type.
double largest_finite(DType dtype);
bool is_integral(DType dtype);  // bool excluded
bool is_complex(DType dtype);
// The element type of a complex type's real and imaginary parts (f32 for c64), and the complex type whose
// parts are `part` (c64 for f32 and narrower floats).
DType complex_part(DType dtype);
DType complex_of(DType part);
bool is_unsigned(DType dtype);
// MLIR spelling of the element type, e.g. "f32", "i64", "ui8", "i1".
const char* mlir_name(DType dtype);
// PyTorch's name of the scalar type, as its "not implemented for 'Float'" errors spell it.
const char* torch_name(DType dtype);

}  // namespace torchtpu
