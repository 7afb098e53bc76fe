// TensorFlow ops on a registered replay memory: sample a batch, gather the
// transitions at given slots, set and get priorities, read the total; and
// the op taking a sharded memory's ready batch off its queue. Each
// op finds its memory in the core library's registry and works under the
// memory's locks, Python's. Bad input is an InvalidArgument error naming
// it, and changes nothing; a memory that cannot be sampled is a
// FailedPrecondition error.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "replay_core.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/denormal.h"

namespace dopamine_per {
namespace {

using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::PartialTensorShape;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;

// TensorFlow's deprecated errors::InvalidArgument and FailedPrecondition.
namespace errors {

template <typename... Pieces>
absl::Status InvalidArgument(const Pieces&... pieces) {
  return absl::InvalidArgumentError(absl::StrCat(pieces...));
}

template <typename... Pieces>
absl::Status FailedPrecondition(const Pieces&... pieces) {
  return absl::FailedPreconditionError(absl::StrCat(pieces...));
}

template <typename... Pieces>
absl::Status DataLoss(const Pieces&... pieces) {
  return absl::DataLossError(absl::StrCat(pieces...));
}

}  // namespace errors

// The outputs' shapes: the attribute output_shapes', then `scalars`
// scalars.
absl::Status ShapesFromAttr(InferenceContext* c, int scalars) {
  std::vector<PartialTensorShape> shapes;
  TF_RETURN_IF_ERROR(c->GetAttr("output_shapes", &shapes));
  const int given = static_cast<int>(shapes.size());
  if (given + scalars != c->num_outputs()) {
    return errors::InvalidArgument("output_shapes has ", shapes.size(),
                                   " shapes for ", c->num_outputs() - scalars,
                                   " outputs");
  }
  for (int i = 0; i < given; ++i) {
    ::tensorflow::shape_inference::ShapeHandle shape;
    TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &shape));
    c->set_output(i, shape);
  }
  for (int i = given; i < c->num_outputs(); ++i) c->set_output(i, c->Scalar());
  return absl::OkStatus();
}

absl::Status OutputShapesFromAttr(InferenceContext* c) {
  return ShapesFromAttr(c, 0);
}

REGISTER_OP("DopaminePerSampleTransitions")
    .Attr("memory_id: int")
    .Attr("memory_token: int")
    .Attr("batch_size: int >= 1")
    .Attr("elements: list(string)")
    .Attr("Tout: list(type)")
    .Attr("output_shapes: list(shape)")
    .Attr("defer_states: bool = false")
    .Output("transition: Tout")
    .Output("ticket: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return ShapesFromAttr(c, 1); })
    .Doc("Samples a batch of a dopamine_per replay memory. With "
         "defer_states (to stage the batch), compressed states are decoded "
         "later: `ticket` (0 if none) is then awaited by "
         "DopaminePerAwaitStates before they are read (deferred_states.h).");

REGISTER_OP("DopaminePerAwaitStates")
    .Input("ticket: int64")
    .Input("states: T")
    .Attr("T: list(type)")
    .Output("filled: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 1; i < c->num_inputs(); ++i) {
        c->set_output(i - 1, c->input(i));
      }
      return absl::OkStatus();
    })
    .Doc("The states of a staged dopamine_per batch, once decoded.");

REGISTER_OP("DopaminePerTransitionsAt")
    .Input("indices: Tindices")
    .Attr("memory_id: int")
    .Attr("memory_token: int")
    .Attr("elements: list(string)")
    .Attr("Tindices: {int32, int64}")
    .Attr("Tout: list(type)")
    .Attr("output_shapes: list(shape)")
    .Output("transition: Tout")
    .SetIsStateful()
    .SetShapeFn(OutputShapesFromAttr)
    .Doc("The transitions of a dopamine_per replay memory at valid slots.");

REGISTER_OP("DopaminePerSetPriority")
    .Input("indices: Tindices")
    .Input("priorities: Tpriorities")
    .Attr("memory_id: int")
    .Attr("memory_token: int")
    .Attr("Tindices: {int32, int64}")
    .Attr("Tpriorities: {float, double}")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Sets priorities of a dopamine_per prioritized replay memory.");

REGISTER_OP("DopaminePerGetPriority")
    .Input("indices: Tindices")
    .Attr("memory_id: int")
    .Attr("memory_token: int")
    .Attr("Tindices: {int32, int64}")
    .Output("priorities: float")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc("Priorities of a dopamine_per prioritized replay memory.");

