// Filling a batch of transitions at valid slots, the one routine of the op
// and the extension: elements named as the ops name them, parsed once
// (ElementCode), give the outputs (OutputFor) that FillBatch fills from the
// n-step trajectories, walked once (numpy_kernels.transition_batch).

#ifndef DOPAMINE_PER_NATIVE_BATCH_H_
#define DOPAMINE_PER_NATIVE_BATCH_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "frames.h"
#include "memory.h"
#include "transitions.h"

namespace dopamine_per {

// What a batch reads besides the rows of its BatchOutputs: the frames, the
// terminal flags, the rewards and the discounts of the n-step returns.
struct BatchSource {
  const uint8_t* frames;  // [capacity, pixels] items of `item` bytes
  int64_t capacity, pixels, item, stack;
  const uint8_t* terminal;  // [capacity] integers or bools
  int64_t terminal_item;
  const float* rewards;    // [capacity]
  const float* discounts;  // [horizon]
  int64_t horizon;
  // Compressed frames (`frames` null): their blocks and open block.
  FrameStore blocks;
};

// Where `s`'s frames are, raw or compressed.
inline FrameStore StoreOf(const BatchSource& s) {
  FrameStore store = s.blocks;
  if (s.frames != nullptr) store = FrameStore{s.frames};
  store.capacity = s.capacity;
  store.frame_bytes = s.pixels * s.item;
  return store;
}

// Fills the states and next states of `count` transitions, the stacks
// `bounds` gives (either output null to skip it, its bounds not read).
// Compressed frames are decoded a transition at a time, just before its
// two states are filled from them. False if a block does not decode (the
// outputs then hold anything).
inline bool FillStates(const BatchSource& s, const StackBounds& bounds,
                       int64_t count, uint8_t* states, uint8_t* next_states) {
  const FrameStore store = StoreOf(s);
  FrameReader frames(store);
  if (bounds.firsts != nullptr || bounds.next_firsts != nullptr) {
    frames.KeepZeros();
  }
  if (store.raw != nullptr) {
    TransitionStates(frames, s.pixels, s.item, s.stack, bounds, count, states,
                     next_states);
    return true;
  }
  const int64_t state_bytes = s.pixels * s.item * s.stack;
  std::vector<int64_t> read;
  // The frames of a stack ending at ends[b], from firsts[b] on.
  auto read_stack = [&](const int64_t* ends, const int64_t* firsts,
                        int64_t b) {
    for (int64_t k = 0; k < s.stack; ++k) {
      if (firsts == nullptr || ends[b] - k >= firsts[b]) {
        read.push_back(ends[b] - k);
      }
    }
  };
  for (int64_t b = 0; b < count; ++b) {
    read.clear();
    if (states != nullptr) read_stack(bounds.ends, bounds.firsts, b);
    if (next_states != nullptr) {
      read_stack(bounds.next_ends, bounds.next_firsts, b);
    }
    if (!frames.Decode(read.data(), static_cast<int64_t>(read.size()))) {
      return false;
    }
    TransitionStates(frames, s.pixels, s.item, s.stack, bounds.From(b), 1,
                     states ? states + b * state_bytes : nullptr,
                     next_states ? next_states + b * state_bytes : nullptr);
  }
  return true;
}

// FillStates over the slots `ends` and `next_ends` (no zeroed frames).
inline bool FillStates(const BatchSource& s, const int64_t* ends,
                       const int64_t* next_ends, int64_t count,
                       uint8_t* states, uint8_t* next_states) {
  StackBounds bounds;
  bounds.ends = ends;
  bounds.next_ends = next_ends;
  return FillStates(s, bounds, count, states, next_states);
}

// FillStates of frames shipped without their memory: `store` (not raw)
// holds the blocks the `count` states ending at `ends` and at `next_ends`
// read, of frames of `pixels` items of `item` bytes. False if a block is
// missing or does not decode.
inline bool FillShippedStates(const FrameStore& store, int64_t pixels,
                              int64_t item, int64_t stack,
                              const int64_t* ends, const int64_t* next_ends,
                              int64_t count, uint8_t* states,
                              uint8_t* next_states) {
  BatchSource source{};
  source.capacity = store.capacity;
  source.pixels = pixels;
  source.item = item;
  source.stack = stack;
  source.blocks = store;
  return FillStates(source, ends, next_ends, count, states, next_states);
}

// What an output of a batch holds.
enum class Fill {
  kState,      // the frame stack ending at the slot
  kNextState,  // the frame stack ending at the next slot
  kReturn,     // the n-step return, float32
  kTerminal,   // whether the trajectory was cut, a flag of `item` bytes
  kIndex,      // the slot, int32
  kRow,        // a row of `rows` at the slot (or at the next slot)
};

// One output of a batch: `count` rows written to `out`.
struct BatchOutput {
  Fill kind;
  uint8_t* out;
  int64_t item = 0;  // kTerminal: bytes per flag.
  // kRow: the source rows, their size, whether at the next slot, and
  // whether they are float64 written as float32 (priorities).
  const uint8_t* rows = nullptr;
  int64_t row_bytes = 0;
  bool at_next = false;
  bool narrow = false;
};

// The parts of a batch, to fill in separate calls (the extension copies
// the rows under the sum tree's lock, the frames without it).
enum BatchPart : unsigned {
  kScalarPart = 1,  // returns, terminal flags, indices
  kRowPart = 2,     // kRow outputs
  kStatePart = 4,   // frame stacks
  kWholeBatch = 7,
};

// The trajectories of a batch's slots: next slots, cut flags, returns.
struct Walked {
  std::vector<int64_t> next;
  std::vector<uint8_t> cut;
  std::vector<float> returns;
};

// Walks the n-step trajectories of `count` valid `slots` (in range).
inline Walked Walk(const BatchSource& s, const int64_t* slots,
                   int64_t count) {
  Walked w{std::vector<int64_t>(count), std::vector<uint8_t>(count),
           std::vector<float>(count)};
  Trajectories(slots, count, s.capacity, s.terminal, s.terminal_item,
               s.rewards, s.discounts, s.horizon, w.next.data(), w.cut.data(),
               w.returns.data());
  return w;
}

// Writes flags of `item` bytes each (little-endian: native_memory.py
// refuses a big-endian machine).
inline void WriteFlags(const uint8_t* flags, int64_t count, int64_t item,
                       uint8_t* out) {
  std::memset(out, 0, count * item);
  for (int64_t b = 0; b < count; ++b) out[b * item] = flags[b];
}

// Copies the rows of a kRow output.
inline void FillRows(const BatchOutput& o, const int64_t* at, int64_t count) {
  if (!o.narrow) {
    GatherRows(o.rows, o.row_bytes, at, count, o.out);
    return;
  }
  const double* source = reinterpret_cast<const double*>(o.rows);
  float* out = reinterpret_cast<float*>(o.out);
  for (int64_t b = 0; b < count; ++b) {
    out[b] = static_cast<float>(source[at[b]]);
  }
}

// Fills the outputs of `parts` for the `count` `slots` walked into `w`.
// The frame stacks come last, each state with its next state, in one pass
// (FillStates). False if a compressed block does not decode.
inline bool FillBatch(const BatchSource& s, const int64_t* slots,
                      int64_t count, const Walked& w,
                      const BatchOutput* outputs, int64_t n, unsigned parts) {
  uint8_t* states = nullptr;
  uint8_t* next_states = nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const BatchOutput& o = outputs[i];
    const bool scalar = (parts & kScalarPart) != 0;
    switch (o.kind) {
      case Fill::kState:
        states = o.out;
        break;
      case Fill::kNextState:
        next_states = o.out;
        break;
      case Fill::kReturn:
        if (scalar) std::memcpy(o.out, w.returns.data(), 4 * count);
        break;
      case Fill::kTerminal:
        if (scalar) WriteFlags(w.cut.data(), count, o.item, o.out);
        break;
      case Fill::kIndex:
        if (scalar) {
          int32_t* out = reinterpret_cast<int32_t*>(o.out);
          for (int64_t b = 0; b < count; ++b) {
            out[b] = static_cast<int32_t>(slots[b]);
          }
        }
        break;
      case Fill::kRow:
        if (parts & kRowPart) {
          FillRows(o, o.at_next ? w.next.data() : slots, count);
        }
        break;
    }
  }
  if ((parts & kStatePart) && (states != nullptr || next_states != nullptr)) {
    return FillStates(s, slots, w.next.data(), count, states, next_states);
  }
  return true;
}

