"""Float32 weight gradients for a mixed_float16 model: a gradient override that must cover
every weight.

A float16 op rounds each weight gradient (a sum over all batch * seq rows) to float16, so one batch
of k * b and k passes of b would differ. Under this override (tf.Graph.gradient_override_map) the
ops that consume a weight compute its gradient from the same float16 operands cast to float32
(float16 products are exact in float32); activation gradients stay float16. `traced_gradients`
raises `OverrideError` at trace time when a weight read in float16 is not covered, or none is.
"""

import contextlib
import threading

import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops  # get_gradient_function: no public API

from squad_qa import errors

# The op types tfm's span model feeds a (cast) variable into under mixed_float16 (the word
# embedding's ResourceGather has a per-row gradient).
WEIGHT_CONSUMING_OPS = ("AddV2", "BiasAdd", "BroadcastTo", "Einsum", "MatMul")
_GRADIENT_NAME = "SquadQaFloat32WeightGradient"
# Ops between a variable's float32 read and the float16 tensor an op consumes.
_VARIABLE_VIEW_OPS = ("Cast", "Identity", "Reshape", "StridedSlice")


class OverrideError(errors.UserError):
  """The override did not cover every weight read in float16 (TensorFlow or tfm changed).

  Not a RuntimeError, which autograph would turn into a StagingError; `str()` drops the traced call
  stack autograph prefixes.
  """

  def __str__(self):
    return error_line(super().__str__())


def error_line(message):
  """An OverrideError's own one-line message, without the call stack autograph puts first."""
  return message.strip().splitlines()[-1].strip().removeprefix("OverrideError: ")


def _variable_read(tensor):
  """The ReadVariableOp `tensor` is a (cast, sliced, reshaped) view of, or None."""
  op = tensor.op
  while op.type in _VARIABLE_VIEW_OPS:
    op = op.inputs[0].op
  return op if op.type == "ReadVariableOp" else None


def _recreate(op, inputs):
  """`op` (one of WEIGHT_CONSUMING_OPS) applied to `inputs` instead: its first output."""
  if op.type == "Einsum":
    return tf.raw_ops.Einsum(inputs=inputs, equation=op.get_attr("equation"))
  if op.type == "MatMul":
    return tf.raw_ops.MatMul(a=inputs[0], b=inputs[1], transpose_a=op.get_attr("transpose_a"),
                             transpose_b=op.get_attr("transpose_b"))
  if op.type == "BiasAdd":
    return tf.raw_ops.BiasAdd(value=inputs[0], bias=inputs[1],
                              data_format=op.get_attr("data_format"))
  if op.type == "BroadcastTo":
    return tf.raw_ops.BroadcastTo(input=inputs[0], shape=inputs[1])
  return tf.raw_ops.AddV2(x=inputs[0], y=inputs[1])


# ReadVariableOps whose float16 view got a float32 gradient (trace time). Per thread: a
# MirroredStrategy traces its replicas' steps concurrently, one thread each, into one graph.
_local = threading.local()


def _covered_reads():
  if not hasattr(_local, "reads"):
    _local.reads = []
  return _local.reads


@tf.RegisterGradient(_GRADIENT_NAME)
def _float32_weight_gradient(op, grad):
  """The op's own gradients, but float32 ones for its float16 inputs that read a variable."""
  float16_op = _recreate(op, list(op.inputs)).op
  gradients = list(tf_ops.get_gradient_function(float16_op)(float16_op, grad))
  weights = [
      i for i, t in enumerate(op.inputs) if t.dtype == tf.float16 and _variable_read(t) is not None
  ]
  if weights:
    _covered_reads().extend(_variable_read(op.inputs[i]) for i in weights)
    float32_op = _recreate(
        op, [tf.cast(t, tf.float32) if t.dtype == tf.float16 else t for t in op.inputs]).op
    float32_gradients = tf_ops.get_gradient_function(float32_op)(float32_op,
                                                                 tf.cast(grad, tf.float32))
    for i in weights:
      gradients[i] = float32_gradients[i]
  return gradients


@contextlib.contextmanager
def override_weight_gradients(op_types=None):
  """Gives the ops of `op_types` (default WEIGHT_CONSUMING_OPS) traced inside the float32 override.

  Wrap the forward pass in a tf.function, then call `traced_gradients` (a GradientTape ignores
  gradient_override_map).
  """
  overrides = {t: _GRADIENT_NAME for t in (WEIGHT_CONSUMING_OPS if op_types is None else op_types)}
  with tf.compat.v1.get_default_graph().gradient_override_map(overrides):
    yield


def _eager_handle(tensor):
  """The outermost tensor a captured placeholder stands for (through nested function graphs)."""
  graph = tensor.graph
  while graph is not None and hasattr(graph, "captures"):
    outer = [external for external, internal in graph.captures if internal is tensor]
    if not outer:
      return tensor
    tensor = outer[0]
    graph = getattr(graph, "outer_graph", None)
  return tensor


# Consumers whose weight gradient is per row (no sum over the batch).
_PER_ROW_CONSUMERS = ("GatherV2", "ResourceGather")


def _float16_reads(graph):
  """ReadVariableOps of `graph` cast to float16 and used by an op that sums over the batch."""
  reads = []
  for op in graph.get_operations():
    if op.type == "Cast" and op.get_attr("DstT") == tf.float16:
      read = _variable_read(op.outputs[0])
      consumers = op.outputs[0].consumers()
      if (read is not None and read.outputs[0].dtype == tf.float32 and consumers and
          not all(c.type in _PER_ROW_CONSUMERS for c in consumers)):
        reads.append(read)
  return reads


def _names_by_handle(variables):
  """{id of a variable's (this replica's) handle: variable name}."""
  return {id(v.handle): v.name for v in variables}


def _read_names(reads, by_handle):
  """{ReadVariableOp: name of the variable it reads}, for variables in `by_handle`."""
  names = {}
  for read in reads:
    name = by_handle.get(id(_eager_handle(read.inputs[0])))
    if name is not None:
      names[read] = name
  return names


def traced_gradients(loss, variables):
  """tf.gradients(loss, variables) in the graph of a forward pass traced under
  `override_weight_gradients`.

  Raises:
    OverrideError: a variable read as float16 got no float32 gradient (named in the message), or
      none did.
  """
  graph = tf.compat.v1.get_default_graph()
  reads = _covered_reads()
  start = len(reads)
  gradients = tf.gradients(loss, variables)
  covered = {id(read) for read in reads[start:]}
  del reads[start:]
  needed = _read_names(_float16_reads(graph), _names_by_handle(variables))
  missed = sorted({name for read, name in needed.items() if id(read) not in covered})
  if not covered or missed:
    raise OverrideError(
        f"the float32 weight-gradient override "
        f"(op types {', '.join(WEIGHT_CONSUMING_OPS) or 'none'}) "
        f"covered {len(covered)} float16 weight reads and missed {len(missed)} weights "
        f"({', '.join(missed[:3])}{' ...' if len(missed) > 3 else ''}); train with "
        f"--nofloat32_weight_gradients or update model/float32_gradients.py")
  return gradients


def covered_variable_names(loss_fn, variables):
  """Sorted names of the `variables` whose float16 reads get a float32 gradient when
  `loss_fn()` (returning the loss) is traced once."""
  names = []

  @tf.function
  def trace():
    with override_weight_gradients():
      loss = loss_fn()
    reads = _covered_reads()
    start = len(reads)
    tf.gradients(loss, variables)
    names.extend(_read_names(reads[start:], _names_by_handle(variables)).values())
    del reads[start:]
    return loss

  trace.get_concrete_function()
  return sorted(set(names))
