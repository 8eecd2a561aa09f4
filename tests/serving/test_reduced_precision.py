"""export.py --serving_precision=bfloat16: the same trained weights served with a bfloat16 encoder.

The taught tiny model's checkpoint (tests/serving/taught_model.py) goes through export.py's own
path (`export_model.export_model` from a --model_dir) once in float32 and once in bfloat16, and the
two exports are compared on real SQuAD dev questions.
"""

import json
import logging as std_logging
import os

from absl import flags
from absl.testing import flagsaver
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa import errors
from squad_qa.flags import command_line
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import precision
from squad_qa.model import span_model
from squad_qa.preprocess import squad_reader
from squad_qa.serving import export_model
from squad_qa.serving import saved_model_qa
from tests import testutil

# 16 dev questions, one every 25 of the first 400: several articles, not one paragraph's questions.
NUM_DEV, DEV_STEP = 16, 25

# /proc/cpuinfo excerpts: an AMD Zen 4 (AVX512-BF16), a Zen 3 (AVX2 only), an Intel Sapphire
# Rapids (AMX, listed before its AVX512-BF16), an ARM server (no "flags" line).
ZEN4 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu vme avx2 avx512f avx512_bf16 "
        "avx512_vnni\nbugs\t\t: sysret_ss_attrs\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n")
ZEN3 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu vme sse avx avx2 fma\n"
SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd bf16\n"


def _dev_questions():
  squad = squad_reader.read_squad(str(testutil.DEV_FILE), is_training=False,
                                  max_examples=NUM_DEV * DEV_STEP)
  examples = squad.examples[::DEV_STEP]
  return ([e.question_text for e in examples],
          [squad.contexts[e.paragraph_index] for e in examples])


def _model_dir_of(served, folder):
  """A --model_dir as train.py leaves it, of the taught model (testutil.write_model_dir)."""
  return testutil.write_model_dir(folder, served["model"], served["qa_config"])


class _Lines(std_logging.Handler):

  def __init__(self):
    super().__init__()
    self.lines = []

  def emit(self, record):
    self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def exports(served, tmp_path_factory):
  """The same checkpoint exported by export.py's code in both precisions: {precision:
  SavedModelQA, precision + "_dir": its folder, "policies": {precision: the global tf_keras
  policy after that export}, "log": the absl lines of both exports}."""
  tmp = tmp_path_factory.mktemp("precision")
  model_dir = _model_dir_of(served, str(tmp / "model_out"))
  result = {"policies": {}}
  lines = _Lines()
  absl_logger = std_logging.getLogger("absl")
  absl_logger.addHandler(lines)
  level = absl_logger.level
  try:
    for name in ("float32", "bfloat16", "float16"):
      absl_logger.setLevel(std_logging.INFO)  # saving a SavedModel lowers absl's verbosity
      export_dir = str(tmp / name)
      export_model.export_model(
          export_model.ExportConfig(export_dir=export_dir, model_dir=model_dir,
                                    serving_precision=name))
      result["policies"][name] = tf_keras.mixed_precision.global_policy().name
      result[name] = saved_model_qa.SavedModelQA(export_dir)
      result[name + "_dir"] = export_dir
  finally:
    absl_logger.removeHandler(lines)
    absl_logger.setLevel(level)
  result["log"] = lines.lines
  return result


def _worst_logit_gap(exports, name):
  """The largest |logit - float32's logit| over the real tokens of the dev questions' windows, as a
  share of float32's logit range, through each export's serve_features; the logits must stay
  float32 (the span head computes in float32 in every precision)."""
  questions, contexts = _dev_questions()
  features = [f for q, c in zip(questions, contexts) for f in exports["float32"].features(q, c)]
  inputs = [
      tf.constant([getattr(f, key) for f in features], tf.int32)
      for key in ("input_ids", "input_mask", "segment_ids")
  ]
  mask = np.array([f.input_mask for f in features], bool)
  worst = 0.0
  for want, got in zip(exports["float32"].features_logits(*inputs),
                       exports[name].features_logits(*inputs)):
    assert got.dtype == tf.float32
    want, got = want.numpy()[mask], got.numpy()[mask]
    worst = max(worst, float(np.abs(got - want).max() / np.ptp(want)))
  return worst


