// torchtpu_aot_compile: compiles StableHLO files for a named topology through a PJRT plugin that can
// compile without devices (libtpu), and prints what the compiler said as JSON, one line per program.
// python/torchtpu/aot runs it as a child process: the TPU compiler aborts the whole process on a few inputs,
// and a child that dies takes only itself down (the parent restarts it after the program that killed it).
//
//   torchtpu_aot_compile --plugin libtpu.so --topology v5e:2x2 [--option name=value]...
//                        [--replicas N] [--partitions N]  < paths
//
// stdin: one path per line, each a file of StableHLO text. stdout: first a line describing the topology,
// then one line per program, flushed as soon as it is compiled. Exit 0 at end of input; 2 when the plugin
// or topology cannot be set up (the reason is the "error" of the one line printed).
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/aot.h"
#include "runtime/compile_options.h"

namespace {

using torchtpu::runtime::AotCompiler;
using torchtpu::runtime::AotResult;
using torchtpu::runtime::TopologyOption;

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Fingerprints are raw bytes.
std::string hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::string json_number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  return buf;
}

std::string result_line(const std::string& path, const AotResult& r) {
  std::ostringstream out;
  out << "{\"path\": " << json_string(path) << ", \"accepted\": " << (r.accepted ? "true" : "false")
      << ", \"compile_seconds\": " << json_number(r.compile_seconds);
  if (!r.accepted) {
    out << ", \"error\": " << json_string(r.error) << "}";
    return out.str();
  }
  out << ", \"cost\": {";
  for (size_t i = 0; i < r.cost.size(); ++i) {
    out << (i ? ", " : "") << json_string(r.cost[i].first) << ": " << json_number(r.cost[i].second);
  }
  out << "}, \"memory\": {\"argument_bytes\": " << r.argument_bytes << ", \"output_bytes\": " << r.output_bytes
      << ", \"alias_bytes\": " << r.alias_bytes << ", \"temp_bytes\": " << r.temp_bytes
      << ", \"generated_code_bytes\": " << r.generated_code_bytes << ", \"peak_bytes\": " << r.peak_bytes
      << "}, \"fingerprint\": " << json_string(hex(r.fingerprint)) << "}";
  return out.str();
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "torchtpu_aot_compile: %s\nusage: torchtpu_aot_compile --plugin PATH --topology NAME "
               "[--option name=value]... [--replicas N] [--partitions N] < paths\n",
               why);
  std::exit(64);
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugin, topology;
  std::vector<TopologyOption> options;
  int replicas = 1, partitions = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--plugin") {
      plugin = value;
    } else if (flag == "--topology") {
      topology = value;
    } else if (flag == "--option") {
      const size_t eq = value.find('=');
      if (eq == std::string::npos) usage("--option takes name=value");
      options.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else if (flag == "--replicas") {
      replicas = std::stoi(value);
    } else if (flag == "--partitions") {
      partitions = std::stoi(value);
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (plugin.empty() || topology.empty()) usage("--plugin and --topology are required");

  // stdout carries the protocol; anything the plugin prints there would corrupt it, so the protocol gets a
  // private copy of the descriptor and descriptor 1 goes to stderr.
  std::fflush(stdout);
  const int protocol_fd = dup(STDOUT_FILENO);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  FILE* protocol = fdopen(protocol_fd, "w");
  if (protocol == nullptr) return 70;
  auto emit = [protocol](const std::string& line) {
    std::fputs(line.c_str(), protocol);
    std::fputc('\n', protocol);
    std::fflush(protocol);
  };

  std::unique_ptr<AotCompiler> compiler;
  try {
    compiler = std::make_unique<AotCompiler>(plugin, topology, options);
  } catch (const std::exception& e) {
    emit("{\"error\": " + json_string(e.what()) + "}");
    return 2;
  }
  const auto& info = compiler->info();
  emit("{\"topology\": " + json_string(topology) + ", \"platform\": " + json_string(info.platform) +
       ", \"platform_version\": " + json_string(info.platform_version) + ", \"device_kind\": " +
       json_string(info.device_kind) + ", \"num_devices\": " + std::to_string(info.num_devices) +
       ", \"api_version\": [" + std::to_string(info.api_major) + ", " + std::to_string(info.api_minor) + "]}");

  const std::string compile_options =
      torchtpu::runtime::compile_options_proto(/*portable=*/false, replicas, partitions);
  std::string path;
  while (std::getline(std::cin, path)) {
    if (path.empty()) continue;
    std::ifstream file(path, std::ios::binary);
    if (!file) {
      emit("{\"path\": " + json_string(path) + ", \"accepted\": false, \"compile_seconds\": 0, \"error\": " +
           json_string("cannot read " + path) + "}");
      continue;
    }
    std::ostringstream text;
    text << file.rdbuf();
    try {
      emit(result_line(path, compiler->compile(text.str(), compile_options)));
    } catch (const std::exception& e) {
      emit("{\"path\": " + json_string(path) + ", \"accepted\": false, \"compile_seconds\": 0, \"error\": " +
           json_string(e.what()) + "}");
    }
  }
  return 0;
}