REGISTER_OP("DopaminePerTotalPriority")
    .Attr("memory_id: int")
    .Attr("memory_token: int")
    .Output("total: double")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc("The total priority of a dopamine_per prioritized replay memory.");

// What an op needs of every kernel: its memory, found and locked.
class MemoryOp : public OpKernel {
 public:
  explicit MemoryOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("memory_id", &memory_id_));
    int64_t token = 0;
    OP_REQUIRES_OK(context, context->GetAttr("memory_token", &token));
    memory_token_ = static_cast<uint64_t>(token);
  }

 protected:
  // The memory, or nullptr with an error set on the context: the op's
  // memory must be this process's, by id and token, never another's.
  std::shared_ptr<Memory> Find(OpKernelContext* context) {
    bool foreign = false;
    std::shared_ptr<Memory> memory =
        FindMemory(memory_id_, memory_token_, &foreign);
    if (foreign) {
      context->SetStatus(errors::InvalidArgument(
          "dopamine_per replay memory ", memory_id_, " of this op is not in "
          "this process: the graph was built by another process (a GraphDef, "
          "meta graph or SavedModel); build the replay ops anew on a memory "
          "of this process"));
    } else if (memory == nullptr) {
      context->SetStatus(errors::FailedPrecondition(
          "dopamine_per replay memory ", memory_id_,
          " does not exist (it was deleted)"));
    }
    return memory;
  }

  // Checks what needs the lock: the memory is bound and of the right kind.
  bool Usable(OpKernelContext* context, const Memory& memory,
              bool prioritized) {
    if (!memory.bound) {
      context->SetStatus(errors::FailedPrecondition(
          "dopamine_per replay memory ", memory_id_, " was deleted"));
      return false;
    }
    if (prioritized && !memory.prioritized) {
      context->SetStatus(errors::InvalidArgument(
          "dopamine_per replay memory ", memory_id_,
          " is not a prioritized memory: it has no priorities"));
      return false;
    }
    return true;
  }

  int64_t memory_id_;
  uint64_t memory_token_;
};

// Reads a 1-D integer tensor as int64.
template <typename Index>
std::vector<int64_t> AsInt64(const Tensor& tensor) {
  auto flat = tensor.flat<Index>();
  return std::vector<int64_t>(flat.data(), flat.data() + flat.size());
}

std::vector<int64_t> IndicesOf(const Tensor& tensor) {
  return tensor.dtype() == ::tensorflow::DT_INT32 ? AsInt64<int32_t>(tensor)
                                                  : AsInt64<int64_t>(tensor);
}

// The error for the first index outside [0, capacity) (Python's wording),
// or OK.
absl::Status CheckRange(const std::vector<int64_t>& indices,
                        int64_t capacity) {
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= capacity) {
      return errors::InvalidArgument("indices must be in [0, ", capacity,
                                     "). Got: ", indices[i], " (indices[", i,
                                     "]); nothing was written");
    }
  }
  return absl::OkStatus();
}

// Python's repr of a float: the shortest digits that read back as `value`,
// positional from 1e-4 up to 1e16 ("100.0", "0.0001"), else in scientific
// notation with a signed exponent of two digits or more ("3.4028235e+38",
// "1e-05"); "nan", "inf", "-inf".
std::string PythonRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  const std::to_chars_result result = std::to_chars(
      buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const std::string text(buffer, result.ptr);  // [-]d[.ddd]e(+|-)dd[d]
  const size_t e = text.find('e');
  const int exponent = std::stoi(text.substr(e + 1));
  if (exponent < -4 || exponent >= 16) return text;  // As Python writes it.
  const std::string sign = text[0] == '-' ? "-" : "";
  std::string digits = text.substr(sign.size(), e - sign.size());
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int point = exponent + 1;  // Digits before the decimal point.
  const int count = static_cast<int>(digits.size());
  if (point <= 0) return sign + "0." + std::string(-point, '0') + digits;
  if (point >= count) {
    return sign + digits + std::string(point - count, '0') + ".0";
  }
  return sign + digits.substr(0, point) + "." + digits.substr(point);
}

