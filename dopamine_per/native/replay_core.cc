// The TensorFlow-free core library: the registry of memories and batch
// queues shared with the TensorFlow ops, as a C interface for Python's
// ctypes (core.py, batch_queue.py).

#include <cerrno>
#include <cstdlib>
#include <map>
#include <sstream>

#include "replay_core.h"

namespace dopamine_per {
namespace {

std::mutex registry_mutex;

// A registered memory or batch queue: its token, and the object (null once
// destroyed; the entry stays, so that an op can tell a deleted one from
// another process's).
template <typename T>
struct Entry {
  uint64_t token;
  std::shared_ptr<T> object;
};

template <typename T>
std::map<int64_t, Entry<T>>& Registry() {
  static auto* registry = new std::map<int64_t, Entry<T>>();
  return *registry;
}
int64_t next_id = 1;

// Registers `object` under `token`; its id (never reused, across kinds).
template <typename T>
int64_t Register(std::shared_ptr<T> object, uint64_t token) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  const int64_t id = next_id++;
  Registry<T>()[id] = Entry<T>{token, std::move(object)};
  return id;
}

template <typename T>
std::shared_ptr<T> Find(int64_t id, uint64_t token, bool* foreign) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  auto found = Registry<T>().find(id);
  *foreign = found == Registry<T>().end() || found->second.token != token;
  return *foreign ? nullptr : found->second.object;
}

template <typename T>
void Unregister(int64_t id) {
  std::lock_guard<std::mutex> guard(registry_mutex);
  auto found = Registry<T>().find(id);
  if (found != Registry<T>().end()) found->second.object.reset();
}

template <typename T>
int64_t Count() {
  std::lock_guard<std::mutex> guard(registry_mutex);
  int64_t count = 0;
  for (const auto& entry : Registry<T>()) {
    count += entry.second.object != nullptr;
  }
  return count;
}

}  // namespace

std::shared_ptr<Memory> FindMemory(int64_t id, uint64_t token,
                                   bool* foreign) {
  return Find<Memory>(id, token, foreign);
}

std::shared_ptr<BatchQueue> FindQueue(int64_t id, uint64_t token,
                                      bool* foreign) {
  return Find<BatchQueue>(id, token, foreign);
}

}  // namespace dopamine_per

using dopamine_per::BatchQueue;
using dopamine_per::Memory;
using dopamine_per::ReadyBatch;

