"""EM/F1 (percentages) with the official SQuAD v1.1 and v2.0 scorers shipped in tf-models-official
(`official/nlp/tools/squad_evaluate_v1_1.py`, `squad_evaluate_v2_0.py`).

The best null threshold is swept here: the official `find_best_thresh`'s need not give its score.
"""

import itertools
import math

from official.nlp.tools import squad_evaluate_v1_1
from official.nlp.tools import squad_evaluate_v2_0

from squad_qa import errors


def restrict_to_questions(dataset, question_ids):
  """A copy of a SQuAD `data` list with only the questions in `question_ids` (a set of str)."""
  restricted = []
  for article in dataset:
    paragraphs = []
    for paragraph in article["paragraphs"]:
      qas = [qa for qa in paragraph["qas"] if qa["id"] in question_ids]
      if qas:
        paragraphs.append(dict(paragraph, qas=qas))
    if paragraphs:
      restricted.append(dict(article, paragraphs=paragraphs))
  return restricted


def question_ids(dataset, max_questions=None):
  """Ids of the questions of a SQuAD `data` list in file order (the first `max_questions`)."""
  ids = (qa["id"] for a in dataset for p in a["paragraphs"] for qa in p["qas"])
  return list(itertools.islice(ids, max_questions))


def score_v1(dataset, predictions):
  """{"exact_match": %, "f1": %, "num_questions": int} of {question id: text} over every
  question of a SQuAD v1.1 `data` list (missing ones count 0).

  Raises:
    errors.UsageError: `dataset` holds no question.
  """
  num_questions = sum(len(p["qas"]) for a in dataset for p in a["paragraphs"])
  if not num_questions:
    raise errors.UsageError("no questions to score")
  result = squad_evaluate_v1_1.evaluate(dataset, predictions)
  return {
      "exact_match": 100.0 * result["exact_match"],
      "f1": 100.0 * result["final_f1"],
      "num_questions": num_questions
  }


def unanswerable_questions(dataset):
  """Ids of the questions of a SQuAD `data` list that have no gold answer (SQuAD 2.0's)."""
  return [
      qa["id"] for a in dataset for p in a["paragraphs"] for qa in p["qas"] if not qa.get("answers")
  ]


def _question_score(qa, text):
  """(exact, f1) in [0, 1] of `text` for one SQuAD `qas` entry, by the official v2.0 scorer."""
  result = squad_evaluate_v2_0.evaluate([{"paragraphs": [{"qas": [qa]}]}], {qa["id"]: text})
  return result["exact"] / 100.0, result["f1"] / 100.0


def best_thresholds(dataset, best_non_null_predictions, null_score_diffs):
  """The best null threshold, swept through the distinct differences (tied questions turn on
  together; lowest threshold on ties), so that applying it gives exactly the reported score.

  Args:
    dataset: a SQuAD 2.0 `data` list holding exactly the scored questions.
    best_non_null_predictions: {question id: best span text, "" without a span}.
    null_score_diffs: {question id: float, may be +inf}.

  Returns:
    {"best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} (percentages, logits).
  """
  qas = [qa for a in dataset for p in a["paragraphs"] for qa in p["qas"]]
  # Gain of answering over leaving blank ("" is right only on unanswerable questions).
  gains = []
  for qa in qas:
    exact, f1 = _question_score(qa, best_non_null_predictions[qa["id"]])
    blank = 0.0 if qa["answers"] else 1.0
    gains.append((null_score_diffs[qa["id"]], exact - blank, f1 - blank))
  gains.sort(key=lambda g: g[0])
  base = sum(0.0 if qa["answers"] else 1.0 for qa in qas)
  finite = [g[0] for g in gains if math.isfinite(g[0])]
  results = {}
  for name, column in (("exact", 1), ("f1", 2)):
    best, threshold, score = base, (finite[0] - 1.0 if finite else 0.0), base
    for diff, group in itertools.groupby(gains, key=lambda g: g[0]):
      score += sum(g[column] for g in group)
      if score > best:
        best, threshold = score, diff
    results[f"best_{name}"] = 100.0 * best / len(qas)
    results[f"best_{name}_thresh"] = threshold
  return results


def score_v2(dataset, predictions, null_score_diffs=None, best_non_null_predictions=None):
  """Scores SQuAD 2.0 predictions with the official v2.0 scorer.

  Args:
    dataset: a SQuAD v2.0 `data` list (only questions in `predictions` are scored).
    predictions: {question id: answer text, "" for no answer}.
    null_score_diffs: {question id: null_odds}, or None: no best-threshold figures.
    best_non_null_predictions: for `best_thresholds`; default `predictions`.

  Returns:
    The official scorer's figures (percentages), plus `best_thresholds`' with null_score_diffs.

  Raises:
    errors.UsageError: `predictions` is empty.
  """
  if not predictions:
    raise errors.UsageError("no questions to score")
  # No na_probs: the scorer would blank answers above 1.0, a rule for probabilities, not logits.
  result = squad_evaluate_v2_0.evaluate(dataset, predictions)
  scores = {
      k: v for k, v in result.items()
      if k in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
               "NoAns_f1", "NoAns_total")
  }
  if null_score_diffs is not None:
    scored = restrict_to_questions(dataset, set(predictions))
    scores.update(
        best_thresholds(scored, best_non_null_predictions or predictions, null_score_diffs))
  return scores
