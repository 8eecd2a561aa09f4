"""Question answering with a SavedModel written by export.py, and ask.py's job (`answer_question`).

`SavedModelQA` loads an export and answers through its raw-text `serve_text` signature
(tokenization, windowing and span decoding in the graph) or, for servers without the
tensorflow-text ops and for int8 exports, through a features model (`serving/features_model.py`:
the SavedModel's `serve_features`, or the int8 LiteRT model) with Python-side tokenization and
windows exactly as preprocessing makes them (vocab and settings from the export) and Python span
decoding (postprocess/span_decoding.py).
"""

import os
import time

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.model import precision
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import wordpiece
from squad_qa.serving import ask_config
from squad_qa.serving import features_model
from squad_qa.serving import module as serving_module


def warn_if_slow_precision(serving_precision, cpuinfo=None, has_gpu=None):
  """Logs one warning when an export of `serving_precision` runs slower here than float32 would:
  bfloat16 on a CPU without AVX512-BF16 or AMX (`model.precision.cpu_has_native_bfloat16`), or
  float16 on any CPU (CPUs have no fast float16 matmuls), in both cases only when no GPU is visible;
  int8 (LiteRT, always on the CPU) on a CPU without VNNI or AMX-INT8
  (`model.precision.cpu_has_int8_dot_product`). No warning when the CPU cannot be told.

  Args:
    serving_precision: the export's qa_config.json "serving_precision".
    cpuinfo, has_gpu: the text of /proc/cpuinfo and whether TensorFlow sees a GPU (default: this
      machine's).

  Returns:
    Whether it warned.
  """
  if serving_precision == features_model.INT8:
    if precision.cpu_has_int8_dot_product(cpuinfo) is not False:
      return False
    logging.warning(
        "this export computes in int8, but this CPU has no int8 dot-product "
        "instructions (AVX512-VNNI, AVX-VNNI or AMX-INT8): it may answer slower here "
        "than a float32 export (%s --serving_precision=float32)",
        commands.command("squad-qa-export"))
    return True
  if serving_precision not in ("bfloat16", "float16"):
    return False
  if has_gpu is None:
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
  if has_gpu:
    return False
  if serving_precision == "bfloat16":
    if precision.cpu_has_native_bfloat16(cpuinfo) is not False:
      return False
    why = "this CPU has neither AVX512-BF16 nor AMX"
  else:
    why = "CPUs have no fast float16 matmuls"
  logging.warning(
      "this SavedModel computes in %s, but %s and no GPU is visible: it will answer "
      "slower here than a float32 export (%s --serving_precision=float32)", serving_precision, why,
      commands.command("squad-qa-export"))
  return True


def _no_export(export_dir):
  """The one line for an --export_dir that holds no export: a --model_dir is exported from."""
  if os.path.exists(os.path.join(export_dir, artifacts.QA_CONFIG_FILE)):
    return (f"--export_dir={export_dir} is a --model_dir of {commands.command('squad-qa-train')}, "
            f"not an export; export it with `{commands.command('squad-qa-export')} "
            f"--model_dir={export_dir} --export_dir=<a new folder>`")
  return (f"--export_dir={export_dir}: no SavedModel there; make one with "
          f"`{commands.command('squad-qa-export')} --export_dir={export_dir}`")


