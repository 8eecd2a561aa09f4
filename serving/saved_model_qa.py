"""Question answering with an export of export.py, and ask.py's job (`answer_questions`).

`SavedModelQA` answers through the raw-text `serve_text` signature, or through a features model
(serving/features_model.py) with Python tokenization, windows and span decoding exactly as
preprocessing and postprocess/span_decoding.py make them.
"""

import math
import os
import re
import time

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops serve_text needs)

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.model import checkpoints
from squad_qa.model import precision
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import records
from squad_qa.preprocess import wordpiece
from squad_qa.serving import ask_config
from squad_qa.serving import features_model
from squad_qa.serving import module as serving_module


def warn_if_slow_precision(serving_precision, cpuinfo=None, has_gpu=None):
  """Logs one warning when an export of `serving_precision` runs slower here than float32 would.

  bfloat16 without AVX512-BF16/AMX or float16, both only without a GPU. Not int8: LiteRT's int8
  answered faster than float32 even on a CPU without int8 dot products (docs/serving.md "int8
  (LiteRT)"). No warning when the CPU cannot be told. `cpuinfo`, `has_gpu`: default this machine's.

  Returns:
    Whether it warned.
  """
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


_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]")


def _no_export(export_dir):
  """The one line for an --export_dir that holds no export."""
  if os.path.exists(os.path.join(export_dir, artifacts.QA_CONFIG_FILE)):
    return (f"--export_dir={export_dir} is a --model_dir of {commands.command('squad-qa-train')}, "
            f"not an export; export it with `{commands.command('squad-qa-export')} "
            f"--model_dir={export_dir} --export_dir=<a new folder>`")
  if os.path.exists(os.path.join(export_dir, records.META_FILE)):
    return (f"--export_dir={export_dir} holds records of {commands.command('squad-qa-records')}, "
            f"not an export; train on them, then export into a new folder with "
            f"`{commands.command('squad-qa-export')} --export_dir=<a new folder>`")
  if os.path.isfile(export_dir):
    return (f"--export_dir={export_dir} is a file, not an export folder; pass the folder "
            f"`{commands.command('squad-qa-export')}` wrote")
  # export.py refuses a folder holding other files: name one it can write.
  target = export_dir if not os.path.isdir(export_dir) or not os.listdir(export_dir) else (
      "<a new folder>")
  return (f"--export_dir={export_dir}: no SavedModel there; make one with "
          f"`{commands.command('squad-qa-export')} --export_dir={target}`")


class DamagedExportError(errors.UserError, IOError):
  """An export whose SavedModel files are missing, truncated or corrupted."""


def load_saved_model(export_dir):
  """`tf.saved_model.load(export_dir)`, its vocab asset checked.

  Raises:
    DamagedExportError: a file of the SavedModel is missing or damaged (one line naming it and
      the export command that writes it again).
  """
  variables = os.path.join(export_dir, tf.saved_model.VARIABLES_DIRECTORY,
                           tf.saved_model.VARIABLES_FILENAME)
  try:
    loaded = tf.saved_model.load(export_dir)
    vocab = loaded.vocab_file.asset_path.numpy().decode()
    if not os.path.exists(vocab):
      raise FileNotFoundError(f"{vocab} is missing")
    return loaded
  except (tf.errors.OpError, OSError, IndexError, ValueError) as e:
    what = checkpoints.damage(variables) or (
        str(e) if isinstance(e, FileNotFoundError) else
        f"{os.path.join(export_dir, 'saved_model.pb')} or its variables cannot be read "
        f"({str(e).strip().splitlines()[0].rsplit(': ', 1)[-1][:200]})")
    raise damaged_export(export_dir, what) from None


def damaged_export(export_dir, what):
  """The `DamagedExportError` of `export_dir`, `what` naming the damage (e.g. "x is missing")."""
  return DamagedExportError(
      f"--export_dir={export_dir}: damaged export ({what}); write it again with "
      f"`{commands.command('squad-qa-export')} --export_dir={export_dir}` and the --model_dir or "
      f"--init_checkpoint it was made from")


