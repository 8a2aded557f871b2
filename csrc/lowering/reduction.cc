// Reductions over dims: sum, nansum, mean, prod, any/all, var/std (and their _mean twins), logsumexp,
// vector norms (and renorm), max/min (values and indices), amax/amin/aminmax, argmax/argmin,
// count_nonzero, trace, segment_reduce, and the cumulative cumsum/cumprod/cummax/cummin.
//
// 16-bit floats accumulate in float32, as PyTorch does; results are reshaped to the inferred output
// shape, which carries keepdim.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;
using ir::Reducer;

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

std::vector<int64_t> dims_arg(const LoweringContext& ctx, size_t i) {
  const int64_t rank = ctx.type_of(0).rank();
  if (ctx.is_none(i)) return reduction_dims({}, rank);
  if (ctx.args[i].kind == Arg::Kind::kInt) return reduction_dims({ctx.integer(i)}, rank);
  return reduction_dims(ctx.ints(i), rank);
}

int64_t count(const Type& t, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= t.dims[static_cast<size_t>(d)];
  return n;
}

Value sum_in(LoweringContext& ctx, const std::vector<int64_t>& dims, DType accumulate) {
  Graph& g = ctx.graph;
  Value x = g.convert(ctx.tensor(0), accumulate);
  return g.reduce(x, g.constant_int(0, accumulate), dims, Reducer::kAdd);
}

Value extremum(LoweringContext& ctx, const std::vector<int64_t>& dims, bool is_max) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const DType dtype = g.type(x).dtype;
  return g.reduce(x, extreme(g, dtype, is_max), dims, is_max ? Reducer::kMaxNaN : Reducer::kMinNaN);
}

// Index of the first extremum along `dim`; in a row holding NaN, of the first NaN (NaN counts as the extremum,
// as in PyTorch, and XLA's max/min reductions need not propagate it).
Value arg_extremum(LoweringContext& ctx, int64_t dim, bool is_max) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  Value best = extremum(ctx, {dim}, is_max);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < t.rank(); ++i) {
    if (i != dim) kept.push_back(i);
  }
  Value best_full = g.broadcast_in_dim(best, t.dims, kept);
  Value hit = g.compare(x, best_full, Comparison::kEQ);
  if (is_floating(t.dtype)) {
    Value is_nan = g.compare(x, x, Comparison::kNE);
    Value has_nan = g.reduce(is_nan, g.constant_int(0, DType::kBool), {dim}, Reducer::kOr);
    hit = g.select(g.broadcast_in_dim(has_nan, t.dims, kept), is_nan, hit);
  }
  Value positions = g.iota(Type{DType::kI64, t.dims}, dim);
  Value sentinel = g.constant_int(std::numeric_limits<int64_t>::max(), DType::kI64, t.dims);
  Value candidates = g.select(hit, positions, sentinel);
  return g.reduce(candidates, g.constant_int(std::numeric_limits<int64_t>::max(), DType::kI64), {dim}, Reducer::kMin);
}

// sum.dim_IntList(self, dim?, keepdim, dtype?) and sum(self, dtype?)
std::vector<Value> lower_sum_dims(LoweringContext& ctx) {
  Value s = sum_in(ctx, dims_arg(ctx, 1), accumulation_dtype(out(ctx).dtype));
  return {ctx.graph.reshape(ctx.graph.convert(s, out(ctx).dtype), out(ctx).dims)};
}

std::vector<Value> lower_sum(LoweringContext& ctx) {
  Value s = sum_in(ctx, reduction_dims({}, ctx.type_of(0).rank()), accumulation_dtype(out(ctx).dtype));
  return {ctx.graph.reshape(ctx.graph.convert(s, out(ctx).dtype), out(ctx).dims)};
}

Value mean_over(LoweringContext& ctx, const std::vector<int64_t>& dims) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value s = sum_in(ctx, dims, accumulate);
  Value n = g.constant(static_cast<double>(count(ctx.type_of(0), dims)), accumulate, g.type(s).dims);
  return g.reshape(g.convert(g.binary("divide", s, n), out(ctx).dtype), out(ctx).dims);
}

// mean.dim(self, dim?, keepdim, dtype?) and mean(self, dtype?)
std::vector<Value> lower_mean_dims(LoweringContext& ctx) { return {mean_over(ctx, dims_arg(ctx, 1))}; }
std::vector<Value> lower_mean(LoweringContext& ctx) {
  return {mean_over(ctx, reduction_dims({}, ctx.type_of(0).rank()))};
}

// max/min over an empty dim (no identity) raise on CPU; PyTorch's meta kernels return an empty result
// instead, so the rules check.
void require_nonempty_dim(const LoweringContext& ctx, int64_t dim, const char* op) {
  const Type& t = ctx.type_of(0);
  if (t.rank() > 0 && t.dims[static_cast<size_t>(dim)] == 0) {
    throw std::invalid_argument(std::string(op) + "(): Expected reduction dim " + std::to_string(dim) +
                                " to have non-zero size.");
  }
}