class SavedModelQA:
  """Question answering with an export of export.py: a SavedModel, or an int8 LiteRT export.

  `serving_precision` is what its encoder computes in ("float32", "bfloat16", "float16" or
  "int8", from its qa_config.json; exports without the key are float32); an export on a machine
  without fast instructions for its precision logs one warning (`warn_if_slow_precision`). The
  features model (`features_model`) is the SavedModel's serve_features, or for int8 the LiteRT model
  (`serving.features_model.LiteRTFeatures`); an int8 export has no serve_text, so `answers`
  answers through the Python path there.

  Args:
    export_dir: folder written by export.py.

  Raises:
    errors.MissingFileError: the folder holds no assets.extra/qa_config.json, or no SavedModel
      (int8: no LiteRT model).
    errors.UsageError: an int8 export where ai-edge-litert is not installed (one line naming the
      extra that installs it).
  """

  def __init__(self, export_dir):
    is_saved_model = tf.saved_model.contains_saved_model(export_dir)
    if not is_saved_model and not os.path.exists(
        os.path.join(export_dir, artifacts.EXPORT_EXTRA_DIR, artifacts.QA_CONFIG_FILE)):
      raise errors.MissingFileError(_no_export(export_dir))
    self.config = artifacts.read_export_config(export_dir)
    self.serving_precision = self.config.get("serving_precision", "float32")
    if self.serving_precision == features_model.INT8:
      self._loaded = None
      self.features_model = features_model.LiteRTFeatures(
          os.path.join(export_dir, features_model.INT8_MODEL_FILE))
      self._vocab_path = os.path.join(export_dir, features_model.VOCAB_ASSET)
      self.has_serve_text = False
    else:
      if not is_saved_model:
        raise errors.MissingFileError(_no_export(export_dir))
      self._loaded = tf.saved_model.load(export_dir)
      self.features_model = features_model.SavedModelFeatures(self._loaded)
      self._vocab_path = self._loaded.vocab_file.asset_path.numpy().decode()
      self.has_serve_text = "serve_text" in self._loaded.signatures
    warn_if_slow_precision(self.serving_precision)
    self._tokenizer = None

  def answers(self, questions, contexts):
    """Answers a batch through the raw-text signature (an int8 export, which has none: through
    `answers_with_serve_features`).

    Args:
      questions, contexts: equally long lists of str.

    Returns:
      A list of span_decoding.Answer (text == context[start_char:end_char]; score -inf when no span
      could be chosen).

    Raises:
      errors.UsageError: the SavedModel has no serve_text signature (use
        `answers_with_serve_features`).
    """
    if self.serving_precision == features_model.INT8:
      return self.answers_with_serve_features(questions, contexts)
    if not self.has_serve_text:
      raise errors.UsageError(f"this SavedModel has no serve_text signature; re-export it with "
                              f"{commands.command('squad-qa-export')} or use --use_serve_features")
    out = self._loaded.signatures["serve_text"](question=tf.constant(questions, tf.string),
                                                context=tf.constant(contexts, tf.string))
    return [
        span_decoding.Answer(text.decode("utf-8"), int(start), int(end), float(score))
        for text, start, end, score in zip(out["answer"].numpy(), out["start_char"].numpy(),
                                           out["end_char"].numpy(), out["score"].numpy())
    ]

  def answer(self, question, context):
    """The best answer span of one question through the raw-text signature (an Answer)."""
    return self.answers([question], [context])[0]

  @property
  def tokenizer(self):
    """The Python-side WordPieceTokenizer of the SavedModel's vocab asset (built on first use)."""
    if self._tokenizer is None:
      self._tokenizer = wordpiece.WordPieceTokenizer(self._vocab_path, self.config["do_lower_case"])
    return self._tokenizer

  def features(self, question, context):
    """Python-side windows of one question (preprocess/features.py), as a list of Feature."""
    return self._features_batch([question], [context])[0]

  def _features_batch(self, questions, contexts):
    tokens = self.tokenizer.tokenize(list(questions) + list(contexts))
    featurization = features_lib.Featurization(max_seq_length=self.config["max_seq_length"],
                                               doc_stride=self.config["doc_stride"],
                                               max_query_length=self.config["max_query_length"])
    return [
        features_lib.make_features(0, 0, query.ids, passage, self.tokenizer.cls_id,
                                   self.tokenizer.sep_id, featurization)
        for query, passage in zip(tokens[:len(questions)], tokens[len(questions):])
    ]

  def features_logits(self, input_word_ids, input_mask, input_type_ids):
    """The features model on windows already made, as tensors: int32 [batch, seq] inputs (any seq
    up to max_seq_length) to (start_logits, end_logits), float32 [batch, seq] tensors. Callable
    inside a tf.function: the SavedModel's `serve_features` signature, or for an int8 export the
    LiteRT model through `tf.numpy_function`."""
    if self._loaded is not None:
      outputs = self._loaded.signatures["serve_features"](input_word_ids=input_word_ids,
                                                          input_mask=input_mask,
                                                          input_type_ids=input_type_ids)
      return outputs["start_logits"], outputs["end_logits"]
    start_logits, end_logits = tf.numpy_function(self.features_model,
                                                 [input_word_ids, input_mask, input_type_ids],
                                                 [tf.float32, tf.float32], stateful=False)
    start_logits.set_shape(input_word_ids.shape)
    end_logits.set_shape(input_word_ids.shape)
    return start_logits, end_logits

  def answers_with_serve_features(self, questions, contexts, n_best_size=None,
                                  max_answer_length=None):
    """Answers a batch with Python-side tokenization, the features model, Python decoding.

    The path for servers without the tensorflow-text ops and for int8 exports, and the reference
    serve_text is checked against. The windows of the batch go to the features model (the
    SavedModel's serve_features, or LiteRT) `window_batch_size` at a time (the export's, else
    export.py's default), each call cut to its longest window as serve_text does (the positions
    cut are padding in every window). n_best_size and max_answer_length default to the values
    baked into the export (else `span_decoding.SpanLimits`' defaults). A SQuAD 2.0 export
    (`version_2_with_negative` in its qa_config.json) answers "" with the null score when
    null - best > its `null_score_diff_threshold`, as serve_text does.

    Returns:
      A list of span_decoding.Answer.
    """
    per_question = self._features_batch(questions, contexts)
    start_logits, end_logits = self.window_logits([f for fs in per_question for f in fs])
    return self.decode(contexts, per_question, start_logits, end_logits, n_best_size,
                       max_answer_length)

  def decode(self, contexts, per_question, start_logits, end_logits, n_best_size=None,
             max_answer_length=None):
    """Answers from window logits: the decoding step of `answers_with_serve_features`.

    Args:
      contexts: the questions' contexts (str).
      per_question: for each question, its list of Feature (`features`).
      start_logits, end_logits: float32 [windows, max_seq_length], the rows of all questions'
        windows in order (`window_logits`).
      n_best_size, max_answer_length: as `answers_with_serve_features`.

    Returns:
      A list of span_decoding.Answer, one per context.
    """
    n_best_size = n_best_size or self.config.get("n_best_size",
                                                 span_decoding.SpanLimits.n_best_size)
    max_answer_length = max_answer_length or self.config.get(
        "max_answer_length", span_decoding.SpanLimits.max_answer_length)
    result, row = [], 0
    for context, fs in zip(contexts, per_question):
      windows = [
          span_decoding.real_window(start_logits[row + i], end_logits[row + i],
                                    np.array(f.token_start_char), np.array(f.token_end_char),
                                    np.array(f.token_is_max_context), f.input_mask)
          for i, f in enumerate(fs)
      ]
      row += len(fs)
      answer = span_decoding.decode_answer(windows, context, n_best_size, max_answer_length)
      # A SQuAD 2.0 export's null rule, as serve_text applies it.
      result.append(
          span_decoding.answer_as_served(answer, self.config.get("version_2_with_negative", False),
                                         self.config.get("null_score_diff_threshold", 0.0)))
    return result

  def window_logits(self, features):
    """The features model's logits for windows of `features_lib.make_features`.

    Args:
      features: a list of Feature (all of one max_seq_length).

    Returns:
      (start_logits, end_logits): float32 NumPy [len(features), max_seq_length]; the positions
      beyond a call's longest window are 0 (padding, never decoded).
    """
    if not features:
      return np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
    inputs = [
        np.array([getattr(f, name) for f in features], np.int32)
        for name in ("input_ids", "input_mask", "segment_ids")
    ]
    start_logits = np.zeros(inputs[0].shape, np.float32)
    end_logits = np.zeros(inputs[0].shape, np.float32)
    chunk = self.config.get("window_batch_size",
                            serving_module.DECODING_DEFAULTS["window_batch_size"])
    for begin in range(0, len(features), chunk):
      rows = slice(begin, begin + chunk)
      width = int(inputs[1][rows].sum(axis=1).max())
      start, end = self.features_model(*(x[rows, :width] for x in inputs))
      start_logits[rows, :width] = start
      end_logits[rows, :width] = end
    return start_logits, end_logits

  def answer_with_serve_features(self, question, context, n_best_size=None, max_answer_length=None):
    """One question through `answers_with_serve_features` (an Answer)."""
    return self.answers_with_serve_features([question], [context], n_best_size,
                                            max_answer_length)[0]


