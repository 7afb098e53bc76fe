// The CPython extension module: the sum tree's loops for
// replay_memory/kernels/native_kernels.py, a registered memory's `Lock`
// and batches, the LZ4 block codec (lz4_block.h) and its compressing
// thread (block_compressor.h). Every buffer's type,
// length, layout and alignment is checked, and a tree's offsets against its
// flat array, before a loop reads or writes it.
//
// The tree's functions return NotImplemented for arguments they do not
// cover (another dtype, a strided array, a tree laid out otherwise, an
// empty batch, a descent leaving the tree's rows): the caller then runs
// NumPy's loop, the reference. Otherwise they return their result, or True
// when they filled the outputs passed in. The memory's functions raise for
// what does not fit. Loops over large batches run without the GIL, reading
// their inputs once or from a copy, so that another thread writing them
// cannot take an index out of bounds.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <unistd.h>

#include "replay_core.h"

namespace dopamine_per {
namespace {

// Batches from this size on run without the GIL (per kernel family).
constexpr int64_t kTreeBatchWithoutGil = 256;
constexpr int64_t kSlotBatchWithoutGil = 1024;
// Frame copies from this many bytes on run without the GIL.
constexpr int64_t kCopyBytesWithoutGil = 64 * 1024;
// LZ4 blocks from this many bytes (either side) are coded without the GIL:
// below, taking it back costs more than the work.
constexpr int64_t kCodecBytesWithoutGil = 4 * 1024;
// fill_stacks splits batches from this many rows between two threads
// (helper_thread.h).
constexpr int64_t kSplitRows = 8;
// The most bytes lz4_compress and lz4_decompress take or make (1 GiB).
constexpr int64_t kMaxCodecBytes = int64_t{1} << 30;
// The most levels a tree may have (a fanout of 2 over 2**62 leaves).
constexpr int64_t kMaxLevels = 64;
// The largest fanout of the C sums (their scratch arrays).
constexpr int64_t kMaxFanout = 1024;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr char kNativeOrder = '<';
constexpr bool kLittleEndian = true;
#else
constexpr char kNativeOrder = '>';
constexpr bool kLittleEndian = false;
#endif

// An item's kind, from its struct format: bool, signed or unsigned
// integer, float, complex; 0 for anything else (objects, records,
// the other byte order).
enum Kind : char {
  kOther = 0,
  kBool = '?',
  kSigned = 'i',
  kUnsigned = 'u',
  kFloat = 'f',
  kComplex = 'c',
};

Kind KindOf(const char* format) {
  if (format == nullptr) return kUnsigned;  // Plain bytes.
  if (*format == '@' || *format == '=' || *format == kNativeOrder) ++format;
  const bool single = format[0] != '\0' && format[1] == '\0';
  if (format[0] == 'Z') {
    return single || std::strchr("efdg", format[1]) == nullptr ||
                   format[2] != '\0'
               ? kOther
               : kComplex;
  }
  if (!single) return kOther;
  if (format[0] == '?') return kBool;
  if (std::strchr("bhilqn", format[0]) != nullptr) return kSigned;
  if (std::strchr("BHILQN", format[0]) != nullptr) return kUnsigned;
  if (std::strchr("efdg", format[0]) != nullptr) return kFloat;
  return kOther;
}

// A C-contiguous buffer of an argument, released when it goes out of scope.
class Array {
 public:
  Array() { view_.obj = nullptr; }
  ~Array() {
    if (view_.obj != nullptr) PyBuffer_Release(&view_);
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  // Takes `object`'s buffer: C-contiguous, of one simple item type,
  // `ndim` dimensions (any if < 0), aligned for its items, writable if
  // asked (read from the buffer: requesting it costs NumPy as much again).
  // False, with no exception set, if it has no such buffer.
  bool Take(PyObject* object, int ndim, bool writable = false) {
    if (PyObject_GetBuffer(object, &view_,
                           PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      view_.obj = nullptr;
      PyErr_Clear();
      return false;
    }
    kind_ = KindOf(view_.format);
    const uintptr_t alignment = view_.itemsize < 8 ? view_.itemsize : 8;
    return kind_ != kOther && view_.itemsize > 0 &&
           !(writable && view_.readonly) &&
           (ndim < 0 ? view_.ndim >= 1 : view_.ndim == ndim) &&
           (alignment == 0 ||
            reinterpret_cast<uintptr_t>(view_.buf) % alignment == 0);
  }

  // Takes any C-contiguous buffer of `object`, as bytes (read-only). False,
  // with no exception set, if it has none.
  bool TakeBytes(PyObject* object) {
    if (PyObject_GetBuffer(object, &view_, PyBUF_C_CONTIGUOUS) != 0) {
      view_.obj = nullptr;
      PyErr_Clear();
      return false;
    }
    kind_ = kUnsigned;
    return true;
  }

  // Whether the items are of `kind` and `itemsize` bytes.
  bool Is(Kind kind, Py_ssize_t itemsize) const {
    return kind_ == kind && view_.itemsize == itemsize;
  }
  bool IsInt64() const { return Is(kSigned, 8); }
  bool IsInt32() const { return Is(kSigned, 4); }
  bool IsDouble() const { return Is(kFloat, 8); }
  bool IsBool() const { return Is(kBool, 1); }

  // The length of the first axis, and of axis `axis`.
  int64_t length() const { return view_.shape[0]; }
  int64_t dim(int axis) const { return view_.shape[axis]; }
  int64_t bytes() const { return view_.len; }
  int64_t itemsize() const { return view_.itemsize; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(view_.buf);
  }

 private:
  Py_buffer view_;
  Kind kind_ = kOther;
};

// An int64 argument (a Python int or anything with __index__).
bool Int(PyObject* object, int64_t* out) {
  const long long value = PyLong_AsLongLong(object);
  if (value == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = value;
  return true;
}

// A float64 argument (a float, or anything with __float__ or __index__).
bool Double(PyObject* object, double* out) {
  const double value = PyFloat_AsDouble(object);
  if (value == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = value;
  return true;
}

bool CheckArguments(const char* name, Py_ssize_t given, Py_ssize_t wanted) {
  if (given == wanted) return true;
  PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name,
               wanted, given);
  return false;
}

// Releases the GIL for its lifetime if asked to.
class WithoutGil {
 public:
  explicit WithoutGil(bool release)
      : state_(release ? PyEval_SaveThread() : nullptr) {}
  ~WithoutGil() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

PyObject* NotCovered() { Py_RETURN_NOTIMPLEMENTED; }
PyObject* Done() { Py_RETURN_TRUE; }


// ------------------------------------------------------------------ locks

// Lock(handle, tree): a registered memory's storage `mutex` (or with `tree`
// its `tree_mutex`) as the Python memory's lock, RLock's API, taking a
// reference of its own to `handle`'s memory. The mutex is held while the
// lock is held at any depth. Waiting releases the GIL and, every
// kWaitSlice, runs the signal handlers: an exception from one leaves the
// mutex not taken. The owner and depth are accessed with the GIL held only.
struct LockObject {
  PyObject_HEAD
  std::shared_ptr<Memory>* memory;
  bool tree;
  unsigned long owner;
  int64_t depth;
};

constexpr std::chrono::milliseconds kWaitSlice(20);

// The Lock type, made when the module is.
PyTypeObject* lock_type = nullptr;

bool IsLock(PyObject* object) {
  return lock_type != nullptr && PyObject_TypeCheck(object, lock_type);
}

// Whether this thread holds `lock`.
bool HeldHere(const LockObject* lock) {
  return lock->depth > 0 && lock->owner == PyThread_get_thread_ident();
}

std::timed_mutex& MutexOf(LockObject* lock) {
  return lock->tree ? (*lock->memory)->tree_mutex : (*lock->memory)->mutex;
}

// Takes `lock`: 1 taken, 0 not (not blocking, or `timeout` seconds passed
// first, if it is not negative), -1 with an exception set (and not taken).
int AcquireLock(LockObject* lock, bool blocking, double timeout) {
  if (HeldHere(lock)) {
    ++lock->depth;
    return 1;
  }
  std::timed_mutex& mutex = MutexOf(lock);
  bool taken = mutex.try_lock();
  const auto start = std::chrono::steady_clock::now();
  while (!taken && blocking) {
    auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        kWaitSlice);
    if (timeout >= 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(timeout)) -
          (std::chrono::steady_clock::now() - start);
      if (left <= left.zero()) break;
      wait = std::min(wait, left);
    }
    Py_BEGIN_ALLOW_THREADS
    taken = mutex.try_lock_for(wait);
    Py_END_ALLOW_THREADS
    if (!taken && PyErr_CheckSignals() < 0) return -1;
  }
  if (!taken) return 0;
  lock->owner = PyThread_get_thread_ident();
  lock->depth = 1;
  return 1;
}

// Releases one level of `lock`; false, with RuntimeError set, if this
// thread does not hold it.
bool ReleaseLock(LockObject* lock) {
  if (!HeldHere(lock)) {
    PyErr_SetString(PyExc_RuntimeError, "cannot release un-acquired lock");
    return false;
  }
  if (--lock->depth == 0) {
    lock->owner = 0;
    MutexOf(lock).unlock();
  }
  return true;
}

PyObject* LockNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"handle", "tree", nullptr};
  PyObject* handle = nullptr;
  int tree = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!p",
                                   const_cast<char**>(keywords),
                                   &PyLong_Type, &handle, &tree)) {
    return nullptr;
  }
  void* address = PyLong_AsVoidPtr(handle);
  if (address == nullptr) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "Lock: handle must not be 0");
    }
    return nullptr;
  }
  LockObject* self = reinterpret_cast<LockObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->memory = new std::shared_ptr<Memory>(
      *static_cast<std::shared_ptr<Memory>*>(address));
  self->tree = tree != 0;
  self->owner = 0;
  self->depth = 0;
  return reinterpret_cast<PyObject*>(self);
}

