"""SQuAD 2.0: unanswerable questions from reading to records to null-score decoding to scoring.

Hand-made v2 paragraphs (our own text). Expected values are worked out by hand from the rules of
google-research/bert run_squad.py (tfm squad_lib) and the official evaluate-v2.0.py (tfm
squad_evaluate_v2_0.py); the records are also checked feature by feature against tfm's squad_lib run
with version_2_with_negative=True.
"""

import copy
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.base import commands
from squad_qa.postprocess import span_decoding
from squad_qa.postprocess import squad_scoring
from squad_qa.preprocess import make_records_job
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece
from squad_qa.tasks import evaluation
from squad_qa.tasks import run_inputs
from squad_qa.tasks import train_config
from tests import testutil
from tools import compare_with_reference
from tools import reference_features

P1 = ("The river Elm flows past the mill. "
      "The mill was built by Ada Byron in 1820 and burned in 1901.")
P2 = "Glass beads were traded along the coast for salt."


def _qa(qid, question, answer=None, context=None):
  if answer is None:
    return {
        "id": qid,
        "question": question,
        "answers": [],
        "is_impossible": True,
        "plausible_answers": [{
            "text": "Elm",
            "answer_start": 10
        }]
    }
  return {
      "id": qid,
      "question": question,
      "is_impossible": False,
      "answers": [{
          "text": answer,
          "answer_start": context.index(answer)
      }]
  }


V2 = {
    "version": "v2.0",
    "data": [{
        "title": "Mill",
        "paragraphs": [
            {
                "context": P1,
                "qas": [
                    _qa("v1", "Who built the mill?", "Ada Byron", P1),
                    _qa("v2", "When did the mill burn?", "1901", P1),
                    _qa("v3", "Who repaired the mill?")
                ]
            },
            {
                "context": P2,
                "qas": [
                    _qa("v4", "What was traded for salt?", "Glass beads", P2),
                    _qa("v5", "Who bought the salt?")
                ]
            },
        ]
    }]
}


@pytest.fixture
def v2_file(tmp_path):
  path = tmp_path / "v2.json"
  path.write_text(json.dumps(V2))
  return str(path)


def test_reader_keeps_unanswerable_questions_only_with_version_2(v2_file):
  squad = squad_reader.read_squad(v2_file, is_training=True, version_2_with_negative=True)
  assert [(e.qas_id, e.is_impossible, e.answer_text, e.answer_start) for e in squad.examples
         ] == [("v1", False, "Ada Byron", 57), ("v2", False, "1901", 89), ("v3", True, "", -1),
               ("v4", False, "Glass beads", 0), ("v5", True, "", -1)]
  assert squad.notes == {"unanswerable": 2}
  v1_reader = squad_reader.read_squad(v2_file, is_training=True)
  assert [e.qas_id for e in v1_reader.examples] == ["v1", "v2", "v4"]
  assert v1_reader.skipped == {"unanswerable_needs_version_2": 2}


def test_contradictory_labels_are_counted_as_the_scorer_reads_them(tmp_path):
  """"is_impossible": true with answers: run_squad.py ignores the answers. false without answers:
  the official v2.0 scorer reads the answers, so the question is scored as unanswerable."""
  data = copy.deepcopy(V2)
  qas = data["data"][0]["paragraphs"][0]["qas"]
  qas[0]["is_impossible"] = True  # v1, with its answer
  qas[2]["is_impossible"] = False  # v3, no answers
  path = tmp_path / "contradictory.json"
  path.write_text(json.dumps(data))
  for is_training in (True, False):
    squad = squad_reader.read_squad(str(path), is_training=is_training,
                                    version_2_with_negative=True)
    v1 = next(e for e in squad.examples if e.qas_id == "v1")
    assert (v1.is_impossible, v1.answer_text) == (True, "")
    if is_training:  # v3 is an answerable question without an answer to train on: skipped
      assert "v3" not in [e.qas_id for e in squad.examples]
      assert squad.notes["unanswerable_answers_ignored"] == 1
    else:
      assert squad.notes == {
          "unanswerable": 2,
          "unanswerable_answers_ignored": 1,
          "answerable_without_answers_scored_as_unanswerable": 1
      }