// The name of the float dtype whose smallest positive value is `smallest`,
// a memory's lowest priority bound (float32 for the prioritized memory).
const char* PriorityDtypeName(double smallest) {
  if (smallest == std::numeric_limits<float>::denorm_min()) return "float32";
  if (smallest == std::numeric_limits<double>::denorm_min()) return "float64";
  if (smallest == std::ldexp(1.0, -24)) return "float16";
  return "the priority dtype";
}

// The error for a priority that is neither 0 nor in [m.smallest,
// m.largest]: the very text of `set_priority`'s ValueError
// (validation._range_error), so that both paths say the same.
absl::Status PriorityOutOfRange(double smallest, double largest,
                                double value) {
  return errors::InvalidArgument(
      "priorities should be nonnegative and finite: 0 or in [",
      PythonRepr(smallest), ", ", PythonRepr(largest),
      "] (the positive range of ", PriorityDtypeName(smallest), "). Got ",
      PythonRepr(value));
}

// Reads a priority update's inputs 0 (indices, an array) and 1 (priorities
// of its shape, or a scalar), checked against [0, capacity) and [smallest,
// largest] (or 0). Call with subnormals kept (see SetPriorityOp).
absl::Status ReadPriorityUpdate(OpKernelContext* context, int64_t capacity,
                                double smallest, double largest,
                                std::vector<int64_t>* indices,
                                std::vector<double>* values) {
  const Tensor& indices_tensor = context->input(0);
  const Tensor& priorities_tensor = context->input(1);
  if (priorities_tensor.shape() != indices_tensor.shape() &&
      priorities_tensor.dims() != 0) {
    return errors::InvalidArgument(
        "priorities of shape ", priorities_tensor.shape().DebugString(),
        " do not match indices of shape ",
        indices_tensor.shape().DebugString(), "; nothing was written");
  }
  if (indices_tensor.dims() < 1) {
    return errors::InvalidArgument(
        "indices must be an array, not a scalar (as set_priority's)");
  }
  *indices = IndicesOf(indices_tensor);
  values->resize(indices->size());
  for (size_t i = 0; i < values->size(); ++i) {
    const size_t j = priorities_tensor.dims() == 0 ? 0 : i;
    (*values)[i] = priorities_tensor.dtype() == ::tensorflow::DT_FLOAT
                       ? priorities_tensor.flat<float>()(j)
                       : priorities_tensor.flat<double>()(j);
  }
  TF_RETURN_IF_ERROR(CheckRange(*indices, capacity));
  for (const double value : *values) {
    if (value != 0.0 && !(value >= smallest && value <= largest)) {
      return PriorityOutOfRange(smallest, largest, value);
    }
  }
  return absl::OkStatus();
}

// Writes the priorities at `indices` (valid leaves) to `out` as float32,
// as FillBatch fills sampling_probabilities, subnormals kept (see
// SetPriorityOp).
void PrioritiesAsFloat(const Memory& m, const int64_t* indices,
                       int64_t count, float* out) {
  ::tensorflow::port::ScopedDontFlushDenormal keep_subnormals;
  BatchOutput priorities{Fill::kRow, nullptr};
  int64_t row_bytes = 0;
  OutputFor(m, kPrioritiesCode, reinterpret_cast<uint8_t*>(out), &priorities,
            &row_bytes);
  FillRows(priorities, indices, count);
}

// ------------------------------------------------------------ transitions

// The error of a batch whose compressed frames do not decode.
constexpr char kUndecodable[] =
    "a compressed frame block of the replay memory does not decode";

