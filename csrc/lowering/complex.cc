// Complex numbers: which rules serve complex values, the ops that build or take apart complex values, and the
// FFT family (torch.fft lowers to _fft_r2c, _fft_c2r and _fft_c2c, which become stablehlo.fft).
//
// Most rules were written for real dtypes; a call with complex values reaches only the rules listed in
// handles_complex, and runs through the CPU fallback otherwise (aten/op_build.cc), so it is never wrong.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

// complex(real, imag): both parts of one real dtype.
std::vector<Value> lower_complex(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type part{complex_part(out(ctx).dtype), out(ctx).dims};
  return {g.complex(cast_to(g, ctx.tensor(0), part), cast_to(g, ctx.tensor(1), part))};
}

// polar(abs, angle) = abs * (cos(angle) + i sin(angle)).
std::vector<Value> lower_polar(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type part{complex_part(out(ctx).dtype), out(ctx).dims};
  Value magnitude = cast_to(g, ctx.tensor(0), part);
  Value angle = cast_to(g, ctx.tensor(1), part);
  return {g.complex(g.binary("multiply", magnitude, g.unary("cosine", angle)),
                    g.binary("multiply", magnitude, g.unary("sine", angle)))};
}

std::vector<Value> lower_conj_physical(LoweringContext& ctx) { return {conjugate(ctx.graph, ctx.tensor(0))}; }

// ---- FFT ---------------------------------------------------------------------------------------------
// PyTorch's normalization argument (fft_norm_mode): 0 none, 1 by 1/sqrt(n), 2 by 1/n, n the signal size.
double norm_scale(int64_t mode, double signal_size) {
  if (mode == 1) return 1.0 / std::sqrt(signal_size);
  if (mode == 2) return 1.0 / signal_size;
  return 1.0;
}

double signal_size(const Type& t, const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) n *= static_cast<double>(t.dims[static_cast<size_t>(d)]);
  return n;
}

Value scale(Graph& g, Value x, double factor) {
  if (factor == 1.0) return x;
  return g.binary("multiply", x, g.constant(factor, g.type(x).dtype, g.type(x).dims));
}

// stablehlo.fft of `kind` over `dims` of x (at most 3): they are moved last, transformed, moved back.
// `last_length` is the length of the last transformed dim of the signal (IRFFT's output length).
Value fft_over(Graph& g, Value x, const std::vector<int64_t>& dims, const char* kind, int64_t last_length = -1) {
  const Type& t = g.type(x);
  std::vector<int64_t> order;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) order.push_back(d);
  }
  order.insert(order.end(), dims.begin(), dims.end());
  Value moved = g.transpose(x, order);
  std::vector<int64_t> result_dims = g.type(moved).dims;
  std::vector<int64_t> lengths(result_dims.end() - static_cast<std::ptrdiff_t>(dims.size()), result_dims.end());
  DType result_dtype = t.dtype;
  const std::string type(kind);
  if (type == "RFFT") {
    result_dims.back() = lengths.back() / 2 + 1;
    result_dtype = complex_of(t.dtype);
  } else if (type == "IRFFT") {
    lengths.back() = last_length;
    result_dims.back() = last_length;
    result_dtype = complex_part(t.dtype);
  }
  const std::string attributes =
      "fft_type = #stablehlo<fft_type " + type + ">, fft_length = " + ir::dense_i64_array(lengths);
  Value transformed = g.op("fft", {moved}, Type{result_dtype, result_dims}, attributes);
  return g.transpose(transformed, inverse_permutation(order));
}

// Unnormalized complex transform over any number of dims, three at a time (the most stablehlo.fft takes).
// XLA's inverse transform divides by the signal size; PyTorch's unnormalized one does not.
Value c2c(Graph& g, Value x, const std::vector<int64_t>& dims, bool forward) {
  for (size_t begin = 0; begin < dims.size(); begin += 3) {
    const std::vector<int64_t> group(dims.begin() + static_cast<std::ptrdiff_t>(begin),
                                     dims.begin() + static_cast<std::ptrdiff_t>(std::min(begin + 3, dims.size())));
    x = fft_over(g, x, group, forward ? "FFT" : "IFFT");
    if (!forward) x = scale(g, x, signal_size(g.type(x), group));
  }
  return x;
}

