"""Reads an object-based TF2 checkpoint: tf-models-official encoder checkpoints and this tool's own.

Roots: `encoder` (tfm's converter, `python -m model.convert_checkpoint`) or `model` (tfm's QA
task, train.py). The checkpoint's object graph is walked beside the Python objects to pair each
variable with its key first, so `named_weights.assign` checks every name and shape before any
value changes (`tf.train.Checkpoint.read` applies values as it goes).
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
  """{id(variable): (variable, checkpoint key)} of the variables under `python_root`, walking
  both object graphs breadth-first from `node_id` (children without a checkpoint twin skipped)."""
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
  """A checkpoint key without its `/.ATTRIBUTES/VARIABLE_VALUE` ending."""
  return key[:-len(_VALUE_SUFFIX)] if key.endswith(_VALUE_SUFFIX) else key


def _candidates(model):
  """(checkpoint root name, Python object) pairs to try, most complete first."""
  labeler = getattr(model, "labeler", None)
  candidates = [("model", model)]
  if labeler is not None:
    candidates += [("model", labeler), ("encoder", labeler.checkpoint_items["encoder"])]
  return candidates


def load_tf2_weights(model, prefix):
  """Loads a TF2 checkpoint at `prefix` into a span model; returns a `named_weights.LoadReport`.

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
