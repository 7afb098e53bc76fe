// Unit tests of dopamine_per/native/replay_core.h, the loops every native
// library shares. A plain program, no test framework: it prints each failed
// check and "N checks passed" (exit 0) or "K of N checks failed" (exit 1).
// tests/native/replay_core_cpp_test.py compiles and runs it.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "replay_core.h"

namespace {

using dopamine_per::BatchOutput;
using dopamine_per::BatchSource;
using dopamine_per::Fill;
using dopamine_per::FillBatch;
using dopamine_per::kRowPart;
using dopamine_per::kScalarPart;
using dopamine_per::kStatePart;
using dopamine_per::Memory;
using dopamine_per::Walk;
using dopamine_per::Walked;
using dopamine_per::PerLayout;
using dopamine_per::Tree;

// ------------------------------------------------------------- checking

int checks = 0;
int failures = 0;

template <typename T>
std::string Show(const T& value) {
  if constexpr (std::is_arithmetic_v<T>) {
    std::ostringstream text;
    text << std::setprecision(17) << +value;
    return text.str();
  } else {
    return "\"" + std::string(value) + "\"";
  }
}

void Check(bool ok, const char* what, const char* file, int line,
           const std::string& detail) {
  ++checks;
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "%s:%d: check failed: %s%s\n", file, line, what,
               detail.c_str());
}

template <typename A, typename B>
void CheckEqual(const A& a, const B& b, const char* what, const char* file,
                int line) {
  const bool equal = a == b;
  Check(equal, what, file, line,
        equal ? std::string() : " (" + Show(a) + " vs " + Show(b) + ")");
}

#define CHECK(condition) Check((condition), #condition, __FILE__, __LINE__, "")
#define CHECK_EQ(a, b) CheckEqual((a), (b), #a " == " #b, __FILE__, __LINE__)

// Most loops are called through helpers that are never inlined: one copy
// of each (the descents are unrolled) rather than one per call keeps the
// build with AddressSanitizer and UBSan shorter.
#define NOINLINE __attribute__((noinline))

NOINLINE std::string DrawOf(Memory& m, int64_t count, bool strata,
                            int64_t* out) {
  dopamine_per::GeneratorDraws draws{m.rng};
  return dopamine_per::Draw(m, count, strata, draws, out);
}

NOINLINE std::string SampleOf(Memory& m, int64_t count, int64_t* out) {
  dopamine_per::GeneratorDraws draws{m.rng};
  return dopamine_per::SampleIndices(m, count, draws, out);
}

// ------------------------------------------------------------- sum trees

// NumPy's pairwise sum (numpy_kernels._halving_sum), the reference.
double ReferenceHalvingSum(std::vector<double> values) {
  while (values.size() > 1) {
    std::vector<double> pairs;
    for (size_t j = 0; j < values.size(); j += 2) {
      pairs.push_back(values[j] + values[j + 1]);
    }
    values.swap(pairs);
  }
  return values[0];
}

// A sum tree laid out as sum_tree.py lays it out: levels leaves first,
// each a whole number of rows of `fanout`, the top one row.
struct TestTree {
  TestTree(int64_t capacity, int64_t fanout_) : fanout(fanout_) {
    std::vector<int64_t> sizes{RoundUp(capacity)};
    while (sizes.back() > fanout) sizes.push_back(RoundUp(sizes.back() /
                                                          fanout));
    offsets.push_back(0);
    for (const int64_t size : sizes) offsets.push_back(offsets.back() + size);
    flat.assign(offsets.back(), 0.0);
    for (const int64_t size : sizes) rows.push_back(size / fanout);
  }

  int64_t RoundUp(int64_t n) const {
    return (n + fanout - 1) / fanout * fanout;
  }
  int64_t levels() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t leaves() const { return offsets[1]; }
  Tree tree() { return Tree{flat.data(), offsets.data(), levels(), fanout}; }

  // WriteLeaves; returns the total.
  template <typename Index>
  NOINLINE double Write(const std::vector<Index>& at,
                        const std::vector<double>& values,
                        double* written_max = nullptr) {
    double ignored;
    return dopamine_per::WriteLeaves(
        tree(), at.data(), values.data(), static_cast<int64_t>(at.size()),
        written_max == nullptr ? &ignored : written_max);
  }

  // The flat array recomputed from the leaves by the reference sums (the
  // padding past each level's parents zero), and its total.
  std::vector<double> Recomputed(double* total) const {
    std::vector<double> expected(flat.size(), 0.0);
    std::copy(flat.begin(), flat.begin() + offsets[1], expected.begin());
    for (int64_t k = 0; k + 1 < levels(); ++k) {
      for (int64_t r = 0; r < rows[k]; ++r) {
        const auto row = expected.begin() + offsets[k] + r * fanout;
        expected[offsets[k + 1] + r] =
            ReferenceHalvingSum(std::vector<double>(row, row + fanout));
      }
    }
    *total = ReferenceHalvingSum(std::vector<double>(
        expected.begin() + offsets[levels() - 1], expected.end()));
    return expected;
  }

  int64_t fanout;
  std::vector<int64_t> offsets, rows;
  std::vector<double> flat;
};

void TestHalvingAndLevelSums() {
  for (const int64_t fanout : {1, 2, 4, 8, 16, 32, 1024}) {
    std::vector<double> values(fanout);
    for (int64_t j = 0; j < fanout; ++j) {
      values[j] = 0.1 * static_cast<double>(j) + 1.0 / 3.0 + 1e-9 * (j % 7);
    }
    CHECK_EQ(dopamine_per::HalvingSum(values.data(), fanout),
             ReferenceHalvingSum(values));
  }
  // Pairwise, not left to right: (1 + 1e17) + (-1e17 + 1) is 0, while
  // ((1 + 1e17) - 1e17) + 1 would be 1.
  const double cancel[4] = {1.0, 1e17, -1e17, 1.0};
  CHECK_EQ(dopamine_per::HalvingSum(cancel, 4), 0.0);
  const int64_t rows = 5, fanout = 16;
  std::vector<double> blocks(rows * fanout), sums(rows, -1.0);
  for (size_t j = 0; j < blocks.size(); ++j) blocks[j] = std::sqrt(j + 0.5);
  dopamine_per::LevelSums(blocks.data(), rows, fanout, sums.data());
  for (int64_t r = 0; r < rows; ++r) {
    CHECK_EQ(sums[r], ReferenceHalvingSum(std::vector<double>(
                          blocks.begin() + r * fanout,
                          blocks.begin() + (r + 1) * fanout)));
  }
}

// Writes update every ancestor exactly as a recomputation from the leaves.
void TestWritesUpdateAncestors() {
  std::mt19937_64 rng(7);
  for (const int64_t fanout : {2, 4, 16}) {  // 16: the unrolled path.
    for (const int64_t capacity : {1, 5, 16, 17, 100, 1000}) {
      TestTree t(capacity, fanout);
      for (int round = 0; round < 20; ++round) {
        const int64_t count = 1 + static_cast<int64_t>(rng() % 8);
        std::vector<int64_t> at(count);
        std::vector<int32_t> at32(count);
        std::vector<double> values(count);
        double largest = 0.0;
        for (int64_t i = 0; i < count; ++i) {
          at[i] = static_cast<int64_t>(rng() % capacity);
          at32[i] = static_cast<int32_t>(at[i]);
          // A quarter zero; the rest spread over orders of magnitude.
          values[i] = rng() % 4 == 0
                          ? 0.0
                          : std::ldexp(dopamine_per::DrawUniform(rng) + 0.5,
                                       static_cast<int>(rng() % 20) - 10);
        }
        // Repeated leaves: the last value written wins, as NumPy's.
        std::vector<double> last(t.flat.begin(), t.flat.begin() + capacity);
        for (int64_t i = 0; i < count; ++i) last[at[i]] = values[i];
        for (const double value : values) largest = std::max(largest, value);
        double written_max = -1.0;
        const double total = round % 2 ? t.Write(at32, values, &written_max)
                                       : t.Write(at, values, &written_max);
        CHECK_EQ(written_max, largest);
        for (int64_t leaf = 0; leaf < capacity; ++leaf) {
          CHECK_EQ(t.flat[leaf], last[leaf]);
        }
        double expected_total;
        const std::vector<double> expected = t.Recomputed(&expected_total);
        CHECK(t.flat == expected);
        CHECK_EQ(total, expected_total);
        // UpdateParents alone recomputes the same total.
        CHECK_EQ(dopamine_per::UpdateParents(t.tree(), at.data(), count),
                 expected_total);
      }
    }
  }
  // A leaf set to zero takes its mass out of every ancestor.
  TestTree t(64, 4);
  t.Write(std::vector<int64_t>{5, 40}, {3.0, 4.0});
  CHECK_EQ(t.Write(std::vector<int64_t>{5}, {0.0}), 4.0);
  for (int64_t k = 1; k < t.levels(); ++k) {
    CHECK_EQ(t.flat[t.offsets[k] + (5 >> (2 * k))], 0.0);
    CHECK_EQ(t.flat[t.offsets[k] + (40 >> (2 * k))], 4.0);
  }
}

