#include "ir/graph.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace torchtpu::ir {
namespace {

const char* reducer_op(Reducer reducer) {
  switch (reducer) {
    case Reducer::kAdd: return "stablehlo.add";
    case Reducer::kMul: return "stablehlo.multiply";
    case Reducer::kMax:
    case Reducer::kMaxNaN: return "stablehlo.maximum";
    case Reducer::kMin:
    case Reducer::kMinNaN: return "stablehlo.minimum";
    case Reducer::kAnd: return "stablehlo.and";
    case Reducer::kOr: return "stablehlo.or";
    case Reducer::kXor: return "stablehlo.xor";
  }
  return "";
}

const char* comparison_name(Comparison direction) {
  switch (direction) {
    case Comparison::kEQ: return "EQ";
    case Comparison::kNE: return "NE";
    case Comparison::kLT: return "LT";
    case Comparison::kLE: return "LE";
    case Comparison::kGT: return "GT";
    case Comparison::kGE: return "GE";
  }
  return "";
}

std::string join(const std::vector<int64_t>& values, const char* separator) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out << separator;
    out << values[i];
  }
  return out.str();
}

}  // namespace

std::string float_literal(double value, DType dtype) {
  char buf[32];
  switch (dtype) {
    case DType::kF64: {
      uint64_t bits;
      std::memcpy(&bits, &value, sizeof bits);
      std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(bits));
      return buf;
    }
    case DType::kF32: {
      float f = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      std::snprintf(buf, sizeof buf, "0x%08X", bits);
      return buf;
    }
    case DType::kBF16: {
      // Round to nearest even from float32, as torch does when converting.
      float f = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      uint16_t half;
      if ((bits & 0x7fffffffu) > 0x7f800000u) {
        half = static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
      } else {
        uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
        half = static_cast<uint16_t>((bits + rounding) >> 16);
      }
      std::snprintf(buf, sizeof buf, "0x%04X", half);
      return buf;
    }
    case DType::kF16: {
      _Float16 h = static_cast<_Float16>(value);
      uint16_t bits;
      std::memcpy(&bits, &h, sizeof bits);
      std::snprintf(buf, sizeof buf, "0x%04X", bits);
      return buf;
    }
    default:
      throw std::invalid_argument("float_literal: not a floating type");
  }
}

std::string region_text(const std::vector<std::pair<std::string, DType>>& arguments, const std::string& body) {
  std::string out = "({\n    ^bb0(";
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i) out += ", ";
    out += arguments[i].first + ": " + to_mlir(Type{arguments[i].second, {}});
  }
  return out + "):\n" + body + "\n    })";
}

std::string scalar_region(const std::string& op, DType dtype) {
  const std::string t = to_mlir(Type{dtype, {}});
  return region_text({{"%lhs", dtype}, {"%rhs", dtype}},
                     "      %r = \"" + op + "\"(%lhs, %rhs) : (" + t + ", " + t + ") -> " + t +
                         "\n      \"stablehlo.return\"(%r) : (" + t + ") -> ()");
}

std::string reducer_region(Reducer reducer, DType dtype) {
  const bool propagates_nan = reducer == Reducer::kMaxNaN || reducer == Reducer::kMinNaN;
  if (!propagates_nan || !is_floating(dtype)) return scalar_region(reducer_op(reducer), dtype);
  const std::string t = to_mlir(Type{dtype, {}});
  const std::string b = to_mlir(Type{DType::kBool, {}});
  const std::string pair = "(" + t + ", " + t + ")";
  const std::string ne = " {comparison_direction = #stablehlo<comparison_direction NE>} : " + pair + " -> " + b;
  const std::string select = " : (" + b + ", " + t + ", " + t + ") -> " + t;
  return region_text({{"%lhs", dtype}, {"%rhs", dtype}},
                     "      %m = \"" + std::string(reducer_op(reducer)) + "\"(%lhs, %rhs) : " + pair + " -> " + t +
                         "\n      %lnan = \"stablehlo.compare\"(%lhs, %lhs)" + ne +
                         "\n      %rnan = \"stablehlo.compare\"(%rhs, %rhs)" + ne +
                         "\n      %r1 = \"stablehlo.select\"(%rnan, %rhs, %m)" + select +
                         "\n      %r = \"stablehlo.select\"(%lnan, %lhs, %r1)" + select +
                         "\n      \"stablehlo.return\"(%r) : (" + t + ") -> ()");
}

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string to_mlir(const Type& type) {
  std::string out = "tensor<";
  for (int64_t d : type.dims) out += std::to_string(d) + "x";
  out += mlir_name(type.dtype);
  out += ">";
  return out;
}