class TransitionsOp : public MemoryOp {
 public:
  explicit TransitionsOp(OpKernelConstruction* context) : MemoryOp(context) {
    OP_REQUIRES_OK(context, context->GetAttr("elements", &elements_));
    OP_REQUIRES_OK(context, context->GetAttr("Tout", &types_));
    std::vector<PartialTensorShape> shapes;
    OP_REQUIRES_OK(context, context->GetAttr("output_shapes", &shapes));
    OP_REQUIRES(context, shapes.size() == types_.size(),
                errors::InvalidArgument(
                    "output_shapes and Tout differ in length"));
    for (const PartialTensorShape& shape : shapes) {
      // Each element's shape after the batch dimension: fully known.
      TensorShape row;
      for (int d = 1; d < shape.dims(); ++d) {
        OP_REQUIRES(context, shape.dim_size(d) >= 0,
                    errors::InvalidArgument(
                        "output_shapes must be known but for the batch "
                        "dimension, got ", shape.DebugString()));
        row.AddDim(shape.dim_size(d));
      }
      OP_REQUIRES(context, shape.dims() >= 1,
                  errors::InvalidArgument("output_shapes must have a batch "
                                          "dimension"));
      rows_.push_back(row);
      batches_.push_back(shape.dim_size(0));  // -1: unknown.
    }
    OP_REQUIRES(context, elements_.size() == types_.size(),
                errors::InvalidArgument("elements and Tout differ in length"));
    // Each element parsed once, here.
    for (const std::string& name : elements_) {
      const int64_t code = ElementCode(name);
      OP_REQUIRES(context, code >= 0,
                  errors::InvalidArgument("unknown transition element ",
                                          name));
      prioritized_ = prioritized_ || code == kPrioritiesCode;
      codes_.push_back(code);
    }
    sampling_ = !context->HasAttr("Tindices");
    if (sampling_) {
      OP_REQUIRES_OK(context, context->GetAttr("batch_size", &batch_size_));
      OP_REQUIRES_OK(context,
                     context->GetAttr("defer_states", &defer_states_));
      for (size_t i = 0; i < batches_.size(); ++i) {
        OP_REQUIRES(context, batches_[i] < 0 || batches_[i] == batch_size_,
                    errors::InvalidArgument(
                        "batch_size is ", batch_size_, " but element ",
                        elements_[i], " has a batch of ", batches_[i],
                        " in output_shapes"));
      }
    }
  }

  void Compute(OpKernelContext* context) override {
    std::shared_ptr<Memory> memory = Find(context);
    if (memory == nullptr) return;
    std::vector<int64_t> given;
    if (!sampling_) {
      const Tensor& tensor = context->input(0);
      OP_REQUIRES(context, tensor.dims() == 1,
                  errors::InvalidArgument("indices must be a vector, got "
                                          "shape ",
                                          tensor.shape().DebugString()));
      OP_REQUIRES(context, tensor.NumElements() > 0,
                  errors::InvalidArgument("indices must not be empty"));
      // The outputs' static batch dimension must be the indices' length.
      for (size_t i = 0; i < batches_.size(); ++i) {
        OP_REQUIRES(context,
                    batches_[i] < 0 || batches_[i] == tensor.NumElements(),
                    errors::InvalidArgument(
                        "indices has ", tensor.NumElements(), " elements but "
                        "element ", elements_[i], " has a batch of ",
                        batches_[i], " in output_shapes"));
      }
      given = IndicesOf(tensor);
    }
    // Storage, then tree: the draws read the tree, the batch both.
    std::scoped_lock lock(memory->mutex, memory->tree_mutex);
    if (!Usable(context, *memory, prioritized_)) return;
    Memory& m = *memory;
    std::vector<int64_t> indices;
    if (sampling_) {
      OP_REQUIRES(context, batch_size_ <= m.capacity,
                  errors::InvalidArgument(
                      "batch_size ", batch_size_, " exceeds the replay "
                      "memory's capacity ", m.capacity));
      indices.resize(batch_size_);
      GeneratorDraws draws{m.rng};
      const std::string error =
          SampleIndices(m, batch_size_, draws, indices.data());
      OP_REQUIRES(context, error.empty(), errors::FailedPrecondition(error));
    } else {
      indices.swap(given);
      std::vector<uint8_t> valid(indices.size());
      ValidSlots(m, indices.data(), indices.size(), valid.data());
      for (size_t b = 0; b < indices.size(); ++b) {
        OP_REQUIRES(context, valid[b],
                    errors::InvalidArgument(
                        "indices[", b, "] = ", indices[b],
                        " is not a valid transition of the replay memory "
                        "(out of range, not written yet, or across an "
                        "episode's start or the cursor)"));
      }
    }
    Gather(context, m, indices);
  }

