// The sampling policy on a registered memory, as the Python memories
// sample: draws, the validity test, redraws up to max_sample_attempts and
// their messages. The draws come from the ops' generator (GeneratorDraws)
// or the memory's NumPy generator (replay_python.cc).

#ifndef DOPAMINE_PER_NATIVE_SAMPLER_H_
#define DOPAMINE_PER_NATIVE_SAMPLER_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "memory.h"
#include "sum_tree.h"
#include "transitions.h"

namespace dopamine_per {

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

// The error of a draw from a sum tree whose priorities are all zero (the
// sum tree's ValueError in Python).
constexpr const char* kEmptyTreeError = "Cannot sample from an empty sum tree.";

// What SampleIndices returns where its draws ran out before a redraw
// (`out` then holds the first draws; the caller redraws).
constexpr const char* kMoreDraws = "The draws given ran out.";

// The draws of the ops: the memory's generator.
struct GeneratorDraws {
  std::mt19937_64& rng;
  uint64_t Below(uint64_t range) { return DrawBelow(rng, range); }
  double Uniform() { return DrawUniform(rng); }
  bool Has(int64_t) const { return true; }
};

// `count` candidate slots from `draws` (a source with Below(range), a
// draw in [0, range), Uniform(), a double in [0, 1), and Has(n), whether
// it holds n more draws): stratified over
// the total priority (`strata`) or independent; uniform over the sampling
// range for a uniform memory. Returns an error message, or "" (the caller
// holds the locks).
template <typename Draws>
std::string Draw(const Memory& m, int64_t count, bool strata, Draws& draws,
                 int64_t* out) {
  if (m.prioritized) {
    const double total = m.tree_scalars[0];
    if (!(total > 0.0)) return kEmptyTreeError;
    std::vector<double> lower(count, 0.0), width(count, 1.0), uniforms(count);
    const double step = 1.0 / static_cast<double>(count);
    for (int64_t i = 0; i < count; ++i) {
      if (strata) {  // np.linspace(0, 1, count + 1)'s edges
        lower[i] = static_cast<double>(i) * step;
        width[i] = (i + 1 == count ? 1.0 : static_cast<double>(i + 1) * step) -
                   lower[i];
      }
      uniforms[i] = draws.Uniform();
    }
    DescendUniforms(m.tree, nullptr, uniforms.data(), lower.data(),
                    width.data(), total, count, out);
    return "";
  }
  const int64_t add_count = *m.add_count;
  const int64_t cursor = add_count % m.capacity;
  const int64_t low =
      (add_count >= m.capacity ? cursor - m.capacity : 0) + m.stack - 1;
  const int64_t high = cursor - m.horizon;
  for (int64_t i = 0; i < count; ++i) {
    out[i] = Mod(low + static_cast<int64_t>(
                           draws.Below(static_cast<uint64_t>(high - low))),
                 m.capacity);
  }
  return "";
}

// The validity of `count` slots of `m` (ValidMask on its arrays; the
// caller holds the storage lock).
inline void ValidSlots(const Memory& m, const int64_t* slots, int64_t count,
                       uint8_t* valid) {
  ValidMask(slots, count, m.capacity, *m.add_count, m.horizon, m.stack,
            m.episode_end, m.terminal.data, m.terminal.row_bytes, valid);
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

// `count` valid slots, drawn from `draws` and redrawn as the Python memory
// does (circular_replay_buffer's _sample_indices). Returns an error, "",
// or kMoreDraws if `draws` cannot draw a round of redraws.
template <typename Draws>
std::string SampleIndices(const Memory& m, int64_t count, Draws& draws,
                          int64_t* out) {
  std::string error = CheckSampleable(m);
  if (!error.empty()) return error;
  error = Draw(m, count, true, draws, out);
  if (!error.empty()) return error;
  std::vector<uint8_t> valid(count);
  ValidSlots(m, out, count, valid.data());
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
    if (!draws.Has(n)) return kMoreDraws;
    redrawn.resize(n);
    error = Draw(m, n, false, draws, redrawn.data());
    if (!error.empty()) return error;
    ValidSlots(m, redrawn.data(), n, valid.data());
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

#endif  // DOPAMINE_PER_NATIVE_SAMPLER_H_