std::string bracket_list(const std::vector<int64_t>& values) { return "[" + join(values, ", ") + "]"; }

std::string dense_i64_array(const std::vector<int64_t>& values) {
  return values.empty() ? "array<i64>" : "array<i64: " + join(values, ", ") + ">";
}

Value Graph::add_node(std::string text, std::vector<Type> result_types, int result_index) {
  nodes_.push_back(Node{std::move(text), result_types, !open_regions_.empty()});
  const int node = static_cast<int>(nodes_.size()) - 1;
  if (!open_regions_.empty()) open_regions_.back().push_back(static_cast<size_t>(node));
  Value first;
  for (size_t i = 0; i < result_types.size(); ++i) {
    values_.push_back(ValueInfo{node, static_cast<int>(i), result_types[i]});
    if (static_cast<int>(i) == result_index) first = Value{static_cast<int>(values_.size()) - 1};
  }
  return first;
}

std::string Graph::name(Value value) const {
  const ValueInfo& info = values_.at(static_cast<size_t>(value.id));
  const Node& node = nodes_[static_cast<size_t>(info.node)];
  if (node.text.empty()) {
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (parameters_[i].id == value.id) return "%arg" + std::to_string(i);
    }
  }
  std::string base = "%v" + std::to_string(info.node);
  if (node.result_types.size() > 1) base += "#" + std::to_string(info.result_index);
  return base;
}

std::string Graph::operand_list(const std::vector<Value>& operands) const {
  std::string out = "(";
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) out += ", ";
    out += name(operands[i]);
  }
  return out + ")";
}

std::string Graph::signature(const std::vector<Value>& operands, const std::vector<Type>& results) const {
  std::string out = " : (";
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) out += ", ";
    out += to_mlir(type(operands[i]));
  }
  out += ") -> ";
  if (results.size() == 1) return out + to_mlir(results[0]);
  out += "(";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i) out += ", ";
    out += to_mlir(results[i]);
  }
  return out + ")";
}

std::string Graph::type_list(const std::vector<Value>& values) const {
  std::string out = "(";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += to_mlir(type(values[i]));
  }
  return out + ")";
}

std::string Graph::line(size_t n) const {
  const Node& node = nodes_[n];
  if (node.text.empty()) return "";
  std::string out = "%v" + std::to_string(n);
  if (node.result_types.size() > 1) out += ":" + std::to_string(node.result_types.size());
  return out + " = " + node.text;
}

std::string Graph::region(const std::vector<Type>& argument_types, const RegionBuilder& build) {
  open_regions_.emplace_back();
  std::vector<Value> arguments;
  for (const Type& t : argument_types) arguments.push_back(add_node("", {t}));
  const std::vector<Value> yielded = build(arguments);
  const std::vector<size_t> nodes = std::move(open_regions_.back());
  open_regions_.pop_back();
  std::string out = "({\n    ^bb0(";
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i) out += ", ";
    out += name(arguments[i]) + ": " + to_mlir(argument_types[i]);
  }
  out += "):\n";
  for (size_t n : nodes) {
    const std::string text = line(n);
    if (!text.empty()) out += "      " + text + "\n";
  }
  return out + "      \"stablehlo.return\"" + operand_list(yielded) + " : " + type_list(yielded) + " -> ()\n    })";
}

std::vector<Value> Graph::while_loop(const std::vector<Value>& init, const RegionBuilder& cond,
                                     const RegionBuilder& body) {
  std::vector<Type> types;
  for (Value v : init) types.push_back(type(v));
  const std::string cond_region = region(types, cond);
  const std::string body_region = region(types, body);
  std::string text = "\"stablehlo.while\"" + operand_list(init) + " " + cond_region.substr(0, cond_region.size() - 1) +
                     ", " + body_region.substr(1) + signature(init, types);
  Value first = add_node(std::move(text), types, 0);
  std::vector<Value> values;
  for (size_t i = 0; i < types.size(); ++i) values.push_back(Value{first.id + static_cast<int>(i)});
  return values;
}

Value Graph::parameter(const Type& type) {
  Value v = add_node("", {type});
  parameters_.push_back(v);
  return v;
}

