"""export.py --serving_precision=int8: the encoder quantized for LiteRT, answered by SavedModelQA.

The taught tiny model's checkpoint (tests/serving/taught_model.py) goes through export.py's own
path once in float32 (a SavedModel) and once in int8 (vocab, qa_config.json and the LiteRT model),
and the two are compared on real SQuAD dev questions through the same Python tokenization, windows
and decoding; only the features model differs.
"""

import concurrent.futures
import json
import logging as std_logging
import os
import re
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import logging as absl_logging

from squad_qa import errors
from squad_qa.model import span_model
from squad_qa.serving import export_model
from squad_qa.serving import features_model
from squad_qa.serving import saved_model_qa
from tests import testutil
from tests.serving import taught_model
from tests.serving import test_reduced_precision as reduced

FEATURES = ("input_ids", "input_mask", "segment_ids")  # a window's ids, mask and type ids


@pytest.fixture(scope="module")
def exports(served, tmp_path_factory):
  """{precision: SavedModelQA, precision + "_dir": its folder} for float32 and int8."""
  tmp = tmp_path_factory.mktemp("int8")
  model_dir = reduced._model_dir_of(served, str(tmp / "model_out"))  # pylint: disable=protected-access
  result = {}
  for name in ("float32", "int8"):
    export_dir = str(tmp / name)
    # The command's verbosity (INFO), which the LiteRT converter sets the logger back to.
    lines, verbosity = Lines(), absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)
    std_logging.getLogger("absl").addHandler(lines)
    try:
      export_model.export_model(
          export_model.ExportConfig(export_dir=export_dir, model_dir=model_dir,
                                    serving_precision=name))
    finally:
      std_logging.getLogger("absl").removeHandler(lines)
      absl_logging.set_verbosity(verbosity)
    result[name] = saved_model_qa.SavedModelQA(export_dir)
    result[name + "_dir"] = export_dir
    result[name + "_log"] = lines.messages
  return result


class Lines(std_logging.Handler):
  """Keeps the messages logged through absl (INFO and above)."""

  def __init__(self):
    super().__init__(std_logging.INFO)
    self.messages = []

  def emit(self, record):
    self.messages.append(record.getMessage())


@pytest.mark.slow  # exports the model twice
def test_the_int8_export_line_names_the_ask_command_and_no_install_already_done(exports):
  """tf-models-official requires ai-edge-litert, so an install has LiteRT: no install hint."""
  line = next(m for m in exports["int8_log"] if m.startswith("exported the int8 LiteRT model"))
  assert re.fullmatch(
      rf"exported the int8 LiteRT model to {re.escape(exports['int8_dir'])}: "
      rf"{features_model.INT8_MODEL_FILE}, [\d.]+ MB; no serve_text \(squad-qa-ask and "
      rf"SavedModelQA tokenize in Python\)", line), line


def _dev_features(qa):
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  return [f for q, c in zip(questions, contexts) for f in qa.features(q, c)]


@pytest.mark.slow  # exports the model twice
def test_int8_logits_are_within_quantization_error_of_float32(exports):
  features = _dev_features(exports["float32"])
  assert features == _dev_features(exports["int8"])  # same vocab and settings: same windows
  float32 = exports["float32"].window_logits(features)
  int8 = exports["int8"].window_logits(features)
  mask = np.array([f.input_mask for f in features], bool)
  worst = 0.0
  for want, got in zip(float32, int8):
    assert got.dtype == np.float32 and got.shape == want.shape
    want, got = want[mask], got[mask]
    worst = max(worst, float(np.abs(got - want).max() / np.ptp(want)))
  # Measured 0.027 of the float32 logits' range (max over the real tokens of 16 questions); the
  # bound is about 3x that. Above 0 too: the LiteRT model did compute in int8.
  assert 0 < worst < 0.08, worst