def _check_text(name, text):
  """Raises errors.UsageError naming `name` (e.g. "question", "contexts[2]") unless `text` is a
  str that UTF-8 can encode (serve_text takes UTF-8); bytes are told to be decoded."""
  if not isinstance(text, str):
    raise errors.UsageError(f"{name}: expected str, got {type(text).__name__}" + (
        "; decode it first, e.g. text.decode('utf-8')" if isinstance(text, bytes) else ""))
  try:
    text.encode("utf-8")
  except UnicodeEncodeError as e:  # a lone surrogate, e.g. from bytes decoded with surrogateescape
    raise errors.UsageError(
        f"{name}: character {e.start} ({text[e.start]!r}) is half of a UTF-16 surrogate pair, not "
        f"a character; decode the text from its bytes with its real encoding") from None


def _text_lists(questions, contexts):
  """`questions` and `contexts` (any iterables of str: lists, tuples, generators) as two lists.

  Raises:
    errors.UsageError: a str or bytes alone (it would be read as one question per character), a
      value that is not iterable, an item that is not a str (named by its position), or lists of
      different lengths.
  """
  lists = []
  for name, texts in (("questions", questions), ("contexts", contexts)):
    if isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
      raise errors.UsageError(f"{name}: expected a list of str, got {type(texts).__name__}; one "
                              f"question and context: SavedModelQA.answer(question, context)")
    texts = list(texts)
    for i, text in enumerate(texts):
      _check_text(f"{name}[{i}]", text)
    lists.append(texts)
  if len(lists[0]) != len(lists[1]):
    raise errors.UsageError(f"{len(lists[0])} questions and {len(lists[1])} contexts: give one "
                            f"context per question")
  return lists


