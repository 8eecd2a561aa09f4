r"""Accuracy against training time, ours and the peer's: the same wall-clock budget, and the plot.

  SQUAD_DIR=<squad folder> python -m benchmarks.budget_vs_peer \
      --peer_python=<peer venv>/bin/python --peer_planned_steps=<its steps in the budget> \
      [--peer_dir=<its scripts>] [--runs=2] [--output_dir=budget_vs_peer]
  python -m benchmarks.budget_vs_peer --mode=plot --output=learning_curve.png \
      --learning_curves=model_out/learning_curve.csv[,other/learning_curve.csv] \
      [--labels=ours float32,ours bfloat16] \
      [--peer_results=hf_20min.json,hf_40min.json] [--peer_label=HF Trainer] [--target_f1=70]

--mode=run (the default): each run is demo.sh as a user runs it (preprocess, fine-tune, score the
first 1,000 dev questions, export, ask), timed from the end of its install stage to its end; then
the peer's finetune_eval.py with that time as its training budget (`--budget-s`), the demo's
learning rate and batch (from the demo's train_config.json) and its fastest settings
(`--group-by-length`, and `--bf16` where the CPU has bfloat16 matmuls: without AVX512-BF16 or AMX
its autocast is slower than float32; `--peer_precision` overrides). The peer's budget is training
alone: its featurization and scoring come on top, so the comparison favors the peer.
`--peer_planned_steps` is the step count its linear schedule decays over in the first run: about the
steps the peer reaches in the budget, so that its learning rate ends near zero as ours does; every
later run plans for the steps the peer reached in the run before. Both score the first 1,000
questions of dev-v1.1.json with the official v1.1 EM/F1. --runs such runs alternate ours and the
peer so that load from other processes hits both alike; the load average is printed with each.
Prints one table (steps, examples, EM, F1 for each side) and writes every run's figures, our
learning curves and the peer's JSONs to --output_dir.

--mode=plot: dev EM and F1 against training minutes in one PNG of two panels. Ours: each
`learning_curve.csv` that `train.py --eval_every_steps` writes (tasks/learning_curve.py: one row
per scoring, `train_seconds` being training time alone) is a line, labelled by --labels (default:
the CSV's folder name). The peer: each result JSON of its `finetune_eval.py --json` (keys
`train_s`, `steps`, `exact_match`, `f1`) is one point at its training minutes; several budgets make
a line. --target_f1 draws a horizontal line at that F1. matplotlib is the `bench` extra
(`pip install -e ".[bench]"`), imported only to draw.
"""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time

from absl import flags

from benchmarks import peer
from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.flags import command_line
from squad_qa.tasks import learning_curve

# What a peer result JSON must hold (finetune_eval.py --json).
PEER_KEYS = ("train_s", "steps", "exact_match", "f1")
EXTRA = "bench"
FLAGS = flags.FLAGS


