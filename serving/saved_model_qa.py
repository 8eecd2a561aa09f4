"""Question answering with a SavedModel written by export.py, and ask.py's job (`answer_question`).

`SavedModelQA` loads an export and answers through its raw-text `serve_text` signature
(tokenization, windowing and span decoding in the graph) or, for servers without the
tensorflow-text ops, through `serve_features` with Python-side tokenization and windows exactly as
preprocessing makes them (vocab and settings from the SavedModel) and Python span decoding
(postprocess/span_decoding.py).
"""

import dataclasses
import os
import time

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_text  # pylint: disable=unused-import  (registers the ops serve_text needs)

from squad_qa import errors
from squad_qa.model import precision
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import wordpiece
from squad_qa.serving import module as serving_module
from squad_qa.tasks import artifacts


def warn_if_slow_precision(serving_precision, cpuinfo=None, has_gpu=None):
  """Logs one warning when an export of `serving_precision` runs slower here than float32 would:
  bfloat16 on a CPU without AVX512-BF16 or AMX (`model.precision.cpu_has_native_bfloat16`; no
  warning when that cannot be told) and no visible GPU.

  Args:
    serving_precision: the export's qa_config.json "serving_precision".
    cpuinfo, has_gpu: the text of /proc/cpuinfo and whether TensorFlow sees a GPU (default: this
      machine's).

  Returns:
    Whether it warned.
  """
  if serving_precision != "bfloat16":
    return False
  if has_gpu is None:
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
  if has_gpu or precision.cpu_has_native_bfloat16(cpuinfo) is not False:
    return False
  logging.warning("this SavedModel computes in bfloat16, but this CPU has neither AVX512-BF16 nor "
                  "AMX and no GPU is visible: it will answer slower here than a float32 export "
                  "(export.py --serving_precision=float32)")
  return True


class SavedModelQA:
  """Question answering with an exported SavedModel.

  `serving_precision` is what its encoder computes in ("float32" or "bfloat16", from its
  qa_config.json; exports without the key are float32); a bfloat16 export on a machine without
  fast bfloat16 logs one warning (`warn_if_slow_precision`).

  Args:
    export_dir: folder written by export.py.

  Raises:
    errors.MissingFileError: the folder holds no SavedModel, or no assets.extra/qa_config.json.
  """

  def __init__(self, export_dir):
    if not tf.saved_model.contains_saved_model(export_dir):
      raise errors.MissingFileError(f"--export_dir={export_dir}: no SavedModel there; make one "
                                    f"with `python export.py --export_dir={export_dir}`")
    self._loaded = tf.saved_model.load(export_dir)
    self.config = artifacts.read_export_config(export_dir)
    self.serving_precision = self.config.get("serving_precision", "float32")
    warn_if_slow_precision(self.serving_precision)
    self.has_serve_text = "serve_text" in self._loaded.signatures
    self._tokenizer = None

  def answers(self, questions, contexts):
    """Answers a batch through the raw-text signature.

    Args:
      questions, contexts: equally long lists of str.

    Returns:
      A list of span_decoding.Answer (text == context[start_char:end_char]; score -inf when no span
      could be chosen).

    Raises:
      errors.UsageError: the SavedModel has no serve_text signature (use
        `answers_with_serve_features`).
    """
    if not self.has_serve_text:
      raise errors.UsageError("this SavedModel has no serve_text signature; re-export it with "
                              "export.py or use --use_serve_features")
    out = self._loaded.signatures["serve_text"](
        question=tf.constant(questions, tf.string), context=tf.constant(contexts, tf.string))
    return [span_decoding.Answer(text.decode("utf-8"), int(start), int(end), float(score))
            for text, start, end, score in zip(out["answer"].numpy(), out["start_char"].numpy(),
                                               out["end_char"].numpy(), out["score"].numpy())]

  def answer(self, question, context):
    """The best answer span of one question through the raw-text signature (an Answer)."""
    return self.answers([question], [context])[0]

  @property
  def tokenizer(self):
    """The Python-side WordPieceTokenizer of the SavedModel's vocab asset (built on first use)."""
    if self._tokenizer is None:
      self._tokenizer = wordpiece.WordPieceTokenizer(
          self._loaded.vocab_file.asset_path.numpy().decode(), self.config["do_lower_case"])
    return self._tokenizer

  def features(self, question, context):
    """Python-side windows of one question (preprocess/features.py), as a list of Feature."""
    return self._features_batch([question], [context])[0]

  def _features_batch(self, questions, contexts):
    tokens = self.tokenizer.tokenize(list(questions) + list(contexts))
    return [features_lib.make_features(
        0, 0, query.ids, passage, self.tokenizer.cls_id, self.tokenizer.sep_id,
        self.config["max_seq_length"], self.config["doc_stride"], self.config["max_query_length"])
            for query, passage in zip(tokens[:len(questions)], tokens[len(questions):])]

  def window_logits(self, input_word_ids, input_mask, input_type_ids):
    """The `serve_features` signature on windows already made: int32 [batch, seq] inputs (any seq
    up to max_seq_length) to (start_logits, end_logits), float32 [batch, seq] tensors. Callable
    inside a tf.function."""
    outputs = self._loaded.signatures["serve_features"](
        input_word_ids=input_word_ids, input_mask=input_mask, input_type_ids=input_type_ids)
    return outputs["start_logits"], outputs["end_logits"]

  def answers_with_serve_features(self, questions, contexts, n_best_size=None,
                                  max_answer_length=None):
    """Answers a batch with Python-side tokenization, one serve_features call, Python decoding.

    The path for servers without the tensorflow-text ops, and the reference serve_text is checked
    against. n_best_size and max_answer_length default to the values baked into the export (else
    20 and 30). A SQuAD 2.0 export (`version_2_with_negative` in its qa_config.json) answers ""
    with the null score when null - best > its `null_score_diff_threshold`, as serve_text does.

    Returns:
      A list of span_decoding.Answer.
    """
    n_best_size = n_best_size or self.config.get("n_best_size", 20)
    max_answer_length = max_answer_length or self.config.get("max_answer_length", 30)
    per_question = self._features_batch(questions, contexts)
    features = [f for fs in per_question for f in fs]
    if features:
      start_logits, end_logits = (t.numpy() for t in self.window_logits(
          tf.constant([f.input_ids for f in features], tf.int32),
          tf.constant([f.input_mask for f in features], tf.int32),
          tf.constant([f.segment_ids for f in features], tf.int32)))
    result, row = [], 0
    for context, fs in zip(contexts, per_question):
      windows = [span_decoding.real_window(
          start_logits[row + i], end_logits[row + i], np.array(f.token_start_char),
          np.array(f.token_end_char), np.array(f.token_is_max_context), f.input_mask)
                 for i, f in enumerate(fs)]
      row += len(fs)
      answer = span_decoding.decode_answer(windows, context, n_best_size, max_answer_length)
      # A SQuAD 2.0 export's null rule, as serve_text applies it.
      result.append(span_decoding.answer_as_served(
          answer, self.config.get("version_2_with_negative", False),
          self.config.get("null_score_diff_threshold", 0.0)))
    return result

  def answer_with_serve_features(self, question, context, n_best_size=None, max_answer_length=None):
    """One question through `answers_with_serve_features` (an Answer)."""
    return self.answers_with_serve_features([question], [context], n_best_size,
                                            max_answer_length)[0]


