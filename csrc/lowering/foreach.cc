// The foreach ops (torch.optim's multi-tensor paths and clip_grad_norm_): one program per list call.
//
// `_foreach_X(list, ...)` applies the rule of a per-tensor op to each element. Each overload is one table
// line saying which per-tensor op serves it and where each of that op's arguments comes from; the lowering
// builds one sub-context per element and calls the per-tensor rule. Scalars stay runtime operands: a
// `Scalar` is one operand for every element, a `Scalar[]` one f64 array sliced per element.
#include <stdexcept>
#include <unordered_map>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

// Where one argument of the per-tensor op comes from.
enum class From {
  kElement,           // element k of tensor-list argument `index`
  kArgument,          // argument `index` as it is (a shared tensor, a dtype, ...)
  kScalar,            // Scalar argument `index`, as a scalar
  kScalarAsTensor,    // Scalar argument `index`, as a 0-d tensor operand (for X.Tensor overloads)
  kListScalar,        // element k of Scalar[] argument `index`, as a scalar
  kListScalarAsTensor,// element k of Scalar[] argument `index`, as a 0-d tensor operand
  kNone,              // an absent optional argument
  kFalse,             // a bool argument that is false
};

struct Source {
  From from;
  size_t index = 0;
};

struct ForeachSpec {
  std::string per_tensor_op;
  std::vector<Source> args;
};

Source element(size_t i) { return {From::kElement, i}; }
Source argument(size_t i) { return {From::kArgument, i}; }
Source scalar(size_t i) { return {From::kScalar, i}; }
Source scalar_as_tensor(size_t i) { return {From::kScalarAsTensor, i}; }
Source list_scalar(size_t i) { return {From::kListScalar, i}; }
Source list_scalar_as_tensor(size_t i) { return {From::kListScalarAsTensor, i}; }
Source none() { return {From::kNone}; }
Source false_flag() { return {From::kFalse}; }