const Type& Graph::type(Value value) const { return values_.at(static_cast<size_t>(value.id)).type; }

void Graph::set_results(std::vector<Value> results) { results_ = std::move(results); }

void Graph::alias_result(Value parameter, int result_index) { aliases_.emplace_back(parameter, result_index); }

Value Graph::dynamic_slice(Value x, const std::vector<Value>& start, const std::vector<int64_t>& sizes) {
  std::vector<Value> operands{x};
  operands.insert(operands.end(), start.begin(), start.end());
  return op("dynamic_slice", operands, Type{type(x).dtype, sizes}, "slice_sizes = " + dense_i64_array(sizes));
}

Value Graph::dynamic_update_slice(Value x, Value update, const std::vector<Value>& start) {
  std::vector<Value> operands{x, update};
  operands.insert(operands.end(), start.begin(), start.end());
  return op("dynamic_update_slice", operands, type(x));
}

Value Graph::op(const std::string& name_, const std::vector<Value>& operands, const Type& result,
                const std::string& attributes) {
  std::string text = "\"stablehlo." + name_ + "\"" + operand_list(operands);
  if (!attributes.empty()) text += " {" + attributes + "}";
  text += signature(operands, {result});
  return add_node(std::move(text), {result});
}

std::vector<Value> Graph::op_multi(const std::string& full_name, const std::vector<Value>& operands,
                                   const std::vector<Type>& results, const std::string& attributes,
                                   const std::string& region) {
  std::string text = "\"" + full_name + "\"" + operand_list(operands);
  if (!region.empty()) text += " " + region;
  if (!attributes.empty()) text += " {" + attributes + "}";
  text += signature(operands, results);
  Value first = add_node(std::move(text), results, 0);
  std::vector<Value> values;
  for (size_t i = 0; i < results.size(); ++i) values.push_back(Value{first.id + static_cast<int>(i)});
  return values;
}

Value Graph::chlo(const std::string& name, const std::vector<Value>& operands, const Type& result) {
  return op_multi("chlo." + name, operands, {result})[0];
}

Value Graph::constant(double value, DType dtype, const std::vector<int64_t>& dims) {
  if (is_complex(dtype)) {
    // value + 0i, from exact real parts (MLIR's complex literal has no hex spelling).
    const DType part = complex_part(dtype);
    return complex(constant(value, part, dims), constant(0.0, part, dims));
  }
  if (!is_floating(dtype)) return constant_int(static_cast<int64_t>(value), dtype, dims);
  if (is_float8(dtype)) {
    // MLIR has no float8 hex literal we print; XLA folds the conversion, which rounds as torch does.
    Value c = convert(constant(value, DType::kF32), dtype);
    return dims.empty() ? c : broadcast_in_dim(c, dims, {});
  }
  const Type scalar{dtype, {}};
  Value c = add_node("\"stablehlo.constant\"() {value = dense<" + float_literal(value, dtype) + "> : " +
                         to_mlir(scalar) + "} : () -> " + to_mlir(scalar),
                     {scalar});
  return dims.empty() ? c : broadcast_in_dim(c, dims, {});
}

Value Graph::constant_int(int64_t value, DType dtype, const std::vector<int64_t>& dims) {
  if (is_floating(dtype) || is_complex(dtype)) return constant(static_cast<double>(value), dtype, dims);
  const Type scalar{dtype, {}};
  std::string literal = dtype == DType::kBool ? (value ? "true" : "false") : std::to_string(value);
  if (is_unsigned(dtype)) {
    // Two's complement of the type's width: -1 is the all-ones largest value.
    const size_t bits = element_size(dtype) * 8;
    const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
    literal = std::to_string(static_cast<uint64_t>(value) & mask);
  }
  Value c = add_node("\"stablehlo.constant\"() {value = dense<" + literal + "> : " + to_mlir(scalar) +
                         "} : () -> " + to_mlir(scalar),
                     {scalar});
  return dims.empty() ? c : broadcast_in_dim(c, dims, {});
}

Value Graph::unary(const std::string& name_, Value x) { return op(name_, {x}, type(x)); }

Value Graph::binary(const std::string& name_, Value a, Value b) {
  if (!(type(a) == type(b))) {
    throw std::invalid_argument("binary " + name_ + ": operand types differ: " + to_mlir(type(a)) + " vs " +
                                to_mlir(type(b)));
  }
  return op(name_, {a, b}, type(a));
}