def test_bfloat16_logits_are_within_bfloat16_rounding_of_float32(exports):
  worst = _worst_logit_gap(exports, "bfloat16")
  # Measured 0.016 of the float32 logits' range (max over the real tokens of 16 questions); the
  # bound is 3x that. Above 0 too: the encoder did compute in bfloat16 (the float32 export gives
  # the checkpoint's logits to the last bit).
  assert 0 < worst < 0.05, worst


def test_float16_logits_are_within_float16_rounding_of_float32(exports):
  worst = _worst_logit_gap(exports, "float16")
  # float16 keeps 3 more mantissa bits than bfloat16: 8x finer rounding than bfloat16's bound.
  assert 0 < worst < 0.05 / 8, worst
  questions, contexts = _dev_questions()
  answers = exports["float16"].answers(questions, contexts)
  same = sum(
      a.text == b.text for a, b in zip(exports["float32"].answers(questions, contexts), answers))
  assert same >= 15, [a.text for a in answers]


def test_bfloat16_answers_mostly_equal_float32_on_real_dev(exports):
  questions, contexts = _dev_questions()
  float32 = exports["float32"].answers(questions, contexts)
  bfloat16 = exports["bfloat16"].answers(questions, contexts)
  same = sum((a.text, a.start_char, a.end_char) == (b.text, b.start_char, b.end_char)
             for a, b in zip(float32, bfloat16))
  # Measured: 16 of 16 identical; at least 14 of 16 (87.5 %) asserted.
  assert same >= 14, [(a.text, b.text) for a, b in zip(float32, bfloat16)]
  assert all(b.text and np.isfinite(b.score) for b in bfloat16)


def test_the_export_records_its_precision(exports):
  for name in ("float32", "bfloat16", "float16"):
    with open(os.path.join(exports[name + "_dir"], "assets.extra", "qa_config.json")) as f:
      assert json.load(f)["serving_precision"] == name
    assert exports[name].serving_precision == name
  sources = [line for line in exports["log"] if line.startswith("serving ")]
  assert len(sources) == 3
  assert sources[0].endswith("serving_precision=float32 (default)")
  assert sources[1].endswith("serving_precision=bfloat16 (--serving_precision)")
  assert sources[2].endswith("serving_precision=float16 (--serving_precision)")


def test_the_global_policy_stays_float32_after_a_reduced_precision_export(exports):
  assert exports["policies"] == {"float32": "float32", "bfloat16": "float32", "float16": "float32"}
  assert tf_keras.mixed_precision.global_policy().name == "float32"


def _signature_dtypes(qa):
  loaded = qa._loaded  # pylint: disable=protected-access
  return {
      name: (sorted((k, v.dtype.name) for k, v in fn.structured_input_signature[1].items()),
             sorted((k, v.dtype.name) for k, v in fn.structured_outputs.items())
            ) for name, fn in loaded.signatures.items()
  }


def _graph_has_bfloat16(qa, signature):
  graph_def = qa._loaded.signatures[signature].graph.as_graph_def()  # pylint: disable=protected-access
  return "DT_BFLOAT16" in str(graph_def)


def test_signatures_and_their_dtypes_are_unchanged(exports):
  float32, bfloat16 = (_signature_dtypes(exports[name]) for name in ("float32", "bfloat16"))
  assert float32 == bfloat16
  assert set(float32) == {"serving_default", "serve_text", "serve_features", "serve_examples"}
  assert dict(float32["serve_features"][1]) == {"start_logits": "float32", "end_logits": "float32"}
  for signature in ("serve_text", "serve_features", "serve_examples"):
    assert _graph_has_bfloat16(exports["bfloat16"], signature)
    assert not _graph_has_bfloat16(exports["float32"], signature)