 private:
  // Allocates output `i` of `count` rows of `row_bytes`; nullptr on error.
  uint8_t* Output(OpKernelContext* context, int i, int64_t count,
                  int64_t row_bytes) {
    TensorShape shape({count});
    shape.AppendShape(rows_[i]);
    Tensor* tensor = nullptr;
    absl::Status status = context->allocate_output(i, shape, &tensor);
    if (!status.ok()) {
      context->SetStatus(status);
      return nullptr;
    }
    if (static_cast<int64_t>(tensor->TotalBytes()) != count * row_bytes) {
      context->SetStatus(errors::InvalidArgument(
          "element ", elements_[i], ": the op's dtype and shape hold ",
          tensor->TotalBytes(), " bytes, the replay memory's ",
          count * row_bytes, " (the memory's layout changed?)"));
      return nullptr;
    }
    return static_cast<uint8_t*>(tensor->data());
  }

  // The batch of `indices` (valid slots) into newly allocated outputs.
  void Gather(OpKernelContext* context, const Memory& m,
              const std::vector<int64_t>& indices) {
    const int64_t count = static_cast<int64_t>(indices.size());
    std::vector<BatchOutput> outputs(codes_.size());
    for (int i = 0; i < static_cast<int>(codes_.size()); ++i) {
      int64_t row_bytes = 0;
      OP_REQUIRES(context,
                  OutputFor(m, codes_[i], nullptr, &outputs[i], &row_bytes),
                  errors::InvalidArgument("the replay memory has no element ",
                                          elements_[i]));
      outputs[i].out = Output(context, i, count, row_bytes);
      if (outputs[i].out == nullptr) return;
    }
    // Priorities are read with subnormals kept (see PrioritiesAsFloat).
    ::tensorflow::port::ScopedDontFlushDenormal keep_subnormals;
    const BatchSource source = SourceOf(m);
    const Walked walked = Walk(source, indices.data(), count);
    // Compressed states to stage are decoded later (deferred_states.h).
    const bool defer = defer_states_ && source.frames == nullptr;
    OP_REQUIRES(context,
                FillBatch(source, indices.data(), count, walked,
                          outputs.data(),
                          static_cast<int64_t>(outputs.size()),
                          defer ? kScalarPart | kRowPart : kWholeBatch),
                errors::DataLoss(kUndecodable));
    if (!sampling_) return;
    Tensor* ticket = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(
                                static_cast<int>(codes_.size()),
                                TensorShape({}), &ticket));
    ticket->scalar<int64_t>()() =
        defer ? Defer(context, source, indices, walked, outputs) : 0;
  }

  // Leaves the batch's states to DeferredDecoder, with copies of the
  // blocks they read: their ticket (0 if the batch has no states).
  int64_t Defer(OpKernelContext* context, const BatchSource& source,
                const std::vector<int64_t>& indices, const Walked& walked,
                const std::vector<BatchOutput>& outputs) {
    uint8_t* states = nullptr;
    uint8_t* next_states = nullptr;
    auto held = std::make_shared<std::vector<Tensor>>();
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].kind == Fill::kState) {
        states = outputs[i].out;
      } else if (outputs[i].kind == Fill::kNextState) {
        next_states = outputs[i].out;
      } else {
        continue;
      }
      held->push_back(*context->mutable_output(static_cast<int>(i)));
    }
    if (held->empty()) return 0;
    const int64_t count = static_cast<int64_t>(indices.size());
    return DeferredDecoder::Get().Submit(std::make_shared<DeferredStates>(
        CopyBlocks(StoreOf(source), source.stack, indices.data(),
                   walked.next.data(), count),
        indices, walked.next, source.pixels, source.item, source.stack,
        states, next_states, held));
  }

  std::vector<std::string> elements_;
  std::vector<int64_t> codes_;  // ElementCode of each element.
  bool prioritized_ = false;    // It reads priorities.
  std::vector<DataType> types_;
  std::vector<TensorShape> rows_;
  std::vector<int64_t> batches_;
  bool sampling_ = true;
  bool defer_states_ = false;
  int64_t batch_size_ = 0;
};

REGISTER_KERNEL_BUILDER(
    Name("DopaminePerSampleTransitions").Device(::tensorflow::DEVICE_CPU),
    TransitionsOp);
REGISTER_KERNEL_BUILDER(
    Name("DopaminePerTransitionsAt").Device(::tensorflow::DEVICE_CPU),
    TransitionsOp);

