"""Tests for postprocess/span_decoding.py and postprocess/squad_scoring.py.

Span decoding: hand-built NumPy windows over a hand-made context (not SQuAD text); every expected
answer is worked out by hand from the google-research/bert run_squad.py `write_predictions` rule,
and each test is built so that dropping the rule under test would change the answer.

Scoring: the real SQuAD v1.1 dev set, read from $SQUAD_DIR (never copied into the repo); expected
EM/F1 are computed by hand with the official normalization.
"""

import copy
import json
import math

import numpy as np
import pytest

from tests import testutil

from squad_qa.postprocess.span_decoding import (Answer, WindowLogits, best_indexes, decode_all,
                                                decode_answer, nbest_answers)
from squad_qa.postprocess.squad_scoring import restrict_to_questions, score_v1

# ------------------------------------------------------------------------------------------------
# Span decoding
# ------------------------------------------------------------------------------------------------

# Hand-made context; non-ASCII letters check that offsets are code points, not bytes.
CONTEXT = "Café Zoë opened in 1999, near Łódź."
# Code-point [start, end) of each context token:
#   Café 0-4, Zoë 5-8, opened 9-15, in 16-18, 1999 19-23, "," 23-24, near 25-29, Łódź 30-34,
#   "." 34-35

# Window 1 (10 positions): [CLS] who [SEP] Café Zoë opened in 1999 , [SEP]
W1_START = [-1, -1, -1, 0, 5, 9, 16, 19, 23, -1]
W1_END = [-1, -1, -1, 4, 8, 15, 18, 23, 24, -1]
W1_MAX_CONTEXT = [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]  # "1999" and "," have more context in window 2
# Window 2 (10 positions): [CLS] who [SEP] in 1999 , near Łódź . [SEP]
W2_START = [-1, -1, -1, 16, 19, 23, 25, 30, 34, -1]
W2_END = [-1, -1, -1, 18, 23, 24, 29, 34, 35, -1]
W2_MAX_CONTEXT = [0, 0, 0, 0, 1, 1, 1, 1, 1, 0]

LOW = -10.0  # logit of every position not given explicitly


def _logits(values):
  """A float32 length-10 array of LOW with {position: logit} set (all values exact in float32)."""
  logits = np.full(10, LOW, dtype=np.float32)
  for position, value in values.items():
    logits[position] = value
  return logits


def window1(start, end, max_context=None):
  return WindowLogits(
      _logits(start), _logits(end), np.array(W1_START, dtype=np.int32),
      np.array(W1_END, dtype=np.int32),
      np.array(W1_MAX_CONTEXT if max_context is None else max_context, dtype=np.int32))


def window2(start, end, max_context=None):
  return WindowLogits(
      _logits(start), _logits(end), np.array(W2_START, dtype=np.int32),
      np.array(W2_END, dtype=np.int32),
      np.array(W2_MAX_CONTEXT if max_context is None else max_context, dtype=np.int32))


def test_context_offsets_are_the_hand_computed_ones():
  # Guards the fixture itself: each window's offsets cut out the intended tokens.
  w1_tokens = [CONTEXT[s:e] for s, e in zip(W1_START, W1_END) if s >= 0]
  w2_tokens = [CONTEXT[s:e] for s, e in zip(W2_START, W2_END) if s >= 0]
  assert w1_tokens == ["Café", "Zoë", "opened", "in", "1999", ","]
  assert w2_tokens == ["in", "1999", ",", "near", "Łódź", "."]


def test_best_indexes_largest_first_lower_index_on_ties():
  assert best_indexes(np.array([1.0, 3.0, 3.0, 2.0, 0.5]), 3).tolist() == [1, 2, 3]
  assert best_indexes(np.array([1.0, 3.0, 3.0, 2.0, 0.5]), 1).tolist() == [1]
  assert best_indexes(np.array([0.0, 2.0]), 5).tolist() == [1, 0]  # n_best larger than length


def test_single_token_answer_text_offsets_and_score():
  answer = decode_answer([window1({4: 3.5}, {4: 2.25})], CONTEXT)
  assert answer == Answer("Zoë", 5, 8, 5.75)


