r"""Dev EM and F1 against training minutes, ours and the peer's, drawn into one PNG.

  python -m benchmarks.learning_curve_plot --output=learning_curve.png \
      --learning_curves=model_out/learning_curve.csv[,other/learning_curve.csv] \
      [--labels=ours float32,ours bfloat16] \
      [--peer_results=hf_20min.json,hf_40min.json] [--peer_label=HF Trainer] [--target_f1=70]

Ours: each `learning_curve.csv` that `train.py --eval_every_steps` writes (tasks/learning_curve.py:
one row per scoring, `train_seconds` being training time alone) is a line, labelled by --labels
(default: the CSV's folder name). The peer: each result JSON of the peer's `finetune_eval.py
--json` (a fixed wall-clock budget, then EM/F1 on the first dev questions; keys `train_s`,
`steps`, `exact_match`, `f1`) is one point at its training minutes; several budgets make a line.
--target_f1 draws a horizontal line at that F1. Two panels: EM on the left, F1 on the right.

matplotlib is the `bench` extra (`pip install -e ".[bench]"`), imported only to draw.
"""

import dataclasses
import json
import os

from absl import flags

from squad_qa import errors
from squad_qa.flags import command_line
from squad_qa.tasks import learning_curve

# What a peer result JSON must hold (finetune_eval.py --json).
PEER_KEYS = ("train_s", "steps", "exact_match", "f1")
EXTRA = "bench"

flags.DEFINE_list("learning_curves", [], "Our learning_curve.csv files (train.py "
                  "--eval_every_steps), one line each.")
flags.DEFINE_list("labels", [], "A legend label per --learning_curves file (default: its folder).")
flags.DEFINE_list("peer_results", [], "The peer's finetune_eval.py --json result files, one point "
                  "each (a line when several).")
flags.DEFINE_string("peer_label", "peer (HF on PyTorch)", "Legend label of the peer's points.")
flags.DEFINE_float("target_f1", None, "Draw a horizontal line at this dev F1 (percent).")
flags.DEFINE_string("output", "learning_curve.png", "The PNG to write.")
FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Series:
  """One curve: training minutes and dev EM / F1 (percent), in order of minutes.

  Attributes:
    label: the legend's text.
    side: "ours" or "peer".
    minutes, exact_match, f1: equally long tuples of floats.
  """
  label: str
  side: str
  minutes: tuple
  exact_match: tuple
  f1: tuple


def read_ours(path, label=None):
  """A learning_curve.csv as a Series (side "ours"); minutes = train_seconds / 60.

  Raises:
    errors.MissingFileError: no such file.
    errors.UsageError: its header is not tasks/learning_curve.CSV_FIELDS, a value is not a number,
      or it has no rows.
  """
  if not os.path.isfile(path):
    raise errors.MissingFileError(f"--learning_curves: no file {path} (train.py "
                                  f"--eval_every_steps writes learning_curve.csv in --model_dir)")
  with open(path, encoding="utf-8") as f:
    header = f.readline().strip().split(",")
  if tuple(header) != learning_curve.CSV_FIELDS:
    raise errors.UsageError(f"--learning_curves: {path} has columns {','.join(header)}, not "
                            f"{','.join(learning_curve.CSV_FIELDS)}")
  try:
    rows = learning_curve.read_rows(path)
  except (ValueError, TypeError) as e:
    raise errors.UsageError(f"--learning_curves: {path}: a value is not a number ({e})") from None
  if not rows:
    raise errors.UsageError(f"--learning_curves: {path} has no rows")
  rows.sort(key=lambda row: row["train_seconds"])
  return Series(label or os.path.basename(os.path.dirname(os.path.abspath(path))), "ours",
                tuple(row["train_seconds"] / 60 for row in rows),
                tuple(row["exact_match"] for row in rows), tuple(row["f1"] for row in rows))


