// Which slots are valid transitions, n-step trajectories and their
// returns (summed left to right in float32, numpy_kernels.py's order for
// fewer than 8 terms), and gathering rows of stored elements.

#ifndef DOPAMINE_PER_NATIVE_TRANSITIONS_H_
#define DOPAMINE_PER_NATIVE_TRANSITIONS_H_

#include <cstdint>
#include <cstring>

namespace dopamine_per {

// Whether `item` bytes at `p` are nonzero (integer or bool terminals).
inline bool Nonzero(const uint8_t* p, int64_t item) {
  for (int64_t k = 0; k < item; ++k) {
    if (p[k]) return true;
  }
  return false;
}

inline int64_t Mod(int64_t a, int64_t n) {
  const int64_t r = a % n;
  return r < 0 ? r + n : r;
}

// Mod(a, n) for a in [-n, 2n), without a division.
inline int64_t Wrap(int64_t a, int64_t n) {
  return a < 0 ? a + n : (a >= n ? a - n : a);
}

// The validity of each slot (numpy_kernels.NumpyKernels.valid_mask).
template <typename Index>
void ValidMask(const Index* indices, int64_t count, int64_t capacity,
               int64_t add_count, int64_t horizon, int64_t stack,
               const uint8_t* episode_end, const uint8_t* terminal,
               int64_t terminal_item, uint8_t* valid) {
  const int64_t cursor = add_count % capacity;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t slot = static_cast<int64_t>(indices[b]);
    valid[b] = 0;
    if (slot < 0 || slot >= capacity) continue;
    if (add_count >= capacity) {
      if (Mod(slot - (cursor - horizon), capacity) < horizon + stack) continue;
    } else if (slot < stack - 1 || slot >= cursor - horizon) {
      continue;
    }
    // Past these checks stack + horizon <= capacity: the slots of the
    // state and the trajectory lie within one wrap of `slot`.
    bool ok = true;
    for (int64_t k = 1 - stack; k < 0 && ok; ++k) {
      if (episode_end[Wrap(slot + k, capacity)]) ok = false;
    }
    for (int64_t k = 0; k < horizon && ok; ++k) {
      const int64_t step = Wrap(slot + k, capacity);
      if (Nonzero(terminal + step * terminal_item, terminal_item)) break;
      if (episode_end[step]) ok = false;
    }
    valid[b] = ok;
  }
}

// n-step trajectories of valid slots: float32 scalar rewards, the products
// and the left-to-right sum in float32 (NumPy's order below 8 terms). A
// slot outside [0, capacity) wraps around, as NumPy's modulo does.
inline void Trajectories(const int64_t* indices, int64_t count,
                         int64_t capacity, const uint8_t* terminal,
                         int64_t terminal_item, const float* rewards,
                         const float* discounts, int64_t horizon,
                         int64_t* next_indices, uint8_t* is_terminal,
                         float* returns) {
  const bool near = horizon <= capacity;
  for (int64_t b = 0; b < count; ++b) {
    const int64_t slot = indices[b] >= 0 && indices[b] < capacity
                             ? indices[b]
                             : Mod(indices[b], capacity);
    float total = 0.0f;
    int64_t length = horizon;
    is_terminal[b] = 0;
    for (int64_t k = 0; k < horizon; ++k) {
      const int64_t step = near ? Wrap(slot + k, capacity)
                                : Mod(slot + k, capacity);
      const float term = discounts[k] * rewards[step];
      total = k == 0 ? term : total + term;
      if (Nonzero(terminal + step * terminal_item, terminal_item)) {
        is_terminal[b] = 1;
        length = k + 1;
        break;
      }
    }
    next_indices[b] = near ? Wrap(slot + length, capacity)
                           : Mod(slot + length, capacity);
    returns[b] = total;
  }
}

// Copies row indices[b] of `rows` (row_bytes each) to out[b].
template <typename Index>
void GatherRows(const uint8_t* rows, int64_t row_bytes, const Index* indices,
                int64_t count, uint8_t* out) {
  for (int64_t b = 0; b < count; ++b) {
    std::memcpy(out + b * row_bytes,
                rows + static_cast<int64_t>(indices[b]) * row_bytes,
                row_bytes);
  }
}

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_TRANSITIONS_H_
