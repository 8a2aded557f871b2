// The lowering rule interface and the one table of rules.
//
// A rule turns one ATen op (by its overload name, e.g. "aten::add.Tensor") into IR: it reads its arguments
// as IR values and returns one IR value per result. Rules never see ATen or PJRT types and never know which
// driver called them. In-place and out= overloads reuse the functional rule; the caller writes the results
// back into the mutated tensors.
#pragma once

#include <complex>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "lowering/value_check.h"

namespace torchtpu::lowering {

using ir::Graph;
using ir::Type;
using ir::Value;

// One argument of the op, in schema order.
struct Arg {
  enum class Kind { kNone, kTensor, kTensorList, kInt, kDouble, kComplex, kBool, kIntList, kDoubleList, kString };
  Kind kind = Kind::kNone;
  Value tensor;                 // kTensor
  bool contiguous = true;       // kTensor: whether the ATen tensor is contiguous (a few CPU kernels' results
                                // depend on it, e.g. _linalg_det factors A^T when A is contiguous)
  std::vector<Value> tensors;   // kTensorList
  int64_t integer = 0;          // kInt, and kBool as 0/1
  double real = 0;              // kDouble; kComplex's real part
  double imag = 0;              // kComplex's imaginary part
  std::vector<int64_t> ints;    // kIntList
  std::vector<double> reals;    // kDoubleList
  std::string text;             // kString
  // kInt / kDouble / kBool of a `Scalar` or `float` argument, or the kDoubleList of a `Scalar[]`: the value
  // may be a runtime operand rather than a compile-time constant. `dynamic` says so; `operand` is its
  // program value (rank-0 f64, c128, i64 or i1; f64[n] for a list), created on first use through
  // LoweringContext::operand or scalar. A rule that reads the value itself (real(),
  // integer()) sets `read_statically`, and the caller then keys the program by that value. A kIntList of a
  // rule with int_lists_are_operands is dynamic too: its operand is i64[n].
  bool dynamic = false;
  Value operand;
  mutable bool read_statically = false;
};

struct LoweringContext {
  Graph& graph;
  std::vector<Arg> args;
  std::vector<Type> outputs;  // result types, from shape inference
  DType common_dtype;         // PyTorch's result_type over the tensor and scalar arguments
  Value rng_state;            // ui64[2] (seed, offset); only for rules marked uses_rng
  const char* op = "";        // the rule's op name ("aten::_foreach_add.List"), for rules that serve several
  // Dynamic scalar arguments whose operands were created during lowering, in creation order: each became
  // a program parameter, after the tensor reads and the RNG state. A rule that lowers through a copied
  // context must create operands in its own context first (see foreach.cc).
  std::vector<size_t> created_operands = {};
  // Whether the program makes the value checks its rule states (TORCHTPU_VALUE_CHECKS), and those it
  // states, in order (lowering/value_check.h).
  bool value_checks = false;
  std::vector<ValueCheck> checks = {};

