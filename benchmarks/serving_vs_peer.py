r"""serve_text against Hugging Face's question-answering pipeline, precision by precision, back
to back in one run.

  python -m benchmarks.serving_vs_peer --export_dirs=export,export_bf16 \
      --peer_python=<peer venv>/bin/python --peer_model=<save_pretrained folder> \
      [--peer_precisions=float32,bfloat16,int8] [--peer_script=../shared/peer/bench_serve.py] \
      [--runs=2] [--calls=20]

The peer is ../shared/peer/bench_serve.py (transformers 5.2.0 on PyTorch CPU, set up as its README
says), run as a subprocess with its own interpreter at each of --peer_precisions through
benchmarks/peer_precision.py (float32; bfloat16 autocast; dynamic int8): never imported. Ours is
each of --export_dirs at its qa_config.json's serving_precision (benchmarks/precision_axis.py).
Each run measures one precision of ours, then one of the peer's, and so on, on the same inputs, and
prints one table with a column per precision of each side and the ratio of our best to the peer's
best per row; --runs such runs repeat it so that load from other processes hits both alike, and the
load average is printed before each measurement.

The inputs are the peer script's own (benchmarks/peer_cases.py, checked against the lengths it
reports): one question on a ~100-character context, on a ~1,000-character paragraph and on
>= 10,000 characters of joined paragraphs; then 32 questions on ~1,000-character paragraphs.
Ours: saved_model_qa.SavedModelQA.answers (serve_text; for an int8 export the Python path with its
LiteRT features model) (3 warm-up calls, then --calls timed calls: p50/p95), the 32 questions in one call (median of 3).
The peer: the same, with its pipeline at batch_size 1, 8 and 32; its best questions/s is the one
compared.
"""

import json
import os
import sys
import tempfile
import time

from squad_qa.base import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np

from benchmarks import peer_cases
from benchmarks import precision_axis
from squad_qa.flags import command_line
from squad_qa.flags import definitions
from squad_qa.preprocess import squad_reader

definitions.define_squad_file_flags()
precision_axis.define_flags()
flags.DEFINE_string("peer_python", None, "Interpreter of the peer's venv (its README's recipe).")
flags.DEFINE_string("peer_script", None, "bench_serve.py (default ../shared/peer/ beside the repo).")
flags.DEFINE_string("peer_model", None, "BertForQuestionAnswering save_pretrained folder.")
flags.DEFINE_integer("runs", 2, "Ours-then-peer runs.")
flags.DEFINE_integer("calls", 20, "Timed calls per context length.")
FLAGS = flags.FLAGS

def measure_ours(qa, cases, questions, contexts):
  """{case: (p50 ms, p95 ms, windows)}, questions/s at batch 32."""
  result = {}
  for name in peer_cases.CASES:
    question, context = cases[name]
    for _ in range(3):
      qa.answers([question], [context])
    times = []
    for _ in range(FLAGS.calls):
      started = time.perf_counter()
      qa.answers([question], [context])
      times.append(1000 * (time.perf_counter() - started))
    result[name] = (np.percentile(times, 50), np.percentile(times, 95),
                    len(qa.features(question, context)))
  qa.answers(questions[:4], contexts[:4])
  reps = []
  for _ in range(3):
    started = time.perf_counter()
    qa.answers(questions, contexts)
    reps.append(time.perf_counter() - started)
  return result, len(questions) / float(np.median(reps))


def measure_peer(peer_script, precision):
  """Runs bench_serve.py at `precision` (benchmarks/peer_precision.py); returns its JSON results."""
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "peer.json")
    precision_axis.run_peer(precision_axis.peer_command(
        FLAGS.peer_python, precision, peer_script, "--model", FLAGS.peer_model, "--calls",
        str(FLAGS.calls), "--json", out))
    with open(out) as f:
      return json.load(f)