@pytest.mark.slow  # exports the model twice
def test_one_window_runs_padded_on_its_length_s_signature_within_quantization_error(exports):
  """Each dev window alone (batch 1) runs on the single-window signature of the next length, padded
  under a 0 mask: its logits are as close to float32's as the batch path's (a padding the mask did
  not hide would move them by far more), for windows of many lengths. `window_logits` calls the
  model window by window at each one's own length: the same logits, 0 past each window."""
  qa = exports["int8"]
  int8 = qa.features_model
  assert int8.window_lengths == features_model.single_window_lengths(taught_model.SEQ)
  assert int8.window_lengths == [32, 64, 96, 128] and int8.runs_windows_alone
  assert int8.unpadded_length == taught_model.SEQ
  assert not exports["float32"].features_model.runs_windows_alone
  features = _dev_features(exports["float32"])
  float32_start, float32_end = exports["float32"].window_logits(features)
  int8_start, int8_end = qa.window_logits(features)
  lengths, worst = set(), 0.0
  for i, feature in enumerate(features):
    n = sum(feature.input_mask)  # the window's own tokens: no padding of ours
    lengths.add(n)
    start, end = int8(*[[getattr(feature, name)[:n]] for name in FEATURES])
    assert start.shape == end.shape == (1, n) and start.dtype == np.float32
    np.testing.assert_array_equal(int8_start[i], np.pad(start[0], (0, taught_model.SEQ - n)))
    np.testing.assert_array_equal(int8_end[i], np.pad(end[0], (0, taught_model.SEQ - n)))
    for want, got in ((float32_start[i, :n], start[0]), (float32_end[i, :n], end[0])):
      worst = max(worst, float(np.abs(got - want).max() / np.ptp(want)))
  assert len(lengths) >= 5 and min(lengths) < 96 and max(lengths) == taught_model.SEQ, lengths
  assert 0 < worst < 0.08, worst  # the bound of the batch path's test above

  # The windows that fill SEQ ran on the unpadded signature: the same logits as on the masked one.
  full = [f for f in features if sum(f.input_mask) == taught_model.SEQ]
  masked = features_model.LiteRTFeatures(
      os.path.join(exports["int8_dir"], features_model.INT8_MODEL_FILE))
  masked.unpadded_length = None  # every window on the [1, SEQ] signature and its mask
  inputs = [np.array([getattr(f, name) for f in full], np.int32) for name in FEATURES]
  assert len(full) >= 2 and inputs[1].all()
  for unpadded_logits, masked_logits in zip(int8(*inputs), masked(*inputs)):
    np.testing.assert_allclose(unpadded_logits, masked_logits, rtol=1e-5, atol=1e-5)


