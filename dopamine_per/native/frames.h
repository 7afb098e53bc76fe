// Frame stacks: interleaving a transition's `stack` frames into its state
// (frames last), fetching the frames' lines and the targets' ahead.

#ifndef DOPAMINE_PER_NATIVE_FRAMES_H_
#define DOPAMINE_PER_NATIVE_FRAMES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "lz4_block.h"
#include "transitions.h"

namespace dopamine_per {

// Interleaves `stack` frames of `pixels` items of kItem bytes (0: `item`,
// read at run time): item k of pixel p of `target` is sources[k]'s pixel p
// (frames last). A constant size makes one load and store per item.
template <int64_t kItem>
void Interleave(const uint8_t* const* sources, int64_t pixels, int64_t stack,
                int64_t item, uint8_t* target) {
  const int64_t size = kItem ? kItem : item;
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t k = 0; k < stack; ++k) {
      std::memcpy(target + (p * stack + k) * size, sources[k] + p * size,
                  size);
    }
  }
}

// How far ahead of the pixel being interleaved the Atari path fetches its
// frames' lines (why: docs/architecture.md, "The kernels").
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

// Interleaves a line (64 pixels) of four one-byte frames: with SSE2 (every
// x86-64) 16 pixels at a time, the bytes of (f0, f1) and (f2, f3), then
// their 16-bit pairs, giving [f0 f1 f2 f3] per pixel; elsewhere by words.
inline void InterleaveLine(const uint8_t* const* f, int64_t p,
                           uint8_t* target) {
#if defined(__SSE2__)
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
#else
  for (int64_t q = p; q < p + kLineBytes; ++q) InterleaveWord(f, q, target);
#endif
}

// Interleaves four one-byte frames (Atari's stack) into one word per
// pixel, a line at a time, fetching kPrefetchAhead pixels ahead the
// frames' lines and, for writing, the target's; past the end, those of
// the stack filled next (`next` frames into `next_target`; null for none).
// The prefetches are written in this loop: GCC drops the calls of a helper
// whose only effect is prefetching.
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
    InterleaveLine(sources, p, target);
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
    return InterleaveFour(sources, next, pixels, target, next_target);
  }
  if (stack == 1) {
    std::memcpy(target, sources[0], pixels * item);
    return;
  }
  switch (item) {
    case 1:
      return Interleave<1>(sources, pixels, stack, item, target);
    case 2:
      return Interleave<2>(sources, pixels, stack, item, target);
    case 4:
      return Interleave<4>(sources, pixels, stack, item, target);
    case 8:
      return Interleave<8>(sources, pixels, stack, item, target);
    default:
      return Interleave<0>(sources, pixels, stack, item, target);
  }
}

// Where a memory's frames are: a raw array [capacity] of `frame_bytes`
// each, or (raw null) frame_blocks.CompressedFrames' blocks of
// `block_frames` slots: block k's LZ4 bytes at addresses[k] (sizes[k]
// long; 0 if not stored), the open block's frames raw in `open_frames`.
// A batch's blocks shipped alone (distributed/frame_shipping.py) list
// their numbers: addresses[j] and sizes[j] are then block numbers[j]'s,
// j < listed, numbers increasing, and a block not listed is missing.
struct FrameStore {
  const uint8_t* raw = nullptr;
  int64_t capacity = 0, frame_bytes = 0, block_frames = 0;
  const uint64_t* addresses = nullptr;
  const int64_t* sizes = nullptr;
  const int64_t* open_block = nullptr;
  const uint8_t* open_frames = nullptr;
  const int64_t* numbers = nullptr;
  int64_t listed = 0;

  // Where block k's LZ4 bytes are: its entry of addresses and sizes (-1
  // if the list lacks it).
  int64_t EntryOf(int64_t k) const {
    if (numbers == nullptr) return k;
    const int64_t* found = std::lower_bound(numbers, numbers + listed, k);
    return found != numbers + listed && *found == k ? found - numbers : -1;
  }
};

