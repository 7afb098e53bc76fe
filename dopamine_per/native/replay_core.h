// The replay memory's per-batch loops in C++, and the memory they act on.
//
// One header, compiled into two shared objects: the TensorFlow-free core
// library (replay_core.cc: a C interface for Python's ctypes, and the
// registry of memories) and the TensorFlow ops (replay_ops.cc). Every loop
// gives the same bits as dopamine_per/replay_memory/numpy_kernels.py, the
// reference: tree sums in the same pairwise order, descents with the same
// running sums, returns summed left to right in float32 (NumPy's order for
// fewer than 8 terms). The shared memory and its lock: docs/architecture.md
// "Native ops".

#ifndef DOPAMINE_PER_NATIVE_REPLAY_CORE_H_
#define DOPAMINE_PER_NATIVE_REPLAY_CORE_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace dopamine_per {

// ---------------------------------------------------------------- sum tree

// The pairwise ("halving") sum of `fanout` values (a power of two).
inline double HalvingSum(const double* v, int64_t fanout) {
  if (fanout == 16) {
    const double a = (v[0] + v[1]) + (v[2] + v[3]);
    const double b = (v[4] + v[5]) + (v[6] + v[7]);
    const double c = (v[8] + v[9]) + (v[10] + v[11]);
    const double d = (v[12] + v[13]) + (v[14] + v[15]);
    return (a + b) + (c + d);
  }
  if (fanout == 1) return v[0];
  double scratch[512];  // fanout <= 1024
  for (int64_t j = 0; j < fanout / 2; ++j) scratch[j] = v[2 * j] + v[2 * j + 1];
  for (int64_t width = fanout / 2; width > 1; width /= 2) {
    for (int64_t j = 0; j < width / 2; ++j) {
      scratch[j] = scratch[2 * j] + scratch[2 * j + 1];
    }
  }
  return scratch[0];
}

// A tree: `flat` holds every level, leaves first; level k spans
// [offsets[k], offsets[k + 1]); `levels` = number of offsets - 1.
struct Tree {
  double* flat;
  const int64_t* offsets;
  int64_t levels;
  int64_t fanout;
};

// `UpdateParents` for a fanout of kFanout (0: t.fanout, read at run time).
// Nodes are nonnegative: a shift divides them by the power-of-two fanout
// (a division by a run-time value costs tens of cycles a level).
template <int64_t kFanout, typename Index>
double UpdateParentsOf(const Tree& t, const Index* leaves, int64_t count) {
  const int64_t fanout = kFanout ? kFanout : t.fanout;
  const int shift = __builtin_ctzll(static_cast<uint64_t>(fanout));
  const int64_t top = t.levels - 1;
  for (int64_t b = 0; b < count; ++b) {
    int64_t node = static_cast<int64_t>(leaves[b]);
    for (int64_t level = 0; level < top; ++level) {
      node >>= shift;
      t.flat[t.offsets[level + 1] + node] =
          HalvingSum(t.flat + t.offsets[level] + node * fanout, fanout);
    }
  }
  return HalvingSum(t.flat + t.offsets[top], fanout);
}

// Recomputes the ancestors of `leaves` (in [0, leaves of the tree)), in
// order; returns the total.
template <typename Index>
double UpdateParents(const Tree& t, const Index* leaves, int64_t count) {
  if (t.fanout == 16) return UpdateParentsOf<16>(t, leaves, count);
  return UpdateParentsOf<0>(t, leaves, count);
}

// Sums of each of `rows` rows of `fanout` values.
inline void LevelSums(const double* blocks, int64_t rows, int64_t fanout,
                      double* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = HalvingSum(blocks + r * fanout,
                                                         fanout);
}

// Whether every leaf is in [0, capacity) and every value 0 or in
// [smallest, largest] (NaN is neither).
template <typename Index, typename Value>
bool LeavesValid(const Index* leaves, const Value* values, int64_t count,
                 int64_t capacity, double smallest, double largest,
                 int64_t* bad) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t leaf = static_cast<int64_t>(leaves[i]);
    const double value = static_cast<double>(values[i]);
    if (leaf < 0 || leaf >= capacity ||
        (!(value >= smallest && value <= largest) && value != 0.0)) {
      *bad = i;
      return false;
    }
  }
  return true;
}

