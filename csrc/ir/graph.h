// A small SSA graph of StableHLO operations with static shapes, and its printer.
//
// A Graph is built once per cache miss by the lowering rules, printed as a StableHLO module in MLIR's
// generic op syntax (the spelling most stable across plugin versions) and handed to the compiler.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace torchtpu::ir {

// A ranked tensor type; an empty `dims` is a scalar (0-d tensor).
struct Type {
  DType dtype;
  std::vector<int64_t> dims;

  int64_t numel() const;
  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool operator==(const Type& other) const { return dtype == other.dtype && dims == other.dims; }
};
std::string to_mlir(const Type& type);  // "tensor<2x3xf32>"
// The exact spelling of a floating constant of `dtype` in a dense literal: its bit pattern in hex.
std::string float_literal(double value, DType dtype);

// Names one result of one operation in a Graph.
struct Value {
  int id = -1;
  bool valid() const { return id >= 0; }
};

// kMaxNaN/kMinNaN are max/min that return NaN when any element is NaN, as PyTorch's amax/max do (and as
// StableHLO defines maximum). XLA's CPU compiler turns a plain maximum region into a fast max that keeps the
// accumulator where only the element is NaN, so the user-facing reductions ask for these; the plain ones
// stay where NaN reaches the result another way (softmax's shift, pooling windows).
enum class Reducer { kAdd, kMul, kMax, kMin, kMaxNaN, kMinNaN, kAnd, kOr, kXor };
enum class Comparison { kEQ, kNE, kLT, kLE, kGT, kGE };

class Graph {
 public:
  Value parameter(const Type& type);
  const Type& type(Value value) const;
  size_t num_parameters() const { return parameters_.size(); }
  void set_results(std::vector<Value> results);
  // Lets result `result_index` reuse the buffer of `parameter` (same type) when the caller donates it: an
  // in-place update then runs without a second copy of its storage.
  void alias_result(Value parameter, int result_index);
  const std::vector<Value>& results() const { return results_; }
  // SPMD annotations (runtime/sharding.h's mhlo spelling): how a parameter arrives split over the devices,
  // and how a result must leave (a result without one gets the partitioner's choice).
  void set_parameter_sharding(size_t parameter_index, std::string sharding);
  void set_result_sharding(size_t result_index, std::string sharding);
  void clear_shardings();
  // Set before lowering when the op may run split over devices: reductions then use only regions that the
  // partitioner can turn into a cross-device all-reduce (see reduce()).
  void set_partitioned(bool partitioned) { partitioned_ = partitioned; }
  // The whole module, with one public function @main(parameters...) -> (results...), after the functions
  // added by add_functions.
  std::string emit() const;
  // Adds module-level functions (MLIR text of func.func ops whose names are unique to their origin, e.g. a
  // custom kernel's), printed before @main; the same text added twice is printed once. Ops call them with
  // op_multi("func.call", operands, results, "callee = @name").
  void add_functions(const std::string& text);

  // Any single-result StableHLO op: `name` without the "stablehlo." prefix, `attributes` the text inside
  // the attribute dictionary (may be empty).
  Value op(const std::string& name, const std::vector<Value>& operands, const Type& result,
           const std::string& attributes = "");

  // Any op, with its full name ("stablehlo.sort", "chlo.erf"), several results, and optionally one region
  // (its text, e.g. from scalar_region()).
  std::vector<Value> op_multi(const std::string& full_name, const std::vector<Value>& operands,
                              const std::vector<Type>& results, const std::string& attributes = "",
                              const std::string& region = "");
  // A CHLO op with one result of `result` type (erf, lgamma, ...): the plugin lowers CHLO itself.
  Value chlo(const std::string& name, const std::vector<Value>& operands, const Type& result);

  // Element-typed scalar constants broadcast to `dims`. Integers and floats are printed exactly.
  Value constant(double value, DType dtype, const std::vector<int64_t>& dims = {});
  Value constant_int(int64_t value, DType dtype, const std::vector<int64_t>& dims = {});