Value Graph::convert(Value x, DType dtype) {
  const DType from = type(x).dtype;
  if (from == dtype) return x;
  // XLA converts real to complex but not back: complex to real keeps the real part, as torch's casts do,
  // except to bool, which is true where either part is nonzero.
  if (is_complex(from) && dtype == DType::kBool) {
    const Value zero = constant(0.0, complex_part(from), type(x).dims);
    return binary("or", compare(real(x), zero, Comparison::kNE), compare(imag(x), zero, Comparison::kNE));
  }
  if (is_complex(from) && !is_complex(dtype)) return convert(real(x), dtype);
  // torch converts to and from float8 through float32 (so a double is rounded twice, as on CPU).
  if (is_float8(dtype) && from != DType::kF32) return convert(convert(x, DType::kF32), dtype);
  if (is_float8(from) && dtype != DType::kF32) return convert(convert(x, DType::kF32), dtype);
  // Out of range, torch's float to 8- and 16-bit integer casts wrap through a wide integer on CPU and CUDA
  // (-1.0 to uint8 is 255) where XLA's saturate.
  if (is_floating(from) && (dtype == DType::kU8 || dtype == DType::kI8 || dtype == DType::kI16)) {
    return convert(convert(x, DType::kI64), dtype);
  }
  if (dtype == DType::kF8E4M3FN) {
    // torch saturates to +-448 (infinities too) where XLA would give NaN; the other formats overflow as XLA does.
    const Value limit = constant(largest_finite(dtype), DType::kF32, type(x).dims);
    x = select(compare(x, limit, Comparison::kGT), limit, x);
    const Value lowest = unary("negate", limit);
    x = select(compare(x, lowest, Comparison::kLT), lowest, x);
  }
  return op("convert", {x}, Type{dtype, type(x).dims});
}

Value Graph::real(Value x) { return op("real", {x}, Type{complex_part(type(x).dtype), type(x).dims}); }

Value Graph::imag(Value x) { return op("imag", {x}, Type{complex_part(type(x).dtype), type(x).dims}); }

Value Graph::complex(Value real_part, Value imag_part) {
  return op("complex", {real_part, imag_part}, Type{complex_of(type(real_part).dtype), type(real_part).dims});
}

Value Graph::bitcast_convert(Value x, const Type& result) { return op("bitcast_convert", {x}, result); }

Value Graph::broadcast_in_dim(Value x, const std::vector<int64_t>& dims, const std::vector<int64_t>& broadcast_dims) {
  if (type(x).dims == dims && broadcast_dims.size() == dims.size()) {
    bool identity = true;
    for (size_t i = 0; i < broadcast_dims.size(); ++i) identity &= broadcast_dims[i] == static_cast<int64_t>(i);
    if (identity) return x;
  }
  return op("broadcast_in_dim", {x}, Type{type(x).dtype, dims},
            "broadcast_dimensions = " + dense_i64_array(broadcast_dims));
}

Value Graph::reshape(Value x, const std::vector<int64_t>& dims) {
  if (type(x).dims == dims) return x;
  return op("reshape", {x}, Type{type(x).dtype, dims});
}

Value Graph::transpose(Value x, const std::vector<int64_t>& permutation) {
  bool identity = true;
  std::vector<int64_t> dims;
  for (size_t i = 0; i < permutation.size(); ++i) {
    identity &= permutation[i] == static_cast<int64_t>(i);
    dims.push_back(type(x).dims.at(static_cast<size_t>(permutation[i])));
  }
  if (identity) return x;
  return op("transpose", {x}, Type{type(x).dtype, dims}, "permutation = " + dense_i64_array(permutation));
}

Value Graph::slice(Value x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
                   const std::vector<int64_t>& strides) {
  std::vector<int64_t> dims;
  bool identity = true;
  for (size_t i = 0; i < start.size(); ++i) {
    dims.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
    identity &= start[i] == 0 && limit[i] == type(x).dims[i] && strides[i] == 1;
  }
  if (identity) return x;
  return op("slice", {x}, Type{type(x).dtype, dims},
            "start_indices = " + dense_i64_array(start) + ", limit_indices = " + dense_i64_array(limit) +
                ", strides = " + dense_i64_array(strides));
}

