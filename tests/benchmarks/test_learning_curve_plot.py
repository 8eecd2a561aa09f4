"""benchmarks/learning_curve_plot.py: the series it draws are the files' values, the PNG is written,
bad input is a one-line user error."""

import json
import struct

import pytest

from benchmarks import learning_curve_plot
from squad_qa import errors
from squad_qa.tasks import learning_curve

ROWS = ((40, 640, 300.0, 20.5, 30.25, 2.5),
        (80, 1280, 600.0, 35.0, 47.5, 1.75),
        (120, 1920, 900.0, 41.25, 54.0, 1.5))


def write_csv(path, rows=ROWS, header=learning_curve.CSV_FIELDS):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("\n".join([",".join(header)] + [",".join(str(v) for v in row) for row in rows])
                  + "\n", encoding="utf-8")
  return str(path)


def write_peer(path, train_s, exact_match, f1):
  path.write_text(json.dumps({"train_s": train_s, "steps": 150, "exact_match": exact_match,
                              "f1": f1, "torch": "2.13.0"}), encoding="utf-8")
  return str(path)


def png_size(path):
  with open(path, "rb") as f:
    head = f.read(24)
  assert head[:8] == b"\x89PNG\r\n\x1a\n"
  return struct.unpack(">II", head[16:24])


def test_the_series_are_the_inputs_and_the_png_is_drawn(tmp_path):
  ours = write_csv(tmp_path / "run_a" / "learning_curve.csv")
  peer = [write_peer(tmp_path / "hf40.json", 2400.0, 40.0, 51.5),
          write_peer(tmp_path / "hf20.json", 1200.0, 31.7, 42.1)]
  series = learning_curve_plot.curves([ours], peer_results=peer, peer_label="HF")
  assert series == [
      learning_curve_plot.Series("run_a", "ours", (5.0, 10.0, 15.0), (20.5, 35.0, 41.25),
                                 (30.25, 47.5, 54.0)),
      learning_curve_plot.Series("HF", "peer", (20.0, 40.0), (31.7, 40.0), (42.1, 51.5))]
  assert learning_curve_plot.curves([ours], ["bf16"])[0].label == "bf16"
  output = tmp_path / "plot" / "curve.png"
  size = learning_curve_plot.plot(series, str(output), target_f1=70)
  assert size == (1100, 450)
  assert png_size(output) == size
  assert output.stat().st_size > 10_000  # two panels with lines, not an empty canvas


def test_a_single_peer_budget_is_one_point(tmp_path):
  series = learning_curve_plot.curves([], peer_results=[write_peer(tmp_path / "p.json", 90, 9.8,
                                                                   15.5)])
  assert series == [learning_curve_plot.Series("peer", "peer", (1.5,), (9.8,), (15.5,))]
  assert learning_curve_plot.plot(series, str(tmp_path / "p.png")) == (1100, 450)
  assert png_size(tmp_path / "p.png") == (1100, 450)


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "nothing.csv", "--learning_curves: no file"),
    (lambda d: write_csv(d / "x" / "c.csv", header=("step", "seconds", "em", "f1")),
     "has columns step,seconds,em,f1, not step,examples,train_seconds,exact_match,f1,loss"),
    (lambda d: write_csv(d / "x" / "c.csv", rows=()), "has no rows"),
    (lambda d: write_csv(d / "x" / "c.csv", rows=((1, 2, "soon", 4, 5, 6),)), "not a number"),
])
def test_bad_learning_curves_are_one_line_errors(tmp_path, make, message):
  with pytest.raises(errors.UserError, match=message) as raised:
    learning_curve_plot.curves([str(make(tmp_path))])
  assert "\n" not in str(raised.value)


def test_bad_peer_results_are_one_line_errors(tmp_path):
  with pytest.raises(errors.MissingFileError, match="--peer_results: no file"):
    learning_curve_plot.curves([], peer_results=[str(tmp_path / "none.json")])
  (tmp_path / "bad.json").write_text('{"f1": 3}', encoding="utf-8")
  with pytest.raises(errors.UsageError, match="has no train_s, steps, exact_match") as raised:
    learning_curve_plot.curves([], peer_results=[str(tmp_path / "bad.json")])
  assert "\n" not in str(raised.value)
  with pytest.raises(errors.UsageError, match="2 labels for 1"):
    learning_curve_plot.curves([write_csv(tmp_path / "a" / "c.csv")], ["x", "y"])
  with pytest.raises(errors.UsageError, match="give --learning_curves"):
    learning_curve_plot.curves([])
