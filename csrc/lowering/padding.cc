// Reflection and replication padding, forward and backward.
//
// Along each padded dim, output position o reads input position map(o): reflect mirrors around the edges
// without repeating them, replicate clamps to them. The map becomes a one-hot [out, in] matrix, so the
// forward is a contraction with it and the backward (a sum of the gradients of every output position that
// read an input position) is the contraction with its transpose: exact, and the same code for both.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

enum class PadMode { kReflect, kReplicate };

// One-hot [out, in] matrix of the map, in `dtype`.
Value pad_matrix(Graph& g, int64_t in, int64_t left, int64_t right, PadMode mode, DType dtype) {
  const int64_t out = in + left + right;
  const Type index_type{DType::kI64, {out, in}};
  auto constant = [&](int64_t v) { return g.constant_int(v, DType::kI64, {out, in}); };
  Value source = g.binary("subtract", g.iota(index_type, 0), constant(left));  // unpadded position
  if (mode == PadMode::kReplicate) {
    source = g.binary("minimum", g.binary("maximum", source, constant(0)), constant(in - 1));
  } else {
    source = g.unary("abs", source);                                                // mirror the left edge
    Value past_end = g.binary("subtract", constant(2 * (in - 1)), source);          // mirror the right edge
    source = g.select(g.compare(source, constant(in - 1), Comparison::kGT), past_end, source);
  }
  Value hit = g.compare(source, g.iota(index_type, 1), Comparison::kEQ);
  return g.select(hit, g.constant(1.0, dtype, {out, in}), g.constant(0.0, dtype, {out, in}));
}

// Pads (backward: unpads) the trailing padding.size() / 2 dims; padding is (left, right) pairs starting from
// the last dim, as torch.nn.functional.pad takes them.
Value apply_padding(Graph& g, Value x, const std::vector<int64_t>& padding, const std::vector<int64_t>& unpadded_dims,
                    PadMode mode, bool backward, DType dtype) {
  const int64_t rank = static_cast<int64_t>(unpadded_dims.size());
  for (size_t k = 0; k < padding.size() / 2; ++k) {
    const int64_t dim = rank - 1 - static_cast<int64_t>(k);
    Value matrix = pad_matrix(g, unpadded_dims[static_cast<size_t>(dim)], padding[2 * k], padding[2 * k + 1], mode, dtype);
    x = contract_dim(g, x, dim, matrix, backward ? 0 : 1, dtype);
  }
  return x;
}

std::vector<Value> pad_forward(LoweringContext& ctx, PadMode mode) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type result = ctx.outputs.at(0);
  const DType compute = is_floating(result.dtype) ? accumulation_dtype(result.dtype) : DType::kF64;
  Value y = apply_padding(g, g.convert(ctx.tensor(0), compute), ctx.ints(1), in.dims, mode, false, compute);
  return {g.convert(y, result.dtype)};
}

// *_backward(grad_output, self, padding)
std::vector<Value> pad_backward(LoweringContext& ctx, PadMode mode) {
  Graph& g = ctx.graph;
  const Type result = ctx.outputs.at(0);
  const DType compute = accumulation_dtype(result.dtype);
  Value dx = apply_padding(g, g.convert(ctx.tensor(0), compute), ctx.ints(2), ctx.type_of(1).dims, mode, true, compute);
  return {g.convert(dx, result.dtype)};
}

std::vector<Value> lower_reflection_pad(LoweringContext& ctx) { return pad_forward(ctx, PadMode::kReflect); }
std::vector<Value> lower_replication_pad(LoweringContext& ctx) { return pad_forward(ctx, PadMode::kReplicate); }
std::vector<Value> lower_reflection_pad_backward(LoweringContext& ctx) { return pad_backward(ctx, PadMode::kReflect); }
std::vector<Value> lower_replication_pad_backward(LoweringContext& ctx) {
  return pad_backward(ctx, PadMode::kReplicate);
}

}  // namespace

void add_padding_rules(std::vector<Rule>& table) {
  table.push_back({"aten::reflection_pad1d", &lower_reflection_pad});
  table.push_back({"aten::reflection_pad1d_backward", &lower_reflection_pad_backward});
  table.push_back({"aten::reflection_pad2d", &lower_reflection_pad});
  table.push_back({"aten::reflection_pad2d_backward", &lower_reflection_pad_backward});
  table.push_back({"aten::reflection_pad3d", &lower_reflection_pad});
  table.push_back({"aten::reflection_pad3d_backward", &lower_reflection_pad_backward});
  table.push_back({"aten::replication_pad1d", &lower_replication_pad});
  table.push_back({"aten::replication_pad1d_backward", &lower_replication_pad_backward});
  table.push_back({"aten::replication_pad2d", &lower_replication_pad});
  table.push_back({"aten::replication_pad2d_backward", &lower_replication_pad_backward});
  table.push_back({"aten::replication_pad3d", &lower_replication_pad});
  table.push_back({"aten::replication_pad3d_backward", &lower_replication_pad_backward});
}

}  // namespace torchtpu::lowering