Value Graph::pad(Value x, Value padding_value, const std::vector<int64_t>& low, const std::vector<int64_t>& high,
                 std::vector<int64_t> interior) {
  std::vector<int64_t> dims = type(x).dims;
  if (interior.empty()) interior.assign(dims.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i) dims[i] += low[i] + high[i] + (dims[i] > 0 ? (dims[i] - 1) * interior[i] : 0);
  return op("pad", {x, padding_value}, Type{type(x).dtype, dims},
            "edge_padding_low = " + dense_i64_array(low) + ", edge_padding_high = " + dense_i64_array(high) +
                ", interior_padding = " + dense_i64_array(interior));
}

Value Graph::iota(const Type& t, int64_t dimension) {
  return add_node("\"stablehlo.iota\"() {iota_dimension = " + std::to_string(dimension) + " : i64} : () -> " +
                      to_mlir(t),
                  {t});
}

Value Graph::concatenate(const std::vector<Value>& parts, int64_t dim) {
  if (parts.size() == 1) return parts[0];
  Type result = type(parts[0]);
  result.dims[static_cast<size_t>(dim)] = 0;
  for (Value v : parts) result.dims[static_cast<size_t>(dim)] += type(v).dims[static_cast<size_t>(dim)];
  return op("concatenate", parts, result, "dimension = " + std::to_string(dim) + " : i64");
}

Value Graph::compare(Value a, Value b, Comparison direction) {
  const DType dtype = type(a).dtype;
  const char* compare_type = is_floating(dtype) || is_complex(dtype) ? "FLOAT" : (is_unsigned(dtype) || dtype == DType::kBool) ? "UNSIGNED" : "SIGNED";
  return op("compare", {a, b}, Type{DType::kBool, type(a).dims},
            std::string("comparison_direction = #stablehlo<comparison_direction ") + comparison_name(direction) +
                ">, compare_type = #stablehlo<comparison_type " + compare_type + ">");
}

Value Graph::select(Value predicate, Value on_true, Value on_false) {
  return op("select", {predicate, on_true, on_false}, type(on_true));
}

Value Graph::reduce(Value x, Value init, const std::vector<int64_t>& dimensions, Reducer reducer) {
  std::vector<int64_t> kept;
  const Type& in = type(x);
  for (size_t i = 0; i < in.dims.size(); ++i) {
    bool reduced = false;
    for (int64_t d : dimensions) reduced |= d == static_cast<int64_t>(i);
    if (!reduced) kept.push_back(in.dims[i]);
  }
  const Type result{in.dtype, kept};
  if (partitioned_ && (reducer == Reducer::kMaxNaN || reducer == Reducer::kMinNaN) && is_floating(in.dtype)) {
    // The plain max (min) of the elements, NaN where any is NaN: two reductions with plain regions, as a
    // partitioned program's cross-device all-reduce cannot run the NaN-propagating select region. One device
    // keeps the single reduction, 2-3x faster on the CPU plugin (amax of 1024 x 1024).
    Value plain = reduce(x, init, dimensions, reducer == Reducer::kMaxNaN ? Reducer::kMax : Reducer::kMin);
    Value has_nan = reduce(compare(x, x, Comparison::kNE), constant_int(0, DType::kBool), dimensions, Reducer::kOr);
    return select(has_nan, constant(std::numeric_limits<double>::quiet_NaN(), in.dtype, kept), plain);
  }
  std::string text = "\"stablehlo.reduce\"" + operand_list({x, init}) + " " + reducer_region(reducer, in.dtype) +
                     " {dimensions = " + dense_i64_array(dimensions) + "}" + signature({x, init}, {result});
  return add_node(std::move(text), {result});
}

namespace {

// Indices of the dims of a dot operand that are neither batch nor contracting, in order.
std::vector<int64_t> free_dim_indices(int64_t rank, const std::vector<int64_t>& batch,
                                      const std::vector<int64_t>& contract) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < rank; ++i) {
    bool used = false;
    for (int64_t d : batch) used |= d == i;
    for (int64_t d : contract) used |= d == i;
    if (!used) out.push_back(i);
  }
  return out;
}

