#include "lowering/matrix.h"

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
}  // namespace torchtpu::lowering