// The frames of a batch, or of a part of it: `Decode` the blocks holding
// some slots, then `At` gives any of those slots' frames (for raw frames,
// any slot's). Decoding again reuses the buffers: a batch is best read a
// transition at a time, each decoded just before its frames are read,
// while they are still in cache.
class FrameReader {
 public:
  explicit FrameReader(const FrameStore& store) : store_(store) {}

  // Makes Zeros() a frame of zeros: a stack's frames from before its
  // first. Only batches with firsts ask for it.
  void KeepZeros() { zero_frame_.assign(store_.frame_bytes, 0); }
  const uint8_t* Zeros() const { return zero_frame_.data(); }

  // Decodes the stored blocks holding the `count` slots at `slots` (any
  // integers, taken modulo the capacity), each only as far as the last of
  // those slots (LZ4 decodes a block from its start). False if a block
  // does not decode to its frames (then nothing may be read).
  bool Decode(const int64_t* slots, int64_t count) {
    if (store_.raw != nullptr) return true;
    const int64_t per = store_.block_frames, bytes = store_.frame_bytes;
    reach_.clear();  // (block, frames of it read)
    for (int64_t i = 0; i < count; ++i) {
      const int64_t slot = Mod(slots[i], store_.capacity);
      reach_.emplace_back(slot / per, slot % per + 1);
    }
    std::sort(reach_.begin(), reach_.end());
    blocks_.clear();
    for (size_t i = 0; i < reach_.size(); ++i) {
      if (i + 1 < reach_.size() && reach_[i + 1].first == reach_[i].first) {
        continue;  // The block's last pair reaches furthest.
      }
      blocks_.push_back(reach_[i].first);
      reach_[blocks_.size() - 1].second = reach_[i].second;
    }
    const int64_t block_bytes = per * bytes;
    const size_t needed = blocks_.size() * block_bytes;
    if (decoded_.size() < needed) decoded_.resize(needed);
    if (static_cast<int64_t>(zeros_.size()) != block_bytes) {
      zeros_.assign(block_bytes, 0);
    }
    empty_.assign(blocks_.size(), 0);
    open_ = *store_.open_block;
    for (size_t j = 0; j < blocks_.size(); ++j) {
      const int64_t k = blocks_[j];
      if (k == open_) continue;
      const int64_t entry = store_.EntryOf(k);
      if (entry < 0) return false;  // A shipped batch lacks the block.
      empty_[j] = store_.addresses[entry] == 0;
      if (empty_[j]) continue;  // Never stored: zeros.
      const int64_t frames = std::min(per, store_.capacity - k * per);
      if (!Lz4DecompressPrefix(
              reinterpret_cast<const uint8_t*>(
                  static_cast<uintptr_t>(store_.addresses[entry])),
              store_.sizes[entry], decoded_.data() + j * block_bytes,
              frames * bytes, std::min(reach_[j].second, frames) * bytes)) {
        return false;
      }
    }
    return true;
  }

  // Slot `slot`'s frame (modulo the capacity): decoded, raw, or zeros for
  // a block never stored.
  const uint8_t* At(int64_t slot) const {
    slot = Mod(slot, store_.capacity);
    if (store_.raw != nullptr) return store_.raw + slot * store_.frame_bytes;
    const int64_t per = store_.block_frames, k = slot / per;
    const int64_t offset = (slot - k * per) * store_.frame_bytes;
    if (k == open_) return store_.open_frames + offset;
    const size_t j = std::lower_bound(blocks_.begin(), blocks_.end(), k) -
                     blocks_.begin();
    if (empty_[j]) return zeros_.data();
    return decoded_.data() + j * per * store_.frame_bytes + offset;
  }

