#include "lowering/helpers.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace torchtpu::lowering {

Value constant_vector(Graph& g, const std::vector<double>& values, DType dtype) {
  // Other float types are rounded once from float32.
  if (is_floating(dtype) && dtype != DType::kF32 && dtype != DType::kF64) {
    return g.convert(constant_vector(g, values, DType::kF32), dtype);
  }
  std::string literal;
  char buf[40];
  for (size_t i = 0; i < values.size(); ++i) {
    // Floats are spelled as their bit patterns, which MLIR reads back exactly.
    if (dtype == DType::kF64) {
      uint64_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(bits));
    } else if (dtype == DType::kF32) {
      const float f = static_cast<float>(values[i]);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      std::snprintf(buf, sizeof buf, "0x%08X", bits);
    } else {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(values[i]));
    }
    literal += (i ? ", " : "") + std::string(buf);
  }
  const Type type{dtype, {static_cast<int64_t>(values.size())}};
  return g.op("constant", {}, type, "value = dense<[" + literal + "]> : " + ir::to_mlir(type));
}


Value broadcast_to(Graph& g, Value x, const std::vector<int64_t>& dims) {
  const Type& t = g.type(x);
  if (t.dims == dims) return x;
  const int64_t lead = static_cast<int64_t>(dims.size()) - t.rank();
  if (lead < 0) throw std::invalid_argument("cannot broadcast " + ir::to_mlir(t) + " to a lower rank");
  // Dims of size 1 that must grow are dropped first, so broadcast_in_dim sees only matching dims.
  std::vector<int64_t> kept_dims, kept_positions;
  for (int64_t i = 0; i < t.rank(); ++i) {
    const int64_t target = dims[static_cast<size_t>(lead + i)];
    if (t.dims[static_cast<size_t>(i)] == target) {
      kept_dims.push_back(target);
      kept_positions.push_back(lead + i);
    } else if (t.dims[static_cast<size_t>(i)] != 1) {
      throw std::invalid_argument("cannot broadcast " + ir::to_mlir(t));
    }
  }
  return g.broadcast_in_dim(g.reshape(x, kept_dims), dims, kept_positions);
}

Value cast_to(Graph& g, Value x, const Type& target) {
  // Bool to float goes through int32: XLA rewrites a product with a converted bool as a select, so
  // False * inf gave 0 instead of NaN (and False / 0 likewise).
  if (g.type(x).dtype == DType::kBool && is_floating(target.dtype)) x = g.convert(x, DType::kI32);
  return broadcast_to(g, g.convert(x, target.dtype), target.dims);
}

Value magnitude(Graph& g, Value x) {
  const Type& t = g.type(x);
  if (!is_complex(t.dtype)) return g.unary("abs", x);
  const Type part{complex_part(t.dtype), t.dims};
  Value r = g.op("abs", {x}, part);  // stablehlo.abs changes the element type
  // XLA's complex abs drops a NaN imaginary part (|1+NaN·i| came out as sqrt(2)). As C's hypot: a NaN part
  // makes the magnitude NaN, unless the other part is infinite, which makes it inf.
  const double inf = std::numeric_limits<double>::infinity();
  Value re = g.real(x), im = g.imag(x);
  Value has_nan = g.binary("or", g.compare(re, re, ir::Comparison::kNE), g.compare(im, im, ir::Comparison::kNE));
  Value infinite = g.constant(inf, part.dtype, t.dims);
  Value has_inf = g.binary("or", g.compare(g.unary("abs", re), infinite, ir::Comparison::kEQ),
                           g.compare(g.unary("abs", im), infinite, ir::Comparison::kEQ));
  Value nan = g.constant(std::numeric_limits<double>::quiet_NaN(), part.dtype, t.dims);
  return g.select(has_inf, infinite, g.select(has_nan, nan, r));
}