void LockDealloc(PyObject* object) {
  LockObject* self = reinterpret_cast<LockObject*>(object);
  delete self->memory;
  PyTypeObject* type = Py_TYPE(object);
  type->tp_free(object);
  Py_DECREF(type);
}

PyObject* LockAcquire(PyObject* object, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"blocking", "timeout", nullptr};
  int blocking = 1;
  double timeout = -1.0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pd",
                                   const_cast<char**>(keywords), &blocking,
                                   &timeout)) {
    return nullptr;
  }
  if (!blocking && timeout != -1.0) {
    PyErr_SetString(PyExc_ValueError,
                    "can't specify a timeout for a non-blocking call");
    return nullptr;
  }
  if (timeout < 0 && timeout != -1.0) {
    PyErr_SetString(PyExc_ValueError,
                    "timeout value must be a non-negative number");
    return nullptr;
  }
  const int taken = AcquireLock(reinterpret_cast<LockObject*>(object),
                                blocking != 0, timeout);
  if (taken < 0) return nullptr;
  return PyBool_FromLong(taken);
}

PyObject* LockRelease(PyObject* object, PyObject*) {
  if (!ReleaseLock(reinterpret_cast<LockObject*>(object))) return nullptr;
  Py_RETURN_NONE;
}

// Whether this thread holds the lock (threading.Condition's hook).
PyObject* LockIsOwned(PyObject* object, PyObject*) {
  return PyBool_FromLong(HeldHere(reinterpret_cast<LockObject*>(object)));
}

// acquire() with no arguments is __enter__ too, as RLock's.
const PyCFunction lock_acquire = reinterpret_cast<PyCFunction>(
    reinterpret_cast<void (*)()>(LockAcquire));

PyMethodDef lock_methods[] = {
    {"acquire", lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1) -> bool, as RLock's"},
    {"release", LockRelease, METH_NOARGS, "Releases one level."},
    {"__enter__", lock_acquire, METH_VARARGS | METH_KEYWORDS, "acquire()"},
    {"__exit__", LockRelease, METH_VARARGS, "release()"},
    {"held", LockIsOwned, METH_NOARGS, "Whether this thread holds it."},
    {"_is_owned", LockIsOwned, METH_NOARGS,
     "held(), under threading.Condition's name for it."},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot lock_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(LockNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(LockDealloc)},
    {Py_tp_methods, lock_methods},
    {Py_tp_doc, const_cast<char*>(
        "Lock(handle, tree): a registered memory's storage (or tree) lock, "
        "re-entrant, shared with the TensorFlow ops.")},
    {0, nullptr},
};

PyType_Spec lock_spec = {
    "dopamine_per._replay.Lock", sizeof(LockObject), 0, Py_TPFLAGS_DEFAULT,
    lock_slots,
};

// ---------------------------------------------------------------- sum tree

// A tree whose layout the loops stay within: `flat` float64, `offsets`
// int64 [levels + 1], levels in order inside flat, each a whole number of
// rows of `fanout` (a power of two up to 1024), each at least a
// `fanout`-th of the one below (so that a leaf's ancestors exist), the top
// one row (the root's children). The offsets are copied: the loops read
// the copy.
class TreeArgument {
 public:
  bool Take(PyObject* flat, PyObject* offsets, PyObject* fanout,
            bool writable) {
    int64_t f;
    if (!Int(fanout, &f) || f < 1 || f > kMaxFanout || (f & (f - 1)) != 0 ||
        !flat_.Take(flat, 1, writable) || !flat_.IsDouble() ||
        !offsets_.Take(offsets, 1) || !offsets_.IsInt64()) {
      return false;
    }
    const int64_t levels = offsets_.length() - 1;
    if (levels < 1 || levels > kMaxLevels) return false;
    const int64_t* given = offsets_.data<int64_t>();
    std::memcpy(copy_, given, (levels + 1) * sizeof(int64_t));
    if (copy_[0] < 0 || copy_[levels] > flat_.length()) return false;
    for (int64_t k = 0; k < levels; ++k) {
      const int64_t size = copy_[k + 1] - copy_[k];
      if (size < f || size % f != 0) return false;
      if (k + 1 < levels && (copy_[k + 2] - copy_[k + 1]) < size / f) {
        return false;
      }
      rows_[k] = size / f;
    }
    if (copy_[levels] - copy_[levels - 1] != f) return false;
    tree_ = Tree{flat_.data<double>(), copy_, levels, f};
    return true;
  }

  const Tree& tree() const { return tree_; }
  // Leaves: the size of the bottom level.
  int64_t leaves() const { return copy_[1] - copy_[0]; }
  // Rows of `fanout` nodes in level k.
  const int64_t* rows() const { return rows_; }

 private:
  Array flat_, offsets_;
  int64_t copy_[kMaxLevels + 1];
  int64_t rows_[kMaxLevels];
  Tree tree_{nullptr, nullptr, 0, 0};
};

// Indices of a batch: int64 or int32, 1-D.
template <typename Function>
bool WithIndices(const Array& indices, Function function) {
  if (indices.IsInt64()) {
    function(indices.data<int64_t>());
    return true;
  }
  if (indices.IsInt32()) {
    function(indices.data<int32_t>());
    return true;
  }
  return false;
}

template <typename Index>
bool AllBelow(const Index* indices, int64_t count, int64_t limit) {
  for (int64_t i = 0; i < count; ++i) {
    if (indices[i] < 0 || static_cast<int64_t>(indices[i]) >= limit) {
      return false;
    }
  }
  return true;
}

// level_sums(blocks, out): blocks float64 [rows, fanout], out float64
// [rows]. True, or NotImplemented.
PyObject* LevelSumsPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("level_sums", nargs, 2)) return nullptr;
  Array blocks, out;
  if (!blocks.Take(args[0], 2) || !blocks.IsDouble() ||
      !out.Take(args[1], 1, true) || !out.IsDouble() ||
      out.length() != blocks.length()) {
    return NotCovered();
  }
  const int64_t fanout = blocks.dim(1);
  if (fanout < 1 || fanout > kMaxFanout || (fanout & (fanout - 1)) != 0) {
    return NotCovered();
  }
  LevelSums(blocks.data<double>(), blocks.length(), fanout,
            out.data<double>());
  return Done();
}

// update_parents(flat, offsets, fanout, leaves): the total (a float), or
// NotImplemented (leaves outside the bottom level among them). `leaves`:
// an array, or one leaf as an int (an add's, without making an array).
PyObject* UpdateParentsPy(PyObject*, PyObject* const* args,
                          Py_ssize_t nargs) {
  if (!CheckArguments("update_parents", nargs, 4)) return nullptr;
  TreeArgument tree;
  if (!tree.Take(args[0], args[1], args[2], true)) return NotCovered();
  int64_t leaf;
  if (PyIndex_Check(args[3]) && Int(args[3], &leaf)) {
    if (leaf < 0 || leaf >= tree.leaves()) return NotCovered();
    return PyFloat_FromDouble(UpdateParents(tree.tree(), &leaf, 1));
  }
  Array leaves;
  if (!leaves.Take(args[3], 1)) return NotCovered();
  double total = 0.0;
  bool inside = false;
  const int64_t count = leaves.length();
  const bool typed = WithIndices(leaves, [&](const auto* indices) {
    inside = AllBelow(indices, count, tree.leaves());
    if (inside) total = UpdateParents(tree.tree(), indices, count);
  });
  if (!typed || !inside) return NotCovered();
  return PyFloat_FromDouble(total);
}

