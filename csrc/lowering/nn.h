// Shared pieces of the neural-network rule families (nn*.cc). Internal to lowering/.
#pragma once

#include <vector>

#include "lowering/helpers.h"

namespace torchtpu::lowering {

// The nn family is split by domain; add_nn_rules (nn.cc) calls each part.
void add_nn_activation_rules(std::vector<Rule>& table);
void add_nn_norm_rules(std::vector<Rule>& table);
void add_nn_conv_rules(std::vector<Rule>& table);
void add_nn_pool_rules(std::vector<Rule>& table);
void add_upsample_rules(std::vector<Rule>& table);
void add_nn_distance_rules(std::vector<Rule>& table);
void add_nn_loss_rules(std::vector<Rule>& table);
void add_nn_ctc_rules(std::vector<Rule>& table);

// Reduces `x` over `dims` with `reducer` and broadcasts the result back to x's shape, so it can be
// combined elementwise with x (the "keepdim then expand" step of softmax and the norms).
Value reduce_keep(Graph& g, Value x, const std::vector<int64_t>& dims, ir::Reducer reducer);
// Sum of `x` over `dims` (no broadcast back).
Value sum_over(Graph& g, Value x, const std::vector<int64_t>& dims);
// A floating scalar constant of x's dtype and shape.
Value like(Graph& g, Value x, double value);
// The dims of `x` other than `dims`, in order: where broadcast_in_dim puts a reduced value back.
std::vector<int64_t> kept_dims(int64_t rank, const std::vector<int64_t>& dims);

// x with dim `dim` replaced by x[..., index[k], ...] for each entry of the 1-d integer `index`.
Value take_along(Graph& g, Value x, int64_t dim, Value index);
// `base` with each slice k of `updates` along `dim` combined by `reducer` (kAdd, kMul, kMax, kMin) into
// position index[k] of that dim: with kAdd, the transpose of take_along (repeated indices accumulate).
Value scatter_along(Graph& g, Value base, int64_t dim, Value index, Value updates, ir::Reducer reducer);

// The p-norm of `x` over its last dim, with PyTorch's special cases p = 0 (count of nonzeros), 1, 2 and
// infinity (nn_distance.cc).
Value p_norm_last(Graph& g, Value x, double p);

// output_mask (bool[3]) of a backward op, where the kernel passes it as an int list; otherwise every
// output is requested.
std::vector<bool> output_mask(const LoweringContext& ctx, size_t i, size_t count);

}  // namespace torchtpu::lowering