// A dot_general of 64-bit integers as a broadcast multiply and a sum over the contracted dims. XLA's TPU
// compiler rejects s64/u64 dots (it has no 64-bit integer path to rewrite them into; found by torchtpu.aot).
// The sum is exact in the same wrapping 64-bit arithmetic, so every plugin computes what CPU torch does.
// It materialises batch x free x free x contracted elements; integer matmuls are rare and small.
Value wide_integer_dot(Graph& g, Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                       const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                       const std::vector<int64_t>& rhs_contract, DType dtype) {
  const std::vector<int64_t> lhs_free = free_dim_indices(g.type(lhs).rank(), lhs_batch, lhs_contract);
  const std::vector<int64_t> rhs_free = free_dim_indices(g.type(rhs).rank(), rhs_batch, rhs_contract);
  const size_t nb = lhs_batch.size(), nl = lhs_free.size(), nr = rhs_free.size(), nc = lhs_contract.size();
  // Product dims: batch, lhs free, rhs free, contracted; each operand moved to (batch, free, contracted).
  std::vector<int64_t> dims, lhs_order, rhs_order, lhs_to, rhs_to;
  for (size_t i = 0; i < nb; ++i) {
    dims.push_back(g.type(lhs).dims[static_cast<size_t>(lhs_batch[i])]);
    lhs_order.push_back(lhs_batch[i]);
    rhs_order.push_back(rhs_batch[i]);
    lhs_to.push_back(static_cast<int64_t>(i));
    rhs_to.push_back(static_cast<int64_t>(i));
  }
  for (size_t i = 0; i < nl; ++i) {
    dims.push_back(g.type(lhs).dims[static_cast<size_t>(lhs_free[i])]);
    lhs_order.push_back(lhs_free[i]);
    lhs_to.push_back(static_cast<int64_t>(nb + i));
  }
  for (size_t i = 0; i < nr; ++i) {
    dims.push_back(g.type(rhs).dims[static_cast<size_t>(rhs_free[i])]);
    rhs_order.push_back(rhs_free[i]);
    rhs_to.push_back(static_cast<int64_t>(nb + nl + i));
  }
  std::vector<int64_t> contracted;
  for (size_t i = 0; i < nc; ++i) {
    dims.push_back(g.type(lhs).dims[static_cast<size_t>(lhs_contract[i])]);
    lhs_order.push_back(lhs_contract[i]);
    rhs_order.push_back(rhs_contract[i]);
    lhs_to.push_back(static_cast<int64_t>(nb + nl + nr + i));
    rhs_to.push_back(static_cast<int64_t>(nb + nl + nr + i));
    contracted.push_back(static_cast<int64_t>(nb + nl + nr + i));
  }
  Value a = g.broadcast_in_dim(g.transpose(g.convert(lhs, dtype), lhs_order), dims, lhs_to);
  Value b = g.broadcast_in_dim(g.transpose(g.convert(rhs, dtype), rhs_order), dims, rhs_to);
  return g.reduce(g.binary("multiply", a, b), g.constant_int(0, dtype), contracted, Reducer::kAdd);
}

}  // namespace

Value Graph::dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch, const std::vector<int64_t>& rhs_batch,
                         const std::vector<int64_t>& lhs_contract, const std::vector<int64_t>& rhs_contract,
                         DType result_dtype) {
  if (result_dtype == DType::kI64 || result_dtype == DType::kU64) {
    return wide_integer_dot(*this, lhs, rhs, lhs_batch, rhs_batch, lhs_contract, rhs_contract, result_dtype);
  }
  // Result dims: batch, lhs free, rhs free (StableHLO's fixed order).
  std::vector<int64_t> dims;
  for (int64_t d : lhs_batch) dims.push_back(type(lhs).dims.at(static_cast<size_t>(d)));
  for (int64_t d : free_dim_indices(type(lhs).rank(), lhs_batch, lhs_contract)) {
    dims.push_back(type(lhs).dims[static_cast<size_t>(d)]);
  }
  for (int64_t d : free_dim_indices(type(rhs).rank(), rhs_batch, rhs_contract)) {
    dims.push_back(type(rhs).dims[static_cast<size_t>(d)]);
  }
  // HIGHEST precision: float32 matmuls stay float32 on TPU, as torch computes them.
  return op("dot_general", {lhs, rhs}, Type{result_dtype, dims},
            "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " + bracket_list(lhs_batch) +
                ", rhs_batching_dimensions = " + bracket_list(rhs_batch) +
                ", lhs_contracting_dimensions = " + bracket_list(lhs_contract) +
                ", rhs_contracting_dimensions = " + bracket_list(rhs_contract) +
                ">, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]");
}

