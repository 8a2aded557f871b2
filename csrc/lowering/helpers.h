// Small building blocks shared by the rule families.
#pragma once

#include <vector>

#include "lowering/rule.h"

namespace torchtpu::lowering {

// A 1-d constant holding `values` ([values.size()] of `dtype`), rounded to dtype once.
// Rules that compute index tables or weights on the host (from static shapes) embed them this way.
Value constant_vector(Graph& g, const std::vector<double>& values, DType dtype);

// NumPy-style broadcast (align trailing dims) of `x` to `dims`.
Value broadcast_to(Graph& g, Value x, const std::vector<int64_t>& dims);
// Converts to `target.dtype` and broadcasts to `target.dims`.
Value cast_to(Graph& g, Value x, const Type& target);
// |x|; of a complex value, its real magnitude.
Value magnitude(Graph& g, Value x);
// True where x's sign bit is set (so for -0.0 and negative NaN), for a real floating x.
Value sign_bit_set(Graph& g, Value x);
// The complex conjugate; a real value as it is.
Value conjugate(Graph& g, Value x);
// Wraps negative dims and sorts; an empty list means every dim (PyTorch's reduction convention).
std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t rank);
// A possibly negative dim index as a position in [0, rank) (0-d tensors accept dim 0 and -1).
int64_t wrap_dim(int64_t dim, int64_t rank);
// begin, begin + 1, ..., end - 1.
std::vector<int64_t> dim_range(int64_t begin, int64_t end);
// erf(x), equal to +-1 where the true value rounds to +-1 in x's type.
Value erf(Graph& g, Value x);
// The lowest (for a max) or highest (for a min) value of the type, -inf / inf for floats: a max or min's identity.
Value extreme(Graph& g, DType dtype, bool lowest, const std::vector<int64_t>& dims = {});
// The type reductions accumulate in: float32 for 16-bit floats and float8, as PyTorch does.
DType accumulation_dtype(DType dtype);

// PyTorch's symmetric ramp of `steps` values over `dims` = {steps}, from the float64 scalars start to end:
// the first half counts up from start, the second half down from end, so both ends are exact; a single
// step is just `start`. linspace, logspace and histogram bin edges use it.
Value symmetric_ramp(Graph& g, const std::vector<int64_t>& dims, Value start, Value end, int64_t steps);

// Adds rows of `updates` ([K, D...] or [K]) into `base` ([W, D...] or [W]) at row indices [K, 1]
// (stablehlo.scatter with an add region; repeated indices accumulate, out-of-range ones are dropped).
Value scatter_add_rows(Graph& g, Value base, Value indices, Value updates);

// The positions along `dim` that sort `keys` (stable; keys must not hold NaN, which has no order here),
// as int64 of keys' shape.
Value stable_argsort(Graph& g, Value keys, int64_t dim, bool descending);

// Inclusive scan of `operands` (one shape) along `dim`: result i combines elements 0..i with `combiner` (a
// region over pairs of scalars, see Graph::region), as a reduce_window spanning the dim and padded on the low
// side with `identities`. The plugin's reduce_window is quadratic in the dim's length, which is fine for the
// sizes eager code scans; a log-depth scan can replace it later.
std::vector<Value> inclusive_scan(Graph& g, const std::vector<Value>& operands, const std::vector<Value>& identities,
                                  int64_t dim, const std::string& combiner);

// Contracts dim `dim` of x with dim `matrix_dim` of the 2-d `matrix` (computing in `dtype`); the other
// matrix dim takes dim's place, so x's dim order is kept. Pooling and padding express per-dim
// resampling this way.
Value contract_dim(Graph& g, Value x, int64_t dim, Value matrix, int64_t matrix_dim, DType dtype);

// Where the integer `x` lies outside [low, high): bool of x's shape. Value checks of indices and targets use it.
Value outside_range(Graph& g, Value x, int64_t low, int64_t high);

// Elementwise: whether x is finite (for complex values, both parts), bool of x's shape.
Value finite_elements(Graph& g, Value x);

// States CPU's check that a histogram's range taken from the 1-d floating `x` (its min `low` and max `high`)
// is finite: an inf or NaN among the data fails it. The check's value packs both ends as float32 bits (low
// word: min, high word: max); a NaN makes both ends NaN, negative where CPU prints "-nan".
void check_finite_data_range(LoweringContext& ctx, Value x, Value low, Value high, CheckKind kind,
                             std::vector<int64_t> facts, bool negative_nan);

// States CPU's check of an integer division (div with a rounding mode, floor_divide, remainder, fmod): a zero
// divisor raises ZeroDivisionError. Floating-point divisions have none.
void check_integer_divisor(LoweringContext& ctx, Value divisor);

// Throws, as CPU does, where argument i is an integer or bool tensor and `op` has floating kernels only
// (the meta kernels accept any dtype, so the rule must refuse rather than compute).
void require_floating(const LoweringContext& ctx, size_t i, const char* op);

// Throws CPU's error where an operand of a subtraction (sub, rsub; tensor or number) is bool. PyTorch's meta
// kernels accept bool there, so the rule must refuse rather than compute.
void check_subtraction_operands(const LoweringContext& ctx);

// Uniform floats in [0, 1) of `dtype` (float32 or float64) from rng_bit_generator over the functional
// RNG state (LoweringContext::rng_state of a rule marked uses_rng).
Value unit_uniform(Graph& g, Value state, const std::vector<int64_t>& dims, DType dtype);

// Elementwise result of `name` over the arguments converted to `compute` and broadcast to `dims`.
Value elementwise(Graph& g, const std::string& name, const std::vector<Value>& operands, DType compute,
                  const std::vector<int64_t>& dims);

// The permutation that undoes `permutation` (transpose by one, then by the other, is the identity).
std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& permutation);

// Complex logaddexp as CPU's kernel computes it (the combiner of logaddexp and of logcumsumexp's scan).
Value complex_logaddexp(Graph& g, Value a, Value b);

}  // namespace torchtpu::lowering