# ask.py's config (its own module loads without TensorFlow, so the flags parse first).
AskConfig = ask_config.AskConfig


def answer_questions(config):
  """ask.py's job: the best answer to each of `config.question` in its context, from
  `config.export_dir` (loaded once).

  Through serve_text, unless `config.use_serve_features` or the export has no serve_text.

  Args:
    config: an AskConfig.

  Returns:
    (answers, load_seconds): answers is a list of (question, span_decoding.Answer, seconds) in
    the order asked (Answer.text == context[start_char:end_char], character offsets in code
    points; seconds: the wall time of that question's call); load_seconds: the wall time of
    loading the SavedModel.

  Raises:
    errors.MissingFileError: no `config.context_file`, no SavedModel at `config.export_dir`, or
      an export without assets.extra/qa_config.json.
  """
  context = config.context
  if config.context_file:
    if not os.path.exists(config.context_file):
      raise errors.MissingFileError(f"--context_file={config.context_file}: no such file")
    with open(config.context_file, encoding="utf-8") as f:
      context = f.read()
  started = time.perf_counter()
  qa = SavedModelQA(config.export_dir)
  load_seconds = time.perf_counter() - started
  if config.use_serve_features or not qa.has_serve_text:

    def answer(question):
      return qa.answer_with_serve_features(question, context, config.n_best_size,
                                           config.max_answer_length)
  else:
    for name in ("n_best_size", "max_answer_length"):
      value = getattr(config, name)
      if config.given(name) and value != qa.config.get(name):
        logging.warning(
            "--%s=%s is ignored: serve_text was exported with %s (re-export, or use "
            "--use_serve_features)", name, value, qa.config.get(name))

    def answer(question):
      return qa.answer(question, context)

  answers = []
  for question in config.question:
    started = time.perf_counter()
    result = answer(question)
    answers.append((question, result, time.perf_counter() - started))
  return answers, load_seconds
