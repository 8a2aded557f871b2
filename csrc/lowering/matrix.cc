#include "lowering/matrix.h"

#include <algorithm>
#include <limits>
#include <string>

namespace torchtpu::lowering {

std::vector<int64_t> batch_of(const Type& t) { return {t.dims.begin(), t.dims.end() - 2}; }

std::vector<int64_t> append(std::vector<int64_t> dims, std::initializer_list<int64_t> tail) {
  dims.insert(dims.end(), tail);
  return dims;
}

Value transpose_matrix(Graph& g, Value x) {
  const int64_t rank = g.type(x).rank();
  std::vector<int64_t> permutation = dim_range(0, rank - 2);
  permutation.push_back(rank - 1);
  permutation.push_back(rank - 2);
  return g.transpose(x, permutation);
}

Value adjoint_matrix(Graph& g, Value x) { return conjugate(g, transpose_matrix(g, x)); }

Value real_part(Graph& g, Value x) { return is_complex(g.type(x).dtype) ? g.real(x) : x; }

Value matmul(Graph& g, Value a, Value b) {
  const int64_t rank = g.type(a).rank();
  const std::vector<int64_t> batch = dim_range(0, rank - 2);
  return g.dot_general(a, b, batch, batch, {rank - 1}, {rank - 2}, g.type(a).dtype);
}

Value row_index(Graph& g, const std::vector<int64_t>& dims) {
  return g.iota(Type{DType::kI64, dims}, static_cast<int64_t>(dims.size()) - 2);
}

Value column_index(Graph& g, const std::vector<int64_t>& dims) {
  return g.iota(Type{DType::kI64, dims}, static_cast<int64_t>(dims.size()) - 1);
}

Value identity(Graph& g, DType dtype, const std::vector<int64_t>& dims) {
  Value diagonal = g.compare(row_index(g, dims), column_index(g, dims), ir::Comparison::kEQ);
  return g.select(diagonal, g.constant(1, dtype, dims), g.constant(0, dtype, dims));
}

Value keep_triangle(Graph& g, Value x, bool lower) {
  const Type& t = g.type(x);
  Value keep = g.compare(row_index(g, t.dims), column_index(g, t.dims),
                         lower ? ir::Comparison::kGE : ir::Comparison::kLE);
  return g.select(keep, x, g.constant(0, t.dtype, t.dims));
}

Value diagonal_of(Graph& g, Value x) {
  const Type t = g.type(x);
  Value on_diagonal = g.compare(row_index(g, t.dims), column_index(g, t.dims), ir::Comparison::kEQ);
  Value masked = g.select(on_diagonal, x, g.constant(-0.0, t.dtype, t.dims));
  return g.reduce(masked, g.constant(-0.0, t.dtype), {t.rank() - 1}, ir::Reducer::kAdd);
}

Value dynamic_slice(Graph& g, Value x, const std::vector<Value>& starts, const std::vector<int64_t>& sizes) {
  std::vector<Value> operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return g.op("dynamic_slice", operands, Type{g.type(x).dtype, sizes}, "slice_sizes = " + ir::dense_i64_array(sizes));
}

std::vector<Value> matrix_starts(Graph& g, size_t batch_rank, Value row, Value column) {
  std::vector<Value> starts(batch_rank, g.constant_int(0, DType::kI64));
  starts.push_back(row);
  starts.push_back(column);
  return starts;
}

Value broadcast_row(Graph& g, Value x, Value k) {
  const Type t = g.type(x);
  const std::vector<int64_t> batch = batch_of(t);
  Value row = dynamic_slice(g, x, matrix_starts(g, batch.size(), k, g.constant_int(0, DType::kI64)),
                            append(batch, {1, t.dims.back()}));
  return broadcast_to(g, row, t.dims);
}

Value broadcast_column(Graph& g, Value x, Value k) {
  const Type t = g.type(x);
  const std::vector<int64_t> batch = batch_of(t);
  Value column = dynamic_slice(g, x, matrix_starts(g, batch.size(), g.constant_int(0, DType::kI64), k),
                               append(batch, {t.dims.end()[-2], 1}));
  return broadcast_to(g, column, t.dims);
}

Value vector_element(Graph& g, Value v, Value k) {
  const Type t = g.type(v);
  std::vector<Value> starts(static_cast<size_t>(t.rank() - 1), g.constant_int(0, DType::kI64));
  starts.push_back(k);
  std::vector<int64_t> sizes(t.dims.begin(), t.dims.end() - 1);
  sizes.push_back(1);
  return g.reshape(dynamic_slice(g, v, starts, sizes), {t.dims.begin(), t.dims.end() - 1});
}

Value triangular_solve(Graph& g, Value a, Value b, bool left, bool lower, bool unit_diagonal, bool transpose_a) {
  const std::string attributes = std::string("left_side = ") + (left ? "true" : "false") +
                                 ", lower = " + (lower ? "true" : "false") +
                                 ", unit_diagonal = " + (unit_diagonal ? "true" : "false") +
                                 ", transpose_a = #stablehlo<transpose " +
                                 (transpose_a ? "ADJOINT" : "NO_TRANSPOSE") + ">";
  return g.op("triangular_solve", {a, b}, g.type(b), attributes);
}

Value gather_rows(Graph& g, Value x, Value rows) {
  const Type t = g.type(x);
  const int64_t m = t.dims.end()[-2];
  const int64_t k = t.dims.back();
  if (t.numel() == 0) return x;
  // Flat index of (batch b, row rows[b, i], column c) = (b * m + rows[b, i]) * k + c.
  std::vector<int64_t> batch = batch_of(t);
  int64_t batch_count = 1;
  for (int64_t d : batch) batch_count *= d;
  const std::vector<int64_t> flat_dims{batch_count, m, k};
  Value batch_start = g.binary("multiply", g.iota(Type{DType::kI64, flat_dims}, 0),
                               g.constant_int(m, DType::kI64, flat_dims));
  Value source_rows = g.broadcast_in_dim(g.reshape(rows, {batch_count, m}), flat_dims, {0, 1});
  Value flat = g.binary("add", g.binary("multiply", g.binary("add", batch_start, source_rows),
                                        g.constant_int(k, DType::kI64, flat_dims)),
                        g.iota(Type{DType::kI64, flat_dims}, 2));
  Value picked = g.gather_flat(g.reshape(x, {t.numel()}), g.reshape(flat, {batch_count, m, k, 1}));
  return g.reshape(picked, t.dims);
}

Value invert_permutation(Graph& g, Value permutation) {
  const Type t = g.type(permutation);
  const int64_t m = t.dims.back();
  const int64_t batch_rank = t.rank() - 1;
  const std::vector<int64_t> dims = append({t.dims.begin(), t.dims.end() - 1}, {m, m});
  // match[..., j, i]: permutation[i] == j.
  Value values = g.broadcast_in_dim(permutation, dims, append(dim_range(0, batch_rank), {batch_rank + 1}));
  Value match = g.compare(values, g.iota(Type{DType::kI64, dims}, batch_rank), ir::Comparison::kEQ);
  Value positions = g.select(match, g.iota(Type{DType::kI64, dims}, batch_rank + 1),
                             g.constant_int(0, DType::kI64, dims));
  return g.reduce(positions, g.constant_int(0, DType::kI64), {batch_rank + 1}, ir::Reducer::kAdd);
}
// Machine epsilon and the smallest normal number of the dtype the decompositions compute in.
double epsilon(DType dtype) { return dtype == DType::kF64 ? 2.220446049250313e-16 : 1.1920928955078125e-07; }
double smallest_normal(DType dtype) {
  return dtype == DType::kF64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
}

// The reflector vector of column `k` (an i64 scalar) of the compact form a [..., m, n], as [..., m]: zero
// above k, one at k, a's entries below.
Value reflector(Graph& g, Value a, Value k) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const std::vector<int64_t> vector_dims = append(batch, {m});
  Value column = g.reshape(dynamic_slice(g, a, matrix_starts(g, batch.size(), g.constant_int(0, DType::kI64), k),
                                         append(batch, {m, 1})),
                           vector_dims);
  Value rows = g.iota(Type{DType::kI64, vector_dims}, static_cast<int64_t>(batch.size()));
  Value k_full = g.broadcast_in_dim(k, vector_dims, {});
  Value below = g.compare(rows, k_full, ir::Comparison::kGT);
  Value at = g.compare(rows, k_full, ir::Comparison::kEQ);
  return g.select(below, column, g.select(at, g.constant(1, t.dtype, vector_dims), g.constant(0, t.dtype, vector_dims)));
}

