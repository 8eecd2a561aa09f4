"""A span model's logits as a concrete function whose weights are graph constants, for exports that
compute in 16 bits.

A 16-bit model keeps float32 variables and casts every weight on every call. Frozen, the weights
it casts are stored in its dtype (the cast done once, at export; the export half as large), and
oneDNN keeps its matmuls' weights in the blocked layout it chose once instead of reading them
plain on each call. Side by side on a 2-core Xeon
with AMX (MiniLM-L6, bfloat16, docs/serving.md "Weights as constants"): one 221-token window
26 -> 18 ms, batched prediction over 1,000 dev windows 101-105 -> 120-122 windows/s; float32
gained nothing there, so float32 exports keep their variables. The cost: a signature's first call
optimizes a graph that holds the weights (serve_text's 5.5 s against 1.3 s with variables there).
Its layer norms keep their epsilon, which the optimizer's fused form of a layer norm with constant
weights drops (`_exact_layer_norms`).

`tensorflow.python.framework.convert_to_constants` is TensorFlow's private freezing API (no public
one exists in TF2); this module alone imports it (BUILD.md, "Private APIs").
"""

from absl import logging
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants  # private API: BUILD.md

from squad_qa.base import native_log
from squad_qa.model import span_model

# The serialized graph of a SavedModel is one protobuf, which cannot exceed 2 GiB; weights over
# this many bytes stay variables (BERT-large in float32 is 1.34 GB).
MAX_CONSTANT_BYTES = 1 << 30


def weight_bytes(model):
  """Bytes of `model`'s variables as stored (e.g. 4 per float32 weight)."""
  return sum(v.shape.num_elements() * v.dtype.size for v in model.variables)


def pays_off(model):
  """True when `model`, a `span_model.build_span_model` model, computes in another dtype than its
  variables (its weights are cast each call) and they fit a SavedModel's graph
  (MAX_CONSTANT_BYTES); False for any other callable (e.g. a test's stand-in function)."""
  stored = {v.dtype for v in getattr(model, "variables", ())}
  if not stored or not hasattr(model, "labeler"):
    return False
  if stored == {tf.as_dtype(span_model.encoder_compute_dtype(model))}:
    return False
  if weight_bytes(model) > MAX_CONSTANT_BYTES:
    logging.info(
        "the weights (%s MB) stay variables, cast on every call: a SavedModel's graph holds "
        "at most 2 GiB", f"{weight_bytes(model) / 1e6:,.0f}")
    return False
  return True


def logits_function(model):
  """`model`'s prediction (training=False) with its current weights as constants.

  Returns:
    A concrete function of int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids`
    (positional, any batch and seq) returning float32 [batch, seq] (start_logits, end_logits). It
    captures no variable: later changes to the model's weights do not reach it.
  """

  @tf.function(input_signature=span_model.input_signature())
  def logits(input_word_ids, input_mask, input_type_ids):
    return model(dict(zip(span_model.MODEL_INPUTS, (input_word_ids, input_mask, input_type_ids))),
                 training=False)

  return frozen_function(logits.get_concrete_function())


def frozen_function(concrete):
  """`concrete` (a concrete function) with its variables as constants: those it casts to 16 bits
  stored in that dtype, its layer norms computed with their own epsilon (`_exact_layer_norms`).

  Returns:
    A concrete function of the same inputs, returning the same outputs flattened (a sequence).
  """
  with native_log.native_stderr_held_back():  # the lines grappler prints as it starts
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete)
  graph_def = frozen.graph.as_graph_def()
  changed = _store_in_compute_dtype(graph_def)
  changed += _exact_layer_norms(graph_def)
  if not changed:
    return frozen
  imported = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""),
                                        [])
  tensor = imported.graph.get_tensor_by_name
  return imported.prune(feeds=[tensor(t.name) for t in frozen.inputs],
                        fetches=[tensor(t.name) for t in frozen.outputs])


def _readers(graph_def):
  """{node name: the nodes of `graph_def` that take one of its outputs as data}."""
  readers = {}
  for node in graph_def.node:
    for name in node.input:
      if not name.startswith("^"):
        readers.setdefault(name.split(":")[0], []).append(node)
  return readers


