// A queue of ready replay batches, which a sharded memory's fetch-ahead
// thread fills (through the core library's C interface, replay_core.cc)
// and the learner's dequeue op empties (replay_ops.cc). A batch holds its
// elements' bytes, except the states of shards that shipped their frames
// compressed: those are the shipped blocks and the rows they fill, which
// the op decodes (batch.h's FillShippedStates) into its outputs. It also
// holds the priority updates the learner's priority op queues, which the
// memory takes with its next draw.

#ifndef DOPAMINE_PER_NATIVE_BATCH_QUEUE_H_
#define DOPAMINE_PER_NATIVE_BATCH_QUEUE_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "batch.h"

namespace dopamine_per {

// The frames one shard shipped (frame_shipping.ShippedFrames), owned:
// blocks numbers[j] of `capacity` / `block_frames` slots, sizes[j] LZ4
// bytes each, one after the other in `payload`; the open block raw.
struct ShippedBlocks {
  std::vector<uint8_t> payload;
  std::vector<int64_t> numbers, sizes;
  int64_t open_block = -1;
  std::vector<uint8_t> open_frames;
  int64_t capacity = 0, block_frames = 0;
};

// Rows of a batch whose states come from shipped blocks: row rows[i]'s
// state ends at slot ends[i], its next state at next_ends[i].
struct StatePart {
  std::shared_ptr<const ShippedBlocks> blocks;
  std::vector<int64_t> rows, ends, next_ends;
};

// A batch ready for the op, or an error to raise in its place.
struct ReadyBatch {
  // Each output's bytes; the states' are empty when `parts` fill them.
  std::vector<std::vector<uint8_t>> elements;
  std::vector<StatePart> parts;
  int error_code = 0;  // An absl::StatusCode; 0: a batch.
  std::string error;
};

// What Pop found.
enum class PopStatus { kBatch, kTimedOut, kClosed };

// A bounded FIFO of ready batches between one producer thread and the ops.
// A batch pushed for a generation that `Clear` ended is dropped: a batch
// sampled before a memory's load never reaches the learner.
class BatchQueue {
 public:
  explicit BatchQueue(int64_t capacity) : capacity_(capacity) {}

  // Queues `batch` (an error always fits) once there is room, waiting up
  // to `timeout_s`. 1: queued; 0: timed out (the batch is the caller's
  // again); -1: dropped (stale generation, or closed).
  int Push(std::unique_ptr<ReadyBatch>* batch, int64_t generation,
           double timeout_s) {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool fits = changed_.wait_for(
        lock, Seconds(timeout_s), [&] {
          return closed_ || generation != generation_ ||
                 (*batch)->error_code != 0 ||
                 static_cast<int64_t>(batches_.size()) < capacity_;
        });
    if (closed_ || generation != generation_) {
      batch->reset();
      return -1;
    }
    if (!fits) return 0;
    batches_.push_back(std::move(*batch));
    wanted_ = false;
    changed_.notify_all();
    return 1;
  }

  // The oldest batch, waiting up to `timeout_s` for one (and asking the
  // producer for one meanwhile: `WaitWanted`).
  std::unique_ptr<ReadyBatch> Pop(double timeout_s, PopStatus* status) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (batches_.empty() && !closed_) {
      wanted_ = true;
      changed_.notify_all();
      changed_.wait_for(lock, Seconds(timeout_s),
                        [&] { return closed_ || !batches_.empty(); });
    }
    if (closed_) {
      *status = PopStatus::kClosed;
      return nullptr;
    }
    if (batches_.empty()) {
      *status = PopStatus::kTimedOut;
      return nullptr;
    }
    std::unique_ptr<ReadyBatch> batch = std::move(batches_.front());
    batches_.pop_front();
    changed_.notify_all();
    *status = PopStatus::kBatch;
    return batch;
  }

  // Waits up to `timeout_s` until an op waits on the empty queue (or the
  // queue closes); whether one does.
  bool WaitWanted(double timeout_s) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, Seconds(timeout_s),
                      [&] { return closed_ || wanted_; });
    return wanted_ && !closed_;
  }

  // Drops the queued batches and ends their generation; the new one.
  int64_t Clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    batches_.clear();
    changed_.notify_all();
    return ++generation_;
  }

  // Drops the queued batches; every waiting and later call returns.
  void Close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    batches_.clear();
    changed_.notify_all();
  }

  int64_t Size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(batches_.size());
  }

  int64_t Generation() {
    std::lock_guard<std::mutex> lock(mutex_);
    return generation_;
  }

  // Appends checked priority updates (global slots); false once closed.
  bool AddPriorities(const std::vector<int64_t>& indices,
                     const std::vector<double>& priorities) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (closed_) return false;
    }
    std::lock_guard<std::mutex> lock(priority_mutex_);
    update_indices_.insert(update_indices_.end(), indices.begin(),
                           indices.end());
    update_priorities_.insert(update_priorities_.end(), priorities.begin(),
                              priorities.end());
    return true;
  }

  // Moves the oldest `capacity` updates at most into `indices` and
  // `priorities`; how many.
  int64_t TakePriorities(int64_t* indices, double* priorities,
                         int64_t capacity) {
    std::lock_guard<std::mutex> lock(priority_mutex_);
    const int64_t count = std::min<int64_t>(
        capacity, static_cast<int64_t>(update_indices_.size()));
    std::copy(update_indices_.begin(), update_indices_.begin() + count,
              indices);
    std::copy(update_priorities_.begin(),
              update_priorities_.begin() + count, priorities);
    update_indices_.erase(update_indices_.begin(),
                          update_indices_.begin() + count);
    update_priorities_.erase(update_priorities_.begin(),
                             update_priorities_.begin() + count);
    return count;
  }

  int64_t PendingPriorities() {
    std::lock_guard<std::mutex> lock(priority_mutex_);
    return static_cast<int64_t>(update_indices_.size());
  }

 private:
  static std::chrono::duration<double> Seconds(double seconds) {
    // Clamped: a deadline past the clock's range would overflow.
    return std::chrono::duration<double>(
        seconds < 0 ? 0 : (seconds > 1e7 ? 1e7 : seconds));
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<ReadyBatch>> batches_;
  const int64_t capacity_;
  int64_t generation_ = 0;
  bool closed_ = false;
  bool wanted_ = false;
  // Priority updates the ops queued, under their own mutex.
  std::mutex priority_mutex_;
  std::vector<int64_t> update_indices_;
  std::vector<double> update_priorities_;
};

