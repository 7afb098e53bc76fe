// The replay memory's per-batch loops in C++, the memory they act on and
// the codec of its compressed frames (lz4_block.h), one header per concern,
// which every native library includes. Every loop
// gives the same bits as replay_memory/kernels/numpy_kernels.py, the
// reference.

#ifndef DOPAMINE_PER_NATIVE_REPLAY_CORE_H_
#define DOPAMINE_PER_NATIVE_REPLAY_CORE_H_

#include "batch.h"
#include "batch_queue.h"
#include "binary_sum_tree.h"
#include "block_compressor.h"
#include "deferred_states.h"
#include "frames.h"
#include "helper_thread.h"
#include "lz4_block.h"
#include "memory.h"
#include "sampler.h"
#include "sum_tree.h"
#include "transitions.h"

#endif  // DOPAMINE_PER_NATIVE_REPLAY_CORE_H_