def test_litert_features_picks_the_single_window_signature_of_the_next_length(tmp_path):
  """A stand-in model whose logits name the signature that ran: each window of a call goes alone,
  padded (ids, mask and type ids 0), to the single-window signature of the next length at or above
  the call's, and comes back cut to it, or to the unpadded signature if it fills that one's length
  under a mask of ones; a longer call and a model without those signatures take the signature of
  any shape."""

  def signature(name, shape):
    added = 0.0 if shape[1] is None else float(shape[1])

    def logits(input_word_ids, input_mask, input_type_ids):
      ids, mask, types = (
          tf.cast(x, tf.float32) for x in (input_word_ids, input_mask, input_type_ids))
      return {"start_logits": ids + added, "end_logits": 100.0 * mask + types}

    logits.__name__ = name
    return tf.function(logits, input_signature=span_model.input_signature(shape))

  def unpadded(input_word_ids, input_type_ids):
    ids, types = (tf.cast(x, tf.float32) for x in (input_word_ids, input_type_ids))
    return {"start_logits": ids + 1000.0, "end_logits": 100.0 + types}

  ids_spec, _, types_spec = span_model.input_signature([1, 16])
  unpadded.__name__ = features_model.UNPADDED_WINDOW_SIGNATURE
  holder = tf.Module()
  functions = [signature(features_model.FEATURES_SIGNATURE, [None, None])]
  functions += [signature(f"{features_model.WINDOW_SIGNATURE_PREFIX}{n}", [1, n]) for n in (8, 16)]
  functions.append(tf.function(unpadded, input_signature=[ids_spec, types_spec]))
  path = str(tmp_path / "stand_in.tflite")
  with open(path, "wb") as f:
    f.write(features_model.int8_flatbuffer([fn.get_concrete_function() for fn in functions],
                                           holder))
  model = features_model.LiteRTFeatures(path)
  assert model.window_lengths == [8, 16] and model.unpadded_length == 16

  def call(ids):
    ids = np.array(ids, np.int32)
    return model(ids, np.ones_like(ids), np.ones_like(ids))

  cases = [
      ([[5, 6, 7]], 8),
      ([[1] * 8], 8),
      ([[1] * 9], 16),
      ([[2] * 17], 0),  # longer than every single-window signature
      ([[3, 4], [5, 6], [7, 8]], 8),
      ([[1] * 12, [2] * 12], 16),
      ([[1] * 16, [2] * 16], 1000),  # no padding: the unpadded signature
      ([[3] * 17, [4] * 17], 0),
  ]
  for ids, added in cases:
    start, end = call(ids)
    np.testing.assert_array_equal(start, np.array(ids, np.float32) + added)
    np.testing.assert_array_equal(end, np.full(np.shape(ids), 101.0, np.float32))
  # Of two windows at 16, the one whose mask hides a token runs masked, the full one unpadded.
  ids = np.array([[1] * 16, [2] * 16], np.int32)
  mask = np.ones_like(ids)
  mask[0, 15] = 0
  start, end = model(ids, mask, np.ones_like(ids))
  np.testing.assert_array_equal(start, ids + np.array([[16.0], [1000.0]], np.float32))
  np.testing.assert_array_equal(end[0], [101.0] * 15 + [1.0])

  # A model of one signature (as exported before the single-window ones): every call runs on it.
  path = str(tmp_path / "one_signature.tflite")
  with open(path, "wb") as f:
    f.write(features_model.int8_flatbuffer([functions[0].get_concrete_function()], holder))
  model = features_model.LiteRTFeatures(path)
  assert model.window_lengths == [] and model.unpadded_length is None
  np.testing.assert_array_equal(call([[5, 6, 7]])[0], [[5.0, 6.0, 7.0]])


def test_a_file_that_is_not_a_litert_model_is_refused_in_one_line(tmp_path):
  path = tmp_path / features_model.INT8_MODEL_FILE
  path.write_bytes(b"not a model" * 100)
  with pytest.raises(errors.UsageError) as error:
    features_model.LiteRTFeatures(str(path))
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith(f"{path}: not a LiteRT model (")
  assert message.endswith("; re-export with `squad-qa-export --serving_precision=int8`")


@pytest.mark.slow  # exports the model twice
def test_features_logits_inside_a_tf_function_equal_the_python_calls(exports):
  """The benchmarks' tensor path (tasks.evaluation.predict traces it) gives each export's own
  logits: the SavedModel's serve_features at every position, and the LiteRT model through
  tf.numpy_function on every window's tokens (it runs the batch's windows at the batch's width,
  `window_logits` each at its own and 0 past it)."""
  features = _dev_features(exports["float32"])[:8]
  width = max(sum(f.input_mask) for f in features)
  inputs = [
      tf.constant([getattr(f, name)[:width] for f in features], tf.int32) for name in FEATURES
  ]
  tokens = np.array([f.input_mask[:width] for f in features], bool)
  assert 0 < tokens.sum() < tokens.size  # windows of several lengths
  for name, compared in (("float32", np.ones_like(tokens)), ("int8", tokens)):
    qa = exports[name]
    start, end = tf.function(qa.features_logits)(*inputs)
    assert start.dtype == tf.float32 and start.shape == (8, width)
    want_start, want_end = qa.window_logits(features)
    np.testing.assert_allclose(start.numpy()[compared], want_start[:, :width][compared], atol=1e-5)
    np.testing.assert_allclose(end.numpy()[compared], want_end[:, :width][compared], atol=1e-5)


