"""EM/F1 with the official SQuAD v1.1 scorer shipped in tf-models-official.

`official/nlp/tools/squad_evaluate_v1_1.py` is the official `evaluate-v1.1.py` (Rajpurkar et al.,
2016): answers are lower-cased, stripped of punctuation, articles and extra whitespace; EM and token
F1 take the max over the gold answers. It returns fractions; we report percentages, as the official
script prints them.
"""

from official.nlp.tools import squad_evaluate_v1_1


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
