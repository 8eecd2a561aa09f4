"""The bad-input catalogue: every case is a small file made here, and each has a decided outcome.

Fatal problems raise SquadInputError with one line naming the file, the article/paragraph/question
and what is wrong (make_records.py prints it and exits non-zero, no traceback); recoverable ones are
skipped and counted by reason in meta.json; odd but valid text is featurized exactly as the
reference (tf-models-official squad_lib + FullTokenizer) does. Output is atomic and deterministic.
"""

import hashlib
import json
import logging as std_logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from squad_qa.postprocess import squad_scoring
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import make_records_job
from squad_qa.preprocess import record_serialization
from squad_qa.preprocess import records
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece
from tests import testutil
from tools import compare_with_reference
from tools import reference_features

SEQ, STRIDE, QUERY = 64, 16, 16


def settings(v2=False, seq=SEQ, stride=STRIDE, query=QUERY, shards=2, **job):
  return make_records_job.RecordsConfig(vocab_file=testutil.vocab_file(), do_lower_case=True,
                                        max_seq_length=seq, doc_stride=stride,
                                        max_query_length=query, num_shards=shards,
                                        version_2_with_negative=v2, num_workers=1, **job)


def make_records(inputs, out, **kwargs):
  """The in-process job on {split: path}."""
  return make_records_job.make_records(
      settings(train_file=inputs.get("train"), predict_file=inputs.get("eval"), output_dir=out,
               **kwargs))


def write(tmp_path, name, content):
  path = tmp_path / name
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
  return str(path)


def write_json_lines(tmp_path, name, rows):
  """`rows` (dicts) as JSON Lines, one a line (`datasets`' to_json)."""
  return write(tmp_path, name, "".join(json.dumps(row) + "\n" for row in rows))


def squad(*paragraphs, title="Hand-made"):
  return {"version": "1.1", "data": [{"title": title, "paragraphs": list(paragraphs)}]}


def qa(qid, question, answers):
  return {
      "id": qid,
      "question": question,
      "answers": [{
          "text": t,
          "answer_start": s
      } for t, s in answers]
  }


GOOD_CONTEXT = "The lighthouse keeper painted the tower white in 1904."
GOOD = {
    "context": GOOD_CONTEXT,
    "qas": [qa("good", "Who painted the tower?", [("The lighthouse keeper", 0)])]
}


def run(tmp_path, split, path, **kwargs):
  out = str(tmp_path / "records")
  return make_records({split: path}, out, **kwargs)


# ------------------------------------------------------------------------------------------------
# Fatal: one line naming file, place and problem.

FATAL = [
    ("not_json", "{this is not json", "not valid JSON (line 1 column 2"),
    ("truncated", json.dumps(squad(GOOD))[:-7], "not valid JSON"),
    ("empty_file", "", "the file is empty; re-download or re-export it"),
    ("not_utf8", "{\"data\": [\"caf\xe9\"]}".encode("latin-1"), "not UTF-8 text"),
    ("no_data", {
        "version": "1.1",
        "articles": []
    }, "top level has no 'data' list"),
    ("top_level_list", [GOOD], "top level has no 'data' list"),
    ("no_paragraphs", {
        "data": [{
            "title": "Lonely"
        }]
    }, "article 0 ('Lonely') has no 'paragraphs' list"),
    ("no_context", squad({"qas": []}), "article 0 paragraph 0: no 'context' string"),
    ("no_id", squad({
        "context": GOOD_CONTEXT,
        "qas": [{
            "question": "Who?",
            "answers": []
        }]
    }), "article 0 paragraph 0 question 0: needs string 'id' and 'question'"),
    ("no_question", squad({
        "context": GOOD_CONTEXT,
        "qas": [{
            "id": "x",
            "answers": []
        }]
    }), "article 0 paragraph 0 question 0: needs string 'id' and 'question'"),
    ("duplicate_id", squad(GOOD, dict(GOOD, qas=[qa("good", "Again?", [("tower", 34)])])),
     "article 0 paragraph 1 question 0: duplicate id 'good' (first at article 0 paragraph 0 "
     "question 0)"),
    ("answer_start_words",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [{
             "id": "q",
             "question": "Q?",
             "answers": [{
                 "text": "tower",
                 "answer_start": "thirty"
             }]
         }]
     }), "question 0 (q): first answer needs a string 'text' and an integer 'answer_start' (or its "
     "decimal string), got {'text': 'tower', 'answer_start': 'thirty'}"),
    ("answer_without_text",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [{
             "id": "q",
             "question": "Q?",
             "answers": [{
                 "answer_start": 34
             }]
         }]
     }), "got {'answer_start': 34}"),
    ("answer_a_string",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [{
             "id": "q",
             "question": "Q?",
             "answers": ["tower"]
         }]
     }), "got 'tower'"),
    ("answer_start_fraction",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [{
             "id": "q",
             "question": "Q?",
             "answers": [{
                 "text": "tower",
                 "answer_start": "34.5"
             }]
         }]
     }), "'answer_start': '34.5'}"),
    ("answer_start_float",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [{
             "id": "q",
             "question": "Q?",
             "answers": [{
                 "text": "tower",
                 "answer_start": 34.0
             }]
         }]
     }), "'answer_start': 34.0}"),
    ("id_float",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [{
             "id": 1.5,
             "question": "Q?",
             "answers": [{
                 "text": "tower",
                 "answer_start": 34
             }]
         }]
     }),
     "question 0: needs string 'id' and 'question' (an integer id is read as its decimal string)"),
    ("id_bool",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [{
             "id": True,
             "question": "Q?",
             "answers": [{
                 "text": "tower",
                 "answer_start": 34
             }]
         }]
     }), "needs string 'id' and 'question'"),
    # The number 7 and the string "7" are the same id once read: which one a prediction is for
    # would be ambiguous.
    ("id_number_and_string",
     squad(dict(GOOD, qas=[qa(7, "Who?", [("tower", 34)]),
                           qa("7", "What?", [("tower", 34)])])),
     "article 0 paragraph 0 question 1: duplicate id '7' (first at article 0 paragraph 0 "
     "question 0)"),
    ("is_impossible_string",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [dict(qa("q", "Q?", []), is_impossible="yes")]
     }), "'is_impossible' must be true or false (JSON booleans), got 'yes'"),
    ("is_impossible_false_string",
     squad({
         "context": GOOD_CONTEXT,
         "qas": [dict(qa("q", "Q?", [("tower", 34)]), is_impossible="false")]
     }), "question 0 (q): 'is_impossible' must be true or false (JSON booleans), got 'false'"),
    ("empty_dataset", {
        "version": "1.1",
        "data": []
    }, "no usable train questions (no questions)"),
    ("nothing_usable", squad({
        "context": GOOD_CONTEXT,
        "qas": [qa("q", "Q?", [("tower", 3)])]
    }), "no usable train questions (answer_text_mismatch: 1)"),
]


