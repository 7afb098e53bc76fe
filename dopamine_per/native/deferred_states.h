// States decoded after their batch is staged. With staging, the sample op
// of a memory with compressed frames (DopaminePerSampleTransitions with
// defer_states, replay_ops.cc) copies the LZ4 blocks its batch reads,
// under the memory's lock, and leaves them to be decoded into its state
// outputs later: by a background thread of the lowest priority, which runs
// when a core would otherwise be idle (the training's serial stretches,
// the agent's steps between runs), and, for whatever rows that thread has
// not reached, by the op that hands the staged states to the networks
// (DopaminePerAwaitStates) at the next run. The states are those an
// immediate decode gives (the blocks are copied as they were sampled), and
// a starved thread delays a batch by at most the batch's own decode.

#ifndef DOPAMINE_PER_NATIVE_DEFERRED_STATES_H_
#define DOPAMINE_PER_NATIVE_DEFERRED_STATES_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "batch_queue.h"

namespace dopamine_per {

// Copies the compressed blocks (and the open block's raw frames) that the
// `count` states ending at ends[b] and at next_ends[b] read from `store`
// (a memory's frames, not raw, not shipped), `stack` frames each. Call
// under the memory's lock.
inline std::shared_ptr<ShippedBlocks> CopyBlocks(const FrameStore& store,
                                                 int64_t stack,
                                                 const int64_t* ends,
                                                 const int64_t* next_ends,
                                                 int64_t count) {
  auto copy = std::make_shared<ShippedBlocks>();
  const int64_t per = store.block_frames;
  std::vector<int64_t> numbers;
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t k = 0; k < stack; ++k) {
      numbers.push_back(Mod(ends[b] - k, store.capacity) / per);
      numbers.push_back(Mod(next_ends[b] - k, store.capacity) / per);
    }
  }
  std::sort(numbers.begin(), numbers.end());
  numbers.erase(std::unique(numbers.begin(), numbers.end()), numbers.end());
  copy->capacity = store.capacity;
  copy->block_frames = per;
  for (const int64_t k : numbers) {
    if (k == *store.open_block) {
      copy->open_block = k;
      copy->open_frames.assign(store.open_frames,
                               store.open_frames + per * store.frame_bytes);
      continue;
    }
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(
        static_cast<uintptr_t>(store.addresses[k]));
    const int64_t size = bytes == nullptr ? 0 : store.sizes[k];
    copy->numbers.push_back(k);
    copy->sizes.push_back(size);  // 0: never stored, zeros.
    copy->payload.insert(copy->payload.end(), bytes, bytes + size);
  }
  return copy;
}

// One staged batch's states, decoded a row at a time by whoever claims the
// row first (the background thread or the await op).
class DeferredStates {
 public:
  // `blocks` holds what rows b < ends.size() read: the state ending at
  // ends[b] into row b of `states`, the next state ending at next_ends[b]
  // into row b of `next_states` (either null: not filled), frames of
  // `pixels` items of `item` bytes, `stack` each. `outputs` owns the two
  // outputs' memory; it is let go once every row is filled.
  DeferredStates(std::shared_ptr<const ShippedBlocks> blocks,
                 std::vector<int64_t> ends, std::vector<int64_t> next_ends,
                 int64_t pixels, int64_t item, int64_t stack,
                 uint8_t* states, uint8_t* next_states,
                 std::shared_ptr<void> outputs)
      : blocks_(std::move(blocks)),
        ends_(std::move(ends)),
        next_ends_(std::move(next_ends)),
        pixels_(pixels),
        item_(item),
        stack_(stack),
        states_(states),
        next_states_(next_states),
        outputs_(std::move(outputs)) {
    store_ = ShippedStore(*blocks_, pixels_ * item_, &addresses_);
  }