// set_leaves(flat, offsets, fanout, capacity, leaves, values, smallest,
// largest): (total, largest value written), None (an index or a value
// refused: nothing written), or NotImplemented.
PyObject* SetLeavesPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("set_leaves", nargs, 8)) return nullptr;
  TreeArgument tree;
  Array leaves, values;
  int64_t capacity;
  double smallest, largest;
  if (!Int(args[3], &capacity) || !Double(args[6], &smallest) ||
      !Double(args[7], &largest) ||
      !tree.Take(args[0], args[1], args[2], true) || capacity < 1 ||
      capacity > tree.leaves() || !leaves.Take(args[4], 1) ||
      !values.Take(args[5], 1) || !values.IsDouble() ||
      values.length() != leaves.length() || leaves.length() == 0) {
    return NotCovered();
  }
  const int64_t count = leaves.length();
  const double* numbers = values.data<double>();
  bool valid = false;
  double total = 0.0, written_max = 0.0;
  const bool typed = WithIndices(leaves, [&](const auto* indices) {
    valid = LeavesValid(indices, numbers, count, capacity, smallest, largest);
    if (valid) {
      total = WriteLeaves(tree.tree(), indices, numbers, count, &written_max);
    }
  });
  if (!typed) return NotCovered();
  if (!valid) Py_RETURN_NONE;
  return Py_BuildValue("(dd)", total, written_max);
}

// get_leaves(leaves, indices, out): True (out = leaves[indices]), None (an
// index out of range) or NotImplemented.
PyObject* GetLeavesPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("get_leaves", nargs, 3)) return nullptr;
  Array leaves, indices, out;
  if (!leaves.Take(args[0], 1) || !leaves.IsDouble() ||
      !indices.Take(args[1], 1) || indices.length() == 0 ||
      !out.Take(args[2], 1, true) || !out.IsDouble() ||
      out.length() != indices.length()) {
    return NotCovered();
  }
  const double* source = leaves.data<double>();
  const int64_t size = leaves.length(), count = indices.length();
  double* target = out.data<double>();
  bool inside = true;
  const bool typed = WithIndices(indices, [&](const auto* positions) {
    for (int64_t i = 0; i < count && inside; ++i) {
      const int64_t position = static_cast<int64_t>(positions[i]);
      if (position < 0 || position >= size) {
        inside = false;
      } else {
        target[i] = source[position];
      }
    }
  });
  if (!typed) return NotCovered();
  if (!inside) Py_RETURN_NONE;
  return Done();
}

// descend(flat, offsets, fanout, targets, out): out int64 [count] the
// leaves; True, or NotImplemented.
PyObject* DescendPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("descend", nargs, 5)) return nullptr;
  TreeArgument tree;
  Array targets, out;
  if (!tree.Take(args[0], args[1], args[2], false) ||
      !targets.Take(args[3], 1) || !targets.IsDouble() ||
      targets.length() == 0 || !out.Take(args[4], 1, true) ||
      !out.IsInt64() || out.length() != targets.length()) {
    return NotCovered();
  }
  const int64_t count = targets.length();
  bool inside;
  {
    WithoutGil unlocked(count >= kTreeBatchWithoutGil);
    std::vector<double> remaining(targets.data<double>(),
                                  targets.data<double>() + count);
    inside = DescendFrom(tree.tree(), tree.rows(), remaining.data(), count,
                         out.data<int64_t>());
  }
  return inside ? Done() : NotCovered();
}

// descend_uniforms(flat, offsets, fanout, uniforms, lower, width, scale,
// out), and descend_draws(...) (`from_words`) with the uniforms given as
// the bytes of 2 * count little-endian 32-bit words (random()'s): the
// leaves holding (lower + width * uniforms) * scale; True, or
// NotImplemented.
PyObject* DescendStrata(const char* name, PyObject* const* args,
                        Py_ssize_t nargs, bool from_words) {
  if (!CheckArguments(name, nargs, 8)) return nullptr;
  TreeArgument tree;
  Array uniforms, lower, width, out;
  double scale;
  if (!Double(args[6], &scale) ||
      !tree.Take(args[0], args[1], args[2], false) ||
      !lower.Take(args[4], 1) || !lower.IsDouble() || lower.length() == 0 ||
      !width.Take(args[5], 1) || !width.IsDouble() ||
      width.length() != lower.length() || !out.Take(args[7], 1, true) ||
      !out.IsInt64() || out.length() != lower.length()) {
    return NotCovered();
  }
  const int64_t count = lower.length();
  if (from_words ? !kLittleEndian || !PyBytes_CheckExact(args[3]) ||
                       PyBytes_GET_SIZE(args[3]) != 8 * count
                 : !uniforms.Take(args[3], 1) || !uniforms.IsDouble() ||
                       uniforms.length() != count) {
    return NotCovered();
  }
  // bytes are immutable: read without the GIL too.
  const char* bytes = from_words ? PyBytes_AS_STRING(args[3]) : nullptr;
  bool inside;
  {
    WithoutGil unlocked(count >= kTreeBatchWithoutGil);
    std::vector<double> drawn;
    if (from_words) {
      std::vector<uint32_t> words(2 * count);
      std::memcpy(words.data(), bytes, 8 * count);  // Any alignment.
      drawn.resize(count);
      UniformsFromWords(words.data(), count, drawn.data());
    }
    inside = DescendUniforms(
        tree.tree(), tree.rows(),
        from_words ? drawn.data() : uniforms.data<double>(),
        lower.data<double>(), width.data<double>(), scale, count,
        out.data<int64_t>());
  }
  return inside ? Done() : NotCovered();
}

PyObject* DescendUniformsPy(PyObject*, PyObject* const* args,
                            Py_ssize_t nargs) {
  return DescendStrata("descend_uniforms", args, nargs, false);
}

PyObject* DescendDrawsPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return DescendStrata("descend_draws", args, nargs, true);
}

// ------------------------------------------------------ a memory's batch

// The registered memory of `lock`, a Lock of this module that this thread
// holds, and bound; nullptr with an exception set otherwise. The storage
// lock, held, keeps the memory's arrays and layout as they are.
Memory* HeldMemory(PyObject* object, const char* function) {
  if (!IsLock(object)) {
    PyErr_Format(PyExc_TypeError, "%s: lock must be a memory's Lock",
                 function);
    return nullptr;
  }
  LockObject* lock = reinterpret_cast<LockObject*>(object);
  if (lock->tree || !HeldHere(lock)) {
    PyErr_Format(PyExc_RuntimeError,
                 "%s: the calling thread must hold the memory's storage lock",
                 function);
    return nullptr;
  }
  Memory* memory = lock->memory->get();
  if (!memory->bound) {
    PyErr_Format(PyExc_RuntimeError, "%s: the memory is not bound",
                 function);
    return nullptr;
  }
  return memory;
}

// A copy of 1-D int64 `object` (read once), each in [0, capacity); false
// with an exception set otherwise.
bool TakeSlots(PyObject* object, int64_t capacity,
               std::vector<int64_t>* slots) {
  Array indices;
  if (!indices.Take(object, 1) || !indices.IsInt64()) {
    PyErr_SetString(PyExc_TypeError, "indices must be a 1-D int64 array");
    return false;
  }
  const int64_t* given = indices.data<int64_t>();
  slots->assign(given, given + indices.length());
  for (const int64_t slot : *slots) {
    if (slot < 0 || slot >= capacity) {
      PyErr_Format(PyExc_IndexError, "index %lld is outside [0, %lld)",
                   static_cast<long long>(slot),
                   static_cast<long long>(capacity));
      return false;
    }
  }
  return true;
}

// valid_mask(lock, indices, out): whether each slot of `indices` (1-D
// int64, any values) is a valid transition of the memory of `lock` (held
// by the caller), into `out` (bool, as long); True.
PyObject* ValidMaskPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("valid_mask", nargs, 3)) return nullptr;
  const Memory* m = HeldMemory(args[0], "valid_mask");
  if (m == nullptr) return nullptr;
  Array indices, out;
  if (!indices.Take(args[1], 1) || !indices.IsInt64() ||
      !out.Take(args[2], 1, true) || !out.IsBool() ||
      out.length() != indices.length()) {
    PyErr_SetString(PyExc_TypeError,
                    "valid_mask takes int64 indices and a bool out of their "
                    "length");
    return nullptr;
  }
  ValidSlots(*m, indices.data<int64_t>(), indices.length(),
             out.data<uint8_t>());
  return Done();
}