std::vector<Value> full_extremum(LoweringContext& ctx, bool is_max) {
  if (ctx.type_of(0).numel() == 0) {
    const std::string op = is_max ? "max" : "min";
    throw std::invalid_argument(op + "(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                                "reduction dim with the 'dim' argument.");
  }
  Value v = extremum(ctx, reduction_dims({}, ctx.type_of(0).rank()), is_max);
  return {ctx.graph.reshape(v, out(ctx).dims)};
}
std::vector<Value> lower_max(LoweringContext& ctx) { return full_extremum(ctx, true); }
std::vector<Value> lower_min(LoweringContext& ctx) { return full_extremum(ctx, false); }

// amax(self, dim[], keepdim)
std::vector<Value> lower_amax(LoweringContext& ctx) {
  return {ctx.graph.reshape(extremum(ctx, dims_arg(ctx, 1), true), out(ctx).dims)};
}
std::vector<Value> lower_amin(LoweringContext& ctx) {
  return {ctx.graph.reshape(extremum(ctx, dims_arg(ctx, 1), false), out(ctx).dims)};
}

// max.dim(self, dim, keepdim) -> (values, indices)
std::vector<Value> dim_extremum(LoweringContext& ctx, bool is_max) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = dims_arg(ctx, 1);
  if (!dims.empty()) require_nonempty_dim(ctx, dims[0], is_max ? "max" : "min");
  if (dims.empty()) {  // 0-d input: the value itself, index 0
    return {g.reshape(ctx.tensor(0), out(ctx, 0).dims), g.constant_int(0, DType::kI64, out(ctx, 1).dims)};
  }
  Value indices = arg_extremum(ctx, dims[0], is_max);
  // Values via the index keeps NaN semantics identical to the index choice.
  Value values = extremum(ctx, dims, is_max);
  if (is_floating(ctx.type_of(0).dtype)) {
    // A NaN anywhere in the row makes the row's value NaN.
    Value x = ctx.tensor(0);
    Value has_nan = g.reduce(g.compare(x, x, Comparison::kNE), g.constant_int(0, DType::kBool), dims, Reducer::kOr);
    Value nan = g.constant(std::numeric_limits<double>::quiet_NaN(), g.type(values).dtype, g.type(values).dims);
    values = g.select(has_nan, nan, values);
  }
  return {g.reshape(values, out(ctx, 0).dims), g.reshape(indices, out(ctx, 1).dims)};
}
std::vector<Value> lower_max_dim(LoweringContext& ctx) { return dim_extremum(ctx, true); }
std::vector<Value> lower_min_dim(LoweringContext& ctx) { return dim_extremum(ctx, false); }

// argmax(self, dim?, keepdim): with dim None, over the flattened input.
std::vector<Value> arg_op(LoweringContext& ctx, bool is_max) {
  Graph& g = ctx.graph;
  const Type& t = ctx.type_of(0);
  if (t.dtype == DType::kBool) {
    throw std::invalid_argument(std::string(is_max ? "argmax" : "argmin") + "(): does not support bool input");
  }
  if (t.rank() == 0) return {g.constant_int(0, DType::kI64, out(ctx).dims)};
  if (ctx.is_none(1)) {
    LoweringContext flat{g, ctx.args, ctx.outputs, ctx.common_dtype, ctx.rng_state};
    flat.args[0].tensor = g.reshape(ctx.tensor(0), {t.numel()});
    return {g.reshape(arg_extremum(flat, 0, is_max), out(ctx).dims)};
  }
  return {g.reshape(arg_extremum(ctx, dims_arg(ctx, 1)[0], is_max), out(ctx).dims)};
}
std::vector<Value> lower_argmax(LoweringContext& ctx) { return arg_op(ctx, true); }
std::vector<Value> lower_argmin(LoweringContext& ctx) { return arg_op(ctx, false); }

// ---- prod, any/all, nansum ------------------------------------------------------------------------

// Multiplies over `dims` in the output's accumulation type (int64 for integer and bool inputs, whose
// output PyTorch promotes to int64; float32 for 16-bit floats).
Value prod_over(LoweringContext& ctx, const std::vector<int64_t>& dims) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = g.convert(ctx.tensor(0), accumulate);
  Value p = g.reduce(x, g.constant_int(1, accumulate), dims, Reducer::kMul);
  return g.reshape(g.convert(p, out(ctx).dtype), out(ctx).dims);
}

// prod(self, dtype?) and prod.dim_int(self, dim, keepdim, dtype?)
std::vector<Value> lower_prod(LoweringContext& ctx) {
  return {prod_over(ctx, reduction_dims({}, ctx.type_of(0).rank()))};
}
std::vector<Value> lower_prod_dim(LoweringContext& ctx) { return {prod_over(ctx, dims_arg(ctx, 1))}; }

// any/all reduce the truth of each element; the output is bool (uint8 for uint8 input, as in PyTorch),
// which the kernel's final convert produces from the bool result.
Value truth_reduce(LoweringContext& ctx, const std::vector<int64_t>& dims, bool is_any) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  Value truth = t.dtype == DType::kBool ? x : g.compare(x, g.constant_int(0, t.dtype, t.dims), Comparison::kNE);
  Value r = g.reduce(truth, g.constant_int(is_any ? 0 : 1, DType::kBool), dims, is_any ? Reducer::kOr : Reducer::kAnd);
  return g.reshape(r, out(ctx).dims);
}

// any.dims/all.dims: dim=None reduces every dim, but an explicit empty list reduces none (unlike sum).
std::vector<int64_t> allany_dims(const LoweringContext& ctx) {
  if (!ctx.is_none(1) && ctx.args[1].kind == Arg::Kind::kIntList && ctx.ints(1).empty()) return {};
  return dims_arg(ctx, 1);
}

