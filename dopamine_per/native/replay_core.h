// The replay memory's per-batch loops in C++, and the memory they act on,
// one header per concern: the sum tree (sum_tree.h), transitions and
// returns (transitions.h), frame stacks (frames.h), filling a batch
// (batch.h), the shared memory and its registry (memory.h), the sampling
// policy (sampler.h).
//
// Compiled into three shared objects: the TensorFlow-free core library
// (replay_core.cc: the registry of memories, a C interface for Python's
// ctypes), the Python extension (replay_python.cc: the kernels and the
// memory's Lock) and the TensorFlow ops (replay_ops.cc). Every loop gives
// the same bits as dopamine_per/replay_memory/kernels/numpy_kernels.py, the
// reference.

#ifndef DOPAMINE_PER_NATIVE_REPLAY_CORE_H_
#define DOPAMINE_PER_NATIVE_REPLAY_CORE_H_

#include "batch.h"
#include "frames.h"
#include "memory.h"
#include "sampler.h"
#include "sum_tree.h"
#include "transitions.h"

#endif  // DOPAMINE_PER_NATIVE_REPLAY_CORE_H_