@dataclasses.dataclass(frozen=True)
class AskConfig:
  """Questions about one passage for an export (ask.py's flags of the same names).

  Attributes:
    export_dir: folder written by export.py.
    question: the questions, a tuple of str (a str is taken as one question; ask.py's
      --question may be given several times).
    context: the passage holding the answer (str), unless `context_file` is given.
    context_file: a UTF-8 file holding the passage; wins over `context`.
    n_best_size, max_answer_length: decoding settings of the serve_features path (None: the
      export's); serve_text has its own baked in, and a different value given is ignored with a
      warning.
    use_serve_features: answer through serve_features even when the export has serve_text.
    typed_flags: names of the fields whose flags were typed (`flags.command_line.config_from_flags`
      fills it), or None for a config built in Python, where a field counts as given when it
      differs from its default (the flag's).

  Raises:
    errors.UsageError: no question, or neither a context nor a context file.
  """
  export_dir: str = "export"
  question: str = None
  context: str = None
  context_file: str = None
  n_best_size: int = serving_module.DECODING_DEFAULTS["n_best_size"]
  max_answer_length: int = serving_module.DECODING_DEFAULTS["max_answer_length"]
  use_serve_features: bool = False
  typed_flags: tuple = None

  def __post_init__(self):
    span_decoding.check_decoding_settings(self.n_best_size, self.max_answer_length)
    if isinstance(self.question, str):
      object.__setattr__(self, "question", (self.question,))
    elif self.question is not None:
      object.__setattr__(self, "question", tuple(self.question))
    if not self.question or (self.context is None and not self.context_file):
      raise errors.UsageError("give --question and --context (or --context_file)")

  def given(self, name):
    """Whether the user gave field `name`: typed its flag, or (typed_flags None) set it to a value
    other than its default."""
    if self.typed_flags is None:
      return getattr(self, name) != self.__dataclass_fields__[name].default
    return name in self.typed_flags


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
        logging.warning("--%s=%s is ignored: serve_text was exported with %s (re-export, or use "
                        "--use_serve_features)", name, value, qa.config.get(name))

    def answer(question):
      return qa.answer(question, context)
  answers = []
  for question in config.question:
    started = time.perf_counter()
    result = answer(question)
    answers.append((question, result, time.perf_counter() - started))
  return answers, load_seconds