std::vector<Value> lower_any(LoweringContext& ctx) {
  return {truth_reduce(ctx, reduction_dims({}, ctx.type_of(0).rank()), true)};
}
std::vector<Value> lower_any_dims(LoweringContext& ctx) { return {truth_reduce(ctx, allany_dims(ctx), true)}; }
std::vector<Value> lower_all(LoweringContext& ctx) {
  return {truth_reduce(ctx, reduction_dims({}, ctx.type_of(0).rank()), false)};
}
std::vector<Value> lower_all_dims(LoweringContext& ctx) { return {truth_reduce(ctx, allany_dims(ctx), false)}; }

// nansum(self, dim?, keepdim, dtype?): NaNs count as zero.
std::vector<Value> lower_nansum(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = g.convert(ctx.tensor(0), accumulate);
  if (is_floating(accumulate)) {
    const Type t = g.type(x);
    x = g.select(g.compare(x, x, Comparison::kNE), g.constant(0.0, accumulate, t.dims), x);
  }
  Value s = g.reduce(x, g.constant_int(0, accumulate), dims_arg(ctx, 1), Reducer::kAdd);
  return {g.reshape(g.convert(s, out(ctx).dtype), out(ctx).dims)};
}

// ---- var/std --------------------------------------------------------------------------------------

struct Moments {
  Value var;   // reduced shape, accumulation dtype
  Value mean;  // reduced shape, accumulation dtype
};

// Two-pass variance over `dims` (mean first, then squared deviations), which keeps float32 accurate where
// the one-pass E[x^2]-E[x]^2 cancels. The divisor is max(0, N - correction) as in PyTorch, so a row too
// short for the correction gives inf or NaN rather than a negative variance. A complex input's variance is
// the mean squared magnitude of its deviations (real, in `accumulate`); its mean stays complex.
Moments moments(LoweringContext& ctx, const std::vector<int64_t>& dims, double correction, DType accumulate) {
  Graph& g = ctx.graph;
  const DType input = ctx.type_of(0).dtype;
  Value x = g.convert(ctx.tensor(0), is_complex(input) ? accumulation_dtype(input) : accumulate);
  const DType values = g.type(x).dtype;
  const Type t = g.type(x);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < t.rank(); ++i) {
    if (!std::binary_search(dims.begin(), dims.end(), i)) kept.push_back(i);
  }
  const double n = static_cast<double>(count(t, dims));
  Value sum = g.reduce(x, g.constant_int(0, values), dims, Reducer::kAdd);
  const std::vector<int64_t> reduced = g.type(sum).dims;
  Value mean = g.binary("divide", sum, g.constant(n, values, reduced));
  Value deviation = g.binary("subtract", x, g.broadcast_in_dim(mean, t.dims, kept));
  Value square = is_complex(values) ? g.binary("add", g.binary("multiply", g.real(deviation), g.real(deviation)),
                                               g.binary("multiply", g.imag(deviation), g.imag(deviation)))
                                    : g.binary("multiply", deviation, deviation);
  Value squares = g.reduce(g.convert(square, accumulate), g.constant_int(0, accumulate), dims, Reducer::kAdd);
  Value var = g.binary("divide", squares, g.constant(std::max(0.0, n - correction), accumulate, reduced));
  return {var, mean};
}

// var.correction(self, dim?, *, correction?, keepdim): correction defaults to 1 (Bessel).
Moments correction_moments(LoweringContext& ctx) {
  // The meta kernels let integer inputs through; CPU refuses them (the caller raises CPU's words).
  const DType input = ctx.type_of(0).dtype;
  if (!is_floating(input) && !is_complex(input)) {
    throw std::invalid_argument("std and var only support floating point and complex dtypes");
  }
  const double correction = ctx.is_none(2) ? 1.0 : ctx.real(2);
  return moments(ctx, dims_arg(ctx, 1), correction, accumulation_dtype(out(ctx).dtype));
}

Value finish(LoweringContext& ctx, Value v, size_t output) {
  return ctx.graph.reshape(ctx.graph.convert(v, out(ctx, output).dtype), out(ctx, output).dims);
}

std::vector<Value> lower_var(LoweringContext& ctx) { return {finish(ctx, correction_moments(ctx).var, 0)}; }
std::vector<Value> lower_std(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.unary("sqrt", correction_moments(ctx).var), 0)};
}
// var_mean.correction / std_mean.correction -> (var or std, mean)
std::vector<Value> lower_var_mean(LoweringContext& ctx) {
  Moments m = correction_moments(ctx);
  return {finish(ctx, m.var, 0), finish(ctx, m.mean, 1)};
}
std::vector<Value> lower_std_mean(LoweringContext& ctx) {
  Moments m = correction_moments(ctx);
  return {finish(ctx, ctx.graph.unary("sqrt", m.var), 0), finish(ctx, m.mean, 1)};
}

// ---- logsumexp, vector norms ----------------------------------------------------------------------

