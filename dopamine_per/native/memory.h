// The memory the ops and Python share: the layout Python registers, the
// registry entry and its lookup (docs/architecture.md, "Native ops").

#ifndef DOPAMINE_PER_NATIVE_MEMORY_H_
#define DOPAMINE_PER_NATIVE_MEMORY_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "frames.h"
#include "sum_tree.h"

namespace dopamine_per {

// One stored element: its array, one row of `row_bytes` per slot.
struct Column {
  uint8_t* data = nullptr;
  int64_t row_bytes = 0;
};

// The version of PerLayout; native_memory.py's PerLayout says the same.
constexpr int64_t kLayoutVersion = 3;

// The layout a Python memory registers through ctypes (core.py): pointers
// into its NumPy arrays and its configuration.
struct PerLayout {
  int64_t size;     // sizeof(PerLayout) as the writer knew it
  int64_t version;  // kLayoutVersion
  int64_t capacity;
  int64_t stack;
  int64_t horizon;
  int64_t max_sample_attempts;
  int64_t* add_count;           // int64[1]
  uint8_t* episode_end;         // bool[capacity]
  uint8_t* observation;         // [capacity, pixels] of observation_item
  int64_t pixels;
  int64_t observation_item;
  uint8_t* action;
  int64_t action_bytes;
  float* reward;                // float32[capacity]
  uint8_t* terminal;            // integer or bool [capacity]
  int64_t terminal_item;
  int64_t extras;               // number of extra elements
  uint8_t** extra_data;
  const int64_t* extra_bytes;
  const float* discounts;       // float32[horizon]
  // The sum tree, or flat == nullptr for a uniform memory.
  double* flat;
  const int64_t* offsets;
  int64_t levels;
  int64_t fanout;
  double* tree_scalars;         // [total, max_recorded_priority]
  double smallest;              // the smallest positive priority
  double largest;               // the largest priority
  uint64_t seed;
  // Compressed frames (observation null; frames.h's FrameStore), or
  // block_frames 0.
  int64_t block_frames;
  const uint64_t* block_addresses;  // [blocks]
  const int64_t* block_sizes;       // [blocks]
  const int64_t* open_block;        // [1]
  const uint8_t* open_frames;       // [block_frames, pixels] items
};

// A registered memory. Its locks are the Python memory's: `mutex` guards
// the storage and the layout, `tree_mutex` the sum tree, taken after
// `mutex` by whoever takes both.
struct Memory {
  std::timed_mutex mutex;
  std::timed_mutex tree_mutex;
  bool bound = false;
  int64_t capacity = 0, stack = 0, horizon = 0, max_sample_attempts = 0;
  int64_t* add_count = nullptr;
  uint8_t* episode_end = nullptr;
  uint8_t* observation = nullptr;
  int64_t pixels = 0, observation_item = 0;
  Column action, terminal;  // terminal: row_bytes is its item's size.
  float* reward = nullptr;
  std::vector<Column> extras;
  std::vector<float> discounts;
  bool prioritized = false;
  std::vector<int64_t> offsets;
  Tree tree{nullptr, nullptr, 0, 0};
  double* tree_scalars = nullptr;
  double smallest = 0.0, largest = 0.0;
  std::mt19937_64 rng;
  FrameStore blocks;  // Compressed frames (observation null).

  // Installs `l` (the caller holds both locks).
  void Bind(const PerLayout& l) {
    capacity = l.capacity;
    stack = l.stack;
    horizon = l.horizon;
    max_sample_attempts = l.max_sample_attempts;
    add_count = l.add_count;
    episode_end = l.episode_end;
    observation = l.observation;
    blocks = FrameStore{};
    if (l.block_frames > 0) {
      blocks.block_frames = l.block_frames;
      blocks.addresses = l.block_addresses;
      blocks.sizes = l.block_sizes;
      blocks.open_block = l.open_block;
      blocks.open_frames = l.open_frames;
    }
    pixels = l.pixels;
    observation_item = l.observation_item;
    action = Column{l.action, l.action_bytes};
    reward = l.reward;
    terminal = Column{l.terminal, l.terminal_item};
    extras.clear();
    for (int64_t k = 0; k < l.extras; ++k) {
      extras.push_back(Column{l.extra_data[k], l.extra_bytes[k]});
    }
    discounts.assign(l.discounts, l.discounts + l.horizon);
    prioritized = l.flat != nullptr;
    if (prioritized) {
      offsets.assign(l.offsets, l.offsets + l.levels + 1);
      tree = Tree{l.flat, offsets.data(), l.levels, l.fanout};
      tree_scalars = l.tree_scalars;
      smallest = l.smallest;
      largest = l.largest;
    }
    rng.seed(l.seed);
    bound = true;
  }
};

// The memory registered as `id` with `token` (replay_core.cc), or nullptr:
// with *foreign true if no memory of this process ever had that id and
// token (the graph comes from another process), false if it was destroyed.
std::shared_ptr<Memory> FindMemory(int64_t id, uint64_t token,
                                   bool* foreign);

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_MEMORY_H_