Value sign_bit_set(Graph& g, Value x) {
  // Widening keeps the sign bit, of zeros and NaN too; float64 stays (TPUs have no float64 to widen to).
  const bool is_f64 = g.type(x).dtype == DType::kF64;
  Value wide = g.convert(x, is_f64 ? DType::kF64 : DType::kF32);
  const DType bits_dtype = is_f64 ? DType::kI64 : DType::kI32;
  Value bits = g.bitcast_convert(wide, Type{bits_dtype, g.type(wide).dims});
  return g.compare(bits, g.constant_int(0, bits_dtype, g.type(wide).dims), ir::Comparison::kLT);
}

Value conjugate(Graph& g, Value x) {
  if (!is_complex(g.type(x).dtype)) return x;
  return g.complex(g.real(x), g.unary("negate", g.imag(x)));
}

std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) out.push_back(rank == 0 ? 0 : (d < 0 ? d + rank : d));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (rank == 0) out.clear();
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t rank) {
  if (rank == 0) return 0;
  return dim < 0 ? dim + rank : dim;
}

std::vector<int64_t> dim_range(int64_t begin, int64_t end) {
  std::vector<int64_t> values;
  for (int64_t i = begin; i < end; ++i) values.push_back(i);
  return values;
}


Value symmetric_ramp(Graph& g, const std::vector<int64_t>& dims, Value start, Value end, int64_t steps) {
  Value index = g.iota(Type{DType::kF64, dims}, 0);
  auto constant = [&](double v) { return g.constant(v, DType::kF64, dims); };
  start = broadcast_to(g, start, dims);
  end = broadcast_to(g, end, dims);
  Value step = steps > 1 ? g.binary("divide", g.binary("subtract", end, start), constant(static_cast<double>(steps - 1)))
                         : constant(0.0);
  Value up = g.binary("add", start, g.binary("multiply", index, step));
  Value down = g.binary("subtract", end,
                        g.binary("multiply", g.binary("subtract", constant(static_cast<double>(steps - 1)), index), step));
  const int64_t halfway = std::max<int64_t>(steps / 2, 1);
  Value first_half = g.compare(index, constant(static_cast<double>(halfway)), ir::Comparison::kLT);
  return g.select(first_half, up, down);
}

Value scatter_add_rows(Graph& g, Value base, Value indices, Value updates) {
  const Type t = g.type(base);
  return g.op_multi("stablehlo.scatter", {base, indices, updates}, {t},
                    "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " +
                        ir::bracket_list(dim_range(1, t.rank())) +
                        ", inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, "
                        "indices_are_sorted = false, unique_indices = false",
                    ir::scalar_region("stablehlo.add", t.dtype))[0];
}

Value stable_argsort(Graph& g, Value keys, int64_t dim, bool descending) {
  const Type& t = g.type(keys);
  const Type positions_type{DType::kI64, t.dims};
  const Type key_scalar{t.dtype, {}}, position_scalar{DType::kI64, {}};
  const std::string comparator =
      g.region({key_scalar, key_scalar, position_scalar, position_scalar}, [&](const std::vector<Value>& a) {
        return std::vector<Value>{g.compare(a[0], a[1], descending ? ir::Comparison::kGT : ir::Comparison::kLT)};
      });
  return g.op_multi("stablehlo.sort", {keys, g.iota(positions_type, dim)}, {t, positions_type},
                    "dimension = " + std::to_string(dim) + " : i64, is_stable = true", comparator)[1];
}

std::vector<Value> inclusive_scan(Graph& g, const std::vector<Value>& operands, const std::vector<Value>& identities,
                                  int64_t dim, const std::string& combiner) {
  const Type& t = g.type(operands.at(0));
  std::vector<int64_t> window(t.dims.size(), 1), strides(t.dims.size(), 1);
  window[static_cast<size_t>(dim)] = t.dims[static_cast<size_t>(dim)];
  std::string padding = "dense<[";
  for (int64_t i = 0; i < t.rank(); ++i) {
    padding += std::string(i ? ", " : "") + "[" + std::to_string(i == dim ? window[static_cast<size_t>(i)] - 1 : 0) + ", 0]";
  }
  padding += "]> : tensor<" + std::to_string(t.rank()) + "x2xi64>";
  const std::string attributes = "window_dimensions = " + ir::dense_i64_array(window) +
                                 ", window_strides = " + ir::dense_i64_array(strides) + ", padding = " + padding;
  std::vector<Value> inputs = operands;
  inputs.insert(inputs.end(), identities.begin(), identities.end());
  std::vector<Type> types;
  for (Value v : operands) types.push_back(g.type(v));
  return g.op_multi("stablehlo.reduce_window", inputs, types, attributes, combiner);
}

