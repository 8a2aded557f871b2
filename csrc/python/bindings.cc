// The torchtpu._C module: glue between Python and the C++ core, nothing more. Importing it registers
// the tpu kernels, hooks, guard and allocator (static initializers in aten/).
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "aot/recorder.h"
#include "aten/compiled_graph.h"
#include "aten/device.h"
#include "aten/fused.h"
#include "aten/generator.h"
#include "aten/kernel.h"
#include "aten/metrics.h"
#include "aten/op_kernel.h"
#include "aten/registrations.h"
#include "aten/sharding.h"
#include "aten/storage.h"
#include "aten/value_checks.h"
#include "cache/disk_cache.h"
#include "eager/driver.h"
#include "lowering/rule.h"
#include "runtime/buffer.h"
#include "runtime/plugin.h"

namespace py = pybind11;
using namespace torchtpu;

namespace {

// PJRT errors reach Python as RuntimeError with the plugin's message.
template <typename Fn>
auto translate(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
}

py::dict metrics() {
  const aten::MetricsSnapshot snapshot = aten::metrics_snapshot();
  py::dict ops;
  for (const auto& [op, counters] : snapshot.ops) {
    py::dict entry;
    for (const auto& [name, value] : counters) entry[py::str(name)] = value;
    ops[py::str(op)] = entry;
  }
  py::dict transfers;
  transfers["to_device"] = snapshot.transfers_to_device;
  transfers["bytes_to_device"] = snapshot.bytes_to_device;
  transfers["to_host"] = snapshot.transfers_to_host;
  transfers["bytes_to_host"] = snapshot.bytes_to_host;
  const aten::ProgramCacheStats cache = aten::program_cache_stats();
  py::dict program_cache;
  program_cache["programs"] = cache.programs;
  program_cache["evictions"] = cache.evictions;
  program_cache["capacity"] = cache.capacity;
  const aten::FusedStats fused_stats = aten::fused_stats();
  py::dict fused;
  fused["ops_recorded"] = fused_stats.ops_recorded;
  fused["programs_run"] = fused_stats.programs_run;
  fused["compiles"] = fused_stats.compiles;
  fused["op_by_op_runs"] = fused_stats.op_by_op_runs;
  py::dict flushes;
  for (const auto& [reason, n] : fused_stats.flushes) flushes[py::str(reason)] = n;
  fused["flushes"] = flushes;
  const aten::CompiledGraphStats compiled_stats = aten::compiled_graph_stats();
  py::dict compiled;
  compiled["captures"] = compiled_stats.captures;
  compiled["replays"] = compiled_stats.replays;
  py::dict out;
  out["ops"] = ops;
  out["transfers"] = transfers;
  out["program_cache"] = program_cache;
  out["fused"] = fused;
  out["compiled"] = compiled;
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu C++ core";
  m.def("_set_plugin_candidates", &runtime::set_plugin_candidates);
  m.def("_plugin_info", [] {
    return translate([] {
      const runtime::PluginInfo& info = runtime::plugin_info();
      py::dict d;
      d["path"] = info.path;
      d["platform"] = info.platform;
      d["api_version"] = py::make_tuple(info.api_major, info.api_minor);
      d["stablehlo_current_version"] = info.stablehlo_current;
      d["stablehlo_minimum_version"] = info.stablehlo_minimum;
      d["xla_version"] = info.xla_version;
      return d;
    });
  });
  m.def("_plugin_loaded", &runtime::plugin_loaded);
  // A custom kernel's specialisation (torchtpu.kernels): types as (dtype, sizes) pairs; returns its entry id.
  m.def("_register_kernel", [](const std::string& name, const std::string& functions, const std::string& entry,
                               const std::vector<std::pair<at::ScalarType, std::vector<int64_t>>>& inputs,
                               const std::vector<std::pair<at::ScalarType, std::vector<int64_t>>>& outputs) {
    auto types = [](const std::vector<std::pair<at::ScalarType, std::vector<int64_t>>>& list) {
      std::vector<aten::KernelType> out;
      for (const auto& [dtype, sizes] : list) out.push_back({dtype, sizes});
      return out;
    };
    return translate([&] { return aten::register_kernel(name, functions, entry, types(inputs), types(outputs)); });
  });
  m.def("_device_count", [] { return translate([] { return runtime::device_count(); }); });
  m.def("_check_device_index", [](int index) { translate([&] { aten::check_device_index(index); }); });
  m.def("_device_kind", [](int index) {
    return translate([&] {
      aten::check_device_index(index);
      return runtime::device_kind(index);
    });
  });
  m.def("_current_device", [] {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
  });
  m.def("_set_device", [](int device) {
    c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
        ->setDevice(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)));
  });
  m.def("_synchronize", [](int device) {
    py::gil_scoped_release no_gil;
    translate([device] { aten::synchronize_device(device); });
  });
  // torch.Event.elapsed_time takes only a torch.Event itself as the end event, not torch.tpu.Event (a subclass).
  m.def("_event_elapsed_time", [](py::handle start, py::handle end) {
    for (py::handle event : {start, end}) {
      TORCH_CHECK_TYPE(PyObject_IsInstance(event.ptr(), reinterpret_cast<PyObject*>(&THPEventType)) == 1,
                       "elapsed_time expects torch.Event objects, got ", Py_TYPE(event.ptr())->tp_name);
    }
    const c10::Event& first = reinterpret_cast<THPEvent*>(start.ptr())->event;
    const c10::Event& second = reinterpret_cast<THPEvent*>(end.ptr())->event;
    py::gil_scoped_release no_gil;
    return first.elapsedTime(second);
  });
  m.def("_value_checks", &aten::value_checks_enabled);
  m.def("_set_value_checks", &aten::set_value_checks_enabled);
  m.def("_eager_mode", [] { return std::string(eager::mode_name(eager::mode())); });
  m.def("_set_eager_mode", [](const std::string& name) {
    const eager::Mode mode = translate([&] { return eager::parse_mode(name); });
    // Whatever takes the trace lock lets the GIL go first: a thread running a trace under that lock may drop
    // the last reference to a tensor whose Python object then needs the GIL.
    py::gil_scoped_release no_gil;
    aten::flush_every_trace(-1, "mode change");
    eager::set_mode(mode);
  });
  m.def("_thread_eager_mode", []() -> std::optional<std::string> {
    const std::optional<eager::Mode> mode = eager::thread_mode_set();
    return mode ? std::optional<std::string>(eager::mode_name(*mode)) : std::nullopt;
  });
  // Runs the calling thread's trace, then sets its own mode (None: the process's again).
  m.def("_set_thread_eager_mode", [](const std::optional<std::string>& name) {
    const std::optional<eager::Mode> mode =
        name ? std::optional<eager::Mode>(translate([&] { return eager::parse_mode(*name); })) : std::nullopt;
    py::gil_scoped_release no_gil;  // as _set_eager_mode
    translate([] { aten::flush_trace("mode change"); });
    eager::set_thread_mode(mode);
  });
  m.def("_flush", [](const std::string& reason) {
    py::gil_scoped_release no_gil;
    translate([&reason] { aten::flush_trace(reason.c_str()); });
  });
  py::class_<aten::CompiledGraph, std::shared_ptr<aten::CompiledGraph>>(m, "_CompiledGraph")
      .def("take_cpu_scalars", &aten::CompiledGraph::take_cpu_scalars)
      .def("fits", [](const aten::CompiledGraph& graph, const std::vector<at::Tensor>& inputs) {
        py::gil_scoped_release no_gil;  // as _set_eager_mode
        return translate([&] { return graph.fits(inputs); });
      })
      .def("run", [](const aten::CompiledGraph& graph, const std::vector<at::Tensor>& inputs,
                     const std::vector<at::Tensor>& cpu_scalars) {
        std::vector<at::Tensor> outputs;
        {
          py::gil_scoped_release no_gil;  // as _set_eager_mode
          outputs = translate([&] { return graph.run(inputs, cpu_scalars); });
        }
        return outputs;
      });
  m.def("_capture_begin", [] {
    py::gil_scoped_release no_gil;  // as _set_eager_mode
    return translate([] { return aten::begin_capture(); });
  });
  // Returns (graph, None), or (None, why the capture cannot be replayed).
  m.def("_capture_end", [](uint64_t trace, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
    std::string why_not;
    std::shared_ptr<aten::CompiledGraph> graph;
    {
      py::gil_scoped_release no_gil;  // the capture compiles the program
      graph = translate([&] { return aten::CompiledGraph::capture(trace, inputs, outputs, why_not); });
    }
    return py::make_tuple(graph, graph ? py::none() : py::cast(why_not));
  });
  // The StableHLO module of the trace begun by _capture_begin(), which this runs; empty when it was
  // flushed on the way (torchtpu.export).
  m.def("_capture_text", [](uint64_t trace) {
    py::gil_scoped_release no_gil;
    return translate([&] {
      std::optional<aten::FlushedTrace> flushed = aten::end_capture(trace, /*want_text=*/true);
      return flushed ? flushed->text : std::string();
    });
  });
  m.def("_memory_stats", [](int device) {
    // A fused trace may run first; the trace lock lets go of the GIL for it (aten/fused.h).
    const runtime::MemoryStats stats =
        translate([&] { return aten::device_memory_stats(static_cast<c10::DeviceIndex>(device)); });
    py::dict d;
    d["allocated"] = stats.allocated;
    d["peak"] = stats.peak_allocated;
    d["allocated_total"] = stats.allocated_total;
    d["freed_total"] = stats.freed_total;
    d["allocations"] = stats.allocations;
    d["frees"] = stats.frees;
    d["ooms"] = stats.ooms;
    d["limit"] = stats.limit;
    return d;
  });
  m.def("_reset_peak_memory", [](int device) {
    translate([&] { aten::reset_device_peak_memory(static_cast<c10::DeviceIndex>(device)); });
  });
  m.def("_reset_accumulated_memory", &runtime::reset_accumulated_memory);
  m.def("_set_memory_limit", &runtime::set_memory_limit);
  // Reliability (docs/reliability.md): availability without initialising, fork safety, exit.
  m.def("_is_available", &runtime::plugin_available);
  m.def("_is_in_bad_fork", &runtime::in_bad_fork);
  m.def("_prepare_exit", [] {
    py::gil_scoped_release no_gil;  // threads still dispatching need the GIL to reach a gate
    runtime::prepare_exit();
  });
  m.def("_default_generator", [](int device) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(aten::default_generator(static_cast<c10::DeviceIndex>(device))));
  });
  m.def("_metrics", &metrics);
  m.def("_reset_metrics", [] {
    aten::reset_metrics();
    aten::reset_fused_stats();
    aten::reset_compiled_graph_stats();
  });
  m.def("_lowered_ops", [] {
    std::vector<std::string> names;
    for (const aten::LoweredOp& op : aten::lowered_ops()) names.emplace_back(op.name);
    return names;
  });
  m.def("_rule_names", &lowering::rule_names);
  // torchtpu.aot: capture the programs a workload builds (op names, StableHLO text).
  // Single-controller SPMD (torchtpu.distributed.Mesh / shard).
  m.def("_shard", [](const at::Tensor& tensor, std::vector<int64_t> tiles, int64_t replicas, std::vector<int64_t> devices) {
    runtime::ShardingPtr sharding;
    try {
      sharding = std::make_shared<const runtime::Sharding>(std::move(tiles), replicas, std::move(devices));
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
    aten::shard_storage(tensor, std::move(sharding));
  });
  m.def("_sharding", [](const at::Tensor& tensor) -> py::object {
    // A value pending in a fused trace gets its sharding from XLA when its program runs: asking runs it.
    const runtime::ShardingPtr sharding = aten::storage_buffer(tensor)->sharding_ptr();
    if (!sharding) return py::none();
    return py::make_tuple(sharding->tiles(), sharding->replicas(), sharding->devices(), sharding->mhlo());
  });
  m.def("_aot_set_recording", &aot::set_recording);
  m.def("_aot_clear_recorded", &aot::clear_recorded);
  m.def("_aot_recorded_count", &aot::recorded_count);
  m.def("_aot_recording", &aot::recording);
  // A program built outside the drivers: a custom kernel's TPU (Mosaic) build (torchtpu.kernels).
  m.def("_aot_record", [](const std::string& op, const std::string& text) { aot::record(op, text); });
  m.def("_aot_recorded", [] {
    py::list out;
    for (const aot::RecordedProgram& p : aot::recorded_programs()) out.append(py::make_tuple(p.text, p.ops, p.builds, p.partitions));
    return out;
  });
  cache::set_warning_sink([](const std::string& message) { TORCH_WARN(message); });
  m.def("_disk_cache_stats", [] {
    const cache::DiskCacheStats s = cache::disk_cache_stats();
    py::dict d;
    d["enabled"] = s.enabled;
    d["directory"] = s.directory;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["writes"] = s.writes;
    d["rejected"] = s.rejected;
    d["evictions"] = s.evictions;
    d["entries"] = s.entries;
    d["bytes"] = s.bytes;
    d["max_bytes"] = s.max_bytes;
    return d;
  });
  m.def("_clear_disk_cache", &cache::clear_disk_cache);
}
