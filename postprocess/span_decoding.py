"""Picks each question's answer span from the start/end logits of all its windows.

The rule is run_squad.py `write_predictions` (tfm `squad_lib.postprocess_output`): the `n_best_size`
best starts and ends of each window are paired; a pair counts when both lie in the context, the
start is in its max-context window and the span is 1..`max_answer_length` tokens; the best sum
wins (first on ties). The text is cut from the context by character offsets, and padding positions
are never candidates. SQuAD 2.0: the null score is the min over windows of the [CLS] logits' sum.
"""

import dataclasses
import math
import numbers
from typing import Dict, Optional

import numpy as np

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.preprocess import squad_reader


def check_decoding_settings(n_best_size=None, max_answer_length=None,
                            null_score_diff_threshold=None, flag_prefix="--"):
  """Refuses decoding settings that cannot give an answer (n_best_size and max_answer_length,
  in tokens, below 1; a non-finite null_score_diff_threshold, in logits); None skips a setting.

  Raises:
    errors.UsageError: naming the setting (after `flag_prefix`: "" for a Python argument) and
      its value.
  """
  for name, value in (("n_best_size", n_best_size), ("max_answer_length", max_answer_length)):
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or
                              value < 1):
      raise errors.UsageError(f"{flag_prefix}{name}={value}: must be at least 1 (below that no "
                              f"span can be an answer, and every prediction would be empty)")
  if null_score_diff_threshold is not None and not math.isfinite(null_score_diff_threshold):
    raise errors.UsageError(f"{flag_prefix}null_score_diff_threshold={null_score_diff_threshold}: "
                            f"must be a finite number of logits")


def unused_threshold(threshold, why):
  """The errors.UsageError for a typed --null_score_diff_threshold where answers are decoded as
  SQuAD 1.1, `why` saying whose (e.g. "--model_dir=m was trained on SQuAD 1.1 records")."""
  return errors.UsageError(f"--null_score_diff_threshold={threshold}: {why}: every question gets "
                           f"a span, and no null answer is weighed; drop the flag")


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
  """How answers are decoded from logits (train.py, export.py's serve_text, qa_config.json)."""
  null_score_diff_threshold: float = settings.setting(
      0.0,
      "SQuAD 2.0: predict \"\" when the null score (min over windows of start[0] + end[0]) minus "
      "the best non-null span score exceeds this (google-research/bert, tfm).",
      check=lambda name, value: check_decoding_settings(**{name: value}))


@dataclasses.dataclass
class WindowLogits:
  """One window's float32 logits, code-point offsets (-1 outside the context) and 0/1 max-context
  flags, NumPy arrays [n] over its n real positions (`real_window` cuts them)."""
  start_logits: np.ndarray
  end_logits: np.ndarray
  token_start_char: np.ndarray
  token_end_char: np.ndarray
  token_is_max_context: np.ndarray


def real_window(start_logits, end_logits, token_start_char, token_end_char, token_is_max_context,
                input_mask):
  """A WindowLogits of the arrays [seq] cut to the window's sum(input_mask) real positions."""
  n = int(np.sum(input_mask))
  return WindowLogits(start_logits[:n], end_logits[:n], token_start_char[:n], token_end_char[:n],
                      token_is_max_context[:n])


@dataclasses.dataclass
class Answer:
  """A decoded answer: text == context[start_char:end_char]; score = start + end logit (-inf
  without a valid span); `null_score`: SQuAD 2.0's (+inf without windows), not compared."""
  text: str
  start_char: int
  end_char: int
  score: float
  null_score: float = dataclasses.field(default=float("inf"), compare=False)

  @property
  def null_score_diff(self):
    """null_score - score (the reference's `null_odds` entry); null_score without a span."""
    return self.null_score if self.score == float("-inf") else self.null_score - self.score


def null_answer(answer, null_score_diff_threshold=0.0):
  """SQuAD 2.0's answer text: "" without a span or when null_score_diff > threshold."""
  if answer.score == float("-inf") or answer.null_score_diff > null_score_diff_threshold:
    return ""
  return answer.text


def answer_as_served(answer, version_2_with_negative=False, null_score_diff_threshold=0.0):
  """The answer as serve_text reports it: for SQuAD 2.0 a null answer is "" at 0..0 and keeps the
  best span's score and the null score, so that its `null_score_diff` says by how much it won."""
  if not version_2_with_negative or null_answer(answer, null_score_diff_threshold):
    return answer
  return Answer("", 0, 0, answer.score, answer.null_score)


@dataclasses.dataclass
class Predictions:
  """Per question id: `texts` (predictions.json), `best_non_null` (best span's text), for
  SQuAD 2.0 `null_odds` (null_odds.json; +inf without windows), and when asked for, `nbest`
  (nbest_predictions.json: `nbest_answers` lists)."""
  texts: Dict[str, str]
  best_non_null: Dict[str, str]
  null_odds: Optional[Dict[str, float]] = None
  nbest: Optional[Dict[str, list]] = None


def final_predictions(question_ids, answers, version_2_with_negative=False,
                      null_score_diff_threshold=0.0):
  """Predictions for every id of `question_ids` (str, file order); ids missing from `answers`
  ({id: Answer}) get "". With `version_2_with_negative` the null rule applies."""
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