Value contract_dim(Graph& g, Value x, int64_t dim, Value matrix, int64_t matrix_dim, DType dtype) {
  // Not a dot product: a zero weight times an infinite or NaN element would be NaN and spread it to every
  // output of the row (a reflect-padded inf made its whole row NaN). Zero weights are skipped instead: the
  // products are summed only where the weight is nonzero, which XLA fuses into one reduction.
  const Type& xt = g.type(x);
  Value w = matrix_dim == 1 ? matrix : g.transpose(matrix, {1, 0});  // [new, contracted]
  const int64_t size = g.type(w).dims[0];
  std::vector<int64_t> dims = xt.dims;
  dims.insert(dims.begin() + dim, size);  // [..., new, contracted, ...]
  std::vector<int64_t> x_dims;
  for (int64_t d = 0; d < xt.rank(); ++d) x_dims.push_back(d < dim ? d : d + 1);
  Value spread = g.broadcast_in_dim(g.convert(x, dtype), dims, x_dims);
  Value weights = g.broadcast_in_dim(w, dims, {dim, dim + 1});
  Value zero = g.constant(0.0, dtype, dims);
  Value terms = g.select(g.compare(weights, zero, ir::Comparison::kNE), g.binary("multiply", spread, weights), zero);
  return g.reduce(terms, g.constant(0.0, dtype), {dim + 1}, ir::Reducer::kAdd);
}

Value extreme(Graph& g, DType dtype, bool lowest, const std::vector<int64_t>& dims) {
  if (is_floating(dtype)) {
    const double inf = std::numeric_limits<double>::infinity();
    return g.constant(lowest ? -inf : inf, dtype, dims);
  }
  if (dtype == DType::kBool) return g.constant_int(lowest ? 0 : 1, dtype, dims);
  int64_t value = 0;
  switch (dtype) {
    case DType::kI8: value = lowest ? -128 : 127; break;
    case DType::kI16: value = lowest ? -32768 : 32767; break;
    case DType::kI32: value = lowest ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max(); break;
    case DType::kI64: value = lowest ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(); break;
    case DType::kU8: value = lowest ? 0 : 255; break;
    case DType::kU16: value = lowest ? 0 : 65535; break;
    default: value = lowest ? 0 : -1; break;  // unsigned 32/64: all ones
  }
  return g.constant_int(value, dtype, dims);
}

Value erf(Graph& g, Value x) {
  const Type t = g.type(x);
  Value e = g.chlo("erf", {x}, t);
  if (t.dtype == DType::kF64) return e;
  // CHLO's expansion for 32 bits and narrower stops a few ulps short of +-1 (erf(4) gives 0.99999982), so
  // 1 + erf(x) in GELU stays near 1e-7 for very negative x. Past 3.9192 (erfc below half an ulp of 1) the
  // rounded value is +-1, as CPU's is.
  Value saturated = g.compare(g.unary("abs", x), g.constant(3.9192, t.dtype, t.dims), ir::Comparison::kGE);
  return g.select(saturated, g.unary("sign", x), e);
}

DType accumulation_dtype(DType dtype) {
  return (dtype == DType::kBF16 || dtype == DType::kF16 || is_float8(dtype)) ? DType::kF32 : dtype;
}

Value finite_elements(Graph& g, Value x) {
  const std::vector<int64_t> dims = g.type(x).dims;
  auto finite = [&](Value v) { return g.op("is_finite", {v}, Type{DType::kBool, dims}); };
  if (!is_complex(g.type(x).dtype)) return finite(x);
  return g.binary("and", finite(g.real(x)), finite(g.imag(x)));
}