def test_multi_token_answer_is_exact_context_substring():
  # Start "opened" (5), end "," (8): the text keeps the context's own spacing and punctuation.
  answer = decode_answer([window1({5: 4.0}, {8: 1.5})], CONTEXT)
  assert answer == Answer("opened in 1999,", 9, 24, 5.5)
  assert answer.text == CONTEXT[answer.start_char:answer.end_char]


def test_end_before_start_is_skipped():
  # Pairs: (7,5) = 5+5 = 10 but end < start; (5,5) = 4+5 = 9; (7,7) = 5+3 = 8; (5,7) = 4+3 = 7.
  answer = decode_answer(
      [window1({
          7: 5.0,
          5: 4.0
      }, {
          5: 5.0,
          7: 3.0
      }, max_context=[0, 0, 0, 1, 1, 1, 1, 1, 1, 0])], CONTEXT)
  assert answer == Answer("opened", 9, 15, 9.0)


def test_too_long_span_is_skipped_and_the_limit_is_inclusive():
  # (3,7) "Café Zoë opened in 1999" = 5+5 = 10 has 5 tokens; (6,7) "in 1999" = 4+5 = 9 has 2.
  windows = [window1({3: 5.0, 6: 4.0}, {7: 5.0})]
  assert decode_answer(windows, CONTEXT, max_answer_length=4) == Answer("in 1999", 16, 23, 9.0)
  assert decode_answer(windows, CONTEXT, max_answer_length=2) == Answer("in 1999", 16, 23, 9.0)
  assert decode_answer(windows, CONTEXT,
                       max_answer_length=5) == Answer("Café Zoë opened in 1999", 0, 23, 10.0)
  # One token only: (3,3) = 5 + LOW = -5 beats (6,6) = 4 + LOW = -6; (7,7) = LOW + 5 has a
  # non-max-context start.
  assert decode_answer(windows, CONTEXT, max_answer_length=1) == Answer("Café", 0, 4, -5.0)


def test_start_outside_context_is_skipped():
  # Start logit peaks on the question token "who" (offset -1): (1,4) = 9+3 = 12 is skipped.
  # make_features gives non-context positions max-context 0, which would hide this rule, so the
  # flags are all 1 here: the offset check alone must reject the start.
  answer = decode_answer([window1({1: 9.0, 3: 2.0}, {4: 3.0}, max_context=[1] * 10)], CONTEXT)
  assert answer == Answer("Café Zoë", 0, 8, 5.0)


def test_end_outside_context_is_skipped():
  # End logit peaks on the final [SEP] (offset -1): (4,9) = 3+9 = 12 is skipped.
  answer = decode_answer([window1({4: 3.0}, {9: 9.0, 6: 1.0})], CONTEXT)
  assert answer == Answer("Zoë opened in", 5, 18, 4.0)


def test_start_not_max_context_is_skipped_and_other_window_wins():
  # "1999" scores 6+4 = 10 in window 1 where it is not max-context, 3+2 = 5 in window 2 where it is.
  windows = [window1({7: 6.0}, {7: 4.0}), window2({4: 3.0}, {4: 2.0})]
  assert decode_answer(windows, CONTEXT) == Answer("1999", 19, 23, 5.0)
  # Control: with the flag set in window 1 its higher score wins.
  windows[0].token_is_max_context[7] = 1
  assert decode_answer(windows, CONTEXT) == Answer("1999", 19, 23, 10.0)


def test_end_token_need_not_be_max_context():
  # Start "in" (max-context in window 1), end "1999" (not max-context there): allowed, as in the
  # reference, which only checks the start token.
  answer = decode_answer([window1({6: 2.0}, {7: 3.0})], CONTEXT)
  assert answer == Answer("in 1999", 16, 23, 5.0)


def test_n_best_size_limits_the_candidates():
  # Top start is "1999" (7), top end is "opened" (5): with n_best_size=1 the only pair is invalid.
  windows = [
      window1({
          7: 5.0,
          5: 4.0
      }, {
          5: 5.0,
          7: 3.0
      }, max_context=[0, 0, 0, 1, 1, 1, 1, 1, 1, 0])
  ]
  assert decode_answer(windows, CONTEXT, n_best_size=1) == Answer("", 0, 0, float("-inf"))
  assert decode_answer(windows, CONTEXT, n_best_size=2) == Answer("opened", 9, 15, 9.0)