// The states of a staged batch (the inputs after the ticket), passed on
// once its deferred decode is done: the rows the background thread has
// not claimed are decoded here.
class AwaitStatesOp : public OpKernel {
 public:
  explicit AwaitStatesOp(OpKernelConstruction* context)
      : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& ticket = context->input(0);
    OP_REQUIRES(context, ticket.dims() == 0,
                errors::InvalidArgument("ticket must be a scalar, got shape ",
                                        ticket.shape().DebugString()));
    const int64_t value = ticket.scalar<int64_t>()();
    if (value != 0) {
      std::shared_ptr<DeferredStates> job;
      OP_REQUIRES(context, DeferredDecoder::Get().Take(value, &job),
                  errors::InvalidArgument("ticket ", value, " names no "
                                          "staged batch of this process"));
      OP_REQUIRES(context, job == nullptr || job->Finish(),
                  errors::DataLoss(kUndecodable));
    }
    for (int i = 1; i < context->num_inputs(); ++i) {
      context->set_output(i - 1, context->input(i));
    }
  }
};

REGISTER_KERNEL_BUILDER(
    Name("DopaminePerAwaitStates").Device(::tensorflow::DEVICE_CPU),
    AwaitStatesOp);

// ----------------------------------------------------------- batch queue

REGISTER_OP("DopaminePerDequeueBatch")
    .Attr("queue_id: int")
    .Attr("queue_token: int")
    .Attr("state_outputs: list(int)")
    .Attr("timeout_s: float")
    .Attr("Tout: list(type)")
    .Attr("output_shapes: list(shape)")
    .Output("transition: Tout")
    .SetIsStateful()
    .SetShapeFn(OutputShapesFromAttr)
    .Doc("Takes a ready batch off a dopamine_per batch queue.");

// Takes the oldest batch of a registered BatchQueue (waiting up to
// timeout_s for one) into its outputs; fills the states (outputs
// state_outputs[0] and [1]) of rows whose shard shipped compressed blocks
// by decoding those (FillShippedStates). A queued error is raised as is.
class DequeueBatchOp : public OpKernel {
 public:
  explicit DequeueBatchOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("queue_id", &queue_id_));
    int64_t token = 0;
    OP_REQUIRES_OK(context, context->GetAttr("queue_token", &token));
    queue_token_ = static_cast<uint64_t>(token);
    OP_REQUIRES_OK(context, context->GetAttr("state_outputs", &states_));
    OP_REQUIRES_OK(context, context->GetAttr("timeout_s", &timeout_s_));
    OP_REQUIRES_OK(context, context->GetAttr("Tout", &types_));
    std::vector<PartialTensorShape> shapes;
    OP_REQUIRES_OK(context, context->GetAttr("output_shapes", &shapes));
    OP_REQUIRES(context, shapes.size() == types_.size() && states_.size() == 2,
                errors::InvalidArgument("output_shapes and Tout differ in "
                                        "length, or state_outputs is not 2"));
    for (const PartialTensorShape& partial : shapes) {
      TensorShape shape;
      OP_REQUIRES(context, partial.AsTensorShape(&shape) && shape.dims() >= 1,
                  errors::InvalidArgument("output_shapes must be fully known "
                                          "with a batch dimension, got ",
                                          partial.DebugString()));
      shapes_.push_back(shape);
    }
    for (const int64_t state : states_) {
      OP_REQUIRES(context,
                  state >= -1 && state < static_cast<int64_t>(shapes_.size()),
                  errors::InvalidArgument("state_outputs out of range"));
    }
  }

  void Compute(OpKernelContext* context) override {
    bool foreign = false;
    std::shared_ptr<BatchQueue> queue =
        FindQueue(queue_id_, queue_token_, &foreign);
    OP_REQUIRES(context, !foreign,
                errors::InvalidArgument(
                    "dopamine_per batch queue ", queue_id_, " of this op is "
                    "not in this process: build the replay ops anew"));
    OP_REQUIRES(context, queue != nullptr, Closed());
    PopStatus status;
    std::unique_ptr<ReadyBatch> batch = queue->Pop(timeout_s_, &status);
    OP_REQUIRES(context, status != PopStatus::kClosed, Closed());
    OP_REQUIRES(context, status != PopStatus::kTimedOut,
                absl::DeadlineExceededError(absl::StrCat(
                    "no replay batch was ready within ", timeout_s_,
                    " s (the sharded memory's fetch-ahead thread did not "
                    "deliver)")));
    OP_REQUIRES(context, batch->error_code == 0,
                absl::Status(static_cast<absl::StatusCode>(batch->error_code),
                             batch->error));
    OP_REQUIRES(context, batch->elements.size() == shapes_.size(),
                errors::InvalidArgument("a queued batch has ",
                                        batch->elements.size(),
                                        " elements, the op ", shapes_.size()));
    std::vector<Tensor*> outputs(shapes_.size(), nullptr);
    for (size_t i = 0; i < shapes_.size(); ++i) {
      OP_REQUIRES_OK(context,
                     context->allocate_output(i, shapes_[i], &outputs[i]));
      const std::vector<uint8_t>& bytes = batch->elements[i];
      if (bytes.empty() && IsState(i) && !batch->parts.empty()) continue;
      OP_REQUIRES(context, bytes.size() == outputs[i]->TotalBytes(),
                  errors::InvalidArgument(
                      "element ", i, " of a queued batch has ", bytes.size(),
                      " bytes, the op's output ", outputs[i]->TotalBytes()));
      std::memcpy(outputs[i]->data(), bytes.data(), bytes.size());
    }
    if (batch->parts.empty()) return;
    OP_REQUIRES(context, states_[0] >= 0 && states_[1] >= 0,
                errors::InvalidArgument("a queued batch ships states, but the "
                                        "op has no state outputs"));
    FillParts(context, *batch, outputs[states_[0]], outputs[states_[1]]);
  }

 private:
  static absl::Status Closed() {
    return errors::FailedPrecondition(
        "the sharded replay memory's batch queue is closed");
  }

  bool IsState(size_t i) const {
    return static_cast<int64_t>(i) == states_[0] ||
           static_cast<int64_t>(i) == states_[1];
  }

  // Fills the rows of every part of `batch` into `states`, `next_states`
  // ([batch, *frame, stack] each) with FillQueuedStates.
  void FillParts(OpKernelContext* context, const ReadyBatch& batch,
                 Tensor* states, Tensor* next_states) {
    const int64_t rows = states->dim_size(0);
    const int64_t stack = states->dim_size(states->dims() - 1);
    const int64_t item = ::tensorflow::DataTypeSize(states->dtype());
    OP_REQUIRES(context, rows > 0 && stack > 0 && item > 0 &&
                             states->shape() == next_states->shape(),
                errors::InvalidArgument("unusable state outputs"));
    bool decoded = true;
    const std::string error = FillQueuedStates(
        batch, rows, states->TotalBytes() / rows, stack, item,
        static_cast<uint8_t*>(states->data()),
        static_cast<uint8_t*>(next_states->data()), &decoded);
    OP_REQUIRES(context, decoded, errors::DataLoss(error));
    OP_REQUIRES(context, error.empty(), errors::InvalidArgument(error));
  }

  int64_t queue_id_;
  uint64_t queue_token_;
  std::vector<int64_t> states_;
  float timeout_s_;
  std::vector<DataType> types_;
  std::vector<TensorShape> shapes_;
};

