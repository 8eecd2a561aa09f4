"""The features model of an export: token ids in, start/end logits out, from a SavedModel or LiteRT.

`SavedModelFeatures` wraps a SavedModel's `serve_features`; `LiteRTFeatures` an int8 export's
LiteRT model (extra `int8`: ai-edge-litert). An int8 export has `assets/vocab.txt`,
`assets.extra/qa_config.json` and `INT8_MODEL_FILE`, no SavedModel and no serve_text.
`write_int8_model` quantizes dynamic-range: matmul weights int8 per output channel, activations
per row at run time; embeddings, layer norms, softmax and the span head's output stay float32.

The LiteRT model holds one signature of any [batch, seq] and, sharing its weights, one per
single-window length ([1, 32], [1, 64], ... [1, max_seq_length]). With every shape known when it
is converted, LiteRT runs the model without the shape computations a dynamic length leaves in it
(docs/serving.md "Single-window signatures"): each window runs alone, padded to the next of those
lengths, its padding masked as in a batch, and the logits of its own tokens are kept. A window that
fills [1, max_seq_length] (every window of a long context but the last) runs on a signature
without a mask input, whose attention adds no mask.
"""

import os
import threading

import numpy as np
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.base import native_log
from squad_qa.model import attention
from squad_qa.model import span_model

INT8 = "int8"  # the --serving_precision (and qa_config.json `serving_precision`) served here
INT8_MODEL_FILE = "features_int8.tflite"
# Where an int8 export keeps its vocab: where a SavedModel export's `vocab_file` asset is.
VOCAB_ASSET = os.path.join("assets", "vocab.txt")
# The package and the extra that install the LiteRT interpreter (setup.py's extras_require).
LITERT_PACKAGE, INT8_EXTRA = "ai-edge-litert", "int8"
LITERT_MODULE = "ai_edge_litert"
# How to install LiteRT (tf-models-official requires it, so an install normally has it).
LITERT_INSTALL = (f"`python -m pip install \"squad-qa[{INT8_EXTRA}]\"` (or `pip install -e "
                  f"\".[{INT8_EXTRA}]\"` in a clone)")
FEATURE_NAMES = span_model.MODEL_INPUTS  # ids, mask, type ids: the order of every call here
# The int8 model's signatures: any [batch, seq], and [1, length] for each single-window length.
FEATURES_SIGNATURE, WINDOW_SIGNATURE_PREFIX = "serve_features", "serve_window_"
# [1, max_seq_length] ids and type ids of a window without padding (its mask all ones).
UNPADDED_WINDOW_SIGNATURE = "serve_unpadded_window"
# Tokens between single-window lengths: a window is padded by 16 on average. Each length adds about
# 0.7 MB and 2-3 s of conversion for MiniLM-L6 (docs/serving.md "Single-window signatures").
WINDOW_LENGTH_STEP = 32


def single_window_lengths(max_seq_length):
  """The sequence lengths (tokens) of the single-window signatures: the multiples of
  WINDOW_LENGTH_STEP below `max_seq_length`, then `max_seq_length`."""
  return list(range(WINDOW_LENGTH_STEP, max_seq_length, WINDOW_LENGTH_STEP)) + [max_seq_length]


def _features_function(model, name, shape):
  """A concrete function `name` of `model`: int32 ids, mask, type ids of `shape` ([batch, seq],
  None where any) -> float32 start and end logits of that shape; rank 2 so the converter can lower
  the einsums."""

  def features(input_word_ids, input_mask, input_type_ids):
    start_logits, end_logits = model(
        dict(zip(FEATURE_NAMES, (input_word_ids, input_mask, input_type_ids))), training=False)
    return {"start_logits": start_logits, "end_logits": end_logits}

  features.__name__ = name  # the LiteRT signature's key
  return tf.function(features,
                     input_signature=span_model.input_signature(shape)).get_concrete_function()


