// The TensorFlow-free core library: the registry of memories shared with
// the TensorFlow ops, and their lock, as a C interface for Python's ctypes
// (dopamine_per/replay_memory/native_memory.py). The kernels reach Python
// through the extension module (replay_python.cc) instead.

#include <map>

#include "replay_core.h"

namespace dopamine_per {
namespace {

std::mutex registry_mutex;
std::map<int64_t, std::shared_ptr<Memory>>& Registry() {
  static auto* registry = new std::map<int64_t, std::shared_ptr<Memory>>();
  return *registry;
}
int64_t next_id = 1;

// per_set_leaves for leaves of type Index.
template <typename Index>
int SetLeaves(double* flat, const int64_t* offsets, int64_t levels,
              int64_t fanout, int64_t capacity, const Index* leaves,
              const double* values, int64_t count, double smallest,
              double largest, double* total, double* written_max) {
  int64_t bad;
  if (!LeavesValid(leaves, values, count, capacity, smallest, largest,
                   &bad)) {
    return 0;
  }
  *total = WriteLeaves(Tree{flat, offsets, levels, fanout}, leaves, values,
                       count, written_max);
  return 1;
}

}  // namespace

std::shared_ptr<Memory> FindMemory(int64_t id) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  auto found = Registry().find(id);
  return found == Registry().end() ? nullptr : found->second;
}

}  // namespace dopamine_per

using dopamine_per::Memory;
using dopamine_per::Tree;

extern "C" {

// ------------------------------------------------------------ memories

// Registers an unbound memory; returns its id (never reused) and, in
// *handle, a reference to it that `per_lock` and friends take. The
// reference keeps the memory (its lock) alive until `per_memory_release`,
// also after `per_memory_destroy`: Python's lock outlives the registration.
int64_t per_memory_create(void** handle) {
  auto memory = std::make_shared<Memory>();
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  const int64_t id = dopamine_per::next_id++;
  dopamine_per::Registry()[id] = memory;
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
  dopamine_per::Registry().erase(id);
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
  return static_cast<int64_t>(dopamine_per::Registry().size());
}

}  // extern "C"
