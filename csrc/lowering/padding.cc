// Reflection and replication padding, forward and backward.
//
// Along each padded dim, output position o reads input position map(o): reflect mirrors around the edges
// without repeating them, replicate clamps to them. The forward gathers by the map and the backward adds
// each output position's gradient into the input position it read (a scatter-add): exact, inf and NaN
// stay where they are, and any element type works (complex included).
#include <algorithm>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

enum class PadMode { kReflect, kReplicate };

// The input position each of the in + left + right output positions reads, as a 1-d i64 constant.
Value pad_map(Graph& g, int64_t in, int64_t left, int64_t right, PadMode mode) {
  std::vector<double> source;
  for (int64_t o = 0; o < in + left + right; ++o) {
    int64_t i = o - left;
    if (mode == PadMode::kReplicate) {
      i = std::min(std::max<int64_t>(i, 0), in - 1);
    } else {
      if (i < 0) i = -i;                           // mirror the left edge
      if (i > in - 1) i = 2 * (in - 1) - i;        // mirror the right edge
    }
    source.push_back(static_cast<double>(i));
  }
  return constant_vector(g, source, DType::kI64);
}

// Pads the trailing padding.size() / 2 dims of x (unpadded_dims); padding is (left, right) pairs starting
// from the last dim, as torch.nn.functional.pad takes them.
Value pad(Graph& g, Value x, const std::vector<int64_t>& padding, PadMode mode) {
  const int64_t rank = g.type(x).rank();
  for (size_t k = 0; k < padding.size() / 2; ++k) {
    const int64_t dim = rank - 1 - static_cast<int64_t>(k);
    const int64_t in = g.type(x).dims[static_cast<size_t>(dim)];
    x = take_along(g, x, dim, pad_map(g, in, padding[2 * k], padding[2 * k + 1], mode));
  }
  return x;
}

// The backward: along each padded dim, the gradient of every output position summed into the input
// position it read.
Value unpad(Graph& g, Value grad, const std::vector<int64_t>& padding, const std::vector<int64_t>& unpadded_dims,
            PadMode mode) {
  const int64_t rank = static_cast<int64_t>(unpadded_dims.size());
  for (size_t k = padding.size() / 2; k-- > 0;) {
    const int64_t dim = rank - 1 - static_cast<int64_t>(k);
    std::vector<int64_t> dims = g.type(grad).dims;
    dims[static_cast<size_t>(dim)] = unpadded_dims[static_cast<size_t>(dim)];
    Value zeros = g.constant(0.0, g.type(grad).dtype, dims);
    Value map = pad_map(g, dims[static_cast<size_t>(dim)], padding[2 * k], padding[2 * k + 1], mode);
    grad = scatter_along(g, zeros, dim, map, grad, ir::Reducer::kAdd);
  }
  return grad;
}

std::vector<Value> pad_forward(LoweringContext& ctx, PadMode mode) {
  return {pad(ctx.graph, ctx.tensor(0), ctx.ints(1), mode)};
}

// *_backward(grad_output, self, padding): accumulates in float32 for 16-bit gradients.
std::vector<Value> pad_backward(LoweringContext& ctx, PadMode mode) {
  Graph& g = ctx.graph;
  const Type result = ctx.outputs.at(0);
  Value grad = g.convert(ctx.tensor(0), accumulation_dtype(result.dtype));
  return {g.convert(unpad(g, grad, ctx.ints(2), ctx.type_of(1).dims, mode), result.dtype)};
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