// logsumexp(self, dim[], keepdim): max-shifted so large inputs do not overflow; an infinite max is
// replaced by 0 for the shift so all -inf rows give -inf (not NaN) and +inf rows give +inf. Complex values
// shift by the largest real part, as PyTorch does.
std::vector<Value> lower_logsumexp(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = g.convert(ctx.tensor(0), accumulate);
  const Type t = g.type(x);
  const DType part = is_complex(accumulate) ? complex_part(accumulate) : accumulate;
  const std::vector<int64_t> dims = dims_arg(ctx, 1);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < t.rank(); ++i) {
    if (!std::binary_search(dims.begin(), dims.end(), i)) kept.push_back(i);
  }
  Value m = g.reduce(is_complex(accumulate) ? g.real(x) : x, extreme(g, part, true), dims, Reducer::kMax);
  const std::vector<int64_t> reduced = g.type(m).dims;
  Value is_inf = g.compare(g.unary("abs", m), g.constant(std::numeric_limits<double>::infinity(), part, reduced),
                           Comparison::kEQ);
  m = g.select(is_inf, g.constant(0.0, part, reduced), m);
  if (is_complex(accumulate)) m = g.complex(m, g.constant(0.0, part, reduced));
  Value shifted = g.unary("exponential", g.binary("subtract", x, g.broadcast_in_dim(m, t.dims, kept)));
  Value s = g.reduce(shifted, g.constant_int(0, accumulate), dims, Reducer::kAdd);
  return {finish(ctx, g.binary("add", g.unary("log", s), m), 0)};
}

// The vector norm of argument 0 over `dims`, in the accumulation type of the output: ord 0 counts
// non-zeros, +-inf take the max/min magnitude, 1 and 2 avoid the general pow, and anything else is
// (sum |x|^p)^(1/p).
Value vector_norm(LoweringContext& ctx, double ord, const std::vector<int64_t>& dims) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = ctx.tensor(0);
  Value a = is_complex(g.type(x).dtype) ? g.convert(magnitude(g, x), accumulate) : magnitude(g, g.convert(x, accumulate));
  const Type t = g.type(a);
  Value zero = g.constant_int(0, accumulate);
  if (std::isinf(ord)) {
    return ord > 0 ? g.reduce(a, zero, dims, Reducer::kMaxNaN)
                   : g.reduce(a, extreme(g, accumulate, false), dims, Reducer::kMinNaN);
  }
  if (ord == 0) {
    Value nonzero = g.convert(g.compare(a, g.constant(0.0, accumulate, t.dims), Comparison::kNE), accumulate);
    return g.reduce(nonzero, zero, dims, Reducer::kAdd);
  }
  if (ord == 1) return g.reduce(a, zero, dims, Reducer::kAdd);
  if (ord == 2) return g.unary("sqrt", g.reduce(g.binary("multiply", a, a), zero, dims, Reducer::kAdd));
  Value powered = g.binary("power", a, g.constant(ord, accumulate, t.dims));
  Value s = g.reduce(powered, zero, dims, Reducer::kAdd);
  return g.binary("power", s, g.constant(1.0 / ord, accumulate, g.type(s).dims));
}

// linalg_vector_norm(self, ord, dim?, keepdim, *, dtype?)
std::vector<Value> lower_vector_norm(LoweringContext& ctx) {
  return {finish(ctx, vector_norm(ctx, ctx.real(1), dims_arg(ctx, 2)), 0)};
}

// The p of the legacy norm overloads: None means 2.
double norm_order(const LoweringContext& ctx) { return ctx.is_none(1) ? 2.0 : ctx.real(1); }

// norm.Scalar(self, p) and norm.ScalarOpt_dtype(self, p?, *, dtype): over every dim.
std::vector<Value> lower_norm(LoweringContext& ctx) {
  return {finish(ctx, vector_norm(ctx, norm_order(ctx), reduction_dims({}, ctx.type_of(0).rank())), 0)};
}

// norm.ScalarOpt_dim(self, p?, dim[], keepdim) and norm.ScalarOpt_dim_dtype(..., *, dtype)
std::vector<Value> lower_norm_dims(LoweringContext& ctx) {
  return {finish(ctx, vector_norm(ctx, norm_order(ctx), dims_arg(ctx, 2)), 0)};
}

// renorm(self, p, dim, maxnorm): each slice along `dim` whose p-norm exceeds maxnorm is scaled down to
// it, by maxnorm / (norm + 1e-7) as PyTorch does. The norm is rounded to the input's type first, as CPU
// computes it as a separate tensor.
std::vector<Value> lower_renorm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type t = out(ctx);
  const DType accumulate = accumulation_dtype(t.dtype);
  const int64_t dim = wrap_dim(ctx.integer(2), t.rank());
  std::vector<int64_t> others;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (d != dim) others.push_back(d);
  }
  // A complex input's norms and factors are real, in its parts' type.
  const DType real_type = is_complex(t.dtype) ? complex_part(t.dtype) : t.dtype;
  const DType real_accumulate = is_complex(accumulate) ? complex_part(accumulate) : accumulate;
  Value norm = g.convert(g.convert(vector_norm(ctx, ctx.real(1), others), real_type), real_accumulate);
  const std::vector<int64_t> slices = g.type(norm).dims;
  const double maxnorm = ctx.real(3);
  Value scale = g.binary("divide", g.constant(maxnorm, real_accumulate, slices),
                         g.binary("add", norm, g.constant(1e-7, real_accumulate, slices)));
  Value factor = g.select(g.compare(norm, g.constant(maxnorm, real_accumulate, slices), Comparison::kGT), scale,
                          g.constant(1.0, real_accumulate, slices));
  factor = g.convert(g.convert(factor, real_type), accumulate);
  Value x = g.convert(ctx.tensor(0), accumulate);
  std::vector<int64_t> kept;
  if (t.rank() > 0) kept.push_back(dim);
  return {finish(ctx, g.binary("multiply", x, g.broadcast_in_dim(factor, t.dims, kept)), 0)};
}