@pytest.mark.parametrize("name, content, message", FATAL, ids=[c[0] for c in FATAL])
def test_fatal_input_is_one_line_naming_file_and_place(tmp_path, name, content, message):
  path = write(tmp_path, f"{name}.json", content)
  with pytest.raises(squad_reader.SquadInputError) as error:
    run(tmp_path, "train", path)
  text = str(error.value)
  assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text
  assert not os.path.exists(tmp_path / "records" / records.META_FILE)  # nothing written


@pytest.mark.slow
def test_cli_exits_non_zero_with_one_line_and_no_traceback(tmp_path):
  path = write(tmp_path, "broken.json", json.dumps(squad(GOOD))[:-7])
  code, output = testutil.run_cli("preprocess/make_records.py", f"--train_file={path}",
                                  f"--vocab_file={testutil.vocab_file()}",
                                  f"--output_dir={tmp_path / 'records'}", expect_ok=False)
  assert code != 0
  assert "Traceback" not in output
  last = output.strip().splitlines()[-1]
  assert last.startswith(f"make_records.py: {path}: not valid JSON (line 1 column ")
  assert not os.path.exists(tmp_path / "records" / records.META_FILE)
  # A missing file names the flag and where SQuAD is published.
  code, output = testutil.run_cli("preprocess/make_records.py",
                                  f"--predict_file={tmp_path / 'nope.json'}",
                                  f"--vocab_file={testutil.vocab_file()}",
                                  f"--output_dir={tmp_path / 'records'}", expect_ok=False)
  assert code != 0 and "Traceback" not in output
  assert "--predict_file: no file at" in output.strip().splitlines()[-1]


# ------------------------------------------------------------------------------------------------
# Accepted, skipped or noted: counted in meta.json.


def test_utf8_byte_order_mark_is_accepted_and_changes_nothing(tmp_path):
  plain = write(tmp_path, "plain.json", squad(GOOD))
  with_bom = write(tmp_path, "bom.json", b"\xef\xbb\xbf" + json.dumps(squad(GOOD)).encode())
  a = squad_reader.read_squad(plain, is_training=True)
  b = squad_reader.read_squad(with_bom, is_training=True)
  assert a.contexts == b.contexts and a.examples == b.examples and len(a.examples) == 1


def test_recoverable_problems_are_skipped_and_counted_by_reason(tmp_path, caplog):
  context = GOOD_CONTEXT  # "tower" at 34, "1904" at 49
  data = squad(
      {
          "context": context,
          "qas": [
              qa("ok", "Which year?", [("1904", 49)]),
              qa("none", "No answer?", []),  # no_answer
              qa("several", "Which tower?", [("tower", 34), ("the tower", 30)]),  # first used
              qa("negative", "Negative?", [("tower", -3)]),  # out of range
              qa("past_end", "Past the end?", [("tower", 52)]),  # out of range
              qa("mismatch", "Mismatch?", [("tower", 4)]),  # answer_text_mismatch
              qa("blank", "Blank?", [("   ", 10)]),  # answer_empty
              qa("no_question", " \t", [("tower", 34)]),  # question_has_no_tokens
              qa("empty_question", "", [("tower", 34)]),  # question_has_no_tokens
          ]
      },
      {"context": "A paragraph nobody asked about."},  # paragraph_without_questions
      {
          "context": "Another one.",
          "qas": []
      },  # paragraph_without_questions
      {
          "context": "   \n ",
          "qas": [qa("empty_ctx", "Empty?", [("x", 0)])]
      },  # empty_context
      {
          "context": "\u200b\u200b",
          "qas": [qa("zw_ctx", "Nothing?", [("\u200b", 0)])]
      },
      {
          "context": "Zero\u200b width",
          "qas": [qa("zw_answer", "What?", [("\u200b", 4)])]
      },
  )
  path = write(tmp_path, "train.json", data)
  with caplog.at_level(std_logging.INFO, logger="absl"):
    meta = run(tmp_path, "train", path)
  info = meta["splits"]["train"]
  # Where to look: the first question of each reason, by place and id (the reader's) or by id
  # (featurizing's).
  assert (f"train: the first question of {path} skipped for each reason: answer_empty: "
          f"article 0 paragraph 0 question 6 (blank); answer_has_no_tokens: id zw_ctx; "
          f"answer_start_out_of_range: article 0 paragraph 0 question 3 (negative); "
          f"answer_text_mismatch: article 0 paragraph 0 question 5 (mismatch); empty_context: "
          f"article 0 paragraph 3 question 0 (empty_ctx); no_answer: article 0 paragraph 0 "
          f"question 1 (none); question_has_no_tokens: id no_question") in [
              r.getMessage() for r in caplog.records
          ]
  assert info["skipped"] == {
      "answer_empty": 1,
      "answer_has_no_tokens": 1,
      "answer_start_out_of_range": 2,
      "answer_text_mismatch": 1,
      "empty_context": 1,
      "no_answer": 1,
      "paragraph_without_questions": 2,
      "question_has_no_tokens": 2
  }
  # zw_ctx: the answer "\u200b" (a format character the tokenizer deletes) holds no token, nor does
  # its context. zw_answer: the same answer inside the word "Zero\u200b" is kept, as the reference
  # keeps it: its span is the word's tokens ("zero").
  assert info["notes"] == {"first_of_several_answers": 1}
  assert info["num_examples"] == 3  # ok, several, zw_answer
  # Eval keeps every question of a non-empty context that asks something (and has answers to
  # score it against: test_a_scored_question_without_answers_is_named_unless_squad_2).
  qas = data["data"][0]["paragraphs"][0]["qas"]
  qas[:] = [q for q in qas if q["id"] != "none"]
  meta = run(tmp_path, "eval", write(tmp_path, "dev.json", data))
  assert meta["splits"]["eval"]["skipped"] == {
      "context_has_no_tokens": 1,
      "empty_context": 1,
      "paragraph_without_questions": 2,
      "question_has_no_tokens": 2
  }
  assert meta["splits"]["eval"]["num_examples"] == 7


def test_paragraph_without_qas_is_scored_as_one_without_questions(tmp_path):
  """make_records counts a paragraph without 'qas' (paragraph_without_questions); the scorers read
  the same file (load_json), so it must reach them as a paragraph with no question."""
  path = write(tmp_path, "dev.json", squad(GOOD, {"context": "A paragraph nobody asked about."}))
  assert run(tmp_path, "eval", path)["splits"]["eval"]["skipped"] == {
      "paragraph_without_questions": 1
  }
  data = squad_reader.load_json(path)
  assert data[0]["paragraphs"][1]["qas"] == []
  assert squad_scoring.unanswerable_questions(data) == []
  assert squad_scoring.score_v1(data, {"good": "The lighthouse keeper"})["exact_match"] == 100.0