// geqrf by Householder reflections, one column per loop step: returns (compact a, tau [..., min(m, n)]).
std::pair<Value, Value> householder_qr(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const int64_t n = t.dims.back();
  const int64_t steps = std::min(m, n);
  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> batch_positions = dim_range(0, batch_rank);
  Value tau = g.constant(0, t.dtype, append(batch, {steps}));
  if (steps == 0) return {a, tau};
  auto body = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1], taus = s[2];
    const std::vector<int64_t> vector_dims = append(batch, {m});
    Value column = g.reshape(dynamic_slice(g, x, matrix_starts(g, batch.size(), g.constant_int(0, DType::kI64), k),
                                           append(batch, {m, 1})),
                             vector_dims);
    Value rows = g.iota(Type{DType::kI64, vector_dims}, batch_rank);
    Value k_vector = g.broadcast_in_dim(k, vector_dims, {});
    Value below = g.compare(rows, k_vector, ir::Comparison::kGT);
    Value alpha = vector_element(g, column, k);
    Value tail = g.select(below, column, g.constant(0, t.dtype, vector_dims));
    const bool complex = is_complex(t.dtype);
    const DType part = complex ? complex_part(t.dtype) : t.dtype;
    auto squared = [&](Value z) {  // |z|^2
      return complex ? g.binary("add", g.binary("multiply", g.real(z), g.real(z)), g.binary("multiply", g.imag(z), g.imag(z)))
                     : g.binary("multiply", z, z);
    };
    Value tail_norm = g.unary("sqrt", g.reduce(squared(tail), g.constant(0, part), {batch_rank}, ir::Reducer::kAdd));
    auto scalar = [&](double v) { return g.constant(v, t.dtype, batch); };
    auto real_scalar = [&](double v) { return g.constant(v, part, batch); };
    auto as_value = [&](Value real) { return complex ? g.complex(real, real_scalar(0)) : real; };
    Value no_reflection = g.compare(tail_norm, real_scalar(0), ir::Comparison::kEQ);
    if (complex) {
      no_reflection = g.binary("and", no_reflection, g.compare(g.imag(alpha), real_scalar(0), ir::Comparison::kEQ));
    }
    Value norm = g.unary("sqrt", g.binary("add", squared(alpha), g.binary("multiply", tail_norm, tail_norm)));
    Value alpha_negative = g.compare(real_part(g, alpha), real_scalar(0), ir::Comparison::kLT);
    Value beta = g.select(no_reflection, alpha, as_value(g.select(alpha_negative, norm, g.unary("negate", norm))));
    Value safe_beta = g.select(no_reflection, scalar(1), beta);
    Value tau_k = g.select(no_reflection, scalar(0), g.binary("divide", g.binary("subtract", beta, alpha), safe_beta));
    Value denominator = g.select(no_reflection, scalar(1), g.binary("subtract", alpha, beta));
    Value v_tail = g.binary("divide", tail, g.broadcast_in_dim(denominator, vector_dims, batch_positions));
    Value at_k = g.compare(rows, k_vector, ir::Comparison::kEQ);
    Value v = g.select(below, v_tail, g.select(at_k, g.constant(1, t.dtype, vector_dims),
                                               g.constant(0, t.dtype, vector_dims)));
    // Apply H^H = I - conj(tau) v v^H to the columns right of k.
    Value v_matrix = g.broadcast_in_dim(v, t.dims, append(batch_positions, {batch_rank}));
    Value w = g.reduce(g.binary("multiply", conjugate(g, v_matrix), x), g.constant(0, t.dtype), {batch_rank},
                       ir::Reducer::kAdd);
    Value tw = g.binary("multiply", g.broadcast_in_dim(conjugate(g, tau_k), g.type(w).dims, batch_positions), w);
    Value applied = g.binary("subtract", x, g.binary("multiply", v_matrix,
                                                     g.broadcast_in_dim(tw, t.dims, append(batch_positions, {batch_rank + 1}))));
    Value k_full = g.broadcast_in_dim(k, t.dims, {});
    Value matrix_rows = row_index(g, t.dims);
    Value matrix_columns = column_index(g, t.dims);
    Value right = g.compare(matrix_columns, k_full, ir::Comparison::kGT);
    Value on_column = g.compare(matrix_columns, k_full, ir::Comparison::kEQ);
    Value column_k = g.select(g.compare(matrix_rows, k_full, ir::Comparison::kGT), v_matrix,
                              g.select(g.compare(matrix_rows, k_full, ir::Comparison::kEQ),
                                       g.broadcast_in_dim(beta, t.dims, batch_positions), x));
    x = g.select(right, applied, g.select(on_column, column_k, x));
    const std::vector<int64_t> tau_dims = append(batch, {steps});
    Value tau_at = g.compare(g.iota(Type{DType::kI64, tau_dims}, batch_rank), g.broadcast_in_dim(k, tau_dims, {}),
                             ir::Comparison::kEQ);
    taus = g.select(tau_at, g.broadcast_in_dim(tau_k, tau_dims, batch_positions), taus);
    return std::vector<Value>{g.binary("add", k, g.constant_int(1, DType::kI64)), x, taus};
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], g.constant_int(steps, DType::kI64), ir::Comparison::kLT)};
  };
  std::vector<Value> r = g.while_loop({g.constant_int(0, DType::kI64), a, tau}, cond, body);
  return {r[1], r[2]};
}