class SavedModelQA:
  """Question answering with an export of export.py: a SavedModel, or an int8 LiteRT export.

  `features_model` is serve_features or, for int8 (no serve_text), the LiteRT model, which runs on
  `num_threads` threads (None: the CPUs this process may use); a SavedModel runs on TensorFlow's
  threads (`tf.config.threading`, set before TensorFlow first runs an op).

  Raises:
    errors.MissingFileError: no assets.extra/qa_config.json, or no SavedModel (int8: LiteRT model).
    errors.UsageError: an int8 export without ai-edge-litert installed; `num_threads` for a
      SavedModel export, or below 1.
    DamagedExportError: a file of the SavedModel is missing or damaged.
  """

  def __init__(self, export_dir, num_threads=None):
    is_saved_model = tf.saved_model.contains_saved_model(export_dir)
    if not is_saved_model and not os.path.exists(
        os.path.join(export_dir, artifacts.EXPORT_EXTRA_DIR, artifacts.QA_CONFIG_FILE)):
      raise errors.MissingFileError(_no_export(export_dir))
    self.config = artifacts.read_export_config(export_dir)
    self.serving_precision = self.config.get("serving_precision", "float32")
    if num_threads is not None and (self.serving_precision != features_model.INT8 or
                                    num_threads < 1):
      raise errors.UsageError(f"num_threads={num_threads}: " + (
          "must be at least 1" if num_threads < 1 else
          f"{export_dir} is a {self.serving_precision} SavedModel, which runs on TensorFlow's "
          f"threads: set tf.config.threading.set_intra_op_parallelism_threads before TensorFlow "
          f"runs its first op"))
    if self.serving_precision == features_model.INT8:
      self._loaded = None
      self.features_model = features_model.LiteRTFeatures(
          os.path.join(export_dir, features_model.INT8_MODEL_FILE), num_threads)
      # Absolute: the tokenizer is built on first use, maybe after the process changed directory.
      self._vocab_path = os.path.abspath(os.path.join(export_dir, features_model.VOCAB_ASSET))
      if not os.path.isfile(self._vocab_path):
        raise damaged_export(export_dir, f"{self._vocab_path} is missing")
      self.has_serve_text = False
    else:
      if not is_saved_model:
        raise errors.MissingFileError(_no_export(export_dir))
      self._loaded = load_saved_model(export_dir)
      self.features_model = features_model.SavedModelFeatures(self._loaded)
      self._vocab_path = os.path.abspath(self._loaded.vocab_file.asset_path.numpy().decode())
      self.has_serve_text = "serve_text" in self._loaded.signatures
    warn_if_slow_precision(self.serving_precision)
    self._tokenizer = None

  def answers(self, questions, contexts):
    """A list of span_decoding.Answer for equally long lists (or iterables) of str, through
    serve_text (int8: `answers_with_serve_features`); text == context[start_char:end_char], score
    -inf without a span.

    An export without serve_text (int8, or written with --serve_text=false) answers through
    `answers_with_serve_features`, as squad-qa-ask does.

    A question or context without a token (empty, spaces, or characters the tokenizer deletes
    such as U+200B) is answered "" with score -inf, as serve_text answers it.

    Raises:
      errors.UsageError: inputs that are not two equally long lists of str (the first item that is
        not a str named by its position).
    """
    return self._answers(*_text_lists(questions, contexts))

  def _answers(self, questions, contexts):
    """`answers` of two checked lists of str."""
    if not self.has_serve_text:
      return self._answers_with_serve_features(questions, contexts)
    out = self._loaded.signatures["serve_text"](question=tf.constant(questions, tf.string),
                                                context=tf.constant(contexts, tf.string))
    # Exports of earlier versions return no null_score: +inf, span_decoding.Answer's "unknown".
    null_scores = (out["null_score"].numpy() if "null_score" in out else [float("inf")] *
                   len(questions))
    return [
        span_decoding.Answer(text.decode("utf-8"), int(start), int(end), float(score),
                             float(null_score))
        for text, start, end, score, null_score in zip(out["answer"].numpy(
        ), out["start_char"].numpy(), out["end_char"].numpy(), out["score"].numpy(), null_scores)
    ]

  def answer(self, question, context):
    """The best answer span of one question through the raw-text signature (an Answer).

    Raises:
      errors.UsageError: `question` or `context` is not a str.
    """
    _check_text("question", question)
    _check_text("context", context)
    return self._answers([question], [context])[0]

  def warm_up(self, serve_features=False):
    """Answers one two-token question through `answer`, or with `serve_features` through
    `answer_with_serve_features` (each path sets up its own graph): the first call of a loaded
    export sets it up (measured 1.4 s for a float32 export and 5.5-6 s for bfloat16 on a 2-core
    CPU, about as long at any input length), which a server pays before its first request, not
    in it. Returns the seconds taken."""
    started = time.perf_counter()
    if serve_features:
      self.answer_with_serve_features("?", ".")
    else:
      self.answer("?", ".")
    return time.perf_counter() - started

  def has_tokens(self, question):
    """Whether `question` holds a token (not empty, spaces, or only characters the tokenizer
    deletes such as U+200B): one without asks nothing (the records skip it as
    question_has_no_tokens; serve_text answers it "")."""
    if _PRINTABLE_ASCII.search(question):  # holds a token; skips tokenizing most questions
      return True
    return bool(len(self.tokenizer.tokenize_ragged([question]).ids))

  @property
  def tokenizer(self):
    """The Python WordPieceTokenizer of the export's vocab (built on first use)."""
    if self._tokenizer is None:
      self._tokenizer = wordpiece.WordPieceTokenizer(self._vocab_path, self.config["do_lower_case"])
    return self._tokenizer

  def features(self, question, context):
    """Python windows of one question (preprocess/features.py): a list of Feature."""
    return self._features_batch([question], [context])[0]

  def _features_batch(self, questions, contexts):
    tokens = self.tokenizer.tokenize(list(questions) + list(contexts))
    featurization = features_lib.Featurization(max_seq_length=self.config["max_seq_length"],
                                               doc_stride=self.config["doc_stride"],
                                               max_query_length=self.config["max_query_length"])
    return [
        features_lib.make_features(0, 0, query.ids, passage, self.tokenizer.cls_id,
                                   self.tokenizer.sep_id, featurization) if len(query) else []
        for query, passage in zip(tokens[:len(questions)], tokens[len(questions):])
    ]

  def features_logits(self, input_word_ids, input_mask, input_type_ids):
    """(start_logits, end_logits) float32 [batch, seq] of int32 [batch, seq] window inputs
    (seq <= max_seq_length) through serve_features or the int8 model; callable in a tf.function."""
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
                                  max_answer_length=None, null_score_diff_threshold=None):
    """A list of span_decoding.Answer through Python tokenization, the features model and Python
    decoding: the path without tensorflow-text ops, for int8, and serve_text's reference (windows
    `window_batch_size` at a time, cut to the longest; the settings left None and the null rule
    the export's).

    Raises:
      errors.UsageError: inputs that are not two equally long lists of str (the first item that is
        not a str named by its position).
    """
    return self._answers_with_serve_features(*_text_lists(questions, contexts), n_best_size,
                                             max_answer_length, null_score_diff_threshold)

  def _answers_with_serve_features(self, questions, contexts, n_best_size=None,
                                   max_answer_length=None, null_score_diff_threshold=None):
    """`answers_with_serve_features` of two checked lists of str."""
    per_question = self._features_batch(questions, contexts)
    start_logits, end_logits = self.window_logits([f for fs in per_question for f in fs])
    return self.decode(contexts, per_question, start_logits, end_logits, n_best_size,
                       max_answer_length, null_score_diff_threshold)

  def decode(self, contexts, per_question, start_logits, end_logits, n_best_size=None,
             max_answer_length=None, null_score_diff_threshold=None):
    """One span_decoding.Answer per context from window logits.

    Args:
      contexts: the questions' contexts (str).
      per_question: for each question, its list of Feature.
      start_logits, end_logits: float32 [windows, max_seq_length], all questions' windows in order.
      n_best_size, max_answer_length, null_score_diff_threshold: as
        `answers_with_serve_features`.
    """
    span_decoding.check_decoding_settings(n_best_size, max_answer_length, null_score_diff_threshold,
                                          flag_prefix="")
    version_2 = self.config.get("version_2_with_negative", False)
    if null_score_diff_threshold is not None and not version_2:
      raise errors.UsageError(
          f"null_score_diff_threshold={null_score_diff_threshold}: the export answers as SQuAD 1.1 "
          f"(version_2_with_negative=false), so no null answer is weighed; leave it None")
    if null_score_diff_threshold is None:
      null_score_diff_threshold = self.config.get("null_score_diff_threshold", 0.0)
    if n_best_size is None:
      n_best_size = self.config.get("n_best_size", span_decoding.SpanLimits.n_best_size)
    if max_answer_length is None:
      max_answer_length = self.config.get("max_answer_length",
                                          span_decoding.SpanLimits.max_answer_length)
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
      result.append(span_decoding.answer_as_served(answer, version_2, null_score_diff_threshold))
    return result

  def window_logits(self, features):
    """(start_logits, end_logits) float32 NumPy [len(features), max_seq_length] for a list of
    Feature; positions beyond a call's longest window are 0. A call takes `window_batch_size`
    windows, or one where the features model runs windows alone (`runs_windows_alone`)."""
    if not features:
      return np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
    inputs = [
        np.array([getattr(f, name) for f in features], np.int32)
        for name in ("input_ids", "input_mask", "segment_ids")
    ]
    start_logits = np.zeros(inputs[0].shape, np.float32)
    end_logits = np.zeros(inputs[0].shape, np.float32)
    # A model that runs windows alone runs each at its own length: nothing to share a width with.
    chunk = 1 if self.features_model.runs_windows_alone else self.config.get(
        "window_batch_size", serving_module.DECODING_DEFAULTS["window_batch_size"])
    for begin in range(0, len(features), chunk):
      rows = slice(begin, begin + chunk)
      width = int(inputs[1][rows].sum(axis=1).max())
      start, end = self.features_model(*(x[rows, :width] for x in inputs))
      start_logits[rows, :width] = start
      end_logits[rows, :width] = end
    return start_logits, end_logits

  def answer_with_serve_features(self, question, context, n_best_size=None, max_answer_length=None,
                                 null_score_diff_threshold=None):
    """One question through `answers_with_serve_features` (an Answer).

    Raises:
      errors.UsageError: `question` or `context` is not a str.
    """
    _check_text("question", question)
    _check_text("context", context)
    return self._answers_with_serve_features([question], [context], n_best_size, max_answer_length,
                                             null_score_diff_threshold)[0]


