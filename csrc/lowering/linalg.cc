// Matrix and vector products: mm, _scaled_mm, addmm, bmm, baddbmm, addbmm, addmv, addr, dot, vdot, linalg_cross. dot_general with HIGHEST precision and
// accumulation in float32 for 16-bit inputs, rounded once to the output dtype.
#include <complex>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

// CPU has no bool matrix products (only addr, which is elementwise), and XLA's CPU compiler aborts the process
// on some bool dots with an added bias, so the rules refuse bool with CPU's message where CPU's kernel runs
// (`computes`: CPU returns an empty or, with nothing to contract, a zero product without it); `kernel` is
// CPU's name for it.
void reject_bool(const LoweringContext& ctx, const char* kernel, bool computes) {
  if (out(ctx).dtype == DType::kBool && computes) {
    throw std::invalid_argument("\"" + std::string(kernel) + "\" not implemented for 'Bool'");
  }
}

// CPU's products refuse operands of different dtypes (no promotion, unlike elementwise ops); the meta kernels
// do not check it. The caller words the error as CPU does (aten/op_build.cc asks CPU when a rule refuses).
void require_same_dtypes(const LoweringContext& ctx, std::initializer_list<size_t> operands) {
  const DType first = ctx.type_of(*operands.begin()).dtype;
  for (size_t i : operands) {
    if (ctx.type_of(i).dtype != first) throw std::invalid_argument("the operands of a product must have one dtype");
  }
}

Value matmul_2d(LoweringContext& ctx, Value a, Value b) {
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  a = g.convert(a, dtype);
  b = g.convert(b, dtype);
  return g.dot_general(a, b, {}, {}, {1}, {0}, accumulation_dtype(dtype));
}

std::vector<Value> lower_mm(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1});
  reject_bool(ctx, "addmm_impl_cpu_", out(ctx).numel() > 0 && ctx.type_of(0).dims[1] > 0);
  Value product = matmul_2d(ctx, ctx.tensor(0), ctx.tensor(1));
  return {ctx.graph.convert(product, out(ctx).dtype)};
}

// Whether CPU computes this product with BLAS: float32 and float64 always (given `sized_for_blas`),
// complex where `complex_too`; its 16-bit kernels are its own and multiply even when alpha == 0.
bool blas_computes(const LoweringContext& ctx, bool complex_too, bool sized_for_blas = true) {
  const DType dtype = out(ctx).dtype;
  return sized_for_blas && (dtype == DType::kF32 || dtype == DType::kF64 || (complex_too && is_complex(dtype)));
}

// beta * self + alpha * product, for the add* family: `product` is in the accumulation dtype, self is
// argument 0 and broadcasts to the output, beta and alpha are arguments 3 and 4 (complex for a complex
// output). beta == 0 ignores self, NaNs included, as PyTorch does. `skips_product_at_zero_alpha`: where
// CPU's kernel is a BLAS call, alpha == 0 reads neither matrix, so NaN in them does not reach the result
// (see blas_computes).
Value scale_and_add_self(LoweringContext& ctx, Value product, bool skips_product_at_zero_alpha) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  const std::complex<double> beta = ctx.complex_value(3), alpha = ctx.complex_value(4);
  if (alpha == 0.0 && skips_product_at_zero_alpha) product = g.constant(0.0, accumulate, out(ctx).dims);
  else if (alpha != 1.0) product = g.binary("multiply", product, ctx.scalar(4, accumulate, out(ctx).dims));
  if (beta != 0.0) {
    Value bias = cast_to(g, ctx.tensor(0), Type{accumulate, out(ctx).dims});
    if (beta != 1.0) bias = g.binary("multiply", bias, ctx.scalar(3, accumulate, out(ctx).dims));
    product = g.binary("add", product, bias);
  }
  return g.convert(product, out(ctx).dtype);
}

// addmm(self, mat1, mat2, beta, alpha): beta * self + alpha * (mat1 @ mat2)
std::vector<Value> lower_addmm(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1, 2});
  reject_bool(ctx, "addmm_impl_cpu_", out(ctx).numel() > 0);
  return {scale_and_add_self(ctx, matmul_2d(ctx, ctx.tensor(1), ctx.tensor(2)), blas_computes(ctx, true))};
}

