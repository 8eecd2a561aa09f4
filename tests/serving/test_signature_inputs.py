"""The SavedModel's signatures fed the tensors TF Serving's REST bodies make: the documented bodies
answer as a plain call does, a wrong shape or dtype gets one clear line naming the input."""

import base64
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from squad_qa import errors
from squad_qa.postprocess import span_decoding
from squad_qa.serving import ask_config
from squad_qa.serving import saved_model_qa
from tests import testutil
from tests.serving import taught_model

QUESTIONS = [q for q, _, _ in taught_model.TAUGHT[:2]]
CONTEXTS = [c for _, c, _ in taught_model.TAUGHT[:2]]
ANSWERS = [a for _, _, a in taught_model.TAUGHT[:2]]
TEXT_REST_HINT = ("(a REST body sends {instances: [{question: ..., context: ...}]} or "
                  "{inputs: {question: [...], context: [...]}})")


def _rest_tensors(body, dtype=None, single_input=None):
  """The tensors TF Serving's predict API feeds a signature for a JSON request `body`.

  The row format ("instances") stacks each input's values of all instances along a new first axis
  (an instance is an object keyed by input name, or, for a signature of one input named
  `single_input`, that input's value); the columnar format ("inputs") takes each input's value as
  it is. {"b64": ...} is bytes. `dtype`: the signature's (TF Serving converts JSON numbers to it);
  None infers it from the values, to make a tensor of another dtype than the signature's.
  """

  def decoded(value):
    if isinstance(value, dict):
      return base64.b64decode(value["b64"])
    return [decoded(v) for v in value] if isinstance(value, list) else value

  body = json.loads(body)
  if "instances" in body:
    rows = body["instances"]
    if single_input:
      rows = [{single_input: row} for row in rows]
    columns = {name: [row[name] for row in rows] for name in rows[0]}
  else:
    columns = body["inputs"]
  return {name: tf.constant(decoded(value), dtype) for name, value in columns.items()}


def _signature(served, name):
  return served["qa"]._loaded.signatures[name]  # pylint: disable=protected-access


def _fails_with(signature, tensors, line):
  """Asserts the signature refuses `tensors` with an error whose message holds `line`."""
  with pytest.raises(tf.errors.InvalidArgumentError) as raised:
    signature(**tensors)
  assert line in str(raised.value)


# ---- serve_text (serving_default) -------------------------------------------------------------


@pytest.mark.parametrize("body", [
    json.dumps({"instances": [{
        "question": q,
        "context": c
    } for q, c in zip(QUESTIONS, CONTEXTS)]}),
    json.dumps({"inputs": {
        "question": QUESTIONS,
        "context": CONTEXTS
    }})
], ids=["rows", "columns"])
def test_serve_text_rest_bodies_answer_as_the_plain_call(served, body):
  tensors = _rest_tensors(body, tf.string)
  assert tensors["question"].shape == tensors["context"].shape == [2]
  for name in ("serving_default", "serve_text"):
    out = _signature(served, name)(**tensors)
    plain = served["qa"].answers(QUESTIONS, CONTEXTS)
    assert [a.decode() for a in out["answer"].numpy()] == [a.text for a in plain] == ANSWERS
    assert out["start_char"].numpy().tolist() == [a.start_char for a in plain]
    assert out["end_char"].numpy().tolist() == [a.end_char for a in plain]
    np.testing.assert_array_equal(out["score"].numpy(), [a.score for a in plain])