void TestLeavesValid() {
  const double smallest = 1e-30, largest = 1e30;
  const std::vector<int64_t> at{0, 3, 9};
  const std::vector<double> fine{1.0, 0.0, largest};
  CHECK(dopamine_per::LeavesValid(at.data(), fine.data(), 3, 10, smallest,
                                  largest));
  for (const int64_t leaf : {10, -1}) {
    const std::vector<int64_t> outside{0, leaf, 3};
    CHECK(!dopamine_per::LeavesValid(outside.data(), fine.data(), 3, 10,
                                     smallest, largest));
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const double value : {nan, inf, -inf, -1.0, 1e-31, 2e30}) {
    const std::vector<double> values{1.0, 2.0, value};
    CHECK(!dopamine_per::LeavesValid(at.data(), values.data(), 3, 10,
                                     smallest, largest));
  }
  const std::vector<int32_t> at32{0, 3, 9};
  const std::vector<float> floats{1.0f, 0.0f, 2.0f};
  CHECK(dopamine_per::LeavesValid(at32.data(), floats.data(), 3, 10, smallest,
                                  largest));
}

NOINLINE int64_t DescendOne(TestTree& t, double mass) {
  int64_t leaf = -1;
  dopamine_per::DescendFrom(t.tree(), nullptr, &mass, 1, &leaf);
  return leaf;
}

void TestDescentBoundaries() {
  // Leaves 1 2 0 3 | 0 0 4 0 (fanout 4): the top row holds 6 4 0 0.
  TestTree t(8, 4);
  t.Write(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7},
          {1.0, 2.0, 0.0, 3.0, 0.0, 0.0, 4.0, 0.0});
  CHECK_EQ(t.levels(), 2);
  // A mass on a boundary belongs to the leaf it starts, skipping leaves
  // without mass; masses at or past the total, to the last positive leaf.
  const double masses[] = {0.0, 0.5, 1.0, 2.999, 3.0, 5.999, 6.0, 9.999,
                           10.0, 11.0, 1e300};
  const int64_t leaves[] = {0, 0, 1, 1, 3, 3, 6, 6, 6, 6, 6};
  for (size_t i = 0; i < std::size(masses); ++i) {
    CHECK_EQ(DescendOne(t, masses[i]), leaves[i]);
  }
  // Batched, with the same answers; DescendUniforms' masses.
  std::vector<double> remaining(std::begin(masses), std::end(masses));
  std::vector<int64_t> out(remaining.size(), -1);
  dopamine_per::DescendFrom(t.tree(), nullptr, remaining.data(),
                            static_cast<int64_t>(out.size()), out.data());
  CHECK(std::equal(out.begin(), out.end(), std::begin(leaves)));
  const double uniforms[] = {0.0, 0.5, 0.0};
  const double lower[] = {0.0, 0.5, 0.625};
  const double width[] = {0.5, 0.5, 0.375};
  int64_t drawn[3];
  dopamine_per::DescendUniforms(t.tree(), nullptr, uniforms, lower, width,
                                10.0, 3, drawn);
  CHECK_EQ(drawn[0], 0);  // mass 0
  CHECK_EQ(drawn[1], 6);  // mass 7.5
  CHECK_EQ(drawn[2], 6);  // mass 6.25
  // The unrolled fanout: the same boundaries.
  TestTree wide(40, 16);
  wide.Write(std::vector<int64_t>{0, 17, 39}, {1.0, 2.0, 4.0});
  CHECK_EQ(DescendOne(wide, 0.0), 0);
  CHECK_EQ(DescendOne(wide, 1.0), 17);
  CHECK_EQ(DescendOne(wide, 3.0), 39);
  CHECK_EQ(DescendOne(wide, 7.0), 39);
  CHECK_EQ(DescendOne(wide, 100.0), 39);
}

// Random trees of integer priorities (exact sums): every mass lands on the
// leaf whose interval [prefix, prefix + priority) holds it, never a zero.
void TestDescentFindsTheLeaf() {
  std::mt19937_64 rng(11);
  for (const int64_t fanout : {2, 4, 16}) {
    for (const int64_t capacity : {1, 3, 16, 50, 300}) {
      TestTree t(capacity, fanout);
      std::vector<int64_t> at(capacity);
      std::vector<double> values(capacity);
      for (int64_t i = 0; i < capacity; ++i) {
        at[i] = i;
        values[i] = rng() % 3 == 0 ? 0.0 : static_cast<double>(rng() % 5);
      }
      values[rng() % capacity] = 1.0;  // Some mass.
      const double total = t.Write(at, values);
      std::vector<double> prefix(capacity + 1, 0.0);
      for (int64_t i = 0; i < capacity; ++i) {
        prefix[i + 1] = prefix[i] + values[i];
      }
      CHECK_EQ(total, prefix[capacity]);
      int64_t last_positive = capacity - 1;
      while (values[last_positive] == 0.0) --last_positive;
      std::vector<double> masses;
      for (double m = 0.0; m <= total + 1.0; m += 0.5) masses.push_back(m);
      for (int i = 0; i < 200; ++i) {
        masses.push_back(dopamine_per::DrawUniform(rng) * total);
      }
      for (const double mass : masses) {
        const int64_t leaf = DescendOne(t, mass);
        CHECK(leaf >= 0 && leaf < capacity);
        if (leaf < 0 || leaf >= capacity) continue;
        CHECK(values[leaf] > 0.0);
        if (mass < total) {
          CHECK(prefix[leaf] <= mass && mass < prefix[leaf + 1]);
        } else {
          CHECK_EQ(leaf, last_positive);
        }
      }
      // DescendFrom with the rows: a consistent tree stays inside them.
      std::vector<double> remaining{0.0, total / 2, total};
      std::vector<int64_t> out(3);
      CHECK(dopamine_per::DescendFrom(t.tree(), t.rows.data(),
                                      remaining.data(), 3, out.data()));
    }
  }
  // Mass in a level's padding (no row below it): the checked descent stops.
  TestTree t(5, 4);  // Leaves 8 (2 rows), top 4 (1 row).
  t.Write(std::vector<int64_t>{0}, {1.0});
  t.flat[t.offsets[1] + 2] = 5.0;  // A parent of a third row of leaves.
  double remaining = 3.0;
  int64_t out = -1;
  CHECK(!dopamine_per::DescendFrom(t.tree(), t.rows.data(), &remaining, 1,
                                   &out));
}

void TestUniformsFromWords() {
  const uint32_t words[] = {0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu, 1u << 5, 1u << 6,
                            0x80000000u, 0};
  double out[4];
  dopamine_per::UniformsFromWords(words, 4, out);
  CHECK_EQ(out[0], 0.0);
  CHECK_EQ(out[1], 1.0 - std::ldexp(1.0, -53));
  CHECK_EQ(out[2], (67108864.0 + 1.0) * std::ldexp(1.0, -53));
  CHECK_EQ(out[3], 0.5);
}

// ------------------------------------------------ validity and returns