def test_n_best_size_excludes_a_lower_ranked_valid_pair():
  # Starts ranked 7 (5.0) > 4 (4.0) > 3 (1.0); end only at 4 (2.0), so the only valid starts
  # are 3, 4.
  # n_best_size=1: start 7 only -> nothing. n_best_size=2: (4,4) = 6. n_best_size=3: (4,4) still.
  windows = [
      window1({
          7: 5.0,
          4: 4.0,
          3: 1.0
      }, {4: 2.0}, max_context=[0, 0, 0, 1, 1, 1, 1, 1, 1, 0])
  ]
  assert decode_answer(windows, CONTEXT, n_best_size=1).score == float("-inf")
  assert decode_answer(windows, CONTEXT, n_best_size=2) == Answer("Zoë", 5, 8, 6.0)
  # Start 4 lowered to LOW: the ranking becomes 7 > 3, so n_best_size=2 now reaches (3,4) = 1+2 = 3.
  windows[0].start_logits[4] = LOW
  assert decode_answer(windows, CONTEXT, n_best_size=2) == Answer("Café Zoë", 0, 8, 3.0)


def test_tie_between_windows_goes_to_first_window():
  # "in" (window 1, pos 6) and "near" (window 2, pos 6) both score 2+3 = 5.
  w1 = window1({6: 2.0}, {6: 3.0})
  w2 = window2({6: 2.0}, {6: 3.0})
  assert decode_answer([w1, w2], CONTEXT) == Answer("in", 16, 18, 5.0)
  assert decode_answer([w2, w1], CONTEXT) == Answer("near", 25, 29, 5.0)


def test_tie_within_window_goes_to_first_start_candidate():
  # Starts 4 and 6 tie at 2.0 (stable order: 4 first); end only at 6: (4,6) and (6,6) both score 3.
  answer = decode_answer([window1({4: 2.0, 6: 2.0}, {6: 1.0})], CONTEXT)
  assert answer == Answer("Zoë opened in", 5, 18, 3.0)


def test_later_window_with_higher_score_wins():
  windows = [window1({4: 1.0}, {4: 1.0}), window2({7: 2.0}, {8: 1.0})]
  assert decode_answer(windows, CONTEXT) == Answer("Łódź.", 30, 35, 3.0)


def _loop_decode(windows, context, n_best_size, max_answer_length):
  """run_squad.py's `write_predictions` loop, pair by pair: the oracle of `decode_answer`."""
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
          start, end = int(w.token_start_char[s]), int(w.token_end_char[e])
          best = Answer(context[start:end], start, end, score)
  return best


def _random_windows(rng, with_nan):
  """1 to 3 random WindowLogits of 5 to 59 positions over a 400-character context: few distinct
  logits (ties within and across windows are common), a fifth of the positions outside the
  context, 70 % max-context; with `with_nan` one start logit NaN per window."""
  windows = []
  for _ in range(rng.integers(1, 4)):
    n = int(rng.integers(5, 60))
    start_logits = rng.integers(-3, 3, n).astype(np.float32) / 2
    end_logits = rng.integers(-3, 3, n).astype(np.float32) / 2
    if with_nan:
      start_logits[rng.integers(0, n)] = np.nan
    offsets = np.sort(rng.choice(399, n, replace=False)).astype(np.int32)
    offsets[rng.random(n) < 0.2] = -1
    windows.append(
        WindowLogits(start_logits, end_logits, offsets, offsets + 1, (rng.random(n)
                                                                      < 0.7).astype(np.int32)))
  return windows


def test_decoding_all_pairs_at_once_keeps_the_loops_answer_ties_and_nan():
  rng = np.random.default_rng(7)
  context = "x" * 400
  checked = 0
  for trial in range(300):
    windows = _random_windows(rng, with_nan=trial % 10 == 0)
    for n_best_size, max_answer_length in ((20, 30), (3, 2), (1, 1)):
      expected = _loop_decode(windows, context, n_best_size, max_answer_length)
      got = decode_answer(windows, context, n_best_size, max_answer_length)
      assert got == expected, (trial, n_best_size, max_answer_length)
      checked += expected.score > float("-inf")
  assert checked > 400  # of 900 cases: most have a span to find


def _entries(nbest):
  return [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest]


