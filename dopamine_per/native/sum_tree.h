// The sum tree's loops: numpy_kernels.py's float operations in its order,
// hence its bits (the layout: docs/architecture.md, "The sum tree's flat
// layout").

#ifndef DOPAMINE_PER_NATIVE_SUM_TREE_H_
#define DOPAMINE_PER_NATIVE_SUM_TREE_H_

#include <cstdint>
#include <cstring>
#include <vector>

namespace dopamine_per {

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
                 int64_t capacity, double smallest, double largest) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t leaf = static_cast<int64_t>(leaves[i]);
    const double value = static_cast<double>(values[i]);
    if (leaf < 0 || leaf >= capacity ||
        (!(value >= smallest && value <= largest) && value != 0.0)) {
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

// `DescendFrom` the masses (lower + width * uniforms) * scale.
inline bool DescendUniforms(const Tree& t, const int64_t* rows,
                            const double* uniforms, const double* lower,
                            const double* width, double scale, int64_t count,
                            int64_t* out) {
  std::vector<double> masses(count);
  for (int64_t i = 0; i < count; ++i) {
    masses[i] = (lower[i] + width[i] * uniforms[i]) * scale;
  }
  return DescendFrom(t, rows, masses.data(), count, out);
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

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_SUM_TREE_H_
