// The TensorFlow-free core library: the registry of memories shared with
// the TensorFlow ops, as a C interface for Python's ctypes (core.py).

#include <cerrno>
#include <cstdlib>
#include <map>
#include <sstream>

#include "replay_core.h"

namespace dopamine_per {
namespace {

std::mutex registry_mutex;

// A registered memory: its token, and the memory (null once destroyed; the
// entry stays, so that an op can tell a deleted memory from another
// process's).
struct Entry {
  uint64_t token;
  std::shared_ptr<Memory> memory;
};

std::map<int64_t, Entry>& Registry() {
  static auto* registry = new std::map<int64_t, Entry>();
  return *registry;
}
int64_t next_id = 1;

}  // namespace

std::shared_ptr<Memory> FindMemory(int64_t id, uint64_t token,
                                   bool* foreign) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  auto found = Registry().find(id);
  *foreign = found == Registry().end() || found->second.token != token;
  return *foreign ? nullptr : found->second.memory;
}

}  // namespace dopamine_per

using dopamine_per::Memory;

extern "C" {

// ------------------------------------------------------------ memories

// Registers an unbound memory under `token` (unguessable, chosen by the
// caller; the ops carry it beside the id); returns its id (never reused)
// and, in *handle, a reference to it, which keeps the memory alive until
// `per_memory_release`, also after `per_memory_destroy`.
int64_t per_memory_create(void** handle, uint64_t token) {
  auto memory = std::make_shared<Memory>();
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  const int64_t id = dopamine_per::next_id++;
  dopamine_per::Registry()[id] = dopamine_per::Entry{token, memory};
  *handle = new std::shared_ptr<Memory>(memory);
  return id;
}

static Memory* MemoryOf(void* handle) {
  return static_cast<std::shared_ptr<Memory>*>(handle)->get();
}

// Installs a layout; the caller holds both of the memory's locks. Returns
// 0, or -1 (nothing installed) for a layout of another size or version.
int per_memory_bind(void* handle, const dopamine_per::PerLayout* layout) {
  if (layout->size != static_cast<int64_t>(sizeof(dopamine_per::PerLayout)) ||
      layout->version != dopamine_per::kLayoutVersion) {
    return -1;
  }
  MemoryOf(handle)->Bind(*layout);
  return 0;
}

// Unbinds and unregisters a memory: ops that find it fail cleanly from
// now on. Takes the storage lock and the tree lock unless the caller
// holds them (`take_storage`, `take_tree` 0); `handle` stays valid.
void per_memory_destroy(int64_t id, void* handle, int take_storage,
                        int take_tree) {
  Memory* memory = MemoryOf(handle);
  std::unique_lock<std::timed_mutex> storage(memory->mutex, std::defer_lock);
  std::unique_lock<std::timed_mutex> tree(memory->tree_mutex,
                                          std::defer_lock);
  if (take_storage) storage.lock();
  if (take_tree) tree.lock();
  memory->bound = false;
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  auto found = dopamine_per::Registry().find(id);
  if (found != dopamine_per::Registry().end()) found->second.memory.reset();
}

// Drops `handle`'s reference: it is invalid afterwards.
void per_memory_release(void* handle) {
  delete static_cast<std::shared_ptr<Memory>*>(handle);
}

// The sampling ops' generator state as text (std::mt19937_64's stream
// format: its 312 words, then its position), for checkpoints. Writes it,
// with a terminating NUL, into `out` if `capacity` holds it; returns its
// length. The caller holds the storage lock (the ops draw under it).
int64_t per_memory_sampler_state(void* handle, char* out, int64_t capacity) {
  std::ostringstream text;
  text << MemoryOf(handle)->rng;
  const std::string state = text.str();
  const int64_t length = static_cast<int64_t>(state.size());
  if (out != nullptr && length < capacity) {
    std::memcpy(out, state.c_str(), length + 1);
  }
  return length;
}

// Makes `text` (per_memory_sampler_state's) the generator state, unless
// `check_only`. Returns 0, or -1 (nothing changed) for anything but 312
// words and a position in [0, 312], each a plain decimal number, separated
// by single spaces. The caller holds the storage lock.
int per_memory_set_sampler_state(void* handle, const char* text,
                                 int check_only) {
  constexpr int kWords = std::mt19937_64::state_size;
  const char* at = text;
  for (int i = 0; i <= kWords; ++i) {
    if (i > 0 && *at++ != ' ') return -1;
    if (*at < '0' || *at > '9') return -1;
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(at, &end, 10);
    if (errno != 0 || end - at > 20) return -1;
    if (i == kWords && value > static_cast<unsigned long long>(kWords)) {
      return -1;
    }
    at = end;
  }
  if (*at != '\0') return -1;
  std::istringstream in(text);
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail()) return -1;
  if (!check_only) MemoryOf(handle)->rng = rng;
  return 0;
}

// The number of registered memories (for tests of their lifetime).
int64_t per_memory_count() {
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  int64_t count = 0;
  for (const auto& entry : dopamine_per::Registry()) {
    count += entry.second.memory != nullptr;
  }
  return count;
}

}  // extern "C"