void check_finite_data_range(LoweringContext& ctx, Value x, Value low, Value high, CheckKind kind,
                             std::vector<int64_t> facts, bool negative_nan) {
  Graph& g = ctx.graph;
  auto is_finite = [&](Value v) { return g.op("is_finite", {v}, Type{DType::kBool, {}}); };
  // XLA's min and max may skip a NaN, so it is looked for.
  Value has_nan = g.reduce(g.compare(x, x, ir::Comparison::kNE), g.constant_int(0, DType::kBool), {0}, ir::Reducer::kOr);
  const int64_t nan_bits = negative_nan ? 0xFFC00000LL : 0x7FC00000LL;
  auto bits = [&](Value v) {
    Value word = g.convert(g.bitcast_convert(g.convert(v, DType::kF32), Type{DType::kU32, {}}), DType::kI64);
    return g.select(has_nan, g.constant_int(nan_bits, DType::kI64), word);
  };
  Value packed = g.binary("or", bits(low), g.binary("shift_left", bits(high), g.constant_int(32, DType::kI64)));
  Value finite = g.binary("and", is_finite(low), is_finite(high));
  ctx.check(kind, g.binary("or", g.unary("not", finite), has_nan), packed, std::move(facts));
}

Value outside_range(Graph& g, Value x, int64_t low, int64_t high) {
  Value wide = g.convert(x, DType::kI64);
  const std::vector<int64_t> dims = g.type(wide).dims;
  return g.binary("or", g.compare(wide, g.constant_int(low, DType::kI64, dims), ir::Comparison::kLT),
                  g.compare(wide, g.constant_int(high, DType::kI64, dims), ir::Comparison::kGE));
}

void check_integer_divisor(LoweringContext& ctx, Value divisor) {
  const Type& t = ctx.graph.type(divisor);
  if (is_floating(t.dtype)) return;
  ctx.check(CheckKind::kZeroDivision,
            ctx.graph.compare(divisor, ctx.graph.constant_int(0, t.dtype, t.dims), ir::Comparison::kEQ));
}