@pytest.mark.parametrize(
    "body, line", [
        ('{"inputs": {"question": "q", "context": "c"}}',
         "serve_text: `question` must be a vector of strings, shape [batch]; got rank 0, shape [] "
         + TEXT_REST_HINT),
        ('{"instances": [{"question": ["q1"], "context": ["c1"]}, '
         '{"question": ["q2"], "context": ["c2"]}]}',
         "serve_text: `question` must be a vector of strings, shape [batch]; "
         "got rank 2, shape [2, 1] " + TEXT_REST_HINT),
        ('{"inputs": {"question": [["q1", "q2"]], "context": [["c1", "c2"]]}}',
         "serve_text: `question` must be a vector of strings, shape [batch]; "
         "got rank 2, shape [1, 2] " + TEXT_REST_HINT),
        ('{"inputs": {"question": ["q1", "q2"], "context": [["c1", "c2"]]}}',
         "serve_text: `context` must be a vector of strings, shape [batch]; "
         "got rank 2, shape [1, 2] " + TEXT_REST_HINT),
        ('{"inputs": {"question": ["q1", "q2"], "context": ["c1"]}}',
         "serve_text: `question` and `context` need the same batch size"),
    ], ids=["scalar", "rows_of_lists", "nested_columns", "nested_context", "batch_sizes"])
def test_serve_text_wrong_shapes_get_one_line(served, body, line):
  _fails_with(_signature(served, "serving_default"), _rest_tensors(body, tf.string), line)


def test_serve_text_wrong_dtype_is_refused_by_the_signature(served):
  # Inputs are numbered in alphabetical order of their names: context #0, question #1.
  tensors = _rest_tensors('{"inputs": {"question": [1, 2], "context": ["c1", "c2"]}}')
  _fails_with(_signature(served, "serve_text"), tensors,
              "input #1(zero-based) was expected to be a string tensor but is a int32 tensor")


# ---- serve_features and serve_examples ---------------------------------------------------------


def _features(served):
  """The two TAUGHT rows' windows (one each) as lists: ids, mask, type ids, serialized examples."""
  features = [f for q, c in zip(QUESTIONS, CONTEXTS) for f in served["qa"].features(q, c)]
  assert len(features) == 2
  columns = {
      "input_word_ids": [list(f.input_ids) for f in features],
      "input_mask": [list(f.input_mask) for f in features],
      "input_type_ids": [list(f.segment_ids) for f in features]
  }
  examples = [
      tf.train.Example(features=tf.train.Features(
          feature={
              key: tf.train.Feature(int64_list=tf.train.Int64List(value=value))
              for key, value in (("input_ids", f.input_ids), ("input_mask", f.input_mask),
                                 ("segment_ids", f.segment_ids))
          })).SerializeToString() for f in features
  ]
  return columns, examples


def _rows(columns):
  return [dict(zip(columns, values)) for values in zip(*columns.values())]


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "columns"])
def test_serve_features_rest_bodies_give_the_plain_call_logits(served, rows):
  columns, _ = _features(served)
  body = json.dumps({"instances": _rows(columns)} if rows else {"inputs": columns})
  tensors = _rest_tensors(body, tf.int32)
  assert all(t.shape == [2, taught_model.SEQ] for t in tensors.values())
  signature = _signature(served, "serve_features")
  out = signature(**tensors)
  plain = signature(**{name: tf.constant(value) for name, value in columns.items()})
  for key in ("start_logits", "end_logits"):
    np.testing.assert_array_equal(out[key].numpy(), plain[key].numpy())


def test_serve_features_wrong_shapes_and_dtype_get_one_line(served):
  columns, _ = _features(served)
  signature = _signature(served, "serve_features")
  one_window = {name: value[0] for name, value in columns.items()}
  _fails_with(
      signature, _rest_tensors(json.dumps({"inputs": one_window}), tf.int32),
      "serve_features: `input_word_ids` must be a matrix of int32 token ids, shape "
      "[batch, seq_length]; got rank 1, shape [128] (a REST body sends {instances: "
      "[{input_word_ids: [...], input_mask: [...], input_type_ids: [...]}]} or "
      "{inputs: {input_word_ids: [[...]], input_mask: [[...]], input_type_ids: [[...]]}})")
  nested = [{name: [value] for name, value in row.items()} for row in _rows(columns)]
  _fails_with(
      signature, _rest_tensors(json.dumps({"instances": nested}), tf.int32),
      "serve_features: `input_word_ids` must be a matrix of int32 token ids, shape "
      "[batch, seq_length]; got rank 3, shape [2, 1, 128]")
  short_mask = dict(columns, input_mask=[row[:64] for row in columns["input_mask"]])
  _fails_with(
      signature, _rest_tensors(json.dumps({"inputs": short_mask}), tf.int32),
      "serve_features: `input_word_ids`, `input_mask` and `input_type_ids` must have one "
      "shape [batch, seq_length]; got [2, 128], [2, 64], [2, 128]")
  positions = testutil.TINY_BERT_CONFIG["max_position_embeddings"]  # the taught model's
  too_long = {name: tf.ones([1, positions + 1], tf.int32) for name in columns}
  _fails_with(
      signature, too_long,
      f"serve_features: seq_length {positions + 1} is more than the {positions} positions of the "
      f"encoder; cut the windows to at most {positions} tokens")
  # Inputs are numbered in alphabetical order: input_mask #0, input_type_ids #1, input_word_ids #2.
  as_int64 = {
      name: tf.constant(value, tf.int64 if name == "input_word_ids" else tf.int32)
      for name, value in columns.items()
  }
  _fails_with(signature, as_int64,
              "input #2(zero-based) was expected to be a int32 tensor but is a int64 tensor")