// element_codes(names): the codes (batch.h's ElementCode) of the ops'
// element names, as bytes of int64s, for fill_batch. ValueError for a name
// that is none.
PyObject* ElementCodesPy(PyObject*, PyObject* const* args,
                         Py_ssize_t nargs) {
  if (!CheckArguments("element_codes", nargs, 1)) return nullptr;
  PyObject* names = PySequence_Fast(args[0], "names must be a sequence");
  if (names == nullptr) return nullptr;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(names);
  std::vector<int64_t> codes(count);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* name = PySequence_Fast_GET_ITEM(names, i);
    const char* text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name)
                                             : nullptr;
    codes[i] = text == nullptr ? -1 : ElementCode(text);
    if (codes[i] < 0) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "unknown transition element %R", name);
      Py_DECREF(names);
      return nullptr;
    }
  }
  Py_DECREF(names);
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(
                                       codes.data()),
                                   count * 8);
}

// fill_batch(lock, tree_lock, indices, codes, outputs): fills the batch of
// the memory of `lock` (held by the caller; `tree_lock` its tree lock) at
// valid slots `indices` (1-D int64) into `outputs`, a tuple of writable
// C-contiguous arrays of len(indices) rows, one per code of `codes`
// (element_codes' bytes): the rows under the tree lock, the frames without
// it. True; TypeError for outputs that do not fit (nothing written),
// IndexError for a slot outside the memory.
PyObject* FillBatchPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("fill_batch", nargs, 5)) return nullptr;
  const Memory* m = HeldMemory(args[0], "fill_batch");
  if (m == nullptr) return nullptr;
  LockObject* const tree_lock = reinterpret_cast<LockObject*>(args[1]);
  if (!IsLock(args[1]) || !tree_lock->tree || tree_lock->memory->get() != m) {
    PyErr_SetString(PyExc_TypeError,
                    "fill_batch: tree_lock must be the memory's tree Lock");
    return nullptr;
  }
  std::vector<int64_t> slots;
  if (!TakeSlots(args[2], m->capacity, &slots)) return nullptr;
  if (!PyBytes_CheckExact(args[3]) || PyBytes_GET_SIZE(args[3]) % 8 != 0 ||
      !PyTuple_CheckExact(args[4]) ||
      PyTuple_GET_SIZE(args[4]) != PyBytes_GET_SIZE(args[3]) / 8) {
    PyErr_SetString(PyExc_TypeError,
                    "fill_batch: codes must be element_codes' bytes and "
                    "outputs a tuple of as many arrays");
    return nullptr;
  }
  const int64_t count = static_cast<int64_t>(slots.size());
  const Py_ssize_t n = PyTuple_GET_SIZE(args[4]);
  std::vector<int64_t> codes(n);
  std::memcpy(codes.data(), PyBytes_AS_STRING(args[3]), 8 * n);
  std::vector<Array> arrays(n);
  std::vector<BatchOutput> outputs(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    int64_t row_bytes = 0;
    if (!arrays[i].Take(PyTuple_GET_ITEM(args[4], i), -1, true) ||
        !OutputFor(*m, codes[i], arrays[i].data<uint8_t>(), &outputs[i],
                   &row_bytes) ||
        arrays[i].length() != count ||
        arrays[i].bytes() != count * row_bytes) {
      PyErr_Format(PyExc_TypeError,
                   "fill_batch: output %zd does not hold element %lld of "
                   "this memory for %lld transitions",
                   i, static_cast<long long>(codes[i]),
                   static_cast<long long>(count));
      return nullptr;
    }
  }
  const BatchSource source = SourceOf(*m);
  const bool large = count >= kSlotBatchWithoutGil;
  Walked walked;
  {
    WithoutGil unlocked(large);
    walked = Walk(source, slots.data(), count);
    FillBatch(source, slots.data(), count, walked, outputs.data(), n,
              kScalarPart);
  }
  if (AcquireLock(tree_lock, true, -1.0) < 0) return nullptr;
  {
    WithoutGil unlocked(large);
    FillBatch(source, slots.data(), count, walked, outputs.data(), n,
              kRowPart);
  }
  if (!ReleaseLock(tree_lock)) return nullptr;
  bool decoded = true;
  {
    const int64_t state_bytes = count * m->pixels * m->observation_item *
                                m->stack;
    WithoutGil unlocked(large || state_bytes >= kCopyBytesWithoutGil ||
                        m->observation == nullptr);
    decoded = FillBatch(source, slots.data(), count, walked, outputs.data(),
                        n, kStatePart);
  }
  if (!decoded) {
    PyErr_SetString(PyExc_ValueError,
                    "fill_batch: a compressed frame block does not decode "
                    "(the memory's frames are corrupt)");
    return nullptr;
  }
  return Done();
}

// ------------------------------------------------ sampling a memory

// NumPy's bit generator interface (numpy/random/bitgen.h, `bitgen_t`),
// which a BitGenerator's capsule ("BitGenerator") holds.
struct NumpyBitGenerator {
  void* state;
  uint64_t (*next_uint64)(void* state);
  uint32_t (*next_uint32)(void* state);
  double (*next_double)(void* state);
  uint64_t (*next_raw)(void* state);
};

// The smallest all-ones mask covering `max`.
inline uint32_t MaskOf(uint32_t max) {
  for (int shift = 1; shift < 32; shift *= 2) max |= max >> shift;
  return max;
}

// Draws from a NumPy bit generator exactly as NumPy does: Below(range) is
// one value of `Generator.integers(low, low + range)` (Lemire's method on
// 32-bit draws, `masked` false) or of the legacy `RandomState.randint`
// (masked rejection, `masked` true), Uniform() one of `Generator.random()`.
// So a memory sampled here consumes its generator as its Python draws
// would. A memory's ranges stay below 2**31 (its capacity's bound), so
// NumPy's 32-bit paths are the only ones taken.
struct NumpyDraws {
  NumpyBitGenerator* g;
  bool masked;

  uint64_t Below(uint64_t range) {
    const uint32_t max = static_cast<uint32_t>(range - 1);  // NumPy's `rng`.
    if (max == 0) return 0;  // NumPy draws nothing.
    if (masked) {
      const uint32_t mask = MaskOf(max);
      uint32_t value;
      while ((value = g->next_uint32(g->state) & mask) > max) {
      }
      return value;
    }
    const uint32_t excluded = max + 1;
    uint64_t m = static_cast<uint64_t>(g->next_uint32(g->state)) * excluded;
    if (static_cast<uint32_t>(m) < excluded) {
      const uint32_t threshold = (0xFFFFFFFFu - max) % excluded;
      while (static_cast<uint32_t>(m) < threshold) {
        m = static_cast<uint64_t>(g->next_uint32(g->state)) * excluded;
      }
    }
    return m >> 32;
  }

  double Uniform() { return g->next_double(g->state); }
  bool Has(int64_t) const { return true; }
};

// The first draws of a prioritized memory without a generator: one
// `random.random()` per stratum from the words of Python's `random` that
// the caller drew (sum_tree.python_random_words), as its sum tree would
// draw them. Holds no more: the caller redraws (kMoreDraws).
struct WordDraws {
  std::vector<double> uniforms;
  size_t next = 0;

  uint64_t Below(uint64_t) { return 0; }  // Only prioritized memories.
  double Uniform() { return uniforms[next++]; }
  bool Has(int64_t n) const {
    return static_cast<int64_t>(uniforms.size() - next) >= n;
  }
};

