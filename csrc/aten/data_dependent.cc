#include "aten/data_dependent.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/IndexingUtils.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "aten/fallback.h"
#include "aten/fused.h"
#include "aten/op_kernel.h"

namespace torchtpu::aten {
namespace {

using IndexList = c10::List<std::optional<at::Tensor>>;

// The op's one sync: a pending fused trace runs first (counted under its own reason), then the count, a
// 0-dim int64 tensor, comes back to the host.
int64_t read_count(const at::Tensor& count) {
  flush_trace("data-dependent shape");
  return count.item<int64_t>();
}

// Rows of the static program that produces `count` results out of at most `limit`: the next power of two,
// so one program serves every count in (rows/2, rows], and never more than `limit`.
int64_t program_rows(int64_t count, int64_t limit) {
  if (count == 0) return 0;
  int64_t rows = 1;
  while (rows < count) rows *= 2;
  return std::min(rows, limit);
}

// The runs of equal neighbours along dim 0 of `values` (not empty; `starts_run` [n] marks each run's first
// row): each run's first row and, when asked for, each run's length and each row's run number. The number of
// runs is the one host read.
struct Runs {
  at::Tensor values;
  at::Tensor counts;  // defined when asked for
  at::Tensor run_of;  // defined when asked for
};

Runs runs_of(const at::Tensor& values, const at::Tensor& starts_run, bool with_run_of, bool with_counts) {
  const int64_t n = values.size(0);
  const int64_t count = read_count(at::count_nonzero(starts_run));
  const int64_t rows = program_rows(count, n);
  // Rows past the count start at n: the last run then ends at n, and the lengths past the count are 0.
  at::Tensor starts = at::nonzero_static(starts_run, rows, n).view({-1});
  Runs runs;
  runs.values = values.index_select(0, at::clamp_max(starts, n - 1)).slice(0, 0, count);
  if (with_counts) {
    at::Tensor ends = at::cat({starts.slice(0, 1), at::full({1}, n, starts.options())});
    runs.counts = at::sub(ends, starts).slice(0, 0, count);
  }
  if (with_run_of) runs.run_of = at::sub(at::cumsum(starts_run, 0, at::kLong), 1);
  return runs;
}

// The runs of equal neighbours in `flat` (1-d, not empty). NaN != NaN, so each NaN is a run of its own, as on
// CPU.
Runs equal_runs(const at::Tensor& flat, bool with_run_of, bool with_counts) {
  const int64_t n = flat.size(0);
  at::Tensor starts_run = at::cat({at::ones({1}, flat.options().dtype(at::kBool)),
                                   at::ne(flat.slice(0, 1), flat.slice(0, 0, n - 1))});
  return runs_of(flat, starts_run, with_run_of, with_counts);
}

// unique_dim and unique_consecutive with a dim: the slices of `self` along `dim` as rows [n, w], optionally
// sorted lexicographically first (stable sorts from the last column to the first), then their runs of equal
// neighbours. Returns (values, inverse, counts) as CPU does.
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_slices(const at::Tensor& self, int64_t dim, bool sort,
                                                             bool return_inverse, bool return_counts) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  const at::Tensor moved = self.movedim(dim, 0);
  const int64_t n = moved.size(0);
  at::Tensor rows = moved.reshape({n, -1});
  at::Tensor order = at::arange(n, self.options().dtype(at::kLong));
  if (sort) {
    for (int64_t column = rows.size(1) - 1; column >= 0; --column) {
      const at::Tensor keys = rows.select(1, column).index_select(0, order);
      order = order.index_select(0, std::get<1>(at::sort(keys, /*stable=*/true, 0, /*descending=*/false)));
    }
    rows = rows.index_select(0, order);
  }
  at::Tensor starts_run = at::cat({at::ones({1}, self.options().dtype(at::kBool)),
                                   at::ne(rows.slice(0, 1), rows.slice(0, 0, n - 1)).any(1)});
  Runs runs = runs_of(rows, starts_run, return_inverse, return_counts);
  std::vector<int64_t> shape = moved.sizes().vec();
  shape[0] = runs.values.size(0);
  at::Tensor values = runs.values.reshape(shape).movedim(0, dim).contiguous();
  const at::TensorOptions index_options = self.options().dtype(at::kLong);
  at::Tensor inverse = at::empty({0}, index_options), counts = at::empty({0}, index_options);
  if (return_inverse) inverse = sort ? at::zeros_like(order).scatter(0, order, runs.run_of) : runs.run_of;
  if (return_counts) counts = runs.counts;
  return {values, inverse, counts};
}

// Whether unique over slices along `dim` has the trivial cases CPU answers without comparing any rows (no
// slices, or slices of no elements): those run on the CPU.
bool trivially_unique(const at::Tensor& self, int64_t dim) {
  return self.numel() == 0 || self.size(c10::maybe_wrap_dim(dim, self.dim())) == 0;
}

bool is_mask(const std::optional<at::Tensor>& index) {
  return index.has_value() && index->defined() &&
         (index->scalar_type() == at::kBool || index->scalar_type() == at::kByte);
}

// The masks among `indices` replaced by their integer indices, each through the device nonzero (one sync
// per mask), with CPU's checks and messages.
IndexList integer_indices(const at::Tensor& self, const IndexList& indices) {
  IndexList result;
  for (const at::Tensor& index : at::native::expandTensors(self, indices)) {
    result.push_back(index.defined() ? std::optional<at::Tensor>(index) : std::nullopt);
  }
  return result;
}

// Whether self[indices] = values is one mask whose values do not depend on how many elements it selects
// (their dim facing the selection is absent or 1), which the lowered index_put writes as a select.
bool is_count_free_mask_put(const at::Tensor& self, const IndexList& indices, const at::Tensor& values) {
  int64_t mask_at = -1;
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::optional<at::Tensor> index = indices.get(i);
    if (!index.has_value() || !index->defined()) continue;
    if (mask_at >= 0 || !is_mask(index)) return false;
    mask_at = static_cast<int64_t>(i);
  }
  const int64_t mask_rank = indices.get(static_cast<size_t>(mask_at))->dim();
  if (mask_rank == 0) return false;
  // self[mask] has the count at dim mask_at of a result of rank self.dim() - mask_rank + 1.
  const int64_t result_rank = self.dim() - mask_rank + 1;
  const int64_t count_dim = mask_at - (result_rank - values.dim());
  if (values.dim() > result_rank) return false;
  return count_dim < 0 || values.size(count_dim) == 1;
}

}  // namespace

