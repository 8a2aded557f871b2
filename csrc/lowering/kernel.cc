#include "lowering/kernel.h"

#include <deque>
#include <mutex>
#include <stdexcept>

#include "lowering/rule.h"

namespace torchtpu::lowering {
namespace {

struct Registry {
  std::mutex mutex;
  std::deque<Kernel> entries;  // a deque: references handed out stay valid as it grows
};
Registry& registry() {
  static Registry r;
  return r;
}

// torchtpu::_kernel(Tensor[] inputs, int entry) -> Tensor[]. The meta kernel (aten/kernel.h), which runs
// before every lowering, has checked the inputs against the entry's types.
std::vector<Value> lower_kernel(LoweringContext& ctx) {
  const Kernel& kernel = registered_kernel(ctx.integer(1));
  const std::vector<Value>& inputs = ctx.args.at(0).tensors;
  ctx.graph.add_functions(kernel.functions);
  return ctx.graph.op_multi("func.call", inputs, kernel.outputs, "callee = @" + kernel.entry);
}

}  // namespace

int64_t register_kernel(Kernel kernel) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.entries.push_back(std::move(kernel));
  return static_cast<int64_t>(r.entries.size()) - 1;
}

const Kernel& registered_kernel(int64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (id < 0 || id >= static_cast<int64_t>(r.entries.size())) {
    throw std::invalid_argument("torchtpu::_kernel: no kernel entry " + std::to_string(id) +
                                " (entries come from torchtpu.kernels)");
  }
  return r.entries[static_cast<size_t>(id)];
}

void add_kernel_rules(std::vector<Rule>& table) { table.push_back({"torchtpu::_kernel", &lower_kernel}); }

}  // namespace torchtpu::lowering