// hash_tensor(self, dim[], keepdim, mode): XOR of the elements' bits, after widening each to its 64-bit
// float or integer equivalent; an empty dim list reduces every dim.
std::vector<Value> lower_hash_tensor(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = ctx.type_of(0);
  const DType wide = is_floating(t.dtype) ? DType::kF64 : DType::kI64;  // unsigned values keep their bits
  Value bits = g.bitcast_convert(g.convert(x, wide), Type{DType::kU64, t.dims});
  Value hash = g.reduce(bits, g.constant_int(0, DType::kU64), dims_arg(ctx, 1), Reducer::kXor);
  return {g.reshape(hash, out(ctx).dims)};
}

// ---- cumsum/cumprod -------------------------------------------------------------------------------

// Inclusive sum or product scan along `dim`, in the accumulation dtype.
Value cumulative(LoweringContext& ctx, Reducer reducer) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = g.convert(ctx.tensor(0), accumulate);
  const Type t = g.type(x);
  if (t.rank() == 0 || t.numel() == 0) return x;
  const int64_t dim = reduction_dims({ctx.integer(1)}, t.rank())[0];
  const bool is_add = reducer == Reducer::kAdd;
  return inclusive_scan(g, {x}, {g.constant_int(is_add ? 0 : 1, accumulate)}, dim,
                        ir::scalar_region(is_add ? "stablehlo.add" : "stablehlo.multiply", accumulate))[0];
}

// cumsum(self, dim, *, dtype?) and cumprod: integer and bool inputs give int64 (from the inferred output).
std::vector<Value> lower_cumsum(LoweringContext& ctx) { return {finish(ctx, cumulative(ctx, Reducer::kAdd), 0)}; }
std::vector<Value> lower_cumprod(LoweringContext& ctx) { return {finish(ctx, cumulative(ctx, Reducer::kMul), 0)}; }


// ---- cummax/cummin --------------------------------------------------------------------------------

// _cummax_helper(self, values!, indices!, dim) -> () and _cummin_helper: the running extremum and the
// position it was last seen at, as PyTorch's CPU kernel gives them: an equal value moves the index
// forward, and NaN beats every number (it then propagates), a later NaN moving the index again. The
// scan is a reduce_window over (value, index) pairs whose combiner keeps the pair that is "larger"
// in that order, which is associative and commutative as reduce_window requires.
std::vector<Value> cumulative_extremum(LoweringContext& ctx, bool is_max) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  const Type index_type{DType::kI64, t.dims};
  if (t.rank() == 0) return {x, g.constant_int(0, DType::kI64, {})};
  if (t.numel() == 0) return {x, g.constant_int(0, DType::kI64, t.dims)};
  const int64_t dim = wrap_dim(ctx.integer(3), t.rank());
  Value positions = g.iota(index_type, dim);
  const bool floating = is_floating(t.dtype);
  const Type scalar{t.dtype, {}}, index_scalar{DType::kI64, {}};
  const std::string combiner = g.region({scalar, index_scalar, scalar, index_scalar}, [&](const std::vector<Value>& a) {
    Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
    Value beats = g.compare(bv, av, is_max ? Comparison::kGT : Comparison::kLT);
    Value same = g.compare(bv, av, Comparison::kEQ);
    if (floating) {
      Value a_nan = g.compare(av, av, Comparison::kNE), b_nan = g.compare(bv, bv, Comparison::kNE);
      beats = g.binary("or", beats, g.binary("and", b_nan, g.unary("not", a_nan)));
      same = g.binary("or", same, g.binary("and", a_nan, b_nan));
    }
    Value b_wins = g.binary("or", beats, g.binary("and", same, g.compare(bi, ai, Comparison::kGT)));
    return std::vector<Value>{g.select(b_wins, bv, av), g.select(b_wins, bi, ai)};
  });
  // The padding pairs never win: the lowest value (highest for min) at index -1.
  return inclusive_scan(g, {x, positions}, {extreme(g, t.dtype, is_max), g.constant_int(-1, DType::kI64)}, dim,
                        combiner);
}
std::vector<Value> lower_cummax_helper(LoweringContext& ctx) { return cumulative_extremum(ctx, true); }
std::vector<Value> lower_cummin_helper(LoweringContext& ctx) { return cumulative_extremum(ctx, false); }

// ---- aminmax, count_nonzero, trace ----------------------------------------------------------------

// aminmax(self, *, dim?, keepdim) -> (min, max)
std::vector<Value> lower_aminmax(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = dims_arg(ctx, 1);
  return {g.reshape(extremum(ctx, dims, false), out(ctx, 0).dims), g.reshape(extremum(ctx, dims, true), out(ctx, 1).dims)};
}

