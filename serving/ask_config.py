"""ask.py's settings as one frozen config, without TensorFlow (its flags parse first)."""

import dataclasses
import os
from typing import Optional, Tuple

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.postprocess import span_decoding


@dataclasses.dataclass(frozen=True, kw_only=True)
class AskConfig(span_decoding.SpanLimits, settings.GivenFields):
  """Questions about one passage for an export: each field is ask.py's flag.

  Attributes:
    export_dir: folder written by export.py.
    question: the questions, a tuple of str (a str is one question).
    context: the passage holding the answer, unless `context_file` (UTF-8) is given.
    context_file: a UTF-8 file holding the passage.
    n_best_size, max_answer_length, null_score_diff_threshold: decoding settings of the
      serve_features path (None: the export's qa_config.json, as serve_text applies them); another
      value than the export's is refused on the serve_text path, and a threshold for an export
      that answers as SQuAD 1.1.
    use_serve_features: answer through serve_features even when the export has serve_text.
    format: "text" (lines for a person) or "json" (a JSON object a question, for a script).
    typed_flags: names of the fields whose flags were typed, or None (built in Python).

  Raises:
    errors.UsageError: no question, neither or both of a context and a context file, or a context
      or a question of only white space.
  """
  export_dir: str = settings.setting("export", "The folder export.py wrote.")
  question: Optional[Tuple[str, ...]] = settings.setting(
      None, "A question; give the flag again for more questions about the same passage")
  context: Optional[str] = settings.setting(None, "The passage holding the answer.")
  context_file: Optional[str] = settings.setting(None,
                                                 "Read the passage from this UTF-8 file instead.")
  n_best_size: Optional[int] = settings.variant(
      span_decoding.SpanLimits, "n_best_size", default=None,
      help="Start and end candidates considered per window (unset: the export's).")
  max_answer_length: Optional[int] = settings.variant(
      span_decoding.SpanLimits, "max_answer_length", default=None,
      help="Longest answer, in tokens (unset: the export's).")
  null_score_diff_threshold: Optional[float] = settings.setting(
      None, "SQuAD 2.0 exports: answer \"no answer\" when the null score beats the best span by "
      "more than this many logits (unset: the export's; the best_f1_thresh of train.py's SQuAD "
      "2.0 scoring is a value to try).",
      check=lambda name, value: span_decoding.check_decoding_settings(**{name: value}))
  use_serve_features: bool = settings.setting(
      False, "Tokenize and window in Python and call the serve_features signature instead of the "
      "raw-text serving_default (automatic for SavedModels without serve_text).")
  format: str = settings.setting(
      "text", "Output format: text, or json (one JSON object per question, a line each: question, "
      "answer, start_char, end_char, score, null_score (null where infinite) and seconds).",
      choices=settings.OUTPUT_FORMATS)
  typed_flags: Optional[tuple] = None

  def check(self):
    if isinstance(self.question, str):
      object.__setattr__(self, "question", (self.question,))
    elif self.question is not None:
      object.__setattr__(self, "question", tuple(self.question))
    if not self.question or (self.context is None and not self.context_file):
      raise errors.UsageError("give --question and --context (or --context_file)")
    if self.context is not None and self.context_file:
      raise errors.UsageError("give --context or --context_file, not both (one passage per run)")
    for i, text in enumerate((self.context,) + self.question):
      _check_utf8(("--context", "--question")[i > 0], text)
    if self.context is not None and not self.context.strip():
      raise errors.UsageError(f"--context={self.context!r} is empty: there is no passage to "
                              f"answer from; give its text")
    for question in self.question:  # before TensorFlow loads (tokens are checked once it has)
      if not question.strip():
        raise empty_question(question)


def _check_utf8(flag, text):
  """Raises errors.UsageError when `text` (a command-line argument, or None) was not UTF-8: Python
  keeps such bytes as lone surrogates (surrogateescape), which the model cannot read."""
  if text is None:
    return
  try:
    text.encode("utf-8")
  except UnicodeEncodeError:
    try:
      os.fsencode(text).decode("utf-8")  # surrogateescape's bytes back, then where they fail
      reason = "a lone surrogate"
    except UnicodeEncodeError:  # a surrogate surrogateescape does not make
      reason = "a lone surrogate"
    except UnicodeDecodeError as e:
      reason = f"byte {e.start}: {e.reason}"
    instead = ", or the passage in a UTF-8 --context_file" if flag == "--context" else ""
    raise errors.UsageError(
        f"{flag}: not UTF-8 text ({reason}); pass it as UTF-8{instead}") from None


def empty_question(question):
  """The errors.UsageError (a ValueError) for a question without a token, which asks nothing."""
  return errors.UsageError(f"question {question!r} is empty: there is nothing to answer; give "
                           f"the question's text")


def passage(config):
  """The passage `config` (an AskConfig) names: --context, or --context_file's text (read before
  TensorFlow loads, so a bad file is reported at once)."""
  return read_context_file(config.context_file) if config.context_file else config.context


def read_context_file(path):
  """The text of a UTF-8 file exactly as written, line ends included (so the answer's character
  offsets are the file's), but a leading byte-order mark, which shifts no offset; a pipe such as
  /dev/stdin is read too.

  Raises:
    errors.MissingFileError: no file at `path`.
    errors.UsageError: `path` is a folder, or the file is not UTF-8 (one line naming the byte and
      the fix), or holds only white space.
  """
  if os.path.isdir(path):
    raise errors.UsageError(f"--context_file={path} is a folder; pass the file holding the passage")
  if not os.path.exists(path):
    raise errors.MissingFileError(f"--context_file={path}: no such file")
  try:
    with open(path, encoding="utf-8-sig", newline="") as f:
      text = f.read()
  except UnicodeDecodeError as e:
    raise errors.UsageError(f"--context_file={path}: not UTF-8 text (byte {e.start}: "
                            f"{e.reason}); save it as UTF-8") from None
  if not text.strip():
    raise errors.UsageError(f"--context_file={path} is empty: there is no passage to answer from; "
                            f"write the passage into it")
  return text