// Where `blocks`' frames (of `frame_bytes`) are, as FillShippedStates
// reads them: `*addresses`, which it fills, must outlive the store.
inline FrameStore ShippedStore(const ShippedBlocks& blocks,
                               int64_t frame_bytes,
                               std::vector<uint64_t>* addresses) {
  addresses->resize(blocks.numbers.size());
  const uint8_t* next = blocks.payload.data();
  for (size_t j = 0; j < addresses->size(); ++j) {
    (*addresses)[j] =
        blocks.sizes[j] == 0 ? 0 : reinterpret_cast<uintptr_t>(next);
    next += blocks.sizes[j];
  }
  FrameStore store;
  store.capacity = blocks.capacity;
  store.frame_bytes = frame_bytes;
  store.block_frames = blocks.block_frames;
  store.addresses = addresses->data();
  store.sizes = blocks.sizes.data();
  store.open_block = &blocks.open_block;
  store.open_frames = blocks.open_frames.data();
  store.numbers = blocks.numbers.data();
  store.listed = static_cast<int64_t>(blocks.numbers.size());
  return store;
}

// FillShippedStates of `part`'s rows into `states` and `next_states`, from
// its blocks, frames of `frame_bytes` (items of `item` bytes).
inline bool DecodePart(const StatePart& part, int64_t frame_bytes,
                       int64_t item, int64_t stack, uint8_t* states,
                       uint8_t* next_states) {
  std::vector<uint64_t> addresses;
  const FrameStore store = ShippedStore(*part.blocks, frame_bytes, &addresses);
  return FillShippedStates(store, frame_bytes / item, item, stack,
                           part.ends.data(), part.next_ends.data(),
                           static_cast<int64_t>(part.rows.size()), states,
                           next_states);
}

// Fills the states of every part of `batch` into `states` and
// `next_states` (`rows` rows of `row_bytes`: `stack` frames each, of items
// of `item` bytes, frames last), in place where a part's rows are
// consecutive. Every row must be exactly one part's. "" if filled, else
// what is wrong; *decoded false if a block is missing or does not decode.
inline std::string FillQueuedStates(const ReadyBatch& batch, int64_t rows,
                                    int64_t row_bytes, int64_t stack,
                                    int64_t item, uint8_t* states,
                                    uint8_t* next_states, bool* decoded) {
  const int64_t frame_bytes = row_bytes / stack;
  if (frame_bytes <= 0 || frame_bytes * stack != row_bytes) {
    return "unusable state outputs";
  }
  std::vector<uint8_t> covered(rows, 0);
  for (const StatePart& part : batch.parts) {
    const ShippedBlocks& blocks = *part.blocks;
    if (blocks.open_block >= 0 &&
        static_cast<int64_t>(blocks.open_frames.size()) !=
            blocks.block_frames * frame_bytes) {
      return "shipped open frames do not fit the state outputs";
    }
    const int64_t count = static_cast<int64_t>(part.rows.size());
    bool consecutive = true;
    for (int64_t i = 0; i < count; ++i) {
      if (part.rows[i] >= rows || covered[part.rows[i]]) {
        return "a queued batch fills row " + std::to_string(part.rows[i]) +
               " twice or past " + std::to_string(rows);
      }
      covered[part.rows[i]] = 1;
      consecutive = consecutive && part.rows[i] == part.rows[0] + i;
    }
    if (count == 0) continue;
    std::vector<uint8_t> scratch;
    uint8_t* to = states + part.rows[0] * row_bytes;
    uint8_t* next_to = next_states + part.rows[0] * row_bytes;
    if (!consecutive) {
      scratch.resize(2 * count * row_bytes);
      to = scratch.data();
      next_to = to + count * row_bytes;
    }
    if (!DecodePart(part, frame_bytes, item, stack, to, next_to)) {
      *decoded = false;
      return "a shipped frame block does not decode or is missing";
    }
    for (int64_t i = 0; !consecutive && i < count; ++i) {
      std::memcpy(states + part.rows[i] * row_bytes, to + i * row_bytes,
                  row_bytes);
      std::memcpy(next_states + part.rows[i] * row_bytes,
                  next_to + i * row_bytes, row_bytes);
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    if (!covered[row]) {
      return "a queued batch lacks the states of row " + std::to_string(row);
    }
  }
  return "";
}

// The queue registered as `id` with `token` (replay_core.cc), or nullptr:
// *foreign as FindMemory's.
std::shared_ptr<BatchQueue> FindQueue(int64_t id, uint64_t token,
                                      bool* foreign);

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_BATCH_QUEUE_H_
