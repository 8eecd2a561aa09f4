"""export.py --version_2_with_negative against what the run trained on: refused in one line for a
model trained on SQuAD 1.1 records (its qa_config.json says version_2_with_negative=false), as
train.py refuses --noversion_2_with_negative on SQuAD 2.0 records."""

import dataclasses
import os

import pytest

from squad_qa import errors
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.serving import export_model
from squad_qa.serving import module as serving_module
from tests import testutil


def squad_1_1_model_dir(folder):
  """A --model_dir as train.py leaves it after training on SQuAD 1.1 records (untrained tiny
  weights: the refusal comes before they are read)."""
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  qa_config = dict(max_seq_length=64, doc_stride=16, max_query_length=16, do_lower_case=True,
                   **dict(serving_module.DECODING_DEFAULTS, version_2_with_negative=False))
  return testutil.write_model_dir(folder, model, qa_config)


def refusal(model_dir, command):
  return (f"--version_2_with_negative: --model_dir={model_dir} was trained on SQuAD 1.1 records "
          f"(its qa_config.json: version_2_with_negative=false) and never learned to answer "
          f"nothing; drop the flag, or export a model trained on records made with `{command} "
          f"--version_2_with_negative`")


def test_null_answers_for_a_squad_1_1_model_are_refused_before_any_work(tmp_path):
  model_dir = squad_1_1_model_dir(str(tmp_path / "model_out"))
  export_dir = str(tmp_path / "export")
  with pytest.raises(errors.UsageError) as raised:
    export_model.export_model(
        export_model.ExportConfig(export_dir=export_dir, model_dir=model_dir,
                                  version_2_with_negative=True))
  assert str(raised.value) == refusal(model_dir, "squad-qa-records")
  assert sorted(os.listdir(tmp_path)) == ["model_out"]  # no export, no lock left beside it


@pytest.mark.parametrize("given, recorded", [(True, {
    "version_2_with_negative": True
}), (True, {}), (False, {
    "version_2_with_negative": False
})])
def test_null_answers_are_served_when_the_run_learned_them_or_records_nothing(given, recorded):
  """SQuAD 2.0 runs, checkpoints without a qa_config.json (the flag decides) and SQuAD 1.1 runs
  exported without the flag pass the check."""
  config = export_model.ExportConfig(export_dir="export", version_2_with_negative=given)
  assert export_model.check_version_2(config, recorded, "--model_dir=model_out") is None
  assert export_model.decoding_config(config, recorded)["version_2_with_negative"] is given


@pytest.mark.parametrize("recorded, trained", [
    ({
        "version_2_with_negative": False
    }, "was trained on SQuAD 1.1 records"),
    ({}, "is served as SQuAD 1.1 without --version_2_with_negative"),
])
def test_a_threshold_for_answers_as_squad_1_1_is_refused(recorded, trained):
  config = export_model.ExportConfig(export_dir="export", null_score_diff_threshold=-2.0,
                                     typed_flags=("null_score_diff_threshold",))
  with pytest.raises(errors.UsageError) as raised:
    export_model.check_version_2(config, recorded, "--model_dir=model_out")
  assert str(
      raised.value) == (f"--null_score_diff_threshold=-2.0: --model_dir=model_out {trained}: "
                        f"every question gets a span, and no null answer is weighed; drop "
                        f"the flag")
  untyped = dataclasses.replace(config, typed_flags=())
  assert export_model.check_version_2(untyped, recorded, "--model_dir=model_out") is None
  if not recorded:  # an outside checkpoint served as SQuAD 2.0 weighs the null answer
    served_2 = dataclasses.replace(
        config, version_2_with_negative=True,
        typed_flags=("null_score_diff_threshold", "version_2_with_negative"))
    assert export_model.check_version_2(served_2, recorded, "--model_dir=model_out") is None
  assert export_model.check_version_2(config, {"version_2_with_negative": True},
                                      "--model_dir=model_out") is None


def test_noversion_2_serves_a_squad_2_0_run_always_answering_with_a_span():
  recorded = {"version_2_with_negative": True}
  typed = export_model.ExportConfig(export_dir="export", version_2_with_negative=False,
                                    typed_flags=("version_2_with_negative",))
  assert export_model.check_version_2(typed, recorded, "--model_dir=model_out") is None
  assert export_model.decoding_config(typed, recorded)["version_2_with_negative"] is False
  untyped = dataclasses.replace(typed, typed_flags=())  # the run decides
  assert export_model.decoding_config(untyped, recorded)["version_2_with_negative"] is True
  with_threshold = dataclasses.replace(
      typed, null_score_diff_threshold=1.0,
      typed_flags=("version_2_with_negative", "null_score_diff_threshold"))
  with pytest.raises(errors.UsageError) as raised:
    export_model.check_version_2(with_threshold, recorded, "--model_dir=model_out")
  assert str(raised.value) == (
      "--null_score_diff_threshold=1.0: --model_dir=model_out is served as SQuAD 1.1 "
      "(--noversion_2_with_negative): every question gets a span, and no null answer is weighed; "
      "drop the flag")


@pytest.mark.slow
def test_the_command_refuses_in_one_line(tmp_path):
  model_dir = squad_1_1_model_dir(str(tmp_path / "model_out"))
  code, output = testutil.run_cli("export.py", f"--model_dir={model_dir}",
                                  f"--export_dir={tmp_path / 'export'}",
                                  "--version_2_with_negative", expect_ok=False)
  assert code == 1 and "Traceback" not in output
  assert output.strip().splitlines()[-1] == (
      f"export.py: {refusal(model_dir, 'python preprocess/make_records.py')}")
  assert not os.path.exists(tmp_path / "export")


SCORED = {
    "f1": 55.0,
    "best_f1": 61.25,
    "best_f1_thresh": 4.8223,
    "total": 100,
    "null_score_diff_threshold": 0.0
}
SERVED = {"version_2_with_negative": True, "null_score_diff_threshold": 0.0}


@pytest.mark.parametrize(
    "results, served, line",
    [
        (SCORED, SERVED, "eval_results.json: on its 100 dev questions, "
         "null_score_diff_threshold=4.822 scored F1 61.25 against 55.00 at the served 0; "
         "--null_score_diff_threshold=4.822 serves at it"),
        (dict(SCORED, best_f1=55.004), SERVED, None),  # no better than the served threshold
        (dict(SCORED, null_score_diff_threshold=1.5), SERVED, None),  # scored under another one
        (SCORED, dict(SERVED, version_2_with_negative=False), None),  # answers as SQuAD 1.1
        ({
            "f1": 80.0,
            "exact": 70.0
        }, SERVED, None),  # SQuAD 1.1 scoring: no best_f1
        (None, SERVED, None),
    ])
def test_export_names_the_threshold_its_scoring_found_better(results, served, line):
  """A SQuAD 2.0 model scored by train.py: the official scorer's best_f1_thresh, when it beat the
  threshold the export serves on the same questions, is named with the flag that serves it."""
  assert export_model.better_threshold(results, served) == line
