// The tpu random generator: a (seed, offset) pair. Programs receive it as an input and the offset
// advances by the number of draws, so a seed reproduces a run exactly.
#pragma once

#include <ATen/core/Generator.h>

#include <array>
#include <optional>

#include "runtime/buffer.h"

namespace torchtpu::aten {

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);
// Returns the state to use for one sampling program, a u64[2] (seed, offset) buffer on `device`, and
// advances the generator (the device's default one when `generator` is empty) by `draws`.
runtime::BufferPtr next_rng_state(const std::optional<at::Generator>& generator, c10::DeviceIndex device,
                                  int64_t draws);

}  // namespace torchtpu::aten
