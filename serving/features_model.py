"""The features model of an export: token ids in, start/end logits out, from a SavedModel or LiteRT.

`SavedModelQA` (serving/saved_model_qa.py) tokenizes, windows and decodes in Python around one
object with `__call__(input_word_ids, input_mask, input_type_ids) -> (start_logits, end_logits)`:
`SavedModelFeatures` (a SavedModel's `serve_features` signature: float32 and bfloat16 exports) or
`LiteRTFeatures` (an int8 export: the encoder quantized by the LiteRT converter, run by the LiteRT
interpreter of the `ai-edge-litert` package, setup.py's extra `int8`). Which one an export needs is
its qa_config.json's `serving_precision`.

An int8 export is a folder with `assets/vocab.txt`, `assets.extra/qa_config.json` (as a SavedModel
export has them) and `INT8_MODEL_FILE`; it has no SavedModel (a .tflite cannot hold the
tensorflow-text tokenizer, so there is no serve_text). `write_int8_model` makes that file with
dynamic-range quantization: the weights of every matmul stored as int8 with one scale per output
channel, activations quantized per row at run time, so the matmuls run on int8 dot products;
embeddings lookups, layer norms, softmax and the span head's output stay float32.
"""

import os

import numpy as np
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.model import span_model

INT8 = "int8"  # the --serving_precision (and qa_config.json `serving_precision`) served here
INT8_MODEL_FILE = "features_int8.tflite"
# Where an int8 export keeps its vocab: where a SavedModel export's `vocab_file` asset is.
VOCAB_ASSET = os.path.join("assets", "vocab.txt")
# The package and the extra that install the LiteRT interpreter (setup.py's extras_require).
LITERT_PACKAGE, INT8_EXTRA = "ai-edge-litert", "int8"
FEATURE_NAMES = span_model.MODEL_INPUTS  # ids, mask, type ids: the order of every call here


def _features_function(model):
  """A concrete function of `model`: int32 [batch, seq] ids, mask, type ids -> float32 [batch, seq]
  start and end logits. The rank is fixed (2) so the converter can lower the encoder's einsums."""
  spec = tf.TensorSpec([None, None], tf.int32)

  @tf.function(input_signature=[spec, spec, spec])
  def serve_features(input_word_ids, input_mask, input_type_ids):
    start_logits, end_logits = model(
        dict(zip(FEATURE_NAMES, (input_word_ids, input_mask, input_type_ids))), training=False)
    return {"start_logits": start_logits, "end_logits": end_logits}

  return serve_features.get_concrete_function()


def int8_flatbuffer(concrete_function, trackable):
  """A concrete function converted to LiteRT with dynamic-range int8 weights (the int8 export's
  conversion; bytes). `trackable` holds the function's variables and signature."""
  converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete_function], trackable)
  converter.optimizations = [tf.lite.Optimize.DEFAULT]
  return converter.convert()


def write_int8_model(model, path):
  """Writes `model`'s features function, dynamic-range quantized to int8, as a LiteRT model.

  Args:
    model: a float32 model from `model.span_model.build_span_model`, weights loaded.
    path: the .tflite file to write.

  Returns:
    The file's size in bytes.
  """
  flatbuffer = int8_flatbuffer(_features_function(model), model)
  with open(path, "wb") as f:
    f.write(flatbuffer)
  return len(flatbuffer)


def litert_interpreter_module():
  """The `ai_edge_litert.interpreter` module, imported on first use.

  Raises:
    errors.UsageError: the package is not installed (one line naming the extra that installs it).
  """
  try:
    from ai_edge_litert import interpreter  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise errors.UsageError(
        f"int8 exports run on LiteRT, which is not installed ({error}); install it with "
        f"`python -m pip install \"squad-qa[{INT8_EXTRA}]\"` "
        f"(or `pip install -e \".[{INT8_EXTRA}]\"` in a clone)") from None
  return interpreter


class SavedModelFeatures:
  """A SavedModel's `serve_features` signature as a features model.

  Args:
    loaded: the object `tf.saved_model.load` returned.
  """

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
  """An int8 export's LiteRT model as a features model.

  The interpreter runs on `num_threads` CPU threads (default: all of this machine's). Its input
  shape follows each call: a call of another [batch, seq] than the previous one resizes the inputs
  and re-plans the tensors (the signature runner's resize_tensor_input + allocate_tensors), which
  costs less than running padding positions (docs/serving.md "Reduced precision").

  Args:
    model_path: the export's INT8_MODEL_FILE.
    num_threads: interpreter threads; None: os.cpu_count().

  Raises:
    errors.UsageError: ai-edge-litert is not installed (`litert_interpreter_module`).
    errors.MissingFileError: no file at model_path.
  """

  def __init__(self, model_path, num_threads=None):
    interpreter_module = litert_interpreter_module()
    if not os.path.exists(model_path):
      raise errors.MissingFileError(
          f"{model_path}: not found; re-export with "
          f"`{commands.command('squad-qa-export')} --serving_precision=int8`")
    self.num_threads = num_threads or os.cpu_count() or 1
    self._interpreter = interpreter_module.Interpreter(model_path=model_path,
                                                       num_threads=self.num_threads)
    self._runner = self._interpreter.get_signature_runner()

  def __call__(self, input_word_ids, input_mask, input_type_ids):
    """int32 [batch, seq] arrays in; (start_logits, end_logits) float32 NumPy [batch, seq] out."""
    outputs = self._runner(
        **{
            name: np.asarray(value, np.int32)
            for name, value in zip(FEATURE_NAMES, (input_word_ids, input_mask, input_type_ids))
        })
    return outputs["start_logits"], outputs["end_logits"]