@pytest.mark.parametrize("split", ["train", "eval"])
def test_split_left_without_a_question_by_its_skips_is_refused(tmp_path, split):
  """Skips made while featurizing (here every question is empty) leave no question: refused as
  the reader refuses a file without a usable question, and nothing is written, not even the
  --output_dir the run made."""
  data = squad({
      "context": GOOD_CONTEXT,
      "qas": [qa("blank", " \u200b", [("tower", 34)]),
              qa("empty", "", [("tower", 34)])]
  })
  path = write(tmp_path, f"{split}.json", data)
  with pytest.raises(squad_reader.SquadInputError) as error:
    run(tmp_path, split, path)
  assert str(error.value) == f"{path}: no usable {split} questions (question_has_no_tokens: 2)"
  assert not (tmp_path / "records").exists()  # the folder this run made is gone


def test_question_longer_than_max_query_length_is_truncated_and_noted(tmp_path):
  question = "Which " + " ".join(["very"] * 30) + " old tower was painted white?"
  data = squad({"context": GOOD_CONTEXT, "qas": [qa("long", question, [("tower", 34)])]})
  path = write(tmp_path, "train.json", data)
  meta = run(tmp_path, "train", path)
  assert meta["splits"]["train"]["notes"] == {"question_truncated": 1}
  arrays = records.read_records(records.shard_paths(str(tmp_path / "records"), meta, "train"),
                                "train", SEQ)
  # [CLS] + 16 question tokens + [SEP]: the context starts at 18.
  assert arrays["segment_ids"][0][17:19].tolist() == [0, 1]
  assert arrays["input_ids"][0][17] == 102


def test_squad_2_file_without_version_2_is_refused_before_writing(tmp_path):
  data = squad({
      "context": GOOD_CONTEXT,
      "qas": [
          qa("ok", "Which year?", [("1904", 49)]),
          dict(qa("impossible", "Who painted the door?", []), is_impossible=True),
          dict(qa("impossible_2", "When was it built?", []), is_impossible=True),
      ]
  })
  for split in ("train", "eval"):
    path = write(tmp_path, f"{split}.json", data)
    with pytest.raises(squad_reader.SquadInputError) as error:
      run(tmp_path, split, path)
    assert str(error.value) == (
        f"{path}: 2 questions are marked \"is_impossible\": true (SQuAD 2.0's unanswerable "
        f"questions; the first: article 0 paragraph 0 question 1 (impossible)), which SQuAD 1.1 "
        f"records cannot hold; pass --version_2_with_negative")
    assert not os.path.exists(tmp_path / "records")
  # Hugging Face rows have no is_impossible: theirs are the rows without answers, named by row.
  rows = write_json_lines(tmp_path, "rows.jsonl", hugging_face_rows(data))
  with pytest.raises(squad_reader.SquadInputError) as error:
    run(tmp_path, "train", rows)
  assert str(error.value) == (
      f"{rows}: 2 rows have no answers (SQuAD 2.0's unanswerable questions; the first: row 1 "
      f"(impossible)), which SQuAD 1.1 records cannot hold; pass --version_2_with_negative")


def test_a_scored_question_without_answers_is_named_unless_squad_2(tmp_path):
  """SQuAD 1.1's scorer compares a prediction with the gold answers: an eval question with none
  stops the records (not train.py after its prediction); SQuAD 2.0 scores it as unanswerable."""
  data = squad({
      "context": GOOD_CONTEXT,
      "qas": [
          qa("ok", "Which year?", [("1904", 49)]),
          qa("unanswered", "Who painted the door?", [])
      ]
  })
  path = write(tmp_path, "eval.json", data)
  with pytest.raises(squad_reader.SquadInputError) as error:
    run(tmp_path, "eval", path)
  assert str(error.value) == (
      f"{path}: article 0 paragraph 0 question 1 (unanswered): no answers, and SQuAD 1.1 scores "
      f"every question against its answers; add them or remove the question (unanswerable "
      f"questions: \"is_impossible\": true, and --version_2_with_negative)")
  assert not os.path.exists(tmp_path / "records")
  meta = run(tmp_path, "eval", path, v2=True)
  assert meta["splits"]["eval"]["num_examples"] == 2


@pytest.mark.parametrize("answers, message", [
    ([{
        "text": "1904",
        "answer_start": 49
    }, {
        "text": 1904,
        "answer_start": 49
    }], "answer 1 must be an object with a string 'text' (the scorer compares the prediction with "
     "each answer's), got {'text': 1904, 'answer_start': 49}"),
    (["1904"], "answer 0 must be an object with a string 'text' (the scorer compares the "
     "prediction with each answer's), got '1904'"),
    ({
        "text": "1904",
        "answer_start": 49
    }, "'answers' must be a list of {\"text\": string, \"answer_start\": integer} objects (the "
     "scorer compares the prediction with each 'text'), got {'text': '1904', 'answer_start': 49}"),
])
def test_eval_answers_the_scorer_cannot_read_are_named(tmp_path, answers, message):
  """The scorers read every gold answer's 'text': a number, a bare string or one object instead of
  a list stops the records with one line (train.py would fail in the scorer after training)."""
  data = squad({
      "context": GOOD_CONTEXT,
      "qas": [
          qa("ok", "Which year?", [("1904", 49)]), {
              "id": "odd",
              "question": "When?",
              "answers": answers
          }
      ]
  })
  path = write(tmp_path, "eval.json", data)
  for v2 in (False, True):
    with pytest.raises(squad_reader.SquadInputError) as error:
      run(tmp_path, "eval", path, v2=v2)
    assert str(error.value) == f"{path}: article 0 paragraph 0 question 1 (odd): {message}"
    assert not os.path.exists(tmp_path / "records")


def test_blank_eval_answers_are_kept_and_noted(tmp_path):
  data = squad({
      "context": GOOD_CONTEXT,
      "qas": [qa("ok", "Which year?", [("1904", 49)]),
              qa("blank", "When?", [(" ", 3), ("", 0)])]
  })
  meta = run(tmp_path, "eval", write(tmp_path, "eval.json", data))
  assert meta["splits"]["eval"]["num_examples"] == 2
  assert meta["splits"]["eval"]["notes"] == {"blank_answers_scored_as_empty": 1}


def test_squad_2_training_questions_without_answers_or_flag_are_unanswerable(tmp_path):
  """SQuAD 2.0 data written without "is_impossible" (as rows converted from Hugging Face are): under
  --version_2_with_negative a training question without answers trains as unanswerable, as the
  scorer reads it; "is_impossible": false without answers contradicts itself and is skipped."""
  data = squad({
      "context": GOOD_CONTEXT,
      "qas": [
          qa("ok", "Which year?", [("1904", 49)]),
          qa("none", "Who painted the door?", []),
          dict(qa("false", "Who painted the roof?", []), is_impossible=False),
      ]
  })
  path = write(tmp_path, "train.json", data)
  read = squad_reader.read_squad(path, is_training=True, version_2_with_negative=True)
  assert [(e.qas_id, e.is_impossible) for e in read.examples] == [("ok", False), ("none", True)]
  assert read.notes == {"no_answers_trained_as_unanswerable": 1, "unanswerable": 1}
  assert read.skipped == {"no_answer": 1}
  v1 = squad_reader.read_squad(path, is_training=True)
  assert [e.qas_id for e in v1.examples] == ["ok"] and v1.skipped == {"no_answer": 2}


