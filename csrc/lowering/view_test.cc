// Strided view reads and writes, checked numerically on the plugin against the obvious host loops.
#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "lowering/view.h"
#include "runtime/buffer.h"
#include "runtime/executable.h"
#include "testing/check.h"

using namespace torchtpu;
using namespace torchtpu::lowering;

namespace {

std::vector<float> storage(int64_t n) {
  std::vector<float> data(static_cast<size_t>(n));
  std::iota(data.begin(), data.end(), 0.0f);
  return data;
}

// Values of the view computed on the host.
std::vector<float> expected_read(const std::vector<float>& flat, const ViewGeometry& view) {
  std::vector<float> out;
  std::vector<int64_t> index(view.sizes.size(), 0);
  for (int64_t n = 0; n < view.numel(); ++n) {
    int64_t position = view.offset;
    for (size_t d = 0; d < index.size(); ++d) position += index[d] * view.strides[d];
    out.push_back(flat[static_cast<size_t>(position)]);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < view.sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<float> run_read(const std::vector<float>& flat, const ViewGeometry& view) {
  ir::Graph g;
  const int64_t n = static_cast<int64_t>(flat.size());
  ir::Value p = g.parameter(ir::Type{DType::kF32, {n}});
  ir::Value v = g.reshape(read_view(g, p, view), {view.numel()});
  g.set_results({v});
  auto exe = runtime::compile(g.emit(), {{DType::kF32, {view.numel()}}});
  auto in = runtime::upload(flat.data(), DType::kF32, {n}, 0, nullptr);
  auto out = exe->execute(0, {in.get()});
  std::vector<float> result(static_cast<size_t>(view.numel()));
  runtime::download(*out[0], result.data());
  return result;
}

std::vector<float> run_write(const std::vector<float>& flat, const ViewGeometry& view, float value) {
  ir::Graph g;
  const int64_t n = static_cast<int64_t>(flat.size());
  ir::Value p = g.parameter(ir::Type{DType::kF32, {n}});
  ir::Value fill = g.constant(value, DType::kF32, view.sizes);
  g.set_results({write_view(g, p, view, fill)});
  auto exe = runtime::compile(g.emit(), {{DType::kF32, {n}}});
  auto in = runtime::upload(flat.data(), DType::kF32, {n}, 0, nullptr);
  auto out = exe->execute(0, {in.get()});
  std::vector<float> result(flat.size());
  runtime::download(*out[0], result.data());
  return result;
}

void check_read(const ViewGeometry& view, int64_t storage_numel) {
  const auto flat = storage(storage_numel);
  EXPECT(run_read(flat, view) == expected_read(flat, view));
}

}  // namespace

TEST_CASE("contiguous slice with offset") { check_read({DType::kF32, {2, 3}, {3, 1}, 4}, 12); }
TEST_CASE("transpose") { check_read({DType::kF32, {4, 3}, {1, 4}, 0}, 12); }
TEST_CASE("column select runs past the end and is padded") { check_read({DType::kF32, {3}, {4}, 3}, 12); }
TEST_CASE("broadcast (stride 0) with a unit dim") { check_read({DType::kF32, {2, 1, 3}, {0, 7, 1}, 1}, 12); }
TEST_CASE("diagonal") { check_read({DType::kF32, {4}, {5}, 0}, 16); }
TEST_CASE("overlapping windows (unfold) fall back to gather") { check_read({DType::kF32, {4, 3}, {2, 1}, 0}, 12); }

TEST_CASE("write through a strided column scatters into the base") {
  const auto flat = storage(12);
  const ViewGeometry column{DType::kF32, {3}, {4}, 1};
  const auto result = run_write(flat, column, -1.0f);
  for (int64_t i = 0; i < 12; ++i) {
    const bool inside = i % 4 == 1;
    EXPECT(result[static_cast<size_t>(i)] == (inside ? -1.0f : static_cast<float>(i)));
  }
}

TEST_CASE("write through a contiguous row leaves the rest") {
  const auto flat = storage(12);
  const auto result = run_write(flat, {DType::kF32, {4}, {1}, 4}, 7.0f);
  for (int64_t i = 0; i < 12; ++i) {
    EXPECT(result[static_cast<size_t>(i)] == ((i >= 4 && i < 8) ? 7.0f : static_cast<float>(i)));
  }
}

// One program for a [2, k] view whose row stride and offset are operands (the last columns of a tensor that
// grows by a column per step): run at several row lengths, it reads and writes what the host loops say.
TEST_CASE("a runtime stride and offset serve every row length") {
  const int64_t n = 64;
  const auto flat = storage(n);
  const ViewGeometry shape{DType::kF32, {2, 3}, {0, 1}, 0};  // the row stride and offset come at run time
  ir::Graph reads, writes;
  for (ir::Graph* g : {&reads, &writes}) {
    ir::Value p = g->parameter(ir::Type{DType::kF32, {n}});
    ir::Value offset = g->parameter(ir::Type{DType::kI64, {}});
    std::vector<ir::Value> strides{g->parameter(ir::Type{DType::kI64, {}}), ir::Value{}};
    if (g == &reads) {
      g->set_results({g->reshape(read_view(*g, p, shape, offset, strides), {6})});
    } else {
      g->set_results({write_view(*g, p, shape, g->constant(-1.0f, DType::kF32, {2, 3}), offset, strides)});
    }
  }
  auto read_exe = runtime::compile(reads.emit(), {{DType::kF32, {6}}});
  auto write_exe = runtime::compile(writes.emit(), {{DType::kF32, {n}}});
  auto in = runtime::upload(flat.data(), DType::kF32, {n}, 0, nullptr);
  for (int64_t row_length : {5, 9, 30}) {
    const ViewGeometry view{DType::kF32, {2, 3}, {row_length, 1}, row_length - 3};
    auto offset = runtime::upload(&view.offset, DType::kI64, {}, 0, nullptr);
    auto stride = runtime::upload(&row_length, DType::kI64, {}, 0, nullptr);
    std::vector<float> got(6);
    runtime::download(*read_exe->execute(0, {in.get(), offset.get(), stride.get()})[0], got.data());
    EXPECT(got == expected_read(flat, view));
    std::vector<float> written(static_cast<size_t>(n));
    runtime::download(*write_exe->execute(0, {in.get(), offset.get(), stride.get()})[0], written.data());
    for (int64_t i = 0; i < n; ++i) {
      const bool inside = i < 2 * row_length && i % row_length >= row_length - 3;
      EXPECT(written[static_cast<size_t>(i)] == (inside ? -1.0f : static_cast<float>(i)));
    }
  }
}

TEST_CASE("grown rows read padded and packed back at every length") {
  // A [2, length, 3] array at the start of a storage with room for 8 rows, read as [2, 8, 3] (edge or zero
  // padding) and packed back: one program per direction, three lengths.
  const int64_t outer = 2, capacity = 8, inner = 3, n = outer * capacity * inner;
  const auto flat = storage(n);
  std::unique_ptr<runtime::Executable> read[2], round_trip;
  for (int zeros = 0; zeros < 2; ++zeros) {
    ir::Graph g;
    ir::Value p = g.parameter(ir::Type{DType::kF32, {n}});
    ir::Value length = g.parameter(ir::Type{DType::kI64, {}});
    g.set_results({g.reshape(read_padded_rows(g, p, outer, capacity, inner, length, zeros == 1), {n})});
    read[zeros] = runtime::compile(g.emit(), {{DType::kF32, {n}}});
  }
  {
    ir::Graph g;
    ir::Value p = g.parameter(ir::Type{DType::kF32, {n}});
    ir::Value length = g.parameter(ir::Type{DType::kI64, {}});
    g.set_results({pack_rows(g, read_padded_rows(g, p, outer, capacity, inner, length, false), length)});
    round_trip = runtime::compile(g.emit(), {{DType::kF32, {n}}});
  }
  auto in = runtime::upload(flat.data(), DType::kF32, {n}, 0, nullptr);
  for (int64_t length : {1, 5, 8}) {
    auto operand = runtime::upload(&length, DType::kI64, {}, 0, nullptr);
    for (int zeros = 0; zeros < 2; ++zeros) {
      std::vector<float> got(static_cast<size_t>(n));
      runtime::download(*read[zeros]->execute(0, {in.get(), operand.get()})[0], got.data());
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t r = 0; r < capacity; ++r) {
          for (int64_t e = 0; e < inner; ++e) {
            const int64_t source = (o * length + std::min(r, length - 1)) * inner + e;
            const float expected = r >= length && zeros ? 0.0f : flat[static_cast<size_t>(source)];
            EXPECT(got[static_cast<size_t>((o * capacity + r) * inner + e)] == expected);
          }
        }
      }
    }
    std::vector<float> packed(static_cast<size_t>(n));
    runtime::download(*round_trip->execute(0, {in.get(), operand.get()})[0], packed.data());
    for (int64_t i = 0; i < outer * length * inner; ++i) EXPECT(packed[static_cast<size_t>(i)] == flat[static_cast<size_t>(i)]);
  }
}

int main() { return torchtpu::testing::run_all(); }
