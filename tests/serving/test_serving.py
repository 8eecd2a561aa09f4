"""Raw-text serving (serving/, export.py's serve_text): windows identical to preprocess/features.py,
answers identical to postprocess/span_decoding.py, saved_model_cli, a fresh process, odd inputs."""

import json
import os
import re
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from squad_qa import errors
from squad_qa.model import span_model
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features as features_lib
from squad_qa.preprocess import squad_reader
from squad_qa.serving import answers
from squad_qa.serving import export_model
from squad_qa.serving import module as serving_module
from squad_qa.serving import saved_model_qa
from squad_qa.serving import windows as windows_lib
from tests import testutil
from tests.serving import taught_model

SEQ, STRIDE, QUERY = taught_model.SEQ, taught_model.STRIDE, taught_model.QUERY
FEATURIZATION = features_lib.Featurization(max_seq_length=SEQ, doc_stride=STRIDE,
                                           max_query_length=QUERY)
NUM_DEV = 48
TAUGHT = taught_model.TAUGHT

# Rows no SQuAD file has; each must get an answer (possibly empty) with a defined score.
COMBINING = "Cafe\u0301 owners in Zu\u0308rich serve cre\u0300me bru\u0302le\u0301e daily."
ODD_ROWS = [
    ("", "The harbour bridge was painted red in 1932 by a crew of forty workers."),
    ("When was the bridge painted?", ""),
    ("When was the bridge painted?", " \t\n\u3000 "),
    ("Where is the tower?", ("The clock tower stands near the old harbour. " * 2300)[:100000]),
    ("東京タワーはいつ完成しましたか？",
     "東京タワーは1958年に完成した電波塔で、高さは333メートルです。"),
    ("Which emoji follows the ferry?", "The ferry 🚢 leaves at noon 🕛 and returns by dusk 🌆."),
    ("Who serves crème brûlée?", COMBINING),
]  # yapf: disable (wide characters)


def _dev_slice(num_questions):
  squad = squad_reader.read_squad(str(testutil.DEV_FILE), is_training=False,
                                  max_examples=num_questions)
  return ([e.question_text for e in squad.examples],
          [squad.contexts[e.paragraph_index] for e in squad.examples])


# ---- windowing: the contract with preprocess/features.py --------------------------------------


def _synthetic_batch(rng, num_questions, max_query_tokens, max_context_tokens):
  """Random token ids with made-up offsets (token i spans [3i, 3i + 2))."""
  queries = [
      rng.randint(1000, 2000, size=rng.randint(0, max_query_tokens + 1))
      for _ in range(num_questions)
  ]
  contexts = [
      rng.randint(1000, 2000, size=rng.randint(0, max_context_tokens + 1))
      for _ in range(num_questions)
  ]
  queries[1], contexts[2] = queries[1][:0], contexts[2][:0]  # always an empty question and context
  return queries, contexts


def _synthetic_windows(queries, contexts, max_seq_length, doc_stride, max_query_length):
  """Graph windows of synthetic token ids; token i of a context spans characters [3i, 3i + 2)."""
  offsets = [np.arange(len(c), dtype=np.int64) * 3 for c in contexts]
  ragged = lambda rows, dtype: tf.ragged.constant(rows, dtype, row_splits_dtype=tf.int64)
  windows = windows_lib.make_windows(
      ragged([q.tolist() for q in queries], tf.int32),
      ragged([c.tolist() for c in contexts], tf.int32),
      ragged([o.tolist() for o in offsets], tf.int64),
      ragged([(o + 2).tolist() for o in offsets], tf.int64), 101, 102,
      features_lib.Featurization(max_seq_length=max_seq_length, doc_stride=doc_stride,
                                 max_query_length=max_query_length))
  return offsets, windows


@pytest.mark.parametrize("max_seq_length,doc_stride,max_query_length", [(16, 4, 5), (16, 30, 5),
                                                                        (12, 1, 3), (24, 7, 8),
                                                                        (40, 128, 10)])
def test_windows_equal_make_features_for_every_shape(max_seq_length, doc_stride, max_query_length):
  rng = np.random.RandomState(max_seq_length * 1000 + doc_stride)
  queries, contexts = _synthetic_batch(rng, 40, max_query_length + 3, 70)
  offsets, windows = _synthetic_windows(queries, contexts, max_seq_length, doc_stride,
                                        max_query_length)
  expected = []
  for i, (query, context, offset) in enumerate(zip(queries, contexts, offsets)):
    tokens = features_lib.TokenizedText(context, offset, offset + 2)
    expected += [(i, f) for f in features_lib.make_features(
        i, 0, query, tokens, 101, 102,
        features_lib.Featurization(max_seq_length=max_seq_length, doc_stride=doc_stride,
                                   max_query_length=max_query_length))]
  assert windows.example_index.numpy().tolist() == [i for i, _ in expected]
  assert sum(1 for c in contexts if len(c) == 0) > 0  # empty contexts get no window
  assert max(np.bincount(windows.example_index.numpy())) >= 3  # several windows per question
  _assert_windows_equal(windows, [f for _, f in expected])


def _assert_windows_equal(windows, features):
  """`windows` (serving) hold exactly `features` (preprocess) in order, cut to the longest
  window."""
  assert windows.input_word_ids.shape[0] == len(features)
  width = max([sum(f.input_mask) for f in features], default=1)
  assert windows.input_word_ids.shape[1] == width
  cut = lambda key: [getattr(f, key)[:width] for f in features]
  np.testing.assert_array_equal(windows.input_word_ids.numpy(), cut("input_ids"))
  np.testing.assert_array_equal(windows.input_mask.numpy(), cut("input_mask"))
  np.testing.assert_array_equal(windows.input_type_ids.numpy(), cut("segment_ids"))
  np.testing.assert_array_equal(windows.token_is_max_context.numpy().astype(int),
                                cut("token_is_max_context"))
  np.testing.assert_array_equal(windows.token_start.numpy(), cut("token_start_char"))
  np.testing.assert_array_equal(windows.token_end.numpy(), cut("token_end_char"))
  for f in features:  # what was cut off is padding
    assert not any(f.input_mask[width:]) and not any(f.input_ids[width:])