// Applies the reflectors of the compact form a [..., m, k'] (the first tau.size of them) to c: H c (left,
// c [..., m, p]) or c H (right, c [..., p, m]), for H_i in increasing order of i (forward) or decreasing;
// with `adjoint`, H_i^H = I - conj(tau_i) v v^H instead.
Value apply_reflectors(Graph& g, Value a, Value tau, Value c, bool left, bool forward, bool adjoint) {
  const Type ct = g.type(c);
  const int64_t count = g.type(tau).dims.back();
  if (count == 0 || ct.numel() == 0) return c;
  const std::vector<int64_t> batch = batch_of(ct);
  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> batch_positions = dim_range(0, batch_rank);
  auto body = [&](const std::vector<Value>& s) {
    Value i = forward ? s[0] : g.binary("subtract", g.constant_int(count - 1, DType::kI64), s[0]);
    Value v = reflector(g, a, i);
    Value tau_i = vector_element(g, tau, i);
    if (adjoint) tau_i = conjugate(g, tau_i);
    // left: c - tau v (v^H c); right: c - tau (c v) v^H
    const int64_t v_dim = left ? batch_rank : batch_rank + 1;
    const int64_t other_dim = left ? batch_rank + 1 : batch_rank;
    Value v_matrix = g.broadcast_in_dim(v, ct.dims, append(batch_positions, {v_dim}));
    Value w = g.reduce(g.binary("multiply", left ? conjugate(g, v_matrix) : v_matrix, s[1]), g.constant(0, ct.dtype),
                       {v_dim}, ir::Reducer::kAdd);
    Value tw = g.binary("multiply", g.broadcast_in_dim(tau_i, g.type(w).dims, batch_positions), w);
    Value update = g.binary("multiply", left ? v_matrix : conjugate(g, v_matrix),
                            g.broadcast_in_dim(tw, ct.dims, append(batch_positions, {other_dim})));
    return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)), g.binary("subtract", s[1], update)};
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], g.constant_int(count, DType::kI64), ir::Comparison::kLT)};
  };
  return g.while_loop({g.constant_int(0, DType::kI64), c}, cond, body)[1];
}

}  // namespace torchtpu::lowering
