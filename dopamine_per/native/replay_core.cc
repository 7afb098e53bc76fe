// The TensorFlow-free core library: the registry of memories shared with
// the TensorFlow ops, their lock, and the kernels as a C interface for
// Python's ctypes (dopamine_per/replay_memory/native_kernels.py).

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
// *handle, the pointer `per_lock` and friends take.
int64_t per_memory_create(void** handle) {
  auto memory = std::make_shared<Memory>();
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  const int64_t id = dopamine_per::next_id++;
  dopamine_per::Registry()[id] = memory;
  *handle = memory.get();
  return id;
}

// Installs a layout; the caller holds the memory's lock.
void per_memory_bind(void* handle, const dopamine_per::PerLayout* layout) {
  static_cast<Memory*>(handle)->Bind(*layout);
}

// Unbinds and unregisters a memory: ops that find it no longer fail
// cleanly. Takes the lock; `handle` is invalid afterwards.
void per_memory_destroy(int64_t id, void* handle) {
  {
    std::lock_guard<std::mutex> guard(static_cast<Memory*>(handle)->mutex);
    static_cast<Memory*>(handle)->Unbind();
  }
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  dopamine_per::Registry().erase(id);
}

// The memory's lock (ctypes releases the GIL while this waits).
void per_lock(void* handle) { static_cast<Memory*>(handle)->mutex.lock(); }
void per_unlock(void* handle) {
  static_cast<Memory*>(handle)->mutex.unlock();
}

// The number of registered memories (for tests of their lifetime).
int64_t per_memory_count() {
  std::lock_guard<std::mutex> guard(dopamine_per::registry_mutex);
  return static_cast<int64_t>(dopamine_per::Registry().size());
}

// ------------------------------------------------------------- kernels

double per_update_parents(double* flat, const int64_t* offsets,
                          int64_t levels, int64_t fanout,
                          const int64_t* leaves, int64_t count) {
  return dopamine_per::UpdateParents(Tree{flat, offsets, levels, fanout},
                                     leaves, count);
}

void per_level_sums(const double* blocks, int64_t rows, int64_t fanout,
                    double* out) {
  dopamine_per::LevelSums(blocks, rows, fanout, out);
}

// Returns 1 and the total and largest written value, or 0 (nothing written).
int per_set_leaves(double* flat, const int64_t* offsets, int64_t levels,
                   int64_t fanout, int64_t capacity, const int64_t* leaves,
                   const double* values, int64_t count, double smallest,
                   double largest, double* total, double* written_max) {
  int64_t bad;
  if (!dopamine_per::LeavesValid(leaves, values, count, capacity, smallest,
                                 largest, &bad)) {
    return 0;
  }
  *total = dopamine_per::WriteLeaves(Tree{flat, offsets, levels, fanout},
                                     leaves, values, count, written_max);
  return 1;
}

int per_get_leaves(const double* leaves, int64_t size, const int64_t* indices,
                   int64_t count, double* out) {
  for (int64_t i = 0; i < count; ++i) {
    if (indices[i] < 0 || indices[i] >= size) return 0;
    out[i] = leaves[indices[i]];
  }
  return 1;
}

void per_descend(const double* flat, const int64_t* offsets, int64_t levels,
                 int64_t fanout, const double* targets, int64_t count,
                 int64_t* out) {
  dopamine_per::Descend(Tree{const_cast<double*>(flat), offsets, levels,
                             fanout}, targets, count, out);
}

void per_descend_uniforms(const double* flat, const int64_t* offsets,
                          int64_t levels, int64_t fanout,
                          const double* uniforms, const double* lower,
                          const double* width, double scale, int64_t count,
                          int64_t* out) {
  dopamine_per::DescendUniforms(Tree{const_cast<double*>(flat), offsets,
                                     levels, fanout},
                                uniforms, lower, width, scale, count, out);
}

void per_descend_draws(const double* flat, const int64_t* offsets,
                       int64_t levels, int64_t fanout, const uint32_t* words,
                       const double* lower, const double* width, double scale,
                       int64_t count, int64_t* out) {
  std::vector<double> uniforms(count);
  dopamine_per::UniformsFromWords(words, count, uniforms.data());
  dopamine_per::DescendUniforms(Tree{const_cast<double*>(flat), offsets,
                                     levels, fanout},
                                uniforms.data(), lower, width, scale, count,
                                out);
}

void per_valid_mask(const int64_t* indices, int64_t count, int64_t capacity,
                    int64_t add_count, int64_t horizon, int64_t stack,
                    const uint8_t* episode_end, const uint8_t* terminal,
                    int64_t terminal_item, uint8_t* valid) {
  dopamine_per::ValidMask(indices, count, capacity, add_count, horizon, stack,
                          episode_end, terminal, terminal_item, valid);
}

void per_trajectories(const int64_t* indices, int64_t count, int64_t capacity,
                      const uint8_t* terminal, int64_t terminal_item,
                      const float* rewards, const float* discounts,
                      int64_t horizon, int64_t* next_indices,
                      uint8_t* is_terminal, float* returns) {
  dopamine_per::Trajectories(indices, count, capacity, terminal,
                             terminal_item, rewards, discounts, horizon,
                             next_indices, is_terminal, returns);
}

void per_stacks_ending_at(const uint8_t* frames, int64_t capacity,
                          int64_t pixels, int64_t item, int64_t stack,
                          const int64_t* ends, int64_t rows, uint8_t* out) {
  dopamine_per::StacksEndingAt(frames, capacity, pixels, item, stack, ends,
                               rows, out);
}

// trajectories, then the states ending at the indices and at the next
// indices (rows [0, count) and [count, 2 * count) of `out`).
void per_transitions_and_states(
    const uint8_t* frames, int64_t capacity, int64_t pixels, int64_t item,
    int64_t stack, const uint8_t* terminal, int64_t terminal_item,
    const float* rewards, const float* discounts, int64_t horizon,
    const int64_t* indices, int64_t count, int64_t* next_indices,
    uint8_t* is_terminal, float* returns, uint8_t* out) {
  dopamine_per::Trajectories(indices, count, capacity, terminal,
                             terminal_item, rewards, discounts, horizon,
                             next_indices, is_terminal, returns);
  std::vector<int64_t> ends(indices, indices + count);
  ends.insert(ends.end(), next_indices, next_indices + count);
  dopamine_per::StacksEndingAt(frames, capacity, pixels, item, stack,
                               ends.data(), 2 * count, out);
}

}  // extern "C"
