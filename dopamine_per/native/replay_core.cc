// The TensorFlow-free core library: the registry of memories shared with
// the TensorFlow ops, and their lock, as a C interface for Python's ctypes
// (dopamine_per/replay_memory/native_memory.py). The kernels reach Python
// through the extension module (replay_python.cc) instead.

#include <map>

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
using dopamine_per::Tree;

extern "C" {

// ------------------------------------------------------------ memories

// Registers an unbound memory under `token` (unguessable, chosen by the
// caller; the ops carry it beside the id); returns its id (never reused)
// and, in *handle, a reference to it that `per_lock` and friends take. The
// reference keeps the memory (its lock) alive until `per_memory_release`,
// also after `per_memory_destroy`: Python's lock outlives the registration.
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

// Installs a layout; the caller holds the memory's lock.
void per_memory_bind(void* handle, const dopamine_per::PerLayout* layout) {
  MemoryOf(handle)->Bind(*layout);
}

// Unbinds and unregisters a memory: ops that find it no longer fail
// cleanly. Takes the lock; `handle` stays valid (for the lock).
void per_memory_destroy(int64_t id, void* handle) {
  {
    std::lock_guard<std::mutex> guard(MemoryOf(handle)->mutex);
    MemoryOf(handle)->Unbind();
  }
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  auto found = dopamine_per::Registry().find(id);
  if (found != dopamine_per::Registry().end()) found->second.memory.reset();
}

// Drops `handle`'s reference: it is invalid afterwards.
void per_memory_release(void* handle) {
  delete static_cast<std::shared_ptr<Memory>*>(handle);
}

// The memory's lock (ctypes releases the GIL while this waits).
void per_lock(void* handle) { MemoryOf(handle)->mutex.lock(); }
void per_unlock(void* handle) { MemoryOf(handle)->mutex.unlock(); }

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
