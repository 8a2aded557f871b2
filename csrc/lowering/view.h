// Reading and writing strided views of a flat storage inside a program.
//
// A storage is one flat buffer; a tensor is (dtype, sizes, strides, offset) over it, counted in elements of
// the tensor's dtype. Reads turn the view into a dense value with slice/reshape/transpose/broadcast where
// the strides allow and a gather otherwise; writes scatter into the flat storage so every alias sees them.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace torchtpu::lowering {

struct ViewGeometry {
  DType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;

  int64_t numel() const;
  bool is_contiguous() const;
};

// The view's dims from outermost to innermost in memory when it is dense and non-overlapping in some order
// (a transposed or channels-last tensor), else empty.
std::vector<int64_t> dense_order(const ViewGeometry& view);

// True when the view is the whole storage, dense and in order: a write may then simply replace the buffer.
bool covers_storage(const ViewGeometry& view, DType storage_dtype, int64_t storage_numel);

// `flat` is the storage: a 1-d value of the storage's dtype. When `offset` is valid (a rank-0 i64 value)
// it is the view's storage offset at run time and view.offset is ignored: one program then serves the
// same view at every position (x[i] in a loop, a KV-cache write at a moving position). Likewise a valid
// `strides[d]` is dim d's stride at run time (one program for a view into a tensor that grows): the view
// is then read with a gather and written with a scatter of computed positions.
ir::Value read_view(ir::Graph& graph, ir::Value flat, const ViewGeometry& view, ir::Value offset = {},
                    const std::vector<ir::Value>& strides = {});
// Returns the new flat storage, in the view's dtype, with `value` (of the view's sizes) written through it.
ir::Value write_view(ir::Graph& graph, ir::Value flat, const ViewGeometry& view, ir::Value value,
                     ir::Value offset = {}, const std::vector<ir::Value>& strides = {});

// A grown array (aten/append.h): `flat` starts with a contiguous [outer, length, inner] array, `length` a
// rank-0 i64 value at run time. Returns it as [outer, padded, inner], rows from `length` on copies of the
// last real row, or zeros when `zeros` is set. Both directions cost a dynamic slice per outer block.
ir::Value read_padded_rows(ir::Graph& graph, ir::Value flat, int64_t outer, int64_t padded, int64_t inner,
                           ir::Value length, bool zeros);
// The inverse: `value` ([outer, padded, inner]) as a 1-d array of the same size that starts with its first
// `length` rows, contiguous as [outer, length, inner].
ir::Value pack_rows(ir::Graph& graph, ir::Value value, ir::Value length);

}  // namespace torchtpu::lowering