// Writes checked leaves and propagates; returns the total, and the largest
// value written (at least 0) in *written_max.
template <typename Index, typename Value>
double WriteLeaves(const Tree& t, const Index* leaves, const Value* values,
                   int64_t count, double* written_max) {
  double top = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double value = static_cast<double>(values[i]);
    t.flat[static_cast<int64_t>(leaves[i])] = value;
    top = value > top ? value : top;
  }
  *written_max = top;
  return UpdateParents(t, leaves, count);
}

// `ChooseChild` past the last running sum (rounding): the last child with
// positive mass, and in *before the running sum before it. Out of line: it
// is rare, and the scan is faster without it.
__attribute__((noinline, cold)) inline int64_t LastPositiveChild(
    const double* block, int64_t fanout, double* before) {
  int64_t chosen = fanout - 1;
  while (block[chosen] <= 0.0 && chosen > 0) --chosen;
  double sum = 0.0;
  for (int64_t j = 0; j < chosen; ++j) sum += block[j];
  *before = sum;
  return chosen;
}

// The child of the block at `start` holding mass `*remaining` (as
// NumPy's descent: the number of running sums <= it); subtracts the running
// sum before it. Past the last running sum: the last child with positive
// mass. kFanout: the block's size if known when compiling, else 0.
template <int64_t kFanout>
int64_t ChooseChild(const double* block, int64_t fanout, double* remaining) {
  double running[kFanout ? kFanout : 1024];  // fanout <= 1024
  running[0] = block[0];  // NumPy's cumsum: left to right.
  for (int64_t j = 1; j < fanout; ++j) running[j] = running[j - 1] + block[j];
  int64_t chosen = 0;
  for (int64_t j = 0; j < fanout; ++j) chosen += running[j] <= *remaining;
  if (chosen == fanout) {
    double before;
    chosen = LastPositiveChild(block, fanout, &before);
    if (chosen > 0) *remaining -= before;
    return chosen;
  }
  if (chosen > 0) *remaining -= running[chosen - 1];
  return chosen;
}

// `DescendFrom` for a fanout of kFanout (0: t.fanout, read at run time; a
// constant unrolls the child scans).
template <int64_t kFanout>
bool DescendOf(const Tree& t, const int64_t* rows, double* remaining,
               int64_t count, int64_t* out) {
  const int64_t fanout = kFanout ? kFanout : t.fanout;
  for (int64_t b = 0; b < count; ++b) out[b] = 0;
  for (int64_t level = t.levels - 1; level >= 0; --level) {
    const double* base = t.flat + t.offsets[level];
    for (int64_t b = 0; b < count; ++b) {
      if (rows != nullptr && out[b] >= rows[level]) return false;
      if (level < t.levels - 2) {
        for (int64_t j = 0; j < fanout; j += 8) {
          __builtin_prefetch(base + out[b] * fanout + j);
        }
      }
    }
    for (int64_t b = 0; b < count; ++b) {
      const int64_t chosen =
          ChooseChild<kFanout>(base + out[b] * fanout, fanout, &remaining[b]);
      out[b] = out[b] * fanout + chosen;
    }
  }
  return true;
}

// The leaf holding each mass of `remaining` (overwritten), level by level.
// With `rows` (each level's number of rows of `fanout` nodes), also checks
// that every node's children lie in its level's rows (a consistent tree
// never leaves them: padding holds no mass), and returns false, leaving
// `out` unfinished, where a descent would.
inline bool DescendFrom(const Tree& t, const int64_t* rows, double* remaining,
                        int64_t count, int64_t* out) {
  if (t.fanout == 16) return DescendOf<16>(t, rows, remaining, count, out);
  return DescendOf<0>(t, rows, remaining, count, out);
}

// `DescendFrom` the masses `targets`, unchecked (a tree the library built).
inline void Descend(const Tree& t, const double* targets, int64_t count,
                    int64_t* out) {
  std::vector<double> remaining(targets, targets + count);
  DescendFrom(t, nullptr, remaining.data(), count, out);
}

// `Descend` to the masses (lower + width * uniforms) * scale.
inline void DescendUniforms(const Tree& t, const double* uniforms,
                            const double* lower, const double* width,
                            double scale, int64_t count, int64_t* out) {
  std::vector<double> targets(count);
  for (int64_t i = 0; i < count; ++i) {
    targets[i] = (lower[i] + width[i] * uniforms[i]) * scale;
  }
  Descend(t, targets.data(), count, out);
}

