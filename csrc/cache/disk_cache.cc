#include "cache/disk_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "runtime/error.h"
#include "runtime/plugin.h"

namespace torchtpu::cache {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[] = "torchtpu-program\n";
constexpr char kSuffix[] = ".xla";

struct Counters {
  std::atomic<int64_t> hits{0}, misses{0}, writes{0}, rejected{0}, evictions{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

// FNV-1a over bytes, seeded: two seeds give the 128-bit entry name.
uint64_t fnv(const char* data, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}
uint64_t fnv(const std::string& s, uint64_t seed = 1469598103934665603ull) { return fnv(s.data(), s.size(), seed); }

std::string hex(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

bool enabled() {
  static const bool on = [] {
    const char* env = std::getenv("TORCHTPU_DISK_CACHE");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}

const fs::path& directory() {
  static const fs::path dir = [] {
    if (const char* env = std::getenv("TORCHTPU_CACHE_DIR"); env != nullptr && *env != '\0') return fs::path(env);
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') return fs::path(xdg) / "torchtpu";
    const char* home = std::getenv("HOME");
    return fs::path(home != nullptr ? home : ".") / ".cache" / "torchtpu";
  }();
  return dir;
}

int64_t max_bytes() {
  static const int64_t bound = [] {
    const char* env = std::getenv("TORCHTPU_CACHE_MAX_BYTES");
    return env != nullptr && *env != '\0' ? std::atoll(env) : (int64_t{1} << 30);
  }();
  return bound;
}

// The plugin file's content hash. Hashing 250 MB takes a noticeable fraction of a second, so the result is
// remembered in the cache directory under the file's path, size and modification time.
std::string plugin_file_hash(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "unreadable";
  const std::string stamp = path + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtime);
  const fs::path memo = directory() / "plugins" / hex(fnv(stamp));
  {
    std::ifstream in(memo);
    std::string remembered;
    if (in && std::getline(in, remembered) && remembered.size() == 16) return remembered;
  }
  std::ifstream file(path, std::ios::binary);
  std::vector<char> chunk(1 << 20);
  uint64_t h = 1469598103934665603ull;
  while (file) {
    file.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    h = fnv(chunk.data(), static_cast<size_t>(file.gcount()), h);
  }
  const std::string digest = hex(h);
  std::error_code ignored;
  fs::create_directories(memo.parent_path(), ignored);
  std::ofstream(memo) << digest << "\n";
  return digest;
}

// Everything besides the program text that shapes the compiled code.
const std::string& identity() {
  static const std::string id = [] {
    const runtime::PluginInfo& plugin = runtime::plugin_info();
    const char* xla_flags = std::getenv("XLA_FLAGS");
    std::ostringstream s;
    s << "format 1\nplugin " << plugin.platform << " api " << plugin.api_major << "." << plugin.api_minor
      << " file " << plugin_file_hash(plugin.path) << "\ndevices " << runtime::device_count() << "\noptions "
      << hex(fnv(runtime::compile_options())) << "\nXLA_FLAGS " << (xla_flags ? xla_flags : "") << "\n";
    return s.str();
  }();
  return id;
}

// A partitioned program's own compile options (partition count, which results the partitioner shards) join
// its name.
fs::path entry_path(const std::string& stablehlo, const runtime::Partitioning& partitioning) {
  const std::string keyed =
      identity() + (partitioning.num_partitions > 1 ? runtime::compile_options(partitioning) : std::string()) + stablehlo;
  return directory() / (hex(fnv(keyed)) + hex(fnv(keyed, 0x9e3779b97f4a7c15ull)) + kSuffix);
}

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
bool get_u64(const std::string& in, size_t& at, uint64_t& v) {
  if (at + sizeof v > in.size()) return false;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return true;
}

// The payload of an entry file, or why it is unusable.
bool parse_entry(const std::string& file, std::string& payload, std::string& why) {
  const size_t magic = sizeof(kMagic) - 1;
  if (file.compare(0, magic, kMagic) != 0) return why = "not a torchtpu program entry", false;
  size_t at = magic;
  uint64_t id_size = 0, payload_size = 0, checksum = 0;
  if (!get_u64(file, at, id_size) || at + id_size > file.size()) return why = "truncated", false;
  if (file.compare(at, id_size, identity()) != 0) return why = "written for another plugin build or configuration", false;
  at += id_size;
  if (!get_u64(file, at, payload_size) || !get_u64(file, at, checksum) || at + payload_size != file.size()) {
    return why = "truncated", false;
  }
  payload.assign(file, at, payload_size);
  if (fnv(payload) != checksum) return why = "checksum mismatch", false;
  return true;
}

WarningSink& warning_sink() {
  static WarningSink sink = [](const std::string& message) { std::fprintf(stderr, "%s\n", message.c_str()); };
  return sink;
}

void reject(const fs::path& path, const std::string& why) {
  counters().rejected++;
  warning_sink()("torchtpu: ignoring program cache entry " + path.string() + " (" + why + "); compiling instead");
  std::error_code ignored;
  fs::remove(path, ignored);
}

std::unique_ptr<runtime::Executable> load(const fs::path& path, std::vector<runtime::ArrayType>& output_types,
                                          std::vector<int64_t>& aliased_inputs) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string payload, why;
  if (!parse_entry(file, payload, why)) {
    reject(path, why);
    return nullptr;
  }
  try {
    auto executable = runtime::deserialize(payload, std::move(output_types), std::move(aliased_inputs));
    std::error_code ignored;
    fs::last_write_time(path, fs::file_time_type::clock::now(), ignored);  // recently used
    return executable;
  } catch (const runtime::PjrtError& e) {
    reject(path, std::string("the plugin could not load it: ") + e.what());
    return nullptr;
  }
}

struct Entry {
  fs::path path;
  fs::file_time_type used;
  int64_t bytes;
};

std::vector<Entry> list_entries() {
  std::vector<Entry> entries;
  std::error_code error;
  for (fs::directory_iterator it(directory(), error), end; !error && it != end; it.increment(error)) {
    if (it->path().extension() != kSuffix) continue;
    std::error_code stat_error;
    const auto size = static_cast<int64_t>(it->file_size(stat_error));
    const auto used = it->last_write_time(stat_error);
    if (!stat_error) entries.push_back({it->path(), used, size});
  }
  return entries;
}

// Removes least recently used entries until the directory is back under 90% of its bound.
void evict_if_over_bound() {
  std::vector<Entry> entries = list_entries();
  int64_t total = 0;
  for (const Entry& e : entries) total += e.bytes;
  if (total <= max_bytes()) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& e : entries) {
    if (total <= max_bytes() * 9 / 10) break;
    std::error_code ignored;
    if (fs::remove(e.path, ignored)) {
      total -= e.bytes;
      counters().evictions++;
    }
  }
}

void store(const fs::path& path, const runtime::Executable& executable) {
  std::string payload;
  try {
    payload = executable.serialize();
  } catch (const runtime::PjrtError&) {
    return;  // a plugin that cannot serialize simply gets no disk cache
  }
  std::string file(kMagic);
  put_u64(file, identity().size());
  file += identity();
  put_u64(file, payload.size());
  put_u64(file, fnv(payload));
  file += payload;
  std::error_code error;
  fs::create_directories(directory(), error);
  static std::mt19937_64 random{std::random_device{}()};
  static std::mutex random_mutex;
  uint64_t suffix;
  {
    std::lock_guard<std::mutex> lock(random_mutex);
    suffix = random();
  }
  const fs::path temporary = path.string() + ".tmp" + std::to_string(getpid()) + "-" + hex(suffix);
  {
    std::ofstream out(temporary, std::ios::binary);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
    if (!out) {
      fs::remove(temporary, error);
      return;  // a full or read-only disk costs the cache, never the program
    }
  }
  fs::rename(temporary, path, error);  // atomic: readers see the old entry, the new one or none
  if (error) {
    fs::remove(temporary, error);
    return;
  }
  counters().writes++;
  if (static_cast<int64_t>(file.size()) > 0) evict_if_over_bound();
}

}  // namespace

void set_warning_sink(WarningSink sink) { warning_sink() = sink; }

namespace {

// The entry at `path`, counted as a hit when usable.
std::unique_ptr<runtime::Executable> load_counted(const fs::path& path, std::vector<runtime::ArrayType> output_types,
                                                  std::vector<int64_t> aliased_inputs) {
  auto executable = load(path, output_types, aliased_inputs);
  if (executable) counters().hits++;
  return executable;
}

}  // namespace

std::unique_ptr<runtime::Executable> load_cached(const std::string& stablehlo,
                                                 std::vector<runtime::ArrayType> output_types,
                                                 std::vector<int64_t> aliased_inputs,
                                                 const runtime::Partitioning& partitioning) {
  if (!enabled()) return nullptr;
  return load_counted(entry_path(stablehlo, partitioning), std::move(output_types), std::move(aliased_inputs));
}

std::unique_ptr<runtime::Executable> load_or_compile(const std::string& stablehlo,
                                                     std::vector<runtime::ArrayType> output_types,
                                                     std::vector<int64_t> aliased_inputs,
                                                     const runtime::Partitioning& partitioning) {
  if (!enabled()) return runtime::compile(stablehlo, std::move(output_types), std::move(aliased_inputs), partitioning);
  const fs::path path = entry_path(stablehlo, partitioning);
  if (auto executable = load_counted(path, output_types, aliased_inputs)) return executable;
  counters().misses++;
  auto executable = runtime::compile(stablehlo, std::move(output_types), std::move(aliased_inputs), partitioning);
  store(path, *executable);
  return executable;
}

DiskCacheStats disk_cache_stats() {
  DiskCacheStats s;
  s.enabled = enabled();
  s.directory = directory().string();
  s.hits = counters().hits;
  s.misses = counters().misses;
  s.writes = counters().writes;
  s.rejected = counters().rejected;
  s.evictions = counters().evictions;
  s.max_bytes = max_bytes();
  for (const Entry& e : list_entries()) {
    s.entries++;
    s.bytes += e.bytes;
  }
  return s;
}

void clear_disk_cache() {
  for (const Entry& e : list_entries()) {
    std::error_code ignored;
    fs::remove(e.path, ignored);
  }
}

}  // namespace torchtpu::cache