 private:
  const FrameStore& store_;
  int64_t open_ = -1;
  std::vector<std::pair<int64_t, int64_t>> reach_;
  std::vector<int64_t> blocks_;   // the blocks decoded, sorted
  std::vector<uint8_t> empty_;    // whether each was never stored
  std::vector<uint8_t> decoded_;  // their frames (each as far as read)
  std::vector<uint8_t> zeros_;    // a block never stored
  std::vector<uint8_t> zero_frame_;
};

// Where a batch's stacks end and begin: state b is the `stack` frames
// ending at ends[b], those before firsts[b] zeros (firsts null: none); its
// next state likewise, at next_ends[b] and next_firsts[b].
struct StackBounds {
  const int64_t* ends = nullptr;
  const int64_t* next_ends = nullptr;
  const int64_t* firsts = nullptr;
  const int64_t* next_firsts = nullptr;

  // The bounds of rows [b, count) alone.
  StackBounds From(int64_t b) const {
    auto at = [b](const int64_t* p) { return p == nullptr ? p : p + b; };
    return {at(ends), at(next_ends), at(firsts), at(next_firsts)};
  }
};

// Fills states[b] and next_states[b] ([pixels * stack] items of `item`
// bytes each, frames last) with the stacks `bounds` gives, b < count,
// wrapping around the capacity, read through `frames` (decoded for them):
// each state with its next state, which shares its frames while they are
// cached. A null output is skipped, its bounds not read. Bounds with
// firsts need `frames.KeepZeros()` first.
inline void TransitionStates(const FrameReader& frames, int64_t pixels,
                             int64_t item, int64_t stack,
                             const StackBounds& bounds, int64_t count,
                             uint8_t* states, uint8_t* next_states) {
  const int64_t frame_bytes = pixels * item, state_bytes = frame_bytes * stack;
  // The outputs given, in the order they are filled: fill i is output
  // i % given of row i / given.
  const int64_t* ends_of[2];
  const int64_t* firsts_of[2];
  uint8_t* outs[2];
  int64_t given = 0;
  if (states != nullptr) {
    ends_of[given] = bounds.ends;
    firsts_of[given] = bounds.firsts;
    outs[given++] = states;
  }
  if (next_states != nullptr) {
    ends_of[given] = bounds.next_ends;
    firsts_of[given] = bounds.next_firsts;
    outs[given++] = next_states;
  }
  auto frames_of = [&](int64_t i, const uint8_t** sources) {
    const int64_t end = ends_of[i % given][i / given];
    const int64_t* firsts = firsts_of[i % given];
    const int64_t first = firsts == nullptr ? end - stack : firsts[i / given];
    for (int64_t k = 0; k < stack; ++k) {
      const int64_t slot = end - stack + 1 + k;
      sources[k] = slot < first ? frames.Zeros() : frames.At(slot);
    }
  };
  auto target_of = [&](int64_t i) {
    return outs[i % given] + (i / given) * state_bytes;
  };
  const int64_t fills = count * given;
  std::vector<const uint8_t*> current(stack), upcoming(stack);
  if (fills > 0) frames_of(0, current.data());
  for (int64_t i = 0; i < fills; ++i) {
    const bool last = i + 1 == fills;
    if (!last) frames_of(i + 1, upcoming.data());
    FillStack(current.data(), last ? nullptr : upcoming.data(), pixels, item,
              stack, target_of(i), last ? nullptr : target_of(i + 1));
    current.swap(upcoming);
  }
}

// TransitionStates of raw frames [capacity, pixels] of `item` bytes.
inline void TransitionStates(const uint8_t* frames, int64_t capacity,
                             int64_t pixels, int64_t item, int64_t stack,
                             const int64_t* ends, const int64_t* next_ends,
                             int64_t count, uint8_t* states,
                             uint8_t* next_states) {
  FrameStore store;
  store.raw = frames;
  store.capacity = capacity;
  store.frame_bytes = pixels * item;
  StackBounds bounds;
  bounds.ends = ends;
  bounds.next_ends = next_ends;
  TransitionStates(FrameReader(store), pixels, item, stack, bounds, count,
                   states, next_states);
}

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_FRAMES_H_