// _scaled_mm(a, b, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum): float8 operands
// multiplied in float32, scaled per tensor (one-element scales) or per row of a and column of b ([m, 1] and
// [1, n]), plus bias, rounded once to the output dtype. As in CPU's kernel, scale_result divides the result only
// when the output is float8. CPU's kernel has checked the arguments when the program was built.
std::vector<Value> lower_scaled_mm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const Type wide{DType::kF32, t.dims};
  Value product = g.dot_general(ctx.tensor(0), ctx.tensor(1), {}, {}, {1}, {0}, DType::kF32);
  product = g.binary("multiply", product, cast_to(g, ctx.tensor(2), wide));
  product = g.binary("multiply", product, cast_to(g, ctx.tensor(3), wide));
  if (!ctx.is_none(4)) product = g.binary("add", product, cast_to(g, ctx.tensor(4), wide));
  if (!ctx.is_none(5) && is_float8(t.dtype)) product = g.binary("divide", product, cast_to(g, ctx.tensor(5), wide));
  return {g.convert(product, t.dtype)};
}

// A product of two [b, n, m] x [b, m, p] operands, converted to the output dtype first: contracting the batch
// dimension too sums the b products (addbmm), keeping it gives one product per batch entry (bmm).
Value batch_product(LoweringContext& ctx, Value a, Value b, bool sum_batches) {
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  a = g.convert(a, dtype);
  b = g.convert(b, dtype);
  if (sum_batches) return g.dot_general(a, b, {}, {}, {0, 2}, {0, 1}, accumulation_dtype(dtype));
  return g.dot_general(a, b, {0}, {0}, {2}, {1}, accumulation_dtype(dtype));
}

std::vector<Value> lower_bmm(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1});
  reject_bool(ctx, "bmm", out(ctx).numel() > 0 && ctx.type_of(0).dims[2] > 0);
  return {ctx.graph.convert(batch_product(ctx, ctx.tensor(0), ctx.tensor(1), false), out(ctx).dtype)};
}

// baddbmm(self, batch1, batch2, beta, alpha): beta * self + alpha * bmm(batch1, batch2)
std::vector<Value> lower_baddbmm(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1, 2});
  reject_bool(ctx, "baddbmm", out(ctx).numel() > 0);
  // CPU multiplies products of fewer than 400 multiply-adds per batch entry itself.
  const Type& batch1 = ctx.type_of(1);
  const bool sized_for_blas = batch1.dims[1] * batch1.dims[2] * ctx.type_of(2).dims[2] >= 400;
  return {scale_and_add_self(ctx, batch_product(ctx, ctx.tensor(1), ctx.tensor(2), false),
                             blas_computes(ctx, true, sized_for_blas))};
}

// addbmm(self, batch1, batch2, beta, alpha): beta * self + alpha * sum over b of batch1[b] @ batch2[b].
// PyTorch accumulates one addmm_ per batch entry into the result, rounding it to the output dtype each time;
// for 16-bit outputs that rounding is visible, so they loop the same way. Wider outputs contract all at once.
std::vector<Value> lower_addbmm(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1, 2});
  reject_bool(ctx, "addmm_impl_cpu_", out(ctx).numel() > 0);
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const Type& batch1 = ctx.type_of(1);
  if (element_size(t.dtype) > 2 || batch1.dims[0] == 0) {
    return {scale_and_add_self(ctx, batch_product(ctx, ctx.tensor(1), ctx.tensor(2), true), blas_computes(ctx, true))};
  }
  const double beta = ctx.real(3), alpha = ctx.real(4);
  const DType accumulate = accumulation_dtype(t.dtype);
  const Type& batch2 = ctx.type_of(2);
  Value first = beta == 0 ? g.constant(0.0, t.dtype, t.dims) : cast_to(g, ctx.tensor(0), t);
  Value zero = g.constant_int(0, DType::kI64);
  auto entry = [&](Value batch, const Type& type, Value index) {
    Value slice = g.op("dynamic_slice", {batch, index, zero, zero}, Type{type.dtype, {1, type.dims[1], type.dims[2]}},
                       "slice_sizes = " + ir::dense_i64_array({1, type.dims[1], type.dims[2]}));
    return g.convert(g.reshape(slice, {type.dims[1], type.dims[2]}), t.dtype);
  };
  auto final_state = g.while_loop(
      {zero, first},
      [&](const std::vector<Value>& s) {
        return std::vector<Value>{g.compare(s[0], g.constant_int(batch1.dims[0], DType::kI64), ir::Comparison::kLT)};
      },
      [&](const std::vector<Value>& s) {
        Value product = g.dot_general(entry(ctx.tensor(1), batch1, s[0]), entry(ctx.tensor(2), batch2, s[0]), {}, {},
                                      {1}, {0}, accumulate);
        product = g.binary("multiply", product, g.constant(alpha, accumulate, t.dims));
        // The first step scales self by beta; later ones add to the rounded running sum.
        Value scale = g.select(g.compare(s[0], zero, ir::Comparison::kEQ),
                               g.constant(beta == 0 ? 1.0 : beta, accumulate), g.constant(1.0, accumulate));
        Value sum = g.binary("add", g.binary("multiply", g.convert(s[1], accumulate), broadcast_to(g, scale, t.dims)),
                             product);
        return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)), g.convert(sum, t.dtype)};
      });
  return {final_state[1]};
}