extern "C" {

// ------------------------------------------------------------ memories

// Registers an unbound memory under `token` (unguessable, chosen by the
// caller; the ops carry it beside the id); returns its id (never reused)
// and, in *handle, a reference to it, which keeps the memory alive until
// `per_memory_release`, also after `per_memory_destroy`.
int64_t per_memory_create(void** handle, uint64_t token) {
  auto memory = std::make_shared<Memory>();
  *handle = new std::shared_ptr<Memory>(memory);
  return dopamine_per::Register(memory, token);
}

static Memory* MemoryOf(void* handle) {
  return static_cast<std::shared_ptr<Memory>*>(handle)->get();
}

// Installs a layout; the caller holds both of the memory's locks. Returns
// 0, or -1 (nothing installed) for a layout of another size or version.
int per_memory_bind(void* handle, const dopamine_per::PerLayout* layout) {
  if (layout->size != static_cast<int64_t>(sizeof(dopamine_per::PerLayout)) ||
      layout->version != dopamine_per::kLayoutVersion) {
    return -1;
  }
  MemoryOf(handle)->Bind(*layout);
  return 0;
}

// Unbinds and unregisters a memory: ops that find it fail cleanly from
// now on. Takes the storage lock and the tree lock unless the caller
// holds them (`take_storage`, `take_tree` 0); `handle` stays valid.
void per_memory_destroy(int64_t id, void* handle, int take_storage,
                        int take_tree) {
  Memory* memory = MemoryOf(handle);
  std::unique_lock<std::timed_mutex> storage(memory->mutex, std::defer_lock);
  std::unique_lock<std::timed_mutex> tree(memory->tree_mutex,
                                          std::defer_lock);
  if (take_storage) storage.lock();
  if (take_tree) tree.lock();
  memory->bound = false;
  dopamine_per::Unregister<Memory>(id);
}

// Drops `handle`'s reference: it is invalid afterwards.
void per_memory_release(void* handle) {
  delete static_cast<std::shared_ptr<Memory>*>(handle);
}

// The sampling ops' generator state as text (std::mt19937_64's stream
// format: its 312 words, then its position), for checkpoints. Writes it,
// with a terminating NUL, into `out` if `capacity` holds it; returns its
// length. The caller holds the storage lock (the ops draw under it).
int64_t per_memory_sampler_state(void* handle, char* out, int64_t capacity) {
  std::ostringstream text;
  text << MemoryOf(handle)->rng;
  const std::string state = text.str();
  const int64_t length = static_cast<int64_t>(state.size());
  if (out != nullptr && length < capacity) {
    std::memcpy(out, state.c_str(), length + 1);
  }
  return length;
}

// Makes `text` (per_memory_sampler_state's) the generator state, unless
// `check_only`. Returns 0, or -1 (nothing changed) for anything but 312
// words and a position in [0, 312], each a plain decimal number, separated
// by single spaces. The caller holds the storage lock.
int per_memory_set_sampler_state(void* handle, const char* text,
                                 int check_only) {
  constexpr int kWords = std::mt19937_64::state_size;
  const char* at = text;
  for (int i = 0; i <= kWords; ++i) {
    if (i > 0 && *at++ != ' ') return -1;
    if (*at < '0' || *at > '9') return -1;
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(at, &end, 10);
    if (errno != 0 || end - at > 20) return -1;
    if (i == kWords && value > static_cast<unsigned long long>(kWords)) {
      return -1;
    }
    at = end;
  }
  if (*at != '\0') return -1;
  std::istringstream in(text);
  std::mt19937_64 rng;
  in >> rng;
  if (in.fail()) return -1;
  if (!check_only) MemoryOf(handle)->rng = rng;
  return 0;
}

// The number of registered memories (for tests of their lifetime).
int64_t per_memory_count() { return dopamine_per::Count<Memory>(); }

// ---------------------------------------------------------- batch queues

// Registers a batch queue of `capacity` batches under `token` (as
// per_memory_create); *handle keeps it alive until per_queue_release.
int64_t per_queue_create(void** handle, uint64_t token, int64_t capacity) {
  auto queue = std::make_shared<BatchQueue>(capacity);
  *handle = new std::shared_ptr<BatchQueue>(queue);
  return dopamine_per::Register(queue, token);
}

static BatchQueue* QueueOf(void* handle) {
  return static_cast<std::shared_ptr<BatchQueue>*>(handle)->get();
}

// Closes and unregisters a queue: ops that find it fail cleanly.
void per_queue_destroy(int64_t id, void* handle) {
  QueueOf(handle)->Close();
  dopamine_per::Unregister<BatchQueue>(id);
}

void per_queue_release(void* handle) {
  delete static_cast<std::shared_ptr<BatchQueue>*>(handle);
}

int64_t per_queue_count() { return dopamine_per::Count<BatchQueue>(); }

// BatchQueue's Push (taking `batch`, unless it returns 0), Clear, Close,
// Size, Generation, PendingPriorities, TakePriorities and WaitWanted.
int per_queue_push(void* handle, void* batch, int64_t generation,
                   double timeout_s) {
  std::unique_ptr<ReadyBatch> owned(static_cast<ReadyBatch*>(batch));
  const int pushed = QueueOf(handle)->Push(&owned, generation, timeout_s);
  if (pushed == 0) owned.release();  // Still the caller's.
  return pushed;
}

int64_t per_queue_clear(void* handle) { return QueueOf(handle)->Clear(); }

void per_queue_close(void* handle) { QueueOf(handle)->Close(); }

int64_t per_queue_size(void* handle) { return QueueOf(handle)->Size(); }

int64_t per_queue_generation(void* handle) {
  return QueueOf(handle)->Generation();
}

int64_t per_queue_pending_priorities(void* handle) {
  return QueueOf(handle)->PendingPriorities();
}

int64_t per_queue_take_priorities(void* handle, int64_t* indices,
                                  double* priorities, int64_t capacity) {
  return QueueOf(handle)->TakePriorities(indices, priorities, capacity);
}

int per_queue_wait_wanted(void* handle, double timeout_s) {
  return QueueOf(handle)->WaitWanted(timeout_s) ? 1 : 0;
}

// A new batch of `count` elements (none filled), or, with `error_code`
// nonzero (an absl::StatusCode), the error `message` to raise in its place.
void* per_batch_create(int64_t count, int error_code, const char* message) {
  auto* batch = new ReadyBatch();
  batch->elements.resize(count);
  batch->error_code = error_code;
  if (error_code != 0) batch->error = message;
  return batch;
}

void per_batch_release(void* batch) {
  delete static_cast<ReadyBatch*>(batch);
}

// Copies `bytes` bytes at `data` as element `index`; -1 if out of range.
int per_batch_set_element(void* batch, int64_t index, const void* data,
                          int64_t bytes) {
  auto* ready = static_cast<ReadyBatch*>(batch);
  if (index < 0 || index >= static_cast<int64_t>(ready->elements.size())) {
    return -1;
  }
  const auto* from = static_cast<const uint8_t*>(data);
  ready->elements[index].assign(from, from + bytes);
  return 0;
}

// Copies a shard's shipped blocks (ShippedFrames' arrays; `count` blocks);
// a handle for per_batch_add_part, or nullptr if they do not fit together
// (numbers not increasing in the memory's blocks, sizes not summing to the
// payload, the open block out of range).
void* per_blocks_create(const void* payload, int64_t payload_bytes,
                        const int64_t* numbers, const int64_t* sizes,
                        int64_t count, int64_t open_block,
                        const void* open_frames, int64_t open_bytes,
                        int64_t capacity, int64_t block_frames) {
  if (capacity < 1 || block_frames < 1) return nullptr;
  const int64_t blocks = (capacity + block_frames - 1) / block_frames;
  int64_t total = 0;
  for (int64_t j = 0; j < count; ++j) {
    if (numbers[j] < 0 || numbers[j] >= blocks || sizes[j] < 0 ||
        (j > 0 && numbers[j] <= numbers[j - 1])) {
      return nullptr;
    }
    total += sizes[j];
  }
  if (total != payload_bytes || open_block < -1 || open_block >= blocks) {
    return nullptr;
  }
  auto shipped = std::make_shared<dopamine_per::ShippedBlocks>();
  const auto* bytes = static_cast<const uint8_t*>(payload);
  shipped->payload.assign(bytes, bytes + payload_bytes);
  shipped->numbers.assign(numbers, numbers + count);
  shipped->sizes.assign(sizes, sizes + count);
  shipped->open_block = open_block;
  const auto* open = static_cast<const uint8_t*>(open_frames);
  shipped->open_frames.assign(open, open + open_bytes);
  shipped->capacity = capacity;
  shipped->block_frames = block_frames;
  return new std::shared_ptr<const dopamine_per::ShippedBlocks>(shipped);
}

void per_blocks_release(void* blocks) {
  delete static_cast<std::shared_ptr<const dopamine_per::ShippedBlocks>*>(
      blocks);
}

// Adds `count` rows whose states `blocks` fill: row rows[i] (in [0,
// batch_size)) ends at slots ends[i] and next_ends[i] (in the blocks'
// capacity). 0, or -1 (nothing added) if a value is out of range.
int per_batch_add_part(void* batch, void* blocks, const int64_t* rows,
                       const int64_t* ends, const int64_t* next_ends,
                       int64_t count, int64_t batch_size) {
  const auto& shipped =
      *static_cast<std::shared_ptr<const dopamine_per::ShippedBlocks>*>(
          blocks);
  for (int64_t i = 0; i < count; ++i) {
    if (rows[i] < 0 || rows[i] >= batch_size || ends[i] < 0 ||
        ends[i] >= shipped->capacity || next_ends[i] < 0 ||
        next_ends[i] >= shipped->capacity) {
      return -1;
    }
  }
  dopamine_per::StatePart part;
  part.blocks = shipped;
  part.rows.assign(rows, rows + count);
  part.ends.assign(ends, ends + count);
  part.next_ends.assign(next_ends, next_ends + count);
  static_cast<ReadyBatch*>(batch)->parts.push_back(std::move(part));
  return 0;
}

}  // extern "C"