def test_serve_features_and_examples_refuse_values_the_model_would_misread(served):
  """tfm's type embedding is a one-hot (a type id out of range reads zeros) and the mask only
  multiplies: such inputs gave plausible logits. Now one line names the input and its range; a
  batch of no rows still returns no logits, a row of no tokens is named."""
  columns, _ = _features(served)
  signature = _signature(served, "serve_features")
  for name, value, line in [
      ("input_type_ids", 2, "`input_type_ids` holds token type ids (0: question, 1: context), in "
       "[0, 2); got values 0..2"),
      ("input_type_ids", -1, "`input_type_ids` holds token type ids (0: question, 1: context), in "
       "[0, 2); got values -1..1"),
      ("input_mask", 2, "`input_mask` holds 0 (padding) or 1 (a token), in [0, 2); got values "
       "0..2"),
  ]:
    bad = {key: np.array(rows, np.int32) for key, rows in columns.items()}
    bad[name][0, 3] = value
    _fails_with(signature, {
        key: tf.constant(rows) for key, rows in bad.items()
    }, f"serve_features: {line}")
  empty = signature(**{name: tf.zeros([0, taught_model.SEQ], tf.int32) for name in columns})
  assert empty["start_logits"].shape == [0, taught_model.SEQ]
  _fails_with(signature, {name: tf.zeros([1, 0], tf.int32) for name in columns},
              "serve_features: seq_length 0: a window holds at least its [CLS] token")
  example = tf.train.Example(features=tf.train.Features(
      feature={
          key: tf.train.Feature(int64_list=tf.train.Int64List(value=value))
          for key, value in (("input_ids", columns["input_word_ids"][0]),
                             ("input_mask", columns["input_mask"][0]),
                             ("segment_ids", [3] + columns["input_type_ids"][0][1:]))
      })).SerializeToString()
  _fails_with(
      _signature(served, "serve_examples"), {"examples": tf.constant([example])},
      "serve_examples: `segment_ids` holds token type ids (0: question, 1: context), in [0, 2); "
      "got values 0..3")


def test_serve_examples_rest_bodies_and_wrong_shapes(served):
  columns, examples = _features(served)
  signature = _signature(served, "serve_examples")
  b64 = [{"b64": base64.b64encode(e).decode()} for e in examples]
  plain = _signature(served, "serve_features")(**{
      name: tf.constant(value) for name, value in columns.items()
  })
  for body in ({"instances": b64}, {"inputs": {"examples": b64}}):
    tensors = _rest_tensors(json.dumps(body), tf.string, single_input="examples")
    assert tensors["examples"].shape == [2]
    out = signature(**tensors)
    for key in ("start_logits", "end_logits"):
      np.testing.assert_allclose(out[key].numpy(), plain[key].numpy(), atol=1e-5)
  rest_hint = "(a REST body sends {instances: [{b64: ...}]} or {inputs: {examples: [{b64: ...}]}})"
  for body, shape in (({
      "inputs": {
          "examples": b64[0]
      }
  }, "rank 0, shape []"), ({
      "inputs": {
          "examples": [b64]
      }
  }, "rank 2, shape [1, 2]")):
    _fails_with(
        signature, _rest_tensors(json.dumps(body), tf.string),
        "serve_examples: `examples` must be a vector of serialized tf.train.Example "
        f"strings, shape [batch]; got {shape} {rest_hint}")
  _fails_with(signature, {"examples": tf.constant([1, 2])},
              "input #0(zero-based) was expected to be a string tensor but is a int32 tensor")