# ask.py's config (its own module loads without TensorFlow, so the flags parse first).
AskConfig = ask_config.AskConfig


def answer_line(answer, seconds):
  """ask.py's line for one answer (a span_decoding.Answer found in `seconds`): the span with its
  character offsets and score; "no answer" when the null answer won (SQuAD 2.0: by how much, over
  the best span's score) or the context has no span."""
  took = f"{1000 * seconds:.0f} ms"
  if answer.text:
    return (f"A: {answer.text!r} (characters {answer.start_char}..{answer.end_char}, "
            f"score {answer.score:.2f}, {took})")
  if answer.score == float("-inf"):
    return f"A: no answer (no span in the context, {took})"
  return (f"A: no answer (the null answer won by {answer.null_score_diff:.2f} over the best span's "
          f"score {answer.score:.2f}; {took})")


def answer_record(question, answer, seconds):
  """ask.py --format=json's object for one answer: question, answer, start_char, end_char (code
  points, end exclusive), score and null_score (logits; None where infinite: strict JSON has no
  infinity) and seconds."""
  finite = lambda x: x if math.isfinite(x) else None
  return {
      "question": question,
      "answer": answer.text,
      "start_char": answer.start_char,
      "end_char": answer.end_char,
      "score": finite(answer.score),
      "null_score": finite(answer.null_score),
      "seconds": round(seconds, 4)
  }