REGISTER_KERNEL_BUILDER(
    Name("DopaminePerDequeueBatch").Device(::tensorflow::DEVICE_CPU),
    DequeueBatchOp);

REGISTER_OP("DopaminePerQueuePriorities")
    .Input("indices: Tindices")
    .Input("priorities: Tpriorities")
    .Attr("queue_id: int")
    .Attr("queue_token: int")
    .Attr("capacity: int >= 1")
    .Attr("Tindices: {int32, int64}")
    .Attr("Tpriorities: {float, double}")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc("Queues priority updates of a dopamine_per sharded memory.");

// Checks a priority update of a sharded memory of `capacity` global slots
// (float32 priorities, as its set_priority) and appends it to its batch
// queue's updates, which the memory sends with its next draw.
class QueuePrioritiesOp : public OpKernel {
 public:
  explicit QueuePrioritiesOp(OpKernelConstruction* context)
      : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("queue_id", &queue_id_));
    int64_t token = 0;
    OP_REQUIRES_OK(context, context->GetAttr("queue_token", &token));
    queue_token_ = static_cast<uint64_t>(token);
    OP_REQUIRES_OK(context, context->GetAttr("capacity", &capacity_));
  }

  void Compute(OpKernelContext* context) override {
    ::tensorflow::port::ScopedDontFlushDenormal keep_subnormals;
    std::vector<int64_t> indices;
    std::vector<double> values;
    // float32's bounds as validation.priority_bounds gives them: the
    // largest as NumPy prints it, which rounds to float32's largest.
    OP_REQUIRES_OK(context, ReadPriorityUpdate(
                                context, capacity_,
                                std::numeric_limits<float>::denorm_min(),
                                3.4028235e38, &indices, &values));
    bool foreign = false;
    std::shared_ptr<BatchQueue> queue =
        FindQueue(queue_id_, queue_token_, &foreign);
    OP_REQUIRES(context, queue != nullptr && !foreign,
                errors::FailedPrecondition(
                    "the sharded replay memory's batch queue ", queue_id_,
                    " is closed or not in this process"));
    OP_REQUIRES(context, queue->AddPriorities(indices, values),
                errors::FailedPrecondition(
                    "the sharded replay memory's batch queue is closed"));
  }

 private:
  int64_t queue_id_;
  uint64_t queue_token_;
  int64_t capacity_;
};