def test_nbest_lists_the_valid_pairs_by_score_with_softmax_probabilities():
  # Starts Zoë 3.5, opened 1.0; ends Zoë 2.25, opened 0.5. Valid pairs: Zoë-Zoë 5.75, Zoë-opened
  # 4.0, opened-opened 1.5 (opened-Zoë ends before it starts; [CLS] is no context token).
  window = window1({4: 3.5, 5: 1.0}, {4: 2.25, 5: 0.5})
  nbest = nbest_answers([window], CONTEXT, n_best_size=3)
  assert _entries(nbest) == [("Zoë", 3.5, 2.25), ("Zoë opened", 3.5, 0.5), ("opened", 1.0, 0.5)]
  # exp(0), exp(-1.75), exp(-4.25) over their sum 1.188038...
  assert [e["probability"] for e in nbest] == pytest.approx([0.841724, 0.146270, 0.012006],
                                                            abs=1e-6)
  assert _entries(nbest_answers([window], CONTEXT, n_best_size=2)) == _entries(nbest)[:2]


def test_nbest_for_squad_2_lists_the_lowest_null_score_after_equal_spans():
  # [CLS] 2 + 2 = 4 in window 1 and 3 + 3 = 6 in window 2: the lower null (window 1's) is listed,
  # after the span of equal score (Zoë-opened, 3.5 + 0.5), as run_squad.py's stable sort puts it.
  windows = [
      window1({
          0: 2.0,
          4: 3.5,
          5: 1.0
      }, {
          0: 2.0,
          4: 2.25,
          5: 0.5
      }), window2({0: 3.0}, {0: 3.0})
  ]
  nbest = nbest_answers(windows, CONTEXT, n_best_size=3, version_2_with_negative=True)
  assert _entries(nbest) == [("Zoë", 3.5, 2.25), ("Zoë opened", 3.5, 0.5), ("", 2.0, 2.0)]
  # Cut to 1, the null answer is added after it (run_squad.py's "include the empty option").
  assert _entries(nbest_answers(windows, CONTEXT, n_best_size=1,
                                version_2_with_negative=True)) == [("Zoë", 3.5, 2.25),
                                                                   ("", 2.0, 2.0)]
  assert _entries(nbest_answers(windows, CONTEXT, n_best_size=3)) == [("Zoë", 3.5, 2.25),
                                                                      ("Zoë opened", 3.5, 0.5),
                                                                      ("opened", 1.0, 0.5)]


def test_nbest_keeps_each_text_once_and_lists_empty_without_a_candidate():
  # "1999" is a candidate of window 1 (4 + 4) and of window 2 (3 + 3): listed once, at 8; then
  # window 1's start at Café (-10, the first of the ties) to 1999.
  windows = [window1({7: 4.0}, {7: 4.0}, max_context=[1] * 10), window2({4: 3.0}, {4: 3.0})]
  assert _entries(nbest_answers(windows, CONTEXT,
                                n_best_size=5))[:2] == [("1999", 4.0, 4.0),
                                                        ("Café Zoë opened in 1999", -10.0, 4.0)]
  assert [e["text"] for e in nbest_answers(windows, CONTEXT)].count("1999") == 1
  empty = [{"text": "", "probability": 1.0, "start_logit": 0.0, "end_logit": 0.0}]
  assert nbest_answers([], CONTEXT) == empty
  assert nbest_answers([window1({1: 5.0}, {2: 5.0}, max_context=[0] * 10)], CONTEXT) == empty


def test_nbest_s_first_text_is_the_decoded_answer():
  rng = np.random.default_rng(11)
  context = "".join(chr(ord("a") + i % 26) for i in range(400))
  for trial in range(200):
    windows = _random_windows(rng, with_nan=trial % 10 == 0)
    for n_best_size, max_answer_length in ((20, 30), (3, 2)):
      answer = decode_answer(windows, context, n_best_size, max_answer_length)
      nbest = nbest_answers(windows, context, n_best_size, max_answer_length)
      assert nbest[0]["text"] == answer.text, trial
      if answer.text:
        assert nbest[0]["start_logit"] + nbest[0]["end_logit"] == answer.score
      assert len(nbest) <= n_best_size and len({e["text"] for e in nbest}) == len(nbest)
      v2 = nbest_answers(windows, context, n_best_size, max_answer_length, True)
      assert not answer.text or next(e["text"] for e in v2 if e["text"]) == answer.text


