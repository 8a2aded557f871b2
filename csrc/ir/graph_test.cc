// Emitter tests: the printed module's shape, and that the plugin compiles and runs what we print.
#include <string>

#include "ir/graph.h"
#include "runtime/buffer.h"
#include "runtime/executable.h"
#include "testing/check.h"

using namespace torchtpu;
using namespace torchtpu::ir;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("types print in MLIR spelling") {
  EXPECT(to_mlir(Type{DType::kF32, {2, 3}}) == "tensor<2x3xf32>");
  EXPECT(to_mlir(Type{DType::kBool, {}}) == "tensor<i1>");
  EXPECT(to_mlir(Type{DType::kU8, {4}}) == "tensor<4xui8>");
}

TEST_CASE("constants print exactly as bit patterns") {
  Graph g;
  Value c = g.constant(0.1, DType::kF32);
  g.set_results({c});
  EXPECT(contains(g.emit(), "dense<0x3DCCCCCD>"));
  Graph h;
  h.set_results({h.constant(1.0, DType::kBF16)});
  EXPECT(contains(h.emit(), "dense<0x3F80>"));
}

TEST_CASE("identity reshapes, transposes and broadcasts emit nothing") {
  Graph g;
  Value p = g.parameter(Type{DType::kF32, {2, 3}});
  EXPECT(g.reshape(p, {2, 3}).id == p.id);
  EXPECT(g.transpose(p, {0, 1}).id == p.id);
  EXPECT(g.broadcast_in_dim(p, {2, 3}, {0, 1}).id == p.id);
}

TEST_CASE("a reduction with a region compiles and runs") {
  Graph g;
  Value x = g.parameter(Type{DType::kF32, {2, 3}});
  Value s = g.reduce(x, g.constant(0.0, DType::kF32), {1}, Reducer::kAdd);
  Value m = g.reduce(x, g.constant(-1e30, DType::kF32), {0}, Reducer::kMax);
  g.set_results({s, m});
  auto exe = runtime::compile(g.emit(), {{DType::kF32, {2}}, {DType::kF32, {3}}});
  float data[6] = {1, 2, 3, 4, 5, 6};
  auto in = runtime::upload(data, DType::kF32, {2, 3}, 0, nullptr);
  auto out = exe->execute(0, {in.get()});
  float sums[2], maxes[3];
  runtime::download(*out[0], sums);
  runtime::download(*out[1], maxes);
  EXPECT(sums[0] == 6 && sums[1] == 15);
  EXPECT(maxes[0] == 4 && maxes[2] == 6);
}

TEST_CASE("dot_general, compare/select and rng_bit_generator compile") {
  Graph g;
  Value a = g.parameter(Type{DType::kF32, {2, 3}});
  Value b = g.parameter(Type{DType::kF32, {3, 4}});
  Value state = g.parameter(Type{DType::kU64, {2}});
  Value product = g.dot_general(a, b, {}, {}, {1}, {0}, DType::kF32);
  Value zero = g.constant(0.0, DType::kF32, {2, 4});
  Value relu = g.select(g.compare(product, zero, Comparison::kGT), product, zero);
  auto bits = g.rng_bit_generator(state, Type{DType::kU32, {8}});
  g.set_results({relu, bits.second});
  EXPECT(contains(g.emit(), "%v"));
  auto exe = runtime::compile(g.emit(), {{DType::kF32, {2, 4}}, {DType::kU32, {8}}});
  EXPECT(exe->output_types().size() == 2);
}

int main() { return torchtpu::testing::run_all(); }

TEST_CASE("a while loop with values from outside its regions compiles and runs") {
  // Sums x + x + ... (n times) with a counter, where n and x live outside the loop.
  Graph g;
  Value x = g.parameter(Type{DType::kF32, {3}});
  Value n = g.constant_int(4, DType::kI64);
  auto final_state = g.while_loop(
      {g.constant_int(0, DType::kI64), g.constant(0.0, DType::kF32, {3})},
      [&](const std::vector<Value>& s) { return std::vector<Value>{g.compare(s[0], n, Comparison::kLT)}; },
      [&](const std::vector<Value>& s) {
        return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)), g.binary("add", s[1], x)};
      });
  g.set_results({final_state[1]});
  EXPECT(contains(g.emit(), "stablehlo.while"));
  auto exe = runtime::compile(g.emit(), {{DType::kF32, {3}}});
  float data[3] = {1, 2, 3};
  auto in = runtime::upload(data, DType::kF32, {3}, 0, nullptr);
  auto out = exe->execute(0, {in.get()});
  float sums[3];
  runtime::download(*out[0], sums);
  EXPECT(sums[0] == 4 && sums[1] == 8 && sums[2] == 12);
}

TEST_CASE("a 64-bit integer dot_general is a multiply and a sum (TPUs reject s64 dots) and stays exact") {
  // Batched: [2, 2, 3] x [2, 3, 2], with products past 2^32 so a 32-bit path would be caught.
  Graph g;
  Value a = g.parameter(Type{DType::kI64, {2, 2, 3}});
  Value b = g.parameter(Type{DType::kI64, {2, 3, 2}});
  g.set_results({g.dot_general(a, b, {0}, {0}, {2}, {1}, DType::kI64)});
  EXPECT(!contains(g.emit(), "dot_general"));
  auto exe = runtime::compile(g.emit(), {{DType::kI64, {2, 2, 2}}});
  int64_t lhs[12], rhs[12];
  for (int i = 0; i < 12; ++i) {
    lhs[i] = (int64_t{1} << 33) + i;
    rhs[i] = 3 - i;
  }
  auto in_a = runtime::upload(lhs, DType::kI64, {2, 2, 3}, 0, nullptr);
  auto in_b = runtime::upload(rhs, DType::kI64, {2, 3, 2}, 0, nullptr);
  auto out = exe->execute(0, {in_a.get(), in_b.get()});
  int64_t result[8];
  runtime::download(*out[0], result);
  for (int batch = 0; batch < 2; ++batch) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        int64_t expected = 0;
        for (int k = 0; k < 3; ++k) expected += lhs[batch * 6 + i * 3 + k] * rhs[batch * 6 + k * 2 + j];
        EXPECT(result[batch * 4 + i * 2 + j] == expected);
      }
    }
  }
}