def test_a_file_that_looks_like_the_other_squad_version_is_named(tmp_path, caplog):
  """Training questions without answers (nor is_impossible) under SQuAD 1.1 are skipped, but SQuAD
  2.0 data written that way would lose its unanswerable half: the warning names the flag. Under
  --version_2_with_negative, a file without an unanswerable question is named too."""
  unanswered = squad({
      "context": GOOD_CONTEXT,
      "qas": [qa("ok", "Which year?", [("1904", 49)]),
              qa("none", "Who painted the door?", [])]
  })
  path = write(tmp_path, "train.json", unanswered)
  with caplog.at_level(std_logging.INFO, logger="absl"):
    run(tmp_path, "train", path)
    run(tmp_path, "train", write(tmp_path, "v1.json", squad(GOOD)), v2=True)
  messages = [r.getMessage() for r in caplog.records if r.levelno == std_logging.WARNING]
  assert (f"{path}: 1 question without answers skipped (the first: article 0 paragraph 0 "
          f"question 1 (none)); if they are SQuAD 2.0's unanswerable questions, "
          f"--version_2_with_negative trains them as such") in messages
  assert (f"{tmp_path / 'v1.json'}: --version_2_with_negative, but none of its 1 question is "
          f"unanswerable (\"is_impossible\": true, or no answers): the model would learn and be "
          f"scored on no null answer; SQuAD 1.1 data needs no flag") in messages
  caplog.clear()
  with caplog.at_level(std_logging.INFO, logger="absl"):
    run(tmp_path, "train", path, v2=True)
  assert not [r for r in caplog.records if "--version_2_with_negative" in r.getMessage()]
  broken = write(tmp_path, "null.json",
                 squad(dict(GOOD, qas=[dict(qa("null", "Who?", []), answers=None)])))
  with pytest.raises(squad_reader.SquadInputError) as error:
    run(tmp_path, "train", broken)
  assert str(error.value) == (
      f"{broken}: article 0 paragraph 0 question 0 (null): 'answers' must be a list of "
      f"{{\"text\": string, \"answer_start\": integer}} objects ([] for none), got None")


def test_unanswerable_questions_with_answers_are_scored_as_unanswerable(tmp_path):
  """"is_impossible": true with answers: the records train [CLS]; the scorer, which reads the
  answers, gets none (they become plausible_answers, as SQuAD 2.0's files write them)."""
  data = squad({
      "context": GOOD_CONTEXT,
      "qas": [
          qa("ok", "Which year?", [("1904", 49)]),
          dict(qa("marked", "Who painted the door?", [("The lighthouse keeper", 0)]),
               is_impossible=True),
      ]
  })
  path = write(tmp_path, "eval.json", data)
  (article,) = squad_reader.load_json(path)
  marked = article["paragraphs"][0]["qas"][1]
  assert marked["answers"] == [] and marked["plausible_answers"] == [{
      "text": "The lighthouse keeper",
      "answer_start": 0
  }]
  scores = squad_scoring.score_v2([article], {
      "ok": "1904",
      "marked": ""
  }, {
      "ok": -1.0,
      "marked": 1.0
  })
  assert (scores["HasAns_total"], scores["NoAns_total"], scores["exact"]) == (1, 1, 100.0)
  meta = run(tmp_path, "eval", path, v2=True)
  assert meta["splits"]["eval"]["notes"] == {"unanswerable": 1, "unanswerable_answers_ignored": 1}


def test_an_answer_start_a_character_off_is_kept_and_noted(tmp_path):
  """run_squad.py keeps an answer whose words hold its text though `answer_start` is off (here by
  one, inside "tower"): the span is still the text's tokens; the offset is counted, since such
  offsets often come in the wrong unit (UTF-8 bytes, UTF-16 units)."""
  data = squad({"context": GOOD_CONTEXT, "qas": [qa("off", "What was painted?", [("tower", 35)])]})
  out = tmp_path / "records"
  meta = run(tmp_path, "train", write(tmp_path, "train.json", data))
  assert meta["splits"]["train"]["notes"] == {"answer_start_not_at_text": 1}
  ids, start, end = _window_of_answer(meta, out, SEQ)
  vocab = open(testutil.vocab_file(), encoding="utf-8").read().splitlines()
  assert [vocab[i] for i in ids[start:end + 1]] == ["tower"]


def test_questions_of_hugging_face_rows_are_named_by_their_row(tmp_path):
  rows = hugging_face_rows(squad(GOOD, dict(GOOD, qas=[qa("second", "When?", [("1904", 49)])])))
  rows.append(dict(rows[0], question=None))
  path = write_json_lines(tmp_path, "rows.jsonl", rows)
  with pytest.raises(squad_reader.SquadInputError) as error:
    squad_reader.read_squad(path, is_training=True)
  assert str(error.value) == (f"{path}: row 2: needs string 'id' and 'question' (an integer id is "
                              f"read as its decimal string)")
  rows[2] = dict(rows[0], question="Again?")
  path = write_json_lines(tmp_path, "rows.jsonl", rows)
  with pytest.raises(squad_reader.SquadInputError) as error:
    squad_reader.read_squad(path, is_training=True)
  assert str(error.value) == f"{path}: row 2: duplicate id 'good' (first at row 0); question ids " \
                             f"must be unique"


def test_json_lines_errors_name_their_line(tmp_path):
  row = {
      "id": "a",
      "context": GOOD_CONTEXT,
      "question": "Which year?",
      "answers": {
          "text": ["1904"],
          "answer_start": [49]
      }
  }
  lines = [json.dumps(dict(row, id=f"r{i}")) for i in range(4)]
  truncated = write(tmp_path, "cut.jsonl", "\n".join(lines[:3] + [lines[3][:40]]) + "\n")
  with pytest.raises(squad_reader.SquadInputError) as error:
    squad_reader.read_squad(truncated, is_training=True)
  assert str(error.value) == (
      f"{truncated}: line 4 of these JSON Lines is not valid JSON (column 25: Unterminated "
      f"string starting at); the file may be truncated, re-download or re-export it")
  documents = write(tmp_path, "docs.jsonl", "\n".join([json.dumps(squad(GOOD))] * 2) + "\n")
  with pytest.raises(squad_reader.SquadInputError) as error:
    squad_reader.read_squad(documents, is_training=True)
  assert str(error.value) == (
      f"{documents}: one JSON value a line (JSON Lines), but line 1 is not a Hugging Face SQuAD "
      f"row ('id', 'context', 'question', 'answers'); give one SQuAD JSON document "
      f"({{\"data\": [articles]}}) or JSON Lines of such rows")
  mixed = write(tmp_path, "mixed.jsonl", "\n".join(lines[:2] + [json.dumps(squad(GOOD))]))
  with pytest.raises(squad_reader.SquadInputError, match=r"but line 3 is not a Hugging Face SQuAD "
                     r"row like line 1 "):
    squad_reader.read_squad(mixed, is_training=True)