NOINLINE std::vector<uint8_t> Valid(const std::vector<int64_t>& slots,
                                    int64_t capacity, int64_t add_count,
                                    int64_t horizon, int64_t stack,
                                    const std::vector<uint8_t>& episode_end,
                                    const std::vector<uint8_t>& terminal,
                                    int64_t terminal_item = 1) {
  std::vector<uint8_t> valid(slots.size(), 2);
  dopamine_per::ValidMask(slots.data(), static_cast<int64_t>(slots.size()),
                          capacity, add_count, horizon, stack,
                          episode_end.data(), terminal.data(), terminal_item,
                          valid.data());
  return valid;
}

void TestValidMask() {
  const int64_t capacity = 10;
  std::vector<uint8_t> ends(capacity, 0), terminal(capacity, 0);
  const std::vector<int64_t> all{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  // Not full: add_count 8, stack 2, horizon 3: slots [1, 5).
  CHECK(Valid(all, capacity, 8, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}));
  // An episode ends at 2 without a terminal: 2 (its trajectory crosses
  // it), 1 (the same) and 3 (its stack does) are invalid.
  ends[2] = 1;
  CHECK(Valid(all, capacity, 8, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}));
  // With a terminal there, the returns are cut: 1 and 2 are valid again.
  terminal[2] = 1;
  CHECK(Valid(all, capacity, 8, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0}));
  // A terminal before the episode's end cuts the trajectory first.
  std::fill(ends.begin(), ends.end(), 0);
  std::fill(terminal.begin(), terminal.end(), 0);
  terminal[1] = 1;
  ends[3] = 1;  // 1's trajectory (1, 2, 3) is cut at 1.
  CHECK(Valid({1, 2}, capacity, 8, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{1, 0}));
  // Full (add_count 17, cursor 7): invalid are the slots i with
  // (i - (7 - 3)) % 10 < 3 + 2, 4 to 8; the stacks and trajectories of
  // the others wrap around.
  std::fill(ends.begin(), ends.end(), 0);
  std::fill(terminal.begin(), terminal.end(), 0);
  CHECK(Valid(all, capacity, 17, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0}));
  // An episode ends (terminal) at 9: 0's stack (9, 0) crosses it.
  ends[9] = 1;
  terminal[9] = 1;
  CHECK(Valid(all, capacity, 17, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0}));
  // Without the terminal, 9's trajectory (9, 0, 1) crosses its end too.
  terminal[9] = 0;
  CHECK(Valid(all, capacity, 17, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0}));
  // An end at 0 without a terminal: 9's trajectory (9, 0, 1) crosses it,
  // 1's stack (0, 1) too.
  std::fill(ends.begin(), ends.end(), 0);
  ends[0] = 1;
  CHECK(Valid({9, 1}, capacity, 17, 3, 2, ends, terminal) ==
        (std::vector<uint8_t>{0, 0}));
  // Wider terminals (int32): any nonzero byte is a terminal.
  std::fill(ends.begin(), ends.end(), 0);
  std::vector<uint8_t> wide(4 * capacity, 0);
  ends[2] = 1;
  wide[4 * 2 + 1] = 1;  // 256 at slot 2
  CHECK(Valid({1, 2}, capacity, 8, 3, 2, ends, wide, 4) ==
        (std::vector<uint8_t>{1, 1}));
  // int32 indices.
  const std::vector<int32_t> slots32{-1, 1, 5};
  std::vector<uint8_t> valid(3, 2);
  std::fill(ends.begin(), ends.end(), 0);
  dopamine_per::ValidMask(slots32.data(), 3, capacity, 8, 3, 2, ends.data(),
                          terminal.data(), 1, valid.data());
  CHECK(valid == (std::vector<uint8_t>{0, 1, 0}));
}

struct Returns {
  std::vector<int64_t> next;
  std::vector<uint8_t> is_terminal;
  std::vector<float> returns;
};

NOINLINE Returns Trajectories(const std::vector<int64_t>& slots,
                              int64_t capacity,
                              const std::vector<uint8_t>& terminal,
                              const std::vector<float>& rewards,
                              const std::vector<float>& discounts) {
  const int64_t count = static_cast<int64_t>(slots.size());
  Returns r{std::vector<int64_t>(count, -1), std::vector<uint8_t>(count, 2),
            std::vector<float>(count, -1.0f)};
  dopamine_per::Trajectories(slots.data(), count, capacity, terminal.data(), 1,
                             rewards.data(), discounts.data(),
                             static_cast<int64_t>(discounts.size()),
                             r.next.data(), r.is_terminal.data(),
                             r.returns.data());
  return r;
}

void TestTrajectories() {
  const int64_t capacity = 8;
  std::vector<float> rewards(capacity);
  for (int64_t i = 0; i < capacity; ++i) rewards[i] = static_cast<float>(i + 1);
  std::vector<uint8_t> terminal(capacity, 0);
  const std::vector<float> discounts{1.0f, 0.5f, 0.25f};
  // 2: 3 + 4/2 + 5/4; 7 wraps: 8 + 1/2 + 2/4; -1 and 9 wrap as NumPy's %.
  Returns r = Trajectories({2, 7, -1, 9}, capacity, terminal, rewards,
                           discounts);
  CHECK(r.returns == (std::vector<float>{6.25f, 9.0f, 9.0f, 2.0f + 1.5f +
                                         1.0f}));
  CHECK(r.next == (std::vector<int64_t>{5, 2, 2, 4}));
  CHECK(r.is_terminal == (std::vector<uint8_t>{0, 0, 0, 0}));
  // A terminal at 3 cuts 2's and 3's returns, counting its own reward.
  terminal[3] = 1;
  r = Trajectories({2, 3, 4}, capacity, terminal, rewards, discounts);
  CHECK(r.returns == (std::vector<float>{3.0f + 2.0f, 4.0f, 9.75f}));
  CHECK(r.next == (std::vector<int64_t>{4, 4, 7}));
  CHECK(r.is_terminal == (std::vector<uint8_t>{1, 1, 0}));
  // Summed in float32, left to right: 1e8 + 1 is 1e8 in float32.
  std::fill(terminal.begin(), terminal.end(), 0);
  rewards[0] = 1e8f;
  rewards[1] = 1.0f;
  rewards[2] = -1e8f;
  r = Trajectories({0}, capacity, terminal, rewards, {1.0f, 1.0f, 1.0f});
  CHECK_EQ(r.returns[0], 0.0f);
  // A horizon longer than the memory wraps more than once.
  const std::vector<float> small_rewards{1.0f, 2.0f};
  const std::vector<uint8_t> no_terminal(2, 0);
  r = Trajectories({1}, 2, no_terminal, small_rewards,
                   {1.0f, 1.0f, 1.0f, 1.0f, 1.0f});
  CHECK_EQ(r.returns[0], 2.0f + 1.0f + 2.0f + 1.0f + 2.0f);
  CHECK_EQ(r.next[0], 0);
}

// --------------------------------------------------------------- sampling