def candidate_pairs(window, n_best_size, max_answer_length):
  """run_squad.py's candidates in one WindowLogits: (starts, ends, valid), the `n_best_size` best
  start and end positions (int [k], best first) and bool [k, k], True where the pair (start
  rank, end rank) is an answer: both in the context, the start a max-context token, the end not
  before it and at most `max_answer_length` tokens on."""
  starts = best_indexes(window.start_logits, n_best_size)
  ends = best_indexes(window.end_logits, n_best_size)
  length = ends[None, :] - starts[:, None] + 1
  valid = (((window.token_start_char[starts] >= 0) &
            (window.token_is_max_context[starts] != 0))[:, None] &
           (window.token_start_char[ends] >= 0)[None, :] & (length >= 1) &
           (length <= max_answer_length))
  return starts, ends, valid


def decode_answer(windows, context, n_best_size=SpanLimits.n_best_size,
                  max_answer_length=SpanLimits.max_answer_length):
  """The best Answer of one question over its WindowLogits (window order) into `context`.

  Each window's n_best_size x n_best_size pairs are scored at once, as float64 sums (the reference
  adds Python floats), in the reference's loop order (start rank, then end rank): the first best
  pair of a window is the one its loop keeps, and a later window wins only with a higher score.
  """
  best = Answer("", 0, 0, float("-inf"))
  null_score = float("inf")
  for w in windows:
    null_score = min(null_score, float(w.start_logits[0]) + float(w.end_logits[0]))
    starts, ends, valid = candidate_pairs(w, n_best_size, max_answer_length)
    scores = (w.start_logits[starts].astype(np.float64)[:, None] +
              w.end_logits[ends].astype(np.float64)[None, :])
    scores[~valid | np.isnan(scores)] = -np.inf  # a NaN pair never wins, as under ">"
    pair = int(np.argmax(scores))  # the first of equal maxima in row-major (loop) order
    score = float(scores.flat[pair])
    if score > best.score:
      s, e = starts[pair // len(ends)], ends[pair % len(ends)]
      start_char, end_char = int(w.token_start_char[s]), int(w.token_end_char[e])
      best = Answer(context[start_char:end_char], start_char, end_char, score)
  best.null_score = null_score
  return best


def _softmax(scores):
  """run_squad.py's `_compute_softmax`: exp(score - max), normalized (float64)."""
  exps = np.exp(np.asarray(scores, np.float64) - max(scores))
  return exps / exps.sum()


def nbest_answers(windows, context, n_best_size=SpanLimits.n_best_size,
                  max_answer_length=SpanLimits.max_answer_length, version_2_with_negative=False):
  """One question's n-best list, as google-research/bert run_squad.py's `write_predictions` makes
  it for nbest_predictions.json.

  Every window's valid pairs of its `n_best_size` best starts and ends (the candidates of
  `decode_answer`, in its loop order) and, for SQuAD 2.0, the null answer of the window with the
  lowest null score, sorted by start + end logit (a stable sort: ties keep loop order); each text
  kept once, up to `n_best_size` entries; SQuAD 2.0 adds the null answer "" when it is not among
  them. So the first non-empty text is `decode_answer`'s. Without a candidate (no window, or no
  valid pair in SQuAD 1.1) the list is one "" with logits 0.0, where run_squad.py writes "empty":
  predictions.json holds "" for such questions.

  Args:
    windows: the question's WindowLogits, window order.
    context: its context (str).

  Returns:
    A list of dicts {"text": str, "probability": float (softmax of the listed start + end
    logits), "start_logit": float, "end_logit": float}, best first.
  """
  candidates = []  # (score, text, start_logit, end_logit), loop order
  null = None
  for w in windows:
    window_null = float(w.start_logits[0]) + float(w.end_logits[0])
    if null is None or window_null < null[0]:
      null = (window_null, "", float(w.start_logits[0]), float(w.end_logits[0]))
    starts, ends, valid = candidate_pairs(w, n_best_size, max_answer_length)
    for i, j in zip(*np.nonzero(valid)):
      start_logit, end_logit = float(w.start_logits[starts[i]]), float(w.end_logits[ends[j]])
      if np.isnan(start_logit + end_logit):
        continue
      text = context[int(w.token_start_char[starts[i]]):int(w.token_end_char[ends[j]])]
      candidates.append((start_logit + end_logit, text, start_logit, end_logit))
  if version_2_with_negative and null is not None:
    candidates.append(null)
  candidates.sort(key=lambda c: c[0], reverse=True)
  nbest, seen = [], set()
  for score, text, start_logit, end_logit in candidates:
    if len(nbest) >= n_best_size:
      break
    if text not in seen:
      seen.add(text)
      nbest.append((score, text, start_logit, end_logit))
  if version_2_with_negative and null is not None and "" not in seen:
    nbest.append(null)
  if not nbest:
    nbest.append((0.0, "", 0.0, 0.0))
  probabilities = _softmax([entry[0] for entry in nbest])
  return [{
      "text": text,
      "probability": float(p),
      "start_logit": start_logit,
      "end_logit": end_logit
  } for (_, text, start_logit, end_logit), p in zip(nbest, probabilities)]


def decode_all(windows_by_example, contexts_by_example, n_best_size=SpanLimits.n_best_size,
               max_answer_length=SpanLimits.max_answer_length):
  """{example index: Answer} from {index: [WindowLogits]} and {index: context str}."""
  return {
      index: decode_answer(windows, contexts_by_example[index], n_best_size, max_answer_length)
      for index, windows in windows_by_example.items()
  }
