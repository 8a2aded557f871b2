// Connectionist temporal classification: _ctc_loss and _ctc_loss_backward, the ops F.ctc_loss reaches.
//
// Both run the recurrence of CPU's kernel over time in one stablehlo.while, vectorized over the batch and
// the extended label sequence l' (blank, label 1, blank, label 2, ..., blank: S = 2 * max target length + 1
// positions). The lengths arrive as int[] (ctc_loss moves tensor lengths to the host before it dispatches);
// they are runtime operands (Rule::int_lists_are_operands), so a training loop whose lengths change every
// batch runs one program per longest target. CPU's checks of the lengths that the key does not settle
// (negative lengths, concatenated targets of the wrong size) are value checks. Values are
// log-probabilities; a position a path cannot reach holds -inf.
#include <algorithm>
#include <limits>

#include "lowering/nn.h"

namespace torchtpu::lowering {

using ir::Comparison;
using ir::Reducer;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The static facts of one call and the values every step reads.
struct Ctc {
  int64_t time = 0, batch = 0, classes = 0, positions = 0;  // T, N, C, S
  Value input_lengths, target_lengths;                      // [N] i64
  DType dtype = DType::kF32;
  Value labels;      // l' [N, S] i64
  Value emissions;   // log_probs[t, n, l'[n, s]] as [T, N, S]
  Value valid;       // [N, S]: s <= 2 * target_length (positions past a sample's sequence stay -inf)
  Value skip;        // [N, S]: a path may reach s from s - 2 (l'[s] is a label differing from l'[s - 2])
  Value last;        // [N, S]: the two positions a complete path ends in (2 tl and 2 tl - 1)
};

// [rows, cols] booleans: the column index compared with `bound` [rows] (per row).
Value column_vs(Graph& g, int64_t rows, int64_t cols, Value bound, Comparison direction) {
  const std::vector<int64_t> dims{rows, cols};
  return g.compare(g.iota(Type{DType::kI64, dims}, 1), g.broadcast_in_dim(bound, dims, {0}), direction);
}

Value i64(Graph& g, int64_t value, const std::vector<int64_t>& dims = {}) {
  return g.constant_int(value, DType::kI64, dims);
}

Value times(Graph& g, Value x, int64_t factor) {
  return g.binary("multiply", x, i64(g, factor, g.type(x).dims));
}

Value plus(Graph& g, Value x, int64_t term) {
  return g.binary("add", x, i64(g, term, g.type(x).dims));
}

// Reads the arguments shared by the forward and the backward: log_probs, targets, input_lengths and
// target_lengths at `first` .. `first + 3`, and blank; `positions` is S, from log_alpha's shape.
Ctc prepare(LoweringContext& ctx, size_t first, size_t blank_arg, int64_t positions) {
  Graph& g = ctx.graph;
  Ctc c;
  const Type& lp = ctx.type_of(first);
  c.dtype = lp.dtype;
  // CPU's kernels serve float32 and float64; other dtypes get CPU's error.
  if (lp.rank() != 3 || (c.dtype != DType::kF32 && c.dtype != DType::kF64)) throw NotLowered{};
  c.time = lp.dims[0];
  c.batch = lp.dims[1];
  c.classes = lp.dims[2];
  c.positions = positions;
  c.input_lengths = ctx.int_list(first + 2);
  c.target_lengths = ctx.int_list(first + 3);
  const int64_t blank = ctx.integer(blank_arg);
  const int64_t max_target = (positions - 1) / 2;
  const std::vector<int64_t> nl{c.batch, max_target};
  Value none = i64(g, 0, {c.batch});
  ctx.check(CheckKind::kCtcNegativeLength, g.compare(c.input_lengths, none, Comparison::kLT), c.input_lengths, {0});
  ctx.check(CheckKind::kCtcNegativeLength, g.compare(c.target_lengths, none, Comparison::kLT), c.target_lengths, {1});
  ctx.check(CheckKind::kCtcInputTooLong, g.compare(c.input_lengths, i64(g, c.time, {c.batch}), Comparison::kGT),
            c.input_lengths, {c.time});

  // The labels of each sample: row n of 2-d targets, or its run of concatenated 1-d targets, which
  // starts at the sum of the earlier samples' lengths.
  const Type& targets = ctx.type_of(first + 1);
  Value start;
  if (targets.rank() == 2) {
    start = times(g, g.iota(Type{DType::kI64, {c.batch}}, 0), targets.dims[1]);
  } else {
    const std::vector<int64_t> nn{c.batch, c.batch};
    Value earlier = g.compare(g.iota(Type{DType::kI64, nn}, 1), g.iota(Type{DType::kI64, nn}, 0), Comparison::kLT);
    start = g.reduce(g.select(earlier, g.broadcast_in_dim(c.target_lengths, nn, {1}), i64(g, 0, nn)), i64(g, 0), {1},
                     Reducer::kAdd);
    Value total = g.reshape(g.reduce(c.target_lengths, i64(g, 0), {0}, Reducer::kAdd), {1});
    ctx.check(CheckKind::kCtcTargetsSize, g.compare(total, i64(g, targets.dims[0], {1}), Comparison::kNE), total,
              {targets.dims[0]});
  }
  Value blanks = i64(g, blank, nl);
  Value target_labels = blanks;
  if (max_target > 0 && targets.numel() > 0) {
    Value in_target = column_vs(g, c.batch, max_target, c.target_lengths, Comparison::kLT);
    Value position = g.binary("add", g.broadcast_in_dim(start, nl, {0}), g.iota(Type{DType::kI64, nl}, 1));
    position = g.select(in_target, position, i64(g, 0, nl));
    Value picked = g.gather_flat(g.reshape(ctx.tensor(first + 1), {targets.numel()}),
                                 g.reshape(position, {c.batch * max_target, 1}));
    target_labels = g.select(in_target, g.reshape(g.convert(picked, DType::kI64), nl), blanks);
  }
  // Interleave: (blank, label) pairs, then the final blank.
  Value pairs = g.concatenate({g.reshape(blanks, {c.batch, max_target, 1}),
                               g.reshape(target_labels, {c.batch, max_target, 1})}, 2);
  c.labels = g.concatenate({g.reshape(pairs, {c.batch, 2 * max_target}), i64(g, blank, {c.batch, 1})}, 1);

  // emissions[t, n, s] = log_probs[t, n, l'[n, s]]
  const std::vector<int64_t> tns{c.time, c.batch, c.positions};
  Value row = g.binary("add", times(g, g.iota(Type{DType::kI64, tns}, 0), c.batch), g.iota(Type{DType::kI64, tns}, 1));
  Value flat_index = g.binary("add", times(g, row, c.classes), g.broadcast_in_dim(c.labels, tns, {1, 2}));
  c.emissions = g.reshape(g.gather_flat(g.reshape(ctx.tensor(first), {lp.numel()}),
                                        g.reshape(flat_index, {c.time * c.batch * c.positions, 1})),
                          tns);

  // The final blank is at 2 tl, the last label at 2 tl - 1 (none when tl = 0).
  Value end = times(g, c.target_lengths, 2);
  c.valid = column_vs(g, c.batch, c.positions, end, Comparison::kLE);
  c.last = g.binary("or", column_vs(g, c.batch, c.positions, end, Comparison::kEQ),
                    column_vs(g, c.batch, c.positions, plus(g, end, -1), Comparison::kEQ));
  const int64_t first_pair = std::min<int64_t>(2, c.positions);
  Value two_back = g.concatenate({i64(g, blank, {c.batch, first_pair}),
                                  g.slice(c.labels, {0, 0}, {c.batch, c.positions - first_pair}, {1, 1})},
                                 1);
  Value past_first_pair = column_vs(g, c.batch, c.positions, i64(g, 1, {c.batch}), Comparison::kGT);
  c.skip = g.binary("and", past_first_pair, g.compare(c.labels, two_back, Comparison::kNE));
  return c;
}

// The shift of a log-sum-exp: the maximum m of the terms, or 0 where m is -inf (no term is reachable),
// since -inf - -inf would be NaN; the sum then stays -inf, as in CPU's kernels.
Value shift_of(Graph& g, Value m) {
  const Type& t = g.type(m);
  return g.select(g.compare(m, g.constant(kNegInf, t.dtype, t.dims), Comparison::kEQ), g.constant(0, t.dtype, t.dims),
                  m);
}

// log(exp(a) + exp(b) + exp(c)) elementwise.
Value log_add3(Graph& g, Value a, Value b, Value c) {
  Value m = shift_of(g, g.binary("maximum", g.binary("maximum", a, b), c));
  Value sum = g.binary("add", g.binary("add", g.unary("exponential", g.binary("subtract", a, m)),
                                       g.unary("exponential", g.binary("subtract", b, m))),
                       g.unary("exponential", g.binary("subtract", c, m)));
  return g.binary("add", g.unary("log", sum), m);
}

// x [N, S] moved `by` positions along S (positive: towards higher s), filled with -inf.
Value shift(Graph& g, Value x, int64_t by) {
  const Type& t = g.type(x);
  const int64_t s = t.dims[1];
  const int64_t k = std::min(std::abs(by), s);
  Value fill = g.constant(kNegInf, t.dtype, {t.dims[0], k});
  if (by > 0) return g.concatenate({fill, g.slice(x, {0, 0}, {t.dims[0], s - k}, {1, 1})}, 1);
  return g.concatenate({g.slice(x, {0, k}, {t.dims[0], s}, {1, 1}), fill}, 1);
}

// Row t of [T, N, S] as [N, S].
Value at_time(Graph& g, Value x, Value t) {
  const Type& type = g.type(x);
  Value zero = i64(g, 0);
  return g.reshape(g.dynamic_slice(x, {t, zero, zero}, {1, type.dims[1], type.dims[2]}),
                   {type.dims[1], type.dims[2]});
}

// x [N, S] written as row t of `table` [N, T, S].
Value put_time(Graph& g, Value table, Value x, Value t) {
  const Type& type = g.type(x);
  Value zero = i64(g, 0);
  return g.dynamic_update_slice(table, g.reshape(x, {type.dims[0], 1, type.dims[1]}), {zero, t, zero});
}

// [N, S] booleans: t compared with each sample's input length plus `delta`.
Value time_vs_length(Graph& g, const Ctc& c, Value t, int64_t delta, Comparison direction) {
  const std::vector<int64_t> ns{c.batch, c.positions};
  return g.compare(g.broadcast_in_dim(t, ns, {}), g.broadcast_in_dim(plus(g, c.input_lengths, delta), ns, {0}),
                   direction);
}

// The largest input length (a rank-0 i64): the recurrences stop there.
Value steps(Graph& g, const Ctc& c) {
  return g.reduce(c.input_lengths, i64(g, 0), {0}, Reducer::kMax);
}

// _ctc_loss(log_probs [T, N, C], targets, input_lengths, target_lengths, blank, zero_infinity)
//   -> (neg_log_likelihood [N], log_alpha [N, T, S])
// zero_infinity is applied by the caller (ctc_loss), not here, as on CPU.
std::vector<Value> lower_ctc_loss(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Ctc c = prepare(ctx, 0, 4, ctx.outputs.at(1).dims[2]);
  const std::vector<int64_t> ns{c.batch, c.positions};
  Value neg_inf = g.constant(kNegInf, c.dtype, ns);
  Value zero = i64(g, 0);

  // alpha_0: the blank or the first label.
  Value first_two = column_vs(g, c.batch, c.positions, i64(g, 2, {c.batch}), Comparison::kLT);
  Value alpha = g.select(g.binary("and", first_two, c.valid), at_time(g, c.emissions, zero), neg_inf);
  Value table = put_time(g, g.constant(kNegInf, c.dtype, {c.batch, c.time, c.positions}), alpha, zero);

  Value end = steps(g, c);
  auto cond = [&](const std::vector<Value>& s) { return std::vector<Value>{g.compare(s[0], end, Comparison::kLT)}; };
  auto body = [&](const std::vector<Value>& s) {
    Value t = s[0], prev = s[1];
    Value next = log_add3(g, prev, shift(g, prev, 1), g.select(c.skip, shift(g, prev, 2), neg_inf));
    next = g.select(c.valid, g.binary("add", next, at_time(g, c.emissions, t)), neg_inf);
    Value running = time_vs_length(g, c, t, 0, Comparison::kLT);
    // A sample past its input length keeps its last alpha: the loop ends holding alpha_{length - 1}.
    return std::vector<Value>{plus(g, t, 1), g.select(running, next, prev),
                              put_time(g, s[2], g.select(running, next, neg_inf), t)};
  };
  std::vector<Value> r = g.while_loop({i64(g, 1), alpha, table}, cond, body);

  // log p(l | x): the paths ending in the last label or the final blank. An empty input has likelihood 1
  // for an empty target and 0 otherwise.
  Value ends = g.select(c.last, r[1], neg_inf);
  Value m = shift_of(g, g.reduce(ends, g.constant(kNegInf, c.dtype), {1}, Reducer::kMax));
  Value sum = g.reduce(g.unary("exponential", g.binary("subtract", ends, g.broadcast_in_dim(m, ns, {0}))),
                       g.constant(0, c.dtype), {1}, Reducer::kAdd);
  Value likelihood = g.binary("add", g.unary("log", sum), m);
  Value none = i64(g, 0, {c.batch});
  Value empty_likelihood = g.select(g.compare(c.target_lengths, none, Comparison::kEQ),
                                    g.constant(0, c.dtype, {c.batch}), g.constant(kNegInf, c.dtype, {c.batch}));
  likelihood = g.select(g.compare(c.input_lengths, none, Comparison::kEQ), empty_likelihood, likelihood);
  return {g.unary("negate", likelihood), r[2]};
}

// _ctc_loss_backward(grad [N], log_probs, targets, input_lengths, target_lengths, neg_log_likelihood,
//                    log_alpha, blank, zero_infinity) -> grad_log_probs [T, N, C]
// beta runs backwards from each sample's last step; then for each class c at each step,
// grad = (exp(lp) - exp(logsumexp_{s: l'[s] = c}(alpha + beta) + nll - lp)) * grad_out, 0 past the input
// length, and 0 for a sample of infinite loss under zero_infinity.
std::vector<Value> lower_ctc_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Ctc c = prepare(ctx, 1, 7, ctx.type_of(6).dims[2]);
  const std::vector<int64_t> ns{c.batch, c.positions};
  const std::vector<int64_t> nts{c.batch, c.time, c.positions};
  const std::vector<int64_t> ntc{c.batch, c.time, c.classes};
  Value neg_inf = g.constant(kNegInf, c.dtype, ns);
  // beta reaches s from s + 2 where alpha reaches s + 2 from s.
  const int64_t last_pair = std::min<int64_t>(2, c.positions);
  Value skip_ahead = g.concatenate(
      {g.slice(c.skip, {0, last_pair}, ns, {1, 1}), g.constant_int(0, DType::kBool, {c.batch, last_pair})}, 1);

  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], i64(g, 0), Comparison::kGE)};
  };
  auto body = [&](const std::vector<Value>& s) {
    Value t = s[0], next = s[1];
    Value emission = at_time(g, c.emissions, t);
    Value carried = log_add3(g, next, shift(g, next, -1), g.select(skip_ahead, shift(g, next, -2), neg_inf));
    carried = g.select(c.valid, g.binary("add", carried, emission), neg_inf);
    Value start = g.select(c.last, emission, neg_inf);
    Value beta = g.select(time_vs_length(g, c, t, -1, Comparison::kEQ), start,
                          g.select(time_vs_length(g, c, t, -1, Comparison::kLT), carried, neg_inf));
    return std::vector<Value>{plus(g, t, -1), beta, put_time(g, s[2], beta, t)};
  };
  std::vector<Value> r =
      g.while_loop({plus(g, steps(g, c), -1), neg_inf, g.constant(kNegInf, c.dtype, nts)}, cond, body);

  // Collect alpha + beta per class: exp against the step's maximum, summed into classes by a one-hot
  // contraction over s, back to log space.
  Value alpha_beta = g.binary("add", ctx.tensor(6), r[2]);
  Value m = shift_of(g, g.reduce(alpha_beta, g.constant(kNegInf, c.dtype), {2}, Reducer::kMax));
  Value weights = g.unary("exponential", g.binary("subtract", alpha_beta, g.broadcast_in_dim(m, nts, {0, 1})));
  const std::vector<int64_t> nsc{c.batch, c.positions, c.classes};
  Value one_hot = g.convert(g.compare(g.broadcast_in_dim(c.labels, nsc, {0, 1}), g.iota(Type{DType::kI64, nsc}, 2),
                                      Comparison::kEQ),
                            c.dtype);
  Value collected = g.dot_general(weights, one_hot, {0}, {0}, {2}, {1}, c.dtype);  // [N, T, C]
  collected = g.binary("add", g.unary("log", collected), g.broadcast_in_dim(m, ntc, {0, 1}));

  Value lp = g.transpose(ctx.tensor(1), {1, 0, 2});  // [N, T, C]
  Value nll = g.broadcast_in_dim(ctx.tensor(5), ntc, {0});
  Value grad = g.binary("subtract", g.unary("exponential", lp),
                        g.unary("exponential", g.binary("subtract", g.binary("add", collected, nll), lp)));
  grad = g.binary("multiply", grad, g.broadcast_in_dim(ctx.tensor(0), ntc, {0}));
  Value in_input = g.compare(g.iota(Type{DType::kI64, ntc}, 1), g.broadcast_in_dim(c.input_lengths, ntc, {0}),
                             Comparison::kLT);
  Value zero = g.constant(0, c.dtype, ntc);
  grad = g.select(in_input, grad, zero);
  if (ctx.boolean(8)) {
    const double inf = std::numeric_limits<double>::infinity();
    grad = g.select(g.compare(nll, g.constant(inf, c.dtype, ntc), Comparison::kEQ), zero, grad);
  }
  return {g.transpose(grad, {1, 0, 2})};
}

}  // namespace

void add_nn_ctc_rules(std::vector<Rule>& table) {
  Rule forward{"aten::_ctc_loss", &lower_ctc_loss};
  forward.int_lists_are_operands = true;
  forward.int_list_maxima_shape_output = uint64_t{1} << 3;  // target_lengths: log_alpha is (N, T, 2 * max + 1)
  table.push_back(forward);
  Rule backward{"aten::_ctc_loss_backward", &lower_ctc_loss_backward};
  backward.int_lists_are_operands = true;
  table.push_back(backward);
}

}  // namespace torchtpu::lowering