// The doubles of Python's random.random() from pairs of 32-bit words.
inline void UniformsFromWords(const uint32_t* words, int64_t count,
                              double* out) {
  for (int64_t i = 0; i < count; ++i) {
    const double high = static_cast<double>(words[2 * i] >> 5);
    const double low = static_cast<double>(words[2 * i + 1] >> 6);
    out[i] = (high * 67108864.0 + low) * (1.0 / 9007199254740992.0);
  }
}

// ---------------------------------------------------------------- sampling

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

// Interleaves `stack` frames of `pixels` items of kItem bytes:
// item k of pixel p of `target` is sources[k]'s pixel p (frames last).
template <int64_t kItem>
void Interleave(const uint8_t* const* sources, int64_t pixels, int64_t stack,
                uint8_t* target) {
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t k = 0; k < stack; ++k) {
      std::memcpy(target + (p * stack + k) * kItem, sources[k] + p * kItem,
                  kItem);
    }
  }
}

// How far ahead of the pixel being interleaved the Atari path fetches its
// frames' lines. The frames lie at random in a large storage, so each is a
// fresh stream from memory: the hardware prefetcher stops at every page and
// does not know the next stack's frames. 1 KiB (16 lines per frame) is the
// least distance at which the copy stops waiting for memory here (measured
// by hand on an Atari batch of 32: 10-15% faster than at none; 512 bytes
// halfway; 2 KiB the same).
constexpr int64_t kPrefetchAhead = 1024;
constexpr int64_t kLineBytes = 64;

// Interleaves pixel p of four one-byte frames into one 32-bit word.
inline void InterleaveWord(const uint8_t* const* f, int64_t p,
                           uint8_t* target) {
  const uint32_t word = static_cast<uint32_t>(f[0][p]) |
                        (static_cast<uint32_t>(f[1][p]) << 8) |
                        (static_cast<uint32_t>(f[2][p]) << 16) |
                        (static_cast<uint32_t>(f[3][p]) << 24);
  std::memcpy(target + 4 * p, &word, 4);
}

// The steps that interleave a line (64 pixels) of four one-byte frames:
// SSE2 (every x86-64; AVX2 measured no faster, as the copy waits on memory)
// or, elsewhere, words.
struct WordSteps {
  static void Line(const uint8_t* const* f, int64_t p, uint8_t* target) {
    for (int64_t q = p; q < p + kLineBytes; ++q) InterleaveWord(f, q, target);
  }
};

#if defined(__SSE2__)
struct Sse2Steps {
  // 16 pixels at a time: interleave the bytes of (f0, f1) and (f2, f3),
  // then their 16-bit pairs, giving [f0 f1 f2 f3] per pixel.
  static void Line(const uint8_t* const* f, int64_t p, uint8_t* target) {
    for (int64_t q = p; q < p + kLineBytes; q += 16) {
      const __m128i a = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(f[0] + q));
      const __m128i b = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(f[1] + q));
      const __m128i c = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(f[2] + q));
      const __m128i d = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(f[3] + q));
      const __m128i ab_lo = _mm_unpacklo_epi8(a, b);
      const __m128i ab_hi = _mm_unpackhi_epi8(a, b);
      const __m128i cd_lo = _mm_unpacklo_epi8(c, d);
      const __m128i cd_hi = _mm_unpackhi_epi8(c, d);
      __m128i* o = reinterpret_cast<__m128i*>(target + 4 * q);
      _mm_storeu_si128(o, _mm_unpacklo_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(ab_hi, cd_hi));
      _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
  }
};
#endif

// Interleaves four one-byte frames (Atari's stack) into one word per
// pixel, a line at a time with `Steps`, fetching kPrefetchAhead pixels
// ahead: the frames' lines to read, and for writing, the target's lines
// those pixels fill (4 per line of pixels); past the end, those of the
// stack filled after this one (`next` frames into `next_target`; null for
// none). Writing needs the target's lines too: when the op last ran on
// another core, they sit modified in that core's cache (measured by hand:
// states filled by two threads in turn on two cores took 1.4x as long
// without these prefetches, the same with them).
//
// The prefetches are written in this loop, not in a helper of their own:
// GCC takes a function whose only effect is prefetching for one without
// effects, and drops its calls.
template <typename Steps>
inline void InterleaveFour(const uint8_t* const* sources,
                           const uint8_t* const* next, int64_t pixels,
                           uint8_t* target, uint8_t* next_target) {
  int64_t p = 0;
  for (; p + kLineBytes <= pixels; p += kLineBytes) {
    int64_t ahead = p + kPrefetchAhead;
    const uint8_t* const* frames = sources;
    uint8_t* out = target;
    if (ahead >= pixels) {
      ahead -= pixels;
      frames = next;
      out = next_target;
    }
    if (frames != nullptr && ahead < pixels) {
      for (int k = 0; k < 4; ++k) __builtin_prefetch(frames[k] + ahead);
      for (int k = 0; k < 4; ++k) {
        __builtin_prefetch(out + 4 * ahead + k * kLineBytes, 1);
      }
    }
    Steps::Line(sources, p, target);
  }
  for (; p < pixels; ++p) InterleaveWord(sources, p, target);
}

