// The unboxed entry of a lowered op: its tensor arguments reach run_lowered_op borrowed, not copied.
//
// Why: c10 calls a boxed kernel through a wrapper that copies every argument into an IValue. PyTorch ties a
// tensor's Python object to its C++ reference count, so copying a tensor that only Python holds (count 1 -> 2)
// increfs the Python object, which takes the GIL (released around every op), and dropping the copy takes it
// again: four GIL round trips for `x + y`, a quarter of a recorded op's time. Here a tensor argument becomes an
// IValue naming the caller's TensorImpl without a reference of its own, released (not destroyed) once the op
// returns; run_lowered_op never drops or replaces an argument, so nothing else lets go of it. Whatever keeps a
// tensor beyond the call (a trace, a result that aliases an argument) copies it and takes a real reference.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "aten/op_info.h"
#include "aten/op_kernel.h"

namespace torchtpu::aten::unboxed {

// An IValue naming `tensor`'s TensorImpl without a reference of its own.
inline c10::IValue borrow(const at::Tensor& tensor) {
  return c10::IValue(at::Tensor(
      c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(tensor.unsafeGetTensorImpl())));
}

// The call's stack. Its borrowed arguments let go of their TensorImpl without a decrement when they are
// dropped (drop_arguments) or when the stack goes.
class BorrowingStack {
 public:
  explicit BorrowingStack(size_t arguments) { stack_.reserve(arguments + 2); }
  ~BorrowingStack() { release_borrowed(); }
  BorrowingStack(const BorrowingStack&) = delete;
  BorrowingStack& operator=(const BorrowingStack&) = delete;

  template <class T>
  void push(T&& argument) {
    using Plain = std::decay_t<T>;
    if constexpr (std::is_same_v<Plain, at::Tensor>) {
      borrowed_ |= uint64_t{1} << stack_.size();
      stack_.push_back(borrow(argument));
    } else if constexpr (std::is_same_v<Plain, std::optional<at::Tensor>>) {
      if (!argument.has_value()) {
        stack_.emplace_back();
        return;
      }
      borrowed_ |= uint64_t{1} << stack_.size();
      stack_.push_back(borrow(*argument));
    } else {
      stack_.emplace_back(std::forward<T>(argument));
    }
  }
  // Removes the first `count` entries (the arguments), leaving what the kernel pushed after them.
  void drop_arguments(size_t count) {
    release_borrowed();
    stack_.erase(stack_.begin(), stack_.begin() + static_cast<std::ptrdiff_t>(count));
  }
  torch::jit::Stack& stack() { return stack_; }

 private:
  void release_borrowed() {
    for (size_t i = 0; borrowed_ != 0; ++i, borrowed_ >>= 1) {
      if ((borrowed_ & 1) != 0 && stack_[i].isTensor()) std::move(stack_[i]).toTensor().unsafeReleaseTensorImpl();
    }
  }

  torch::jit::Stack stack_;
  uint64_t borrowed_ = 0;  // bit i: stack_[i] is borrowed
};

// The entry for the operator `Op` (an at::_ops struct). What it returns follows c10's boxing wrapper: an op
// returning a tensor reference returns its written argument (the first of an in-place op, the last ones of an
// out= op); any other result is what the kernel pushed.
template <class Op, class Schema = typename Op::schema>
struct Entry;

template <class Op, class Result, class... Args>
struct Entry<Op, Result(Args...)> {
  static_assert(sizeof...(Args) <= 64, "more arguments than the borrowed-argument mask holds");

  static Result call(Args... args) {
    static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    static OpInfo& info = op_info(op);  // saves the per-thread lookup op_info makes for the boxed path
    BorrowingStack stack(sizeof...(Args));
    (stack.push(std::forward<Args>(args)), ...);
    run_lowered_op(op, info, &stack.stack());
    if constexpr (std::is_void_v<Result>) {
      return;
    } else if constexpr (std::is_lvalue_reference_v<Result>) {
      using First = std::tuple_element_t<0, std::tuple<Args...>>;
      std::tuple<Args...> all{std::forward<Args>(args)...};
      if constexpr (c10::impl::is_mutable_tensor_ref<First>::value || std::is_same_v<Result, const at::Tensor&>) {
        return std::get<0>(all);
      } else {
        return std::get<sizeof...(Args) - 1>(all);
      }
    } else if constexpr (c10::impl::is_tuple_of_mutable_tensor_refs<Result>::value) {
      using ArgTuple = std::tuple<Args...>;
      return c10::guts::tuple_take<ArgTuple, -static_cast<int>(std::tuple_size_v<Result>)>(
          ArgTuple{std::forward<Args>(args)...});
    } else {
      stack.drop_arguments(sizeof...(Args));
      return c10::impl::PopResult<Result>::call(stack.stack());
    }
  }
};

// Registers `Op`'s unboxed entry under `name` ("add.Tensor"); boxed callers reach it through c10's unboxing
// adapter.
template <class Op>
void register_entry(torch::Library& library, const char* name) {
  library.impl(name, TORCH_FN(Entry<Op>::call));
}

}  // namespace torchtpu::aten::unboxed
