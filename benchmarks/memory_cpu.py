r"""Planner vs measured memory of real training steps on the CPU, and XLA on/off speed.

    python -m benchmarks.memory_cpu            # the table (~5 minutes on 2 cores)
    python -m benchmarks.memory_cpu --xla      # + XLA on/off, MiniLM seq 384

Every configuration runs in a fresh subprocess (so one run's heap cannot hide another's), which
builds the span model (tiny: 2 layers x 64; MiniLM-L6: 6 x 384, the packaged config; base:
BERT-Base with random weights, for --only), creates the
AdamW slots, and runs `question_answering.make_train_step` on synthetic batches of the exact shape. The first
step traces and optimizes the graph; then the process's resident set (VmRSS) is read, its peak
(VmHWM) reset through /proc/self/clear_refs, and --steps more steps run. What a step allocates
and frees is

    measured step memory = VmHWM during those steps - VmRSS before them

and the planner's counterpart is `Estimate.step_bytes`: gradients + activations + logits +
workspace (weights and slots persist between steps, so they are in both readings). glibc's mmap
threshold is pinned at 64 KiB (MALLOC_MMAP_THRESHOLD_) so that every tensor above that size is
mapped on allocation and unmapped on release: without it glibc raises its threshold to 32 MiB
after the first big free, keeps freed tensors in its heap, and RSS stops following live memory.

Also printed: the whole process's peak minus its RSS right after `import tensorflow`, next to the
planner's total (weights + slots + step), which includes what the runtime itself holds.
"""

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (model, max_seq_length, batch) measured by default: tiny and MiniLM-L6 at 128/256/384, batch 4-32.
# A fourth field "mixed" runs under mixed_float16 (~40x slower on the CPU: tiny only).
CONFIGS = [("tiny", 128, 8), ("tiny", 384, 32), ("tiny", 384, 32, "mixed"), ("minilm", 128, 8),
           ("minilm", 128, 32), ("minilm", 256, 16), ("minilm", 384, 4), ("minilm", 384, 16),
           ("minilm", 384, 32)]


def _rss_bytes(field):
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak():
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def bert_config(model_name):
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from tests import testutil  # pylint: disable=g-import-not-at-top
  if model_name == "tiny":
    return bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  if model_name == "base":  # google-research's BERT-Base, random weights
    from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
    return estimate.presets()["BERT-Base"]
  return bert_config_lib.BertConfig.from_json_file(
      os.path.join(testutil.minilm_dir(), "config.json"))