def test_no_valid_span_gives_empty_answer():
  # The best start is a question token (offset -1) and no context token is max-context, so every
  # start is rejected.
  no_max_context = [0] * 10
  windows = [window1({1: 5.0, 4: 4.0}, {2: 5.0, 5: 4.0}, max_context=no_max_context)]
  answer = decode_answer(windows, CONTEXT)
  assert answer.text == "" and answer.start_char == 0 and answer.end_char == 0
  assert answer.score == float("-inf") and math.isinf(answer.score) and answer.score < 0
  assert decode_answer([], CONTEXT) == Answer("", 0, 0, float("-inf"))


def test_decode_all_answers_each_example_with_its_own_context():
  other_context = "Zoë"  # Same offsets reinterpreted against a different context string.
  answers = decode_all({
      0: [window1({4: 3.5}, {4: 2.25})],
      7: [window1({3: 1.0}, {3: 1.0})]
  }, {
      0: CONTEXT,
      7: other_context + " and more text"
  }, n_best_size=20, max_answer_length=30)
  assert answers == {0: Answer("Zoë", 5, 8, 5.75), 7: Answer("Zoë ", 0, 4, 2.0)}


def test_decode_all_passes_max_answer_length():
  answers = decode_all({3: [window1({
      3: 5.0,
      6: 4.0
  }, {7: 5.0})]}, {3: CONTEXT}, n_best_size=20, max_answer_length=2)
  assert answers == {3: Answer("in 1999", 16, 23, 9.0)}


# ------------------------------------------------------------------------------------------------
# Scoring on the real SQuAD v1.1 dev set
# ------------------------------------------------------------------------------------------------

DEV_PATH = testutil.DEV_FILE

# Seen in dev-v1.1.json: the first article, "Super_Bowl_50", has 54 paragraphs and 810 questions.
FIRST_ARTICLE_TITLE = "Super_Bowl_50"
FIRST_ARTICLE_QUESTIONS = 810
# A "where" question of the first paragraph; its gold answers (read from the file while writing):
#   "Santa Clara, California" / "Levi's Stadium" /
#   "Levi's Stadium in the San Francisco Bay Area at Santa Clara, California."
WHERE_ID = "56be4db0acb8001400a502ee"
# A "which team" question of the first paragraph; gold "Denver Broncos" (x3).
AFC_ID = "56be4db0acb8001400a502ec"


@pytest.fixture(scope="module")
def dev_data():
  if not DEV_PATH.is_file():
    pytest.skip(f"SQuAD dev set not found at {DEV_PATH}")
  with open(DEV_PATH, encoding="utf-8") as f:
    return json.load(f)["data"]


@pytest.fixture(scope="module")
def first_article(dev_data):
  return [dev_data[0]]


def _questions(dataset):
  return [
      qa for article in dataset for paragraph in article["paragraphs"] for qa in paragraph["qas"]
  ]


def test_first_article_is_the_expected_one(first_article):
  assert first_article[0]["title"] == FIRST_ARTICLE_TITLE
  assert len(first_article[0]["paragraphs"]) == 54
  assert len(_questions(first_article)) == FIRST_ARTICLE_QUESTIONS
  qa = {q["id"]: q for q in _questions(first_article)}[WHERE_ID]
  assert [a["text"] for a in qa["answers"]] == [
      "Santa Clara, California", "Levi's Stadium",
      "Levi's Stadium in the San Francisco Bay Area at Santa Clara, California."
  ]


def test_first_gold_answers_score_100(first_article):
  predictions = {qa["id"]: qa["answers"][0]["text"] for qa in _questions(first_article)}
  result = score_v1(first_article, predictions)
  assert result == {"exact_match": 100.0, "f1": 100.0, "num_questions": FIRST_ARTICLE_QUESTIONS}
  assert result["num_questions"] == len(_questions(first_article))


def test_empty_predictions_score_0(first_article):
  predictions = {qa["id"]: "" for qa in _questions(first_article)}
  assert score_v1(first_article, predictions) == {
      "exact_match": 0.0,
      "f1": 0.0,
      "num_questions": FIRST_ARTICLE_QUESTIONS
  }


