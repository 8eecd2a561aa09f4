"""The features model of an export: token ids in, start/end logits out, from a SavedModel or LiteRT.

`SavedModelFeatures` wraps a SavedModel's `serve_features`; `LiteRTFeatures` an int8 export's
LiteRT model (extra `int8`: ai-edge-litert). An int8 export has `assets/vocab.txt`,
`assets.extra/qa_config.json` and `INT8_MODEL_FILE`, no SavedModel and no serve_text.
`write_int8_model` quantizes dynamic-range: matmul weights int8 per output channel, activations
per row at run time; embeddings, layer norms, softmax and the span head's output stay float32.
"""

import os

import numpy as np
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.base import native_log
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


def _features_function(model):
  """A concrete function of `model`: int32 [batch, seq] ids, mask, type ids -> float32 [batch, seq]
  start and end logits, of fixed rank 2 so the converter can lower the einsums."""

  @tf.function(input_signature=span_model.input_signature())
  def serve_features(input_word_ids, input_mask, input_type_ids):
    start_logits, end_logits = model(
        dict(zip(FEATURE_NAMES, (input_word_ids, input_mask, input_type_ids))), training=False)
    return {"start_logits": start_logits, "end_logits": end_logits}

  return serve_features.get_concrete_function()


def int8_flatbuffer(concrete_function, trackable):
  """The LiteRT model (bytes) of a concrete function with dynamic-range int8 weights; `trackable`
  holds its variables."""
  converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete_function], trackable)
  converter.optimizations = [tf.lite.Optimize.DEFAULT]
  with native_log.native_stderr_held_back():
    return converter.convert()


def write_int8_model(model, path):
  """Writes float32 `model`'s features function, int8-quantized, as a LiteRT model at `path`;
  returns the file's size in bytes."""
  flatbuffer = int8_flatbuffer(_features_function(model), model)
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


class LiteRTFeatures:
  """An int8 export's LiteRT model at `model_path` as a features model.

  Runs on `num_threads` CPU threads (None: os.cpu_count()); a call of another [batch, seq] than the
  previous one resizes the inputs, cheaper than running padding.

  Raises:
    errors.UsageError: ai-edge-litert is not installed.
    errors.MissingFileError: no file at model_path.
  """

  def __init__(self, model_path, num_threads=None):
    interpreter_module = litert_interpreter_module()
    if not os.path.exists(model_path):
      raise errors.MissingFileError(
          f"{model_path}: not found; re-export with "
          f"`{commands.command('squad-qa-export')} --serving_precision=int8`")
    self.num_threads = num_threads or os.cpu_count() or 1
    with native_log.native_stderr_held_back():
      self._interpreter = interpreter_module.Interpreter(model_path=model_path,
                                                         num_threads=self.num_threads)
    self._runner = self._interpreter.get_signature_runner()
    self._first_call = True

  def __call__(self, input_word_ids, input_mask, input_type_ids):
    """int32 [batch, seq] arrays in; (start_logits, end_logits) float32 NumPy [batch, seq] out."""
    inputs = {
        name: np.asarray(value, np.int32)
        for name, value in zip(FEATURE_NAMES, (input_word_ids, input_mask, input_type_ids))
    }
    if self._first_call:  # the interpreter logs its XNNPACK delegate on the first run
      with native_log.native_stderr_held_back():
        outputs = self._runner(**inputs)
      self._first_call = False
    else:
      outputs = self._runner(**inputs)
    return outputs["start_logits"], outputs["end_logits"]