// Fills one state (`pixels * stack` items of `item` bytes, frames last)
// with the frames at sources[0], ..., sources[stack - 1]. `next` and
// `next_target`: the frames and target of the state filled after this
// one, fetched ahead, or null.
inline void FillStack(const uint8_t* const* sources,
                      const uint8_t* const* next, int64_t pixels,
                      int64_t item, int64_t stack, uint8_t* target,
                      uint8_t* next_target) {
  if (item == 1 && stack == 4) {  // Atari: one 32-bit word per pixel.
#if defined(__SSE2__)
    return InterleaveFour<Sse2Steps>(sources, next, pixels, target,
                                     next_target);
#else
    return InterleaveFour<WordSteps>(sources, next, pixels, target,
                                     next_target);
#endif
  }
  if (stack == 1) {
    std::memcpy(target, sources[0], pixels * item);
    return;
  }
  switch (item) {  // A constant size: one load and store per item.
    case 1:
      return Interleave<1>(sources, pixels, stack, target);
    case 2:
      return Interleave<2>(sources, pixels, stack, target);
    case 4:
      return Interleave<4>(sources, pixels, stack, target);
    case 8:
      return Interleave<8>(sources, pixels, stack, target);
    default:
      for (int64_t p = 0; p < pixels; ++p) {
        for (int64_t k = 0; k < stack; ++k) {
          std::memcpy(target + (p * stack + k) * item,
                      sources[k] + p * item, item);
        }
      }
  }
}

// Fills `count` states, state i ([pixels * stack] items of `item` bytes,
// frames last) from the frames frames_of(i, sources) points `sources` at,
// into target_of(i), in order: each state's frames and target are fetched
// ahead while the one before is filled.
template <typename FramesOf, typename TargetOf>
void FillStacks(int64_t count, int64_t pixels, int64_t item, int64_t stack,
                FramesOf frames_of, TargetOf target_of) {
  std::vector<const uint8_t*> current(stack), upcoming(stack);
  if (count > 0) frames_of(0, current.data());
  for (int64_t i = 0; i < count; ++i) {
    const bool last = i + 1 == count;
    if (!last) frames_of(i + 1, upcoming.data());
    FillStack(current.data(), last ? nullptr : upcoming.data(), pixels, item,
              stack, target_of(i), last ? nullptr : target_of(i + 1));
    current.swap(upcoming);
  }
}

// Fills states[b] and next_states[b] ([pixels * stack] items of `item`
// bytes each, frames last) with the `stack` frames ending at ends[b] and
// at next_ends[b], b < count, wrapping around capacity: each state with
// its next state, which shares frames with it (read again while cached).
// Either output may be null: it is skipped, and its ends are not read.
inline void TransitionStates(const uint8_t* frames, int64_t capacity,
                             int64_t pixels, int64_t item, int64_t stack,
                             const int64_t* ends, const int64_t* next_ends,
                             int64_t count, uint8_t* states,
                             uint8_t* next_states) {
  const int64_t frame_bytes = pixels * item, state_bytes = frame_bytes * stack;
  // The outputs given (either may be null), in the order they are filled.
  const int64_t* ends_of[2];
  uint8_t* outs[2];
  int64_t given = 0;
  if (states != nullptr) {
    ends_of[given] = ends;
    outs[given++] = states;
  }
  if (next_states != nullptr) {
    ends_of[given] = next_ends;
    outs[given++] = next_states;
  }
  FillStacks(
      count * given, pixels, item, stack,
      [&](int64_t i, const uint8_t** sources) {
        const int64_t end = ends_of[i % given][i / given];
        for (int64_t k = 0; k < stack; ++k) {
          sources[k] = frames + Mod(end - stack + 1 + k, capacity) *
                       frame_bytes;
        }
      },
      [&](int64_t i) { return outs[i % given] + (i / given) * state_bytes; });
}