def _warn_if_truncated(qa, question):
  """Logs a warning when `question` has more WordPiece tokens than the export reads (its
  max_query_length): the windows hold only the first ones, as in training's records."""
  limit = qa.config["max_query_length"]
  if len(question) <= limit:  # a token holds at least one character
    return
  tokens = len(qa.tokenizer.tokenize([question])[0].ids)
  if tokens > limit:
    logging.warning("question %r has %d tokens; the export reads the first %d (max_query_length)",
                    question if len(question) <= 60 else question[:57] + "...", tokens, limit)


def answer_questions(config, context=None):
  """ask.py's job: (answers, load_seconds) for `config` (an AskConfig); load_seconds include the
  export's warm-up (`SavedModelQA.warm_up`), so that each answer's seconds are its own.

  `answers`: [(question, span_decoding.Answer, seconds of its call)] in order, through serve_text
  unless `config.use_serve_features` or the export has none.

  Args:
    config: an AskConfig.
    context: its passage (str), when already read (None: `ask_config.passage(config)`).

  Raises:
    errors.MissingFileError: no `config.context_file`, or no usable export at `config.export_dir`.
    errors.UsageError: a `config.context_file` that is not UTF-8, a question without a token,
      an --n_best_size, --max_answer_length or --null_score_diff_threshold other than
      serve_text's, or a threshold for an export that answers as SQuAD 1.1.
  """
  context = ask_config.passage(config) if context is None else context
  started = time.perf_counter()
  qa = SavedModelQA(config.export_dir)
  threshold = config.null_score_diff_threshold
  if threshold is not None and not qa.config.get("version_2_with_negative"):
    raise span_decoding.unused_threshold(
        threshold, f"{config.export_dir} answers as SQuAD 1.1 (version_2_with_negative=false)")
  if config.use_serve_features or not qa.has_serve_text:

    def answer(question):
      return qa.answer_with_serve_features(question, context, config.n_best_size,
                                           config.max_answer_length, threshold)
  else:
    for name in ("n_best_size", "max_answer_length", "null_score_diff_threshold"):
      value = getattr(config, name)
      if config.given(name) and value != qa.config.get(name):
        raise errors.UsageError(
            f"--{name}={value}: serve_text was exported with {name}={qa.config.get(name)}, which "
            f"it applies; add --use_serve_features, or re-export with --{name}={value}")

    def answer(question):
      return qa.answer(question, context)

  for question in config.question:  # one line for a question without a token, not "no answer"
    if not qa.has_tokens(question):
      raise ask_config.empty_question(question)
  qa.warm_up(serve_features=config.use_serve_features)
  load_seconds = time.perf_counter() - started
  answers = []
  for question in config.question:
    _warn_if_truncated(qa, question)
    started = time.perf_counter()
    result = answer(question)
    answers.append((question, result, time.perf_counter() - started))
  return answers, load_seconds