def test_windows_equal_make_features_on_real_dev_and_odd_rows(served):
  questions, contexts = _dev_slice(NUM_DEV)
  odd_questions, odd_contexts = zip(*[row for row in ODD_ROWS if len(row[1]) < 1000])
  questions, contexts = questions + list(odd_questions), contexts + list(odd_contexts)
  windows = served["module"].make_windows(tf.constant(questions), tf.constant(contexts))
  tokenizer = served["tokenizer"]
  expected = []
  for question, context in zip(questions, contexts):
    query, passage = tokenizer.tokenize([question, context])
    # Serving's rule (serve_text and SavedModelQA): a question without a token gets no window.
    expected.append(
        features_lib.make_features(0, 0, query.ids, passage, tokenizer.cls_id, tokenizer.
                                   sep_id, FEATURIZATION) if len(query) else [])
  assert sum(not tokenizer.tokenize([q])[0].ids.size for q in questions) >= 1  # such a row is here
  example_index = windows.example_index.numpy()
  assert np.bincount(example_index, minlength=len(questions)).tolist() == [len(f) for f in expected]
  assert sum(len(f) > 1 for f in expected) >= 10  # real multi-window questions
  _assert_windows_equal(windows, [f for fs in expected for f in fs])


@pytest.mark.parametrize("window_batch_size", [5, 1000])
def test_window_logits_in_chunks_equal_one_padded_call(served, window_batch_size):
  """Chunks of similar length, each cut to its longest window, give the padded model's logits."""
  qa_config = dict(served["qa_config"], window_batch_size=window_batch_size)
  module = serving_module.QAServingModule(served["model"], testutil.vocab_file(), qa_config)
  questions, contexts = _dev_slice(NUM_DEV)
  windows = module.make_windows(tf.constant(questions), tf.constant(contexts))
  start_logits, end_logits = module.window_logits(windows)
  pad = lambda x: tf.pad(x, [[0, 0], [0, SEQ - x.shape[1]]])  # as make_records.py pads
  expected = served["model"]({
      span_model.INPUT_WORD_IDS: pad(windows.input_word_ids),
      span_model.INPUT_MASK: pad(windows.input_mask),
      span_model.INPUT_TYPE_IDS: pad(windows.input_type_ids)
  }, training=False)
  mask = windows.input_mask.numpy().astype(bool)
  assert windows.input_word_ids.shape[0] > 2 * 5 and not mask.all()  # several chunks, some padding
  for got, want in zip((start_logits, end_logits), expected):
    np.testing.assert_allclose(got.numpy()[mask], want.numpy()[:, :mask.shape[1]][mask], atol=1e-5)


# ---- span decoding: the contract with postprocess/span_decoding.py -------------------------------


def _python_answer(features, start_logits, end_logits, n_best_size, max_answer_length,
                   version_2_with_negative=False, null_score_diff_threshold=0.0):
  """span_decoding.decode_answer, plus run_squad.py's null-answer rule for SQuAD 2.0 (a null
  answer keeps the best span's score)."""
  windows = [
      span_decoding.real_window(s, e, np.array(f.token_start_char), np.array(f.token_end_char),
                                np.array(f.token_is_max_context), f.input_mask)
      for f, s, e in zip(features, start_logits, end_logits)
  ]
  best = span_decoding.decode_answer(windows, "x" * 1000, n_best_size, max_answer_length)
  if version_2_with_negative and windows:
    null = min(float(w.start_logits[0]) + float(w.end_logits[0]) for w in windows)
    if null - best.score > null_score_diff_threshold:
      return span_decoding.Answer("", -1, -1, best.score)
  if best.score == float("-inf"):
    return span_decoding.Answer("", -1, -1, best.score)
  return best


@pytest.mark.parametrize("integer_logits", [True, False])
@pytest.mark.parametrize("n_best_size,max_answer_length,version_2,threshold", [(20, 30, False, 0.0),
                                                                               (3, 2, False, 0.0),
                                                                               (20, 30, True, 0.0),
                                                                               (5, 4, True, -2.5),
                                                                               (20, 30, True, 3.0)])
