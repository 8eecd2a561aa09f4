"""EM/F1 with the official SQuAD v1.1 and v2.0 scorers shipped in tf-models-official.

`official/nlp/tools/squad_evaluate_v1_1.py` is the official `evaluate-v1.1.py` (Rajpurkar et al.,
2016): answers are lower-cased, stripped of punctuation, articles and extra whitespace; EM and token
F1 take the max over the gold answers. It returns fractions; we report percentages, as the official
script prints them. `official/nlp/tools/squad_evaluate_v2_0.py` is the official `evaluate-v2.0.py`
(Rajpurkar et al., 2018): an unanswerable question is right only with the answer "", and it reports
HasAns/NoAns breakdowns and the best null threshold; it already reports percentages.
"""

from official.nlp.tools import squad_evaluate_v1_1
from official.nlp.tools import squad_evaluate_v2_0


def restrict_to_questions(dataset, question_ids):
  """A copy of a SQuAD `data` list holding only the questions in `question_ids` (a set of str)."""
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


def score_v1(dataset, predictions):
  """Scores predictions against every question of `dataset`.

  Args:
    dataset: the `data` list of a SQuAD v1.1 JSON file (questions missing from `predictions` count 0).
    predictions: {question id: answer text}.

  Returns:
    {"exact_match": percent, "f1": percent, "num_questions": int}.

  Raises:
    ValueError: `dataset` holds no question (the official scorer would divide by zero).
  """
  num_questions = sum(len(p["qas"]) for a in dataset for p in a["paragraphs"])
  if not num_questions:
    raise ValueError("no questions to score")
  result = squad_evaluate_v1_1.evaluate(dataset, predictions)
  return {"exact_match": 100.0 * result["exact_match"], "f1": 100.0 * result["final_f1"],
          "num_questions": num_questions}


def unanswerable_questions(dataset):
  """Ids of the questions of a SQuAD `data` list that have no gold answer (SQuAD 2.0's)."""
  return [qa["id"] for a in dataset for p in a["paragraphs"] for qa in p["qas"]
          if not qa.get("answers")]


def score_v2(dataset, predictions, null_score_diffs, best_non_null_predictions=None):
  """Scores SQuAD 2.0 predictions with the official v2.0 scorer.

  Args:
    dataset: the `data` list of a SQuAD v2.0 JSON file (only questions in `predictions` are scored,
      as tfm's scorer does).
    predictions: {question id: answer text, "" for no answer} (after the null threshold).
    null_score_diffs: {question id: null score - best non-null score} (run_squad.py's null_odds),
      the scorer's `na_probs`.
    best_non_null_predictions: {question id: best non-null span text}; when given, the best-threshold
      figures sweep the threshold over these answers (what the official script assumes: every
      question answered, `na_probs` deciding), else over `predictions` as tfm does.

  Returns:
    {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
     "NoAns_f1", "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"}
    (percentages; HasAns_*/NoAns_* only when such questions exist; thresholds in logits).

  Raises:
    ValueError: `predictions` is empty.
  """
  if not predictions:
    raise ValueError("no questions to score")
  # Without na_probs the scorer takes the answers as given. (With them it would also turn every
  # answer whose na_prob exceeds 1.0 into "", a rule meant for probabilities, not logit differences.)
  result = squad_evaluate_v2_0.evaluate(dataset, predictions)
  sweep = squad_evaluate_v2_0.evaluate(
      dataset, predictions if best_non_null_predictions is None else best_non_null_predictions,
      null_score_diffs)
  scores = {k: v for k, v in result.items() if k in (
      "exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
      "NoAns_f1", "NoAns_total")}
  scores.update({"best_exact": sweep["final_exact"], "best_exact_thresh": sweep["final_exact_thresh"],
                 "best_f1": sweep["final_f1"], "best_f1_thresh": sweep["final_f1_thresh"]})
  return scores