def child(args):
  """Measures one configuration in this (fresh) process; prints one JSON line."""
  rss_start = _rss_bytes("VmRSS")
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import optimization  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import question_answering  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top
  from squad_qa.model.memory import estimate  # pylint: disable=g-import-not-at-top
  rss_tf = _rss_bytes("VmRSS")
  policy = question_answering.set_precision_policy("float16" if args.mixed else "float32")
  config = bert_config(args.model)
  model, _ = span_model.build_span_model(config)
  optimizer = optimization.create_optimizer(5e-5, 1000, 0.1, loss_scale=args.mixed)
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  inner._create_all_weights(question_answering.trained_variables(model))  # pylint: disable=protected-access
  rss_model = _rss_bytes("VmRSS")
  rng = np.random.default_rng(0)
  b, s = args.batch, args.seq
  batch = {
      "input_word_ids": tf.constant(rng.integers(1000, config.vocab_size, (b, s)), tf.int32),
      "input_mask": tf.ones((b, s), tf.int32),
      "input_type_ids": tf.constant(np.repeat([[0] * (s // 4) + [1] * (s - s // 4)], b, 0), tf.int32),
      "start_positions": tf.constant(rng.integers(0, s, b), tf.int32),
      "end_positions": tf.constant(rng.integers(0, s, b), tf.int32),
  }
  step = question_answering.make_train_step(model, optimizer, 1, jit_compile=args.xla)
  alloc_static = tf.config.experimental.get_memory_info("CPU:0")["current"]
  rss_before_first = _rss_bytes("VmRSS")
  _reset_peak()
  tf.config.experimental.reset_memory_stats("CPU:0")
  started = time.time()
  float(step(batch))
  first_step_seconds = time.time() - started
  rss_peak_first = _rss_bytes("VmHWM")
  alloc_before = tf.config.experimental.get_memory_info("CPU:0")["current"]
  rss_before = _rss_bytes("VmRSS")
  _reset_peak()
  tf.config.experimental.reset_memory_stats("CPU:0")
  started = time.time()
  for _ in range(args.steps):
    float(step(batch))
  seconds = (time.time() - started) / args.steps
  alloc_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
  rss_peak = _rss_bytes("VmHWM")
  est = estimate.estimate(config, s, b, policy, "cpu")
  print(json.dumps({
      "model": args.model, "seq": s, "batch": b, "xla": args.xla, "dtype": policy,
      "predicted_step": est.step_bytes, "predicted_total": est.total,
      "predicted_static": est.weights + est.optimizer_slots,
      "allocator_step": alloc_peak - alloc_before, "allocator_static": alloc_static,
      "allocator_peak": alloc_peak,
      "rss_first_step": rss_peak_first - rss_before_first, "rss_steps": rss_peak - rss_before,
      "rss_peak_over_tf": max(rss_peak, rss_peak_first) - rss_tf,
      "rss_model": rss_model - rss_tf,
      "seconds_per_step": seconds, "first_step_seconds": first_step_seconds,
      "examples_per_second": b / seconds}))


def run_child_json(script, options, **env):
  """Runs `python -m benchmarks.<script's name> --child options...` in a fresh process from the
  repository root (so `squad_qa`, `benchmarks` and `tests` import), with TensorFlow's C++ log
  quiet (plus `env`).

  Returns:
    (the last line of its stdout that starts with "{", parsed, or None if there is none; the
    subprocess.CompletedProcess).
  """
  environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env)
  module = "benchmarks." + os.path.splitext(os.path.basename(script))[0]
  command = [sys.executable, "-m", module, "--child", *options]
  proc = subprocess.run(command, env=environment, cwd=REPO, capture_output=True, text=True,
                        check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
  return (json.loads(lines[-1]) if lines else None), proc


def run_child(model, seq, batch, steps, xla=False, mixed=False):
  options = [f"--model={model}", f"--seq={seq}", f"--batch={batch}", f"--steps={steps}"]
  options += (["--xla"] if xla else []) + (["--mixed"] if mixed else [])
  result, proc = run_child_json(__file__, options, MALLOC_MMAP_THRESHOLD_="65536")
  if proc.returncode or result is None:
    raise RuntimeError(f"{' '.join(proc.args)} failed:\n{proc.stderr[-3000:]}")
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--model", default="minilm", choices=["tiny", "minilm", "base"])
  parser.add_argument("--seq", type=int, default=128)
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--steps", type=int, default=2, help="measured steps after the first")
  parser.add_argument("--xla", action="store_true",
                      help="with --child: jit_compile; else also compare XLA on/off (MiniLM 384 x 16)")
  parser.add_argument("--mixed", action="store_true", help="mixed_float16 (slow on the CPU)")
  parser.add_argument("--only", default=None,
                      help="model:seq:batch[:mixed],... instead of the default set")
  args = parser.parse_args()
  if args.child:
    child(args)
    return
  configs = CONFIGS
  if args.only is not None:  # --only= (empty) with --xla: the XLA comparison alone
    configs = [tuple(int(v) if v.isdigit() else v for v in c.split(":"))
               for c in args.only.split(",") if c]
  mib = 2 ** 20
  print("                          ---- one step (MiB) ----------------   ---- whole process (MiB) ------------")
  print("model        seq batch    predicted  allocator ratio  RSS 1st   predicted  allocator ratio  RSS peak  s/step")
  started = time.time()
  results = []
  for model, seq, batch, *mixed in configs:
    r = run_child(model, seq, batch, args.steps, mixed=bool(mixed))
    results.append(r)
    name = model + (" fp16" if mixed else "")
    print(f"{name:<12} {seq:>3} {batch:>5}   {r['predicted_step'] / mib:>9.0f}  "
          f"{r['allocator_step'] / mib:>9.0f} {r['allocator_step'] / r['predicted_step']:>5.2f}"
          f"  {r['rss_first_step'] / mib:>7.0f}   {r['predicted_total'] / mib:>9.0f}  "
          f"{r['allocator_peak'] / mib:>9.0f} {r['allocator_peak'] / r['predicted_total']:>5.2f}"
          f"  {r['rss_peak_over_tf'] / mib:>8.0f}  {r['seconds_per_step']:>6.2f}", flush=True)
  for key, name in (("allocator_step", "step"), ("allocator_peak", "total")) if results else ():
    ratios = [r[key] / r["predicted_" + name] for r in results]
    print(f"measured/predicted {name}: min {min(ratios):.2f}, max {max(ratios):.2f}")
  print(f"({time.time() - started:.0f} s)")
  if args.xla:
    print("\nXLA (jit_compile) on the CPU, MiniLM-L6, seq 384, batch 16, float32 "
          "(off and on alternate, so a change of load hits both):")
    rates = {False: [], True: []}
    for xla in (False, True, False, True):
      r = run_child("minilm", 384, 16, max(args.steps, 3), xla=xla)
      rates[xla].append(r["examples_per_second"])
      print(f"  xla={'on ' if xla else 'off'}  {r['examples_per_second']:.2f} examples/s "
            f"({r['seconds_per_step']:.2f} s/step over {max(args.steps, 3)} steps, first step "
            f"{r['first_step_seconds']:.0f} s), allocator step memory "
            f"{r['allocator_step'] / mib:.0f} MiB (planner {r['predicted_step'] / mib:.0f})",
            flush=True)
    print(f"  mean: off {sum(rates[False]) / 2:.2f}, on {sum(rates[True]) / 2:.2f} examples/s")

if __name__ == "__main__":
  main()
