// A second thread for a batch's states: the caller hands it one half of
// the rows and fills the other, so that decoding a batch's compressed
// frames takes two cores where there are two (the JAX memory's
// fill_stacks). One per process, started at first use, and again in a
// forked child (whose copy of it has no thread). A caller that finds it
// busy (another batch in flight) does both halves itself.

#ifndef DOPAMINE_PER_NATIVE_HELPER_THREAD_H_
#define DOPAMINE_PER_NATIVE_HELPER_THREAD_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

#include <unistd.h>

namespace dopamine_per {

class HelperThread {
 public:
  // The process's helper (never destroyed: a thread waiting for work when
  // the process exits is no harm).
  static HelperThread& Get() {
    static std::mutex made;
    static HelperThread* helper = nullptr;
    static pid_t owner = 0;
    std::lock_guard<std::mutex> hold(made);
    if (helper == nullptr || owner != getpid()) {
      helper = new HelperThread();  // A child leaves its parent's behind.
      owner = getpid();
    }
    return *helper;
  }

  // Runs `theirs` on the helper and `mine` here, both to their end; or
  // both here if the helper is busy. True if both returned true.
  bool RunBeside(const std::function<bool()>& theirs,
                 const std::function<bool()>& mine) {
    bool busy;
    {
      std::lock_guard<std::mutex> hold(mutex_);
      busy = task_ != nullptr || !started_;
      if (!busy) {
        task_ = &theirs;
        done_ = false;
      }
    }
    if (busy) {
      const bool first = theirs();
      return mine() && first;
    }
    wake_.notify_one();
    const bool ours = mine();
    std::unique_lock<std::mutex> hold(mutex_);
    finished_.wait(hold, [this] { return done_; });
    task_ = nullptr;
    return ours && result_;
  }

 private:
  // If no thread can start, every caller does both halves itself.
  HelperThread() {
    try {
      std::thread([this] { Work(); }).detach();
      started_ = true;
    } catch (const std::system_error&) {
      started_ = false;
    }
  }

  void Work() {
    std::unique_lock<std::mutex> hold(mutex_);
    while (true) {
      wake_.wait(hold, [this] { return task_ != nullptr && !done_; });
      const std::function<bool()>* task = task_;
      hold.unlock();
      const bool result = (*task)();
      hold.lock();
      result_ = result;
      done_ = true;
      finished_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  // The task handed over (null: free), whether it is done, and its result.
  const std::function<bool()>* task_ = nullptr;
  bool done_ = false;
  bool result_ = false;
  bool started_ = false;
};

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_HELPER_THREAD_H_