def _store_in_compute_dtype(graph_def):
  """Stores the float32 weights that the frozen `graph_def` casts to a 16-bit dtype on every call
  in that dtype instead (in place): a weight read and cast (Const -> Identity -> Cast) becomes a
  16-bit Const read as is, and so does an embedding table gathered then cast (Const -> GatherV2 ->
  Cast). The values are the same (the cast moves to the export), the graph about half as large,
  so its first call is optimized sooner.

  Returns:
    How many weights changed.
  """
  readers = _readers(graph_def)
  float32 = tf.float32.as_datatype_enum
  changed = 0
  for node in graph_def.node:
    if node.op != "Const" or node.attr["dtype"].type != float32:
      continue
    uses = readers.get(node.name, [])
    if len(uses) != 1 or uses[0].op not in ("Identity", "GatherV2"):
      continue
    read = uses[0]
    if read.op == "GatherV2" and read.input[0].split(":")[0] != node.name:
      continue  # the constant is the indices or the axis, not the table
    casts = readers.get(read.name, [])
    targets = {c.attr["DstT"].type for c in casts if c.op == "Cast"}
    if (not casts or len(targets) != 1 or any(c.op != "Cast" for c in casts) or
        any("Truncate" in c.attr and c.attr["Truncate"].b for c in casts)):  # tf.cast rounds
      continue
    dtype = tf.dtypes.as_dtype(targets.pop())
    if dtype not in (tf.bfloat16, tf.float16):
      continue
    value = tf.make_ndarray(node.attr["value"].tensor)
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(tf.cast(value, dtype).numpy(), dtype))
    node.attr["dtype"].type = dtype.as_datatype_enum
    read.attr["Tparams" if read.op == "GatherV2" else "T"].type = dtype.as_datatype_enum
    for cast in casts:  # now a no-op: the value already has the dtype
      cast.op = "Identity"
      for name in ("SrcT", "DstT", "Truncate"):
        if name in cast.attr:
          del cast.attr[name]
      cast.attr["T"].type = dtype.as_datatype_enum
    changed += 1
  return changed


def _exact_layer_norms(graph_def):
  """Makes the frozen graph's layer norms compute with their own epsilon (in place).

  With the weights as constants, oneDNN builds of TensorFlow 2.20 replace tf_keras's unfused layer
  norm (tf.nn.moments, then tf.nn.batch_normalization) by one `_MklLayerNorm` that computes with
  an epsilon of 1e-3 whatever the layer's (BERT's is 1e-12): measured, its outputs match
  (x - mean) / sqrt(variance + 1e-3) to 1e-6, and differ from the layer's by 3e-3 at unit variance,
  0.3 at variance 0.01. A layer norm is the same function of its input times any c > 0 with
  epsilon times c^2, so a layer norm whose input is cast from bfloat16 gets that input times 2^16
  (exact in bfloat16, before the cast: a multiply after it stops the fusion), and the fused op's
  1e-3 acts as 1e-3 / 2^32 = 2.3e-13; unfused, 1e-12 / 2^32. Any other layer norm stays unfused: its
  mean is taken without keep_dims, then expanded (the same values), which the fusion does not match.

  Returns:
    How many layer norms changed.
  """
  readers = _readers(graph_def)
  nodes = {node.name: node for node in graph_def.node}
  bfloat16 = tf.bfloat16.as_datatype_enum
  changed = 0
  for mean in list(graph_def.node):
    if mean.op != "Mean" or not mean.attr["keep_dims"].b:
      continue
    uses = readers.get(mean.name, [])
    # tf.nn.moments: the mean, through StopGradient, into the squared difference.
    through = uses + [
        n for use in uses if use.op == "StopGradient" for n in readers.get(use.name, [])
    ]
    axis = nodes.get(mean.input[1].split(":")[0])
    one_axis = (axis is not None and axis.op == "Const" and
                tf.make_ndarray(axis.attr["value"].tensor).size == 1)
    if not one_axis or all(n.op != "SquaredDifference" for n in through):
      continue
    changed += 1
    source = nodes.get(mean.input[0].split(":")[0])
    # The cast's only readers: the layer norm's mean, squared difference and normalizing multiply.
    if (source is not None and source.op == "Cast" and source.attr["SrcT"].type == bfloat16 and
        sorted(n.op for n in readers.get(source.name, [])) == ["Mean", "Mul", "SquaredDifference"]):
      scale = _add_node(graph_def, f"{mean.name}/input_scale", "Const", [], source.device)
      scale.attr["dtype"].type = bfloat16
      scale.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(2.0**16, tf.bfloat16))
      scaled = _add_node(graph_def, f"{mean.name}/scaled_input", "Mul",
                         [source.input[0], scale.name], source.device)
      scaled.attr["T"].type = bfloat16
      source.input[0] = scaled.name
      continue
    mean.attr["keep_dims"].b = False
    expanded = _add_node(graph_def, f"{mean.name}/expanded", "ExpandDims",
                         [mean.name, mean.input[1]], mean.device)
    expanded.attr["T"].CopyFrom(mean.attr["T"])
    expanded.attr["Tdim"].CopyFrom(mean.attr["Tidx"])
    for use in uses:
      use.input[:] = [
          expanded.name if name in (mean.name, f"{mean.name}:0") else name for name in use.input
      ]
  return changed


def _add_node(graph_def, name, op, inputs, device):
  """A new node of `graph_def` (its attributes to be set by the caller)."""
  node = graph_def.node.add()
  node.name, node.op, node.device = name, op, device
  node.input.extend(inputs)
  return node