def test_best_spans_equal_decode_answer(integer_logits, n_best_size, max_answer_length, version_2,
                                        threshold):
  rng = np.random.RandomState(n_best_size + 7 * max_answer_length + int(integer_logits))
  seq, stride, max_query = 24, 5, 6
  queries, contexts = _synthetic_batch(rng, 30, 8, 60)
  offsets, windows = _synthetic_windows(queries, contexts, seq, stride, max_query)
  num_windows, width = windows.input_word_ids.shape
  # Small integers make many exact ties, which must fall the same way as in Python.
  if integer_logits:
    start_logits = rng.randint(-3, 4, size=(num_windows, width)).astype(np.float32)
    end_logits = rng.randint(-3, 4, size=(num_windows, width)).astype(np.float32)
  else:
    start_logits = rng.normal(size=(num_windows, width)).astype(np.float32)
    end_logits = rng.normal(size=(num_windows, width)).astype(np.float32)
  spans = answers.best_spans(tf.constant(start_logits), tf.constant(end_logits), windows,
                             tf.constant(len(queries)), n_best_size, max_answer_length, version_2,
                             threshold)
  example_index = windows.example_index.numpy()
  kinds = set()
  for i, (query, context, offset) in enumerate(zip(queries, contexts, offsets)):
    features = features_lib.make_features(
        i, 0, query, features_lib.TokenizedText(context, offset, offset + 2), 101, 102,
        features_lib.Featurization(max_seq_length=seq, doc_stride=stride,
                                   max_query_length=max_query))
    rows = example_index == i
    expected = _python_answer(features, start_logits[rows], end_logits[rows], n_best_size,
                              max_answer_length, version_2, threshold)
    got = (int(spans.start[i]), int(spans.end[i]), float(spans.score[i]))
    assert got == (expected.start_char, expected.end_char, expected.score), (i, len(features))
    null = min((float(s[0]) + float(e[0]) for s, e in zip(start_logits[rows], end_logits[rows])),
               default=float("inf"))
    assert float(spans.null_score[i]) == null, i  # SQuAD 1.1 too
    kinds.add("none" if not features else "null" if expected.start_char < 0 else "span")
  assert "span" in kinds and "none" in kinds


def test_char_spans_are_cut_from_utf8():
  text = tf.constant(["a\u00e9b 🚢 c\u0301d", "plain", "東京タワー", ""])
  answer, start, end = answers.char_span_to_text(text, tf.constant([4, 1, 2, -1], tf.int64),
                                                 tf.constant([8, 3, 5, -1], tf.int64))
  assert [a.decode() for a in answer.numpy()] == ["🚢 c\u0301", "la", "タワー", ""]
  assert start.numpy().tolist() == [4, 1, 2, 0] and end.numpy().tolist() == [8, 3, 5, 0]


# Words where tensorflow-text's own normalizer and the reference's BasicTokenizer disagree, and
# other characters BasicTokenizer deletes, splits at or keeps.
TRICKY_TEXTS = [
    "Die Straße ist ﬁne.", "a\x00b c\ufffdd e\u200bf", "Zu\u0308rich cafe\u0301 na\u00efve",
    "x\u00a0y z\u202fw \u2028v\x0bu\x0ct \x85s", "東京タワーは1958年に完成", "🚢 ⛴ 🕛…“ok”—fine",
    "İstanbul", "word" * 120 + " ok", "é" * 150 + " ok", "", " \t\n\u3000 ",
    # CJK compatibility ideographs, which NFD maps to unified ones (U+F963 -> U+5317)
    "\uf963京 (\uf9c4) \ufa0a\U0002f929x"
]  # yapf: disable (wide characters)


def test_graph_tokenizer_gives_the_reference_tokens(served):
  questions, contexts = _dev_slice(NUM_DEV)
  texts = TRICKY_TEXTS + questions + sorted(set(contexts))
  ids, starts, ends = served["module"].tokenizer.tokenize_with_offsets(tf.constant(texts))
  for i, expected in enumerate(served["tokenizer"].tokenize(texts)):
    assert ids[i].numpy().tolist() == expected.ids.tolist(), texts[i]
    assert starts[i].numpy().tolist() == expected.start_chars.tolist(), texts[i]
    assert ends[i].numpy().tolist() == expected.end_chars.tolist(), texts[i]


# Answers whose first or last word holds characters the normalizer removes: the answer is the text
# as written, combining marks (stripped after NFD) included, zero-width and control characters at
# its ends left out (the official scorer counts "cafe\u200b" against "cafe" as wrong).
KEEP_EVERY_CHARACTER = [
    ("Then the cafe\u0301 opened.", "cafe\u0301"),  # NFD, mark at the end of the word
    ("Then the caf\u00e9 opened.", "caf\u00e9"),  # NFC
    ("Then the \u0301cafe opened.", "\u0301cafe"),  # a lone mark at the start of the word
    ("Then old Zu\u0308rich fell.", "Zu\u0308rich"),  # NFD, in the middle
    ("Then old Z\u00fcrich fell.", "Z\u00fcrich"),  # NFC, in the middle
    ("Then crème bru\u0302le\u0301e was served.", "crème bru\u0302le\u0301e"),  # two words
    ("Then a \u200bcafe\u200b opened.", "cafe"),  # zero-width space at both ends
    ("Then a cafe\u00ad\u0007, it said.", "cafe"),  # soft hyphen + bell before ","
    ("Then a ca\u00adfe opened.", "ca\u00adfe"),  # a soft hyphen inside stays
    ("Then a \u200bcafe\u0301\u200b opened.", "cafe\u0301"),  # the mark kept, U+200B not
]


def _pointing_model(tokenizer, answer):
  """Start logit 5 on the answer's first token id, end logit 5 on its last, 0 elsewhere."""
  ids = tokenizer.tokenize([answer])[0].ids

  def model(inputs, training=False):
    del training
    word_ids = inputs[span_model.INPUT_WORD_IDS]
    return (tf.cast(word_ids == int(ids[0]), tf.float32) * 5.0,
            tf.cast(word_ids == int(ids[-1]), tf.float32) * 5.0)

  return model