// sample_batch(lock, tree_lock, bit_generator, masked, indices, codes,
// outputs): samples len(indices) valid slots of the memory of `lock` (held
// by the caller, and for a prioritized memory `tree_lock` too) with
// sampler.h's policy, drawing from the NumPy BitGenerator `bit_generator`
// (its lock held) as NumPy would (`masked`: as RandomState), into `indices`
// (int64), then fills `outputs` as fill_batch does (none if `codes` is
// empty). True; if it cannot sample (nothing filled), sampler.h's message
// as ValueError for an empty sum tree, else RuntimeError. A prioritized
// memory also takes for `bit_generator` the bytes of Python's `random`
// words of its strata (8 per slot, see WordDraws): then False, nothing
// filled, where a draw is invalid, `indices` holding the draws.
PyObject* SampleBatchPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("sample_batch", nargs, 7)) return nullptr;
  const Memory* m = HeldMemory(args[0], "sample_batch");
  if (m == nullptr) return nullptr;
  LockObject* const tree_lock = reinterpret_cast<LockObject*>(args[1]);
  if (!IsLock(args[1]) || !tree_lock->tree ||
      tree_lock->memory->get() != m ||
      (m->prioritized && !HeldHere(tree_lock))) {
    PyErr_SetString(PyExc_RuntimeError,
                    "sample_batch: tree_lock must be the memory's tree Lock, "
                    "held by the calling thread for a prioritized memory");
    return nullptr;
  }
  Array indices;
  if (!indices.Take(args[4], 1, true) || !indices.IsInt64() ||
      indices.length() < 1) {
    PyErr_SetString(PyExc_TypeError,
                    "sample_batch: indices must be a writable int64 array of "
                    "one slot or more");
    return nullptr;
  }
  std::string error;
  if (PyBytes_CheckExact(args[2])) {
    if (!m->prioritized ||
        PyBytes_GET_SIZE(args[2]) != 8 * indices.length()) {
      PyErr_SetString(PyExc_TypeError,
                      "sample_batch: words are for a prioritized memory, 8 "
                      "bytes per slot");
      return nullptr;
    }
    WordDraws draws;
    draws.uniforms.resize(indices.length());
    std::vector<uint32_t> words(2 * indices.length());
    std::memcpy(words.data(), PyBytes_AS_STRING(args[2]),
                8 * indices.length());
    UniformsFromWords(words.data(), indices.length(), draws.uniforms.data());
    error = SampleIndices(*m, indices.length(), draws,
                          indices.data<int64_t>());
    if (error == kMoreDraws) Py_RETURN_FALSE;
  } else {
    PyObject* capsule = PyObject_GetAttrString(args[2], "capsule");
    if (capsule == nullptr) return nullptr;
    auto* generator = static_cast<NumpyBitGenerator*>(
        PyCapsule_GetPointer(capsule, "BitGenerator"));
    Py_DECREF(capsule);  // The BitGenerator keeps what it points to.
    const int masked = PyObject_IsTrue(args[3]);
    if (generator == nullptr || masked < 0) return nullptr;
    NumpyDraws draws{generator, masked == 1};
    error = SampleIndices(*m, indices.length(), draws,
                          indices.data<int64_t>());
  }
  if (!error.empty()) {
    PyErr_SetString(error == kEmptyTreeError ? PyExc_ValueError
                                             : PyExc_RuntimeError,
                    error.c_str());
    return nullptr;
  }
  if (PyBytes_CheckExact(args[5]) && PyBytes_GET_SIZE(args[5]) == 0) {
    return Done();
  }
  PyObject* const fill[] = {args[0], args[1], args[4], args[5], args[6]};
  return FillBatchPy(nullptr, fill, 5);
}

// ------------------------------------------------------------------- LZ4

// The bytes of argument `name` of `function`, a bytes-like object of up to
// kMaxCodecBytes; false with TypeError or ValueError set otherwise.
bool TakeCodecInput(PyObject* object, const char* function, const char* name,
                    Array* bytes) {
  if (!bytes->TakeBytes(object)) {
    PyErr_Format(PyExc_TypeError,
                 "%s: %s must be a bytes-like object (C-contiguous), not %s",
                 function, name, Py_TYPE(object)->tp_name);
    return false;
  }
  if (bytes->bytes() > kMaxCodecBytes) {
    PyErr_Format(PyExc_ValueError,
                 "%s: %s must be at most %lld bytes, not %lld", function,
                 name, static_cast<long long>(kMaxCodecBytes),
                 static_cast<long long>(bytes->bytes()));
    return false;
  }
  return true;
}

// Integer argument `name` of `function` in [low, high]; false with
// TypeError (not an integer) or ValueError (out of range) set otherwise.
bool TakeBoundedInt(PyObject* object, const char* function, const char* name,
                    int64_t low, int64_t high, int64_t* out) {
  if (!PyIndex_Check(object)) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be an int, not %s", function,
                 name, Py_TYPE(object)->tp_name);
    return false;
  }
  int64_t value;
  if (!Int(object, &value) || value < low || value > high) {
    PyErr_Format(PyExc_ValueError, "%s: %s must be in [%lld, %lld], not %S",
                 function, name, static_cast<long long>(low),
                 static_cast<long long>(high), object);
    return false;
  }
  *out = value;
  return true;
}

// lz4_compress(src, level=9): the bytes-like `src` as one LZ4 block
// (lz4_block.h's Lz4Compress; level 0 to kLz4MaxLevel), without its size.
PyObject* Lz4CompressPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_Format(PyExc_TypeError,
                 "lz4_compress() takes 1 or 2 arguments (%zd given)", nargs);
    return nullptr;
  }
  Array src;
  int64_t level = 9;
  if (!TakeCodecInput(args[0], "lz4_compress", "src", &src) ||
      (nargs == 2 && !TakeBoundedInt(args[1], "lz4_compress", "level", 0,
                                     kLz4MaxLevel, &level))) {
    return nullptr;
  }
  const int64_t capacity = Lz4CompressBound(src.bytes());
  PyObject* out = PyBytes_FromStringAndSize(nullptr, capacity);
  if (out == nullptr) return nullptr;
  int64_t size;
  {
    WithoutGil unlocked(src.bytes() >= kCodecBytesWithoutGil);
    size = Lz4Compress(src.data<uint8_t>(), src.bytes(),
                       reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out)),
                       capacity, static_cast<int>(level));
  }
  if (size < 0) {  // The bound always fits: a bug.
    Py_DECREF(out);
    PyErr_SetString(PyExc_SystemError,
                    "lz4_compress: the block outgrew its bound");
    return nullptr;
  }
  if (_PyBytes_Resize(&out, size) != 0) return nullptr;
  return out;
}

// lz4_decompress(src, size): the `size` bytes that the LZ4 block `src`
// (bytes-like, without its size) decodes to; ValueError if it does not
// decode to exactly that many (lz4_block.h's Lz4Decompress).
PyObject* Lz4DecompressPy(PyObject*, PyObject* const* args,
                          Py_ssize_t nargs) {
  if (!CheckArguments("lz4_decompress", nargs, 2)) return nullptr;
  Array src;
  int64_t size;
  if (!TakeCodecInput(args[0], "lz4_decompress", "src", &src) ||
      !TakeBoundedInt(args[1], "lz4_decompress", "size", 0, kMaxCodecBytes,
                      &size)) {
    return nullptr;
  }
  PyObject* out = PyBytes_FromStringAndSize(nullptr, size);
  if (out == nullptr) return nullptr;
  bool decoded;
  {
    WithoutGil unlocked(size >= kCodecBytesWithoutGil ||
                        src.bytes() >= kCodecBytesWithoutGil);
    decoded = Lz4Decompress(
        src.data<uint8_t>(), src.bytes(),
        reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out)), size);
  }
  if (!decoded) {
    Py_DECREF(out);
    PyErr_Format(PyExc_ValueError,
                 "lz4_decompress: corrupt LZ4 block: its %lld bytes do not "
                 "decode to exactly size=%lld bytes (truncated, extended, "
                 "an offset outside the output, or another size)",
                 static_cast<long long>(src.bytes()),
                 static_cast<long long>(size));
    return nullptr;
  }
  return out;
}

// ------------------------------------------------------ block compressor

// BlockCompressor(level): block_compressor.h's, for
// frame_blocks.CompressedFrames. A job's owner is the literal block
// `submit` returned, a reference held until `finished` hands it back (or
// the compressor ends). A process forked from the one that made it has no
// thread: it starts over with a new compressor, leaving the old one's
// state, and its references, where they are.
struct CompressorObject {
  PyObject_HEAD
  BlockCompressor* core;
  int level;
  pid_t pid;
};

BlockCompressor* CoreOf(PyObject* object) {
  auto* self = reinterpret_cast<CompressorObject*>(object);
  if (self->pid != getpid()) {
    self->core = new BlockCompressor(self->level);
    self->pid = getpid();
  }
  return self->core;
}

PyObject* CompressorNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"level", nullptr};
  PyObject* level_arg = nullptr;
  int64_t level;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O",
                                   const_cast<char**>(keywords), &level_arg) ||
      !TakeBoundedInt(level_arg, "BlockCompressor", "level", 0, kLz4MaxLevel,
                      &level)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<CompressorObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->level = static_cast<int>(level);
  self->core = new BlockCompressor(self->level);
  self->pid = getpid();
  return reinterpret_cast<PyObject*>(self);
}

void CompressorDealloc(PyObject* object) {
  auto* self = reinterpret_cast<CompressorObject*>(object);
  if (self->pid == getpid()) {
    // The thread never takes the GIL: joining it with the GIL held ends.
    self->core->Stop();
    for (const BlockCompressor::Job& job : self->core->Abandon()) {
      Py_DECREF(static_cast<PyObject*>(job.owner));
    }
    delete self->core;
  }
  PyTypeObject* type = Py_TYPE(object);
  type->tp_free(object);
  Py_DECREF(type);
}