// ------------------------------------------------ elements of a memory

// The built-in elements, in the order of their codes; an extra's code is
// kBuiltInElements + its position among the memory's extras.
constexpr const char* kElementNames[] = {
    "state",       "action",      "reward",   "next_state",
    "next_action", "next_reward", "terminal", "indices",
    "sampling_probabilities"};
constexpr int64_t kBuiltInElements = 9;
// The code of sampling_probabilities (it reads the sum tree).
constexpr int64_t kPrioritiesCode = 8;

// The code of an element named `name`: a built-in name, or "extra:" and
// the extra's position in decimal digits. -1 for any other name.
inline int64_t ElementCode(const std::string& name) {
  for (int64_t code = 0; code < kBuiltInElements; ++code) {
    if (name == kElementNames[code]) return code;
  }
  const std::string prefix = "extra:";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  const size_t digits = name.size() - prefix.size();
  if (digits == 0 || digits > 9) return -1;
  int64_t k = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    k = 10 * k + (name[i] - '0');
  }
  return kBuiltInElements + k;
}

// What fills the element of `code` in a batch of `m`, written to `out`:
// *o, and the output's bytes per row in *row_bytes. False if `code` is
// not an element of `m` (an extra it does not have, priorities of a
// uniform memory). The caller holds the storage lock.
inline bool OutputFor(const Memory& m, int64_t code, uint8_t* out,
                      BatchOutput* o, int64_t* row_bytes) {
  *o = BatchOutput{Fill::kRow, out};
  *row_bytes = 4;  // Returns, indices, float32 priorities.
  switch (code) {
    case 0:  // state
    case 3:  // next_state
      o->kind = code == 0 ? Fill::kState : Fill::kNextState;
      *row_bytes = m.pixels * m.observation_item * m.stack;
      return true;
    case 1:  // action
    case 4:  // next_action
      o->rows = m.action.data;
      *row_bytes = o->row_bytes = m.action.row_bytes;
      o->at_next = code == 4;
      return true;
    case 2:  // reward
      o->kind = Fill::kReturn;
      return true;
    case 5:  // next_reward
      o->rows = reinterpret_cast<const uint8_t*>(m.reward);
      o->row_bytes = 4;
      o->at_next = true;
      return true;
    case 6:  // terminal
      o->kind = Fill::kTerminal;
      *row_bytes = o->item = m.terminal.row_bytes;
      return true;
    case 7:  // indices
      o->kind = Fill::kIndex;
      return true;
    case kPrioritiesCode:
      o->rows = reinterpret_cast<const uint8_t*>(m.tree.flat);
      o->row_bytes = 8;
      o->narrow = true;
      return m.prioritized;
    default: {
      const int64_t k = code - kBuiltInElements;
      if (k < 0 || k >= static_cast<int64_t>(m.extras.size())) return false;
      o->rows = m.extras[k].data;
      *row_bytes = o->row_bytes = m.extras[k].row_bytes;
      return true;
    }
  }
}

// What a batch of `m` reads besides its outputs' rows.
inline BatchSource SourceOf(const Memory& m) {
  return BatchSource{m.observation,      m.capacity, m.pixels,
                     m.observation_item, m.stack,    m.terminal.data,
                     m.terminal.row_bytes, m.reward, m.discounts.data(),
                     m.horizon,          m.blocks};
}

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_BATCH_H_