@pytest.mark.parametrize("context, answer", KEEP_EVERY_CHARACTER)
def test_answers_keep_every_character(served, tmp_path, context, answer):
  tokenizer = served["tokenizer"]
  start = context.index(answer)
  expected = (answer, start, start + len(answer))
  model = _pointing_model(tokenizer, answer)
  # Python path (make_records' tokenizer, span_decoding): what predictions.json holds.
  query, passage = tokenizer.tokenize(["What?", context])
  features = features_lib.make_features(0, 0, query.ids, passage, tokenizer.cls_id,
                                        tokenizer.sep_id, FEATURIZATION)
  logits = model({span_model.INPUT_WORD_IDS: tf.constant([f.input_ids for f in features])})
  windows = [
      span_decoding.WindowLogits(logits[0][i].numpy(), logits[1][i].numpy(),
                                 np.array(f.token_start_char), np.array(f.token_end_char),
                                 np.array(f.token_is_max_context)) for i, f in enumerate(features)
  ]
  python = span_decoding.decode_answer(windows, context)
  assert (python.text, python.start_char, python.end_char) == expected
  # Graph path (serve_text's computation).
  module = serving_module.QAServingModule(model, testutil.vocab_file(), served["qa_config"])
  out = module.answer(tf.constant(["What?"]), tf.constant([context]))
  graph = (out["answer"].numpy()[0].decode(), int(out["start_char"].numpy()[0]),
           int(out["end_char"].numpy()[0]))
  assert graph == expected


def test_removed_characters_stay_with_their_word_in_both_tokenizers(served):
  """Token offsets on both paths, by hand: a stripped combining mark joins the token before it,
  or the token after it when it starts a space-separated piece or follows a deleted character; a
  deleted (zero-width, control) character joins no token."""
  texts = [
      "cafe\u0301", "caf\u00e9 x", "\u0301cafe", "a \u200bword\u200b b", "x\u00a0\u0301y\u0301",
      "日\u0301本 a\u200b日", "ab\x00cd\x07", "\u200b\u00ad", "x\u202f\u200by", "\u200b\u0301a"
  ]
  expected = [[(0, 5)], [(0, 4), (5, 6)], [(0, 5)], [(0, 1), (3, 7), (9, 10)], [(0, 1), (2, 5)],
              [(0, 2), (2, 3), (4, 5), (6, 7)], [(0, 4), (4, 5)], [], [(0, 1), (3, 4)], [(1, 3)]]
  ids, starts, ends = served["module"].tokenizer.tokenize_with_offsets(tf.constant(texts))
  for i, tokens in enumerate(served["tokenizer"].tokenize(texts)):
    python = list(zip(tokens.start_chars.tolist(), tokens.end_chars.tolist()))
    graph = list(zip(starts[i].numpy().tolist(), ends[i].numpy().tolist()))
    assert python == graph == expected[i], texts[i]
    assert ids[i].numpy().tolist() == tokens.ids.tolist()


# ---- the SavedModel --------------------------------------------------------------------------


def test_the_tiny_model_learned_its_lessons(served):
  assert served["loss"] < 0.1
  qa = served["qa"]
  for question, context, answer in TAUGHT:
    assert qa.answer_with_serve_features(question, context).text == answer


def _serve_text_equals_python_decoding(qa, questions, contexts):
  """Asserts serve_text's answers (one batched call) are ask.py's serve_features path's; returns
  them."""
  batched = qa.answers(questions, contexts)
  for question, context, got in zip(questions, contexts, batched):
    expected = qa.answer_with_serve_features(question, context)
    assert (got.text, got.start_char, got.end_char) == (expected.text, expected.start_char,
                                                        expected.end_char), question
    assert got.score == pytest.approx(expected.score, abs=1e-4)
    assert context[got.start_char:got.end_char] == got.text
  return batched


def test_serve_text_equals_python_postprocessing_on_real_dev(served):
  qa = served["qa"]
  questions, contexts = _dev_slice(NUM_DEV)
  questions += [q for q, _, _ in TAUGHT]
  contexts += [c for _, c, _ in TAUGHT]
  batched = _serve_text_equals_python_decoding(qa, questions, contexts)
  assert [a.text for a in batched[-len(TAUGHT):]] == [a for _, _, a in TAUGHT]


@pytest.mark.slow
def test_export_doc_stride_sets_the_serving_window_step(served, tmp_path):
  """export.py --doc_stride: serve_text steps windows by the given tokens (here twice training's),
  and ask.py's Python path reads the same step from the exported qa_config.json."""

  def serving_config(**given):
    return export_model.serving_config(export_model.ExportConfig(export_dir="export", **given),
                                       served["qa_config"])

  assert serving_config() == served["qa_config"]  # not given: training's
  config = serving_config(doc_stride=2 * STRIDE)
  assert config == dict(served["qa_config"], doc_stride=2 * STRIDE)
  with pytest.raises(ValueError, match=r"--doc_stride=0: .* positive .* \(training used 64\)"):
    serving_config(doc_stride=0)
  # A step past a window's context is said, as make_records.py says it.
  window = served["qa_config"]["max_seq_length"] - 3 - served["qa_config"]["max_query_length"]
  with mock.patch.object(features_lib.logging, "warning") as warned:
    serving_config(doc_stride=window)
    assert not warned.called
    serving_config(doc_stride=window + 1)
  assert warned.call_args[0][1:3] == (window + 1, served["qa_config"]["max_seq_length"])
  export_dir = str(tmp_path / "step")
  export_model.write_saved_model(served["model"], testutil.vocab_file(), config, export_dir)
  qa = saved_model_qa.SavedModelQA(export_dir)
  assert qa.config["doc_stride"] == 2 * STRIDE
  questions, contexts = _dev_slice(NUM_DEV)
  contexts = [f"{c} {c}" for c in contexts]  # ~300 tokens: several windows at either step
  windows = [
      sum(len(asked.features(q, c)) for q, c in zip(questions, contexts))
      for asked in (served["qa"], qa)
  ]
  assert windows[1] < windows[0]
  batched = _serve_text_equals_python_decoding(qa, questions, contexts)
  # The step changed what the model saw: some scores differ from the training-step export's.
  at_training_step = served["qa"].answers(questions, contexts)
  assert any(abs(a.score - b.score) > 1e-3 for a, b in zip(batched, at_training_step))