std::vector<int64_t> Seq(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// A memory's arrays, bound to a Memory as a Python memory binds its own.
struct TestMemory {
  TestMemory(int64_t capacity_, int64_t stack_, int64_t horizon_,
             int64_t add_count_, bool prioritized, int64_t fanout = 4,
             int64_t attempts = 1000, uint64_t seed = 3)
      : capacity(capacity_), stack(stack_), horizon(horizon_),
        max_attempts(attempts), add_count(add_count_),
        episode_end(capacity_, 0), terminal(capacity_, 0),
        tree(capacity_, fanout), discounts(horizon_, 1.0f) {
    PerLayout l{};
    l.size = sizeof(PerLayout);
    l.version = dopamine_per::kLayoutVersion;
    l.capacity = capacity;
    l.stack = stack;
    l.horizon = horizon;
    l.max_sample_attempts = max_attempts;
    l.add_count = &add_count;
    l.episode_end = episode_end.data();
    l.terminal = terminal.data();
    l.terminal_item = 1;
    l.discounts = discounts.data();
    if (prioritized) {
      l.flat = tree.flat.data();
      l.offsets = tree.offsets.data();
      l.levels = tree.levels();
      l.fanout = tree.fanout;
      l.tree_scalars = scalars;
      l.smallest = 1e-30;
      l.largest = 1e30;
    }
    l.seed = seed;
    m.Bind(l);
  }

  void SetPriorities(const std::vector<int64_t>& at,
                     const std::vector<double>& values) {
    double written_max = 0.0;
    scalars[0] = tree.Write(at, values, &written_max);
    scalars[1] = std::max(scalars[1], written_max);
  }

  std::vector<uint8_t> ValidOf(const std::vector<int64_t>& slots) {
    return Valid(slots, capacity, add_count, horizon, stack, episode_end,
                 terminal);
  }

  int64_t capacity, stack, horizon, max_attempts, add_count;
  std::vector<uint8_t> episode_end, terminal;
  TestTree tree;
  std::vector<float> discounts;
  double scalars[2] = {0.0, 0.0};
  Memory m;
};

void TestUniformDraws() {
  // Not full: add_count 10, stack 1, horizon 1: [0, 9).
  TestMemory a(20, 1, 1, 10, false);
  std::vector<int64_t> out(9000);
  CHECK_EQ(DrawOf(a.m, 9000, true, out.data()), std::string());
  std::vector<int64_t> counts(20, 0);
  for (const int64_t slot : out) {
    CHECK(slot >= 0 && slot < 9);
    if (slot >= 0 && slot < 20) ++counts[slot];
  }
  for (int64_t slot = 0; slot < 9; ++slot) {
    CHECK(counts[slot] > 800 && counts[slot] < 1200);
  }
  // Full: add_count 45 (cursor 5), stack 4, horizon 3: the slots
  // [5 - 20 + 4 - 1, 5 - 3) mod 20 = 8, ..., 19, 0, 1, as Dopamine draws
  // them: every valid slot (9, ..., 19, 0, 1) and 8 (its stack holds the
  // cursor; SampleIndices redraws it).
  TestMemory b(20, 4, 3, 45, false);
  std::fill(counts.begin(), counts.end(), 0);
  CHECK_EQ(DrawOf(b.m, 9000, false, out.data()), std::string());
  for (const int64_t slot : out) {
    CHECK(slot >= 0 && slot < 20);
    if (slot >= 0 && slot < 20) ++counts[slot];
  }
  const std::vector<uint8_t> valid = b.ValidOf(Seq(20));
  for (int64_t slot = 0; slot < 20; ++slot) {
    CHECK_EQ(counts[slot] > 0, slot >= 8 || slot < 2);
    CHECK_EQ(valid[slot] == 1, slot >= 9 || slot < 2);
  }
  // The same seed, the same draws.
  TestMemory c(20, 4, 3, 45, false);
  std::vector<int64_t> again(9000);
  DrawOf(c.m, 9000, false, again.data());
  CHECK(again == out);
}

void TestPrioritizedDraws() {
  // Leaves 1 0 1 0 1 0 1 0: stratum i of 4 is mass [i, i + 1), leaf 2i.
  TestMemory a(8, 1, 1, 8, true);
  a.SetPriorities(Seq(8), {1, 0, 1, 0, 1, 0, 1, 0});
  int64_t out[4];
  for (int round = 0; round < 100; ++round) {
    CHECK_EQ(DrawOf(a.m, 4, true, out), std::string());
    for (int64_t i = 0; i < 4; ++i) CHECK_EQ(out[i], 2 * i);
  }
  // Random integer priorities: a stratified draw i's leaf meets stratum i,
  // an independent draw any leaf with mass; never a zero.
  std::mt19937_64 rng(5);
  TestMemory b(100, 1, 1, 100, true, 16);
  std::vector<double> values(100);
  for (double& value : values) value = static_cast<double>(rng() % 4);
  b.SetPriorities(Seq(100), values);
  std::vector<double> prefix{0.0};
  for (const double value : values) prefix.push_back(prefix.back() + value);
  const double total = prefix.back();
  CHECK_EQ(b.scalars[0], total);
  const int64_t count = 7;
  std::vector<int64_t> drawn(count);
  for (int round = 0; round < 200; ++round) {
    const bool strata = round % 2 == 0;
    CHECK_EQ(DrawOf(b.m, count, strata, drawn.data()),
             std::string());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t leaf = drawn[i];
      CHECK(leaf >= 0 && leaf < 100);
      if (leaf < 0 || leaf >= 100) continue;
      CHECK(values[leaf] > 0.0);
      if (strata) {
        const double low = total * i / count, high = total * (i + 1) / count;
        CHECK(prefix[leaf] <= high && prefix[leaf + 1] >= low);
      }
    }
  }
}

void TestSampleIndices() {
  // Too few transitions: stack 2 + horizon 2 need add_count > 3.
  TestMemory few(10, 2, 2, 3, false);
  int64_t out[4];
  CHECK_EQ(dopamine_per::CheckSampleable(few.m),
           std::string("Cannot sample a batch with fewer than stack size (2) "
                       "+ update_horizon (2) transitions."));
  CHECK_EQ(SampleOf(few.m, 4, out),
           dopamine_per::CheckSampleable(few.m));
  few.add_count = 4;
  CHECK_EQ(dopamine_per::CheckSampleable(few.m), std::string());
  // Uniform: an episode ends at 4 (no terminal): 3 and 4 are redrawn.
  TestMemory u(20, 1, 2, 10, false);
  u.episode_end[4] = 1;
  std::vector<int64_t> batch(64);
  for (int round = 0; round < 50; ++round) {
    CHECK_EQ(SampleOf(u.m, 64, batch.data()),
             std::string());
    const std::vector<uint8_t> valid = u.ValidOf(batch);
    CHECK(std::all_of(valid.begin(), valid.end(),
                      [](uint8_t v) { return v == 1; }));
  }
  // Prioritized, the last slot written (9, before the cursor) has mass but
  // is invalid: every draw of it is redrawn.
  TestMemory p(16, 1, 1, 10, true);
  p.SetPriorities(Seq(10), std::vector<double>(10, 1.0));
  for (int round = 0; round < 50; ++round) {
    CHECK_EQ(SampleOf(p.m, 64, batch.data()),
             std::string());
    for (const int64_t slot : batch) CHECK(slot >= 0 && slot < 9);
  }
  // Only invalid slots have mass: 4, 8, then 12 >= 10 failed draws.
  TestMemory none(16, 1, 1, 10, true, 4, 10);
  none.SetPriorities({9}, {1.0});
  CHECK_EQ(SampleOf(none.m, 4, out),
           std::string("Max sample attempts: Tried 10 times but only sampled "
                       "0 valid indices. Batch size is 4"));
  // Strata 0 and 1 find slot 0 (valid), 2 and 3 slot 9 (invalid): with
  // two attempts allowed, the two failures end it at once.
  TestMemory half(16, 1, 1, 10, true, 4, 2);
  half.SetPriorities({0, 9}, {1.0, 1.0});
  CHECK_EQ(SampleOf(half.m, 4, out),
           std::string("Max sample attempts: Tried 2 times but only sampled "
                       "2 valid indices. Batch size is 4"));
  // An empty tree.
  TestMemory empty(16, 1, 1, 10, true);
  CHECK_EQ(SampleOf(empty.m, 4, out),
           std::string("Cannot sample from an empty sum tree."));
  // A source of 4 draws only (a memory on Python's `random`): the first
  // draws, 0, 0, 9, 9, with no redraw, and kMoreDraws.
  struct FourDraws {
    int64_t left = 4;
    uint64_t Below(uint64_t) { return 0; }
    double Uniform() { return --left, 0.5; }
    bool Has(int64_t n) const { return left >= n; }
  } four;
  TestMemory more(16, 1, 1, 10, true, 4, 10);
  more.SetPriorities({0, 9}, {1.0, 1.0});
  CHECK_EQ(dopamine_per::SampleIndices(more.m, 4, four, out),
           std::string(dopamine_per::kMoreDraws));
  CHECK(std::vector<int64_t>(out, out + 4) ==
        (std::vector<int64_t>{0, 0, 9, 9}));
}