// submit(tag, frames) -> bytes: the LZ4 block of `frames`' bytes as
// literals, stored at once; their compressed block comes from `finished`.
PyObject* CompressorSubmit(PyObject* object, PyObject* const* args,
                           Py_ssize_t nargs) {
  if (!CheckArguments("submit", nargs, 2)) return nullptr;
  int64_t tag;
  Array frames;
  if (!TakeBoundedInt(args[0], "submit", "tag", 0, int64_t{1} << 62, &tag) ||
      !TakeCodecInput(args[1], "submit", "frames", &frames)) {
    return nullptr;
  }
  const int64_t size = Lz4LiteralsSize(frames.bytes());
  PyObject* literals = PyBytes_FromStringAndSize(nullptr, size);
  if (literals == nullptr) return nullptr;
  auto* out = reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(literals));
  Lz4WriteLiterals(frames.data<uint8_t>(), frames.bytes(), out);
  Py_INCREF(literals);  // The job's.
  CoreOf(object)->Submit(
      {tag, out + size - frames.bytes(), frames.bytes(), literals});
  return literals;
}

// finished() -> [(tag, literals, block or None)]: the jobs done since the
// last call, oldest first; None where compressing saved nothing. If the
// list cannot be made, their references go and their blocks with them
// (the literals stay stored).
PyObject* CompressorFinished(PyObject* object, PyObject*) {
  std::vector<BlockCompressor::Finished> done = CoreOf(object)->TakeFinished();
  PyObject* list = PyList_New(0);
  for (const BlockCompressor::Finished& finished : done) {
    auto* owner = static_cast<PyObject*>(finished.job.owner);
    PyObject* item = list == nullptr ? nullptr : PyTuple_New(3);
    PyObject* tag = item == nullptr ? nullptr
                                    : PyLong_FromLongLong(finished.job.tag);
    PyObject* block = Py_None;
    if (tag == nullptr) {
      block = nullptr;
    } else if (finished.block.empty()) {
      Py_INCREF(block);
    } else {
      block = PyBytes_FromStringAndSize(
          reinterpret_cast<const char*>(finished.block.data()),
          static_cast<Py_ssize_t>(finished.block.size()));
    }
    if (block == nullptr) {
      Py_XDECREF(tag);
      Py_XDECREF(item);
      Py_DECREF(owner);
      Py_CLEAR(list);
      continue;
    }
    PyTuple_SET_ITEM(item, 0, tag);
    PyTuple_SET_ITEM(item, 1, owner);  // The job's reference, handed on.
    PyTuple_SET_ITEM(item, 2, block);
    if (PyList_Append(list, item) < 0) Py_CLEAR(list);
    Py_DECREF(item);
  }
  return list;
}

// help() -> bool: compresses the oldest queued block on this thread, the
// GIL released; False if none was queued.
PyObject* CompressorHelp(PyObject* object, PyObject*) {
  BlockCompressor* core = CoreOf(object);
  bool ran;
  {
    WithoutGil unlocked(true);
    ran = core->RunOne();
  }
  return PyBool_FromLong(ran);
}

// queued() -> int: the blocks waiting for the thread.
PyObject* CompressorQueued(PyObject* object, PyObject*) {
  return PyLong_FromLongLong(CoreOf(object)->Queued());
}

// wait(): until every block submitted is compressed (the GIL released).
PyObject* CompressorWait(PyObject* object, PyObject*) {
  BlockCompressor* core = CoreOf(object);
  {
    WithoutGil unlocked(true);
    core->WaitIdle();
  }
  Py_RETURN_NONE;
}

PyMethodDef compressor_methods[] = {
    {"submit", reinterpret_cast<PyCFunction>(
                   reinterpret_cast<void (*)()>(CompressorSubmit)),
     METH_FASTCALL, "submit(tag, frames) -> bytes: their literal block"},
    {"finished", CompressorFinished, METH_NOARGS,
     "finished() -> [(tag, literals, block or None)]"},
    {"help", CompressorHelp, METH_NOARGS,
     "help() -> bool: compresses the oldest queued block here"},
    {"queued", CompressorQueued, METH_NOARGS,
     "queued() -> int: the blocks waiting"},
    {"wait", CompressorWait, METH_NOARGS,
     "wait(): until every block submitted is compressed"},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot compressor_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(CompressorNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(CompressorDealloc)},
    {Py_tp_methods, compressor_methods},
    {Py_tp_doc, const_cast<char*>(
        "BlockCompressor(level): LZ4-compresses frame blocks on a thread of "
        "its own (block_compressor.h).")},
    {0, nullptr},
};

PyType_Spec compressor_spec = {
    "dopamine_per._replay.BlockCompressor", sizeof(CompressorObject), 0,
    Py_TPFLAGS_DEFAULT, compressor_slots,
};

// ------------------------------------------- frames shipped by a shard

// The int64 array argument `index` of `function`, 1-D, its values in
// [low, high) and, if `increasing`, strictly increasing; false with
// TypeError or ValueError set otherwise.
bool TakeInts(PyObject* object, const char* function, int index, int64_t low,
              int64_t high, bool increasing, Array* out) {
  if (!out->Take(object, 1) || !out->IsInt64()) {
    PyErr_Format(PyExc_TypeError, "%s: argument %d must be a 1-D int64 array",
                 function, index);
    return false;
  }
  const int64_t* values = out->data<int64_t>();
  for (int64_t i = 0; i < out->length(); ++i) {
    if (values[i] < low || values[i] >= high ||
        (increasing && i > 0 && values[i] <= values[i - 1])) {
      PyErr_Format(PyExc_ValueError,
                   "%s: argument %d holds %lld at %lld, outside [%lld, "
                   "%lld)%s",
                   function, index, static_cast<long long>(values[i]),
                   static_cast<long long>(i), static_cast<long long>(low),
                   static_cast<long long>(high),
                   increasing ? " or out of order" : "");
      return false;
    }
  }
  return true;
}

bool TakeShippedInts(PyObject* object, int index, int64_t low, int64_t high,
                     bool increasing, Array* out) {
  return TakeInts(object, "fill_shipped_states", index, low, high,
                  increasing, out);
}

// fill_shipped_states(payload, numbers, sizes, open_block, open_frames,
// ends, next_ends, capacity, block_frames, stack, states, next_states):
// fills `states` and `next_states` (writable, C-contiguous, len(ends) rows
// of `stack` frames each, frames last) with the stacks ending at `ends`
// and `next_ends` (int64 slots of a memory of `capacity`) from a shard's
// shipped blocks of `block_frames` slots: block numbers[j]'s LZ4 bytes are
// sizes[j] bytes of `payload`, in order; the open block `open_block` (-1:
// none) is `open_frames`, raw. True; TypeError or ValueError for arguments
// that do not fit (nothing read), ValueError if a block the stacks read is
// missing or does not decode.
PyObject* FillShippedStatesPy(PyObject*, PyObject* const* args,
                              Py_ssize_t nargs) {
  if (!CheckArguments("fill_shipped_states", nargs, 12)) return nullptr;
  int64_t capacity, per, stack, open_block;
  if (!TakeBoundedInt(args[7], "fill_shipped_states", "capacity", 1,
                      int64_t{1} << 40, &capacity) ||
      !TakeBoundedInt(args[8], "fill_shipped_states", "block_frames", 1,
                      1 << 16, &per) ||
      !TakeBoundedInt(args[9], "fill_shipped_states", "stack", 1, capacity,
                      &stack)) {
    return nullptr;
  }
  const int64_t blocks = (capacity + per - 1) / per;
  Array payload, numbers, sizes, open_frames, ends, next_ends;
  Array states, next_states;
  if (!TakeCodecInput(args[0], "fill_shipped_states", "payload", &payload) ||
      !TakeShippedInts(args[1], 1, 0, blocks, true, &numbers) ||
      !TakeShippedInts(args[2], 2, 0, kMaxCodecBytes, false, &sizes) ||
      !TakeBoundedInt(args[3], "fill_shipped_states", "open_block", -1,
                      blocks - 1, &open_block) ||
      !TakeCodecInput(args[4], "fill_shipped_states", "open_frames",
                      &open_frames) ||
      !TakeShippedInts(args[5], 5, 0, capacity, false, &ends) ||
      !TakeShippedInts(args[6], 6, 0, capacity, false, &next_ends)) {
    return nullptr;
  }
  const int64_t count = ends.length();
  int64_t total = 0;
  for (int64_t j = 0; j < sizes.length(); ++j) {
    total += sizes.data<int64_t>()[j];
  }
  const bool fit =
      states.Take(args[10], -1, true) && next_states.Take(args[11], -1, true) &&
      states.itemsize() == next_states.itemsize() &&
      states.length() == count && next_states.length() == count &&
      states.bytes() == next_states.bytes() && next_ends.length() == count &&
      sizes.length() == numbers.length() && total == payload.bytes();
  const int64_t frame_bytes =
      count > 0 && fit ? states.bytes() / (count * stack) : 0;
  if (!fit || (count > 0 && (frame_bytes * count * stack != states.bytes() ||
                             frame_bytes % states.itemsize() != 0 ||
                             (open_block >= 0 &&
                              open_frames.bytes() != per * frame_bytes))) ||
      frame_bytes * per > kMaxCodecBytes) {
    PyErr_SetString(PyExc_ValueError,
                    "fill_shipped_states: the outputs, sizes, payload, ends "
                    "and open frames do not fit together");
    return nullptr;
  }
  if (count == 0) return Done();
  std::vector<uint64_t> addresses(numbers.length());
  const uint8_t* next = payload.data<uint8_t>();
  for (int64_t j = 0; j < numbers.length(); ++j) {
    const int64_t size = sizes.data<int64_t>()[j];
    addresses[j] = size == 0 ? 0 : reinterpret_cast<uintptr_t>(next);
    next += size;
  }
  FrameStore store;
  store.capacity = capacity;
  store.frame_bytes = frame_bytes;
  store.block_frames = per;
  store.addresses = addresses.data();
  store.sizes = sizes.data<int64_t>();
  store.open_block = &open_block;
  store.open_frames = open_frames.data<uint8_t>();
  store.numbers = numbers.data<int64_t>();
  store.listed = numbers.length();
  bool filled;
  {
    WithoutGil unlocked(states.bytes() >= kCopyBytesWithoutGil);
    filled = FillShippedStates(
        store, frame_bytes / states.itemsize(), states.itemsize(), stack,
        ends.data<int64_t>(), next_ends.data<int64_t>(), count,
        states.data<uint8_t>(), next_states.data<uint8_t>());
  }
  if (!filled) {
    PyErr_SetString(PyExc_ValueError,
                    "fill_shipped_states: a block the states read is "
                    "missing or does not decode");
    return nullptr;
  }
  return Done();
}

