// Matrix building blocks shared by the linear-algebra rule files (linalg_decomp.cc, linalg_orthogonal.cc,
// linalg_ldl.cc). Internal to lowering/. Matrices are the last two dims of a value; any leading dims are a
// batch.
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "lowering/helpers.h"

namespace torchtpu::lowering {

// The batch dims of a [..., m, n] type.
std::vector<int64_t> batch_of(const Type& t);
// dims followed by tail.
std::vector<int64_t> append(std::vector<int64_t> dims, std::initializer_list<int64_t> tail);
// Swaps the last two dims.
Value transpose_matrix(Graph& g, Value x);
// The conjugate transpose (the transpose, for real x).
Value adjoint_matrix(Graph& g, Value x);
// The real part of x (x itself when real).
Value real_part(Graph& g, Value x);
// a @ b over equal batch dims.
Value matmul(Graph& g, Value a, Value b);
// Row and column index of every element of a [..., m, n] shape, as i64.
Value row_index(Graph& g, const std::vector<int64_t>& dims);
Value column_index(Graph& g, const std::vector<int64_t>& dims);
// The identity matrix (of every batch entry) of `dims`.
Value identity(Graph& g, DType dtype, const std::vector<int64_t>& dims);
// Zeroes the triangle above (lower) or below (upper) the diagonal.
Value keep_triangle(Graph& g, Value x, bool lower);
// The diagonal of a square [..., n, n] as [..., n]: the off-diagonal elements are masked out, so infinities
// and NaNs there don't leak into it.
Value diagonal_of(Graph& g, Value x);
// x[starts : starts + sizes] with i64 scalar starts.
Value dynamic_slice(Graph& g, Value x, const std::vector<Value>& starts, const std::vector<int64_t>& sizes);
// Starts for a dynamic slice at (row, column) of every matrix in a batch of `batch_rank` dims.
std::vector<Value> matrix_starts(Graph& g, size_t batch_rank, Value row, Value column);
// Row `k` (an i64 scalar, the same for the whole batch) of [..., m, n], broadcast back to [..., m, n].
Value broadcast_row(Graph& g, Value x, Value k);
// Column `k` of [..., m, n], broadcast back to [..., m, n].
Value broadcast_column(Graph& g, Value x, Value k);
// Element [..., k] of a [..., n] vector, k an i64 scalar: [...].
Value vector_element(Graph& g, Value v, Value k);
// stablehlo.triangular_solve: op(a) x = b (left) or x op(a) = b, reading only a's named triangle; op(a) is
// a, or with `transpose_a` its adjoint (the transpose, for real a). a and b share their batch dims.
Value triangular_solve(Graph& g, Value a, Value b, bool left, bool lower, bool unit_diagonal, bool transpose_a);
// out[..., i, :] = x[..., rows[..., i], :] for x [..., m, k] and i64 rows [..., m], by one gather.
Value gather_rows(Graph& g, Value x, Value rows);
// The inverse of a permutation [..., m]: inverse[permutation[i]] = i, found as the position of each value.
Value invert_permutation(Graph& g, Value permutation);
// Machine epsilon and the smallest normal number of the (real) dtype a decomposition computes in.
double epsilon(DType dtype);
double smallest_normal(DType dtype);
// LAPACK's compact Householder QR (geqrf) of a [..., m, n]: (compact a, tau [..., min(m, n)]); see
// linalg_orthogonal.cc for the conventions. Complex values take LAPACK's complex reflectors.
std::pair<Value, Value> householder_qr(Graph& g, Value a);
// Applies the reflectors of a compact form a [..., m, k'] (the first tau.size of them) to c: H c (left) or
// c H (right), H_i in increasing order of i (forward) or decreasing; with `adjoint`, H_i^H instead.
Value apply_reflectors(Graph& g, Value a, Value tau, Value c, bool left, bool forward, bool adjoint);

// The rule families linalg_decomp.cc's add_linalg_decomposition_rules adds.
void add_linalg_orthogonal_rules(std::vector<Rule>& table);
void add_linalg_ldl_rules(std::vector<Rule>& table);
void add_linalg_eig_rules(std::vector<Rule>& table);

}  // namespace torchtpu::lowering
