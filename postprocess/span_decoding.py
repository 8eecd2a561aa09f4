"""Picks each question's answer span from the start/end logits of all its windows.

The rule is google-research/bert run_squad.py `write_predictions` (tfm
`squad_lib.postprocess_output`): per window, the `n_best_size` highest start and end logits of its
real positions are paired; a pair is kept when both tokens lie in the context, the start is in its
max-context window, end >= start and the span has at most `max_answer_length` tokens; the answer is
the kept pair with the largest start_logit + end_logit over all windows (first one on ties, in
window/start/end order, as the reference's stable sort). Unlike the reference, which re-joins
whitespace-split words and aligns them heuristically (`get_final_text`), the text is cut straight
from the context with the tokens' character offsets, so it is an exact substring, and padding
positions are never candidates (the reference ranks the logits of all max_seq_length positions, so a
padding logit could take one of the n_best slots): the answer is then the same whether a window was
padded to max_seq_length or only to the longest window of its batch.

SQuAD 2.0 (`version_2_with_negative`, same reference): each question also gets a null score, the
minimum over its windows of start_logit[0] + end_logit[0] (the [CLS] token), and the answer is ""
when null score - best non-null span score > `null_score_diff_threshold` (`null_answer`).
"""

import dataclasses
import math
from typing import Dict, Optional

import numpy as np

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.preprocess import squad_reader


def check_decoding_settings(n_best_size=None, max_answer_length=None,
                            null_score_diff_threshold=None):
  """Refuses decoding settings that cannot give an answer; None skips a setting.

  The one check of these settings for every entry point (train.py's prediction, export.py's
  serve_text, ask.py, the benchmarks), run before any work, so a refused value writes nothing.

  Args:
    n_best_size: start and end candidates per window (int, at least 1).
    max_answer_length: longest answer, in tokens (int, at least 1).
    null_score_diff_threshold: SQuAD 2.0 null-answer threshold, in logit units (finite).

  Raises:
    errors.UsageError: one line naming the flag, its value and what it must be.
  """
  for name, value in (("n_best_size", n_best_size), ("max_answer_length", max_answer_length)):
    if value is not None and (not isinstance(value, int) or value < 1):
      raise errors.UsageError(f"--{name}={value}: must be at least 1 (below that no span can be "
                              f"an answer, and every prediction would be empty)")
  if null_score_diff_threshold is not None and not math.isfinite(null_score_diff_threshold):
    raise errors.UsageError(f"--null_score_diff_threshold={null_score_diff_threshold}: must be a "
                            f"finite number of logits")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpanLimits(settings.Settings):
  """Which spans decoding weighs: the decoding settings ask.py takes."""
  n_best_size: int = settings.setting(
      20, "Start and end candidates considered per window.",
      check=lambda name, value: check_decoding_settings(**{name: value}))
  max_answer_length: int = settings.setting(
      30, "Longest answer, in tokens.",
      check=lambda name, value: check_decoding_settings(**{name: value}))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DecodingSettings(squad_reader.SquadVersion, SpanLimits):
  """How answers are decoded from logits: train.py's prediction, export.py's serve_text (and
  `serving.module.DECODING_DEFAULTS`), the decoding part of qa_config.json
  (`base.artifacts.write_qa_config`)."""
  null_score_diff_threshold: float = settings.setting(
      0.0,
      "SQuAD 2.0: predict \"\" when the null score (min over windows of start[0] + end[0]) minus "
      "the best non-null span score exceeds this (google-research/bert, tfm).",
      check=lambda name, value: check_decoding_settings(**{name: value}))


@dataclasses.dataclass
class WindowLogits:
  """One eval feature's model output and offsets at its real positions (`real_window` cuts them).

  All NumPy arrays of the window's real length (its input_mask's ones: [CLS] question [SEP] context
  [SEP]); padding positions are left out so that they are never candidates.

  Attributes:
    start_logits, end_logits: float32 logits.
    token_start_char, token_end_char: int code-point offsets into the context (end exclusive), -1
      outside the context.
    token_is_max_context: int 0/1.
  """
  start_logits: np.ndarray
  end_logits: np.ndarray
  token_start_char: np.ndarray
  token_end_char: np.ndarray
  token_is_max_context: np.ndarray


def real_window(start_logits, end_logits, token_start_char, token_end_char, token_is_max_context,
                input_mask):
  """A WindowLogits of one window's real positions.

  Args:
    start_logits, end_logits: float32 [seq] (any seq >= the window's real length).
    token_start_char, token_end_char, token_is_max_context: int [seq] as WindowLogits.
    input_mask: int [seq], 1 on real positions (a prefix), 0 on padding.

  Returns:
    A WindowLogits whose arrays are cut to sum(input_mask).
  """
  n = int(np.sum(input_mask))
  return WindowLogits(start_logits[:n], end_logits[:n], token_start_char[:n], token_end_char[:n],
                      token_is_max_context[:n])