@pytest.mark.slow  # exports the model twice
def test_int8_answers_mostly_equal_float32_on_real_dev(exports):
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  float32 = exports["float32"].answers_with_serve_features(questions, contexts)
  int8 = exports["int8"].answers(questions, contexts)  # no serve_text: the Python path
  assert int8 == exports["int8"].answers_with_serve_features(questions, contexts)
  same = sum((a.text, a.start_char, a.end_char) == (b.text, b.start_char, b.end_char)
             for a, b in zip(float32, int8))
  # Measured: 15 of 16 identical; at least 13 of 16 (81 %) asserted.
  assert same >= 13, [(a.text, b.text) for a, b in zip(float32, int8)]
  assert all(
      b.text == c[b.start_char:b.end_char] and np.isfinite(b.score) for b, c in zip(int8, contexts))


def test_int8_answers_from_several_threads_equal_one_thread_s(exports):
  """A server answers from several threads: the LiteRT interpreter's runs must not mix (two
  threads' inputs in one run gave other questions' spans)."""
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  qa = exports["int8"]
  alone = [qa.answer(q, c) for q, c in zip(questions, contexts)]
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    threaded = list(pool.map(qa.answer, questions * 3, contexts * 3))
  assert threaded == alone * 3


def test_saved_model_qa_reads_its_vocab_after_the_process_changed_directory(exports, monkeypatch):
  """The Python tokenizer is built on first use, maybe after a server's chdir (gunicorn --chdir,
  a daemon's chdir("/")): the export folder given relative still answers."""
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  for precision in ("int8", "float32"):
    export_dir = exports[precision + "_dir"]
    monkeypatch.chdir(os.path.dirname(export_dir))
    qa = saved_model_qa.SavedModelQA(os.path.basename(export_dir))
    monkeypatch.chdir("/")
    got = qa.answer_with_serve_features(questions[0], contexts[0])
    assert got == exports[precision].answer_with_serve_features(questions[0],
                                                                contexts[0]), precision


def test_int8_threads_default_to_the_usable_cpus_and_are_a_setting(exports):
  """LiteRT's threads: the CPUs this process may run on (taskset, a cpuset), or num_threads; a
  SavedModel's are TensorFlow's, which the class cannot set: refused, not ignored."""
  assert exports["int8"].features_model.num_threads == len(os.sched_getaffinity(0))
  qa = saved_model_qa.SavedModelQA(exports["int8_dir"], num_threads=1)
  assert qa.features_model.num_threads == 1
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  assert qa.answer(questions[0], contexts[0]) == exports["int8"].answer(questions[0], contexts[0])
  with pytest.raises(errors.UsageError) as error:
    saved_model_qa.SavedModelQA(exports["float32_dir"], num_threads=1)
  assert str(error.value) == (
      f"num_threads=1: {exports['float32_dir']} is a float32 SavedModel, which runs on "
      f"TensorFlow's threads: set tf.config.threading.set_intra_op_parallelism_threads before "
      f"TensorFlow runs its first op")
  with pytest.raises(errors.UsageError, match=r"^num_threads=0: must be at least 1$"):
    saved_model_qa.SavedModelQA(exports["int8_dir"], num_threads=0)


NO_SPAN = ("must be at least 1 (below that no span can be an answer, and every prediction would "
           "be empty)")