at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  // CPU's checks, in CPU's order and words.
  TORCH_CHECK_NOT_IMPLEMENTED(c10::isIntegralType(self.scalar_type(), /*includeBool=*/false),
                              "\"bincount_tpu\" not implemented for '", self.scalar_type(), "'");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (self.dim() == 1 && self.numel() == 0) return at::zeros({minlength}, self.options().dtype(at::kLong));
  TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
  const bool weighted = weights.has_value() && weights->defined();
  if (weighted) {
    TORCH_CHECK(weights->dim() == 1 && weights->size(0) == self.size(0),
                "weights should be 1-d and have the same length as input");
  }
  // The one sync: the smallest and the largest value.
  flush_trace("data-dependent shape");
  const auto [lowest, highest] = at::aminmax(self);
  const at::Tensor bounds = at::stack({lowest, highest}).to(at::kLong).cpu();
  TORCH_CHECK(bounds[0].item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
  const int64_t length = std::max(bounds[1].item<int64_t>() + 1, minlength);
  // As CPU: counts are int64; float32 weights sum in float32, any other weights in float64.
  const at::ScalarType dtype =
      !weighted ? at::kLong : weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  const at::Tensor added = weighted ? weights->to(dtype) : at::ones_like(self, self.options().dtype(at::kLong));
  // A program per power of two of the length, as the ops above; the result is its leading part.
  const int64_t rows = program_rows(length, std::numeric_limits<int64_t>::max());
  const at::Tensor index = self.scalar_type() == at::kInt ? self : self.to(at::kLong);  // index_add's index types
  return at::zeros({rows}, self.options().dtype(dtype)).index_add_(0, index, added).slice(0, 0, length);
}

at::Tensor nonzero(const at::Tensor& self) {
  const int64_t count = read_count(at::count_nonzero(self));
  return at::nonzero_static(self, program_rows(count, self.numel()), -1).slice(0, 0, count);
}

at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  const at::Tensor result = torchtpu::aten::nonzero(self);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  const std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  const at::Tensor flat_mask = mask.expand(shape).reshape({-1});
  const int64_t count = read_count(at::count_nonzero(flat_mask));
  // Padding rows take element 0, which exists whenever there is padding (count > 0).
  const at::Tensor positions = at::nonzero_static(flat_mask, program_rows(count, flat_mask.numel()), 0).view({-1});
  return self.expand(shape).reshape({-1}).index_select(0, positions).slice(0, 0, count);
}

at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  const at::Tensor result = torchtpu::aten::masked_select(self, mask);
  at::native::resize_output(out, result.sizes());
  return out.copy_(result);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool /*sorted*/, bool return_inverse,
                                                       bool return_counts) {
  const at::Tensor flat = self.reshape({-1});
  const at::TensorOptions index_options = self.options().dtype(at::kLong);
  at::Tensor inverse = at::empty({0}, index_options), counts = at::empty({0}, index_options);
  if (flat.numel() == 0) {
    if (return_inverse) inverse = at::empty(self.sizes(), index_options);
    return {at::empty({0}, self.options()), inverse, counts};
  }
  // A stable sort keeps equal values (and NaNs, sorted last) in input order, as CPU's runs have them.
  const auto [sorted_values, order] = at::sort(flat, /*stable=*/true, 0, /*descending=*/false);
  Runs runs = equal_runs(sorted_values, return_inverse, return_counts);
  if (return_inverse) inverse = at::zeros_like(order).scatter(0, order, runs.run_of).view(self.sizes());
  if (return_counts) counts = runs.counts;
  return {runs.values, inverse, counts};
}