def _unpadded_window_function(model, length):
  """UNPADDED_WINDOW_SIGNATURE of `model`: int32 [1, length] ids and type ids -> float32 [1, length]
  start and end logits, every token attended (the attention traced without a mask)."""

  def features(input_word_ids, input_type_ids):
    start_logits, end_logits = model(
        dict(zip(FEATURE_NAMES, (input_word_ids, tf.ones_like(input_word_ids), input_type_ids))),
        training=False)
    return {"start_logits": start_logits, "end_logits": end_logits}

  features.__name__ = UNPADDED_WINDOW_SIGNATURE
  ids, _, type_ids = span_model.input_signature([1, length])
  with attention.unpadded_inputs():
    return tf.function(features, input_signature=[ids, type_ids]).get_concrete_function()


def int8_flatbuffer(concrete_functions, trackable):
  """The LiteRT model (bytes) of concrete functions, one signature each (keyed by their names when
  more than one) sharing their weights, dynamic-range int8; `trackable` holds the variables."""
  converter = tf.lite.TFLiteConverter.from_concrete_functions(list(concrete_functions), trackable)
  converter.optimizations = [tf.lite.Optimize.DEFAULT]
  with native_log.native_stderr_held_back():
    return converter.convert()


def write_int8_model(model, path, max_seq_length):
  """Writes float32 `model`'s features functions (FEATURES_SIGNATURE, the single-window ones up
  to `max_seq_length` tokens and UNPADDED_WINDOW_SIGNATURE), int8-quantized, as one LiteRT model at
  `path`; returns the file's size in bytes."""
  functions = [_features_function(model, FEATURES_SIGNATURE, [None, None])]
  functions += [
      _features_function(model, f"{WINDOW_SIGNATURE_PREFIX}{length}", [1, length])
      for length in single_window_lengths(max_seq_length)
  ]
  functions.append(_unpadded_window_function(model, max_seq_length))
  flatbuffer = int8_flatbuffer(functions, model)
  with open(path, "wb") as f:
    f.write(flatbuffer)
  return len(flatbuffer)


def litert_interpreter_module():
  """The `ai_edge_litert.interpreter` module, imported on first use.

  Raises:
    errors.UsageError: the package is not installed (naming the extra that installs it).
  """
  try:
    from ai_edge_litert import interpreter  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise errors.UsageError(
        f"int8 exports run on LiteRT, which is not installed ({error}); install it with "
        f"{LITERT_INSTALL}") from None
  return interpreter


class SavedModelFeatures:
  """A SavedModel's `serve_features` signature (of `tf.saved_model.load`'s `loaded`) as a features
  model."""

  runs_windows_alone = False  # a call's windows run as one batch

  def __init__(self, loaded):
    self._signature = loaded.signatures["serve_features"]

  def __call__(self, input_word_ids, input_mask, input_type_ids):
    """int32 [batch, seq] arrays in; (start_logits, end_logits) float32 NumPy [batch, seq] out."""
    outputs = self._signature(
        **{
            name: tf.constant(value, tf.int32)
            for name, value in zip(FEATURE_NAMES, (input_word_ids, input_mask, input_type_ids))
        })
    return outputs["start_logits"].numpy(), outputs["end_logits"].numpy()