@pytest.mark.parametrize("name, value, message", [
    ("n_best_size", 0, f"n_best_size=0: {NO_SPAN}"),
    ("max_answer_length", -1, f"max_answer_length=-1: {NO_SPAN}"),
    ("n_best_size", True, f"n_best_size=True: {NO_SPAN}"),
    ("null_score_diff_threshold", float("nan"),
     "null_score_diff_threshold=nan: must be a finite number of logits"),
    ("null_score_diff_threshold", 1.0, "null_score_diff_threshold=1.0: the export answers as SQuAD "
     "1.1 (version_2_with_negative=false), so no null answer is weighed; leave it None"),
])
def test_python_decoding_settings_are_checked_as_the_flags_are(exports, name, value, message):
  """What squad-qa-ask refuses, SavedModelQA refuses too, by the argument's name: 0 was the
  export's value, -1 "all but one", NaN a null rule that never fires."""
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  for precision in ("int8", "float32"):
    with pytest.raises(errors.UsageError) as error:
      exports[precision].answer_with_serve_features(questions[0], contexts[0], **{name: value})
    assert str(error.value) == message


@pytest.mark.slow  # exports the model twice
def test_the_int8_export_holds_vocab_config_and_litert_model_only(exports):
  export_dir = exports["int8_dir"]
  assert sorted(
      os.listdir(export_dir)) == ["assets", "assets.extra", features_model.INT8_MODEL_FILE]
  with open(os.path.join(export_dir, "assets.extra", "qa_config.json")) as f:
    config = json.load(f)
  with open(os.path.join(exports["float32_dir"], "assets.extra", "qa_config.json")) as f:
    float32_config = json.load(f)
  assert config == dict(float32_config, serving_precision="int8")
  with open(os.path.join(export_dir, features_model.VOCAB_ASSET), "rb") as f, \
      open(testutil.vocab_file(), "rb") as vocab:
    assert f.read() == vocab.read()
  qa = exports["int8"]
  assert qa.serving_precision == "int8" and not qa.has_serve_text
  assert isinstance(qa.features_model, features_model.LiteRTFeatures)
  assert qa.features_model.num_threads == os.cpu_count()


@pytest.mark.slow  # exports the model twice
def test_ask_answers_from_the_int8_export_as_float32_does(exports):
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  for question, context in list(zip(questions, contexts))[:2]:
    want = exports["float32"].answer_with_serve_features(question, context)
    _, output = testutil.run_cli("ask.py", f"--export_dir={exports['int8_dir']}",
                                 f"--question={question}", f"--context={context}")
    answer = [line for line in output.splitlines() if line.startswith("A: ")]
    assert "XNNPACK delegate" not in output  # the interpreter's first-run notice is held back
    assert answer and answer[0].startswith(
        f"A: {want.text!r} (characters {want.start_char}..{want.end_char}, "), output


@pytest.mark.slow  # exports the model twice
def test_without_litert_an_int8_export_is_refused_in_one_line(exports, monkeypatch):
  monkeypatch.setitem(sys.modules, "ai_edge_litert", None)
  monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
  with pytest.raises(errors.UsageError) as error:
    saved_model_qa.SavedModelQA(exports["int8_dir"])
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith("int8 exports run on LiteRT, which is not installed (")
  assert message.endswith("install it with `python -m pip install \"squad-qa[int8]\"` (or "
                          "`pip install -e \".[int8]\"` in a clone)")