Value Graph::gather_flat(Value flat, Value indices) {
  const Type& index_type = type(indices);
  const int64_t index_vector_dim = index_type.rank() - 1;
  std::vector<int64_t> dims(index_type.dims.begin(), index_type.dims.end() - 1);
  return op("gather", {flat, indices}, Type{type(flat).dtype, dims},
            "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = [0], "
            "index_vector_dim = " +
                std::to_string(index_vector_dim) + ">, slice_sizes = array<i64: 1>, indices_are_sorted = false");
}

Value Graph::scatter_flat(Value flat, Value indices, Value updates) {
  const Type& flat_type = type(flat);
  const int64_t index_vector_dim = type(indices).rank() - 1;
  const std::string t = to_mlir(Type{flat_type.dtype, {}});
  std::string region = "({\n    ^bb0(%old: " + t + ", %new: " + t + "):\n      \"stablehlo.return\"(%new) : (" + t +
                       ") -> ()\n    })";
  std::string text = "\"stablehlo.scatter\"" + operand_list({flat, indices, updates}) + " " + region +
                     " {scatter_dimension_numbers = #stablehlo.scatter<inserted_window_dims = [0], "
                     "scatter_dims_to_operand_dims = [0], index_vector_dim = " +
                     std::to_string(index_vector_dim) + ">, indices_are_sorted = false, unique_indices = false}" +
                     signature({flat, indices, updates}, {flat_type});
  return add_node(std::move(text), {flat_type});
}

std::pair<Value, Value> Graph::rng_bit_generator(Value state, const Type& bits_type) {
  const Type state_type = type(state);
  std::string text = "\"stablehlo.rng_bit_generator\"" + operand_list({state}) +
                     " {rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>}" +
                     signature({state}, {state_type, bits_type});
  Value new_state = add_node(std::move(text), {state_type, bits_type}, 0);
  return {new_state, Value{new_state.id + 1}};
}

void Graph::add_functions(const std::string& text) {
  for (const std::string& f : functions_) {
    if (f == text) return;
  }
  functions_.push_back(text);
}

void Graph::set_parameter_sharding(size_t parameter_index, std::string sharding) {
  if (parameter_shardings_.size() <= parameter_index) parameter_shardings_.resize(parameter_index + 1);
  parameter_shardings_[parameter_index] = std::move(sharding);
}

void Graph::set_result_sharding(size_t result_index, std::string sharding) {
  if (result_shardings_.size() <= result_index) result_shardings_.resize(result_index + 1);
  result_shardings_[result_index] = std::move(sharding);
}

void Graph::clear_shardings() {
  parameter_shardings_.clear();
  result_shardings_.clear();
}

std::string parameter_attributes(const std::string& sharding, const std::vector<int>& aliased_results) {
  std::string text = sharding.empty() ? std::string() : "mhlo.sharding = \"" + sharding + "\"";
  for (int result : aliased_results) {
    text += (text.empty() ? "" : ", ") + ("tf.aliasing_output = " + std::to_string(result) + " : i32");
  }
  return text.empty() ? text : " {" + text + "}";
}

std::string result_attributes(const std::string& sharding) {
  return sharding.empty() ? std::string() : " {mhlo.sharding = \"" + sharding + "\"}";
}

std::string Graph::emit() const {
  std::ostringstream out;
  out << "module @torchtpu {\n";
  for (const std::string& f : functions_) out << f << "\n";
  out << "  func.func public @main(";
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (i) out << ", ";
    std::vector<int> aliased_results;
    for (const auto& [parameter, result] : aliases_) {
      if (parameter.id == parameters_[i].id) aliased_results.push_back(result);
    }
    const std::string sharding = i < parameter_shardings_.size() ? parameter_shardings_[i] : std::string();
    out << "%arg" << i << ": " << to_mlir(type(parameters_[i])) << parameter_attributes(sharding, aliased_results);
  }
  out << ") -> (";
  for (size_t i = 0; i < results_.size(); ++i) {
    if (i) out << ", ";
    out << to_mlir(type(results_[i]))
        << result_attributes(i < result_shardings_.size() ? result_shardings_[i] : std::string());
  }
  out << ") {\n";
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].in_region) continue;
    const std::string text = line(n);
    if (!text.empty()) out << "    " << text << "\n";
  }
  out << "    \"func.return\"" << operand_list(results_) << " : (";
  for (size_t i = 0; i < results_.size(); ++i) {
    if (i) out << ", ";
    out << to_mlir(type(results_[i]));
  }
  out << ") -> ()\n  }\n}\n";
  return out.str();
}

}  // namespace torchtpu::ir