@dataclasses.dataclass
class Answer:
  """A decoded answer: text == context[start_char:end_char]; score = start + end logit.

  A question with no valid span gets text "", start_char = end_char = 0 and score -inf.
  `null_score` (not part of equality) is min over windows of start_logits[0] + end_logits[0]
  (+inf without windows), for SQuAD 2.0.
  """
  text: str
  start_char: int
  end_char: int
  score: float
  null_score: float = dataclasses.field(default=float("inf"), compare=False)

  @property
  def null_score_diff(self):
    """null_score - score: the reference's `null_odds` (scores_diff_json) entry; the null score
    alone when there is no valid span (as the reference)."""
    return self.null_score if self.score == float("-inf") else self.null_score - self.score


def null_answer(answer, null_score_diff_threshold=0.0):
  """SQuAD 2.0 decision (run_squad.py / tfm `postprocess_output`): "" when
  null_score - best non-null score > threshold or when there is no valid span, else the span's text.
  """
  if answer.score == float("-inf") or answer.null_score_diff > null_score_diff_threshold:
    return ""
  return answer.text


def answer_as_served(answer, version_2_with_negative=False, null_score_diff_threshold=0.0):
  """The answer a question gets, as serve_text reports it (serving/answers.py).

  SQuAD 1.1 models: `answer` itself. SQuAD 2.0 models: when `null_answer` says "" for a question
  that has windows, Answer("", 0, 0, null score); a question without windows keeps ("", 0, 0,
  -inf).
  """
  if not version_2_with_negative or null_answer(answer, null_score_diff_threshold):
    return answer
  if answer.null_score == float("inf"):  # no window: nothing to score, not even the null answer
    return Answer("", 0, 0, float("-inf"), answer.null_score)
  return Answer("", 0, 0, answer.null_score, answer.null_score)


@dataclasses.dataclass
class Predictions:
  """What train.py writes for every question of a predict file.

  Attributes:
    texts: {question id: answer text} (predictions.json; "" where nothing can be said, and for
      SQuAD 2.0 where the null answer won).
    best_non_null: {question id: best span's text, "" without a span} (the answers the best-
      threshold sweep turns on and off).
    null_odds: {question id: null score - best span score} (null_odds.json, SQuAD 2.0 only, else
      None); +inf for a question without windows (its context has no token), so that no threshold
      answers it.
  """
  texts: Dict[str, str]
  best_non_null: Dict[str, str]
  null_odds: Optional[Dict[str, float]] = None


def final_predictions(question_ids, answers, version_2_with_negative=False,
                      null_score_diff_threshold=0.0):
  """Every question's prediction, including those that had no window to decode.

  Args:
    question_ids: every question id to predict (str), in file order.
    answers: {question id: Answer} for the questions that had windows; any other id gets ""
      (a context without tokens, or a question skipped when the records were made).
    version_2_with_negative: apply the null rule (`null_answer`) and make null_odds.
    null_score_diff_threshold: the null rule's threshold.

  Returns:
    Predictions, keyed in the order of `question_ids`.
  """
  no_window = Answer("", 0, 0, float("-inf"))
  chosen = [(qid, answers.get(qid, no_window)) for qid in question_ids]
  if version_2_with_negative:
    texts = {qid: null_answer(a, null_score_diff_threshold) for qid, a in chosen}
    null_odds = {qid: a.null_score_diff for qid, a in chosen}
  else:
    texts, null_odds = {qid: a.text for qid, a in chosen}, None
  return Predictions(texts, {qid: a.text for qid, a in chosen}, null_odds)


def best_indexes(logits, n_best_size):
  """Indices of the `n_best_size` largest logits, largest first, lower index first on ties."""
  return np.argsort(-np.asarray(logits), kind="stable")[:n_best_size]


def decode_answer(windows, context, n_best_size=SpanLimits.n_best_size,
                  max_answer_length=SpanLimits.max_answer_length):
  """Best answer span of one question over all its windows.

  Args:
    windows: list of WindowLogits, in window order.
    context: the paragraph (str) the offsets point into.
    n_best_size: start and end candidates per window.
    max_answer_length: longest span, in tokens.

  Returns:
    An Answer.
  """
  best = Answer("", 0, 0, float("-inf"))
  null_score = float("inf")
  for w in windows:
    null_score = min(null_score, float(w.start_logits[0]) + float(w.end_logits[0]))
    for s in best_indexes(w.start_logits, n_best_size):
      if w.token_start_char[s] < 0 or not w.token_is_max_context[s]:
        continue
      for e in best_indexes(w.end_logits, n_best_size):
        if w.token_start_char[e] < 0 or e < s or e - s + 1 > max_answer_length:
          continue
        score = float(w.start_logits[s]) + float(w.end_logits[e])
        if score > best.score:
          start_char, end_char = int(w.token_start_char[s]), int(w.token_end_char[e])
          best = Answer(context[start_char:end_char], start_char, end_char, score)
  best.null_score = null_score
  return best


def decode_all(windows_by_example, contexts_by_example, n_best_size=SpanLimits.n_best_size,
               max_answer_length=SpanLimits.max_answer_length):
  """Answers for many questions.

  Args:
    windows_by_example: {example index: [WindowLogits, ...]}.
    contexts_by_example: {example index: context str}.

  Returns:
    {example index: Answer}.
  """
  return {
      index: decode_answer(windows, contexts_by_example[index], n_best_size, max_answer_length)
      for index, windows in windows_by_example.items()
  }