void TestRandomDraws() {
  std::mt19937_64 rng(1);
  const uint64_t big = (uint64_t{1} << 63) + 1;
  const uint64_t ranges[] = {1, 2, 3, 7, 1000, big,
                             std::numeric_limits<uint64_t>::max()};
  for (const uint64_t range : ranges) {
    bool inside = true;
    for (int i = 0; i < 2000; ++i) {
      inside &= dopamine_per::DrawBelow(rng, range) < range;
    }
    CHECK(inside);
  }
  // Unbiased: each of 3 values about a third of the time.
  int64_t counts[3] = {0, 0, 0};
  for (int i = 0; i < 30000; ++i) ++counts[dopamine_per::DrawBelow(rng, 3)];
  for (const int64_t count : counts) CHECK(count > 9000 && count < 11000);
  // Uniforms in [0, 1), about half below one half.
  int64_t below = 0;
  bool inside = true;
  for (int i = 0; i < 10000; ++i) {
    const double u = dopamine_per::DrawUniform(rng);
    inside &= u >= 0.0 && u < 1.0;
    below += u < 0.5;
  }
  CHECK(inside);
  CHECK(below > 4500 && below < 5500);
  // The top 53 bits of one 64-bit draw.
  std::mt19937_64 a(9), b(9);
  CHECK_EQ(dopamine_per::DrawUniform(a),
           static_cast<double>(b() >> 11) * std::ldexp(1.0, -53));
}

// ----------------------------------------------------------- frame stacks

// The states of the frames ending at each of `ends` (wrapping around
// capacity), one after the other: item k of pixel p of a state is frame
// k's pixel p.
// The stacks ending at `ends`, each frame before firsts[b] zeros (none
// if `firsts` is empty).
std::vector<uint8_t> ReferenceStacks(const std::vector<uint8_t>& frames,
                                     int64_t capacity, int64_t pixels,
                                     int64_t item, int64_t stack,
                                     const std::vector<int64_t>& ends,
                                     const std::vector<int64_t>& firsts = {}) {
  std::vector<uint8_t> states;
  for (size_t b = 0; b < ends.size(); ++b) {
    for (int64_t p = 0; p < pixels; ++p) {
      for (int64_t k = 0; k < stack; ++k) {
        const int64_t slot = ends[b] - stack + 1 + k;
        if (!firsts.empty() && slot < firsts[b]) {
          states.insert(states.end(), item, 0);
          continue;
        }
        const int64_t frame = (slot % capacity + capacity) % capacity;
        const auto first = frames.begin() + (frame * pixels + p) * item;
        states.insert(states.end(), first, first + item);
      }
    }
  }
  return states;
}

