"""benchmarks/precision_axis.py: the best of each side, the ratio, identical answers, flag checks."""

import pytest

from benchmarks import precision_axis
from squad_qa import errors


def test_best_skips_missing_values_and_knows_the_direction():
  assert precision_axis.best({"float32": 30.0, "bfloat16": 45.5, "int8": None}, True) == (
      "bfloat16", 45.5)
  assert precision_axis.best({"float32": 30.0, "bfloat16": 45.5}, False) == ("float32", 30.0)
  assert precision_axis.best({"int8": None}, True) is None


def test_identical_share_counts_the_reference_questions():
  reference = {"q1": "Denver Broncos", "q2": "1990", "q3": "Santa Clara", "q4": "gold"}
  answers = {"q1": "Denver Broncos", "q2": "in 1990", "q3": "Santa Clara"}  # q4 missing
  assert precision_axis.identical_share(answers, reference) == 0.5
  assert precision_axis.identical_share(reference, reference) == 1.0
  assert precision_axis.identical_share(answers, None) is None


def test_the_table_has_every_precision_and_ours_best_over_the_peers_best(capsys):
  precision_axis.print_table(
      "measure", ["float32", "bfloat16"], ["float32", "bfloat16", "int8"],
      [("p50 ms", {"float32": 40.0, "bfloat16": 25.0}, {"float32": 50.0, "bfloat16": 30.0,
                                                        "int8": 20.0}, ".1f", False),
       ("questions/s", {"float32": 30.0, "bfloat16": 45.0}, {"float32": 20.0, "bfloat16": 36.0,
                                                             "int8": None}, ".1f", True),
       ("identical (%)", {"float32": 100.0, "bfloat16": 98.5}, {}, ".2f", None)])
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == ("| measure | ours float32 | ours bfloat16 | HF float32 | HF bfloat16 | "
                      "HF int8 | ours best / HF best |")
  assert lines[2] == "| p50 ms | 40.0 | 25.0 | 50.0 | 30.0 | 20.0 | 1.25 (bfloat16 / int8) |"
  assert lines[3] == "| questions/s | 30.0 | 45.0 | 20.0 | 36.0 | - | 1.25 (bfloat16 / bfloat16) |"
  assert lines[4] == "| identical (%) | 100.00 | 98.50 | - | - | - | - |"


def test_peer_precisions_are_checked():
  assert precision_axis.check_peer_precisions(["int8", "float32"]) == ["int8", "float32"]
  for bad in (["float16"], ["int8", "int8"], []):
    with pytest.raises(errors.UsageError, match="--peer_precisions=") as raised:
      precision_axis.check_peer_precisions(bad)
    assert "\n" not in str(raised.value)


def test_exports_are_needed_once_per_precision(tmp_path):
  with pytest.raises(errors.UsageError, match="give --export_dirs"):
    precision_axis.load_exports([])
  with pytest.raises(errors.MissingFileError, match="no SavedModel there"):
    precision_axis.load_exports([str(tmp_path)])


def test_the_peer_command_runs_its_script_through_peer_precision():
  assert precision_axis.peer_command("/peer/python", "int8", "bench.py", "--calls", "3") == [
      "/peer/python", precision_axis.PEER_PRECISION_SCRIPT, "--precision=int8", "bench.py",
      "--calls", "3"]
