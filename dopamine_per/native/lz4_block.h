// An LZ4 block codec: our own implementation of the LZ4 block format (the
// format of lz4.block with store_size=False), written from its
// specification, for the replay memory's compressed frames, which the
// native sampler decodes without Python.
//
// A block is a series of sequences. Each starts with a token byte: its high
// 4 bits are the number of literals, its low 4 bits the match length minus
// 4 (the minimum match); a nibble of 15 is extended by the bytes after it,
// each added, until one below 255. The literals follow, copied as they
// are, then the match's offset (2 bytes, little-endian: how far back the
// copy starts, 1 to 65535) and its length's extension bytes. A match may
// overlap the bytes it writes (offset < length: a run). The last sequence
// has literals only and ends the block. End rules, which the reference
// decoder enforces and so does ours: the last 5 bytes are literals and the
// last match starts at least 12 bytes before the end.
//
// Decoding checks every read and write: crafted input fails, it never
// reads or writes out of bounds, and it ends (every step consumes input).

#ifndef DOPAMINE_PER_NATIVE_LZ4_BLOCK_H_
#define DOPAMINE_PER_NATIVE_LZ4_BLOCK_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

namespace dopamine_per {

// The format's constants: the minimum match, the largest offset, the
// literals that end every block, and how far before the end the last match
// may start.
constexpr int64_t kLz4MinMatch = 4;
constexpr int64_t kLz4MaxOffset = 65535;
constexpr int64_t kLz4LastLiterals = 5;
constexpr int64_t kLz4LastMatchStart = 12;
// The largest input Lz4Compress takes (positions are 32-bit), as lz4's.
constexpr int64_t kLz4MaxInputSize = 0x7E000000;
// The largest level: from 2 on, a level searches 2**(level - 1) earlier
// positions per byte.
constexpr int kLz4MaxLevel = 12;

namespace lz4_internal {

// A nibble of 15 is extended by the bytes after it.
constexpr unsigned kNibbleMax = 15;

inline uint32_t Load32(const uint8_t* p) {
  uint32_t value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

// Adds the extension bytes at `*ip` to `*length` (a nibble of 15): false if
// the input ends before the last one or the total passes `limit` (so no
// sum overflows). Each byte read advances `*ip`: the loop ends.
inline bool ReadLength(const uint8_t** ip, const uint8_t* end,
                       uint64_t limit, uint64_t* length) {
  uint8_t byte;
  do {
    if (*ip >= end) return false;
    byte = *(*ip)++;
    *length += byte;
    if (*length > limit) return false;
  } while (byte == 255);
  return true;
}

// Copies `length` bytes from `from` to `to` in chunks of `width` bytes,
// writing up to `width` - 1 bytes more. Each chunk must read bytes written
// before it: `to` - `from` >= `width` where they overlap.
template <int width>
inline void WideCopy(uint8_t* to, const uint8_t* from, uint64_t length) {
  for (uint64_t i = 0; i < length; i += width) {
    std::memcpy(to + i, from + i, width);
  }
}

// Copies a match of `length` bytes from `offset` back (1 <= offset <= the
// bytes written before `op`), as if byte by byte: with an overlap the copy
// repeats the last `offset` bytes. `slack` bytes after the match may be
// overwritten (they are written later): then it copies 16 or 8 bytes at a
// time.
inline void CopyMatch(uint8_t* op, uint64_t offset, uint64_t length,
                      int64_t slack) {
  const uint8_t* match = op - offset;
  if (slack >= 32 && offset >= 32) {
    WideCopy<32>(op, match, length);
  } else if (slack >= 16 && offset >= 16) {
    WideCopy<16>(op, match, length);
  } else if (slack >= 16 && offset >= 8) {
    WideCopy<8>(op, match, length);
  } else if (offset == 1 && (length >= 32 || slack < 16)) {
    std::memset(op, *match, length);
  } else if (slack >= 16) {
    // A short period: the first 8 bytes one by one, then from the largest
    // multiple of `offset` up to 8 back (the output from `match` on repeats
    // every `offset` bytes), 8 or 4 bytes at a time.
    for (int i = 0; i < 8; ++i) op[i] = match[i];
    const uint64_t period = offset * (8 / offset);
    if (length > 8 && period == 8) {
      WideCopy<8>(op + 8, op, length - 8);
    } else if (length > 8) {
      WideCopy<4>(op + 8, op + 8 - period, length - 8);
    }
  } else {
    // Exact: the output from `match` on repeats every `offset` bytes, so
    // it can be copied from `match` in chunks of all that is written since,
    // each chunk twice the last, none overlapping its source.
    uint8_t* const end = op + length;
    while (op < end) {
      const uint64_t chunk = std::min<uint64_t>(op - match, end - op);
      std::memcpy(op, match, chunk);
      op += chunk;
    }
  }
}

// The number of equal bytes at `a` and `b`, up to `limit` - `b` (`a` <
// `b`).
inline int64_t MatchLength(const uint8_t* a, const uint8_t* b,
                           const uint8_t* limit) {
  const uint8_t* const start = b;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  while (limit - b >= 8) {
    const uint64_t diff = Load64(a) ^ Load64(b);
    if (diff != 0) return (b - start) + (__builtin_ctzll(diff) >> 3);
    a += 8;
    b += 8;
  }
#endif
  while (b < limit && *a == *b) {
    ++a;
    ++b;
  }
  return b - start;
}

// Writes a length's extension bytes (`rest`: the length minus the nibble
// of 15).
inline uint8_t* WriteLength(uint8_t* op, int64_t rest) {
  for (; rest >= 255; rest -= 255) *op++ = 255;
  *op++ = static_cast<uint8_t>(rest);
  return op;
}

// The extension bytes after a nibble for `value`.
inline int64_t ExtensionBytes(int64_t value) {
  return value < kNibbleMax ? 0 : (value - kNibbleMax) / 255 + 1;
}

// Writes the block's sequences into [op, end), each checked for room.
class SequenceWriter {
 public:
  SequenceWriter(uint8_t* op, uint8_t* end) : op_(op), end_(end) {}

  // One sequence: the `literals` bytes at `literal`, then a match of
  // `length` bytes at `offset`; or, with `length` 0, the last sequence.
  // False if there is no room (for exactly these bytes).
  bool Write(const uint8_t* literal, int64_t literals, int64_t offset,
             int64_t length) {
    const int64_t match = length > 0 ? length - kLz4MinMatch : 0;
    const int64_t bytes = 1 + ExtensionBytes(literals) + literals +
                          (length > 0 ? 2 + ExtensionBytes(match) : 0);
    if (end_ - op_ < bytes) return false;
    uint8_t* token = op_++;
    *token = static_cast<uint8_t>(
        std::min<int64_t>(literals, kNibbleMax) << 4);
    if (literals >= kNibbleMax) op_ = WriteLength(op_, literals - kNibbleMax);
    if (literals > 0) std::memcpy(op_, literal, literals);
    op_ += literals;
    if (length == 0) return true;
    *op_++ = static_cast<uint8_t>(offset);
    *op_++ = static_cast<uint8_t>(offset >> 8);
    *token |= static_cast<uint8_t>(std::min<int64_t>(match, kNibbleMax));
    if (match >= kNibbleMax) op_ = WriteLength(op_, match - kNibbleMax);
    return true;
  }

  uint8_t* op() const { return op_; }

 private:

  uint8_t* op_;
  uint8_t* const end_;
};

// The hash of the 4 bytes at `p`, in `bits` bits.
inline uint32_t Hash4(const uint8_t* p, int bits) {
  return (Load32(p) * 2654435761u) >> (32 - bits);
}

// A match found: where it starts, how far back and how long (0: none).
struct Match {
  int64_t start = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

// Extends `m` backwards over the pending literals from `anchor` on.
inline void ExtendBack(const uint8_t* src, int64_t anchor, Match* m) {
  while (m->start > anchor && m->start - m->offset > 0 &&
         src[m->start - 1] == src[m->start - m->offset - 1]) {
    --m->start;
    ++m->length;
  }
}

// Greedy (levels 0 and 1): one earlier position per hash, the first match
// of 4 bytes taken; positions that miss often are skipped faster.
inline int64_t CompressGreedy(const uint8_t* src, int64_t size,
                              SequenceWriter* out) {
  constexpr int kBits = 13;
  std::unique_ptr<uint32_t[]> table(new uint32_t[1 << kBits]());
  const int64_t last_start = size - kLz4LastMatchStart;
  const uint8_t* const match_limit = src + size - kLz4LastLiterals;
  int64_t anchor = 0;
  int64_t p = 1;
  int64_t misses = 0;
  while (p <= last_start) {
    const uint32_t h = Hash4(src + p, kBits);
    const int64_t candidate = table[h];
    table[h] = static_cast<uint32_t>(p);
    if (candidate >= p || p - candidate > kLz4MaxOffset ||
        Load32(src + candidate) != Load32(src + p)) {
      p += 1 + (misses++ >> 6);
      continue;
    }
    misses = 0;
    Match m{p, p - candidate,
            kLz4MinMatch + MatchLength(src + candidate + kLz4MinMatch,
                                       src + p + kLz4MinMatch, match_limit)};
    ExtendBack(src, anchor, &m);
    if (!out->Write(src + anchor, m.start - anchor, m.offset, m.length)) {
      return -1;
    }
    anchor = p = m.start + m.length;
    // The position before the next: a run's next match often starts there.
    if (p - 2 <= last_start) {
      table[Hash4(src + p - 2, kBits)] = static_cast<uint32_t>(p - 2);
    }
  }
  return anchor;
}

// Hash chains (levels 2 to 12): every position is chained to the earlier
// ones of its hash, 2**(level - 1) of them are searched per position for
// the longest match, and a match is deferred while the next position has a
// longer one (lazy matching, from level 3).
class ChainMatcher {
 public:
  ChainMatcher(const uint8_t* src, int64_t size, int level)
      : src_(src),
        match_limit_(src + size - kLz4LastLiterals),
        attempts_(int64_t{1} << (level - 1)),
        head_(new uint32_t[1 << kBits]()),
        chain_(new uint16_t[kLz4MaxOffset + 1]) {}

  // The longest match at `p` (length 0 if none), every position before it
  // chained first.
  Match Find(int64_t p) {
    for (; next_ < p; ++next_) Insert(next_);
    Match best;
    best.start = p;
    const uint8_t* const here = src_ + p;
    const int64_t most = match_limit_ - here;
    int64_t candidate = static_cast<int64_t>(head_[Hash4(here, kBits)]) - 1;
    for (int64_t left = attempts_; candidate >= 0 && left > 0; --left) {
      const int64_t offset = p - candidate;
      if (offset > kLz4MaxOffset) break;
      const uint8_t* const there = src_ + candidate;
      // A longer match must differ from the best at its last byte.
      if ((best.length == 0 || there[best.length] == here[best.length]) &&
          Load32(there) == Load32(here)) {
        const int64_t length =
            kLz4MinMatch + MatchLength(there + kLz4MinMatch,
                                       here + kLz4MinMatch, match_limit_);
        if (length > best.length) {
          best.offset = offset;
          best.length = length;
          if (length >= most) break;
        }
      }
      const uint16_t step = chain_[candidate & kLz4MaxOffset];
      if (step == 0) break;
      candidate -= step;
    }
    return best;
  }

 private:
  static constexpr int kBits = 15;

  // Chains position `p` to the last one of its hash (a step of 0 ends the
  // chain: none within reach).
  void Insert(int64_t p) {
    uint32_t& head = head_[Hash4(src_ + p, kBits)];
    const int64_t step = p - (static_cast<int64_t>(head) - 1);
    chain_[p & kLz4MaxOffset] =
        head == 0 || step > kLz4MaxOffset ? 0 : static_cast<uint16_t>(step);
    head = static_cast<uint32_t>(p + 1);
  }

  const uint8_t* const src_;
  const uint8_t* const match_limit_;
  const int64_t attempts_;
  // The last position of each hash, plus 1 (0: none).
  std::unique_ptr<uint32_t[]> head_;
  // Per position (modulo the window): the step back to the previous one of
  // its hash. Written when the position is chained, before it is read.
  std::unique_ptr<uint16_t[]> chain_;
  // The next position to chain.
  int64_t next_ = 0;
};

inline int64_t CompressChained(const uint8_t* src, int64_t size, int level,
                               SequenceWriter* out) {
  ChainMatcher matcher(src, size, level);
  const int64_t last_start = size - kLz4LastMatchStart;
  int64_t anchor = 0;
  int64_t p = 1;
  while (p <= last_start) {
    Match m = matcher.Find(p);
    if (m.length == 0) {
      ++p;
      continue;
    }
    while (level >= 3 && m.start + 1 <= last_start) {
      const Match next = matcher.Find(m.start + 1);
      if (next.length <= m.length) break;
      m = next;
    }
    ExtendBack(src, anchor, &m);
    if (!out->Write(src + anchor, m.start - anchor, m.offset, m.length)) {
      return -1;
    }
    anchor = p = m.start + m.length;
  }
  return anchor;
}

}  // namespace lz4_internal

// The most bytes Lz4Compress writes for `size` input bytes (all literals),
// or -1 if `size` is negative or over kLz4MaxInputSize.
inline int64_t Lz4CompressBound(int64_t size) {
  if (size < 0 || size > kLz4MaxInputSize) return -1;
  return size + size / 255 + 16;
}

// Compresses the `size` bytes at `src` into one LZ4 block at `dst` (of
// `capacity` bytes; Lz4CompressBound(size) always suffices): level 0 or 1
// greedy, 2 to kLz4MaxLevel (clamped) searching more for longer matches.
// Returns the block's size, or -1 if it does not fit in `capacity` or
// `size` is out of Lz4CompressBound's range.
inline int64_t Lz4Compress(const uint8_t* src, int64_t size, uint8_t* dst,
                           int64_t capacity, int level) {
  if (Lz4CompressBound(size) < 0 || capacity < 0) return -1;
  lz4_internal::SequenceWriter out(dst, dst + capacity);
  int64_t anchor = 0;
  // A block under 13 bytes is all literals (its match could start nowhere).
  if (size > kLz4LastMatchStart) {
    anchor = level <= 1 ? lz4_internal::CompressGreedy(src, size, &out)
                        : lz4_internal::CompressChained(
                              src, size, std::min(level, kLz4MaxLevel), &out);
    if (anchor < 0) return -1;
  }
  if (!out.Write(src + anchor, size - anchor, 0, 0)) return -1;
  return out.op() - dst;
}

// Decodes the LZ4 block of `src_size` bytes at `src` into the `dst_size`
// bytes at `dst`, or only its first `needed` bytes or more (0 <= `needed`
// <= `dst_size`; the sequences after them are not read, so a block's
// frames need not all be decoded to read its first ones). True only if the
// block is well formed (end rules included, no offset of 0 or before
// `dst`) and decodes to exactly `dst_size` bytes using exactly `src_size`,
// as far as it was read; else false, `dst` holding anything. Never reads
// or writes outside the two buffers.
inline bool Lz4DecompressPrefix(const uint8_t* src, int64_t src_size,
                                uint8_t* dst, int64_t dst_size,
                                int64_t needed) {
  using lz4_internal::kNibbleMax;
  if (src_size <= 0 || dst_size < 0 || needed < 0 || needed > dst_size) {
    return false;
  }
  const uint8_t* ip = src;
  const uint8_t* const iend = src + src_size;
  uint8_t* op = dst;
  uint8_t* const oend = dst + dst_size;
  // No length can exceed the output: checked before any sum overflows.
  const uint64_t limit = static_cast<uint64_t>(dst_size);
  for (;;) {
    const unsigned token = *ip++;  // ip < iend here.
    uint64_t literals = token >> 4;
    if (literals < kNibbleMax && iend - ip >= 32 && oend - op >= 64) {
      // The common case, far from both ends: not the last sequence, its
      // match starting well before the end; one wide copy.
      std::memcpy(op, ip, 16);
    } else {
      if (literals == kNibbleMax &&
          !lz4_internal::ReadLength(&ip, iend, limit, &literals)) {
        return false;
      }
      const uint64_t input_left = iend - ip;
      const uint64_t output_left = oend - op;
      if (literals >= input_left) {
        // The last sequence: its literals end the input and the output.
        if (literals != input_left || literals != output_left) return false;
        if (literals > 0) std::memcpy(op, ip, literals);
        return true;
      }
      // A match follows: it starts 12 bytes or more before the end.
      if (output_left < kLz4LastMatchStart ||
          literals > output_left - kLz4LastMatchStart) {
        return false;
      }
      if (input_left - literals >= 16 && output_left - literals >= 16) {
        lz4_internal::WideCopy<16>(op, ip, literals);
      } else {
        std::memcpy(op, ip, literals);
      }
    }
    ip += literals;
    op += literals;
    if (iend - ip < 2) return false;
    const uint64_t offset = ip[0] | (static_cast<uint64_t>(ip[1]) << 8);
    ip += 2;
    if (offset == 0 || offset > static_cast<uint64_t>(op - dst)) return false;
    uint64_t length = token & kNibbleMax;
    const int64_t room = oend - op;  // 12 or more (see above).
    if (length < kNibbleMax && offset >= 16 && room >= 32) {
      // The common case: at most 18 bytes, each 16 written before read.
      std::memcpy(op, op - offset, 16);
      std::memcpy(op + 16, op + 16 - offset, 16);
      op += length + kLz4MinMatch;
    } else {
      if (length == kNibbleMax &&
          !lz4_internal::ReadLength(&ip, iend, limit, &length)) {
        return false;
      }
      length += kLz4MinMatch;
      // The match ends 5 bytes or more before the end.
      if (length > static_cast<uint64_t>(room - kLz4LastLiterals)) {
        return false;
      }
      lz4_internal::CopyMatch(op, offset, length,
                              room - static_cast<int64_t>(length));
      op += length;
    }
    // A match ends 5 bytes or more before the end: only a prefix stops here.
    if (op - dst >= needed) return true;
    if (ip >= iend) return false;  // No last sequence.
  }
}

// Lz4DecompressPrefix of all `dst_size` bytes: the whole block checked.
inline bool Lz4Decompress(const uint8_t* src, int64_t src_size, uint8_t* dst,
                          int64_t dst_size) {
  return Lz4DecompressPrefix(src, src_size, dst, dst_size, dst_size);
}

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_LZ4_BLOCK_H_