void TestFrameStacks() {
  struct Case {
    int64_t pixels, item, stack;
  };
  // Atari's 4 one-byte frames (SSE2 lines and a tail), the fixed sizes,
  // another size, a single frame.
  const Case cases[] = {{200, 1, 4}, {192, 1, 4}, {7, 1, 4}, {30, 2, 3},
                        {30, 4, 2}, {30, 8, 2}, {30, 1, 3}, {30, 3, 2},
                        {30, 5, 1}};
  std::mt19937_64 rng(13);
  for (const Case& c : cases) {
    const int64_t capacity = 6, state = c.pixels * c.item * c.stack;
    std::vector<uint8_t> frames(capacity * c.pixels * c.item);
    for (uint8_t& byte : frames) byte = static_cast<uint8_t>(rng());
    const std::vector<int64_t> ends{0, 3, 5, -1, 8};
    const int64_t rows = static_cast<int64_t>(ends.size());
    const std::vector<int64_t> next{1, 4, 0, 0, 2};
    auto reference = [&](const std::vector<int64_t>& at) {
      return ReferenceStacks(frames, capacity, c.pixels, c.item, c.stack, at);
    };
    // States and next states together; either alone.
    std::vector<uint8_t> states(rows * state, 0xAB), next_states(rows * state);
    dopamine_per::TransitionStates(frames.data(), capacity, c.pixels, c.item,
                                   c.stack, ends.data(), next.data(), rows,
                                   states.data(), next_states.data());
    CHECK(states == reference(ends));
    CHECK(next_states == reference(next));
    for (const bool first : {true, false}) {
      std::vector<uint8_t> only(rows * state, 0);
      dopamine_per::TransitionStates(
          frames.data(), capacity, c.pixels, c.item, c.stack, ends.data(),
          next.data(), rows, first ? only.data() : nullptr,
          first ? nullptr : only.data());
      CHECK(only == reference(first ? ends : next));
    }
  }
  // GatherRows copies whole rows.
  const std::vector<uint8_t> table{1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<int32_t> at{2, 0, 2};
  std::vector<uint8_t> rows(9, 0);
  dopamine_per::GatherRows(table.data(), 3, at.data(), 3, rows.data());
  CHECK(rows == (std::vector<uint8_t>{7, 8, 9, 1, 2, 3, 7, 8, 9}));
}

// One batch through FillBatch, part by part, against the pieces it is
// made of: the walked trajectories, the frame stacks, rows at the slots
// and at the next slots, priorities narrowed to float32.
void TestFillBatch() {
  const int64_t capacity = 8, pixels = 5, stack = 2, horizon = 3, count = 3;
  std::mt19937_64 rng(17);
  std::vector<uint8_t> frames(capacity * pixels);
  for (uint8_t& byte : frames) byte = static_cast<uint8_t>(rng());
  std::vector<uint8_t> terminal(capacity, 0);
  terminal[4] = 1;
  const std::vector<float> rewards{1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> discounts{1.0f, 0.5f, 0.25f};
  const std::vector<int16_t> actions{10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<double> priorities{0.5, 1.5, 2.5, 3.5, 1e-45, 5, 6, 7};
  const BatchSource source{frames.data(), capacity, pixels, 1, stack,
                           terminal.data(), 1, rewards.data(),
                           discounts.data(), horizon, {}};
  const std::vector<int64_t> slots{1, 3, 6};
  std::vector<uint8_t> states(count * pixels * stack),
      next_states(count * pixels * stack);
  std::vector<float> returns(count, -1.0f);
  std::vector<uint32_t> flags(count, 0xFFFFFFFFu);
  std::vector<int32_t> indices(count, -1);
  std::vector<int16_t> now(count, -1), next(count, -1);
  std::vector<float> narrowed(count, -1.0f);
  auto bytes = [](auto& v) { return reinterpret_cast<uint8_t*>(v.data()); };
  const std::vector<BatchOutput> outputs{
      {Fill::kState, states.data()},
      {Fill::kNextState, next_states.data()},
      {Fill::kReturn, bytes(returns)},
      {Fill::kTerminal, bytes(flags), 4},
      {Fill::kIndex, bytes(indices)},
      {Fill::kRow, bytes(now), 0,
       reinterpret_cast<const uint8_t*>(actions.data()), 2},
      {Fill::kRow, bytes(next), 0,
       reinterpret_cast<const uint8_t*>(actions.data()), 2, true},
      {Fill::kRow, bytes(narrowed), 0,
       reinterpret_cast<const uint8_t*>(priorities.data()), 8, false, true},
  };
  const Walked walked = Walk(source, slots.data(), count);
  // Slot 1: 2 + 0.5 * 3 + 0.25 * 4, next 4; slot 3 cut at the terminal 4:
  // 4 + 0.5 * 5, next 5; slot 6 across the wrap: 7 + 4 + 0.25, next 1.
  CHECK(walked.next == (std::vector<int64_t>{4, 5, 1}));
  CHECK(walked.cut == (std::vector<uint8_t>{0, 1, 0}));
  CHECK(walked.returns == (std::vector<float>{4.5f, 6.5f, 11.25f}));
  const int64_t n = static_cast<int64_t>(outputs.size());
  FillBatch(source, slots.data(), count, walked, outputs.data(), n,
            kScalarPart);
  CHECK(returns == walked.returns);
  CHECK(flags == (std::vector<uint32_t>{0, 1, 0}));
  CHECK(indices == (std::vector<int32_t>{1, 3, 6}));
  CHECK(now == std::vector<int16_t>(count, -1));  // Not this part's.
  FillBatch(source, slots.data(), count, walked, outputs.data(), n, kRowPart);
  CHECK(now == (std::vector<int16_t>{11, 13, 16}));
  CHECK(next == (std::vector<int16_t>{14, 15, 11}));
  CHECK(narrowed == (std::vector<float>{1.5f, 3.5f, 6.0f}));
  CHECK(states == std::vector<uint8_t>(count * pixels * stack, 0));
  FillBatch(source, slots.data(), count, walked, outputs.data(), n,
            kStatePart);
  CHECK(states == ReferenceStacks(frames, capacity, pixels, 1, stack, slots));
  CHECK(next_states ==
        ReferenceStacks(frames, capacity, pixels, 1, stack, walked.next));
}


// ------------------------------------------------------------------- LZ4

using Bytes = std::vector<uint8_t>;

// Lz4Decompress of `block` into `size` bytes, with both in buffers of
// exactly their size (AddressSanitizer sees any access beyond) and the
// output followed by guard bytes, which must stay as they are.
NOINLINE bool Lz4Decodes(const Bytes& block, int64_t size, Bytes* out) {
  constexpr int64_t kGuard = 64;
  const std::unique_ptr<uint8_t[]> src(new uint8_t[block.size()]);
  std::copy(block.begin(), block.end(), src.get());
  std::vector<uint8_t> dst(size + kGuard, 0xA5);
  const bool ok = dopamine_per::Lz4Decompress(
      src.get(), static_cast<int64_t>(block.size()), dst.data(), size);
  CHECK(std::all_of(dst.begin() + size, dst.end(),
                    [](uint8_t byte) { return byte == 0xA5; }));
  if (out != nullptr) out->assign(dst.begin(), dst.begin() + size);
  return ok;
}

NOINLINE Bytes Lz4Compressed(const Bytes& data, int level) {
  Bytes block(dopamine_per::Lz4CompressBound(data.size()));
  const int64_t size = dopamine_per::Lz4Compress(
      data.data(), data.size(), block.data(), block.size(), level);
  CHECK(size > 0);
  block.resize(std::max<int64_t>(size, 0));
  return block;
}

// Inputs of every kind: random, zeros, a short period, frame-like (a
// plain screen with moving rectangles, 4 frames of 84x84).
std::vector<Bytes> Lz4Inputs() {
  std::mt19937_64 rng(5);
  std::vector<Bytes> inputs;
  for (const int64_t size : {0, 1, 5, 12, 13, 14, 100, 28224, 300000}) {
    Bytes random(size), zeros(size, 0), period(size), frames(size, 60);
    for (int64_t i = 0; i < size; ++i) {
      random[i] = static_cast<uint8_t>(rng());
      period[i] = static_cast<uint8_t>(i % 7 == 3 ? rng() % 4 : i % 7);
      const int64_t frame = i / 7056, y = i % 7056 / 84, x = i % 84;
      if ((y + 2 * frame) % 40 < 6 && (x + 3 * frame) % 50 < 9) {
        frames[i] = static_cast<uint8_t>(150 + (x + y) % 3);
      }
    }
    inputs.insert(inputs.end(), {random, zeros, period, frames});
  }
  return inputs;
}

// Every level's blocks decode to their input, fit the bound (exactly: one
// byte less is refused) and shrink what repeats.
void TestLz4RoundTrips() {
  for (const Bytes& data : Lz4Inputs()) {
    for (const int level : {0, 1, 2, 3, 9, 12, 40}) {
      const Bytes block = Lz4Compressed(data, level);
      Bytes out;
      CHECK(Lz4Decodes(block, data.size(), &out));
      CHECK(out == data);
      CHECK(static_cast<int64_t>(block.size()) <=
            dopamine_per::Lz4CompressBound(data.size()));
      Bytes exact(block.size()), short_by_one(block.size() - 1);
      CHECK_EQ(dopamine_per::Lz4Compress(data.data(), data.size(),
                                         exact.data(), exact.size(), level),
               static_cast<int64_t>(block.size()));
      CHECK(exact == block);
      CHECK_EQ(dopamine_per::Lz4Compress(data.data(), data.size(),
                                         short_by_one.data(),
                                         short_by_one.size(), level),
               -1);
      if (data.size() >= 1000 && data[0] == 0 && data[1] == 0) {
        CHECK(block.size() < data.size() / 100);  // Zeros.
      }
    }
  }
  CHECK_EQ(dopamine_per::Lz4CompressBound(-1), -1);
  CHECK_EQ(dopamine_per::Lz4CompressBound(dopamine_per::kLz4MaxInputSize + 1),
           -1);
  CHECK(Lz4Compressed({}, 9) == Bytes{0});  // One token, no literals.
}

// A byte-by-byte decoder of valid blocks: the reference for the copies.
Bytes Lz4Reference(const Bytes& block) {
  Bytes out;
  size_t i = 0;
  auto length = [&](size_t nibble) {
    if (nibble == 15) {
      uint8_t byte;
      do {
        byte = block[i++];
        nibble += byte;
      } while (byte == 255);
    }
    return nibble;
  };
  for (;;) {
    const uint8_t token = block[i++];
    const size_t literals = length(token >> 4);
    out.insert(out.end(), block.begin() + i, block.begin() + i + literals);
    i += literals;
    if (i == block.size()) return out;
    const size_t offset = block[i] | block[i + 1] << 8;
    i += 2;
    const size_t match = length(token & 15) + 4;
    for (size_t k = 0; k < match; ++k) out.push_back(out[out.size() - offset]);
  }
}

// Writes a length's nibble into `token` (at `shift`) and its extension.
void Lz4PutLength(size_t value, int shift, Bytes* block, size_t token) {
  (*block)[token] |= static_cast<uint8_t>(std::min<size_t>(value, 15)
                                          << shift);
  if (value < 15) return;
  for (value -= 15; value >= 255; value -= 255) block->push_back(255);
  block->push_back(static_cast<uint8_t>(value));
}

// Random valid blocks of every offset from 1 to 40 and lengths 4 to 300,
// near the end of the output too: each decodes as byte-by-byte copies do
// (an overlapping match repeats its last `offset` bytes).
void TestLz4OverlappingMatches() {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 400; ++round) {
    Bytes block, written;
    const int sequences = 1 + static_cast<int>(rng() % 6);
    for (int s = 0; s <= sequences; ++s) {
      const size_t token = block.size();
      block.push_back(0);
      // The first writes 1 or more; the last 12 or more (the end rules:
      // the last match starts 12 bytes or more before the end).
      const size_t literals = (s == 0 ? 1 : s == sequences ? 12 : 0) +
                              rng() % 20;
      Lz4PutLength(literals, 4, &block, token);
      for (size_t k = 0; k < literals; ++k) {
        block.push_back(static_cast<uint8_t>('a' + rng() % 5));
        written.push_back(block.back());
      }
      if (s == sequences) break;
      const size_t offset = 1 + rng() % std::min<size_t>(40, written.size());
      const size_t match = 4 + rng() % (rng() % 2 ? 15 : 300);
      block.push_back(static_cast<uint8_t>(offset));
      block.push_back(static_cast<uint8_t>(offset >> 8));
      Lz4PutLength(match - 4, 0, &block, token);
      for (size_t k = 0; k < match; ++k) {
        written.push_back(written[written.size() - offset]);
      }
    }
    Bytes out;
    CHECK(Lz4Decodes(block, written.size(), &out));
    CHECK(out == written);
    CHECK(Lz4Reference(block) == written);
  }
  Bytes out;
  // "ab", then 10 bytes from 2 back; "vwxyz".
  CHECK(Lz4Decodes({0x26, 'a', 'b', 2, 0, 0x50, 'v', 'w', 'x', 'y', 'z'},
                   17, &out));
  CHECK(std::string(out.begin(), out.end()) == "ababababababvwxyz");
}

// Crafted blocks are refused, without reading or writing out of bounds
// (Lz4Decodes's buffers) and without looping forever.
void TestLz4Refusals() {
  // "abcd", 8 bytes from 4 back, "vwxyz".
  const Bytes valid{0x44, 'a', 'b', 'c', 'd', 4, 0, 0x50, 'v', 'w', 'x', 'y',
                    'z'};
  Bytes out;
  CHECK(Lz4Decodes(valid, 17, &out));
  CHECK(std::string(out.begin(), out.end()) == "abcdabcdabcdvwxyz");
  CHECK(Lz4Decodes({0}, 0, nullptr));  // The empty block.
  for (size_t cut = 0; cut < valid.size(); ++cut) {  // Truncated.
    CHECK(!Lz4Decodes(Bytes(valid.begin(), valid.begin() + cut), 17,
                      nullptr));
  }
  Bytes extended = valid;  // Trailing garbage.
  extended.push_back(0);
  CHECK(!Lz4Decodes(extended, 17, nullptr));
  CHECK(!Lz4Decodes(valid, 16, nullptr));  // Longer than asked.
  CHECK(!Lz4Decodes(valid, 18, nullptr));  // Shorter than asked.
  CHECK(!Lz4Decodes(valid, 0, nullptr));
  CHECK(!Lz4Decodes({}, 0, nullptr));
  Bytes offset_zero = valid;
  offset_zero[5] = 0;
  CHECK(!Lz4Decodes(offset_zero, 17, nullptr));
  Bytes before_start = valid;  // 5 back from 4 bytes written.
  before_start[5] = 5;
  CHECK(!Lz4Decodes(before_start, 17, nullptr));
  before_start[5] = 0;
  before_start[6] = 1;  // 256 back.
  CHECK(!Lz4Decodes(before_start, 17, nullptr));
  // The end rules: a match ending in the last 5 bytes, or starting in the
  // last 12; a block ending with a match (no last sequence).
  CHECK(!Lz4Decodes({0x48, 'a', 'b', 'c', 'd', 1, 0, 0x30, 'x', 'y', 'z'}, 19,
                    nullptr));
  CHECK(!Lz4Decodes({0x40, 'a', 'b', 'c', 'd', 1, 0, 0x50, 'v', 'w', 'x', 'y',
                     'z'},
                    13, nullptr));
  CHECK(!Lz4Decodes({0x40, 'a', 'b', 'c', 'd', 1, 0}, 8, nullptr));
  // Length extensions: past the input's end, past any output, and long
  // runs of 255 (their sum checked before it can overflow).
  CHECK(!Lz4Decodes({0xF0, 255, 255}, 1000, nullptr));
  CHECK(!Lz4Decodes({0x1F, 'a', 1, 0, 255, 255}, 1000, nullptr));
  Bytes huge{0xF0};
  huge.insert(huge.end(), 100000, 255);
  huge.push_back(0);
  CHECK(!Lz4Decodes(huge, 300, nullptr));
  Bytes huge_match{0x1F, 'a', 1, 0};
  huge_match.insert(huge_match.end(), 100000, 255);
  huge_match.insert(huge_match.end(), {0, 0x50, 'v', 'w', 'x', 'y', 'z'});
  CHECK(!Lz4Decodes(huge_match, 3000, nullptr));
  // Every single-byte change of a real block: refused or decoded, each
  // within bounds (the sanitized build checks).
  const Bytes data = Lz4Inputs()[31];  // Frame-like, 28224 bytes.
  const Bytes block = Lz4Compressed(data, 9);
  std::mt19937_64 rng(3);
  for (int round = 0; round < 3000; ++round) {
    Bytes changed = block;
    changed[rng() % changed.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    Lz4Decodes(changed, data.size(), nullptr);
  }
}

// A prefix decode writes the block's first `needed` bytes or more, as the
// whole decode does, and stops there: a block cut after them still gives
// them (the rest is not read), and is refused when all of it is asked.
void TestLz4Prefixes() {
  const Bytes data = Lz4Inputs()[31];  // Frame-like, 4 frames of 7056.
  const int64_t size = static_cast<int64_t>(data.size());
  for (const int level : {1, 9}) {
    const Bytes block = Lz4Compressed(data, level);
    for (const int64_t needed : {int64_t{0}, int64_t{1}, int64_t{7056},
                                 int64_t{14112}, int64_t{21168}, size}) {
      Bytes out(size, 0xA5);
      CHECK(dopamine_per::Lz4DecompressPrefix(
          block.data(), block.size(), out.data(), size, needed));
      CHECK(std::equal(data.begin(), data.begin() + needed, out.begin()));
    }
    // The first frame's sequences end before the block does: the shortest
    // cut that gives the frame is shorter than the block.
    Bytes out(size, 0xA5);
    size_t shortest = 1;
    while (shortest < block.size() &&
           !dopamine_per::Lz4DecompressPrefix(block.data(), shortest,
                                              out.data(), size, 7056)) {
      ++shortest;
    }
    CHECK(shortest < block.size() / 2);
    CHECK(std::equal(data.begin(), data.begin() + 7056, out.begin()));
    const Bytes cut(block.begin(), block.begin() + shortest);
    CHECK(!dopamine_per::Lz4DecompressPrefix(cut.data(), cut.size(),
                                             out.data(), size, size));
    CHECK(!dopamine_per::Lz4DecompressPrefix(block.data(), block.size(),
                                             out.data(), size, size + 1));
    CHECK(!dopamine_per::Lz4DecompressPrefix(block.data(), block.size(),
                                             out.data(), size, -1));
  }
}

// Frame stacks read through compressed blocks (FrameReader) equal those of
// the raw frames: stored blocks (a short last one included), the open
// block, a block never stored (zeros), stacks wrapping around; a block
// that does not decode is refused.
void TestCompressedFrameStacks() {
  const int64_t capacity = 10, pixels = 30, per = 4, blocks = 3;
  const int64_t frame_bytes = pixels;
  std::mt19937_64 rng(17);
  std::vector<uint8_t> raw(capacity * frame_bytes);
  for (uint8_t& byte : raw) byte = static_cast<uint8_t>(rng() % 3);
  // Block 0 stored, block 1 open, block 2 never stored (its frames zeros).
  std::fill(raw.begin() + 2 * per * frame_bytes, raw.end(), 0);
  const Bytes stored = Lz4Compressed(
      Bytes(raw.begin(), raw.begin() + per * frame_bytes), 9);
  std::vector<uint64_t> addresses(blocks, 0);
  std::vector<int64_t> sizes(blocks, 0);
  addresses[0] = reinterpret_cast<uintptr_t>(stored.data());
  sizes[0] = static_cast<int64_t>(stored.size());
  const int64_t open_block = 1;
  dopamine_per::FrameStore store;
  store.capacity = capacity;
  store.frame_bytes = frame_bytes;
  store.block_frames = per;
  store.addresses = addresses.data();
  store.sizes = sizes.data();
  store.open_block = &open_block;
  store.open_frames = raw.data() + per * frame_bytes;
  const std::vector<int64_t> ends{3, 5, 9, 1, -2}, next{4, 8, 0, 2, 3};
  const int64_t rows = static_cast<int64_t>(ends.size()), stack = 4;
  std::vector<int64_t> read;
  for (const auto* at : {&ends, &next}) {
    for (const int64_t end : *at) {
      for (int64_t k = 0; k < stack; ++k) read.push_back(end - k);
    }
  }
  dopamine_per::FrameReader reader(store);
  CHECK(reader.Decode(read.data(), static_cast<int64_t>(read.size())));
  std::vector<uint8_t> states(rows * pixels * stack, 0xAB);
  std::vector<uint8_t> next_states(states.size(), 0xAB);
  dopamine_per::StackBounds bounds;
  bounds.ends = ends.data();
  bounds.next_ends = next.data();
  dopamine_per::TransitionStates(reader, pixels, 1, stack, bounds, rows,
                                 states.data(), next_states.data());
  CHECK(states == ReferenceStacks(raw, capacity, pixels, 1, stack, ends));
  CHECK(next_states == ReferenceStacks(raw, capacity, pixels, 1, stack, next));
  // FillStates decodes a transition at a time: the same stacks, and the
  // states alone when the next states are not asked.
  dopamine_per::BatchSource source{};
  source.capacity = capacity;
  source.pixels = pixels;
  source.item = 1;
  source.stack = stack;
  source.blocks = store;
  std::vector<uint8_t> filled(states.size(), 0xAB), next_filled = filled;
  CHECK(dopamine_per::FillStates(source, ends.data(), next.data(), rows,
                                 filled.data(), next_filled.data()));
  CHECK(filled == states);
  CHECK(next_filled == next_states);
  std::vector<uint8_t> alone(states.size(), 0xAB);
  CHECK(dopamine_per::FillStates(source, ends.data(), nullptr, rows,
                                 alone.data(), nullptr));
  CHECK(alone == states);
  // Frames before a stack's first are zeros (their slots not decoded):
  // firsts past the ends of some stacks, at them, or before them.
  std::vector<int64_t> firsts, next_firsts;
  for (int64_t b = 0; b < rows; ++b) {
    firsts.push_back(ends[b] - b % (stack + 2) + 1);
    next_firsts.push_back(next[b] - (b + 1) % (stack + 2) + 1);
  }
  bounds.firsts = firsts.data();
  bounds.next_firsts = next_firsts.data();
  std::vector<uint8_t> cut(states.size(), 0xAB), next_cut = cut;
  CHECK(dopamine_per::FillStates(source, bounds, rows, cut.data(),
                                 next_cut.data()));
  CHECK(cut == ReferenceStacks(raw, capacity, pixels, 1, stack, ends, firsts));
  CHECK(next_cut ==
        ReferenceStacks(raw, capacity, pixels, 1, stack, next, next_firsts));
  bounds.firsts = bounds.next_firsts = nullptr;
  // Decoded later (deferred_states.h), from copies of the blocks: by
  // Finish alone (no background thread) or with a second thread claiming
  // rows too; the outputs' owner is let go once every row is filled.
  auto deferred = [&](std::vector<uint8_t>* late,
                      std::vector<uint8_t>* next_late,
                      std::shared_ptr<void> owner) {
    return std::make_shared<dopamine_per::DeferredStates>(
        dopamine_per::CopyBlocks(store, stack, ends.data(), next.data(), rows),
        ends, next, pixels, 1, stack, late->data(), next_late->data(),
        std::move(owner));
  };
  for (const bool two_threads : {false, true}) {
    std::vector<uint8_t> late(states.size(), 0xAB), next_late = late;
    auto owner = std::make_shared<int>(0);
    const std::weak_ptr<int> watch = owner;
    const auto job = deferred(&late, &next_late, std::move(owner));
    CHECK(!watch.expired());
    std::thread helper;
    if (two_threads) helper = std::thread([job] { job->Work(); });
    CHECK(job->Finish());
    if (helper.joinable()) helper.join();
    CHECK(late == states);
    CHECK(next_late == next_states);
    CHECK(watch.expired());
    CHECK(job->Succeeded());
  }
  // Tickets: a batch submitted is taken once, then known but gone; none
  // is 0 or past the last.
  dopamine_per::DeferredDecoder& decoder = dopamine_per::DeferredDecoder::Get();
  std::vector<uint8_t> late(states.size(), 0xAB), next_late = late;
  const int64_t ticket =
      decoder.Submit(deferred(&late, &next_late, nullptr));
  std::shared_ptr<dopamine_per::DeferredStates> taken;
  CHECK(ticket >= 1);
  CHECK(decoder.Take(ticket, &taken));
  CHECK(taken != nullptr && taken->Finish());
  CHECK(late == states);
  CHECK(decoder.Take(ticket, &taken));
  CHECK(taken == nullptr);
  CHECK(!decoder.Take(0, &taken));
  CHECK(!decoder.Take(ticket + 1, &taken));
  // A stored block one byte short does not decode, now or later.
  sizes[0] -= 1;
  dopamine_per::FrameReader corrupt(store);
  CHECK(!corrupt.Decode(read.data(), static_cast<int64_t>(read.size())));
  CHECK(!deferred(&late, &next_late, nullptr)->Finish());
}

}  // namespace

// The block compressor: every job comes back once, compressed to what
// decodes to its bytes (or empty where nothing is saved), whichever thread
// ran it; literal blocks decode to their bytes; Stop leaves the jobs not
// run for Abandon.
void TestBlockCompressor() {
  std::vector<Bytes> inputs;
  for (int k = 0; k < 64; ++k) {
    Bytes data(4096 + 37 * k);
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<uint8_t>(k % 3 == 0 ? (i * 7919) >> 3 : i / 64);
    }
    inputs.push_back(data);
  }
  for (const Bytes& data : inputs) {
    Bytes literals(dopamine_per::Lz4LiteralsSize(data.size())), out;
    dopamine_per::Lz4WriteLiterals(data.data(), data.size(), literals.data());
    CHECK(Lz4Decodes(literals, data.size(), &out));
    CHECK(out == data);
  }
  std::vector<int> seen(inputs.size(), 0);
  {
    dopamine_per::BlockCompressor compressor(6);
    for (size_t k = 0; k < inputs.size(); ++k) {
      compressor.Submit({static_cast<int64_t>(k), inputs[k].data(),
                         static_cast<int64_t>(inputs[k].size()), &inputs[k]});
      if (k % 3 == 0) compressor.RunOne();  // Races the thread for a job.
    }
    compressor.WaitIdle();
    CHECK_EQ(compressor.Queued(), 0);
    for (const auto& done : compressor.TakeFinished()) {
      const Bytes& data = inputs[done.job.tag];
      CHECK(done.job.owner == &data);
      ++seen[done.job.tag];
      Bytes out;
      CHECK(done.block.empty() ||
            (Lz4Decodes(done.block, data.size(), &out) && out == data));
      CHECK(done.block.empty() ||
            static_cast<int64_t>(done.block.size()) <
                dopamine_per::Lz4LiteralsSize(data.size()));
    }
    CHECK(compressor.TakeFinished().empty());
    CHECK(compressor.Abandon().empty());
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  dopamine_per::BlockCompressor stopped(6);
  stopped.Stop();
  stopped.Submit({9, inputs[0].data(), 10, nullptr});  // No thread now.
  CHECK_EQ(stopped.Queued(), 1);
  const auto left = stopped.Abandon();
  CHECK_EQ(left.size(), size_t{1});
  CHECK_EQ(left.empty() ? -1 : left[0].tag, 9);
}

// The helper thread: both halves run, to their end, their results
// combined; callers from several threads at once (the busy ones doing
// both halves themselves) each get their own halves' work done.
void TestHelperThread() {
  dopamine_per::HelperThread& helper = dopamine_per::HelperThread::Get();
  CHECK(&helper == &dopamine_per::HelperThread::Get());
  int theirs = 0, mine = 0;
  CHECK(helper.RunBeside(
      [&] {
        theirs = 1;
        return true;
      },
      [&] {
        mine = 2;
        return true;
      }));
  CHECK_EQ(theirs + mine, 3);
  CHECK(!helper.RunBeside([] { return false; }, [] { return true; }));
  CHECK(!helper.RunBeside([] { return true; }, [] { return false; }));
  std::vector<std::vector<int64_t>> sums(4, std::vector<int64_t>(200, 0));
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < 200; ++i) {
        int64_t a = 0, b = 0;
        helper.RunBeside(
            [&] {
              for (int k = 0; k < 500; ++k) a += k;
              return true;
            },
            [&] {
              for (int k = 0; k < 300; ++k) b += k;
              return true;
            });
        sums[c][i] = a + b;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (const auto& row : sums) {
    CHECK(std::all_of(row.begin(), row.end(),
                      [](int64_t sum) { return sum == 124750 + 44850; }));
  }
}

int main() {
  TestHalvingAndLevelSums();
  TestWritesUpdateAncestors();
  TestLeavesValid();
  TestDescentBoundaries();
  TestDescentFindsTheLeaf();
  TestUniformsFromWords();
  TestValidMask();
  TestTrajectories();
  TestUniformDraws();
  TestPrioritizedDraws();
  TestSampleIndices();
  TestRandomDraws();
  TestFrameStacks();
  TestFillBatch();
  TestCompressedFrameStacks();
  TestLz4RoundTrips();
  TestLz4OverlappingMatches();
  TestLz4Refusals();
  TestLz4Prefixes();
  TestBlockCompressor();
  TestHelperThread();
  if (failures > 0) {
    std::printf("%d of %d checks failed\n", failures, checks);
    return 1;
  }
  std::printf("%d checks passed\n", checks);
  return 0;
}
