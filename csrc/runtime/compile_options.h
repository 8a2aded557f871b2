// Hand-encoded xla.CompileOptionsProto: the plugin aborts on empty options, and pulling in protobuf for
// four fields is not worth a dependency.
#pragma once

#include <string>

namespace torchtpu::runtime {

// Serialized CompileOptionsProto for one replica and one partition. `portable` asks for an executable that
// is not bound to a device, so one compile serves every device (the device is chosen at execute time).
std::string compile_options_proto(bool portable);

}  // namespace torchtpu::runtime