def test_ask_without_an_export_or_a_context_file_is_one_line(tmp_path):
  with pytest.raises(errors.MissingFileError) as error:
    saved_model_qa.answer_questions(
        saved_model_qa.AskConfig(export_dir=str(tmp_path / "none"), question="q", context="c"))
  assert str(error.value) == (f"--export_dir={tmp_path / 'none'}: no SavedModel there; make one "
                              f"with `squad-qa-export --export_dir={tmp_path / 'none'}`")
  model_dir = tmp_path / "model_out"  # a --model_dir: the hint is to export it, into a new folder
  model_dir.mkdir()
  (model_dir / "qa_config.json").write_text("{}")
  with pytest.raises(errors.MissingFileError) as error:
    saved_model_qa.answer_questions(
        saved_model_qa.AskConfig(export_dir=str(model_dir), question="q", context="c"))
  assert str(error.value) == (
      f"--export_dir={model_dir} is a --model_dir of squad-qa-train, not an export; export it "
      f"with `squad-qa-export --model_dir={model_dir} --export_dir=<a new folder>`")
  records_dir = tmp_path / "records"  # make_records' folder: export into a new one
  records_dir.mkdir()
  (records_dir / "meta.json").write_text("{}")
  with pytest.raises(errors.MissingFileError) as error:
    saved_model_qa.answer_questions(
        saved_model_qa.AskConfig(export_dir=str(records_dir), question="q", context="c"))
  assert str(error.value) == (
      f"--export_dir={records_dir} holds records of squad-qa-records, not an export; train on "
      f"them, then export into a new folder with `squad-qa-export --export_dir=<a new folder>`")
  (records_dir / "meta.json").rename(records_dir / "notes.txt")  # other files: a new folder too
  with pytest.raises(errors.MissingFileError) as error:
    saved_model_qa.answer_questions(
        saved_model_qa.AskConfig(export_dir=str(records_dir), question="q", context="c"))
  assert str(error.value) == (f"--export_dir={records_dir}: no SavedModel there; make one with "
                              f"`squad-qa-export --export_dir=<a new folder>`")
  with pytest.raises(errors.MissingFileError) as error:  # a file: not a folder to export into
    saved_model_qa.answer_questions(
        saved_model_qa.AskConfig(export_dir=str(records_dir / "notes.txt"), question="q",
                                 context="c"))
  assert str(error.value) == (f"--export_dir={records_dir / 'notes.txt'} is a file, not an export "
                              f"folder; pass the folder `squad-qa-export` wrote")
  with pytest.raises(errors.MissingFileError, match="--context_file=.*: no such file"):
    saved_model_qa.answer_questions(
        saved_model_qa.AskConfig(export_dir=str(tmp_path / "none"), question="q",
                                 context_file=str(tmp_path / "c.txt")))
  with pytest.raises(errors.UsageError) as error:
    saved_model_qa.AskConfig(question="q", context="c", context_file=str(tmp_path / "c.txt"))
  assert str(error.value) == "give --context or --context_file, not both (one passage per run)"
  for question in ("", " \t"):  # refused before TensorFlow loads, as the graph path refuses it
    with pytest.raises(errors.UsageError) as error:
      saved_model_qa.AskConfig(question=("Who?", question), context="c")
    assert str(error.value) == (f"question {question!r} is empty: there is nothing to answer; "
                                f"give the question's text")
  for context in ("", " \n\t"):  # nothing to answer from, as an empty question asks nothing
    with pytest.raises(errors.UsageError) as error:
      saved_model_qa.AskConfig(question="q", context=context)
    assert str(error.value) == (f"--context={context!r} is empty: there is no passage to answer "
                                f"from; give its text")
    (tmp_path / "empty.txt").write_text(context)
    with pytest.raises(errors.UsageError) as error:
      ask_config.read_context_file(str(tmp_path / "empty.txt"))
    assert str(error.value) == (f"--context_file={tmp_path / 'empty.txt'} is empty: there is no "
                                f"passage to answer from; write the passage into it")