// Fills out[row] ([pixels * stack] items of `item` bytes, frames last)
// with the `stack` frames ending at ends[row], wrapping around capacity.
inline void StacksEndingAt(const uint8_t* frames, int64_t capacity,
                           int64_t pixels, int64_t item, int64_t stack,
                           const int64_t* ends, int64_t rows, uint8_t* out) {
  TransitionStates(frames, capacity, pixels, item, stack, ends, nullptr, rows,
                   out, nullptr);
}

// Fills out[row] as `StacksEndingAt` with the frames
// windows[row * stack + k], k < stack, indexed as NumPy does: an index in
// [-capacity, 0) counts from the end. Returns false, writing nothing, if
// an index is outside [-capacity, capacity).
inline bool GatherStacks(const uint8_t* frames, int64_t capacity,
                         int64_t pixels, int64_t item, int64_t stack,
                         const int64_t* windows, int64_t rows,
                         uint8_t* out) {
  for (int64_t i = 0; i < rows * stack; ++i) {
    if (windows[i] < -capacity || windows[i] >= capacity) return false;
  }
  const int64_t frame_bytes = pixels * item;
  FillStacks(
      rows, pixels, item, stack,
      [&](int64_t row, const uint8_t** sources) {
        for (int64_t k = 0; k < stack; ++k) {
          const int64_t index = windows[row * stack + k];
          sources[k] = frames + (index < 0 ? index + capacity : index) *
                       frame_bytes;
        }
      },
      [&](int64_t row) { return out + row * frame_bytes * stack; });
  return true;
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

// ------------------------------------------------------------ the memory

// One stored element: its array, one row of `row_bytes` per slot.
struct Column {
  uint8_t* data = nullptr;
  int64_t row_bytes = 0;
};

// The version of PerLayout; native_memory.py's PerLayout says the same.
constexpr int64_t kLayoutVersion = 2;

// The layout a Python memory registers (see native_memory.py): pointers
// into its NumPy arrays and its configuration. A plain C struct, filled by
// ctypes; its size and version come first, checked when it is bound.
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
};

// A registered memory: what the ops and Python share. Its two locks are
// the Python memory's (replay_python.cc's Lock objects take them too):
// `mutex` guards the storage and the layout, `tree_mutex` the sum tree,
// always taken after `mutex` by whoever takes both, so that priority
// updates need not wait for frames being copied. Binding takes both.
struct Memory {
  std::timed_mutex mutex;
  std::timed_mutex tree_mutex;
  bool bound = false;
  int64_t capacity = 0, stack = 0, horizon = 0, max_sample_attempts = 0;
  int64_t* add_count = nullptr;
  uint8_t* episode_end = nullptr;
  uint8_t* observation = nullptr;
  int64_t pixels = 0, observation_item = 0;
  Column action, terminal;
  int64_t terminal_item = 0;
  float* reward = nullptr;
  std::vector<Column> extras;
  std::vector<float> discounts;
  bool prioritized = false;
  std::vector<int64_t> offsets;
  Tree tree{nullptr, nullptr, 0, 0};
  double* tree_scalars = nullptr;
  double smallest = 0.0, largest = 0.0;
  std::mt19937_64 rng;

  // Installs `layout` (the caller holds both locks).
  void Bind(const PerLayout& layout);
  // Forgets every pointer (the caller holds both locks).
  void Unbind() { bound = false; }
};

inline void Memory::Bind(const PerLayout& l) {
  capacity = l.capacity;
  stack = l.stack;
  horizon = l.horizon;
  max_sample_attempts = l.max_sample_attempts;
  add_count = l.add_count;
  episode_end = l.episode_end;
  observation = l.observation;
  pixels = l.pixels;
  observation_item = l.observation_item;
  action = Column{l.action, l.action_bytes};
  reward = l.reward;
  terminal = Column{l.terminal, l.terminal_item};
  terminal_item = l.terminal_item;
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

// The registry: memories by id, shared by every library loading this
// header's core (replay_core.cc defines these). The memory registered as
// `id` with `token`, or nullptr: with *foreign true if no memory of this
// process ever had that id and token (the graph comes from another
// process), false if it was destroyed.
std::shared_ptr<Memory> FindMemory(int64_t id, uint64_t token,
                                   bool* foreign);

// An unbiased draw in [0, range) (range > 0).
inline uint64_t DrawBelow(std::mt19937_64& rng, uint64_t range) {
  const uint64_t threshold = (0 - range) % range;
  uint64_t x;
  do {
    x = rng();
  } while (x < threshold);
  return x % range;
}

// A double in [0, 1) from 53 random bits.
inline double DrawUniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
}