def test_odd_rows_all_get_answers(served):
  qa = served["qa"]
  # An empty question is refused: test_an_empty_question_is_refused_in_one_line.
  rows = [row for row in ODD_ROWS if row[0]]
  questions, contexts = [q for q, _ in rows], [c for _, c in rows]
  batched = qa.answers(questions, contexts)
  one_by_one = [qa.answer(q, c) for q, c in rows]
  for (question, context), got, alone in zip(rows, batched, one_by_one):
    expected = qa.answer_with_serve_features(question, context)
    assert (got.text, got.start_char, got.end_char) == (expected.text, expected.start_char,
                                                        expected.end_char), question
    assert (alone.text, alone.start_char, alone.end_char) == (got.text, got.start_char,
                                                              got.end_char)
    assert not np.isnan(got.score)
    assert context[got.start_char:got.end_char] == got.text
    if context.strip():
      assert got.text and np.isfinite(got.score)
    else:  # no token, no window: the empty answer with span_decoding's -inf score
      assert (got.text, got.start_char, got.end_char, got.score) == ("", 0, 0, float("-inf"))


def test_serve_examples_equal_serve_features(served):
  qa = served["qa"]
  questions, contexts = _dev_slice(1)
  features = qa.features(questions[0], contexts[0])
  serialized = [
      tf.train.Example(features=tf.train.Features(
          feature={
              key: tf.train.Feature(int64_list=tf.train.Int64List(value=value))
              for key, value in (("unique_ids", [f.unique_id]), ("input_ids", f.input_ids),
                                 ("input_mask", f.input_mask), ("segment_ids", f.segment_ids))
          })).SerializeToString() for f in features
  ]
  loaded = qa._loaded  # pylint: disable=protected-access
  from_examples = loaded.signatures["serve_examples"](examples=tf.constant(serialized))
  from_features = loaded.signatures["serve_features"](
      input_word_ids=tf.constant([f.input_ids for f in features]),
      input_mask=tf.constant([f.input_mask for f in features]),
      input_type_ids=tf.constant([f.segment_ids for f in features]))
  assert from_examples["unique_ids"].numpy().tolist() == [f.unique_id for f in features]
  for key in ("start_logits", "end_logits"):
    np.testing.assert_allclose(from_examples[key].numpy(), from_features[key].numpy(), atol=1e-5)


@pytest.mark.parametrize("question", ["", " \t\n", "\u200b", " \u00ad\x00\ufffd"])
def test_a_question_without_a_token_is_answered_nothing_in_its_row(served, question):
  """Empty, spaces only, or only characters the tokenizer deletes: nothing asked, so no window and
  "" with score -inf in its own row (as a context without a token), through serve_text and the
  Python path alike; the other rows of the batch are answered as alone."""
  (q1, c1, a1), (_, context, _) = TAUGHT[0], TAUGHT[1]
  for answer_all in (served["qa"].answers, served["qa"].answers_with_serve_features):
    first, empty = answer_all([q1, question], [c1, context])
    assert first == answer_all([q1], [c1])[0] and first.text == a1
    assert (empty.text, empty.start_char, empty.end_char, empty.score) == ("", 0, 0, -np.inf)
    assert empty.null_score == np.inf
  assert served["qa"].has_tokens(q1) and not served["qa"].has_tokens(question)


def test_ask_refuses_a_question_without_a_token_in_one_line(served):
  """ask.py says so rather than printing "no answer" (its check of the text alone, before
  TensorFlow loads, cannot see characters the tokenizer deletes)."""
  config = saved_model_qa.AskConfig(export_dir=served["export_dir"], question=("When?", "\u200b"),
                                    context=TAUGHT[0][1])
  with pytest.raises(errors.UsageError) as error:
    saved_model_qa.answer_questions(config)
  assert str(error.value) == ("question '\\u200b' is empty: there is nothing to answer; give the "
                              "question's text")


def test_null_answer_switch(served):
  question, context, answer = TAUGHT[0]
  base = dict(served["qa_config"], version_2_with_negative=True)

  def ask_with(threshold):
    module = serving_module.QAServingModule(served["model"], testutil.vocab_file(),
                                            dict(base, null_score_diff_threshold=threshold))
    out = module.answer(tf.constant([question, question]), tf.constant([context, ""]))
    return [
        (a.decode(), float(s), float(n))
        for a, s, n in zip(out["answer"].numpy(), out["score"].numpy(), out["null_score"].numpy())
    ]

  # A huge threshold never picks the null answer; a very negative one always does (when there is
  # a window), and then the score stays the best span's, the null score beside it being
  # start_logits[0] + end_logits[0].
  (text, span_score, _), (empty, empty_score, _) = ask_with(1e9)
  assert text == answer and (empty, empty_score) == ("", float("-inf"))
  features = served["qa"].features(question, context)
  logits = served["qa"]._loaded.signatures["serve_features"](  # pylint: disable=protected-access
      input_word_ids=tf.constant([f.input_ids for f in features]),
      input_mask=tf.constant([f.input_mask for f in features]),
      input_type_ids=tf.constant([f.segment_ids for f in features]))
  null = min(
      float(s[0]) + float(e[0])
      for s, e in zip(logits["start_logits"].numpy(), logits["end_logits"].numpy()))
  (text, score, null_score), (empty, empty_score, _) = ask_with(-1e9)
  assert text == "" and score == span_score and null_score == pytest.approx(null, abs=1e-4)
  assert (empty, empty_score) == ("", float("-inf"))


