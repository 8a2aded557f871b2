#include "lowering/value_check.h"

#include <cstring>
#include <sstream>
#include <string>

#include "lowering/rule.h"

namespace torchtpu::lowering {

using ir::Comparison;

void LoweringContext::check(CheckKind kind, Value failed, Value values, std::vector<int64_t> facts) {
  if (!value_checks) return;
  Graph& g = graph;
  const int64_t n = g.type(failed).numel();
  if (n == 0) return;
  // The first failing position, or n when none fails.
  Value position = g.iota(Type{DType::kI64, {n}}, 0);
  Value past_end = g.constant_int(n, DType::kI64, {n});
  Value first = g.reduce(g.select(g.reshape(failed, {n}), position, past_end), g.constant_int(n, DType::kI64), {0},
                         ir::Reducer::kMin);
  Value any = g.convert(g.compare(first, g.constant_int(n, DType::kI64), Comparison::kLT), DType::kI64);
  Value value = g.constant_int(0, DType::kI64, {1});
  if (values.valid()) {
    // The slice start is clamped into range, so "none failed" reads a harmless last element.
    value = g.dynamic_slice(g.reshape(g.convert(values, DType::kI64), {n}), {first}, {1});
  }
  Value word = g.concatenate({g.reshape(any, {1}), value, g.reshape(first, {1})}, 0);
  checks.push_back({kind, std::move(facts), word});
}

Value fold_checks(Graph& g, Value state, const std::vector<ValueCheck>& checks, const std::vector<int64_t>& ids) {
  const std::vector<int64_t> word_dims{3};
  Value zero = g.constant_int(0, DType::kI64, {1});
  for (size_t k = 0; k < checks.size(); ++k) {
    Value word = checks[k].word;
    Value clean = g.compare(g.slice(state, {0}, {1}, {1}), zero, Comparison::kEQ);
    Value failed = g.compare(g.slice(word, {0}, {1}, {1}), zero, Comparison::kNE);
    Value report = g.binary("and", clean, failed);
    Value recorded = g.concatenate({g.constant_int(ids[k], DType::kI64, {1}), g.slice(word, {1}, {3}, {1})}, 0);
    state = g.select(g.broadcast_in_dim(report, word_dims, {0}), recorded, state);
  }
  return state;
}

namespace {

// One end of a range packed by check_finite_data_range (float32 bits at `shift`), printed as CPU prints a
// double.
std::string packed_end(int64_t value, int shift) {
  const auto bits = static_cast<uint32_t>(static_cast<uint64_t>(value) >> shift);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  std::ostringstream text;
  text << static_cast<double>(f);
  return text.str();
}

}  // namespace

std::string check_message(CheckKind kind, const std::vector<int64_t>& facts, int64_t value, int64_t position) {
  auto fact = [&](size_t i) { return std::to_string(facts.at(i)); };
  const std::string v = std::to_string(value);
  switch (kind) {
    case CheckKind::kIndexBounds:
      return "index " + v + " is out of bounds for dimension " + fact(0) + " with size " + fact(1);
    case CheckKind::kIndexOutOfRange:
      // CPU's words name no index; the index and the size follow them.
      return "index out of range in self (index " + v + ", dimension " + fact(0) + " with size " + fact(1) + ")";
    case CheckKind::kFlatIndex:
      return "out of range: tried to access index " + v + " on a tensor of " + fact(0) + " elements.";
    case CheckKind::kBagIndex:
      return "Index " + std::to_string(position) + " of input takes value " + v +
             " which is not in the valid range [0, " + fact(0) + ")";
    case CheckKind::kTarget:
      return "Target " + v + " is out of bounds.";
    case CheckKind::kProbabilities:
      return "probability tensor contains either `inf`, `nan` or element < 0";
    case CheckKind::kProbabilitySum:
      return "invalid multinomial distribution (sum of probabilities <= 0)";
    case CheckKind::kNormalStd:
      return "normal expects all elements of std >= 0.0";
    case CheckKind::kBceInput:
      return "all elements of input should be between 0 and 1";
    case CheckKind::kBceTarget:
      return "all elements of target should be between 0 and 1";
    case CheckKind::kMaskedScatterSize:
      return "Number of elements of source < number of ones in mask";
    case CheckKind::kZeroDivision:
      return "ZeroDivisionError";
    case CheckKind::kMarginTarget:
      return "target out of range";
    case CheckKind::kMultilabelTarget:
      return "argument #" + fact(0) + " 'target' is out of range";
    case CheckKind::kBernoulliP:
      // CPU's TORCH_CHECK without a message words it so, suggestion included.
      return "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be improved?  "
             "If so, please report an enhancement request to PyTorch.)";
    case CheckKind::kClassNegative:
      return "Class values must be non-negative.";
    case CheckKind::kClassTooLarge:
      return "Class values must be smaller than num_classes.";
    case CheckKind::kNotPositiveDefinite:
      return std::string("cholesky: ") + (fact(0) == "1" ? "(Batch element " + std::to_string(position) + "): " : "") +
             "The factorization could not be completed because the input is not positive-definite (the leading "
             "minor of order " + v + " is not positive-definite).";
    case CheckKind::kCtcNegativeLength:
      return std::string("Expected ") + (fact(0) == "0" ? "input" : "target") +
             "_lengths to have value at least 0, but got value " + v +
             " (while checking arguments for ctc_loss_allocate_outputs)";
    case CheckKind::kCtcTargetsSize:
      // The value is the sum of the target lengths, the size concatenated targets must have.
      return "Expected tensor to have size " + v + " at dimension 0, but got size " + fact(0) +
             " for argument #2 'targets' (while checking arguments for ctc_loss_allocate_outputs)";
    case CheckKind::kEigNonFinite:
      return "torch.linalg.eig: input tensor should not contain infs or NaNs.";
    case CheckKind::kHistcRange:
      return "torch.histc: range of [" + packed_end(value, 0) + ", " + packed_end(value, 32) + "] is not finite";
    case CheckKind::kBagFirstOffset:
      return "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
             "However, got " + v;
    case CheckKind::kBagLastOffset:
      return "offsets[-1] can not be greater than input's length " + fact(0) + " but got offsets[-1] of " + v;
    case CheckKind::kBagOffsetsOrder:
      return "Expected i < index_size to be true, but got false.  (Could this error message be improved?  If so, "
             "please report an enhancement request to PyTorch.)";
    case CheckKind::kSvdNonFinite:
      return "linalg.svd: The algorithm failed to converge because the input matrix contained non-finite values.";
    case CheckKind::kHistogramRange:
      return "torch.histogramdd: dimension " + fact(0) + "'s range [" + packed_end(value, 0) + ", " +
             packed_end(value, 32) + "] is not finite";
    case CheckKind::kSorterIndex:
      return "torch.searchsorted(): sorter index out of range";
    case CheckKind::kUnpoolIndex: {
      std::string sizes;
      for (size_t i = 0; i < facts.size(); ++i) sizes += (i ? "x" : "") + std::to_string(facts[i]);
      return "Found an invalid max index: " + v + " (output volumes are of size " + sizes + ")";
    }
    case CheckKind::kCtcInputTooLong:
      return "Expected input_lengths to have value at most " + fact(0) + ", but got value " + v +
             " (while checking arguments for ctc_loss_allocate_outputs)";
  }
  return "value check failed";
}

bool message_names_api(CheckKind kind) {
  return kind == CheckKind::kEigNonFinite || kind == CheckKind::kHistcRange || kind == CheckKind::kSorterIndex ||
         kind == CheckKind::kHistogramRange;
}

}  // namespace torchtpu::lowering