def _v2_records(tmp_path, v2_file):
  out = str(tmp_path / "records")
  make_records_job.make_records(
      make_records_job.RecordsConfig(vocab_file=testutil.vocab_file(), max_seq_length=64,
                                     doc_stride=32, max_query_length=16, num_shards=1,
                                     version_2_with_negative=True, train_file=v2_file,
                                     output_dir=out, num_workers=1))
  return out


def test_the_records_decide_the_version_for_training(tmp_path, v2_file):
  records_dir = _v2_records(tmp_path, v2_file)
  settings = dict(records_dir=records_dir, model_dir=str(tmp_path / "model"), do_predict=False,
                  bert_config_file=testutil.write_tiny_config(tmp_path / "bert_config.json"))
  with pytest.raises(errors.UsageError) as error:  # --noversion_2_with_negative
    run_inputs.bert_config_and_meta(
        train_config.TrainConfig(version_2_with_negative=False, **settings))
  assert str(error.value) == (
      f"--noversion_2_with_negative: the records in {records_dir} were made with "
      f"version_2_with_negative=true (SQuAD 2.0), and the records decide; drop the flag, or make "
      f"the records again from a SQuAD 1.1 file")
  for given in (None, True):  # unset, or as the records
    config = train_config.TrainConfig(version_2_with_negative=given, **settings)
    assert run_inputs.bert_config_and_meta(config)[2]["flags"]["version_2_with_negative"]


def test_squad_1_1_records_refuse_the_null_answer_flags(tmp_path):
  records_dir = testutil.make_train_records(tmp_path, 3)
  settings = dict(records_dir=records_dir, model_dir=str(tmp_path / "model"), do_predict=False,
                  bert_config_file=testutil.write_tiny_config(tmp_path / "bert_config.json"))
  reason = (
      f"the records in {records_dir} were made with version_2_with_negative=false (SQuAD "
      f"1.1: no question without an answer, no null answer to weigh); drop the flag, or make "
      f"the records with `{commands.command('squad-qa-records')} --version_2_with_negative` from "
      f"a SQuAD 2.0 file")
  for given, typed in (({
      "version_2_with_negative": True
  }, "--version_2_with_negative"), ({
      "null_score_diff_threshold": -1.5,
      "typed_flags": ("null_score_diff_threshold",)
  }, "--null_score_diff_threshold=-1.5")):
    with pytest.raises(errors.UsageError) as error:
      run_inputs.bert_config_and_meta(train_config.TrainConfig(**given, **settings))
    assert str(error.value) == f"{typed}: {reason}"
  for given in ({}, {"version_2_with_negative": False}, {"typed_flags": ("model_dir",)}):
    config = train_config.TrainConfig(**given, **settings)
    assert not run_inputs.bert_config_and_meta(config)[2]["flags"]["version_2_with_negative"]


def test_a_squad_1_1_model_is_not_scored_on_squad_2_0_records(tmp_path, v2_file):
  records_dir = _v2_records(tmp_path, v2_file)
  (tmp_path / "v1").mkdir()
  v1_records = testutil.make_train_records(tmp_path / "v1", 3)
  config_file = testutil.write_tiny_config(tmp_path / "bert_config.json")
  model_dir = tmp_path / "model"
  model_dir.mkdir()
  artifacts.write_qa_config(str(model_dir), config_file,
                            bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG),
                            artifacts.read_json(os.path.join(v1_records, "meta.json")),
                            {"version_2_with_negative": False})
  predict_only = train_config.TrainConfig(records_dir=records_dir, model_dir=str(model_dir),
                                          bert_config_file=config_file, do_train=False)
  with pytest.raises(errors.UsageError) as error:
    run_inputs.bert_config_and_meta(predict_only)
  assert str(error.value) == (
      f"the records in {records_dir} are SQuAD 2.0, but --model_dir={model_dir} was trained on "
      f"SQuAD 1.1 records (its qa_config.json: version_2_with_negative=false) and never learned "
      f"to answer nothing; score it on records made from a SQuAD 1.1 file, or train it on these")
  training = dataclasses.replace(predict_only, do_train=True, do_predict=False)
  assert run_inputs.bert_config_and_meta(training)[2]["flags"]["version_2_with_negative"]