void unique_dim_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (self, dim, sorted, return_inverse, return_counts); CPU sorts whatever `sorted` says.
  const size_t first = stack->size() - 5;
  const at::Tensor self = (*stack)[first].toTensor();
  const int64_t dim = (*stack)[first + 1].toInt();
  if (trivially_unique(self, dim)) return cpu_fallback(op, stack);
  auto [values, inverse, counts] =
      unique_slices(self, dim, /*sort=*/true, (*stack)[first + 3].toBool(), (*stack)[first + 4].toBool());
  torch::jit::drop(*stack, 5);
  torch::jit::push(*stack, values, inverse, counts);
}

std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [values, inverse, counts] = unique2(self, sorted, return_inverse, false);
  return {values, inverse};
}

void unique_consecutive_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (self, return_inverse, return_counts, dim)
  const size_t first = stack->size() - 4;
  const at::Tensor self = (*stack)[first].toTensor();
  const bool return_inverse = (*stack)[first + 1].toBool(), return_counts = (*stack)[first + 2].toBool();
  if (!(*stack)[first + 3].isNone()) {
    const int64_t dim = (*stack)[first + 3].toInt();
    if (trivially_unique(self, dim)) return cpu_fallback(op, stack);
    auto [values, inverse, counts] = unique_slices(self, dim, /*sort=*/false, return_inverse, return_counts);
    torch::jit::drop(*stack, 4);
    torch::jit::push(*stack, values, inverse, counts);
    return;
  }
  const at::Tensor flat = self.reshape({-1});
  const at::TensorOptions index_options = self.options().dtype(at::kLong);
  at::Tensor values = at::empty({0}, self.options());
  at::Tensor inverse = at::empty(return_inverse ? self.sizes() : at::IntArrayRef{0}, index_options);
  at::Tensor counts = at::empty({0}, index_options);
  if (flat.numel() > 0) {
    Runs runs = equal_runs(flat, return_inverse, return_counts);
    values = runs.values;
    if (return_inverse) inverse = runs.run_of.view(self.sizes());
    if (return_counts) counts = runs.counts;
  }
  torch::jit::drop(*stack, 4);
  torch::jit::push(*stack, values, inverse, counts);
}

void index_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (self, indices)
  const size_t first = stack->size() - 2;
  const at::Tensor self = (*stack)[first].toTensor();
  const IndexList indices = (*stack)[first + 1].toOptionalTensorList();
  int64_t defined = 0, mask_at = -1;
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::optional<at::Tensor> index = indices.get(i);
    if (index.has_value() && index->defined()) ++defined;
    if (is_mask(index)) mask_at = static_cast<int64_t>(i);
  }
  if (mask_at < 0) return op_kernel(op, stack);
  const at::Tensor mask = *indices.get(static_cast<size_t>(mask_at));
  if (defined > 1 || mask.scalar_type() != at::kBool || mask.dim() == 0) {
    // Several indices must broadcast against the count, so they take count-sized integer indices.
    (*stack)[first + 1] = integer_indices(self, indices);
    return op_kernel(op, stack);
  }
  // One bool mask alone: its integer indices padded to the program's rows, the result sliced to the count.
  for (int64_t j = 0; j < mask.dim(); ++j) {
    TORCH_CHECK_INDEX(mask.size(j) == self.size(mask_at + j), "The shape of the mask ", mask.sizes(), " at index ", j,
                      " does not match the shape of the indexed tensor ", self.sizes(), " at index ", mask_at + j);
  }
  const int64_t count = read_count(at::count_nonzero(mask));
  // Padding rows index 0, which every masked dim has whenever there is padding (count > 0).
  const at::Tensor positions = at::nonzero_static(mask, program_rows(count, mask.numel()), 0);
  IndexList padded;
  for (int64_t i = 0; i < mask_at; ++i) padded.push_back(std::nullopt);
  for (int64_t j = 0; j < mask.dim(); ++j) padded.push_back(positions.select(1, j));
  (*stack)[first + 1] = padded;
  op_kernel(op, stack);
  // The selection is dim mask_at of the result; a slice past dim 0 is strided, and CPU's result is not.
  const at::Tensor result = stack->back().toTensor().slice(mask_at, 0, count);
  stack->back() = mask_at == 0 ? result : result.contiguous();
}

void index_put_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (self, indices, values, accumulate[, unsafe])
  const size_t first = stack->size() - op.schema().arguments().size();
  const at::Tensor self = (*stack)[first].toTensor();
  const IndexList indices = (*stack)[first + 1].toOptionalTensorList();
  const at::Tensor values = (*stack)[first + 2].toTensor();
  bool has_mask = false;
  for (size_t i = 0; i < indices.size(); ++i) has_mask = has_mask || is_mask(indices.get(i));
  // As CPU: a mask takes values of any dtype (it fills them in, converted); integer indices need self's.
  TORCH_CHECK(has_mask || values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ", self.scalar_type(),
              " for the destination and ", values.scalar_type(), " for the source.");
  if (has_mask && !is_count_free_mask_put(self, indices, values)) {
    (*stack)[first + 1] = integer_indices(self, indices);
  }
  op_kernel(op, stack);
}

}  // namespace torchtpu::aten
