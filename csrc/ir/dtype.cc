#include "ir/dtype.h"

#include <limits>

namespace torchtpu {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kI8:
    case DType::kU8:
    case DType::kF8E4M3FN:
    case DType::kF8E5M2:
    case DType::kF8E4M3FNUZ:
    case DType::kF8E5M2FNUZ:
      return 1;
    case DType::kI16:
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32:
      return 4;
    case DType::kI64:
    case DType::kU64:
    case DType::kF64:
    case DType::kC64:
      return 8;
    case DType::kC128:
      return 16;
  }
  return 0;
}

bool is_floating(DType dtype) {
  return dtype == DType::kF16 || dtype == DType::kBF16 || dtype == DType::kF32 || dtype == DType::kF64 ||
         is_float8(dtype);
}

bool is_float8(DType dtype) {
  return dtype == DType::kF8E4M3FN || dtype == DType::kF8E5M2 || dtype == DType::kF8E4M3FNUZ ||
         dtype == DType::kF8E5M2FNUZ;
}

double largest_finite(DType dtype) {
  switch (dtype) {
    case DType::kF64: return std::numeric_limits<double>::max();
    case DType::kF16: return 65504.0;
    case DType::kBF16: return 3.3895313892515355e38;
    case DType::kF8E4M3FN: return 448.0;
    case DType::kF8E4M3FNUZ: return 240.0;
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ: return 57344.0;
    default: return std::numeric_limits<float>::max();
  }
}

bool is_integral(DType dtype) { return dtype != DType::kBool && !is_floating(dtype) && !is_complex(dtype); }

bool is_complex(DType dtype) { return dtype == DType::kC64 || dtype == DType::kC128; }

DType complex_part(DType dtype) { return dtype == DType::kC128 ? DType::kF64 : DType::kF32; }

DType complex_of(DType part) { return part == DType::kF64 ? DType::kC128 : DType::kC64; }

bool is_unsigned(DType dtype) {
  return dtype == DType::kU8 || dtype == DType::kU16 || dtype == DType::kU32 || dtype == DType::kU64;
}

const char* mlir_name(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "i1";
    case DType::kI8: return "i8";
    case DType::kI16: return "i16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "ui8";
    case DType::kU16: return "ui16";
    case DType::kU32: return "ui32";
    case DType::kU64: return "ui64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kC64: return "complex<f32>";
    case DType::kC128: return "complex<f64>";
    case DType::kF8E4M3FN: return "f8E4M3FN";
    case DType::kF8E5M2: return "f8E5M2";
    case DType::kF8E4M3FNUZ: return "f8E4M3FNUZ";
    case DType::kF8E5M2FNUZ: return "f8E5M2FNUZ";
  }
  return "?";
}

const char* torch_name(DType dtype) {
  switch (dtype) {
    case DType::kBool: return "Bool";
    case DType::kI8: return "Char";
    case DType::kI16: return "Short";
    case DType::kI32: return "Int";
    case DType::kI64: return "Long";
    case DType::kU8: return "Byte";
    case DType::kU16: return "UInt16";
    case DType::kU32: return "UInt32";
    case DType::kU64: return "UInt64";
    case DType::kF16: return "Half";
    case DType::kBF16: return "BFloat16";
    case DType::kF32: return "Float";
    case DType::kF64: return "Double";
    case DType::kC64: return "ComplexFloat";
    case DType::kC128: return "ComplexDouble";
    case DType::kF8E4M3FN: return "Float8_e4m3fn";
    case DType::kF8E5M2: return "Float8_e5m2";
    case DType::kF8E4M3FNUZ: return "Float8_e4m3fnuz";
    case DType::kF8E5M2FNUZ: return "Float8_e5m2fnuz";
  }
  return "?";
}

}  // namespace torchtpu
