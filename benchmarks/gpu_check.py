r"""Checks the GPU path end to end on one GPU; prints one table: check, result, figure, pass/fail.

    SQUAD_DIR=... bash benchmarks/gpu_check.sh            # installs, then runs this (~5 minutes)
    python -m benchmarks.gpu_check [--squad_dir=...] [--work_dir=...]
    python -m benchmarks.gpu_check --allow_cpu            # the same checks, tiny, on the CPU

What runs, each as the user runs it (the commands as subprocesses of this interpreter):
  records        preprocess/make_records.py on the first --train_questions questions of SQuAD's
                 train file and --dev_questions of dev, at --max_seq_length.
  train xla on / xla off / accum 2
                 train.py --gpu (mixed_float16, dynamic loss scaling) from the packaged MiniLM for
                 --train_steps steps, with --xla, --noxla and --gradient_accumulation_steps=2; the
                 loss TensorBoard recorded for the first loop must be above the last loop's.
  memory b=N     for each of --memory_batch_sizes, a fresh process runs two mixed_float16 training
                 steps (benchmarks/memory.py's bfc child) and reads the GPU allocator's peak
                 (tf.config.experimental.get_memory_info("GPU:0")["peak"]); the figure is
                 measured / the planner's count (model/memory/estimate.py), which must stay within
                 the headroom --train_batch_size=auto keeps
                 (1 / model.memory.estimate.AUTO_BATCH_MARGIN).
  batch auto     train.py --gpu --train_batch_size=auto: the plan it chose must then train.
  serve <dtype>  export.py --serving_precision=float32|float16|bfloat16 of the xla-on run, then
                 serve_text (serving.saved_model_qa.SavedModelQA) on one dev question: the median
                 latency of --latency_calls calls after warm-up, in milliseconds.

Exits 1 when any check fails. Without a visible GPU it prints one line and exits 0, unless
--allow_cpu runs the same checks on the CPU with a tiny random-weight encoder (tests/testutil.py's
TINY_BERT_CONFIG), --mixed_precision_dtype=float16 in place of --gpu, and a few steps: that
exercises this script's logic, not the GPU.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

from squad_qa.base import console  # noqa: F401  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf

from squad_qa.base import artifacts
from squad_qa.flags import command_line
from squad_qa.model.memory import estimate
from squad_qa.preprocess import squad_reader
from tests import testutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVING_PRECISIONS = ("float32", "float16", "bfloat16")
NO_GPU_LINE = ("gpu_check: TensorFlow sees no GPU; nothing checked (--allow_cpu runs the checks on "
               "the CPU with a tiny model)")

flags.DEFINE_bool("allow_cpu", False, "Without a GPU, run the checks on the CPU with a tiny model.")
flags.DEFINE_string("squad_dir", None, "Folder of the SQuAD v1.1 files. Default: $SQUAD_DIR.")
flags.DEFINE_string("work_dir", None,
                    "Where records, runs and exports go. Default: a new temporary folder.")
flags.DEFINE_integer("train_questions", None, "Train questions made into records (GPU: 4000; "
                     "--allow_cpu: 24).", lower_bound=1)
flags.DEFINE_integer("dev_questions", 8, "Dev questions made into records.", lower_bound=1)
flags.DEFINE_integer("max_seq_length", None, "Tokens per window (GPU: 256; --allow_cpu: 64).",
                     lower_bound=16)
flags.DEFINE_integer("train_steps", None, "Steps of each training check (GPU: 300; --allow_cpu: "
                     "8).", lower_bound=2)
flags.DEFINE_integer("train_batch_size", None, "Features per step of the training checks (GPU: 32; "
                     "--allow_cpu: 4).", lower_bound=1)
flags.DEFINE_list("memory_batch_sizes", None, "Batches whose peak memory is measured (GPU: "
                  "8,16,32; --allow_cpu: 8,32,128).")
flags.register_validator(
    "memory_batch_sizes",
    lambda sizes: sizes is None or all(size.isdigit() and int(size) > 0 for size in sizes),
    message="--memory_batch_sizes: expected positive integers separated by commas")
flags.DEFINE_integer("latency_calls", 20, "Timed serve_text calls per precision.", lower_bound=1)
FLAGS = flags.FLAGS

# name: (train_questions, max_seq_length, train_steps, train_batch_size, memory_batch_sizes,
# learning_rate): the tiny CPU run takes a higher learning rate so that its loss falls in 8 steps.
SETTINGS = {
    "gpu": (4000, 256, 300, 32, ("8", "16", "32"), 5e-5),
    "cpu": (24, 64, 8, 4, ("8", "32", "128"), 1e-3)
}


class Table:
  """The rows of the report: (check, result, figure, passed)."""

  def __init__(self):
    self.rows = []

  def add(self, check, result, figure, passed):
    self.rows.append((check, result, figure, bool(passed)))
    print(f"  ... {check}: {result} ({figure}) {'pass' if passed else 'FAIL'}", file=sys.stderr,
          flush=True)

  def render(self):
    """The table as text, one row a line, with a header."""
    rows = [("check", "result", "figure", "pass/fail")
           ] + [(c, r, f, "pass" if p else "FAIL") for c, r, f, p in self.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)

  @property
  def failed(self):
    return [row[0] for row in self.rows if not row[3]]


def run_command(*args):
  """Runs `python <args...>` from the repository root; returns (status, last lines of output)."""
  proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                        check=False)
  output = (proc.stdout + proc.stderr).strip().splitlines()
  return proc.returncode, " / ".join(output[-3:])


def recorded_losses(model_dir):
  """The training loss TensorBoard recorded per loop (model_dir/train), in step order.

  Returns:
    A list of (step, loss) pairs (int, float); empty when nothing was recorded.
  """
  losses = {}
  for path in tf.io.gfile.glob(os.path.join(model_dir, "train", "events.out.tfevents.*")):
    for record in tf.data.TFRecordDataset(path):
      event = tf.compat.v1.Event.FromString(record.numpy())
      for value in event.summary.value:
        if value.tag == "loss":
          losses[event.step] = float(tf.make_ndarray(value.tensor))
  return sorted(losses.items())


def check_training(table, name, base_args, model_dir, extra, expected):
  """Trains with `base_args + extra` into `model_dir`; the row passes when the run succeeds, its
  train_results.json holds the `expected` values (e.g. {"xla": True}: the flags took effect) and the
  first recorded loss is above the last."""
  status, tail = run_command("train.py", *base_args, f"--model_dir={model_dir}", *extra)
  if status:
    table.add(name, "train.py failed", tail[-160:], False)
    return False
  with open(os.path.join(model_dir, artifacts.TRAIN_RESULTS_FILE)) as f:
    results = json.load(f)
  wrong = {key: results.get(key) for key, value in expected.items() if results.get(key) != value}
  losses = recorded_losses(model_dir)
  if wrong or len(losses) < 2:
    table.add(name, "ran with other settings" if wrong else "fewer than 2 recorded losses",
              str(wrong or losses), False)
    return False
  (first_step, first), (last_step, last) = losses[0], losses[-1]
  table.add(name, f"loss {first:.3f} -> {last:.3f}",
            f"steps {first_step} -> {last_step}, {results['mixed_precision_dtype']}", last < first)
  return last < first


def check_memory(table, model, seq, batch, device, precision):
  """Measures one batch's training peak in a fresh process against the planner's count."""
  from benchmarks import memory  # pylint: disable=g-import-not-at-top
  result, proc = memory.run_child_json(memory.MODULE, [
      "--mode=bfc", f"--model={model}", f"--seq={seq}", f"--batch={batch}", f"--device={device}",
      f"--precision={precision}"
  ])
  name = f"memory b={batch}"
  if not result or result["status"] != "OK":
    table.add(name, "did not run", (result or {}).get("status") or proc.stderr[-160:], False)
    return
  ratio = result["peak"] / result["count"]
  table.add(name, f"peak {result['peak'] / 2**20:.0f} MiB, planner {result['count'] / 2**20:.0f}"
            " MiB", f"measured/planned {ratio:.2f}", ratio <= 1 / estimate.AUTO_BATCH_MARGIN)


def check_auto_batch(table, base_args, model_dir, steps):
  """train.py --train_batch_size=auto: passes when the plan it chose trains."""
  args = [a for a in base_args if not a.startswith(("--train_batch_size=", "--max_steps="))]
  status, tail = run_command("train.py", *args, f"--model_dir={model_dir}",
                             "--train_batch_size=auto", f"--max_steps={steps}")
  if status:
    table.add("batch auto", "train.py failed", tail[-160:], False)
    return
  with open(os.path.join(model_dir, artifacts.TRAIN_RESULTS_FILE)) as f:
    results = json.load(f)
  table.add(
      "batch auto", f"batch {results['train_batch_size']} x "
      f"{results['gradient_accumulation_steps']} accumulated", f"{results['steps']} steps trained",
      results["steps"] == steps)


def check_serving(table, model_dir, work_dir, dev_file, calls):
  """Exports `model_dir` in each serving precision and times serve_text on one dev question."""
  from squad_qa.serving import saved_model_qa  # pylint: disable=g-import-not-at-top
  example = squad_reader.read_squad(dev_file, is_training=False, max_examples=1)
  question = example.examples[0].question_text
  context = example.contexts[example.examples[0].paragraph_index]
  for precision in SERVING_PRECISIONS:
    export_dir = os.path.join(work_dir, f"export_{precision}")
    name = f"serve {precision}"
    status, tail = run_command("export.py", f"--model_dir={model_dir}",
                               f"--export_dir={export_dir}", f"--serving_precision={precision}")
    if status:
      table.add(name, "export.py failed", tail[-160:], False)
      continue
    qa = saved_model_qa.SavedModelQA(export_dir)
    for _ in range(3):  # warm-up: tracing and the first kernels
      answer = qa.answers([question], [context])[0]
    times = []
    for _ in range(calls):
      started = time.perf_counter()
      answer = qa.answers([question], [context])[0]
      times.append(time.perf_counter() - started)
    table.add(name, f"answer {answer.text[:30]!r}", f"p50 {np.median(times) * 1e3:.1f} ms",
              np.isfinite(answer.score))


def main(argv):
  del argv
  on_gpu = bool(tf.config.list_physical_devices("GPU"))
  if not on_gpu and not FLAGS.allow_cpu:
    print(NO_GPU_LINE)
    return 0
  mode = "gpu" if on_gpu else "cpu"
  questions, seq, steps, batch, memory_batches, learning_rate = SETTINGS[mode]
  questions = FLAGS.train_questions or questions
  seq = FLAGS.max_seq_length or seq
  steps = FLAGS.train_steps or steps
  batch = FLAGS.train_batch_size or batch
  memory_batches = FLAGS.memory_batch_sizes or memory_batches
  if FLAGS.squad_dir:
    os.environ["SQUAD_DIR"] = FLAGS.squad_dir
  train_file = squad_reader.default_squad_file(squad_reader.TRAIN_FILE_NAMES)
  dev_file = squad_reader.default_squad_file(["dev-v1.1.json"])
  for path in (train_file, dev_file):
    if not os.path.exists(path):
      print(
          f"gpu_check: no file at {path!r}: set SQUAD_DIR or --squad_dir to the folder of "
          f"SQuAD v1.1 ({squad_reader.SQUAD_URL})", file=sys.stderr)
      return 1
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="gpu_check_")
  os.makedirs(work_dir, exist_ok=True)
  started = time.time()
  table = Table()

  records = os.path.join(work_dir, "records")
  train_slice = testutil.write_squad_slice(train_file, os.path.join(work_dir, "train.json"),
                                           questions)
  dev_slice = testutil.write_squad_slice(dev_file, os.path.join(work_dir, "dev.json"),
                                         FLAGS.dev_questions)
  status, tail = run_command("preprocess/make_records.py", f"--train_file={train_slice}",
                             f"--predict_file={dev_slice}", f"--vocab_file={testutil.vocab_file()}",
                             f"--max_seq_length={seq}", f"--doc_stride={seq // 2}",
                             f"--max_query_length={min(64, seq // 4)}", f"--output_dir={records}")
  table.add("records", "made" if not status else "make_records.py failed",
            f"{questions} questions, seq {seq}" if not status else tail[-160:], not status)
  if status:
    return finish(table, started)

  if mode == "gpu":
    model_args = [f"--init_checkpoint={testutil.minilm_dir()}", "--gpu"]
    memory_model, memory_device = "minilm", "GPU:0"
  else:
    config = testutil.write_tiny_config(os.path.join(work_dir, "bert_config.json"))
    model_args = [
        f"--bert_config_file={config}", f"--vocab_file={testutil.vocab_file()}",
        "--mixed_precision_dtype=float16"
    ]
    memory_model, memory_device = "tiny", "CPU:0"
  loop = max(1, steps // 4)
  base_args = [
      f"--records_dir={records}", *model_args, f"--train_batch_size={batch}",
      f"--max_steps={steps}", f"--steps_per_loop={loop}", f"--log_steps={loop}",
      f"--learning_rate={learning_rate}", "--nodo_predict", "--nolength_buckets"
  ]
  served_dir = os.path.join(work_dir, "train_xla")
  precision = {"mixed_precision_dtype": "float16"}
  trained = check_training(table, "train xla on", base_args, served_dir, ["--xla"],
                           dict(precision, xla=True))
  check_training(table, "train xla off", base_args, os.path.join(work_dir, "train_noxla"),
                 ["--noxla"], dict(precision, xla=False))
  check_training(table, "train accum 2", base_args,
                 os.path.join(work_dir, "train_accum"), ["--gradient_accumulation_steps=2"],
                 dict(precision, gradient_accumulation_steps=2))
  for memory_batch in memory_batches:
    check_memory(table, memory_model, seq, int(memory_batch), memory_device, "float16")
  check_auto_batch(table, base_args, os.path.join(work_dir, "train_auto"), max(2, steps // 10))
  if trained:
    check_serving(table, served_dir, work_dir, dev_slice, FLAGS.latency_calls)
  else:
    table.add("serve", "skipped", "the xla-on training failed", False)
  return finish(table, started)


def finish(table, started):
  """Prints the table and a summary line; returns the exit status (1 when a check failed)."""
  print(table.render())
  failed = table.failed
  print(f"{len(table.rows) - len(failed)} of {len(table.rows)} checks passed in "
        f"{time.time() - started:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
  return 1 if failed else 0


if __name__ == "__main__":
  command_line.run(main)  # main's return value is the exit status