// dot(self, tensor): a 1-d contraction.
std::vector<Value> lower_dot(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1});
  reject_bool(ctx, "dot", true);
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  Value product = g.dot_general(g.convert(ctx.tensor(0), dtype), g.convert(ctx.tensor(1), dtype), {}, {}, {0}, {0},
                                accumulation_dtype(dtype));
  return {g.convert(product, dtype)};
}

// vdot(self, other): the dot product with self conjugated.
std::vector<Value> lower_vdot(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1});
  reject_bool(ctx, "vdot", true);
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  Value product = g.dot_general(conjugate(g, g.convert(ctx.tensor(0), dtype)), g.convert(ctx.tensor(1), dtype), {}, {},
                                {0}, {0}, accumulation_dtype(dtype));
  return {g.convert(product, dtype)};
}

// addmv(self, mat, vec, beta, alpha): beta * self + alpha * (mat @ vec)
std::vector<Value> lower_addmv(LoweringContext& ctx) {
  require_same_dtypes(ctx, {0, 1, 2});
  reject_bool(ctx, "addmv_impl_cpu", out(ctx).numel() > 0 && ctx.type_of(1).dims[1] > 0);
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  Value product = g.dot_general(g.convert(ctx.tensor(1), dtype), g.convert(ctx.tensor(2), dtype), {}, {}, {1}, {0},
                                accumulation_dtype(dtype));
  return {scale_and_add_self(ctx, product, blas_computes(ctx, false))};
}

// addr(self, vec1, vec2, beta, alpha): beta * self + (alpha * vec1) outer vec2. Elementwise like PyTorch's
// kernel, in the output dtype with its rounding after each step; bool outputs use and/or. beta == 0 ignores
// self, NaNs included.
std::vector<Value> lower_addr(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const bool logical = t.dtype == DType::kBool;
  Value v1 = g.broadcast_in_dim(g.convert(ctx.tensor(1), t.dtype), t.dims, {0});
  Value v2 = g.broadcast_in_dim(g.convert(ctx.tensor(2), t.dtype), t.dims, {1});
  Value alpha = ctx.scalar(4, t.dtype, t.dims);
  Value product = g.binary(logical ? "and" : "multiply", g.binary(logical ? "and" : "multiply", alpha, v1), v2);
  if (ctx.complex_value(3) == 0.0) return {product};
  Value scaled_self = g.binary(logical ? "and" : "multiply", ctx.scalar(3, t.dtype, t.dims),
                               cast_to(g, ctx.tensor(0), t));
  return {g.binary(logical ? "or" : "add", scaled_self, product)};
}

// linalg_cross(self, other, dim): the operands broadcast; dim has size 3. Computed in the output dtype, rounding
// each product as PyTorch does: near-cancelling terms make that rounding visible in 16-bit types.
std::vector<Value> lower_linalg_cross(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const int64_t dim = wrap_dim(ctx.integer(2), t.rank());
  auto component = [&](Value v, int64_t k) {
    std::vector<int64_t> start(t.dims.size(), 0), limit = t.dims, unit(t.dims.size(), 1);
    start[dim] = k;
    limit[dim] = k + 1;
    return g.slice(v, start, limit, unit);
  };
  Value a = cast_to(g, ctx.tensor(0), t);
  Value b = cast_to(g, ctx.tensor(1), t);
  std::vector<Value> parts;
  for (int64_t k = 0; k < 3; ++k) {
    const int64_t next = (k + 1) % 3, after = (k + 2) % 3;
    parts.push_back(g.binary("subtract", g.binary("multiply", component(a, next), component(b, after)),
                             g.binary("multiply", component(a, after), component(b, next))));
  }
  return {g.concatenate(parts, dim)};
}

}  // namespace

void add_linalg_rules(std::vector<Rule>& table) {
  table.push_back({"aten::addbmm", &lower_addbmm});
  table.push_back({"aten::addmm", &lower_addmm});
  table.push_back({"aten::addmv", &lower_addmv});
  table.push_back({"aten::addr", &lower_addr});
  table.push_back({"aten::baddbmm", &lower_baddbmm});
  table.push_back({"aten::bmm", &lower_bmm});
  table.push_back({"aten::dot", &lower_dot});
  table.push_back({"aten::linalg_cross", &lower_linalg_cross});
  table.push_back({"aten::mm", &lower_mm});
  table.push_back({"aten::_scaled_mm", &lower_scaled_mm});
  table.push_back({"aten::vdot", &lower_vdot});
}

}  // namespace torchtpu::lowering