def test_the_span_model_builds_its_encoder_in_the_policy_given():
  config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  model, encoder = span_model.build_span_model(config, "mixed_bfloat16")
  assert tf_keras.mixed_precision.global_policy().name == "float32"
  assert span_model.encoder_compute_dtype(model) == "bfloat16"
  assert {v.dtype for v in model.variables} == {tf.float32}  # the checkpoint's variables
  head = model.labeler.span_labeling
  assert head.compute_dtype == "float32"  # float32 logits from bfloat16 hidden states
  computes = {
      layer.compute_dtype for layer in encoder.submodules
      if isinstance(layer, tf_keras.layers.EinsumDense)
  }
  assert computes == {"bfloat16"}
  float32_model, _ = span_model.build_span_model(config)
  assert span_model.encoder_compute_dtype(float32_model) == "float32"
  assert [v.name for v in float32_model.variables] == [v.name for v in model.variables]


def test_a_global_policy_is_restored_after_an_error():
  with pytest.raises(RuntimeError):
    with precision.global_policy("mixed_bfloat16"):
      assert tf_keras.mixed_precision.global_policy().name == "mixed_bfloat16"
      raise RuntimeError("build failed")
  assert tf_keras.mixed_precision.global_policy().name == "float32"


def test_an_unknown_precision_is_refused_in_one_line_by_the_config_and_the_flag():
  with pytest.raises(errors.UsageError) as error:
    export_model.ExportConfig(serving_precision="int4")
  assert str(
      error.value) == ("--serving_precision=int4: expected one of float32, bfloat16, float16, "
                       "int8")
  from squad_qa import export  # noqa: F401  (its flags)
  assert flags.FLAGS["serving_precision"].default == "float32"
  assert "int8: the encoder's matmul weights quantized" in flags.FLAGS["serving_precision"].help
  with flagsaver.flagsaver():
    with pytest.raises(SystemExit) as exit_:
      command_line.parse_flags(["export.py", "--serving_precision=int4"])
  message = str(exit_.value.code)
  assert "\n" not in message
  assert message.startswith("export.py: flag --serving_precision=int4: value should be one of")
  assert "float32|bfloat16|float16|int8" in message


@pytest.mark.parametrize("cpuinfo, native", [(ZEN4, True), (ZEN3, False), (SAPPHIRE_RAPIDS, True),
                                             (ARM, None), ("", None)])
def test_native_bfloat16_is_read_from_cpuinfo(cpuinfo, native):
  assert precision.cpu_has_native_bfloat16(cpuinfo) is native


def test_a_bfloat16_export_warns_once_where_bfloat16_is_slow(caplog):
  warn = saved_model_qa.warn_if_slow_precision
  with caplog.at_level(std_logging.WARNING, logger="absl"):
    assert warn("bfloat16", cpuinfo=ZEN3, has_gpu=False)
  assert len(caplog.records) == 1 and "\n" not in caplog.records[0].getMessage()
  assert "slower here than a float32 export" in caplog.records[0].getMessage()
  assert not warn("bfloat16", cpuinfo=ZEN4, has_gpu=False)
  assert not warn("bfloat16", cpuinfo=ZEN3, has_gpu=True)
  assert not warn("bfloat16", cpuinfo=ARM, has_gpu=False)  # cannot tell: no warning
  assert not warn("float32", cpuinfo=ZEN3, has_gpu=False)


def test_a_float16_export_warns_on_any_cpu_without_a_gpu(caplog):
  warn = saved_model_qa.warn_if_slow_precision
  with caplog.at_level(std_logging.WARNING, logger="absl"):
    assert warn("float16", cpuinfo=ZEN4, has_gpu=False)  # even with fast bfloat16
    assert warn("float16", cpuinfo=ARM, has_gpu=False)
  assert len(caplog.records) == 2
  assert caplog.records[0].getMessage() == (
      "this SavedModel computes in float16, but CPUs have no fast float16 matmuls and no GPU is "
      "visible: it will answer slower here than a float32 export (squad-qa-export "
      "--serving_precision=float32)")
  assert not warn("float16", cpuinfo=ZEN3, has_gpu=True)
