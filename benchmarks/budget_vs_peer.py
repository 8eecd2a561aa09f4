r"""Accuracy for the same wall-clock budget: demo.sh against the peer's fine-tune, back to back.

  SQUAD_DIR=<squad folder> python -m benchmarks.budget_vs_peer \
      --peer_python=<peer venv>/bin/python --peer_planned_steps=<its steps in the budget> \
      [--peer_dir=../shared/peer] [--runs=2] [--output_dir=budget_vs_peer]

Each run is demo.sh as a user runs it (preprocess, fine-tune, score the first 1,000 dev questions,
export, ask), timed from the end of its install stage to its end; then the peer's
finetune_eval.py (transformers on PyTorch CPU, ../shared/peer/README.md) with that time as its
training budget (`--budget-s`), the demo's learning rate and batch (read from the demo's
train_config.json), and its fastest settings (`--group-by-length --bf16`). The peer's budget is
training alone: its featurization and scoring come on top, so the comparison favors the peer.
`--peer_planned_steps` is the step count its linear schedule decays over in the first run: set it
to about the steps the peer reaches in the budget, so that its learning rate ends near zero as ours
does; every later run plans for the steps the peer reached in the run before. Both score the first 1,000 questions of dev-v1.1.json with the official v1.1 EM/F1.

--runs such runs alternate ours and the peer so that load from other processes hits both alike;
the load average is printed with each. Prints one table (steps, examples, EM, F1 for each side) and
writes every run's figures, our learning curves and the peer's JSONs to --output_dir.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

from absl import flags

from squad_qa.flags import command_line

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

flags.DEFINE_string("peer_python", None, "Interpreter of the peer's venv (its README's recipe).")
flags.DEFINE_string("peer_dir", None, "The peer's folder (finetune_eval.py); default: "
                    "../shared/peer beside the repo.")
flags.DEFINE_integer("peer_planned_steps", None, "Steps the peer's linear schedule decays over "
                     "in the first run (later runs: the steps it reached in the run before).")
flags.DEFINE_integer("runs", 2, "Ours-then-peer runs.")
flags.DEFINE_string("output_dir", "budget_vs_peer", "Where each run's outputs and figures go.")
FLAGS = flags.FLAGS

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
  result = subprocess.run(["bash", os.path.join(REPO, "demo.sh")], capture_output=True, text=True,
                          env=dict(os.environ, DEMO_OUT=os.path.abspath(demo_out)), check=False)
  with open(os.path.join(run_dir, "demo.log"), "w", encoding="utf-8") as f:
    f.write(result.stdout + result.stderr)
  if result.returncode:
    sys.exit(f"demo.sh failed (exit {result.returncode}); its output is in {run_dir}/demo.log")
  seconds, install = demo_seconds(result.stdout)
  model_dir = os.path.join(demo_out, "model")
  with open(os.path.join(model_dir, "train_results.json"), encoding="utf-8") as f:
    trained = json.load(f)
  with open(os.path.join(model_dir, "train_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  with open(os.path.join(model_dir, "eval_results.json"), encoding="utf-8") as f:
    scored = json.load(f)
  curve = os.path.join(model_dir, "learning_curve.csv")
  if os.path.exists(curve):
    shutil.copy(curve, os.path.join(run_dir, "learning_curve.csv"))
  return {"side": "ours (demo.sh)", "budget_seconds": seconds, "install_seconds": install,
          "wall_seconds": time.time() - started, "train_seconds": trained["train_seconds"],
          "steps": trained["steps"], "examples": trained["steps"] * trained["effective_batch_size"],
          "exact_match": scored["exact_match"], "f1": scored["f1"],
          "learning_rate": config["learning_rate"], "batch": trained["effective_batch_size"],
          "precision": trained["mixed_precision_dtype"]}


def run_peer(run_dir, budget_seconds, planned_steps, learning_rate, batch):
  """Runs the peer's finetune_eval.py with `budget_seconds` of training, its schedule decaying over
  `planned_steps`; returns its figures."""
  peer_dir = FLAGS.peer_dir or os.path.join(REPO, "..", "shared", "peer")
  result_file = os.path.join(run_dir, "peer.json")
  command = [FLAGS.peer_python, os.path.join(peer_dir, "finetune_eval.py"),
             "--budget-s", str(budget_seconds), "--planned-steps", str(planned_steps),
             "--lr", str(learning_rate), "--batch", str(batch), "--group-by-length", "--bf16",
             "--n-dev", "1000", "--out", os.path.join(run_dir, "peer_model"),
             "--json", result_file]
  started = time.time()
  with open(os.path.join(run_dir, "peer.log"), "w", encoding="utf-8") as log:
    code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
  if code:
    sys.exit(f"the peer's finetune_eval.py failed (exit {code}); its output is in "
             f"{run_dir}/peer.log")
  with open(result_file, encoding="utf-8") as f:
    peer = json.load(f)
  return {"side": "peer (group_by_length, bf16)", "budget_seconds": budget_seconds,
          "wall_seconds": time.time() - started, "train_seconds": peer["train_s"],
          "steps": peer["steps"], "examples": peer["examples_seen"],
          "exact_match": peer["exact_match"], "f1": peer["f1"], "learning_rate": learning_rate,
          "batch": batch, "precision": "bfloat16 autocast", "planned_steps": planned_steps}


def table(rows):
  """The figures of every run as a Markdown table."""
  lines = ["| run | side | budget (s) | training (s) | steps | examples | EM | F1 |",
           "|---|---|---|---|---|---|---|---|"]
  for row in rows:
    lines.append(f"| {row['run']} | {row['side']} | {row['budget_seconds']} | "
                 f"{row['train_seconds']:.0f} | {row['steps']:,} | {row['examples']:,} | "
                 f"{row['exact_match']:.2f} | {row['f1']:.2f} |")
  return "\n".join(lines)


def main(argv):
  del argv  # command_line.run refuses positional arguments
  if not FLAGS.peer_python or not FLAGS.peer_planned_steps:
    sys.exit("--peer_python and --peer_planned_steps are required (../shared/peer/README.md sets "
             "up the peer's venv)")
  rows = []
  planned_steps = FLAGS.peer_planned_steps
  for run in range(1, FLAGS.runs + 1):
    run_dir = os.path.join(FLAGS.output_dir, f"run{run}")
    os.makedirs(run_dir, exist_ok=True)
    print(f"run {run}: load average (1 min) {os.getloadavg()[0]:.1f} before ours", flush=True)
    ours = run_ours(run_dir)
    print(f"run {run}: ours {ours['budget_seconds']} s (install excluded), {ours['steps']} steps, "
          f"EM {ours['exact_match']:.2f} / F1 {ours['f1']:.2f}; load average "
          f"{os.getloadavg()[0]:.1f} before the peer", flush=True)
    peer = run_peer(run_dir, ours["budget_seconds"], planned_steps, ours["learning_rate"],
                    ours["batch"])
    planned_steps = peer["steps"]
    print(f"run {run}: peer {peer['steps']} steps (planned {peer['planned_steps']}) in {peer['train_seconds']:.0f} s, "
          f"EM {peer['exact_match']:.2f} / F1 {peer['f1']:.2f}; load average "
          f"{os.getloadavg()[0]:.1f} after", flush=True)
    rows += [dict(ours, run=run), dict(peer, run=run)]
    with open(os.path.join(FLAGS.output_dir, "results.json"), "w", encoding="utf-8") as f:
      json.dump(rows, f, indent=1)
  print(table(rows))


if __name__ == "__main__":
  command_line.run(main)