// count_nonzero.dim_IntList(self, dim[]): an empty list counts over every dim.
std::vector<Value> lower_count_nonzero(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  Value nonzero = t.dtype == DType::kBool ? x : g.compare(x, g.constant_int(0, t.dtype, t.dims), Comparison::kNE);
  Value counts = g.reduce(g.convert(nonzero, DType::kI64), g.constant_int(0, DType::kI64), dims_arg(ctx, 1), Reducer::kAdd);
  return {g.reshape(counts, out(ctx).dims)};
}

// trace(self): the sum of the main diagonal of a matrix, accumulated like sum (integers give int64).
std::vector<Value> lower_trace(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  if (ctx.type_of(0).dtype == DType::kBool) throw std::invalid_argument("trace is not implemented for 'Bool' (as on CPU)");
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = g.convert(ctx.tensor(0), accumulate);
  const Type t = g.type(x);
  Value diagonal = g.compare(g.iota(Type{DType::kI64, t.dims}, 0), g.iota(Type{DType::kI64, t.dims}, 1), Comparison::kEQ);
  Value kept = g.select(diagonal, x, g.constant_int(0, accumulate, t.dims));
  return {finish(ctx, g.reduce(kept, g.constant_int(0, accumulate), {0, 1}, Reducer::kAdd), 0)};
}

// ---- segment_reduce -------------------------------------------------------------------------------
//
// Segments are consecutive runs along `axis` of data [lead..., D, trail...], given by lengths or offsets
// [lead..., S (+1 for offsets)]. Each segment's elements are picked with a mask [lead..., S, D], so the
// work grows with S * D; segment counts in eager code are small.

struct Segments {
  int64_t axis;
  int64_t count;        // S
  Value member;         // bool [lead..., S, D]: element j belongs to segment s
  Value lengths;        // int64 [lead..., S]
  std::vector<int64_t> lead;
};

// Reads lengths (argument `lengths_arg`) or offsets (`offsets_arg`) against data of type `data`.
Segments segments(LoweringContext& ctx, const Type& data, size_t lengths_arg, size_t offsets_arg, int64_t axis) {
  Graph& g = ctx.graph;
  axis = wrap_dim(axis, data.rank());
  const int64_t d = data.dims[static_cast<size_t>(axis)];
  const std::vector<int64_t> lead(data.dims.begin(), data.dims.begin() + axis);
  const int64_t lead_rank = axis;
  Value starts, ends, lengths;
  if (!ctx.is_none(lengths_arg)) {
    lengths = g.convert(ctx.tensor(lengths_arg), DType::kI64);
    const int64_t s = g.type(lengths).dims.back();
    // starts[s] = sum of lengths[t] over t < s, as a masked sum over a [.., S, S] square.
    std::vector<int64_t> square = lead;
    square.push_back(s);
    square.push_back(s);
    Value earlier = g.compare(g.iota(Type{DType::kI64, square}, lead_rank + 1), g.iota(Type{DType::kI64, square}, lead_rank),
                              Comparison::kLT);
    std::vector<int64_t> as_t = dim_range(0, lead_rank);
    as_t.push_back(lead_rank + 1);
    Value spread = g.broadcast_in_dim(lengths, square, as_t);
    starts = g.reduce(g.select(earlier, spread, g.constant_int(0, DType::kI64, square)), g.constant_int(0, DType::kI64),
                      {lead_rank + 1}, Reducer::kAdd);
    ends = g.binary("add", starts, lengths);
  } else {
    Value offsets = g.convert(ctx.tensor(offsets_arg), DType::kI64);
    const Type t = g.type(offsets);
    const int64_t s = t.dims.back() - 1;
    std::vector<int64_t> start(t.dims.size(), 0), limit = t.dims, unit(t.dims.size(), 1);
    limit.back() = s;
    starts = g.slice(offsets, start, limit, unit);
    start.back() = 1;
    limit.back() = s + 1;
    ends = g.slice(offsets, start, limit, unit);
    lengths = g.binary("subtract", ends, starts);
  }
  const int64_t count = g.type(lengths).dims.back();
  std::vector<int64_t> grid = lead;
  grid.push_back(count);
  grid.push_back(d);
  Value position = g.iota(Type{DType::kI64, grid}, lead_rank + 1);
  const std::vector<int64_t> as_segment = dim_range(0, lead_rank + 1);
  Value member = g.binary("and", g.compare(position, g.broadcast_in_dim(starts, grid, as_segment), Comparison::kGE),
                          g.compare(position, g.broadcast_in_dim(ends, grid, as_segment), Comparison::kLT));
  return {axis, count, member, lengths, lead};
}

// data [lead..., D, trail...] broadcast to [lead..., S, D, trail...].
std::vector<int64_t> segment_grid(const Type& data, const Segments& seg) {
  std::vector<int64_t> dims = data.dims;
  dims.insert(dims.begin() + seg.axis, seg.count);
  return dims;
}

Value spread_data(Graph& g, Value x, const Segments& seg) {
  const Type t = g.type(x);
  std::vector<int64_t> positions;
  for (int64_t d = 0; d < t.rank(); ++d) positions.push_back(d < seg.axis ? d : d + 1);
  return g.broadcast_in_dim(x, segment_grid(t, seg), positions);
}

// A per-segment value [lead..., S] broadcast to the result's [lead..., S, trail...].
Value per_segment(Graph& g, Value v, const std::vector<int64_t>& dims) {
  return g.broadcast_in_dim(v, dims, dim_range(0, g.type(v).rank()));
}

