// Frame blocks compressed off the adding thread. A memory whose frames are
// LZ4 blocks (frame_blocks.CompressedFrames with `background`) stores each
// full block at once as an LZ4 block of literals only (a copy, readable by
// every decoder), and queues its frames here; a thread of its own
// compresses them, and the memory swaps the compressed block in when it
// next stores one. When the queue grows past what the thread keeps up
// with, the adding thread compresses the oldest queued block itself
// (RunOne), so a memory on one free core is never slower than compressing
// in place, and one with a core to spare adds at the speed of its own
// bookkeeping.
//
// The thread never takes Python's lock: a job's bytes are kept alive by
// its `owner` (a reference the caller holds until the job is taken back
// from TakeFinished or Abandon).

#ifndef DOPAMINE_PER_NATIVE_BLOCK_COMPRESSOR_H_
#define DOPAMINE_PER_NATIVE_BLOCK_COMPRESSOR_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "lz4_block.h"

namespace dopamine_per {

// The bytes of the LZ4 block that holds `size` bytes as literals only.
inline int64_t Lz4LiteralsSize(int64_t size) {
  return 1 + lz4_internal::ExtensionBytes(size) + size;
}

// Writes that block for the `size` bytes at `src` into `dst`
// (Lz4LiteralsSize(size) bytes); it decodes to them in one copy.
inline void Lz4WriteLiterals(const uint8_t* src, int64_t size, uint8_t* dst) {
  lz4_internal::SequenceWriter out(dst, dst + Lz4LiteralsSize(size));
  out.Write(src, size, 0, 0);
}

class BlockCompressor {
 public:
  // A block to compress: the `size` bytes at `src`, alive while `owner` is
  // held; `tag` says which block it is.
  struct Job {
    int64_t tag;
    const uint8_t* src;
    int64_t size;
    void* owner;
  };

  // A job done: its LZ4 block, empty if compressing saved nothing.
  struct Finished {
    Job job;
    std::vector<uint8_t> block;
  };

  explicit BlockCompressor(int level) : level_(level) {}

  BlockCompressor(const BlockCompressor&) = delete;
  BlockCompressor& operator=(const BlockCompressor&) = delete;

  ~BlockCompressor() { Stop(); }

  // Stops the thread after the job it is running; the others stay queued
  // for Abandon.
  void Stop() {
    {
      std::lock_guard<std::mutex> hold(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Queues `job`, starting the thread at the first (if no thread can
  // start, the jobs wait for RunOne and WaitIdle).
  void Submit(const Job& job) {
    {
      std::lock_guard<std::mutex> hold(mutex_);
      queue_.push_back(job);
      if (!thread_.joinable() && !stop_ && !no_thread_) {
        try {
          thread_ = std::thread([this] { Work(); });
        } catch (const std::system_error&) {
          no_thread_ = true;
        }
      }
    }
    wake_.notify_one();
  }

  // Compresses the oldest queued job on the calling thread: false if none
  // was queued.
  bool RunOne() {
    Job job;
    {
      std::lock_guard<std::mutex> hold(mutex_);
      if (queue_.empty()) return false;
      job = queue_.front();
      queue_.pop_front();
      ++running_;
    }
    Run(job);
    return true;
  }

  // The jobs queued and not yet started.
  int64_t Queued() {
    std::lock_guard<std::mutex> hold(mutex_);
    return static_cast<int64_t>(queue_.size());
  }

  // The jobs done since the last call, oldest first.
  std::vector<Finished> TakeFinished() {
    std::lock_guard<std::mutex> hold(mutex_);
    return std::exchange(finished_, {});
  }

  // Runs the queued jobs here, beside the thread, then waits for the one
  // it runs: until no job is queued or running.
  void WaitIdle() {
    while (RunOne()) {
    }
    std::unique_lock<std::mutex> hold(mutex_);
    idle_.wait(hold, [this] { return queue_.empty() && running_ == 0; });
  }

  // After Stop: every job not run or not taken back, for their owners'
  // release.
  std::vector<Job> Abandon() {
    std::lock_guard<std::mutex> hold(mutex_);
    std::vector<Job> left(queue_.begin(), queue_.end());
    queue_.clear();
    for (const Finished& done : finished_) left.push_back(done.job);
    finished_.clear();
    return left;
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> hold(mutex_);
    while (true) {
      wake_.wait(hold, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const Job job = queue_.front();
      queue_.pop_front();
      ++running_;
      hold.unlock();
      Run(job);
      hold.lock();
    }
  }

  // Compresses `job` (counted in running_) and files it as finished.
  void Run(const Job& job) {
    std::vector<uint8_t> block(Lz4CompressBound(job.size));
    const int64_t size = Lz4Compress(job.src, job.size, block.data(),
                                     static_cast<int64_t>(block.size()),
                                     level_);
    if (size < 0 || size >= Lz4LiteralsSize(job.size)) {
      block.clear();
    } else {
      block.resize(size);
      block.shrink_to_fit();
    }
    {
      std::lock_guard<std::mutex> hold(mutex_);
      finished_.push_back({job, std::move(block)});
      --running_;
    }
    idle_.notify_all();
  }

  const int level_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Job> queue_;
  std::vector<Finished> finished_;
  int64_t running_ = 0;
  bool stop_ = false;
  bool no_thread_ = false;
  std::thread thread_;
};

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_BLOCK_COMPRESSOR_H_
