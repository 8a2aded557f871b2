#include <stdexcept>
#include <unordered_map>

#include "lowering/rule.h"

namespace torchtpu::lowering {
namespace {

const std::unordered_map<std::string, Rule>& table() {
  static const std::unordered_map<std::string, Rule> rules = [] {
    std::vector<Rule> all;
    add_elementwise_rules(all);
    add_reduction_rules(all);
    add_linalg_rules(all);
    add_linalg_decomposition_rules(all);
    add_nn_rules(all);
    add_random_rules(all);
    add_rnn_rules(all);
    add_sorting_rules(all);
    add_factory_rules(all);
    add_indexing_rules(all);
    add_shape_rules(all);
    add_padding_rules(all);
    add_histogram_rules(all);
    add_special_rules(all);
    add_foreach_rules(all);
    add_optimizer_rules(all);
    add_attention_rules(all);
    add_kernel_rules(all);
    add_complex_rules(all);
    std::unordered_map<std::string, Rule> by_name;
    for (const Rule& rule : all) {
      if (!by_name.emplace(rule.op, rule).second) throw std::logic_error(std::string("duplicate rule ") + rule.op);
    }
    return by_name;
  }();
  return rules;
}

}  // namespace

Value LoweringContext::tensor(size_t i) const {
  if (i >= args.size() || args[i].kind != Arg::Kind::kTensor) {
    throw std::invalid_argument("argument " + std::to_string(i) + " is not a tensor");
  }
  return args[i].tensor;
}

Value LoweringContext::operand(size_t i) {
  Arg& a = args.at(i);
  if (!a.dynamic) throw std::invalid_argument("argument " + std::to_string(i) + " is not a runtime operand");
  if (!a.operand.valid()) {
    if (a.kind == Arg::Kind::kDoubleList) {
      a.operand = graph.parameter(Type{DType::kF64, {static_cast<int64_t>(a.reals.size())}});
    } else if (a.kind == Arg::Kind::kIntList) {
      a.operand = graph.parameter(Type{DType::kI64, {static_cast<int64_t>(a.ints.size())}});
    } else {
      const DType dtype = a.kind == Arg::Kind::kDouble    ? DType::kF64
                          : a.kind == Arg::Kind::kComplex ? DType::kC128
                          : a.kind == Arg::Kind::kInt     ? DType::kI64
                                                          : DType::kBool;
      a.operand = graph.parameter(Type{dtype, {}});
    }
    created_operands.push_back(i);
  }
  return a.operand;
}

Value LoweringContext::scalar(size_t i, DType dtype, const std::vector<int64_t>& dims) {
  const Arg& a = args.at(i);
  if (a.dynamic) {
    Value v = operand(i);
    if (graph.type(v).dtype != dtype) v = graph.convert(v, dtype);
    return dims.empty() ? v : graph.broadcast_in_dim(v, dims, {});
  }
  if (a.kind == Arg::Kind::kComplex) {
    const DType part = is_complex(dtype) ? complex_part(dtype) : dtype;
    Value value = graph.constant(a.real, part, dims);
    return is_complex(dtype) ? graph.complex(value, graph.constant(a.imag, part, dims)) : value;
  }
  if (is_floating(dtype)) return graph.constant(real(i), dtype, dims);
  if (dtype == DType::kBool) return graph.constant_int(real(i) != 0, dtype, dims);
  return graph.constant_int(integer(i), dtype, dims);
}

int64_t LoweringContext::integer(size_t i) const {
  const Arg& a = args.at(i);
  if (a.kind == Arg::Kind::kComplex) throw NotLowered{};
  a.read_statically = true;
  if (a.kind == Arg::Kind::kInt || a.kind == Arg::Kind::kBool) return a.integer;
  if (a.kind == Arg::Kind::kDouble) return static_cast<int64_t>(a.real);
  throw std::invalid_argument("argument " + std::to_string(i) + " is not an integer");
}

double LoweringContext::real(size_t i) const {
  const Arg& a = args.at(i);
  if (a.kind == Arg::Kind::kComplex) throw NotLowered{};
  a.read_statically = true;
  if (a.kind == Arg::Kind::kDouble) return a.real;
  if (a.kind == Arg::Kind::kInt || a.kind == Arg::Kind::kBool) return static_cast<double>(a.integer);
  throw std::invalid_argument("argument " + std::to_string(i) + " is not a number");
}

std::complex<double> LoweringContext::complex_value(size_t i) const {
  const Arg& a = args.at(i);
  if (a.kind != Arg::Kind::kComplex) return {real(i), 0.0};
  a.read_statically = true;
  return {a.real, a.imag};
}

const std::vector<int64_t>& LoweringContext::ints(size_t i) const {
  const Arg& a = args.at(i);
  if (a.kind != Arg::Kind::kIntList) throw std::invalid_argument("argument " + std::to_string(i) + " is not an int list");
  if (a.dynamic) throw std::invalid_argument("argument " + std::to_string(i) + " is a runtime operand");
  return a.ints;
}

Value LoweringContext::int_list(size_t i) {
  const Arg& a = args.at(i);
  if (a.kind != Arg::Kind::kIntList) throw std::invalid_argument("argument " + std::to_string(i) + " is not an int list");
  if (a.dynamic) return operand(i);
  const Type type{DType::kI64, {static_cast<int64_t>(a.ints.size())}};
  return graph.op("constant", {}, type, "value = dense<" + ir::bracket_list(a.ints) + "> : " + ir::to_mlir(type));
}

const std::vector<double>& LoweringContext::reals(size_t i) const {
  const Arg& a = args.at(i);
  a.read_statically = true;
  if (a.kind != Arg::Kind::kDoubleList) throw std::invalid_argument("argument " + std::to_string(i) + " is not a float list");
  return a.reals;
}

const std::string& LoweringContext::text(size_t i) const {
  const Arg& a = args.at(i);
  if (a.kind != Arg::Kind::kString) throw std::invalid_argument("argument " + std::to_string(i) + " is not a string");
  return a.text;
}

const Rule* find_rule(const std::string& op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> rule_names() {
  std::vector<std::string> names;
  for (const auto& entry : table()) names.push_back(entry.first);
  return names;
}

}  // namespace torchtpu::lowering
