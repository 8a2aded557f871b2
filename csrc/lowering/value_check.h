// Device-side value checks (docs/value_checks.md): the checks CPU makes on the values of an op's
// arguments (index bounds, targets, probabilities, ...), made by the op's program alongside its result.
//
// A rule states a check through LoweringContext::check: which elements fail it, and the values CPU's
// message names. The check becomes a word of the program, and the caller folds the program's words into
// the device's error state (fold_checks), which sync points read. The kinds name CPU's messages;
// check_message words them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace torchtpu::lowering {

// Each kind is one of CPU's messages; `facts` are the parts of it that the program's shapes fix. A check's
// id hashes its kind's number, so new kinds go at the end.
enum class CheckKind {
  kIndexBounds,        // facts {dim, size}: "index 9 is out of bounds for dimension 0 with size 3"
  kIndexOutOfRange,    // facts {dim, size}: "index out of range in self" (index_select, embedding)
  kFlatIndex,          // facts {numel}: "out of range: tried to access index 99 on a tensor of 12 elements."
  kBagIndex,           // facts {size}: "Index 0 of input takes value 7 which is not in the valid range [0, 5)"
  kTarget,             // "Target 5 is out of bounds."
  kProbabilities,      // "probability tensor contains either `inf`, `nan` or element < 0"
  kProbabilitySum,     // "invalid multinomial distribution (sum of probabilities <= 0)"
  kNormalStd,          // "normal expects all elements of std >= 0.0"
  kBceInput,           // "all elements of input should be between 0 and 1"
  kBceTarget,          // "all elements of target should be between 0 and 1"
  kMaskedScatterSize,  // "Number of elements of source < number of ones in mask"
  kZeroDivision,       // "ZeroDivisionError"
  kMarginTarget,       // "target out of range" (multi_margin_loss)
  kMultilabelTarget,   // facts {argument}: "argument #2 'target' is out of range" (multilabel_margin_loss)
  kBernoulliP,         // "Expected p_in >= 0 && p_in <= 1 to be true, but got false. ..." (bernoulli)
  kClassNegative,      // "Class values must be non-negative." (one_hot)
  kClassTooLarge,      // "Class values must be smaller than num_classes." (one_hot)
  kNotPositiveDefinite,  // facts {batched}: "cholesky: (Batch element 1): The factorization could not be ..."
  kCtcNegativeLength,    // facts {which: 0 input, 1 target}: "Expected input_lengths to have value at least 0, ..."
  kCtcTargetsSize,       // facts {size}: "Expected tensor to have size 6 at dimension 0, but got size 5 for ..."
  kEigNonFinite,         // "torch.linalg.eig: input tensor should not contain infs or NaNs."
  kHistcRange,           // "torch.histc: range of [1, inf] is not finite"; the value packs both ends as
                         // float32 bits (low word: min, high word: max)
  kSorterIndex,          // "torch.searchsorted(): sorter index out of range"
  kUnpoolIndex,          // facts {output dims}: "Found an invalid max index: 99 (output volumes are of size 4x4)"
  kCtcInputTooLong,      // facts {T}: "Expected input_lengths to have value at most 6, but got value 8 (...)"
  kHistogramRange,       // facts {dim}: "torch.histogramdd: dimension 0's range [1, inf] is not finite"
                         // (the value packed as kHistcRange's)
  kBagFirstOffset,       // "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start ..."
  kBagLastOffset,        // facts {input length}: "offsets[-1] can not be greater than input's length 4 but got ..."
  kBagOffsetsOrder,      // "Expected i < index_size to be true, but got false. ..." (decreasing offsets)
  kSvdNonFinite,         // a NaN: "linalg.svd: The algorithm failed to converge because the input matrix ..."
};

// One check of a program: its word is i64[3] (failed 0/1, the first failing element's value, its flat
// position).
struct ValueCheck {
  CheckKind kind;
  std::vector<int64_t> facts;
  ir::Value word;
};

// The device's error state after a program's checks, from the state before it (i64[3]: the id of the
// first failed check or 0, its value, its position). An earlier failure stays; otherwise the first of
// `checks` that failed is recorded under its id (ids[k], nonzero, for checks[k]).
ir::Value fold_checks(ir::Graph& g, ir::Value state, const std::vector<ValueCheck>& checks,
                      const std::vector<int64_t>& ids);

// CPU's message for a failed check.
std::string check_message(CheckKind kind, const std::vector<int64_t>& facts, int64_t value, int64_t position);

// Whether CPU's message already starts with the API it comes from ("torch.linalg.eig: ..."), so the
// reporter need not name the op again.
bool message_names_api(CheckKind kind);

}  // namespace torchtpu::lowering