def usable_cpus():
  """The CPUs this process may run on (its affinity mask: `taskset`, a container's cpuset), not
  the machine's count."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


class LiteRTFeatures:
  """An int8 export's LiteRT model at `model_path` as a features model.

  Runs on `num_threads` CPU threads (None: `usable_cpus`, the CPUs this process may run on);
  calls from several Python threads are safe and run one at a time (one interpreter). Each
  window of a call runs alone on the single-window signature of the next length at or above the
  call's (padded with [PAD] ids under a 0 mask), or, if it fills the unpadded signature's length
  with no padding, on that one; a longer call, and every call of a model without those
  signatures, runs on the signature of any shape, which resizes its inputs when the [batch, seq]
  changes.

  Attributes:
    window_lengths: the single-window signatures' lengths in tokens, ascending ([] if none).
    unpadded_length: the unpadded window signature's length in tokens (None if none).
    runs_windows_alone: whether there are any, so a caller can give windows at their own lengths.

  Raises:
    errors.UsageError: ai-edge-litert is not installed, or the file is not a LiteRT model with
      signatures.
    errors.MissingFileError: no file at model_path.
  """

  def __init__(self, model_path, num_threads=None):
    interpreter_module = litert_interpreter_module()
    reexport = f"re-export with `{commands.command('squad-qa-export')} --serving_precision=int8`"
    if not os.path.exists(model_path):
      raise errors.MissingFileError(f"{model_path}: not found; {reexport}")
    self.num_threads = num_threads or usable_cpus()
    try:
      with native_log.native_stderr_held_back():
        self._interpreter = interpreter_module.Interpreter(model_path=model_path,
                                                           num_threads=self.num_threads)
    except ValueError as error:  # LiteRT's answer to a file that is not a model
      raise errors.UsageError(f"{model_path}: not a LiteRT model ({str(error).splitlines()[0]}); "
                              f"{reexport}") from None
    keys = list(self._interpreter.get_signature_list())
    if not keys:
      raise errors.UsageError(f"{model_path}: a LiteRT model without signatures; {reexport}")
    # An export written before the single-window signatures has one signature, of any shape.
    self._any_shape = FEATURES_SIGNATURE if FEATURES_SIGNATURE in keys else keys[0]
    self.window_lengths = sorted(
        int(key[len(WINDOW_SIGNATURE_PREFIX):]) for key in keys
        if key.startswith(WINDOW_SIGNATURE_PREFIX))
    self.runs_windows_alone = bool(self.window_lengths)
    # `write_int8_model` writes the unpadded signature at the longest single-window length.
    self.unpadded_length = (self.window_lengths[-1]
                            if UNPADDED_WINDOW_SIGNATURE in keys and self.window_lengths else None)
    self._runners = {}
    self._lock = threading.Lock()

  def __call__(self, input_word_ids, input_mask, input_type_ids):
    """int32 [batch, seq] arrays in; (start_logits, end_logits) float32 NumPy [batch, seq] out."""
    arrays = [np.asarray(x, np.int32) for x in (input_word_ids, input_mask, input_type_ids)]
    seq = arrays[0].shape[1]
    length = next((n for n in self.window_lengths if n >= seq), None)
    if length is None:
      outputs = self._run(self._any_shape, dict(zip(FEATURE_NAMES, arrays)))
      return outputs["start_logits"], outputs["end_logits"]
    key = f"{WINDOW_SIGNATURE_PREFIX}{length}"
    arrays = [np.pad(x, ((0, 0), (0, length - seq))) for x in arrays]  # 0: [PAD], masked
    windows = []
    for i in range(len(arrays[0])):
      inputs = {name: x[i:i + 1] for name, x in zip(FEATURE_NAMES, arrays)}
      if length == self.unpadded_length and inputs[span_model.INPUT_MASK].all():
        del inputs[span_model.INPUT_MASK]  # every token attended
        windows.append(self._run(UNPADDED_WINDOW_SIGNATURE, inputs))
      else:
        windows.append(self._run(key, inputs))
    return tuple(
        np.concatenate([w[name] for w in windows])[:, :seq]
        for name in ("start_logits", "end_logits"))

  def _run(self, key, inputs):
    """Signature `key` on `inputs`: a dict of its outputs (one run at a time: the signatures share
    the interpreter's tensors, and two threads' runs mixed their inputs)."""
    with self._lock:
      runner = self._runners.get(key)
      if runner is None:  # the interpreter logs its XNNPACK delegate on a signature's first run
        runner = self._runners[key] = self._interpreter.get_signature_runner(key)
        with native_log.native_stderr_held_back():
          return runner(**inputs)
      return runner(**inputs)