def test_known_partial_prediction_f1_by_hand(first_article):
  # Prediction "Levi's Stadium in Santa Clara" ->
  # normalized tokens: levis stadium in santa clara (5).
  #  vs "santa clara california" (3): common 2, P 2/5, R 2/3, F1 = 0.5
  #  vs "levis stadium" (2): common 2, P 2/5, R 1, F1 = 4/7
  #  vs "levis stadium in san francisco bay area at santa clara california" ("the" dropped, 11):
  #     common 5, P 1, R 5/11, F1 = 2 * (5/11) / (16/11) = 0.625   <- max
  # No gold answer normalizes to the prediction, so EM = 0.
  dataset = restrict_to_questions(first_article, {WHERE_ID})
  result = score_v1(dataset, {WHERE_ID: "Levi's Stadium in Santa Clara"})
  assert result["num_questions"] == 1
  assert result["exact_match"] == 0.0
  assert result["f1"] == pytest.approx(62.5, abs=1e-6)


def test_normalization_makes_article_case_and_punctuation_exact(first_article):
  # "THE levi's stadium!!" -> "levis stadium" == normalized "Levi's Stadium": EM and F1 100.
  dataset = restrict_to_questions(first_article, {WHERE_ID})
  assert score_v1(dataset, {WHERE_ID: "THE levi's stadium!!"}) == {
      "exact_match": 100.0,
      "f1": 100.0,
      "num_questions": 1
  }


def test_two_questions_partial_average(first_article):
  # AFC exact (EM 1, F1 1) + WHERE partial (EM 0, F1 0.625): EM 50.0, F1 (1 + 0.625)/2 = 81.25.
  dataset = restrict_to_questions(first_article, {AFC_ID, WHERE_ID})
  result = score_v1(dataset, {AFC_ID: "Denver Broncos", WHERE_ID: "Levi's Stadium in Santa Clara"})
  assert result["num_questions"] == 2
  assert result["exact_match"] == pytest.approx(50.0, abs=1e-9)
  assert result["f1"] == pytest.approx(81.25, abs=1e-6)


def test_missing_prediction_counts_zero(first_article):
  dataset = restrict_to_questions(first_article, {AFC_ID, WHERE_ID})
  result = score_v1(dataset, {AFC_ID: "the Denver Broncos."})
  assert result == {"exact_match": 50.0, "f1": 50.0, "num_questions": 2}


def test_restrict_to_questions_keeps_exactly_requested_ids(dev_data):
  original = copy.deepcopy(dev_data[:2])
  first_paragraph_ids = [qa["id"] for qa in dev_data[0]["paragraphs"][0]["qas"]]
  second_article_last_paragraph = dev_data[1]["paragraphs"][-1]
  second_id = second_article_last_paragraph["qas"][-1]["id"]
  wanted = {first_paragraph_ids[0], first_paragraph_ids[3], second_id}

  restricted = restrict_to_questions(dev_data[:2], wanted)

  # Empty paragraphs and articles are dropped: one paragraph left in each of the two articles.
  assert [a["title"] for a in restricted] == [dev_data[0]["title"], dev_data[1]["title"]]
  assert [len(a["paragraphs"]) for a in restricted] == [1, 1]
  assert restricted[0]["paragraphs"][0]["context"] == dev_data[0]["paragraphs"][0]["context"]
  assert restricted[1]["paragraphs"][0]["context"] == second_article_last_paragraph["context"]
  # Exactly the requested ids, in dataset order, with their answers untouched.
  assert [qa["id"] for qa in _questions(restricted)
         ] == [first_paragraph_ids[0], first_paragraph_ids[3], second_id]
  assert _questions(restricted)[2] == second_article_last_paragraph["qas"][-1]
  # The input is not modified.
  assert dev_data[:2] == original
  # An article with no requested question disappears entirely.
  only_second = restrict_to_questions(dev_data[:2], {second_id})
  assert [a["title"] for a in only_second] == [dev_data[1]["title"]]
  assert restrict_to_questions(dev_data[:2], {"no-such-id"}) == []


def test_restrict_then_score_counts_only_kept_questions(dev_data):
  # Whole dev set restricted to two ids: num_questions 2, unrelated questions do not count.
  dataset = restrict_to_questions(dev_data, {AFC_ID, WHERE_ID})
  assert score_v1(dataset, {
      AFC_ID: "Denver Broncos",
      WHERE_ID: "Levi's Stadium"
  }) == {
      "exact_match": 100.0,
      "f1": 100.0,
      "num_questions": 2
  }