def read_peer(paths, label):
  """The peer's result JSONs as one Series (side "peer"), a point each, in order of train_s.

  Raises:
    errors.MissingFileError: a file is not there.
    errors.UsageError: a file is not JSON, or lacks one of PEER_KEYS.
  """
  points = []
  for path in paths:
    if not os.path.isfile(path):
      raise errors.MissingFileError(f"--peer_results: no file {path} (the peer's finetune_eval.py "
                                    f"--json writes it)")
    try:
      with open(path, encoding="utf-8") as f:
        result = json.load(f)
    except ValueError as e:
      raise errors.UsageError(f"--peer_results: {path} is not JSON ({e})") from None
    missing = [key for key in PEER_KEYS if not isinstance(result, dict) or key not in result]
    if missing:
      raise errors.UsageError(f"--peer_results: {path} has no {', '.join(missing)} (not a "
                              f"finetune_eval.py --json result)")
    points.append((float(result["train_s"]) / 60, float(result["exact_match"]),
                   float(result["f1"])))
  points.sort()
  return Series(label, "peer", tuple(p[0] for p in points), tuple(p[1] for p in points),
                tuple(p[2] for p in points))


def curves(learning_curves, labels=(), peer_results=(), peer_label="peer"):
  """Every series to draw: one per learning_curves CSV, then the peer's (when peer_results).

  Raises:
    errors.UsageError: nothing to draw, or labels given but not one per CSV; and as `read_ours`,
      `read_peer`.
  """
  if not learning_curves and not peer_results:
    raise errors.UsageError("give --learning_curves and/or --peer_results")
  if labels and len(labels) != len(learning_curves):
    raise errors.UsageError(f"--labels: {len(labels)} labels for {len(learning_curves)} "
                            f"--learning_curves files; give one each or none")
  series = [read_ours(path, labels[i] if labels else None)
            for i, path in enumerate(learning_curves)]
  if peer_results:
    series.append(read_peer(peer_results, peer_label))
  return series


def plot(series, output, target_f1=None):
  """Draws `series` (from `curves`) into the PNG `output`: EM and F1 panels against minutes.

  Ours are solid lines with dots; the peer's dashed with squares (a lone point when one budget).
  `target_f1` (percent) adds a horizontal line on the F1 panel.

  Returns:
    (width, height) of the PNG in pixels.

  Raises:
    errors.UsageError: matplotlib is not installed (the `bench` extra).
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise errors.UsageError(f'matplotlib is not installed: pip install -e ".[{EXTRA}]"') from None
  figure, axes = pyplot.subplots(1, 2, figsize=(11, 4.5), dpi=100)
  for ax, metric, name in ((axes[0], "exact_match", "dev EM (%)"), (axes[1], "f1", "dev F1 (%)")):
    for s in series:
      style = dict(marker="o", linestyle="-") if s.side == "ours" else dict(marker="s",
                                                                            linestyle="--")
      ax.plot(s.minutes, getattr(s, metric), label=s.label, **style)
    if metric == "f1" and target_f1 is not None:
      ax.axhline(target_f1, color="gray", linestyle=":", label=f"target F1 {target_f1:g}")
    ax.set_xlabel("training minutes")
    ax.set_ylabel(name)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
  axes[1].legend(loc="lower right", fontsize="small")
  figure.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  figure.savefig(output)
  size = tuple(int(round(v)) for v in figure.get_size_inches() * figure.dpi)
  pyplot.close(figure)
  return size


def main(argv):
  del argv
  series = curves(FLAGS.learning_curves, FLAGS.labels, FLAGS.peer_results, FLAGS.peer_label)
  width, height = plot(series, FLAGS.output, FLAGS.target_f1)
  for s in series:
    print(f"{s.label}: {len(s.minutes)} points, last at {s.minutes[-1]:.1f} min: "
          f"EM {s.exact_match[-1]:.2f} / F1 {s.f1[-1]:.2f}")
  print(f"wrote {FLAGS.output} ({width} x {height} pixels)")


if __name__ == "__main__":
  command_line.run(main)