def _window_of_answer(meta, out, seq):
  """(input ids, start, end) of the first train window labelled with an answer."""
  arrays = records.read_records(records.shard_paths(str(out), meta, "train"), "train", seq)
  row = np.flatnonzero(arrays["is_impossible"] == 0)[0]
  return (arrays["input_ids"][row], int(arrays["start_positions"][row]),
          int(arrays["end_positions"][row]))


def test_answer_glued_by_a_format_character_starts_at_its_own_token(tmp_path):
  """`champion\u200bDenver`: the tokenizer deletes U+200B, so the word gives champion ##den ##ver;
  the answer "Denver Broncos" starts at ##den (the reference's label starts at champion)."""
  with open(testutil.DEV_FILE, encoding="utf-8") as f:
    paragraph = json.load(f)["data"][0]["paragraphs"][0]
  question = paragraph["qas"][0]  # "Which NFL team represented the AFC at Super Bowl 50?"
  answer, start = question["answers"][0]["text"], question["answers"][0]["answer_start"]
  assert (answer, start) == ("Denver Broncos", 177)
  glued = paragraph["context"][:start - 1] + "\u200b" + paragraph["context"][start:]
  assert glued[start - 9:start + 14] == "champion\u200bDenver Broncos"
  vocab = wordpiece.read_vocab(testutil.vocab_file())
  for context, span, tokens in [
      (paragraph["context"], (46, 47), ["denver", "broncos"]),
      (glued, (46, 48), ["##den", "##ver", "broncos"]),
  ]:
    data = squad({"context": context, "qas": [qa("q", question["question"], [(answer, start)])]})
    meta = run(tmp_path, "train", write(tmp_path, "train.json", data), seq=256, stride=128,
               query=64)
    assert meta["splits"]["train"]["skipped"] == {}
    ids, first, last = _window_of_answer(meta, tmp_path / "records", 256)
    assert (first, last) == span
    assert [vocab[i] for i in ids[first - 1:last + 2]] == ["champion"] + tokens + ["defeated"]


def test_answer_holding_the_format_character_that_glues_it_starts_at_its_own_token(tmp_path):
  """`champion\u200bDenver` with the answer "\u200bDenver Broncos" (its selection took the
  invisible U+200B): the answer's first character the tokenizer keeps starts ##den."""
  context = "The champion\u200bDenver Broncos defeated the Carolina Panthers."
  vocab = wordpiece.read_vocab(testutil.vocab_file())
  for answer in ("\u200bDenver Broncos", "\u200b\u00adDenver Broncos"):
    glued = context.replace("\u200b", answer[:-len("Denver Broncos")])
    data = squad({"context": glued, "qas": [qa("q", "Q?", [(answer, glued.index(answer))])]})
    meta = run(tmp_path, "train", write(tmp_path, "train.json", data))
    assert meta["splits"]["train"]["skipped"] == {}
    ids, first, last = _window_of_answer(meta, tmp_path / "records", SEQ)
    assert [vocab[i] for i in ids[first - 1:last + 2]
           ] == ["champion", "##den", "##ver", "broncos", "defeated"]


def test_answer_with_a_no_break_space_matches_as_the_context_splits(tmp_path):
  """run_squad.py splits an answer at U+00A0 and U+3000 but not its context: such an answer was an
  answer_text_mismatch although its text is the context's."""
  context = "The lighthouse keeper painted the tower white in\u00a01904, said Mr\u3000Bell."
  vocab = wordpiece.read_vocab(testutil.vocab_file())
  for answer, tokens in [("in\u00a01904", ["in", "1904"]), ("Mr\u3000Bell", ["mr", "bell"])]:
    data = squad({"context": context, "qas": [qa("q", "Q?", [(answer, context.index(answer))])]})
    meta = run(tmp_path, "train", write(tmp_path, "train.json", data))
    assert meta["splits"]["train"]["skipped"] == {} and meta["splits"]["train"]["num_examples"] == 1
    ids, first, last = _window_of_answer(meta, tmp_path / "records", SEQ)
    # [CLS] q ? [SEP]: 4 tokens before the context, where "in" is token 7 and "mr" token 11.
    assert (first, last) == {"in": (11, 12), "mr": (15, 16)}[tokens[0]]
    assert [vocab[i] for i in ids[first:last + 1]] == tokens


def test_answers_no_window_holds_are_skipped_counted_and_logged(tmp_path, caplog):
  """Windows of seq 32 - 3 - 2 question tokens = 27 context tokens, stepping by 27 (stride 40):
  an answer across token 27 lies in no window, and one of 30 tokens fits none."""
  words = " ".join(str(i) for i in range(100, 160))  # one token each
  starts = {w: words.index(w) for w in ("125", "105", "101", "140")}
  data = squad({
      "context": words,
      "qas": [
          qa("across", "Q?", [("125 126 127 128", starts["125"])]),  # tokens 25..28
          qa("inside", "Q?", [("105 106", starts["105"])]),  # tokens 5..6
          qa("too_long", "Q?", [(" ".join(str(i) for i in range(101, 131)), starts["101"])]),
          qa("second_window", "Q?", [("140", starts["140"])]),  # token 40
      ]
  })
  with caplog.at_level(std_logging.INFO, logger="absl"):
    meta = run(tmp_path, "train", write(tmp_path, "train.json", data), seq=32, stride=40, query=8)
  info = meta["splits"]["train"]
  assert info["skipped"] == {"answer_in_no_window": 1, "answer_longer_than_window": 1}
  assert info["num_examples"] == 2 and info["num_features"] == 2 * 3  # 60 tokens, 3 windows each
  lines = [r.getMessage() for r in caplog.records]
  assert ("--doc_stride=40: a window holds max_seq_length 32 - 3 - its question's tokens (up to 8) "
          "= 21 or more context tokens, and one holding fewer than 40 steps by its own length "
          "instead: such windows do not overlap, and an answer across their boundary lies in no "
          "window") in lines
  # The answers that fit a window are 4, 2 and 1 tokens long: strides up to 27 - 4 + 1 keep all.
  assert ("train: 1 of 4 answers lie whole in no window (across window boundaries; skipped); "
          "--doc_stride=24 or less puts every answer that fits a window whole in one") in lines
  assert (f"train: the first question of {tmp_path / 'train.json'} skipped for each reason: "
          f"answer_in_no_window: id across; answer_longer_than_window: id too_long") in lines
  with caplog.at_level(std_logging.INFO, logger="absl"):
    caplog.clear()
    meta = run(tmp_path, "train", write(tmp_path, "train.json", data), seq=32, stride=20, query=8)
  assert meta["splits"]["train"]["skipped"] == {"answer_longer_than_window": 1}
  assert not [r for r in caplog.records if "doc_stride" in r.getMessage()]


# ------------------------------------------------------------------------------------------------
# Odd but valid text: exactly the reference's features, answers are exact substrings.