  // Fills rows no one has claimed until none is left.
  void Work() {
    const int64_t rows = static_cast<int64_t>(ends_.size());
    for (int64_t row = next_row_++; row < rows; row = next_row_++) {
      const int64_t state_bytes = pixels_ * item_ * stack_;
      const bool ok = FillShippedStates(
          store_, pixels_, item_, stack_, ends_.data() + row,
          next_ends_.data() + row, 1,
          states_ ? states_ + row * state_bytes : nullptr,
          next_states_ ? next_states_ + row * state_bytes : nullptr);
      std::lock_guard<std::mutex> lock(mutex_);
      failed_ = failed_ || !ok;
      if (++done_ == rows) {
        outputs_.reset();
        blocks_.reset();
        finished_.notify_all();
      }
    }
  }

  // Work(), then waits for the rows others claimed: true if every row
  // decoded.
  bool Finish() {
    Work();
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [this] {
      return done_ == static_cast<int64_t>(ends_.size());
    });
    return !failed_;
  }

  // Whether every row is filled and decoded.
  bool Succeeded() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ == static_cast<int64_t>(ends_.size()) && !failed_;
  }

 private:
  std::shared_ptr<const ShippedBlocks> blocks_;  // Let go once filled.
  const std::vector<int64_t> ends_, next_ends_;
  const int64_t pixels_, item_, stack_;
  uint8_t* const states_;
  uint8_t* const next_states_;
  std::vector<uint64_t> addresses_;
  FrameStore store_;
  std::atomic<int64_t> next_row_{0};
  std::mutex mutex_;
  std::condition_variable finished_;
  int64_t done_ = 0;
  bool failed_ = false;
  std::shared_ptr<void> outputs_;
};

// The process's staged batches by ticket (1, 2, ...), and the background
// thread that decodes them, started with the first. Never destroyed: the
// thread may outlive static destruction.
class DeferredDecoder {
 public:
  static DeferredDecoder& Get() {
    static DeferredDecoder* const decoder = new DeferredDecoder();
    return *decoder;
  }

  // Registers `job` for the background thread; its ticket.
  int64_t Submit(std::shared_ptr<DeferredStates> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t ticket = next_ticket_++;
    jobs_.emplace(ticket, job);
    // The batches no run awaited (a session closed with one staged) are
    // forgotten once filled; their outputs are already let go.
    for (auto it = jobs_.begin();
         jobs_.size() > kKept && it != jobs_.end();) {
      it = it->second->Succeeded() ? jobs_.erase(it) : std::next(it);
    }
    queue_.push_back(std::move(job));
    if (worker_process_ != ProcessId()) {  // None yet, or not after a fork.
      worker_process_ = ProcessId();
      std::thread(&DeferredDecoder::Run, this).detach();
    }
    wake_.notify_one();
    return ticket;
  }

  // Takes ticket `ticket`'s batch: nullptr if it was filled and
  // forgotten. False if no batch ever had that ticket.
  bool Take(int64_t ticket, std::shared_ptr<DeferredStates>* job) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ticket < 1 || ticket >= next_ticket_) return false;
    const auto it = jobs_.find(ticket);
    job->reset();
    if (it != jobs_.end()) {
      *job = it->second;
      jobs_.erase(it);
    }
    return true;
  }

 private:
  // Batches kept beyond which filled ones are forgotten.
  static constexpr size_t kKept = 64;

  DeferredDecoder() = default;

  // This process's id (a forked child has the parent's decoder, not its
  // thread); 1 where it is not asked.
  static int64_t ProcessId() {
#if defined(__linux__)
    return static_cast<int64_t>(getpid());
#else
    return 1;
#endif
  }

  void Run() {
#if defined(__linux__)
    // This thread only: SCHED_IDLE, run only on a core nothing else wants,
    // and preempted at once by any other thread that wakes there (a nice
    // value alone leaves it the core for a while).
    sched_param param{};
    param.sched_priority = 0;
    if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &param) != 0) {
      setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
    }
#endif
    for (;;) {
      std::shared_ptr<DeferredStates> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job->Work();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<DeferredStates>> queue_;
  std::map<int64_t, std::shared_ptr<DeferredStates>> jobs_;
  int64_t next_ticket_ = 1;
  int64_t worker_process_ = 0;  // Where the thread was started (0: not).
};

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_DEFERRED_STATES_H_