const std::unordered_map<std::string, ForeachSpec>& specs() {
  static const std::unordered_map<std::string, ForeachSpec> table = [] {
    std::unordered_map<std::string, ForeachSpec> t;
    for (const char* unary : {"abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
                              "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
                              "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "zero", "max"}) {
      t[std::string("aten::_foreach_") + unary] = {std::string("aten::") + unary, {element(0)}};
    }
    // add / sub carry alpha on their List and Tensor overloads.
    for (const char* op : {"add", "sub"}) {
      const std::string base = std::string("aten::_foreach_") + op;
      const char* tensor_op = std::string(op) == "add" ? "aten::add.Tensor" : "aten::sub.Tensor";
      t[base + ".List"] = {tensor_op, {element(0), element(1), scalar(2)}};
      t[base + ".Scalar"] = {tensor_op, {element(0), scalar_as_tensor(1), none()}};
      t[base + ".ScalarList"] = {tensor_op, {element(0), list_scalar_as_tensor(1), none()}};
    }
    t["aten::_foreach_add.Tensor"] = {"aten::add.Tensor", {element(0), argument(1), scalar(2)}};
    // Binary ops without alpha; mul and div also take a 0-d tensor (clip_grad_norm_'s clip coefficient).
    const struct {
      const char* name;
      const char* tensor_op;
      bool tensor_overload;
    } binaries[] = {{"mul", "aten::mul.Tensor", true},
                    {"div", "aten::div.Tensor", true},
                    {"maximum", "aten::maximum", false},
                    {"minimum", "aten::minimum", false}};
    for (const auto& op : binaries) {
      const std::string base = std::string("aten::_foreach_") + op.name;
      t[base + ".List"] = {op.tensor_op, {element(0), element(1)}};
      t[base + ".Scalar"] = {op.tensor_op, {element(0), scalar_as_tensor(1)}};
      t[base + ".ScalarList"] = {op.tensor_op, {element(0), list_scalar_as_tensor(1)}};
      if (op.tensor_overload) t[base + ".Tensor"] = {op.tensor_op, {element(0), argument(1)}};
    }
    t["aten::_foreach_clamp_min.List"] = {"aten::clamp_min.Tensor", {element(0), element(1)}};
    t["aten::_foreach_clamp_min.Scalar"] = {"aten::clamp_min", {element(0), scalar(1)}};
    t["aten::_foreach_clamp_min.ScalarList"] = {"aten::clamp_min", {element(0), list_scalar(1)}};
    t["aten::_foreach_clamp_max.List"] = {"aten::clamp_max.Tensor", {element(0), element(1)}};
    t["aten::_foreach_clamp_max.Scalar"] = {"aten::clamp_max", {element(0), scalar(1)}};
    t["aten::_foreach_clamp_max.ScalarList"] = {"aten::clamp_max", {element(0), list_scalar(1)}};
    t["aten::_foreach_pow.List"] = {"aten::pow.Tensor_Tensor", {element(0), element(1)}};
    t["aten::_foreach_pow.Scalar"] = {"aten::pow.Tensor_Scalar", {element(0), scalar(1)}};
    t["aten::_foreach_pow.ScalarList"] = {"aten::pow.Tensor_Scalar", {element(0), list_scalar(1)}};
    t["aten::_foreach_pow.ScalarAndTensor"] = {"aten::pow.Scalar", {scalar(0), element(1)}};
    for (const char* op : {"addcmul", "addcdiv"}) {
      const std::string base = std::string("aten::_foreach_") + op;
      const char* tensor_op = std::string(op) == "addcmul" ? "aten::addcmul" : "aten::addcdiv";
      t[base + ".Scalar"] = {tensor_op, {element(0), element(1), element(2), scalar(3)}};
      t[base + ".ScalarList"] = {tensor_op, {element(0), element(1), element(2), list_scalar(3)}};
    }
    t["aten::_foreach_lerp.List"] = {"aten::lerp.Tensor", {element(0), element(1), element(2)}};
    t["aten::_foreach_lerp.Scalar"] = {"aten::lerp.Scalar", {element(0), element(1), scalar(2)}};
    t["aten::_foreach_lerp.ScalarList"] = {"aten::lerp.Scalar", {element(0), element(1), list_scalar(2)}};
    // linalg_vector_norm(self, ord, dim=None, keepdim=False, dtype)
    t["aten::_foreach_norm.Scalar"] = {"aten::linalg_vector_norm", {element(0), scalar(1), none(), false_flag(), argument(2)}};
    t["aten::_foreach_copy"] = {"aten::copy", {element(0), element(1), argument(2)}};
    return t;
  }();
  return table;
}

// The per-tensor rule behind a foreach op, found once.
const Rule& per_tensor_rule(const std::string& op) {
  const Rule* rule = find_rule(op);
  if (rule == nullptr) throw std::logic_error("foreach: no rule for " + op);
  return *rule;
}

// Element k of Scalar[] argument i, as a rank-0 f64 value of its operand.
Value list_element(LoweringContext& ctx, size_t i, int64_t k) {
  Graph& g = ctx.graph;
  return g.reshape(g.slice(ctx.operand(i), {k}, {k + 1}, {1}), {});
}

std::vector<Value> lower_foreach(LoweringContext& ctx) {
  const ForeachSpec& spec = specs().at(ctx.op);
  const Rule& rule = per_tensor_rule(spec.per_tensor_op);
  std::vector<Value> results;
  for (size_t k = 0; k < ctx.outputs.size(); ++k) {
    LoweringContext sub{ctx.graph, {}, {ctx.outputs[k]}, ctx.outputs[k].dtype, ctx.rng_state,
                         spec.per_tensor_op.c_str()};
    std::vector<size_t> scalar_sources;  // sub argument -> parent argument, for dynamic scalars
    for (const Source& source : spec.args) {
      Arg a;
      switch (source.from) {
        case From::kElement:
          a.kind = Arg::Kind::kTensor;
          a.tensor = ctx.args.at(source.index).tensors.at(k);
          break;
        case From::kArgument:
          a = ctx.args.at(source.index);
          break;
        case From::kScalar:
          a = ctx.args.at(source.index);
          if (a.dynamic) a.operand = ctx.operand(source.index);
          break;
        case From::kScalarAsTensor:
          a.kind = Arg::Kind::kTensor;
          a.tensor = ctx.operand(source.index);
          break;
        case From::kListScalar: {
          const Arg& list = ctx.args.at(source.index);
          a.kind = Arg::Kind::kDouble;
          a.real = list.reals.at(k);
          a.dynamic = true;
          a.operand = list_element(ctx, source.index, static_cast<int64_t>(k));
          break;
        }
        case From::kListScalarAsTensor:
          a.kind = Arg::Kind::kTensor;
          a.tensor = list_element(ctx, source.index, static_cast<int64_t>(k));
          break;
        case From::kNone:
          break;
        case From::kFalse:
          a.kind = Arg::Kind::kBool;
          break;
      }
      sub.args.push_back(a);
      scalar_sources.push_back(source.index);
    }
    std::vector<Value> element_results = rule.lower(sub);
    // A value the per-tensor rule read at compile time keys the whole foreach program by it.
    for (size_t j = 0; j < sub.args.size(); ++j) {
      const From from = spec.args[j].from;
      if (sub.args[j].read_statically && (from == From::kScalar || from == From::kListScalar)) {
        ctx.args.at(scalar_sources[j]).read_statically = true;
      }
    }
    results.push_back(element_results.at(0));
  }
  return results;
}

}  // namespace

const std::string* foreach_element_op(const std::string& op) {
  const auto it = specs().find(op);
  return it == specs().end() ? nullptr : &it->second.per_tensor_op;
}

void add_foreach_rules(std::vector<Rule>& table) {
  for (const auto& [name, spec] : specs()) {
    const bool overwrites = name == "aten::_foreach_zero" || name == "aten::_foreach_copy";
    table.push_back({name.c_str(), &lower_foreach, false, overwrites});
  }
}

}  // namespace torchtpu::lowering