// segment_reduce(data, reduce, *, lengths?, indices?, offsets?, axis, unsafe, initial?): sum, mean, max,
// min or prod of each segment, starting from `initial` when given. An empty segment gives the initial
// value, or the reduction's identity (mean: NaN).
std::vector<Value> lower_segment_reduce(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  require_floating(ctx, 0, "segment_reduce");
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = g.convert(ctx.tensor(0), accumulate);
  const Type data = g.type(x);
  Segments seg = segments(ctx, data, 2, 4, ctx.integer(5));
  const std::string& reduce = ctx.text(1);
  const bool has_initial = !ctx.is_none(7);
  const std::vector<int64_t> grid = segment_grid(data, seg);
  Value member = g.broadcast_in_dim(seg.member, grid, dim_range(0, seg.axis + 2));
  Value spread = spread_data(g, x, seg);
  struct Reduction {
    Reducer reducer;
    double identity;
    const char* combine;  // the elementwise op that joins the initial value
  };
  const double inf = std::numeric_limits<double>::infinity();
  Reduction r_op{Reducer::kAdd, 0, "add"};  // sum and mean
  if (reduce == "max") r_op = {Reducer::kMax, -inf, "maximum"};
  else if (reduce == "min") r_op = {Reducer::kMin, inf, "minimum"};
  else if (reduce == "prod") r_op = {Reducer::kMul, 1, "multiply"};
  else if (reduce != "sum" && reduce != "mean") throw std::invalid_argument("segment_reduce: unknown reduction " + reduce);
  // The reduction starts from its identity (reduce may apply its init value more than once); the initial
  // value joins afterwards.
  Value start = g.constant(r_op.identity, accumulate);
  Value r = g.reduce(g.select(member, spread, g.broadcast_in_dim(start, grid, {})), start, {seg.axis + 1}, r_op.reducer);
  const std::vector<int64_t> result_dims = g.type(r).dims;
  if (has_initial) r = g.binary(r_op.combine, r, ctx.scalar(7, accumulate, result_dims));
  if (reduce == "mean") {
    Value length = per_segment(g, g.convert(seg.lengths, accumulate), result_dims);
    Value empty = g.compare(length, g.constant(0.0, accumulate, result_dims), Comparison::kEQ);
    Value fallback = has_initial ? ctx.scalar(7, accumulate, result_dims)
                                 : g.constant(std::numeric_limits<double>::quiet_NaN(), accumulate, result_dims);
    r = g.select(empty, fallback, g.binary("divide", r, length));
  }
  return {finish(ctx, r, 0)};
}

// _segment_reduce_backward(grad, output, data, reduce, *, lengths?, offsets?, axis, initial?): the
// gradient of each element from its segment's: sum passes it on, mean divides by the length, max/min
// share it equally among the elements equal to the result (NaN ones when it is NaN), and prod
// multiplies by the product of the other elements (output / x where x is not 0).
std::vector<Value> lower_segment_reduce_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value x = g.convert(ctx.tensor(2), accumulate);
  const Type data = g.type(x);
  Segments seg = segments(ctx, data, 4, 5, ctx.integer(6));
  const std::string& reduce = ctx.text(3);
  const std::vector<int64_t> grid = segment_grid(data, seg);
  Value member = g.broadcast_in_dim(seg.member, grid, dim_range(0, seg.axis + 2));
  Value zeros = g.constant(0.0, accumulate, grid);
  Value grad = g.convert(ctx.tensor(0), accumulate);
  Value output = g.convert(ctx.tensor(1), accumulate);
  const std::vector<int64_t> result_dims = g.type(grad).dims;
  // A per-segment value [lead..., S, trail...] on the grid, and its sum over segments at each element.
  auto on_grid = [&](Value v) {
    std::vector<int64_t> positions;
    for (int64_t d = 0; d < g.type(v).rank(); ++d) positions.push_back(d <= seg.axis ? d : d + 1);
    return g.broadcast_in_dim(v, grid, positions);
  };
  auto to_elements = [&](Value v) { return g.reduce(g.select(member, v, zeros), g.constant(0.0, accumulate), {seg.axis}, Reducer::kAdd); };
  Value share = grad;
  if (reduce == "mean") {
    share = g.binary("divide", grad, per_segment(g, g.convert(seg.lengths, accumulate), result_dims));
  }
  Value result;
  if (reduce == "sum" || reduce == "mean") {
    result = to_elements(on_grid(share));
  } else if (reduce == "max" || reduce == "min") {
    Value spread = spread_data(g, x, seg);
    Value target = on_grid(output);
    Value hit = g.binary("or", g.compare(spread, target, Comparison::kEQ),
                         g.binary("and", g.compare(spread, spread, Comparison::kNE), g.compare(target, target, Comparison::kNE)));
    hit = g.binary("and", hit, member);
    Value ties = g.reduce(g.convert(hit, accumulate), g.constant(0.0, accumulate), {seg.axis + 1}, Reducer::kAdd);
    Value each = on_grid(g.binary("divide", grad, ties));
    result = g.reduce(g.select(hit, each, zeros), g.constant(0.0, accumulate), {seg.axis}, Reducer::kAdd);
  } else if (reduce == "prod") {
    // The product of the other elements of the segment, for elements that are 0; output / x elsewhere.
    const int64_t d = data.dims[static_cast<size_t>(seg.axis)];
    std::vector<int64_t> square = grid;  // [lead..., S, D, trail...] -> [lead..., D (self), D (other), trail...]
    square[static_cast<size_t>(seg.axis)] = d;
    std::vector<int64_t> other_dims;
    for (int64_t p = 0; p < data.rank(); ++p) other_dims.push_back(p < seg.axis ? p : p + 1);
    // Elements j and k share a segment when some segment holds both.
    const int64_t lead_rank = seg.axis;
    std::vector<int64_t> pair_grid = seg.lead;
    pair_grid.push_back(seg.count);
    pair_grid.push_back(d);
    pair_grid.push_back(d);
    std::vector<int64_t> first = dim_range(0, lead_rank + 2), second = dim_range(0, lead_rank + 1);
    second.push_back(lead_rank + 2);
    Value both = g.binary("and", g.broadcast_in_dim(seg.member, pair_grid, first), g.broadcast_in_dim(seg.member, pair_grid, second));
    Value together = g.reduce(both, g.constant_int(0, DType::kBool), {lead_rank}, Reducer::kOr);  // [lead..., D, D]
    Value distinct = g.compare(g.iota(Type{DType::kI64, g.type(together).dims}, lead_rank),
                               g.iota(Type{DType::kI64, g.type(together).dims}, lead_rank + 1), Comparison::kNE);
    Value others = g.broadcast_in_dim(g.binary("and", together, distinct), square, dim_range(0, lead_rank + 2));
    Value other_x = g.broadcast_in_dim(x, square, other_dims);
    Value exclusive = g.reduce(g.select(others, other_x, g.constant(1.0, accumulate, square)), g.constant(1.0, accumulate),
                               {seg.axis + 1}, Reducer::kMul);
    if (!ctx.is_none(7)) exclusive = g.binary("multiply", exclusive, ctx.scalar(7, accumulate, data.dims));
    Value element_grad = to_elements(on_grid(grad));
    Value element_output = to_elements(on_grid(output));
    Value is_zero = g.compare(x, g.constant(0.0, accumulate, data.dims), Comparison::kEQ);
    Value by_division = g.binary("divide", g.binary("multiply", element_grad, element_output), x);
    result = g.select(is_zero, g.binary("multiply", element_grad, exclusive), by_division);
  } else {
    throw std::invalid_argument("_segment_reduce_backward: unknown reduction " + reduce);
  }
  return {finish(ctx, result, 0)};
}

}  // namespace