// ------------------------------------ Dopamine JAX's memory (issue 34)

// The tree arguments of binary_tree_set and binary_tree_query: `nodes`
// float64 [2**depth - 1] (writable if asked), `first_leaf` its first
// leaf, 2**(depth - 1) - 1; false with TypeError or ValueError set.
bool TakeBinaryTree(PyObject* nodes_object, PyObject* first_object,
                    const char* function, bool writable, Array* nodes,
                    int64_t* first_leaf) {
  if (!nodes->Take(nodes_object, 1, writable) || !nodes->IsDouble()) {
    PyErr_Format(PyExc_TypeError, "%s: nodes must be a 1-D%s float64 array",
                 function, writable ? " writable" : "");
    return false;
  }
  if (!TakeBoundedInt(first_object, function, "first_leaf", 0,
                      nodes->length() - 1, first_leaf)) {
    return false;
  }
  if (2 * *first_leaf + 1 != nodes->length()) {
    PyErr_Format(PyExc_ValueError,
                 "%s: %lld nodes are no complete binary tree with its first "
                 "leaf at %lld",
                 function, static_cast<long long>(nodes->length()),
                 static_cast<long long>(*first_leaf));
    return false;
  }
  return true;
}

// binary_tree_set(nodes, first_leaf, leaves, values): sets the leaves
// (int64 offsets from first_leaf) to the float64 values as Dopamine JAX's
// SumTree.set does (binary_sum_tree.h); or one leaf, an int, to a float
// (an add's, without making arrays). True; TypeError or ValueError
// (nothing written) for arguments that do not fit.
PyObject* BinaryTreeSetPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("binary_tree_set", nargs, 4)) return nullptr;
  Array nodes, leaves, values;
  int64_t first_leaf, leaf;
  if (!TakeBinaryTree(args[0], args[1], "binary_tree_set", true, &nodes,
                      &first_leaf)) {
    return nullptr;
  }
  if (PyLong_Check(args[2])) {
    double value;
    if (!TakeBoundedInt(args[2], "binary_tree_set", "leaves", 0, first_leaf,
                        &leaf)) {
      return nullptr;
    }
    if (!PyFloat_Check(args[3]) || !Double(args[3], &value)) {
      PyErr_SetString(PyExc_TypeError,
                      "binary_tree_set: one leaf's value must be a float");
      return nullptr;
    }
    BinaryTreeSet(nodes.data<double>(), first_leaf, &leaf, &value, 1);
    return Done();
  }
  if (!TakeInts(args[2], "binary_tree_set", 2, 0, first_leaf + 1, false,
                &leaves)) {
    return nullptr;
  }
  if (!values.Take(args[3], 1) || !values.IsDouble() ||
      values.length() != leaves.length()) {
    PyErr_SetString(PyExc_TypeError,
                    "binary_tree_set: values must be a 1-D float64 array as "
                    "long as leaves");
    return nullptr;
  }
  BinaryTreeSet(nodes.data<double>(), first_leaf, leaves.data<int64_t>(),
                values.data<double>(), leaves.length());
  return Done();
}

// binary_tree_query(nodes, first_leaf, targets, out): out (int64,
// writable) the leaves where the float64 targets' descents end, as
// Dopamine JAX's SumTree.query. True; TypeError for arguments that do not
// fit.
PyObject* BinaryTreeQueryPy(PyObject*, PyObject* const* args,
                            Py_ssize_t nargs) {
  if (!CheckArguments("binary_tree_query", nargs, 4)) return nullptr;
  Array nodes, targets, out;
  int64_t first_leaf;
  if (!TakeBinaryTree(args[0], args[1], "binary_tree_query", false, &nodes,
                      &first_leaf)) {
    return nullptr;
  }
  if (!targets.Take(args[2], 1) || !targets.IsDouble() ||
      !out.Take(args[3], 1, true) || !out.IsInt64() ||
      out.length() != targets.length()) {
    PyErr_SetString(PyExc_TypeError,
                    "binary_tree_query: targets must be a 1-D float64 array "
                    "and out a writable int64 array as long");
    return nullptr;
  }
  BinaryTreeQuery(nodes.data<double>(), first_leaf, targets.data<double>(),
                  targets.length(), out.data<int64_t>());
  return Done();
}

// The frames of fill_stacks: raw (`frames`, C-contiguous, its first axis
// the capacity), or with `frames` None the blocks of
// frame_blocks.CompressedFrames (`addresses`, `sizes`, `open_block`,
// `open_frames`) of `block_frames` slots. False with TypeError or
// ValueError set if they do not fit.
bool TakeStackFrames(PyObject* const* args, Array* raw, Array* addresses,
                     Array* sizes, Array* open_frames, int64_t* open_block,
                     FrameStore* store) {
  const char* function = "fill_stacks";
  int64_t capacity, per;
  if (!TakeBoundedInt(args[1], function, "capacity", 1, int64_t{1} << 40,
                      &capacity) ||
      !TakeBoundedInt(args[2], function, "block_frames", 1, 1 << 16, &per)) {
    return false;
  }
  store->capacity = capacity;
  if (args[0] != Py_None) {
    if (!raw->TakeBytes(args[0]) || raw->bytes() % capacity != 0) {
      PyErr_SetString(PyExc_TypeError,
                      "fill_stacks: frames must be a C-contiguous array of "
                      "capacity frames");
      return false;
    }
    store->raw = raw->data<uint8_t>();
    store->frame_bytes = raw->bytes() / capacity;
    return true;
  }
  const int64_t blocks = (capacity + per - 1) / per;
  if (!addresses->Take(args[3], 1) || !addresses->Is(kUnsigned, 8) ||
      addresses->length() != blocks ||
      !TakeInts(args[4], function, 4, 0, kMaxCodecBytes, false, sizes) ||
      sizes->length() != blocks ||
      !TakeBoundedInt(args[5], function, "open_block", -1, blocks - 1,
                      open_block) ||
      !TakeCodecInput(args[6], function, "open_frames", open_frames) ||
      open_frames->bytes() % per != 0) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError,
                      "fill_stacks: the block tables do not fit the capacity "
                      "and block_frames");
    }
    return false;
  }
  store->block_frames = per;
  store->frame_bytes = open_frames->bytes() / per;
  store->addresses = addresses->data<uint64_t>();
  store->sizes = sizes->data<int64_t>();
  store->open_block = open_block;
  store->open_frames = open_frames->data<uint8_t>();
  return true;
}

