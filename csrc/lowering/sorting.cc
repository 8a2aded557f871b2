// Sorting along one dim: sort (always stable, so argsort's stable=True and PyTorch's tie order hold) and
// topk, which is a sort followed by a slice.
//
// Floats order NaN as the largest value, as PyTorch does: last when ascending, first when descending.
// -0.0 and 0.0 compare equal and keep their input order.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

std::string compare_line(const std::string& result, const std::string& a, const std::string& b,
                         const char* direction, DType dtype) {
  const std::string t = ir::to_mlir(Type{dtype, {}});
  const char* compare_type = is_floating(dtype) ? "FLOAT"
                             : (is_unsigned(dtype) || dtype == DType::kBool) ? "UNSIGNED"
                                                                             : "SIGNED";
  return "      " + result + " = \"stablehlo.compare\"(" + a + ", " + b +
         ") {comparison_direction = #stablehlo<comparison_direction " + direction +
         ">, compare_type = #stablehlo<comparison_type " + compare_type + ">} : (" + t + ", " + t +
         ") -> tensor<i1>\n";
}

std::string logic_line(const std::string& result, const char* op, const std::string& a, const std::string& b) {
  return "      " + result + " = \"stablehlo." + op + "\"(" + a + ", " + b +
         ") : (tensor<i1>, tensor<i1>) -> tensor<i1>\n";
}

// The comparator region of a sort over (keys, indices): "lhs goes first" on the keys only; the sort's
// stability orders equal keys by position. For floats the NaN clause makes the order total.
std::string comparator(DType key, bool descending) {
  std::string body = compare_line("%c_cmp", "%lhs0", "%rhs0", descending ? "GT" : "LT", key);
  std::string result = "%c_cmp";
  if (is_floating(key)) {
    // Ascending: a number precedes a NaN. Descending: a NaN precedes a number.
    body += compare_line("%c_lnan", "%lhs0", "%lhs0", "NE", key);
    body += compare_line("%c_rnan", "%rhs0", "%rhs0", "NE", key);
    const std::string first_nan = descending ? "%c_lnan" : "%c_rnan";
    const std::string second_nan = descending ? "%c_rnan" : "%c_lnan";
    body += "      %c_notnan = \"stablehlo.not\"(" + second_nan + ") : (tensor<i1>) -> tensor<i1>\n";
    body += logic_line("%c_nan", "and", first_nan, "%c_notnan");
    body += logic_line("%c_res", "or", "%c_cmp", "%c_nan");
    result = "%c_res";
  }
  body += "      \"stablehlo.return\"(" + result + ") : (tensor<i1>) -> ()";
  return ir::region_text({{"%lhs0", key}, {"%rhs0", key}, {"%lhs1", DType::kI64}, {"%rhs1", DType::kI64}}, body);
}

struct Sorted {
  Value values;
  Value indices;  // int64
};

// Stable sort of `x` along `dim`, carrying each element's original position.
Sorted sort_along(Graph& g, Value x, int64_t dim, bool descending) {
  const Type t = g.type(x);
  Value positions = g.iota(Type{DType::kI64, t.dims}, dim);
  const std::string attributes = "dimension = " + std::to_string(dim) + " : i64, is_stable = true";
  std::vector<Value> r = g.op_multi("stablehlo.sort", {x, positions}, {t, Type{DType::kI64, t.dims}}, attributes,
                                    comparator(t.dtype, descending));
  return {r[0], r[1]};
}

// A 0-d input sorts as a one-element vector.
Sorted sort_input(LoweringContext& ctx, int64_t dim_arg, bool descending) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  if (t.rank() == 0) return sort_along(g, g.reshape(x, {1}), 0, descending);
  return sort_along(g, x, reduction_dims({dim_arg}, t.rank())[0], descending);
}

// sort(self, dim, descending) -> (values, indices)
std::vector<Value> lower_sort(LoweringContext& ctx) {
  Sorted s = sort_input(ctx, ctx.integer(1), ctx.boolean(2));
  Graph& g = ctx.graph;
  return {g.reshape(s.values, out(ctx, 0).dims), g.reshape(s.indices, out(ctx, 1).dims)};
}

// sort.stable(self, *, stable?, dim, descending): every sort here is stable, so `stable` changes nothing.
std::vector<Value> lower_sort_stable(LoweringContext& ctx) {
  Sorted s = sort_input(ctx, ctx.integer(2), ctx.boolean(3));
  Graph& g = ctx.graph;
  return {g.reshape(s.values, out(ctx, 0).dims), g.reshape(s.indices, out(ctx, 1).dims)};
}

// topk(self, k, dim, largest, sorted): the first k of a full sort. Returning them sorted also satisfies
// sorted=False, which promises no order.
std::vector<Value> lower_topk(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Sorted s = sort_input(ctx, ctx.integer(2), ctx.boolean(3));
  const Type t = g.type(s.values);
  const int64_t dim = ctx.type_of(0).rank() == 0 ? 0 : reduction_dims({ctx.integer(2)}, t.rank())[0];
  std::vector<int64_t> start(t.dims.size(), 0), limit = t.dims, unit(t.dims.size(), 1);
  limit[static_cast<size_t>(dim)] = ctx.integer(1);
  Value values = g.slice(s.values, start, limit, unit);
  Value indices = g.slice(s.indices, start, limit, unit);
  return {g.reshape(values, out(ctx, 0).dims), g.reshape(indices, out(ctx, 1).dims)};
}

}  // namespace

void add_sorting_rules(std::vector<Rule>& table) {
  table.push_back({"aten::sort", &lower_sort});
  table.push_back({"aten::sort.stable", &lower_sort_stable});
  table.push_back({"aten::topk", &lower_topk});
}

}  // namespace torchtpu::lowering
