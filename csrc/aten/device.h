// The tpu device as PyTorch sees it (aten/device.cc): what synchronizing it means to a user.
#pragma once

#include <c10/core/Device.h>

namespace torchtpu::aten {

// Raises PyTorch's RuntimeError naming the device count unless `index` names a tpu device.
void check_device_index(int index);

// What torch.tpu.synchronize(), torch.accelerator.synchronize() and Stream.synchronize() do: run the fused
// trace being recorded, wait for every execution queued on `device`, then raise the first error among them
// or the first failed value check.
void synchronize_device(int device);

}  // namespace torchtpu::aten