std::vector<int64_t> fft_dims(const LoweringContext& ctx, size_t arg) {
  std::vector<int64_t> dims;
  for (int64_t d : ctx.ints(arg)) dims.push_back(wrap_dim(d, ctx.type_of(0).rank()));
  return dims;
}

// _fft_c2c(self, dim, normalization, forward)
std::vector<Value> lower_fft_c2c(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = fft_dims(ctx, 1);
  Value x = g.convert(ctx.tensor(0), out(ctx).dtype);
  if (dims.empty()) return {x};
  Value y = c2c(g, x, dims, ctx.boolean(3));
  return {scale(g, y, norm_scale(ctx.integer(2), signal_size(ctx.type_of(0), dims)))};
}

// _fft_r2c(self, dim, normalization, onesided): the last listed dim keeps n/2+1 entries when onesided.
std::vector<Value> lower_fft_r2c(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = fft_dims(ctx, 1);
  const double factor = norm_scale(ctx.integer(2), signal_size(ctx.type_of(0), dims));
  Value x = ctx.tensor(0);
  if (!ctx.boolean(3)) return {scale(g, c2c(g, g.convert(x, out(ctx).dtype), dims, true), factor)};
  x = g.convert(x, complex_part(out(ctx).dtype));
  Value y = fft_over(g, x, {dims.back()}, "RFFT");
  y = c2c(g, y, std::vector<int64_t>(dims.begin(), dims.end() - 1), true);
  return {scale(g, y, factor)};
}

// _fft_c2r(self, dim, normalization, last_dim_size): the inverse of a onesided r2c; the last listed dim of
// the result has last_dim_size entries, of which the input holds the first last_dim_size/2+1.
std::vector<Value> lower_fft_c2r(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = fft_dims(ctx, 1);
  const int64_t last_size = ctx.integer(3);
  Value x = g.convert(ctx.tensor(0), complex_of(out(ctx).dtype));
  x = c2c(g, x, std::vector<int64_t>(dims.begin(), dims.end() - 1), false);
  // IRFFT reads exactly last_size/2+1 entries.
  const size_t last = static_cast<size_t>(dims.back());
  std::vector<int64_t> limit = g.type(x).dims;
  limit[last] = std::min(limit[last], last_size / 2 + 1);
  x = g.slice(x, std::vector<int64_t>(limit.size(), 0), limit, std::vector<int64_t>(limit.size(), 1));
  Value y = scale(g, fft_over(g, x, {dims.back()}, "IRFFT", last_size), static_cast<double>(last_size));
  return {scale(g, y, norm_scale(ctx.integer(2), signal_size(out(ctx), dims)))};
}

}  // namespace