def main(argv):
  del argv
  if not FLAGS.peer_model or not FLAGS.peer_python:
    sys.exit("serving_vs_peer.py: --peer_python (the peer venv's interpreter) and --peer_model (a "
             "BertForQuestionAnswering folder) are required")
  peer_precisions = precision_axis.check_peer_precisions(FLAGS.peer_precisions)
  peer_script = FLAGS.peer_script or os.path.join(
      os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "peer",
      "bench_serve.py")
  if not os.path.exists(peer_script):
    sys.exit(f"serving_vs_peer.py: no peer script at {peer_script}; pass --peer_script")
  predict_file = FLAGS.predict_file or squad_reader.default_squad_file(
      squad_reader.PREDICT_FILE_NAMES)
  cases, questions, contexts = peer_cases.pick_cases(predict_file)
  exports = precision_axis.load_exports(FLAGS.export_dirs)
  for precision, (export_dir, qa) in exports.items():
    runtime = "serve_text" if qa.has_serve_text else "Python path, LiteRT features model"
    print(f"ours {precision}: {export_dir}, {runtime} (max_seq_length "
          f"{qa.config['max_seq_length']}, doc_stride {qa.config['doc_stride']}; windows at "
          + ", ".join(f"{len(cases[n][1]):,} chars: {len(qa.features(*cases[n]))}"
                      for n in peer_cases.CASES)
          + ")")
  print(f"peer: {peer_script} with {FLAGS.peer_python} at {', '.join(peer_precisions)}; "
        f"{FLAGS.calls} calls per length; {os.cpu_count()} CPUs")
  ours_names, rounds = list(exports), max(len(exports), len(peer_precisions))
  for run in range(FLAGS.runs):
    ours, ours_qps, peer, loads = {}, {}, {}, []
    # Ours and the peer alternate, one precision each per round.
    for i in range(rounds):
      if i < len(ours_names):
        loads.append(f"{os.getloadavg()[0]:.1f} before ours {ours_names[i]}")
        ours[ours_names[i]], ours_qps[ours_names[i]] = measure_ours(
            exports[ours_names[i]].qa, cases, questions, contexts)
      if i < len(peer_precisions):
        loads.append(f"{os.getloadavg()[0]:.1f} before HF {peer_precisions[i]}")
        peer[peer_precisions[i]] = measure_peer(peer_script, peer_precisions[i])
    loads.append(f"{os.getloadavg()[0]:.1f} after")
    some = peer[peer_precisions[0]]
    print(f"\nrun {run + 1}: load average (1 min) {', '.join(loads)} (torch {some['torch']}, "
          f"transformers {some['transformers']}, {some['threads']} threads)")
    for precision, theirs in peer.items():
      for name in peer_cases.CASES:
        question, context = cases[name]
        mine = theirs["latency"][name]
        if mine["context_chars"] != len(context) or mine["question"] != question:
          sys.exit(f"serving_vs_peer.py: the peer's {name} input is not ours "
                   f"({mine['context_chars']} vs {len(context)} characters)")
    rows = []
    for name in peer_cases.CASES:
      chars = len(cases[name][1])
      windows = peer[peer_precisions[0]]["latency"][name]["windows_384_128"]
      for stat, index in (("p50", 0), ("p95", 1)):
        rows.append((f"{stat} ms, {chars:,} chars (HF {windows} windows)",
                     {p: ours[p][name][index] for p in ours},
                     {p: peer[p]["latency"][name][stat + "_ms"] for p in peer}, ".1f", False))
    batch = {p: max(peer[p]["batch"].values(), key=lambda r: r["questions_per_s"]) for p in peer}
    best_sizes = ", ".join(f"{p} {b['batch_size']}" for p, b in batch.items())
    rows.append((f"questions/s, {peer_cases.BATCH} questions on ~1,000 chars (ours one call, "
                 f"HF best batch_size: {best_sizes})", ours_qps,
                 {p: b["questions_per_s"] for p, b in batch.items()}, ".1f", True))
    precision_axis.print_table("measure", ours_names, peer_precisions, rows)


if __name__ == "__main__":
  command_line.run(main)