@pytest.mark.slow
def test_serve_features_path_applies_the_null_rule_as_serve_text(served, tmp_path):
  """ask.py --use_serve_features (and a --serve_text=false export) answers a SQuAD 2.0 export's
  questions exactly as serving_default does: "" where null - best > threshold, the best span's
  score and the null score kept (their difference is the reference's null_odds entry)."""
  rows = [(q, c) for q, c, _ in TAUGHT] + [(TAUGHT[0][0], TAUGHT[1][1]),
                                           (TAUGHT[2][0], TAUGHT[3][1]), ODD_ROWS[1], ODD_ROWS[-1]]
  questions, contexts = [q for q, _ in rows], [c for _, c in rows]
  diffs = [a.null_score_diff for a in served["qa"].answers_with_serve_features(questions, contexts)]
  finite = sorted(d for d in diffs if np.isfinite(d))
  threshold = float(finite[len(finite) // 2]) - 1e-3  # about half the questions get ""
  config = dict(served["qa_config"], version_2_with_negative=True,
                null_score_diff_threshold=threshold)
  export_model.write_saved_model(served["model"], testutil.vocab_file(), config,
                                 str(tmp_path / "v2"))
  export_model.write_saved_model(served["model"], testutil.vocab_file(), config,
                                 str(tmp_path / "v2_features"), serve_text=False)
  qa = saved_model_qa.SavedModelQA(str(tmp_path / "v2"))
  features_only = saved_model_qa.SavedModelQA(str(tmp_path / "v2_features"))
  assert not features_only.has_serve_text
  graph = qa.answers(questions, contexts)
  python = qa.answers_with_serve_features(questions, contexts)
  assert python == features_only.answers_with_serve_features(questions, contexts)
  nulls = [d > threshold for d in diffs]
  assert 2 <= sum(nulls) < len(rows) - 1  # both outcomes occur
  for g, p, d, is_null in zip(graph, python, diffs, nulls):
    assert (g.text, g.start_char, g.end_char) == (p.text, p.start_char, p.end_char)
    assert g.score == pytest.approx(p.score, abs=1e-4)
    assert g.null_score == pytest.approx(p.null_score, abs=1e-4)  # the same null_score_diff
    assert p.null_score_diff == pytest.approx(d)
    if is_null:
      assert (p.text, p.start_char, p.end_char) == ("", 0, 0)
    else:
      assert p.text != ""


@pytest.mark.parametrize("use_serve_features", [False, True])
def test_ask_warms_up_the_path_it_answers_through_before_timing(served, monkeypatch,
                                                                use_serve_features):
  """The first call of a loaded export sets up its graph (seconds): ask pays it in the load,
  through the path its questions take, so that each question's time is its own."""
  calls = []

  def recorded(name):
    method = getattr(saved_model_qa.SavedModelQA, name)

    def call(self, question, *args):
      calls.append((name, question))
      return method(self, question, *args)

    return call

  for name in ("answer", "answer_with_serve_features"):
    monkeypatch.setattr(saved_model_qa.SavedModelQA, name, recorded(name))
  question, context, _ = TAUGHT[0]
  asked = saved_model_qa.AskConfig(export_dir=served["export_dir"], question=question,
                                   context=context, use_serve_features=use_serve_features)
  saved_model_qa.answer_questions(asked)
  path = "answer_with_serve_features" if use_serve_features else "answer"
  assert calls == [(path, "?"), (path, question)]


@pytest.mark.slow
def test_ask_json_prints_one_object_a_question_and_nothing_else_on_stdout(served):
  """--format=json, for scripts: stdout holds one JSON object per question, in order, answering
  as SavedModelQA does; the rest (logs, warnings) goes to stderr."""
  questions, context = [q for q, _, _ in TAUGHT[:2]], TAUGHT[0][1]
  proc = subprocess.run([
      sys.executable, "ask.py", f"--export_dir={served['export_dir']}",
      *(f"--question={q}" for q in questions), f"--context={context}", "--format=json"
  ], cwd=testutil.REPO, capture_output=True, text=True, timeout=300, check=True)
  records = [json.loads(line) for line in proc.stdout.splitlines()]
  assert [r.pop("question") for r in records] == questions
  assert all(r.pop("seconds") >= 0 for r in records)
  for record, question in zip(records, questions):
    answer = served["qa"].answer(question, context)
    assert record == {
        "answer": answer.text,
        "start_char": answer.start_char,
        "end_char": answer.end_char,
        "score": pytest.approx(answer.score),
        "null_score": pytest.approx(answer.null_score)
    }


def test_ask_json_writes_infinite_scores_as_null():
  """Strict JSON (JavaScript's JSON.parse, Go's encoding/json) has no Infinity: a row without a
  span or a window gets null."""
  answer = span_decoding.Answer("", 0, 0, float("-inf"))
  assert json.dumps(saved_model_qa.answer_record("q", answer, 0.01234567)) == (
      '{"question": "q", "answer": "", "start_char": 0, "end_char": 0, "score": null, '
      '"null_score": null, "seconds": 0.0123}')


def test_ask_decodes_with_the_export_s_span_limits_unless_typed(served, tmp_path):
  """ask.py's Python path (--use_serve_features, or an export without serve_text) decodes with
  the export's n_best_size and max_answer_length, as serve_text does, unless the flags are given:
  an export of max_answer_length=1 never answers the two-token "Marta Olsen"."""
  question, context, answer = TAUGHT[1]
  config = dict(served["qa_config"], max_answer_length=1, n_best_size=3)
  with_text, features_only = str(tmp_path / "short"), str(tmp_path / "short_features")
  export_model.write_saved_model(served["model"], testutil.vocab_file(), config, with_text)
  export_model.write_saved_model(served["model"], testutil.vocab_file(), config, features_only,
                                 serve_text=False)

  def ask(export_dir, **flags):
    asked = saved_model_qa.AskConfig(export_dir=export_dir, question=question, context=context,
                                     **flags)
    return saved_model_qa.answer_questions(asked)[0][0][1]

  served_text = ask(with_text)
  assert len(served_text.text.split()) == 1 and served_text.text in answer
  for python_path in (ask(with_text, use_serve_features=True), ask(features_only)):
    assert (python_path.text, python_path.start_char) == (served_text.text, served_text.start_char)
  assert ask(features_only, max_answer_length=30, n_best_size=20).text == answer


def test_ask_takes_a_null_score_diff_threshold_where_it_decodes(served, tmp_path):
  """ask.py's --null_score_diff_threshold: applied on the Python decoding path of a SQuAD 2.0
  export, refused where serve_text applies another one or the export answers as SQuAD 1.1."""
  question, context, answer = TAUGHT[0]
  config = dict(served["qa_config"], version_2_with_negative=True, null_score_diff_threshold=0.0)
  v2_dir = str(tmp_path / "v2")
  export_model.write_saved_model(served["model"], testutil.vocab_file(), config, v2_dir)

  def ask(export_dir, **flags):
    asked = saved_model_qa.AskConfig(export_dir=export_dir, question=question, context=context,
                                     **flags)
    return saved_model_qa.answer_questions(asked)[0][0][1]

  null_first = ask(v2_dir, use_serve_features=True, null_score_diff_threshold=-1e9)
  span_first = ask(v2_dir, use_serve_features=True, null_score_diff_threshold=1e9)
  assert (null_first.text, span_first.text) == ("", answer)
  # The null answer keeps the best span's score and the null score: their margin.
  assert (null_first.score, null_first.null_score) == (span_first.score, span_first.null_score)
  assert ask(v2_dir, null_score_diff_threshold=0.0) == ask(v2_dir)  # serve_text's own value
  with pytest.raises(errors.UsageError) as raised:
    ask(v2_dir, null_score_diff_threshold=2.5)
  assert str(raised.value) == (
      "--null_score_diff_threshold=2.5: serve_text was exported with "
      "null_score_diff_threshold=0.0, which it applies; add --use_serve_features, or re-export "
      "with --null_score_diff_threshold=2.5")
  with pytest.raises(errors.UsageError) as raised:
    ask(served["export_dir"], use_serve_features=True, null_score_diff_threshold=2.5)
  assert str(raised.value) == (
      f"--null_score_diff_threshold=2.5: {served['export_dir']} answers as SQuAD 1.1 "
      f"(version_2_with_negative=false): every question gets a span, and no null answer is "
      f"weighed; drop the flag")


@pytest.mark.slow
def test_saved_model_cli_lists_the_signatures(served):
  show = subprocess.run(["saved_model_cli", "show", "--all", "--dir", served["export_dir"]],
                        capture_output=True, text=True, timeout=300, check=True).stdout
  for name in ("serving_default", "serve_text", "serve_features", "serve_examples"):
    assert f"signature_def['{name}']" in show
  default = show.split("signature_def['serving_default']")[1].split("signature_def[")[0]
  for line in ("inputs['question'] tensor_info:", "inputs['context'] tensor_info:",
               "outputs['answer'] tensor_info:", "outputs['start_char'] tensor_info:",
               "outputs['end_char'] tensor_info:", "outputs['score'] tensor_info:",
               "dtype: DT_STRING", "dtype: DT_INT32", "dtype: DT_FLOAT"):
    assert line in default


@pytest.mark.slow
def test_saved_model_cli_run_answers_the_question(served):
  question, context, answer = TAUGHT[0]
  exprs = f"question={json.dumps([question])};context={json.dumps([context])}"
  _, output = testutil.run_cli("tools/saved_model_cli.py", "run", "--dir", served["export_dir"],
                               "--tag_set", "serve", "--signature_def", "serving_default",
                               "--input_exprs", exprs)
  result = output.split("Result for output key answer:")[1].splitlines()[1]
  assert result == f"[b'{answer}']"
  assert "Result for output key start_char:" in output
  start = output.split("Result for output key start_char:")[1].splitlines()[1]
  assert start == f"[{context.index(answer)}]"


@pytest.mark.slow
def test_fresh_process_with_only_tensorflow_and_tensorflow_text(served):
  question, context, answer = TAUGHT[1]
  script = (
      "import json, sys\n"
      "import tensorflow as tf\n"
      "import tensorflow_text  # registers the tokenizer ops\n"
      "m = tf.saved_model.load(sys.argv[1])\n"
      "x = json.loads(sys.stdin.read())\n"
      "out = m.signatures['serving_default'](question=tf.constant(x['q']), "
      "context=tf.constant(x['c']))\n"
      "print(json.dumps({k: [v.decode() if isinstance(v, bytes) else float(v) "
      "for v in t.numpy()] for k, t in out.items()}))\n"
      "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in "
      "('train', 'export', 'ask', 'model', 'serving', 'preprocess', 'postprocess', 'flags'))))\n")
  proc = subprocess.run([sys.executable, "-c", script, served["export_dir"]], input=json.dumps({
      "q": [question, ""],
      "c": [context, context]
  }), capture_output=True, text=True, cwd="/", timeout=300, check=True)
  lines = proc.stdout.strip().splitlines()
  out, project_modules = json.loads(lines[-2]), json.loads(lines[-1])
  assert project_modules == []
  assert out["answer"][0] == answer
  assert out["start_char"][0] == context.index(answer)
  assert out["end_char"][0] == context.index(answer) + len(answer)
  assert np.isfinite(out["score"][0])
  # The empty question asks nothing: "" without a span, as for a context without a token.
  assert (out["answer"][1], out["start_char"][1], out["end_char"][1], out["score"][1]) == ("", 0, 0,
                                                                                           -np.inf)


@pytest.mark.slow
def test_features_only_export_loads_without_tensorflow_text(served, tmp_path):
  """--serve_text=false: plain saved_model_cli (no tensorflow-text in its process) runs it."""
  export_dir = str(tmp_path / "features_only")
  export_model.write_saved_model(served["model"], testutil.vocab_file(), served["qa_config"],
                                 export_dir, serve_text=False)
  features = served["qa"].features(*TAUGHT[0][:2])
  inputs = {
      k: [[int(x) for x in getattr(f, a)] for f in features]
      for k, a in (("input_word_ids", "input_ids"), ("input_mask", "input_mask"), ("input_type_ids",
                                                                                   "segment_ids"))
  }
  exprs = ";".join(f"{k}={json.dumps(v)}" for k, v in inputs.items())
  out_dir = tmp_path / "outputs"
  proc = subprocess.run([
      "saved_model_cli", "run", "--dir", export_dir, "--tag_set", "serve", "--signature_def",
      "serving_default", "--input_exprs", exprs, "--outdir",
      str(out_dir)
  ], capture_output=True, text=True, timeout=300, cwd="/")
  assert proc.returncode == 0, proc.stderr[-3000:]
  start_logits, end_logits = served["model"]({
      k: tf.constant(v) for k, v in inputs.items()
  }, training=False)
  np.testing.assert_allclose(np.load(out_dir / "start_logits.npy"), start_logits.numpy(), atol=1e-5)
  np.testing.assert_allclose(np.load(out_dir / "end_logits.npy"), end_logits.numpy(), atol=1e-5)
  show = subprocess.run(["saved_model_cli", "show", "--all", "--dir", export_dir],
                        capture_output=True, text=True, timeout=300, check=True).stdout
  assert "serve_text" not in show and "serve_features" in show and "serve_examples" in show
  # SavedModelQA answers from it as squad-qa-ask does: through serve_features.
  questions, contexts = [t[0] for t in TAUGHT], [t[1] for t in TAUGHT]
  assert saved_model_qa.SavedModelQA(export_dir).answers(
      questions, contexts) == served["qa"].answers_with_serve_features(questions, contexts)


@pytest.mark.parametrize("questions, contexts, message", [
    ("When?", "The bridge was painted in 1932.",
     "questions: expected a list of str, got str; one question and context: "
     "SavedModelQA.answer(question, context)"),
    (["When?", "Who?"], ["The bridge was painted in 1932."
                        ], "2 questions and 1 contexts: give one context per question"),
    (["When?"], ["Painted in 1932.", b"The bridge was painted in 1932."],
     "contexts[1]: expected str, got bytes; decode it first, e.g. text.decode('utf-8')"),
    (["When?", 5], ["Painted in 1932.", "Painted in 1932."], "questions[1]: expected str, got int"),
    (["When\ud800?"], ["Painted in 1932."], "questions[0]: character 4 ('\\ud800') is half of a "
     "UTF-16 surrogate pair, not a character; decode the text from its bytes with its real "
     "encoding"),
    (5, ["Painted in 1932."], "questions: expected a list of str, got int; one question and "
     "context: SavedModelQA.answer(question, context)"),
])
def test_saved_model_qa_refuses_inputs_it_would_misread(served, questions, contexts, message):
  """A str would be iterated as one question per character, and unequal lists dropped rows."""
  for answer_all in (served["qa"].answers, served["qa"].answers_with_serve_features):
    with pytest.raises(errors.UsageError) as raised:
      answer_all(questions, contexts)
    assert str(raised.value) == message


def test_saved_model_qa_answers_any_iterables_of_str_and_names_a_bad_single_input(served):
  """Tuples and generators answer as lists do (a generator of another length is counted, not
  a TypeError); answer() names the argument that is not a str."""
  qa = served["qa"]
  questions, contexts = [t[0] for t in TAUGHT], [t[1] for t in TAUGHT]
  assert qa.answers(tuple(questions), (c for c in contexts)) == qa.answers(questions, contexts)
  by_features = qa.answers_with_serve_features(questions, contexts)
  assert qa.answers_with_serve_features((q for q in questions), tuple(contexts)) == by_features
  with pytest.raises(errors.UsageError) as raised:
    qa.answers((q for q in questions), contexts[:1])
  assert str(raised.value) == (f"{len(questions)} questions and 1 contexts: give one context per "
                               f"question")
  for answer_one in (qa.answer, qa.answer_with_serve_features):
    with pytest.raises(errors.UsageError) as raised:
      answer_one(5, contexts[0])
    assert str(raised.value) == "question: expected str, got int"
    with pytest.raises(errors.UsageError) as raised:
      answer_one(questions[0], None)
    assert str(raised.value) == "context: expected str, got NoneType"


def test_the_readme_python_example_answers_as_shown_and_quietly(served, tmp_path):
  """The README's Python example, run as a script: its answer, and no TensorFlow start-up line
  (the package's import sets the C++ log level)."""
  readme = (testutil.REPO / "README.md").read_text(encoding="utf-8")
  [code] = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
  os.symlink(served["export_dir"], tmp_path / "export")  # the example's relative "export"
  env = {
      k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "SQUAD_QA_VERBOSE")
  }
  proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=600, check=False)
  shown = re.search(r"# (.*) \.\.\.$", code, re.MULTILINE).group(1)  # "1932 38 42"
  assert shown == "1932 38 42"
  assert proc.stdout.startswith(shown + " ") and proc.stderr == "", proc.stdout + proc.stderr