  Value tensor(size_t i) const;
  // Scalar argument i (a number, or a dynamic operand) as a value of `dtype` broadcast to `dims`. Integers
  // stay exact. This is how rules should use Scalar arguments: the program then serves every value.
  Value scalar(size_t i, DType dtype, const std::vector<int64_t>& dims = {});
  // The operand of dynamic scalar argument i (see Arg::operand), created on first use.
  Value operand(size_t i);
  const Type& type_of(size_t i) const { return graph.type(tensor(i)); }
  bool is_none(size_t i) const { return i >= args.size() || args[i].kind == Arg::Kind::kNone; }
  // The value of argument i at compile time. On a dynamic scalar this makes the value part of the program
  // (and of its cache key): use scalar() wherever the value only enters the arithmetic. A complex value
  // throws NotLowered (the call runs on the CPU): rules that read scalars read real ones.
  int64_t integer(size_t i) const;
  double real(size_t i) const;  // kDouble or kInt, as double
  std::complex<double> complex_value(size_t i) const;  // any number, as a complex one (keyed like real())
  bool boolean(size_t i) const { return integer(i) != 0; }
  // An int[] argument's values at compile time; throws for one that is a runtime operand (read it with
  // int_list).
  const std::vector<int64_t>& ints(size_t i) const;
  // An int[] argument as an i64[n] value: its runtime operand where the rule takes int lists as operands,
  // a constant otherwise.
  Value int_list(size_t i);
  const std::vector<double>& reals(size_t i) const;
  const std::string& text(size_t i) const;
  // States a check CPU makes on argument values: `failed` (bool, any shape) marks the elements that fail
  // it, `values` (integer, failed's shape; or invalid) holds what CPU's message names of each. The program
  // reports the first failing element. Nothing is made while value_checks is off.
  void check(CheckKind kind, Value failed, Value values = {}, std::vector<int64_t> facts = {});
};

// Thrown by a rule for arguments it does not lower (a driver whose results' shapes depend on the data, ...):
// the call runs through the CPU fallback instead.
struct NotLowered {};

using LowerFn = std::vector<Value> (*)(LoweringContext& ctx);

struct Rule {
  const char* op;     // "aten::name.overload"
  LowerFn lower;
  bool uses_rng = false;
  // The result replaces the first argument without reading it (fill_, copy_, uniform_, ...), so a write
  // that covers the whole storage need not pass the old contents in.
  bool overwrites_first_arg = false;
  // Every Scalar argument's value is part of the program, because it decides the output's shape (arange's
  // start, end and step), not only its values. Other rules read scalars as operands (LoweringContext::scalar)
  // or, where they specialise on a value, through real()/integer(), which keys the program by it.
  bool scalars_shape_output = false;
  // Its int[] arguments are runtime operands (LoweringContext::int_list) rather than compile-time values:
  // the program is keyed by each list's length, so varying lengths share one program. Checks CPU makes on
  // the values become value checks.
  bool int_lists_are_operands = false;
  // Bit i: the largest element of int[] argument i decides a result's shape (ctc_loss's log_alpha on the
  // longest target), so the program is keyed by it too.
  uint64_t int_list_maxima_shape_output = 0;
};

const Rule* find_rule(const std::string& op);
std::vector<std::string> rule_names();

// Each family file defines its rules and appends them here; table.cc calls every family once.
void add_elementwise_rules(std::vector<Rule>& table);
void add_reduction_rules(std::vector<Rule>& table);
void add_linalg_rules(std::vector<Rule>& table);
void add_linalg_decomposition_rules(std::vector<Rule>& table);
void add_nn_rules(std::vector<Rule>& table);
void add_random_rules(std::vector<Rule>& table);
void add_rnn_rules(std::vector<Rule>& table);
void add_sorting_rules(std::vector<Rule>& table);
void add_factory_rules(std::vector<Rule>& table);
void add_indexing_rules(std::vector<Rule>& table);
void add_shape_rules(std::vector<Rule>& table);
void add_padding_rules(std::vector<Rule>& table);
void add_histogram_rules(std::vector<Rule>& table);
void add_special_rules(std::vector<Rule>& table);
void add_foreach_rules(std::vector<Rule>& table);
void add_optimizer_rules(std::vector<Rule>& table);
void add_attention_rules(std::vector<Rule>& table);
void add_kernel_rules(std::vector<Rule>& table);  // lowering/kernel.h
void add_complex_rules(std::vector<Rule>& table);

// Whether the rule named `op` (Rule::op) computes complex operands and results correctly; calls with
// complex values to any other rule run through the CPU fallback (lowering/complex.cc).
bool handles_complex(const std::string& op);

// The per-tensor op a foreach op applies to each list element ("aten::_foreach_add.List" ->
// "aten::add.Tensor"); null for any other op (lowering/foreach.cc).
const std::string* foreach_element_op(const std::string& op);

}  // namespace torchtpu::lowering