  Value unary(const std::string& name, Value x);
  Value binary(const std::string& name, Value a, Value b);  // operands must share one type
  Value convert(Value x, DType dtype);  // complex to real keeps the real part
  // Complex values: the parts of x (f32 for c64), and the complex value of two parts of one type.
  Value real(Value x);
  Value imag(Value x);
  Value complex(Value real_part, Value imag_part);
  Value bitcast_convert(Value x, const Type& result);
  Value broadcast_in_dim(Value x, const std::vector<int64_t>& dims, const std::vector<int64_t>& broadcast_dims);
  Value reshape(Value x, const std::vector<int64_t>& dims);
  Value transpose(Value x, const std::vector<int64_t>& permutation);
  Value slice(Value x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides);
  // Edge padding (negative values cut) and, optionally, `interior` padding between elements of each dim.
  Value pad(Value x, Value padding_value, const std::vector<int64_t>& low, const std::vector<int64_t>& high,
            std::vector<int64_t> interior = {});
  Value iota(const Type& type, int64_t dimension);
  // Joins `parts` along `dim` (a single part is returned as is).
  Value concatenate(const std::vector<Value>& parts, int64_t dim);
  // x[start : start + sizes] with runtime start indices (rank-0 integers, one per dim). Like StableHLO,
  // starts are clamped so the window stays inside x.
  Value dynamic_slice(Value x, const std::vector<Value>& start, const std::vector<int64_t>& sizes);
  // x with `update` written at the runtime start indices (clamped as in dynamic_slice).
  Value dynamic_update_slice(Value x, Value update, const std::vector<Value>& start);
  Value compare(Value a, Value b, Comparison direction);
  Value select(Value predicate, Value on_true, Value on_false);
  Value reduce(Value x, Value init, const std::vector<int64_t>& dimensions, Reducer reducer);
  Value dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                    const std::vector<int64_t>& rhs_batch, const std::vector<int64_t>& lhs_contract,
                    const std::vector<int64_t>& rhs_contract, DType result_dtype);
  // One region whose block arguments have `argument_types`: `build` receives them and returns what the region
  // yields. Ops built inside `build` belong to the region; they may use values built outside it.
  using RegionBuilder = std::function<std::vector<Value>(const std::vector<Value>& arguments)>;
  std::string region(const std::vector<Type>& argument_types, const RegionBuilder& build);
  // stablehlo.while over the loop-carried values `init`: `cond` returns one i1 scalar, `body` the next values.
  std::vector<Value> while_loop(const std::vector<Value>& init, const RegionBuilder& cond, const RegionBuilder& body);

  // Reads flat[indices[..., 0]]: `flat` is 1-d, `indices` has a trailing dimension of size 1.
  Value gather_flat(Value flat, Value indices);
  // Writes `updates` into flat at indices[..., 0] (last write wins).
  Value scatter_flat(Value flat, Value indices, Value updates);
  // rng_bit_generator: returns {new_state, bits}.
  std::pair<Value, Value> rng_bit_generator(Value state, const Type& bits_type);

 private:
  struct Node {
    std::string text;        // the op's text after "= "; empty for parameters and block arguments
    std::vector<Type> result_types;
    bool in_region = false;  // printed inside its region's text, not in @main
  };
  struct ValueInfo {
    int node;
    int result_index;
    Type type;
  };
  Value add_node(std::string text, std::vector<Type> result_types, int result_index = 0);
  std::string name(Value value) const;
  std::string operand_list(const std::vector<Value>& operands) const;
  std::string signature(const std::vector<Value>& operands, const std::vector<Type>& results) const;
  std::string type_list(const std::vector<Value>& values) const;  // "(tensor<f32>, tensor<i1>)"
  std::string line(size_t node) const;                              // "%v7 = ..." ; empty if nothing to print

  std::vector<Node> nodes_;
  // A deque: type() hands out references that must stay valid while the graph grows.
  std::deque<ValueInfo> values_;
  std::vector<Value> parameters_;
  std::vector<Value> results_;
  std::vector<std::pair<Value, int>> aliases_;  // (parameter, result index)
  std::vector<std::string> parameter_shardings_, result_shardings_;  // by index; empty: none
  bool partitioned_ = false;
  std::vector<std::string> functions_;          // add_functions texts, in order added
  // The node lists of the regions being built, innermost last: new nodes join the innermost one.
  std::vector<std::vector<size_t>> open_regions_;
};

// A region taking `arity` pairs of scalar block arguments (%lhs0, %rhs0, %lhs1, %rhs1, ... for reducers
// and comparators over several operands, or named by the caller in `body`) and returning what `body`
// computes. `body` is MLIR text using those names and ending in "stablehlo.return".
std::string region_text(const std::vector<std::pair<std::string, DType>>& arguments, const std::string& body);
// The region of a binary reducer: (%lhs, %rhs) -> op(%lhs, %rhs).
std::string scalar_region(const std::string& op, DType dtype);
// The region of `reducer` over `dtype` (for reduce, reduce_window and scatter).
std::string reducer_region(Reducer reducer, DType dtype);

// The attribute dictionaries of @main's signature: a parameter's, " {mhlo.sharding = "...", tf.aliasing_output =
// 0 : i32}" with `sharding` in runtime/sharding.h's mhlo spelling (empty: none) and `aliased_results` the
// results that reuse its buffer; a result's, " {mhlo.sharding = "..."}". Empty when there is nothing to say.
std::string parameter_attributes(const std::string& sharding, const std::vector<int>& aliased_results);
std::string result_attributes(const std::string& sharding);

// "[1, 2]", the list spelling inside StableHLO's dimension-number attributes.
std::string bracket_list(const std::vector<int64_t>& values);
// "array<i64: 1, 2>"
std::string dense_i64_array(const std::vector<int64_t>& values);

}  // namespace torchtpu::ir