REGISTER_KERNEL_BUILDER(
    Name("DopaminePerQueuePriorities").Device(::tensorflow::DEVICE_CPU),
    QueuePrioritiesOp);

// ------------------------------------------------------------- priorities

class SetPriorityOp : public MemoryOp {
 public:
  using MemoryOp::MemoryOp;

  void Compute(OpKernelContext* context) override {
    // TensorFlow runs kernels with subnormals flushed to 0: a float32
    // priority below 2**-126 (valid down to 2**-149) would be read as 0,
    // and a float64 subnormal (below float32's range) would compare equal
    // to 0 and be written. Priorities are read and checked as they are.
    ::tensorflow::port::ScopedDontFlushDenormal keep_subnormals;
    std::shared_ptr<Memory> memory = Find(context);
    if (memory == nullptr) return;
    std::lock_guard<std::timed_mutex> lock(memory->tree_mutex);
    if (!Usable(context, *memory, true)) return;
    Memory& m = *memory;
    std::vector<int64_t> indices;
    std::vector<double> values;
    OP_REQUIRES_OK(context, ReadPriorityUpdate(context, m.capacity,
                                               m.smallest, m.largest,
                                               &indices, &values));
    if (indices.empty()) return;
    double written_max = 0.0;
    m.tree_scalars[0] = WriteLeaves(m.tree, indices.data(), values.data(),
                                    indices.size(), &written_max);
    m.tree_scalars[1] = std::max(m.tree_scalars[1], written_max);
  }
};

class GetPriorityOp : public MemoryOp {
 public:
  using MemoryOp::MemoryOp;

  void Compute(OpKernelContext* context) override {
    const Tensor& indices_tensor = context->input(0);
    OP_REQUIRES(context, indices_tensor.dims() >= 1,
                errors::InvalidArgument(
                    "indices must be an array, not a scalar (as "
                    "get_priority's)"));
    const std::vector<int64_t> indices = IndicesOf(indices_tensor);
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(
                                0, indices_tensor.shape(), &output));
    std::shared_ptr<Memory> memory = Find(context);
    if (memory == nullptr) return;
    std::lock_guard<std::timed_mutex> lock(memory->tree_mutex);
    if (!Usable(context, *memory, true)) return;
    OP_REQUIRES_OK(context, CheckRange(indices, memory->capacity));
    PrioritiesAsFloat(*memory, indices.data(), indices.size(),
                      output->flat<float>().data());
  }
};

class TotalPriorityOp : public MemoryOp {
 public:
  using MemoryOp::MemoryOp;

  void Compute(OpKernelContext* context) override {
    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}),
                                                     &output));
    std::shared_ptr<Memory> memory = Find(context);
    if (memory == nullptr) return;
    std::lock_guard<std::timed_mutex> lock(memory->tree_mutex);
    if (!Usable(context, *memory, true)) return;
    output->scalar<double>()() = memory->tree_scalars[0];
  }
};

REGISTER_KERNEL_BUILDER(
    Name("DopaminePerSetPriority").Device(::tensorflow::DEVICE_CPU),
    SetPriorityOp);
REGISTER_KERNEL_BUILDER(
    Name("DopaminePerGetPriority").Device(::tensorflow::DEVICE_CPU),
    GetPriorityOp);
REGISTER_KERNEL_BUILDER(
    Name("DopaminePerTotalPriority").Device(::tensorflow::DEVICE_CPU),
    TotalPriorityOp);

}  // namespace
}  // namespace dopamine_per