void check_subtraction_operands(const LoweringContext& ctx) {
  auto is_bool = [&](size_t i) {
    const Arg& a = ctx.args[i];
    return a.kind == Arg::Kind::kBool || (a.kind == Arg::Kind::kTensor && ctx.type_of(i).dtype == DType::kBool);
  };
  if (is_bool(0) && is_bool(1)) {
    throw std::invalid_argument("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                                "`logical_xor()` operator instead.");
  }
  if (is_bool(0) || is_bool(1)) {
    throw std::invalid_argument("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                                "to invert a mask, use the `~` or `logical_not()` operator instead.");
  }
}

void require_floating(const LoweringContext& ctx, size_t i, const char* op) {
  if (!is_floating(ctx.type_of(i).dtype)) {
    throw std::invalid_argument(std::string(op) + " is not implemented for integer or bool inputs (as on CPU)");
  }
}

// The mantissa bits of each draw under the exponent of 1.0 give a float in [1, 2); subtracting 1 maps it to [0, 1).
Value unit_uniform(Graph& g, Value state, const std::vector<int64_t>& dims, DType dtype) {
  const bool wide = dtype == DType::kF64;
  const DType bits_type = wide ? DType::kU64 : DType::kU32;
  Value bits = g.rng_bit_generator(state, Type{bits_type, dims}).second;
  const int64_t shift = wide ? 12 : 9;
  const int64_t one_bits = wide ? 0x3FF0000000000000LL : 0x3F800000LL;
  Value mantissa = g.binary("shift_right_logical", bits, g.constant_int(shift, bits_type, dims));
  Value in_one_two = g.binary("or", mantissa, g.constant_int(one_bits, bits_type, dims));
  Value floats = g.bitcast_convert(in_one_two, Type{dtype, dims});
  return g.binary("subtract", floats, g.constant(1.0, dtype, dims));
}

Value elementwise(Graph& g, const std::string& name, const std::vector<Value>& operands, DType compute,
                  const std::vector<int64_t>& dims) {
  std::vector<Value> cast;
  for (Value v : operands) cast.push_back(cast_to(g, v, Type{compute, dims}));
  if (cast.size() == 1) return g.unary(name, cast[0]);
  return g.binary(name, cast[0], cast[1]);
}

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& permutation) {
  std::vector<int64_t> result(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i) result[static_cast<size_t>(permutation[i])] = static_cast<int64_t>(i);
  return result;
}

// Complex logaddexp, as CPU's kernel: with (min, max) ordered by real part, log1p(exp(min - max)) + max; a
// NaN part gives NaN; equal infinite real parts give min (-inf) or log(exp(min) + exp(max)) (+inf).
Value complex_logaddexp(Graph& g, Value a, Value b) {
  using ir::Comparison;
  const Type& t = g.type(a);
  const DType part = complex_part(t.dtype);
  const double inf = std::numeric_limits<double>::infinity();
  auto constant = [&](double v) { return g.constant(v, part, t.dims); };
  Value a_first = g.compare(g.real(a), g.real(b), Comparison::kLT);
  Value low = g.select(a_first, a, b), high = g.select(a_first, b, a);
  Value low_re = g.real(low), high_re = g.real(high);
  Value gap = g.binary("subtract", low, high);
  Value result = g.binary("add", g.unary("log_plus_one", g.unary("exponential", gap)), high);
  // exp(-inf + i y) is 0 for CPU's std::exp whatever y is (an infinite y included); XLA's exp gives NaN
  // there, so an infinitely smaller term adds nothing explicitly.
  result = g.select(g.compare(g.real(gap), constant(-inf), Comparison::kEQ), high, result);
  Value infinite_tie = g.binary("and", g.compare(low_re, high_re, Comparison::kEQ),
                                g.compare(g.unary("abs", low_re), constant(inf), Comparison::kEQ));
  Value positive = g.compare(low_re, constant(0), Comparison::kGT);
  // Both real parts +inf: CPU's log(exp(min) + exp(max)) with C's rules for infinities, spelled out, since
  // XLA's complex exp and log give NaN there. exp(+inf + i y) is +inf + i y for y = 0, inf (cos y + i sin y)
  // for other finite y, and +inf + i NaN for y infinite or NaN; log(z) is +inf + i atan2(im, re) when a
  // part of z is infinite, NaN + i NaN when neither is.
  Value nan = constant(std::numeric_limits<double>::quiet_NaN());
  auto exp_of_infinity = [&](Value y, Value& re, Value& im) {
    Value zero = g.compare(y, constant(0), Comparison::kEQ);
    Value finite = g.op("is_finite", {y}, Type{DType::kBool, g.type(y).dims});
    Value turning = g.binary("and", finite, g.unary("not", zero));
    re = g.select(turning, g.binary("multiply", constant(inf), g.unary("cosine", y)), constant(inf));
    im = g.select(zero, y, g.select(finite, g.binary("multiply", constant(inf), g.unary("sine", y)), nan));
  };
  Value low_exp_re, low_exp_im, high_exp_re, high_exp_im;
  exp_of_infinity(g.imag(low), low_exp_re, low_exp_im);
  exp_of_infinity(g.imag(high), high_exp_re, high_exp_im);
  Value sum_re = g.binary("add", low_exp_re, high_exp_re), sum_im = g.binary("add", low_exp_im, high_exp_im);
  auto is_inf = [&](Value v) { return g.compare(g.unary("abs", v), constant(inf), Comparison::kEQ); };
  Value direct = g.complex(g.select(g.binary("or", is_inf(sum_re), is_inf(sum_im)), constant(inf), nan),
                           g.binary("atan2", sum_im, sum_re));
  result = g.select(infinite_tie, g.select(positive, direct, low), result);
  // A NaN in any part of either term makes both parts NaN, as CPU's ordering of the terms does.
  auto has_nan = [&](Value v) {
    return g.binary("or", g.compare(g.real(v), g.real(v), Comparison::kNE),
                    g.compare(g.imag(v), g.imag(v), Comparison::kNE));
  };
  Value nan_part = g.binary("or", has_nan(a), has_nan(b));
  return g.select(nan_part, g.complex(nan, nan), result);
}

}  // namespace torchtpu::lowering
