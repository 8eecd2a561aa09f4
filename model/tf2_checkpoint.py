"""Reads an object-based TF2 checkpoint: tf-models-official encoder checkpoints and this tool's own.

What writes them, and the root object that holds the weights:
- tfm's `tf2_bert_encoder_checkpoint_converter` (and tfm's published TF2 BERT checkpoints):
  `tf.train.Checkpoint(encoder=BertEncoder)`; a pretrainer conversion adds `masked_lm` and `model`.
- tfm's QA task: `tf.train.Checkpoint(model=BertSpanLabeler, optimizer=...)`.
- this tool's train.py: `tf.train.Checkpoint(model=<span model>, optimizer=...)`, and
  `python -m model.convert_checkpoint`: `tf.train.Checkpoint(encoder=..., [model=...])`.

TF2 checkpoints are matched by object structure, not by variable name. Restoring them with
`tf.train.Checkpoint.read` would do that too, but it reports a missing variable as a list of Python
objects and applies values as it goes; here the checkpoint's object graph is walked beside the
Python objects (`tf.train.TrackableView.children`, the same edges the saver follows) to pair each
model variable with its checkpoint key first, so `named_weights.assign` can check every name and
shape before any value is changed.
"""

import collections

import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from squad_qa.model import named_weights

KIND = "TF2 checkpoint"
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def is_object_based(variable_names):
  """True when a checkpoint's variable names include TF2's object graph."""
  return OBJECT_GRAPH_KEY in variable_names


def _object_graph(reader):
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(OBJECT_GRAPH_KEY))
  return graph


def _pair_variables(python_root, graph, node_id):
  """{id(variable): (variable, checkpoint key)} of the variables under `python_root`.

  Walks the Python objects' checkpoint dependencies breadth-first alongside the checkpoint's object
  graph from `node_id`; a Python child without a same-named checkpoint child is skipped (its
  variables stay unpaired, and `named_weights.assign` reports them).
  """
  pairs = {}
  seen = {id(python_root)}
  queue = collections.deque([(python_root, node_id)])
  while queue:
    obj, node = queue.popleft()
    if isinstance(obj, tf.Variable):
      for attribute in graph.nodes[node].attributes:
        if attribute.name == "VARIABLE_VALUE":
          pairs[id(obj)] = (obj, attribute.checkpoint_key)
      continue
    children = {c.local_name: c.node_id for c in graph.nodes[node].children}
    for name, child in tf.train.TrackableView.children(obj).items():
      if name in children and id(child) not in seen:
        seen.add(id(child))
        queue.append((child, children[name]))
  return pairs


def _display(key):
  """A checkpoint key without the `/.ATTRIBUTES/VARIABLE_VALUE` every variable's key ends with."""
  return key[:-len(_VALUE_SUFFIX)] if key.endswith(_VALUE_SUFFIX) else key


def _candidates(model):
  """(checkpoint root name, Python object) pairs to try, most complete first."""
  labeler = getattr(model, "labeler", None)
  candidates = [("model", model)]
  if labeler is not None:
    candidates += [("model", labeler), ("encoder", labeler.checkpoint_items["encoder"])]
  return candidates


def load_tf2_weights(model, prefix):
  """Loads a TF2 checkpoint into a span model (encoder only, or encoder and span head).

  Args:
    model: from `model.span_model.build_span_model`.
    prefix: checkpoint prefix (`.../ckpt-1000`).

  Returns:
    A `named_weights.LoadReport`.

  Raises:
    named_weights.CheckpointError: no root object that fits, or a missing/mis-shaped variable.
  """
  reader = tf.train.load_checkpoint(prefix)
  shapes = reader.get_variable_to_shape_map()
  graph = _object_graph(reader)
  roots = {c.local_name: c.node_id for c in graph.nodes[0].children}
  best = None
  for root_name, python_root in _candidates(model):
    if root_name in roots:
      pairs = _pair_variables(python_root, graph, roots[root_name])
      if best is None or len(pairs) > len(best[1]):
        best = (root_name, pairs)
  if not best:
    raise named_weights.CheckpointError(
        f"{prefix}: a TF2 checkpoint without an 'encoder' or 'model' object (it has "
        f"{sorted(roots)}); expected tf.train.Checkpoint(encoder=BertEncoder) as tfm's "
        f"tf2_bert_encoder_checkpoint_converter writes, or a checkpoint of this tool")
  root_name, pairs = best
  entries = []
  for variable, key in pairs.values():
    shape = tuple(shapes[key])
    entries.append(
        named_weights.Entry(_display(key), shape, named_weights.variable_name(variable), shape,
                            (lambda k=key: reader.get_tensor(k))))
  used = {key for _, key in pairs.values()}
  unused = [_display(k) for k in shapes if k not in used and k != OBJECT_GRAPH_KEY]
  return named_weights.assign(model, entries, unused, prefix, f"{KIND} ({root_name}=...)")