ODD_CONTEXT = ("Tōkyō (東京) hosts the tower 🗼 — a cafe\u0301 serves crème brûlée.\r\n"
               "Zero\u200bwidth, soft\u00adhyphen, NUL\x00joined, bell\x07rings, nbsp\u00a0here, "
               "narrow\u202fnbsp and ideographic\u3000space.\tTabs and \u2028line separators. "
               "Straße ﬁne ΟΔΥΣΣΕΥΣ Ǆemal İstanbul ﬀ 2\u20443 x\u0301\u0302y \ufeffbom\ufffdchar "
               "lone\ud800surrogate 한국어 ไทย.")


def odd_squad():
  answers = [
      "東京", "🗼", "crème brûlée", "Zero\u200bwidth", "NUL\x00joined", "narrow\u202fnbsp",
      "Straße", "ﬁne", "ΟΔΥΣΣΕΥΣ", "İstanbul", "한국어", "lone\ud800surrogate", "2\u20443"
  ]  # yapf: disable (wide characters)
  qas = [
      qa(f"odd{i}", f"Where is answer {i}?", [(a, ODD_CONTEXT.index(a))])
      for i, a in enumerate(answers)
  ]
  qas.append(
      qa("cjk_question", "東京 tower 🗼 ΣΟΦΙΑ\u00a0crème?",
         [("tower", ODD_CONTEXT.index("tower"))]))  # yapf: disable (wide characters)
  # ASCII words longer than the reference's 400-character limit become [UNK]; shorter ones split.
  long_words = "x" * 401 + " and " + "y" * 300 + "-" + "z" * 300 + " or " + "é" * 401
  return squad({
      "context": ODD_CONTEXT,
      "qas": qas
  }, {
      "context": "a\r\nb  c\u00a0d",
      "qas": [qa("crlf", "Which letter?", [("b", 3)])]
  }, {
      "context": long_words,
      "qas": [qa("long", "Which word?", [("and", 402)])]
  }), answers


@pytest.mark.parametrize("split", ["train", "eval"])
def test_odd_characters_give_the_reference_features(tmp_path, split):
  data, _ = odd_squad()
  path = write(tmp_path, "odd.json", json.dumps(data))  # ensure_ascii: lone surrogate survives
  ours = compare_with_reference.run_ours(path, split,
                                         testutil.vocab_file(), True, SEQ, STRIDE, QUERY, False,
                                         str(tmp_path / "records"), 1, in_process=True)
  reference = reference_features.run_reference(path, split == "train", testutil.vocab_file(), True,
                                               SEQ, STRIDE, QUERY)
  vocab = wordpiece.read_vocab(testutil.vocab_file())
  result = compare_with_reference.compare(ours, reference, split == "train", vocab)
  assert result.questions_both == 16 and result.features_ours == result.features_reference > 15
  assert result.different == 0 and result.unmatched == 0, "\n".join(result.examples)


def test_odd_characters_offsets_cut_exact_answers(tmp_path):
  data, answers = odd_squad()
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  (tokens,) = tokenizer.tokenize([ODD_CONTEXT])
  # Offsets are in order (several pieces may come from one character: NFD splits a Hangul syllable
  # into three jamo tokens) and whitespace is never inside a token.
  assert (np.diff(tokens.start_chars) >= 0).all() and (tokens.end_chars > tokens.start_chars).all()
  hangul = [
      tokenizer.vocab[i] for i, s in zip(tokens.ids, tokens.start_chars) if ODD_CONTEXT[s] == "한"
  ]
  assert hangul == ["ᄒ", "##ᅡ", "##ᆫ"]
  for s, e in zip(tokens.start_chars, tokens.end_chars):
    assert not any(c in " \t\r\n\u202f" for c in ODD_CONTEXT[s:e])
  # Each answer is exactly covered by whole tokens (first token starts at it, last ends at its end).
  for answer in answers:
    start = ODD_CONTEXT.index(answer)
    end = start + len(answer)
    first = np.flatnonzero(tokens.start_chars >= start)[0]
    last = np.flatnonzero(tokens.end_chars <= end)[-1]
    assert tokens.start_chars[first] == start and tokens.end_chars[last] == end, answer


def test_200000_character_context(tmp_path):
  rng = np.random.default_rng(0)
  words = [f"w{n}" for n in rng.integers(0, 5000, size=40000)]
  context = " ".join(words)
  context = context[:200000 - 20] + " the answer is here."
  assert len(context) == 200000
  data = squad({
      "context": context,
      "qas": [
          qa("far", "Where is the answer?", [("answer is here", context.index("answer is here"))]),
          qa("near", "What is first?", [(words[0], 0)])
      ]
  })
  path = write(tmp_path, "long.json", data)
  meta = run(tmp_path, "train", path, seq=384, stride=128, query=64)
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  (tokens,) = tokenizer.tokenize([context])
  query_lengths = [len(t) for t in tokenizer.tokenize(["Where is the answer?", "What is first?"])]
  expected = sum(len(features_lib.doc_spans(len(tokens), 384 - q - 3, 128)) for q in query_lengths)
  assert meta["splits"]["train"]["num_features"] == expected > 500
  arrays = records.read_records(records.shard_paths(str(tmp_path / "records"), meta, "train"),
                                "train", 384)
  positive = np.flatnonzero(arrays["start_positions"] > 0)
  vocab = tokenizer.vocab
  answers = {
      " ".join(
          vocab[i]
          for i in arrays["input_ids"][f][arrays["start_positions"][f]:arrays["end_positions"][f] +
                                          1]) for f in positive
  }
  assert answers == {
      "answer is here", " ".join(tokenizer.ids_to_tokens(tokenizer.tokenize([words[0]])[0].ids))
  }
  # Eval: every context token is max-context in exactly one window.
  meta = run(tmp_path, "eval", path, seq=384, stride=128, query=64)
  arrays = records.read_records(records.shard_paths(str(tmp_path / "records"), meta, "eval"),
                                "eval", 384)
  first = arrays["example_index"] == 0
  assert arrays["token_is_max_context"][first].sum() == len(tokens)


# ------------------------------------------------------------------------------------------------
# Atomic and deterministic output.


def shard_digests(directory, meta):
  return {
      name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
      for info in meta["splits"].values() for name in info["shards"]
  }


def small_slice(tmp_path, n=60):
  return testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "dev.json", n)