@pytest.mark.parametrize("split", ["train", "eval"])
def test_v2_records_equal_the_reference(tmp_path, v2_file, split):
  # 24 tokens, stride 8: P1's 23 tokens need 2-3 windows per question.
  ours = compare_with_reference.run_ours(v2_file, split, testutil.vocab_file(), True, 24, 8, 16,
                                         True, str(tmp_path / "records"), 1, in_process=True)
  reference = reference_features.run_reference(v2_file, split == "train", testutil.vocab_file(),
                                               True, 24, 8, 16, version_2_with_negative=True)
  vocab = wordpiece.read_vocab(testutil.vocab_file())
  result = compare_with_reference.compare(ours, reference, split == "train", vocab)
  assert result.questions_both == 5 and result.features_ours == result.features_reference
  assert result.different == 0 and result.unmatched == 0, "\n".join(result.examples)
  if split == "train":
    arrays = ours.arrays
    for index, qid in enumerate(ours.qas_ids):
      rows = arrays["example_index"] == index
      positions = arrays["start_positions"][rows], arrays["end_positions"][rows]
      if qid in ("v3", "v5"):  # unanswerable: every window points at [CLS], is_impossible 1
        assert (positions[0] == 0).all() and (positions[1] == 0).all()
        assert (arrays["is_impossible"][rows] == 1).all()
      else:  # the windows holding the answer have is_impossible 0, the others 1
        holds = positions[0] > 0
        assert holds.any() and (arrays["is_impossible"][rows] == (~holds).astype(int)).all()
    assert sum(arrays["example_index"] == 0) >= 2  # P1 is windowed


# Two windows of 8 positions; position 0 is [CLS], context at 3..6.
STARTS = np.array([-1, -1, -1, 0, 4, 10, 16, -1], np.int32)
ENDS = np.array([-1, -1, -1, 3, 9, 15, 20, -1], np.int32)
CONTEXT = "Ada built a mill."


def _window(cls_start, cls_end, span_start=None, span_end=None):
  start = np.full(8, -5.0, np.float32)
  end = np.full(8, -5.0, np.float32)
  start[0], end[0] = cls_start, cls_end
  if span_start is not None:
    start[span_start[0]] = span_start[1]
    end[span_end[0]] = span_end[1]
  return span_decoding.WindowLogits(start, end, STARTS, ENDS, np.array([0, 0, 0, 1, 1, 1, 1, 0]))


def test_null_score_is_the_minimum_over_windows_and_the_threshold_decides():
  # Window null scores 1.5 + 1.5 = 3.0 and 0.5 + 1.0 = 1.5 -> null score 1.5 (the minimum).
  # Best span: "Ada built" = start 3 (1.0) + end 4 (1.0) = 2.0 in the first window.
  windows = [_window(1.5, 1.5, (3, 1.0), (4, 1.0)), _window(0.5, 1.0)]
  answer = span_decoding.decode_answer(windows, CONTEXT)
  assert (answer.text, answer.score, answer.null_score) == ("Ada built", 2.0, 1.5)
  assert answer.null_score_diff == -0.5
  assert span_decoding.null_answer(answer, 0.0) == "Ada built"  # -0.5 <= 0
  assert span_decoding.null_answer(answer, -0.5) == "Ada built"  # not strictly greater
  assert span_decoding.null_answer(answer, -0.6) == ""  # -0.5 > -0.6
  # Without the low second window the null score is 3.0: diff 1.0 > 0 -> "".
  answer = span_decoding.decode_answer(windows[:1], CONTEXT)
  assert answer.null_score == 3.0 and span_decoding.null_answer(answer) == ""
  # No valid span at all: "" and the null score alone as the difference (as the reference).
  empty = span_decoding.decode_answer([], CONTEXT)
  assert span_decoding.null_answer(empty, 100.0) == ""