bool handles_complex(const std::string& op) {
  // A foreach op computes as its per-tensor op does.
  if (const std::string* element = foreach_element_op(op)) return handles_complex(*element);
  // Rules checked with complex operands and results (tests/test_complex_ops.py); each computes in the
  // output dtype, so real operands are converted to complex first.
  static const std::unordered_set<std::string> rules = {
      "aten::_cholesky_solve_helper", "aten::_conj_physical", "aten::_fft_c2c", "aten::_fft_c2r", "aten::_fft_r2c",
      "aten::_linalg_det", "aten::_linalg_eigh", "aten::_linalg_eigvals", "aten::_linalg_slogdet",
      "aten::_linalg_solve_ex", "aten::_linalg_svd", "aten::_logcumsumexp", "aten::abs", "aten::acos", "aten::acosh",
      "aten::add.Tensor", "aten::addbmm", "aten::addcdiv", "aten::addcmul", "aten::addmm", "aten::addmv", "aten::addr",
      "aten::all", "aten::all.dim", "aten::angle", "aten::any", "aten::any.dim", "aten::asin", "aten::asinh",
      "aten::atan", "aten::atanh", "aten::baddbmm", "aten::bmm", "aten::cat", "aten::channel_shuffle", "aten::cholesky",
      "aten::cholesky_inverse", "aten::clone", "aten::complex", "aten::constant_pad_nd", "aten::copy", "aten::cos",
      "aten::cosh", "aten::count_nonzero.dim_IntList", "aten::cumprod", "aten::cumsum", "aten::diagonal_scatter",
      "aten::div.Tensor", "aten::dot", "aten::eq.Tensor", "aten::exp", "aten::exp2", "aten::expm1", "aten::eye.m_out",
      "aten::fill.Scalar", "aten::fill.Tensor", "aten::flip", "aten::gather", "aten::geqrf", "aten::im2col",
      "aten::index.Tensor", "aten::index_add", "aten::index_copy", "aten::index_fill.int_Scalar",
      "aten::index_fill.int_Tensor", "aten::index_put", "aten::index_select", "aten::isinf", "aten::isnan",
      "aten::lerp.Scalar", "aten::lerp.Tensor", "aten::linalg_cholesky_ex", "aten::linalg_cross", "aten::linalg_eig",
      "aten::linalg_householder_product", "aten::linalg_inv_ex", "aten::linalg_ldl_factor_ex", "aten::linalg_ldl_solve",
      "aten::linalg_lstsq", "aten::linalg_lu", "aten::linalg_lu_factor_ex", "aten::linalg_lu_solve",
      "aten::linalg_matrix_exp", "aten::linalg_qr", "aten::linalg_solve_triangular", "aten::linalg_vector_norm",
      "aten::linspace.out", "aten::log", "aten::log10", "aten::log1p", "aten::log2", "aten::logaddexp",
      "aten::logical_and", "aten::logical_not", "aten::logical_or", "aten::logical_xor", "aten::logspace.out",
      "aten::logsumexp", "aten::lu_unpack", "aten::masked_fill.Scalar", "aten::masked_fill.Tensor",
      "aten::masked_scatter", "aten::mean", "aten::mean.dim", "aten::mm", "aten::mul.Tensor", "aten::ne.Tensor",
      "aten::neg", "aten::nonzero_static", "aten::norm.Scalar", "aten::norm.ScalarOpt_dim",
      "aten::norm.ScalarOpt_dim_dtype", "aten::norm.ScalarOpt_dtype", "aten::normal_", "aten::ormqr", "aten::polar",
      "aten::pow.Tensor_Scalar", "aten::pow.Tensor_Tensor", "aten::prod", "aten::prod.dim_int", "aten::put",
      "aten::reciprocal", "aten::reflection_pad1d", "aten::reflection_pad1d_backward", "aten::reflection_pad2d",
      "aten::reflection_pad2d_backward", "aten::reflection_pad3d", "aten::reflection_pad3d_backward", "aten::renorm",
      "aten::repeat", "aten::replication_pad1d", "aten::replication_pad1d_backward", "aten::replication_pad2d",
      "aten::replication_pad2d_backward", "aten::replication_pad3d", "aten::replication_pad3d_backward", "aten::roll",
      "aten::rsqrt", "aten::rsub.Tensor", "aten::scatter.reduce", "aten::scatter.src", "aten::scatter_add",
      "aten::select_scatter", "aten::sgn", "aten::sigmoid", "aten::silu", "aten::sin", "aten::sinc", "aten::sinh",
      "aten::slice_scatter", "aten::sqrt", "aten::std.correction",
      "aten::std_mean.correction", "aten::sub.Tensor", "aten::sum", "aten::sum.dim_IntList", "aten::take", "aten::tan",
      "aten::tanh", "aten::trace", "aten::triangular_solve", "aten::tril", "aten::triu", "aten::uniform_",
      "aten::var.correction", "aten::var_mean.correction", "aten::vdot", "aten::where.self", "aten::zero",
  };
  return rules.count(op) != 0;
}

void add_complex_rules(std::vector<Rule>& table) {
  table.push_back({"aten::complex", &lower_complex});
  table.push_back({"aten::polar", &lower_polar});
  table.push_back({"aten::_conj_physical", &lower_conj_physical});
  table.push_back({"aten::_fft_c2c", &lower_fft_c2c});
  table.push_back({"aten::_fft_r2c", &lower_fft_r2c});
  table.push_back({"aten::_fft_c2r", &lower_fft_c2r});
}

}  // namespace torchtpu::lowering