@pytest.mark.slow  # exports the model twice
def test_ask_without_litert_says_so_in_one_line(exports, tmp_path):
  # A package of the same name that fails to import stands in for a missing install.
  fake = tmp_path / "no_litert" / "ai_edge_litert"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("raise ImportError(\"No module named 'ai_edge_litert'\")\n")
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [str(fake.parent)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
  code, output = testutil.run_cli("ask.py", f"--export_dir={exports['int8_dir']}",
                                  "--question=Who?", "--context=Someone.", expect_ok=False, env=env)
  assert code != 0
  errors_shown = [line for line in output.splitlines() if "LiteRT" in line]
  assert len(errors_shown) == 1, output
  assert "pip install \"squad-qa[int8]\"" in errors_shown[0]
  assert "Traceback" not in output


@pytest.mark.slow  # exports the model twice
def test_a_missing_litert_model_is_refused_in_one_line(exports, tmp_path):
  broken = tmp_path / "int8"
  os.makedirs(broken / "assets.extra")
  with open(os.path.join(exports["int8_dir"], "assets.extra", "qa_config.json")) as f:
    (broken / "assets.extra" / "qa_config.json").write_text(f.read())
  with pytest.raises(errors.MissingFileError) as error:
    saved_model_qa.SavedModelQA(str(broken))
  assert str(error.value) == (f"{broken / features_model.INT8_MODEL_FILE}: not found; re-export "
                              f"with `squad-qa-export --serving_precision=int8`")


def test_an_int8_export_without_its_vocab_is_a_damaged_export(exports, tmp_path):
  """As a float32 export without its vocab asset: one line naming the file, not a traceback."""
  damaged = tmp_path / "int8"
  shutil.copytree(exports["int8_dir"], damaged)
  os.remove(damaged / "assets" / "vocab.txt")
  with pytest.raises(saved_model_qa.DamagedExportError) as error:
    saved_model_qa.SavedModelQA(str(damaged))
  assert str(error.value) == (
      f"--export_dir={damaged}: damaged export ({damaged / 'assets' / 'vocab.txt'} is missing); "
      f"write it again with `squad-qa-export --export_dir={damaged}` and the --model_dir or "
      f"--init_checkpoint it was made from")


def test_an_int8_export_gives_no_speed_warning_even_without_int8_dot_products(caplog):
  """LiteRT's int8 answered 25-60 % faster than float32 on a Zen 3 without VNNI (docs/serving.md
  "int8 (LiteRT)"): a warning that it may be slower there would not be true."""
  warn = saved_model_qa.warn_if_slow_precision
  with caplog.at_level(std_logging.WARNING, logger="absl"):
    assert not warn("int8", cpuinfo=reduced.ZEN3, has_gpu=False)
    assert warn("bfloat16", cpuinfo=reduced.ZEN3, has_gpu=False)  # the same CPU, a slow export
  assert [r.getMessage().split(",")[0] for r in caplog.records
         ] == ["this SavedModel computes in bfloat16"]


@pytest.mark.slow  # exports the model twice
def test_ask_refuses_a_decoding_setting_serve_text_would_not_apply(exports):
  questions, contexts = reduced._dev_questions()  # pylint: disable=protected-access
  asked = dict(export_dir=exports["float32_dir"], question=questions[0], context=contexts[0],
               max_answer_length=1)
  with pytest.raises(errors.UsageError) as error:
    saved_model_qa.answer_questions(saved_model_qa.AskConfig(**asked))
  assert str(error.value) == (
      "--max_answer_length=1: serve_text was exported with max_answer_length=30, which it "
      "applies; add --use_serve_features, or re-export with --max_answer_length=1")
  # On the Python path the setting applies: a span of one token.
  [(_, answer, _)
  ] = saved_model_qa.answer_questions(saved_model_qa.AskConfig(**asked, use_serve_features=True))[0]
  assert answer == exports["float32"].answer_with_serve_features(questions[0], contexts[0],
                                                                 max_answer_length=1)
  assert len(exports["float32"].tokenizer.tokenize([answer.text])[0].ids) == 1


@pytest.mark.slow  # exports the model twice
def test_ask_warns_that_a_question_past_max_query_length_is_cut(exports, monkeypatch):
  warned = []
  monkeypatch.setattr(saved_model_qa.logging, "warning",
                      lambda *args: warned.append(args[0] % args[1:]))
  long_question = "please tell me, " * 30 + "who won?"  # 123 tokens
  context = "The Broncos won the game in Santa Clara."
  for precision in ("float32", "int8"):
    saved_model_qa.answer_questions(
        saved_model_qa.AskConfig(export_dir=exports[precision + "_dir"],
                                 question=(long_question, "Who won?"), context=context))
  assert warned == [
      "question 'please tell me, please tell me, please tell me, please te...' has 123 tokens; "
      f"the export reads the first {exports['float32'].config['max_query_length']} "
      "(max_query_length)"
  ] * 2
  assert exports["int8"].config["max_query_length"] == exports["float32"].config[
      "max_query_length"] == 32