// `count` candidate slots: stratified over the total priority (`strata`)
// or independent; uniform over the sampling range for a uniform memory.
// Returns an error message, or "" (the caller holds the lock).
inline std::string Draw(Memory& m, int64_t count, bool strata,
                        int64_t* out) {
  if (m.prioritized) {
    const double total = m.tree_scalars[0];
    if (!(total > 0.0)) return "Cannot sample from an empty sum tree.";
    std::vector<double> lower(count), width(count), uniforms(count);
    const double step = 1.0 / static_cast<double>(count);
    for (int64_t i = 0; i < count; ++i) {
      if (strata) {  // np.linspace(0, 1, count + 1)'s edges
        const double low = static_cast<double>(i) * step;
        const double high = i + 1 == count ? 1.0
                                           : static_cast<double>(i + 1) * step;
        lower[i] = low;
        width[i] = high - low;
      } else {
        lower[i] = 0.0;
        width[i] = 1.0;
      }
      uniforms[i] = DrawUniform(m.rng);
    }
    DescendUniforms(m.tree, uniforms.data(), lower.data(), width.data(),
                    total, count, out);
    return "";
  }
  const int64_t add_count = *m.add_count;
  const int64_t cursor = add_count % m.capacity;
  int64_t low, high;
  if (add_count >= m.capacity) {
    low = cursor - m.capacity + m.stack - 1;
    high = cursor - m.horizon;
  } else {
    low = m.stack - 1;
    high = cursor - m.horizon;
  }
  for (int64_t i = 0; i < count; ++i) {
    out[i] = Mod(low + static_cast<int64_t>(DrawBelow(
                           m.rng, static_cast<uint64_t>(high - low))),
                 m.capacity);
  }
  return "";
}

// The sampling range's error, or "" (the caller holds the lock).
inline std::string CheckSampleable(const Memory& m) {
  const int64_t add_count = *m.add_count;
  if (add_count < m.capacity &&
      add_count % m.capacity - m.horizon <= m.stack - 1) {
    return "Cannot sample a batch with fewer than stack size (" +
           std::to_string(m.stack) + ") + update_horizon (" +
           std::to_string(m.horizon) + ") transitions.";
  }
  return "";
}

// `count` valid slots, drawn and redrawn as the Python memory does
// (circular_replay_buffer's _sample_indices). Returns an error or "".
inline std::string SampleIndices(Memory& m, int64_t count, int64_t* out) {
  std::string error = CheckSampleable(m);
  if (!error.empty()) return error;
  error = Draw(m, count, true, out);
  if (!error.empty()) return error;
  std::vector<uint8_t> valid(count);
  ValidMask(out, count, m.capacity, *m.add_count, m.horizon, m.stack,
            m.episode_end, m.terminal.data, m.terminal_item, valid.data());
  std::vector<int64_t> pending;
  for (int64_t b = 0; b < count; ++b) {
    if (!valid[b]) pending.push_back(b);
  }
  int64_t failures = 0;
  std::vector<int64_t> redrawn;
  while (!pending.empty()) {
    failures += static_cast<int64_t>(pending.size());
    if (failures >= m.max_sample_attempts) {
      return "Max sample attempts: Tried " +
             std::to_string(m.max_sample_attempts) + " times but only "
             "sampled " + std::to_string(count - pending.size()) +
             " valid indices. Batch size is " + std::to_string(count);
    }
    const int64_t n = static_cast<int64_t>(pending.size());
    redrawn.resize(n);
    error = Draw(m, n, false, redrawn.data());
    if (!error.empty()) return error;
    ValidMask(redrawn.data(), n, m.capacity, *m.add_count, m.horizon,
              m.stack, m.episode_end, m.terminal.data, m.terminal_item,
              valid.data());
    std::vector<int64_t> still;
    for (int64_t i = 0; i < n; ++i) {
      out[pending[i]] = redrawn[i];
      if (!valid[i]) still.push_back(pending[i]);
    }
    pending.swap(still);
  }
  return "";
}

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_REPLAY_CORE_H_