def test_failure_midway_leaves_the_previous_output(tmp_path, monkeypatch):
  path = small_slice(tmp_path)
  out = tmp_path / "records"
  meta = run(tmp_path, "eval", path)
  before = shard_digests(out, meta)
  meta_bytes = (out / records.META_FILE).read_bytes()
  calls = []

  def failing(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
      raise OSError("disk full (simulated)")
    return original(*args, **kwargs)

  original = record_serialization.serialize_features
  monkeypatch.setattr(record_serialization, "serialize_features", failing)
  with pytest.raises(OSError, match="simulated"):
    run(tmp_path, "eval", path, shards=2)
  assert (out / records.META_FILE).read_bytes() == meta_bytes
  assert shard_digests(out, meta) == before
  assert sorted(os.listdir(out)) == sorted([records.META_FILE] + list(before))  # no temp files


@pytest.mark.slow
def test_killed_job_leaves_previous_output_or_nothing(tmp_path):
  out = tmp_path / "records"
  path = testutil.write_squad_slice(testutil.DEV_FILE, tmp_path / "dev.json", 3000)
  meta = run(tmp_path, "eval", small_slice(tmp_path, 30))
  before = shard_digests(out, meta)
  meta_bytes = (out / records.META_FILE).read_bytes()
  proc = subprocess.Popen([
      sys.executable, "preprocess/make_records.py", f"--predict_file={path}",
      f"--vocab_file={testutil.vocab_file()}", f"--output_dir={out}", "--num_workers=2",
      f"--max_seq_length={SEQ}", f"--doc_stride={STRIDE}", f"--max_query_length={QUERY}"
  ], cwd=testutil.REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  deadline = time.time() + 120
  while time.time() < deadline and not any(".tmp-" in n for n in os.listdir(out)):
    time.sleep(0.01)
  os.killpg(proc.pid, signal.SIGKILL)  # the job and its workers, mid-write
  proc.wait()
  names = os.listdir(out)
  assert any(".tmp-" in n for n in names)  # it was killed while writing
  if (out / records.META_FILE).exists():  # either the previous complete output ...
    assert (out / records.META_FILE).read_bytes() == meta_bytes
    assert shard_digests(out, meta) == before
  # ... or no meta.json: readers refuse the directory.
  else:
    with pytest.raises(FileNotFoundError, match="run `squad-qa-records --output_dir="):
      records.read_meta(str(out))
  # The next run removes the dead job's temporary files.
  run(tmp_path, "eval", small_slice(tmp_path, 30))
  assert not [n for n in os.listdir(out) if ".tmp-" in n]


@pytest.mark.slow
def test_same_inputs_give_byte_identical_shards_whatever_the_workers(tmp_path):
  train = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 200)
  dev = small_slice(tmp_path, 150)
  common = [
      f"--vocab_file={testutil.vocab_file()}", f"--max_seq_length={SEQ}", f"--doc_stride={STRIDE}",
      f"--max_query_length={QUERY}", "--num_shards=3", f"--train_file={train}",
      f"--predict_file={dev}"
  ]
  testutil.run_cli("preprocess/make_records.py", *common, "--num_workers=2",
                   f"--output_dir={tmp_path / 'two'}")
  make_records({"train": train, "eval": dev}, str(tmp_path / "one"), shards=3)
  make_records({"train": train, "eval": dev}, str(tmp_path / "again"), shards=3)
  meta = records.read_meta(str(tmp_path / "one"))
  one = shard_digests(tmp_path / "one", meta)
  assert one == shard_digests(tmp_path / "two", meta) == shard_digests(tmp_path / "again", meta)
  assert len(one) == 6
  # unique_ids run on across shards written by different workers.
  arrays = records.read_records(records.shard_paths(str(tmp_path / "two"), meta, "train"), "train",
                                SEQ)
  assert arrays["unique_ids"].tolist() == list(
      range(1000000000, 1000000000 + len(arrays["unique_ids"])))


def test_answer_check_keeps_and_skips_the_same_questions_as_the_reference(tmp_path):
  # Answers starting or ending on whitespace, U+202F, tabs and repeated spaces, inside words, and
  # mismatches: the reader must keep exactly the questions tfm's read_squad_examples keeps.
  context = "  The\tbaker\u202fopened  her shop (early), at 6am.\r\nThen rain."
  right = [
      "The", "\tbaker", "baker\u202fopened", "  her", "her shop", "shop (early)", "early", "arly",
      "6am.", "am.\r\nThen", "Then", "rain.", "  The", "(early), at"
  ]
  cases = [(text, context.index(text)) for text in right]
  # In range but pointing elsewhere: one character late, at the previous word, on whitespace.
  cases += [("shop", context.index("shop") + 1), ("baker", 2), ("her", context.index("her") - 1),
            (" rain", context.index("rain") - 1), ("n.", len(context) - 2)]
  data = squad({
      "context": context,
      "qas": [qa(f"c{i}", "Q?", [(text, start)]) for i, (text, start) in enumerate(cases)]
  })
  path = write(tmp_path, "edges.json", data)
  ours = [e.qas_id for e in squad_reader.read_squad(path, is_training=True).examples]
  from official.nlp.data import squad_lib  # pylint: disable=g-import-not-at-top
  reference = [e.qas_id for e in squad_lib.read_squad_examples(path, True, False)]
  assert ours == reference
  assert 0 < len(ours) < len(cases)  # both outcomes occur


def test_records_of_an_older_format_are_refused_with_one_line(tmp_path):
  (tmp_path / records.META_FILE).write_text(json.dumps({"format_version": 1, "splits": {}}))
  with pytest.raises(FileNotFoundError) as error:
    records.read_meta(str(tmp_path))
  assert "records of format 1 (this version reads 2); rerun `squad-qa-records --output_dir=" in (
      str(error.value))


# ------------------------------------------------------------------------------------------------
# Published files typed unlike the official ones: normalized when unambiguous, and counted.

CAFE_NFD = "The cafe\u0301 by the harbour opened in 1999 and nobody closed it."
ZOE_NFC = "Zo\u00eb ran the harbour cafe for forty years."
PUBLISHED = squad(
    {
        "context": CAFE_NFD,
        "qas": [
            # integer id; answer text in NFC where the context has NFD
            {
                "id": 101,
                "question": "What opened in 1999?",
                "answers": [{
                    "text": "caf\u00e9",
                    "answer_start": 4
                }]
            },
            # integer id; answer_start as a decimal string
            {
                "id": 102,
                "question": "When did the cafe open?",
                "answers": [{
                    "text": "1999",
                    "answer_start": str(CAFE_NFD.index("1999"))
                }]
            }
        ]
    },
    {
        "context": ZOE_NFC,
        "qas": [
            # answer text in NFD where the context has NFC
            {
                "id": "103",
                "question": "Who ran the cafe?",
                "answers": [{
                    "text": "Zoe\u0308",
                    "answer_start": 0
                }]
            }
        ]
    })


def test_published_squad_files_are_normalized_and_counted(tmp_path):
  path = write(tmp_path, "published.json", PUBLISHED)
  read = squad_reader.read_squad(path, is_training=True)
  assert [(e.qas_id, e.answer_text, e.answer_start) for e in read.examples
         ] == [("101", "cafe\u0301", 4), ("102", "1999", 35), ("103", "Zo\u00eb", 0)]
  normalized = {
      "id_number_as_string": 2,
      "answer_start_string_as_int": 1,
      "answer_text_in_context_form": 2
  }
  assert read.notes == normalized and read.skipped == {}
  meta = run(tmp_path, "train", path, shards=1)
  assert meta["splits"]["train"]["notes"] == normalized
  assert meta["splits"]["train"]["skipped"] == {}
  arrays = records.read_records(records.shard_paths(str(tmp_path / "records"), meta, "train"),
                                "train", SEQ)
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  for row, answer in enumerate(["caf\u00e9", "1999", "Zo\u00eb"]):  # the answers' own tokens
    start, end = arrays["start_positions"][row], arrays["end_positions"][row]
    assert (arrays["input_ids"][row][start:end + 1].tolist() == tokenizer.tokenize(
        [answer])[0].ids.tolist())
  # The scorer sees the same ids and answer texts as the reader.
  data = squad_reader.load_json(path)
  assert [qa["id"] for p in data[0]["paragraphs"] for qa in p["qas"]] == ["101", "102", "103"]
  assert data[0]["paragraphs"][0]["qas"][0]["answers"][0]["text"] == "cafe\u0301"


def hugging_face_rows(dataset):
  """A SQuAD dataset as Hugging Face `datasets` rows (what run_qa.py reads): one per question."""
  return [{
      "id": qa["id"],
      "title": article["title"],
      "context": paragraph["context"],
      "question": qa["question"],
      "answers": {
          "text": [a["text"] for a in qa["answers"]],
          "answer_start": [a["answer_start"] for a in qa["answers"]]
      }
  } for article in dataset["data"] for paragraph in article["paragraphs"]
          for qa in paragraph["qas"]]


@pytest.mark.parametrize("layout", ["run_qa", "list", "json_lines"])
def test_hugging_face_rows_make_the_records_of_their_squad_file(tmp_path, layout):
  """Real SQuAD 2.0 dev questions over 3 articles (answerable and not) as Hugging Face rows:
  run_qa.py's {"data": [rows]}, a JSON list, or JSON Lines (`datasets`' to_json) make the same
  records as the SQuAD file, noted in meta.json; the scorer reads the same questions."""
  squad_file = testutil.write_squad_articles(testutil.SQUAD_DIR / "dev-v2.0.json",
                                             tmp_path / "squad.json", [0, 1, 2])
  dataset = json.loads(open(squad_file, encoding="utf-8").read())
  dataset["data"] = [dict(a, paragraphs=a["paragraphs"][:3]) for a in dataset["data"]]
  squad_file = write(tmp_path, "squad3.json", dataset)
  rows = hugging_face_rows(dataset)
  if layout == "json_lines":
    rows_file = write_json_lines(tmp_path, "rows.jsonl", rows)
  else:
    rows_file = write(tmp_path, "rows.json", {"data": rows} if layout == "run_qa" else rows)
  expected = make_records({"eval": squad_file}, str(tmp_path / "from_squad"), shards=1, v2=True)
  got = make_records({"eval": rows_file}, str(tmp_path / "from_rows"), shards=1, v2=True)
  unanswerable = sum(1 for r in rows if not r["answers"]["text"])
  assert 0 < unanswerable < len(rows) and len(rows) > 20
  assert got["splits"]["eval"]["notes"] == dict(expected["splits"]["eval"]["notes"],
                                                hugging_face_rows_grouped=len(rows))
  for name in ("num_examples", "num_features"):
    assert got["splits"]["eval"][name] == expected["splits"]["eval"][name]
  shards = [[open(path, "rb").read() for path in records.shard_paths(str(folder), meta, "eval")]
            for folder, meta in ((tmp_path / "from_squad", expected), (tmp_path / "from_rows", got))
           ]
  assert shards[0] == shards[1] and len(shards[0]) == 1

  def questions(path):
    return [(qa["id"], qa["question"], qa["answers"]) for article in squad_reader.load_json(path)
            for paragraph in article["paragraphs"] for qa in paragraph["qas"]]

  assert questions(rows_file) == questions(squad_file)


def test_a_row_unlike_the_first_is_named(tmp_path):
  rows = [{
      "id": "a",
      "context": "Paris is big.",
      "question": "What?",
      "answers": {
          "text": ["Paris"],
          "answer_start": [0]
      }
  }, {
      "id": "b",
      "context": "Paris is big.",
      "question": "Who?",
      "answers": {
          "text": ["Paris"],
          "answer_start": []
      }
  }]
  path = write(tmp_path, "rows.json", {"data": rows})
  with pytest.raises(squad_reader.SquadInputError, match=r"rows.json: row 1 is not a Hugging Face "
                     r"SQuAD row like the first"):
    squad_reader.read_squad(path, is_training=True)
  # Rows without answers (no "answers", or empty lists) are SQuAD 2.0's unanswerable questions.
  rows[1] = {"id": "b", "context": "Paris is big.", "question": "Who?", "answers": {"text": []}}
  rows.append({"id": "c", "context": "Rome is old.", "question": "Where?"})
  path = write(tmp_path, "rows.json", rows)
  read = squad_reader.read_squad(path, is_training=True, version_2_with_negative=True)
  assert [(e.qas_id, e.is_impossible, e.answer_text) for e in read.examples] == [("a", False,
                                                                                  "Paris"),
                                                                                 ("b", True, ""),
                                                                                 ("c", True, "")]
  assert read.contexts == ["Paris is big.", "Rome is old."]
  assert read.notes == {"hugging_face_rows_grouped": 3, "unanswerable": 2}


def test_numeric_ids_are_strings_in_predictions_and_scores(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import evaluation  # pylint: disable=g-import-not-at-top
  from squad_qa.postprocess import span_decoding  # pylint: disable=g-import-not-at-top
  path = write(tmp_path, "published.json", PUBLISHED)
  out = str(tmp_path / "records")
  meta = make_records({"eval": path}, out, shards=1)
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  year = int(tokenizer.tokenize(["1999"])[0].ids[0])

  def model(inputs, training=False):
    """Start and end logit 5 on "1999", 0 elsewhere."""
    del training
    logits = tf.cast(inputs["input_word_ids"] == year, tf.float32) * 5.0
    return logits, logits

  model_dir = tmp_path / "model"
  model_dir.mkdir()
  results = evaluation.evaluate(
      model, out, meta, path, str(model_dir), 8,
      span_decoding.DecodingSettings(n_best_size=20, max_answer_length=30))
  predictions = json.loads((model_dir / "predictions.json").read_text())
  assert list(predictions) == ["101", "102", "103"]
  assert predictions["101"] == predictions["102"] == "1999"
  right = 1 + (predictions["103"] == "Zo\u00eb")  # 102, and 103 if the tie picks its first word
  assert results["num_questions"] == 3
  assert results["exact_match"] == pytest.approx(100.0 * right / 3)


def test_published_file_eval_features_equal_the_reference(tmp_path):
  """The reference featurizes integer-id files too
  (its ids stay numbers; paired here as strings)."""
  path = write(tmp_path, "published.json", PUBLISHED)
  ours = compare_with_reference.run_ours(path, "eval",
                                         testutil.vocab_file(), True, SEQ, STRIDE, QUERY, False,
                                         str(tmp_path / "records"), 1, in_process=True)
  reference = reference_features.run_reference(path, False, testutil.vocab_file(), True, SEQ,
                                               STRIDE, QUERY)
  result = compare_with_reference.compare(ours, reference, False,
                                          wordpiece.read_vocab(testutil.vocab_file()))
  assert ours.qas_ids == reference.qas_ids == ["101", "102", "103"]
  assert result.questions_both == 3 and result.identical == result.features_reference == 3