def test_score_v2_known_predictions(v2_file):
  dataset = squad_reader.load_json(v2_file)
  predictions = {"v1": "Ada Byron", "v2": "in 1901", "v3": "", "v4": "", "v5": "salt"}
  best_non_null = {
      "v1": "Ada Byron",
      "v2": "in 1901",
      "v3": "Ada Byron",
      "v4": "Glass beads",
      "v5": "salt"
  }
  diffs = {"v1": -3.0, "v2": -1.0, "v3": 2.0, "v4": 0.5, "v5": -0.5}
  scores = squad_scoring.score_v2(dataset, predictions, diffs, best_non_null)
  # v1 right; v2 "in 1901" vs "1901": EM 0, F1 2 * 0.5 * 1 / 1.5 = 2/3; v3 "" right; v4 "" wrong;
  # v5 "salt" wrong (unanswerable).
  assert scores["exact"] == pytest.approx(40.0)
  assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 5)
  assert scores["total"] == 5
  assert scores["HasAns_exact"] == pytest.approx(100 / 3)
  assert scores["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
  assert (scores["HasAns_total"], scores["NoAns_total"]) == (3, 2)
  assert scores["NoAns_exact"] == scores["NoAns_f1"] == pytest.approx(50.0)
  # Threshold sweep over the best non-null answers in increasing diff (all-null start = 2 right):
  #   v1 (-3): +1 -> 3 (best EM, threshold -3); v2 (-1): EM +0, F1 +2/3 -> 3.667 (best F1, -1);
  #   v5 (-0.5): -1; v4 (0.5): +1; v3 (2): -1.
  assert scores["best_exact"] == pytest.approx(60.0) and scores["best_exact_thresh"] == -3.0
  assert scores["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 5)
  assert scores["best_f1_thresh"] == -1.0


def test_evaluate_v2_end_to_end_with_a_fixed_logit_model(tmp_path, v2_file, caplog):
  out = str(tmp_path / "records")
  meta = make_records_job.make_records(
      make_records_job.RecordsConfig(vocab_file=testutil.vocab_file(), do_lower_case=True,
                                     max_seq_length=64, doc_stride=32, max_query_length=16,
                                     num_shards=1, version_2_with_negative=True,
                                     predict_file=v2_file, output_dir=out, num_workers=1))
  model = _fixed_logit_model()
  model_dir = tmp_path / "model"
  model_dir.mkdir()
  results = evaluation.evaluate(
      model, out, meta, v2_file, str(model_dir), 8,
      span_decoding.DecodingSettings(n_best_size=20, max_answer_length=30,
                                     version_2_with_negative=True, null_score_diff_threshold=0.0))
  predictions = json.loads((model_dir / "predictions.json").read_text())
  null_odds = json.loads((model_dir / "null_odds.json").read_text())
  # P1: null 4 - best span 0 = 4 > 0 -> ""; P2: 4 - 10 = -6 -> "Glass beads".
  assert predictions == {"v1": "", "v2": "", "v3": "", "v4": "Glass beads", "v5": "Glass beads"}
  assert null_odds == {"v1": 4.0, "v2": 4.0, "v3": 4.0, "v4": -6.0, "v5": -6.0}
  # nbest_predictions.json as run_squad.py writes it: P1's null answer (2 + 2) beats its spans
  # (0 + 0); P2's "Glass beads" (5 + 5) leads, the null answer still listed.
  nbest = json.loads((model_dir / "nbest_predictions.json").read_text())
  assert list(nbest) == list(predictions)
  assert nbest["v1"][0] == {
      "text": "",
      "probability": nbest["v1"][0]["probability"],
      "start_logit": 2.0,
      "end_logit": 2.0
  }
  assert nbest["v4"][0] == {
      "text": "Glass beads",
      "probability": nbest["v4"][0]["probability"],
      "start_logit": 5.0,
      "end_logit": 5.0
  }
  assert nbest["v4"][0]["probability"] > 0.9  # e^10 against the rest's e^5 and less
  for entries in nbest.values():
    scores = [e["start_logit"] + e["end_logit"] for e in entries]
    assert scores == sorted(scores, reverse=True) and 1 < len(entries) <= 21
    assert len({e["text"] for e in entries}) == len(entries) and "" in {e["text"] for e in entries}
    assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
  assert results["exact"] == pytest.approx(40.0)  # v3 and v4 right
  assert results["HasAns_exact"] == pytest.approx(100 / 3) and results["NoAns_exact"] == 50.0
  assert json.loads((model_dir / "eval_results.json").read_text())["exact"] == results["exact"]
  assert "every question was answered" not in caplog.text
  # A threshold below every null odds answers "" everywhere: said, with the scorer's best.
  all_null = evaluation.evaluate(
      model, out, meta, v2_file, str(model_dir), 8,
      span_decoding.DecodingSettings(n_best_size=20, max_answer_length=30,
                                     version_2_with_negative=True, null_score_diff_threshold=-10.0))
  assert set(json.loads((model_dir / "predictions.json").read_text()).values()) == {""}
  # Answering P2 gains v4 and loses v5: no threshold beats answering nothing (the scorer's -7).
  assert all_null["best_f1"] == all_null["f1"] == 40.0 and all_null["best_f1_thresh"] == -7.0
  assert evaluation.all_null_hint(all_null, -10.0) in caplog.text
  assert evaluation.all_null_hint(all_null, -10.0) == (
      "every question was answered \"\" (no answer): each null score beat the best span by more "
      "than --null_score_diff_threshold=-10, and no threshold scores better on these questions: "
      "the model prefers no answer to any span it finds; train longer")
  better = dict(all_null, best_f1=55.5, best_f1_thresh=-2.25)
  assert evaluation.all_null_hint(better, 0.0).endswith(
      "--null_score_diff_threshold=0. The official scorer's best threshold on these questions is "
      "-2.250 (F1 55.50 against 40.00): pass it as --null_score_diff_threshold, or train longer")
  # The same folder scored on SQuAD 1.1 (the answerable questions): its files are of that run.
  v1 = copy.deepcopy(V2)
  for article in v1["data"]:
    for paragraph in article["paragraphs"]:
      paragraph["qas"] = [q for q in paragraph["qas"] if not q.get("is_impossible")]
  v1_file = tmp_path / "v1.json"
  v1_file.write_text(json.dumps(v1))
  v1_out = str(tmp_path / "v1_records")
  v1_meta = make_records_job.make_records(
      make_records_job.RecordsConfig(vocab_file=testutil.vocab_file(), max_seq_length=64,
                                     doc_stride=32, max_query_length=16, num_shards=1,
                                     predict_file=str(v1_file), output_dir=v1_out, num_workers=1))
  evaluation.evaluate(model, v1_out, v1_meta, str(v1_file), str(model_dir), 8,
                      span_decoding.DecodingSettings(n_best_size=20, max_answer_length=30))
  # Without glass/beads every context logit is 0: the first one-token span wins the tie.
  assert json.loads((model_dir / "predictions.json").read_text()) == {
      "v1": "The",
      "v2": "The",
      "v4": "Glass beads"
  }
  assert not (model_dir / "null_odds.json").exists()


# Paragraphs without a single token: whitespace only (the reader skips its questions) and only
# characters the tokenizer deletes (zero-width space, soft hyphen, a control character).
NO_TOKENS = [
    {
        "context": " \n\t ",
        "qas": [{
            "id": "e1",
            "question": "Who painted it?",
            "is_impossible": False,
            "answers": [{
                "text": "Ada",
                "answer_start": 0
            }]
        },
                _qa("e2", "Who sold it?")]
    },
    {
        "context": "\u200b\u00ad\u0007",
        "qas": [_qa("e3", "Who drew it?")]
    },
]


@pytest.mark.parametrize("version_2", [True, False])
def test_every_question_is_predicted_and_scored(tmp_path, version_2):
  """Questions whose context has no token get "" in predictions.json and count in the totals,
  on SQuAD 2.0 (was: missing, total 5 instead of 8) as on v1.1."""
  data = json.loads(json.dumps(V2))
  data["data"][0]["paragraphs"][1:1] = NO_TOKENS  # between P1 and P2
  if not version_2:  # v1.1 needs an answer everywhere
    for paragraph in data["data"][0]["paragraphs"]:
      for qa in paragraph["qas"]:
        qa.pop("is_impossible")
        qa["answers"] = qa["answers"] or [{"text": "mill", "answer_start": 0}]
  path = tmp_path / "v2_no_tokens.json"
  path.write_text(json.dumps(data))
  out = str(tmp_path / "records")
  meta = make_records_job.make_records(
      make_records_job.RecordsConfig(vocab_file=testutil.vocab_file(), do_lower_case=True,
                                     max_seq_length=64, doc_stride=32, max_query_length=16,
                                     num_shards=1, version_2_with_negative=version_2,
                                     predict_file=str(path), output_dir=out, num_workers=1))
  assert meta["splits"]["eval"]["skipped"] == {"context_has_no_tokens": 1, "empty_context": 2}
  model_dir = tmp_path / "model"
  model_dir.mkdir()
  results = evaluation.evaluate(
      _fixed_logit_model(), out, meta, str(path), str(model_dir), 8,
      span_decoding.DecodingSettings(n_best_size=20, max_answer_length=30,
                                     version_2_with_negative=version_2))
  predictions = json.loads((model_dir / "predictions.json").read_text())
  assert list(predictions) == ["v1", "v2", "v3", "e1", "e2", "e3", "v4", "v5"]
  assert [predictions[q] for q in ("e1", "e2", "e3")] == ["", "", ""]
  nbest = json.loads((model_dir / "nbest_predictions.json").read_text())
  assert [nbest[q] for q in ("e1", "e2", "e3")] == [[{
      "text": "",
      "probability": 1.0,
      "start_logit": 0.0,
      "end_logit": 0.0
  }]] * 3
  if version_2:
    assert predictions["v4"] == "Glass beads" and predictions["v1"] == ""
    assert results["total"] == 8 and results["HasAns_total"] == 4 and results["NoAns_total"] == 4
    # Right: v3, v4 and the unanswerable e2, e3 -> 4 of 8.
    assert results["exact"] == pytest.approx(50.0)
    null_odds = json.loads((model_dir / "null_odds.json").read_text())
    assert [null_odds[q] for q in ("e1", "e2", "e3")] == [float("inf")] * 3
    assert null_odds["v4"] == -6.0
  else:
    assert results["num_questions"] == 8
    assert results["exact_match"] == pytest.approx(100 / 8)  # v4 only


def _fixed_logit_model():
  """[CLS] logits 2 + 2 = 4 everywhere; "glass" .. "beads" = 5 + 5 = 10; all else 0."""
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  glass, beads = (int(tokenizer.tokenize([w])[0].ids[0]) for w in ("glass", "beads"))

  def model(inputs, training=False):
    del training
    ids = inputs["input_word_ids"]
    first = tf.one_hot(tf.zeros_like(ids[:, 0]), tf.shape(ids)[1]) * 2.0
    return (first + tf.cast(ids == glass, tf.float32) * 5.0,
            first + tf.cast(ids == beads, tf.float32) * 5.0)

  return model


def _at_threshold(best_non_null, diffs, threshold):
  """Predictions as span_decoding.null_answer makes them at `threshold`."""
  return {q: "" if diffs[q] > threshold else text for q, text in best_non_null.items()}


def test_best_threshold_when_no_answer_is_best(v2_file):
  # Every span is wrong: leaving all blank (the unanswerable v3, v5 right: 2 of 5) is best. The
  # official sweep reports 0.0, which answers v3 and v5 (diffs < 0): 0 of 5; -2.0 (smallest
  # diff - 1) leaves them all blank.
  dataset = squad_reader.load_json(v2_file)
  best_non_null = {"v1": "the mill", "v2": "Elm", "v3": "Ada", "v4": "salt", "v5": "coast"}
  diffs = {"v1": 0.5, "v2": 1.0, "v3": -1.0, "v4": 2.0, "v5": -0.5}
  scores = squad_scoring.score_v2(dataset, _at_threshold(best_non_null, diffs, 0.0), diffs,
                                  best_non_null)
  assert scores["best_exact"] == scores["best_f1"] == pytest.approx(40.0)
  assert scores["best_exact_thresh"] == scores["best_f1_thresh"] == -2.0
  assert scores["exact"] == pytest.approx(0.0)  # at 0.0
  again = squad_scoring.score_v2(dataset, _at_threshold(best_non_null, diffs, -2.0))
  assert again["exact"] == again["f1"] == pytest.approx(40.0)


def test_best_threshold_with_tied_differences(v2_file):
  # v1 (right) and v3 (unanswerable, answered) share diff 0.0: no threshold answers one without
  # the other, so the pair gains 1 - 1 = 0; the official one-at-a-time sweep would count v1 alone
  # (3 of 5 at "0.0", which gives 2 of 5). Best: v2 (right) alone at -1.0 -> v2, v3, v5 = 3 of 5.
  dataset = squad_reader.load_json(v2_file)
  best_non_null = {"v1": "Ada Byron", "v2": "1901", "v3": "Ada", "v4": "salt", "v5": "coast"}
  diffs = {"v1": 0.0, "v2": -1.0, "v3": 0.0, "v4": 1.0, "v5": 2.0}
  scores = squad_scoring.score_v2(dataset, best_non_null, diffs)
  assert scores["best_exact"] == pytest.approx(60.0) and scores["best_exact_thresh"] == -1.0
  at_zero = squad_scoring.score_v2(dataset, _at_threshold(best_non_null, diffs, 0.0))
  assert at_zero["exact"] == pytest.approx(60.0)  # v1, v2 right, v3 wrong, v5 right: also 3


@pytest.mark.parametrize("seed", range(6))
def test_best_threshold_reproduces_the_best_score(v2_file, seed):
  """On random answers and tied differences: the reported threshold gives the reported score, and
  no threshold gives more."""
  rng = np.random.default_rng(seed)
  dataset = squad_reader.load_json(v2_file)
  choices = ["Ada Byron", "Byron", "1901", "in 1901", "Glass beads", "beads", "salt", "", "Elm"]
  ids = squad_scoring.question_ids(dataset)
  best_non_null = {q: str(rng.choice(choices)) for q in ids}
  diffs = {q: float(rng.integers(-3, 3)) / 2 for q in ids}  # ties likely
  scores = squad_scoring.score_v2(dataset, best_non_null, diffs)
  for name in ("exact", "f1"):
    again = squad_scoring.score_v2(
        dataset, _at_threshold(best_non_null, diffs, scores[f"best_{name}_thresh"]))
    assert again[name] == pytest.approx(scores[f"best_{name}"])
    every = [
        squad_scoring.score_v2(dataset, _at_threshold(best_non_null, diffs, t))[name]
        for t in [-10.0] + sorted(set(diffs.values()))
    ]
    assert scores[f"best_{name}"] == pytest.approx(max(every))
