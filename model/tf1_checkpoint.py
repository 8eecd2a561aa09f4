"""Reads a google-research/bert TF1 checkpoint (and, through the same names, an HF one)
into tfm names.

The mapping is tfm's own (official/nlp/tools/tf1_bert_checkpoint_converter_lib.py), applied in
memory, with two deviations: `cls/seq_relationship/*` (next-sentence head) is not loaded, and
run_squad.py's `cls/squad/output_weights` [2, hidden] / `output_bias` become the span head
(kernel transposed to [hidden, 2], start/end in the same order).
"""

import contextlib
import logging as std_logging

import numpy as np
import tensorflow as tf
from official.nlp.tools import tf1_bert_checkpoint_converter_lib as tfm_tf1

from squad_qa.model import named_weights

KIND = "TF1 checkpoint (google-research/bert)"

SQUAD_HEAD = {
    "cls/squad/output_weights": named_weights.HEAD_PREFIX + "kernel",
    "cls/squad/output_bias": named_weights.HEAD_PREFIX + "bias",
}
# Last path components of the encoder's own variables; others under bert/ are optimizer state.
_VARIABLE_LEAVES = ("kernel", "bias", "gamma", "beta", "word_embeddings", "token_type_embeddings",
                    "position_embeddings")
_WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"


def is_tf1_bert(variable_names):
  """True when a checkpoint's variable names are google-research/bert's."""
  return _WORD_EMBEDDINGS in variable_names


@contextlib.contextmanager
def _quiet_tfm_converter():
  """Hushes tfm's converter, which logs every renamed variable at INFO."""
  logger = std_logging.getLogger("tensorflow")
  level = logger.level
  logger.setLevel(std_logging.WARNING)
  try:
    yield
  finally:
    logger.setLevel(level)


def _target(name, shape, num_heads):
  """(tfm variable name, shape after tfm's reshape) of a google-research encoder variable."""
  with _quiet_tfm_converter():
    tfm_name = tfm_tf1._bert_name_replacement(name, tfm_tf1.BERT_V2_NAME_REPLACEMENTS)  # pylint: disable=protected-access
    new_shape = tfm_tf1._get_new_shape(tfm_name, tuple(shape), num_heads)  # pylint: disable=protected-access
  return tfm_name, tuple(new_shape) if new_shape else tuple(shape)


def google_names(num_layers):
  """The encoder variable names of a google-research/bert checkpoint with `num_layers` layers."""
  names = [
      _WORD_EMBEDDINGS, "bert/embeddings/token_type_embeddings",
      "bert/embeddings/position_embeddings", "bert/embeddings/LayerNorm/gamma",
      "bert/embeddings/LayerNorm/beta"
  ]
  for i in range(num_layers):
    for module in ("attention/self/query", "attention/self/key", "attention/self/value",
                   "attention/output/dense", "intermediate/dense", "output/dense"):
      names += [f"bert/encoder/layer_{i}/{module}/kernel", f"bert/encoder/layer_{i}/{module}/bias"]
    for module in ("attention/output/LayerNorm", "output/LayerNorm"):
      names += [f"bert/encoder/layer_{i}/{module}/gamma", f"bert/encoder/layer_{i}/{module}/beta"]
  return names + ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]


def source_names(num_layers, display=lambda name: name):
  """{tfm variable name: checkpoint name} of the encoder variables, for "missing" messages."""
  return {_target(name, (1, 1), 1)[0]: display(name) for name in google_names(num_layers)}


def to_entries(shapes, read, num_heads, display=lambda name: name):
  """(entries, unused): `named_weights.Entry`s for tfm's BertEncoder from google-research-named
  tensors, and the displayed names of what is not loaded.

  Args:
    shapes: {google-research name: shape} of everything in the checkpoint.
    read: name -> NumPy array in google-research layout (called after the checks).
    num_heads: attention heads of the model.
    display: name -> the name messages show (HF names for the HF reader).
  """
  entries, unused = [], []
  for name, shape in shapes.items():
    shape = tuple(shape)
    if name in SQUAD_HEAD:
      transposed = name.endswith("output_weights")
      entries.append(
          named_weights.Entry(display(name), shape, SQUAD_HEAD[name],
                              shape[::-1] if transposed else shape,
                              (lambda n=name, t=transposed: read(n).T if t else read(n))))
      continue
    if (not name.startswith("bert/") or name.rsplit("/", 1)[-1] not in _VARIABLE_LEAVES or
        tfm_tf1._has_exclude_patterns(name, ("adam", "Adam"))):  # pylint: disable=protected-access
      unused.append(display(name))
      continue
    tfm_name, new_shape = _target(name, shape, num_heads)
    fits = int(np.prod(new_shape)) == int(np.prod(shape))
    entries.append(
        named_weights.Entry(display(name), shape, tfm_name, new_shape if fits else None,
                            (lambda n=name, s=new_shape: np.reshape(read(n), s))))
  return entries, unused


def load_tf1_weights(model, prefix, num_heads, num_layers):
  """Loads a TF1 checkpoint at `prefix` into a span model; returns a `named_weights.LoadReport`.

  Raises:
    named_weights.CheckpointError: a missing or mis-shaped encoder variable.
  """
  reader = tf.train.load_checkpoint(prefix)
  entries, unused = to_entries(reader.get_variable_to_shape_map(), reader.get_tensor, num_heads)
  return named_weights.assign(model, entries, unused, prefix, KIND,
                              source_names=source_names(num_layers))