// fill_stacks(frames, capacity, block_frames, addresses, sizes, open_block,
// open_frames, stack, ends, firsts, next_ends, next_firsts, states,
// next_states): fills `states` and `next_states` (writable, C-contiguous,
// len(ends) rows of `stack` frames each, frames last) with the stacks
// ending at the int64 rows `ends` and `next_ends` (taken modulo the
// capacity), their frames before `firsts` and `next_firsts` zeros. The
// caller holds the memory's lock (the blocks' addresses are read as they
// are). True; TypeError or ValueError for arguments that do not fit
// (nothing read), ValueError if a block does not decode.
PyObject* FillStacksPy(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (!CheckArguments("fill_stacks", nargs, 14)) return nullptr;
  Array raw, addresses, sizes, open_frames, states, next_states;
  Array ends, firsts, next_ends, next_firsts;
  int64_t open_block = -1, stack;
  FrameStore store;
  constexpr int64_t kMaxRow = int64_t{1} << 62;
  if (!TakeStackFrames(args, &raw, &addresses, &sizes, &open_frames,
                       &open_block, &store) ||
      !TakeBoundedInt(args[7], "fill_stacks", "stack", 1, 1 << 16, &stack) ||
      !TakeInts(args[8], "fill_stacks", 8, 0, kMaxRow, false, &ends) ||
      !TakeInts(args[9], "fill_stacks", 9, 0, kMaxRow, false, &firsts) ||
      !TakeInts(args[10], "fill_stacks", 10, 0, kMaxRow, false, &next_ends) ||
      !TakeInts(args[11], "fill_stacks", 11, 0, kMaxRow, false,
                &next_firsts)) {
    return nullptr;
  }
  const int64_t count = ends.length();
  const bool fit =
      states.Take(args[12], -1, true) && next_states.Take(args[13], -1, true) &&
      firsts.length() == count && next_ends.length() == count &&
      next_firsts.length() == count && states.length() == count &&
      next_states.length() == count &&
      states.itemsize() == next_states.itemsize() &&
      states.bytes() == count * stack * store.frame_bytes &&
      next_states.bytes() == states.bytes() &&
      store.frame_bytes % states.itemsize() == 0;
  if (!fit) {
    PyErr_SetString(PyExc_ValueError,
                    "fill_stacks: the outputs, ends and firsts do not fit "
                    "together and the frames");
    return nullptr;
  }
  if (count == 0) return Done();
  BatchSource source{};
  source.frames = store.raw;
  source.capacity = store.capacity;
  source.item = states.itemsize();
  source.pixels = store.frame_bytes / source.item;
  source.stack = stack;
  source.blocks = store;
  StackBounds bounds;
  bounds.ends = ends.data<int64_t>();
  bounds.next_ends = next_ends.data<int64_t>();
  bounds.firsts = firsts.data<int64_t>();
  bounds.next_firsts = next_firsts.data<int64_t>();
  uint8_t* const out = states.data<uint8_t>();
  uint8_t* const next_out = next_states.data<uint8_t>();
  bool filled;
  if (states.bytes() < kCopyBytesWithoutGil || count < kSplitRows) {
    filled = FillStates(source, bounds, count, out, next_out);
  } else {
    // The first half on the helper thread, the rest here.
    WithoutGil unlocked(true);
    const int64_t half = count / 2;
    const int64_t skip = half * (states.bytes() / count);
    filled = HelperThread::Get().RunBeside(
        [&] { return FillStates(source, bounds, half, out, next_out); },
        [&] {
          return FillStates(source, bounds.From(half), count - half,
                            out + skip, next_out + skip);
        });
  }
  if (!filled) {
    PyErr_SetString(PyExc_ValueError,
                    "fill_stacks: a compressed block the states read does "
                    "not decode (the memory's frames are corrupt)");
    return nullptr;
  }
  return Done();
}

#define DOPAMINE_PER_METHOD(name, function, doc)                         \
  {                                                                      \
    name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(    \
              function)),                                                \
        METH_FASTCALL, doc                                               \
  }

PyMethodDef methods[] = {
    DOPAMINE_PER_METHOD("level_sums", LevelSumsPy,
                        "level_sums(blocks, out) -> True | NotImplemented"),
    DOPAMINE_PER_METHOD("update_parents", UpdateParentsPy,
                        "update_parents(flat, offsets, fanout, leaves | leaf) "
                        "-> total | NotImplemented"),
    DOPAMINE_PER_METHOD("set_leaves", SetLeavesPy,
                        "set_leaves(flat, offsets, fanout, capacity, leaves, "
                        "values, smallest, largest) -> (total, largest "
                        "written) | None | NotImplemented"),
    DOPAMINE_PER_METHOD("get_leaves", GetLeavesPy,
                        "get_leaves(leaves, indices, out) -> True | None | "
                        "NotImplemented"),
    DOPAMINE_PER_METHOD("descend", DescendPy,
                        "descend(flat, offsets, fanout, targets, out) -> "
                        "True | NotImplemented"),
    DOPAMINE_PER_METHOD("descend_uniforms", DescendUniformsPy,
                        "descend_uniforms(flat, offsets, fanout, uniforms, "
                        "lower, width, scale, out) -> True | NotImplemented"),
    DOPAMINE_PER_METHOD("descend_draws", DescendDrawsPy,
                        "descend_draws(flat, offsets, fanout, words, lower, "
                        "width, scale, out) -> True | NotImplemented"),
    DOPAMINE_PER_METHOD("valid_mask", ValidMaskPy,
                        "valid_mask(lock, indices, out) -> True"),
    DOPAMINE_PER_METHOD("element_codes", ElementCodesPy,
                        "element_codes(names) -> bytes"),
    DOPAMINE_PER_METHOD("fill_batch", FillBatchPy,
                        "fill_batch(lock, tree_lock, indices, codes, "
                        "outputs) -> True"),
    DOPAMINE_PER_METHOD("sample_batch", SampleBatchPy,
                        "sample_batch(lock, tree_lock, bit_generator, masked, "
                        "indices, codes, outputs) -> bool"),
    DOPAMINE_PER_METHOD("fill_shipped_states", FillShippedStatesPy,
                        "fill_shipped_states(payload, numbers, sizes, "
                        "open_block, open_frames, ends, next_ends, capacity, "
                        "block_frames, stack, states, next_states) -> True"),
    DOPAMINE_PER_METHOD("binary_tree_set", BinaryTreeSetPy,
                        "binary_tree_set(nodes, first_leaf, leaves, values) "
                        "-> True"),
    DOPAMINE_PER_METHOD("binary_tree_query", BinaryTreeQueryPy,
                        "binary_tree_query(nodes, first_leaf, targets, out) "
                        "-> True"),
    DOPAMINE_PER_METHOD("fill_stacks", FillStacksPy,
                        "fill_stacks(frames, capacity, block_frames, "
                        "addresses, sizes, open_block, open_frames, stack, "
                        "ends, firsts, next_ends, next_firsts, states, "
                        "next_states) -> True"),
    DOPAMINE_PER_METHOD("lz4_compress", Lz4CompressPy,
                        "lz4_compress(src, level=9) -> bytes: one LZ4 block"),
    DOPAMINE_PER_METHOD("lz4_decompress", Lz4DecompressPy,
                        "lz4_decompress(src, size) -> bytes: the size bytes "
                        "of an LZ4 block"),
    {nullptr, nullptr, 0, nullptr},
};

#undef DOPAMINE_PER_METHOD

PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_replay",
    "The replay kernels of replay_core.h, called from Python "
    "(dopamine_per/native/replay_python.cc).",
    0,
    methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

}  // namespace
}  // namespace dopamine_per

PyMODINIT_FUNC PyInit__replay(void) {
  PyObject* module = PyModule_Create(&dopamine_per::module);
  if (module == nullptr) return nullptr;
  // lock_type keeps the reference PyType_FromSpec gives; the module takes
  // one of its own.
  auto* lock = reinterpret_cast<PyTypeObject*>(
      PyType_FromSpec(&dopamine_per::lock_spec));
  if (lock == nullptr || PyModule_AddType(module, lock) < 0) {
    Py_XDECREF(lock);
    Py_DECREF(module);
    return nullptr;
  }
  dopamine_per::lock_type = lock;
  PyObject* compressor = PyType_FromSpec(&dopamine_per::compressor_spec);
  if (compressor == nullptr ||
      PyModule_AddType(module,
                       reinterpret_cast<PyTypeObject*>(compressor)) < 0) {
    Py_XDECREF(compressor);
    Py_DECREF(module);
    return nullptr;
  }
  Py_DECREF(compressor);  // The module holds its own.
  return module;
}