void add_reduction_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_segment_reduce_backward", &lower_segment_reduce_backward});
  table.push_back({"aten::_cummax_helper", &lower_cummax_helper});
  table.push_back({"aten::_cummin_helper", &lower_cummin_helper});
  table.push_back({"aten::all", &lower_all});
  table.push_back({"aten::all.dim", &lower_all_dims});
  table.push_back({"aten::all.dims", &lower_all_dims});
  table.push_back({"aten::amax", &lower_amax});
  table.push_back({"aten::amin", &lower_amin});
  table.push_back({"aten::aminmax", &lower_aminmax});
  table.push_back({"aten::any", &lower_any});
  table.push_back({"aten::any.dim", &lower_any_dims});
  table.push_back({"aten::any.dims", &lower_any_dims});
  table.push_back({"aten::argmax", &lower_argmax});
  table.push_back({"aten::argmin", &lower_argmin});
  table.push_back({"aten::count_nonzero.dim_IntList", &lower_count_nonzero});
  table.push_back({"aten::cumprod", &lower_cumprod});
  table.push_back({"aten::cumsum", &lower_cumsum});
  table.push_back({"aten::linalg_vector_norm", &lower_vector_norm});
  table.push_back({"aten::hash_tensor", &lower_hash_tensor});
  table.push_back({"aten::logsumexp", &lower_logsumexp});
  table.push_back({"aten::max", &lower_max});
  table.push_back({"aten::max.dim", &lower_max_dim});
  table.push_back({"aten::mean", &lower_mean});
  table.push_back({"aten::mean.dim", &lower_mean_dims});
  table.push_back({"aten::min", &lower_min});
  table.push_back({"aten::min.dim", &lower_min_dim});
  table.push_back({"aten::nansum", &lower_nansum});
  table.push_back({"aten::norm.Scalar", &lower_norm});
  table.push_back({"aten::norm.ScalarOpt_dim", &lower_norm_dims});
  table.push_back({"aten::norm.ScalarOpt_dim_dtype", &lower_norm_dims});
  table.push_back({"aten::norm.ScalarOpt_dtype", &lower_norm});
  table.push_back({"aten::prod", &lower_prod});
  table.push_back({"aten::prod.dim_int", &lower_prod_dim});
  table.push_back({"aten::renorm", &lower_renorm});
  table.push_back({"aten::segment_reduce", &lower_segment_reduce});
  table.push_back({"aten::std.correction", &lower_std});
  table.push_back({"aten::std_mean.correction", &lower_std_mean});
  table.push_back({"aten::sum", &lower_sum});
  table.push_back({"aten::sum.dim_IntList", &lower_sum_dims});
  table.push_back({"aten::trace", &lower_trace});
  table.push_back({"aten::var.correction", &lower_var});
  table.push_back({"aten::var_mean.correction", &lower_var_mean});
}

}  // namespace torchtpu::lowering