def test_ask_names_an_argument_that_is_not_utf8_before_tensorflow_loads():
  """A byte that is not UTF-8 on the command line reaches Python as a lone surrogate
  (surrogateescape): the flag and byte are named, as --context_file's are."""
  context, question = os.fsdecode(b"Painted \xff in 1932."), os.fsdecode(b"Wh\xe9n?")
  with pytest.raises(errors.UsageError) as error:
    saved_model_qa.AskConfig(question="When?", context=context)
  assert str(error.value) == ("--context: not UTF-8 text (byte 8: invalid start byte); pass it as "
                              "UTF-8, or the passage in a UTF-8 --context_file")
  with pytest.raises(errors.UsageError) as error:
    saved_model_qa.AskConfig(question=("Who?", question), context="Painted in 1932.")
  assert str(error.value) == ("--question: not UTF-8 text (byte 2: invalid continuation byte); "
                              "pass it as UTF-8")
  with pytest.raises(errors.UsageError) as error:  # from Python: a surrogate argv never holds
    saved_model_qa.AskConfig(question="When?", context="Painted \ud800 in 1932.")
  assert str(error.value) == ("--context: not UTF-8 text (a lone surrogate); pass it as UTF-8, or "
                              "the passage in a UTF-8 --context_file")


def test_a_folder_as_context_file_is_named_a_folder(tmp_path):
  with pytest.raises(errors.UsageError) as error:
    ask_config.read_context_file(str(tmp_path))
  assert str(error.value) == (f"--context_file={tmp_path} is a folder; pass the file holding the "
                              f"passage")


def test_ask_prints_a_span_with_offsets_and_no_answer_in_words():
  """A span, the SQuAD 2.0 null answer (its margin over the best span) and a context without a
  span."""
  answer = span_decoding.Answer
  assert [
      saved_model_qa.answer_line(a, 0.0123)
      for a in (answer("Paris", 88, 93, 7.4678), answer("", 0, 0, 1.75, 6.625),
                answer("", 0, 0, float("-inf")))
  ] == [
      "A: 'Paris' (characters 88..93, score 7.47, 12 ms)",
      "A: no answer (the null answer won by 4.88 over the best span's score 1.75; 12 ms)",
      "A: no answer (no span in the context, 12 ms)",
  ]


def test_a_context_file_is_utf8_text_without_its_byte_order_mark(tmp_path):
  path = tmp_path / "context.txt"
  path.write_bytes("\ufeffThe caf\u00e9 opened in 1932.".encode("utf-8"))
  text = ask_config.read_context_file(str(path))
  assert text == "The caf\u00e9 opened in 1932." and text.index("1932") == 19
  # Windows line ends stay: the answer's offsets are the file's characters.
  path.write_bytes(b"Line one.\r\nLine two.\r\nThe bridge was painted in 1932.\r\n")
  text = ask_config.read_context_file(str(path))
  assert text.index("1932") == 48 == path.read_bytes().decode("utf-8").index("1932")
  # A pipe (e.g. --context_file=/dev/stdin) is read as a file is.
  read, write = os.pipe()
  os.write(write, "The caf\u00e9 opened in 1932.".encode("utf-8"))
  os.close(write)
  try:
    assert ask_config.read_context_file(f"/proc/self/fd/{read}") == "The caf\u00e9 opened in 1932."
  finally:
    os.close(read)
  path.write_bytes("The caf\u00e9 opened in 1932.".encode("latin-1"))
  with pytest.raises(errors.UsageError) as error:
    ask_config.read_context_file(str(path))
  assert str(error.value) == (f"--context_file={path}: not UTF-8 text (byte 7: invalid "
                              f"continuation byte); save it as UTF-8")
