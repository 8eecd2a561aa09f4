"""Picks each question's answer span from the start/end logits of all its windows.

The rule is google-research/bert run_squad.py `write_predictions` (tfm `squad_lib.postprocess_output`):
per window, the `n_best_size` highest start and end logits are paired; a pair is kept when both tokens
lie in the context, the start is in its max-context window, end >= start and the span has at most
`max_answer_length` tokens; the answer is the kept pair with the largest start_logit + end_logit over
all windows (first one on ties, in window/start/end order, as the reference's stable sort). Unlike the
reference, which re-joins whitespace-split words and aligns them heuristically (`get_final_text`), the
text is cut straight from the context with the tokens' character offsets, so it is an exact substring.
"""

import dataclasses
from typing import Dict, List

import numpy as np


@dataclasses.dataclass
class WindowLogits:
  """One eval feature's model output and offsets, all NumPy arrays of length max_seq_length.

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


@dataclasses.dataclass
class Answer:
  """A decoded answer: text == context[start_char:end_char]; score = start + end logit.

  A question with no valid span gets text "", start_char = end_char = 0 and score -inf.
  """
  text: str
  start_char: int
  end_char: int
  score: float


def best_indexes(logits, n_best_size):
  """Indices of the `n_best_size` largest logits, largest first, lower index first on ties."""
  return np.argsort(-np.asarray(logits), kind="stable")[:n_best_size]


def decode_answer(windows, context, n_best_size=20, max_answer_length=30):
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
  for w in windows:
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
  return best


def decode_all(windows_by_example, contexts_by_example, n_best_size=20, max_answer_length=30):
  """Answers for many questions.

  Args:
    windows_by_example: {example index: [WindowLogits, ...]}.
    contexts_by_example: {example index: context str}.

  Returns:
    {example index: Answer}.
  """
  return {index: decode_answer(windows, contexts_by_example[index], n_best_size, max_answer_length)
          for index, windows in windows_by_example.items()}