def define_flags():
  """The command's flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_enum(
      "mode", "run", ["run", "plot"], "run: demo.sh and the peer in the same "
      "budget; plot: draw learning curves and the peer's results.")
  flags.DEFINE_string("peer_python", None, "run: interpreter of the peer's virtualenv.")
  flags.DEFINE_string(
      "peer_dir", None, "run: the peer's scripts (finetune_eval.py); default "
      "$PEER_DIR, else ../shared/peer beside the repository.")
  flags.DEFINE_integer(
      "peer_planned_steps", None, "run: steps the peer's linear schedule decays "
      "over in the first run (later runs: the steps it reached in the run "
      "before).")
  flags.DEFINE_enum(
      "peer_precision", "auto", ["auto", "float32", "bfloat16"], "run: the peer's precision; "
      "auto: bfloat16 autocast on a CPU with bfloat16 matmuls, else float32 (its faster one).")
  flags.DEFINE_integer("runs", 2, "run: ours-then-peer runs.")
  flags.DEFINE_string("output_dir", "budget_vs_peer", "run: where each run's outputs and figures "
                      "go.")
  flags.DEFINE_list(
      "learning_curves", [], "plot: our learning_curve.csv files (train.py "
      "--eval_every_steps), one line each.")
  flags.DEFINE_list("labels", [], "plot: a legend label per --learning_curves file (default: its "
                    "folder).")
  flags.DEFINE_list(
      "peer_results", [], "plot: the peer's finetune_eval.py --json result files, "
      "one point each (a line when several).")
  flags.DEFINE_string("peer_label", "peer (HF on PyTorch)", "plot: legend label of the peer's "
                      "points.")
  flags.DEFINE_float("target_f1", None, "plot: a horizontal line at this dev F1 (percent).")
  flags.DEFINE_string("output", "learning_curve.png", "plot: the PNG to write.")


DEMO_DONE = re.compile(r"^== done in (\d+) s \((\d+) s after the install\)")


def demo_seconds(output):
  """(seconds from the end of the install stage to the end, install seconds) from demo.sh's output.

  Raises:
    ValueError: the output has no `== done in N s (M s after the install)` line.
  """
  done = [m for line in output.splitlines() if (m := DEMO_DONE.match(line))]
  if not done:
    raise ValueError("demo.sh's output has no '== done in N s (M s after the install)' line")
  total, after_install = int(done[-1].group(1)), int(done[-1].group(2))
  return after_install, total - after_install


def run_ours(run_dir):
  """Runs demo.sh into run_dir/demo_out; returns its figures (a dict)."""
  demo_out = os.path.join(run_dir, "demo_out")
  shutil.rmtree(demo_out, ignore_errors=True)
  started = time.time()
  result = subprocess.run(["bash", os.path.join(peer.REPO, "demo.sh")], capture_output=True,
                          text=True, env=dict(os.environ,
                                              DEMO_OUT=os.path.abspath(demo_out)), check=False)
  with open(os.path.join(run_dir, "demo.log"), "w", encoding="utf-8") as f:
    f.write(result.stdout + result.stderr)
  if result.returncode:
    sys.exit(f"demo.sh failed (exit {result.returncode}); its output is in {run_dir}/demo.log")
  seconds, install = demo_seconds(result.stdout)
  model_dir = os.path.join(demo_out, "model")
  with open(os.path.join(model_dir, artifacts.TRAIN_RESULTS_FILE), encoding="utf-8") as f:
    trained = json.load(f)
  with open(os.path.join(model_dir, artifacts.TRAIN_CONFIG_FILE), encoding="utf-8") as f:
    config = json.load(f)
  with open(os.path.join(model_dir, artifacts.EVAL_RESULTS_FILE), encoding="utf-8") as f:
    scored = json.load(f)
  curve = os.path.join(model_dir, artifacts.LEARNING_CURVE_FILE)
  if os.path.exists(curve):
    shutil.copy(curve, os.path.join(run_dir, artifacts.LEARNING_CURVE_FILE))
  return {
      "side": "ours (demo.sh)",
      "budget_seconds": seconds,
      "install_seconds": install,
      "wall_seconds": time.time() - started,
      "train_seconds": trained["train_seconds"],
      "steps": trained["steps"],
      "examples": trained["steps"] * trained["effective_batch_size"],
      "exact_match": scored["exact_match"],
      "f1": scored["f1"],
      "learning_rate": config["learning_rate"],
      "batch": trained["effective_batch_size"],
      "precision": trained["mixed_precision_dtype"]
  }


def peer_precision():
  """The peer's precision: --peer_precision, or for auto bfloat16 where the CPU has bfloat16
  matmuls (the test train.py's `auto` makes), else float32."""
  if FLAGS.peer_precision != "auto":
    return FLAGS.peer_precision
  from squad_qa.model import precision  # pylint: disable=g-import-not-at-top
  return "bfloat16" if precision.cpu_has_native_bfloat16() else "float32"


def run_peer(run_dir, budget_seconds, planned_steps, learning_rate, batch):
  """Runs the peer's finetune_eval.py with `budget_seconds` of training, its schedule decaying over
  `planned_steps`; returns its figures."""
  bfloat16 = peer_precision() == "bfloat16"
  result_file = os.path.join(run_dir, "peer.json")
  command = [
      FLAGS.peer_python,
      peer.peer_script(FLAGS.peer_dir, "finetune_eval.py"), "--budget-s",
      str(budget_seconds), "--planned-steps",
      str(planned_steps), "--lr",
      str(learning_rate), "--batch",
      str(batch), "--group-by-length", *(["--bf16"] if bfloat16 else []), "--n-dev", "1000",
      "--out",
      os.path.join(run_dir, "peer_model"), "--json", result_file
  ]
  started = time.time()
  with open(os.path.join(run_dir, "peer.log"), "w", encoding="utf-8") as log:
    code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
  if code:
    sys.exit(f"the peer's finetune_eval.py failed (exit {code}); its output is in "
             f"{run_dir}/peer.log")
  with open(result_file, encoding="utf-8") as f:
    found = json.load(f)
  return {
      "side": f"peer (group_by_length, {'bf16' if bfloat16 else 'float32'})",
      "budget_seconds": budget_seconds,
      "wall_seconds": time.time() - started,
      "train_seconds": found["train_s"],
      "steps": found["steps"],
      "examples": found["examples_seen"],
      "exact_match": found["exact_match"],
      "f1": found["f1"],
      "learning_rate": learning_rate,
      "batch": batch,
      "precision": "bfloat16 autocast" if bfloat16 else "float32",
      "planned_steps": planned_steps
  }


def table(rows):
  """The figures of every run as a Markdown table."""
  lines = [
      "| run | side | budget (s) | training (s) | steps | examples | EM | F1 |",
      "|---|---|---|---|---|---|---|---|"
  ]
  for row in rows:
    lines.append(f"| {row['run']} | {row['side']} | {row['budget_seconds']} | "
                 f"{row['train_seconds']:.0f} | {row['steps']:,} | {row['examples']:,} | "
                 f"{row['exact_match']:.2f} | {row['f1']:.2f} |")
  return "\n".join(lines)


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
  """A learning_curve.csv's scored rows as a Series (side "ours"); minutes = train_seconds / 60.

  Raises:
    errors.MissingFileError: no such file.
    errors.UsageError: its header is not tasks/learning_curve.CSV_FIELDS, a value is not a number,
      or it has no scored rows.
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
  rows = [row for row in rows if not learning_curve.is_unscored(row)]  # a stopped run's last
  if not rows:
    raise errors.UsageError(f"--learning_curves: {path} has no scored rows")
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
    points.append(
        (float(result["train_s"]) / 60, float(result["exact_match"]), float(result["f1"])))
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
  series = [
      read_ours(path, labels[i] if labels else None) for i, path in enumerate(learning_curves)
  ]
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
      style = dict(marker="o", linestyle="-") if s.side == "ours" else dict(
          marker="s", linestyle="--")
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


def budget_runs():
  """--mode=run."""
  if not FLAGS.peer_python or not FLAGS.peer_planned_steps:
    sys.exit("budget_vs_peer.py: --peer_python and --peer_planned_steps are required")
  rows = []
  planned_steps = FLAGS.peer_planned_steps
  for run in range(1, FLAGS.runs + 1):
    run_dir = os.path.join(FLAGS.output_dir, f"run{run}")
    os.makedirs(run_dir, exist_ok=True)
    print(f"run {run}: load average (1 min) {os.getloadavg()[0]:.1f} before ours", flush=True)
    ours = run_ours(run_dir)
    print(
        f"run {run}: ours {ours['budget_seconds']} s (install excluded), {ours['steps']} steps, "
        f"EM {ours['exact_match']:.2f} / F1 {ours['f1']:.2f}; load average "
        f"{os.getloadavg()[0]:.1f} before the peer", flush=True)
    theirs = run_peer(run_dir, ours["budget_seconds"], planned_steps, ours["learning_rate"],
                      ours["batch"])
    planned_steps = theirs["steps"]
    print(
        f"run {run}: peer {theirs['steps']} steps (planned {theirs['planned_steps']}) in "
        f"{theirs['train_seconds']:.0f} s, EM {theirs['exact_match']:.2f} / F1 "
        f"{theirs['f1']:.2f}; load average {os.getloadavg()[0]:.1f} after", flush=True)
    rows += [dict(ours, run=run), dict(theirs, run=run)]
    with open(os.path.join(FLAGS.output_dir, "results.json"), "w", encoding="utf-8") as f:
      json.dump(rows, f, indent=1)
  print(table(rows))


def draw():
  """--mode=plot."""
  series = curves(FLAGS.learning_curves, FLAGS.labels, FLAGS.peer_results, FLAGS.peer_label)
  width, height = plot(series, FLAGS.output, FLAGS.target_f1)
  for s in series:
    print(f"{s.label}: {len(s.minutes)} points, last at {s.minutes[-1]:.1f} min: "
          f"EM {s.exact_match[-1]:.2f} / F1 {s.f1[-1]:.2f}")
  print(f"wrote {FLAGS.output} ({width} x {height} pixels)")


def main(argv):
  del argv  # command_line.run refuses positional arguments
  budget_runs() if FLAGS.mode == "run" else draw()


if __name__ == "__main__":
  define_flags()
  command_line.run(main)
