r"""Prediction over the eval records: batches trimmed to their longest window vs padded, same
answers?
And against the peer (Hugging Face on PyTorch CPU) over the same dev questions.

  python -m benchmarks.prediction_throughput --records_dir=records --model_dir=model_out \
      [--predict_batch_size=64] [--max_eval_examples=N] [--passes=2]
  python -m benchmarks.prediction_throughput --records_dir=records --init_checkpoint=<HF folder>
  python -m benchmarks.prediction_throughput --records_dir=records --init_checkpoint=<HF folder> \
      --configurations=trimmed,peer_sorted --peer_python=<peer venv>/bin/python \
      --peer_model=<BertForQuestionAnswering folder>

  python -m benchmarks.prediction_throughput --records_dir=records \
      --export_dirs=export,export_bf16 --peer_python=<peer venv>/bin/python \
      --peer_model=<BertForQuestionAnswering folder> --peer_precisions=float32,bfloat16,int8

With --export_dirs the precisions are compared (benchmarks/peer.py): each export (its
qa_config.json's serving_precision) predicts the eval records in trimmed batches through its
serve_features signature, and the peer (`peer.py predict`, sorted batches) runs at each
of --peer_precisions; one of ours and one of the peer's alternate per round, --passes times. The
table gives questions/s per pass, EM / F1 and the share of answers identical to float32's (within
each side), a column per precision of each side and ours best / the peer's best per row. Without
the peer flags only ours runs. Without --export_dirs:

The model is the latest checkpoint of --model_dir (its qa_config.json gives the config), or
--init_checkpoint (any kind train.py takes; for speed alone the weights do not matter). Each pass
times every one of --configurations in turn, so load from other processes hits them alike:
  padded: tasks/evaluation.py's `predict` with every batch max_seq_length wide, in file order
      (records.eval_dataset(trim=False));
  trimmed: the same with windows grouped by length and each batch cut to its longest window (the
      default of train.py's prediction);
  peer_padded, peer_sorted: `peer.py predict` run with --peer_python (never imported):
      run_qa.py's featurization of the same first questions, forward passes padded to 384 in file
      order, or sorted by length and padded to each batch's longest (the peer at its best).
Before the passes our configurations run --warmup_batches batches untimed (tracing), and so does
the peer. Prints windows/s and questions/s (the windows differ: HF's stride is an overlap) per pass,
with ratios to the first configuration, the real and padded tokens per window, and, with padded
and trimmed both timed, how many answers differ (postprocess/span_decoding.py; expected: none).
"""

import json
import os
import sys
import tempfile
import time

from squad_qa.base import cpu_runtime  # noqa: F401  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np

from benchmarks import peer
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import span_model
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import records
from squad_qa.preprocess import squad_reader
from squad_qa.tasks import evaluation
from squad_qa.tasks import run_inputs

settings.define_flags(squad_reader.SquadFiles)
flags.DEFINE_string("records_dir", None, "make_records.py output with eval records.")
flags.DEFINE_string("model_dir", None, "train.py --model_dir (latest checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "Or any --init_checkpoint kind (HF folder, ...).")
flags.DEFINE_string("bert_config_file", None, "With --init_checkpoint, when not beside it.")
flags.DEFINE_integer("predict_batch_size", 64, "Windows per prediction batch.")
flags.DEFINE_integer("max_eval_examples", None, "Only the first N questions.")
flags.DEFINE_integer("passes", 2, "Passes, each timing every configuration.")
flags.DEFINE_integer("warmup_batches", 3, "Untimed batches per configuration before the passes.")
flags.DEFINE_list("configurations", "padded,trimmed",
                  "What each pass times, in order: padded, trimmed, peer_padded, peer_sorted.")
peer.define_flags()
FLAGS = flags.FLAGS

OURS = ("padded", "trimmed")
PEER = ("peer_padded", "peer_sorted")


def load_model():
  """The span model from --model_dir's latest checkpoint or --init_checkpoint."""
  if FLAGS.model_dir:
    return peer.load_trained(FLAGS.model_dir)[0]
  config_file, _ = checkpoints.resolve_model_files(FLAGS.init_checkpoint, FLAGS.bert_config_file,
                                                   None)
  model, _ = span_model.build_span_model(bert_config_lib.BertConfig.from_json_file(config_file))
  checkpoints.initialize_from(model, FLAGS.init_checkpoint)
  return model


def measure_peer(predict_file, orders, precisions=(peer.REFERENCE,)):
  """Runs `peer.py predict` with --peer_python; returns its JSON (benchmarks/peer.py)."""
  peer_dir = os.path.dirname(peer.peer_script(FLAGS.peer_dir, "qa_common.py"))
  with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "peer.json")
    peer.run_peer([
        FLAGS.peer_python, peer.SCRIPT, "predict", "--model", FLAGS.peer_model, "--predict_file",
        predict_file, "--peer_dir", peer_dir, "--orders", *orders, "--precisions", *precisions,
        "--max_questions",
        str(FLAGS.max_eval_examples or 0), "--batch",
        str(FLAGS.predict_batch_size), "--warmup_batches",
        str(FLAGS.warmup_batches), "--json", out
    ])
    with open(out) as f:
      return json.load(f)


def compare_precisions(meta):
  """--export_dirs: each export's trimmed batches through its serve_features against the peer's
  sorted batches at each of --peer_precisions, alternating one of ours and one of the peer's per
  round; questions/s per pass, then EM / F1 and the share of answers identical to float32's on
  each side (from the last pass)."""
  if FLAGS["peer_precisions"].present and not FLAGS.peer_python:
    sys.exit("prediction_throughput.py: --peer_precisions needs --peer_python and --peer_model")
  peer_precisions = (peer.check_peer_precisions(FLAGS.peer_precisions) if FLAGS.peer_python else [])
  exports = peer.load_exports(FLAGS.export_dirs)
  eval_meta = meta["splits"][records.EVAL_SPLIT]
  predict_file = FLAGS.predict_file or eval_meta["input_file"]
  run_inputs.check_predict_file(predict_file, meta, FLAGS.records_dir)
  first = next(iter(exports.values())).qa.config
  scorer = evaluation.DevScorer(
      FLAGS.records_dir, meta, predict_file, FLAGS.predict_batch_size,
      span_decoding.DecodingSettings(n_best_size=first["n_best_size"],
                                     max_answer_length=first["max_answer_length"]),
      FLAGS.max_eval_examples)
  models = {
      p: (lambda inputs, training=False, qa=e.qa: qa.features_logits(**inputs))
      for p, e in exports.items()
  }
  for model in models.values():  # trace the predict step's shapes outside the timed passes
    evaluation.predict(model, scorer.dataset().take(FLAGS.warmup_batches))
  print(f"ours: {', '.join(f'{p} {e.export_dir}' for p, e in exports.items())}; "
        f"{scorer.total_windows} eval windows, batch {FLAGS.predict_batch_size}, trimmed; peer: "
        f"{', '.join(peer_precisions) or 'not run (no --peer_python)'}, sorted batches")
  ours_names, rounds = list(exports), max(len(exports), len(peer_precisions))
  rows, windows, theirs = [], {}, {}
  for p in range(FLAGS.passes):
    ours_qps, peer_qps, loads = {}, {}, []
    for i in range(rounds):
      if i < len(ours_names):
        name = ours_names[i]
        loads.append(f"{os.getloadavg()[0]:.1f} before ours {name}")
        started = time.perf_counter()
        windows[name] = evaluation.predict(models[name], scorer.dataset())
        ours_qps[name] = len(windows[name]) / (time.perf_counter() - started)
      if i < len(peer_precisions):
        name = peer_precisions[i]
        loads.append(f"{os.getloadavg()[0]:.1f} before HF {name}")
        found = measure_peer(predict_file, ["sorted"], [name])
        theirs[name] = found["runs"][name]
        peer_qps[name] = found["questions"] / theirs[name]["sorted"]["seconds"]
    print(
        f"pass {p + 1}: load average (1 min) {', '.join(loads)}; questions/s: " +
        ", ".join([f"ours {k} {v:.2f}" for k, v in ours_qps.items()] +
                  [f"HF {k} {v:.2f}" for k, v in peer_qps.items()]), flush=True)
    rows.append((f"questions/s, pass {p + 1}", ours_qps, peer_qps, ".2f", True))
  ours_scores, ours_texts = {}, {}
  for name, found in windows.items():
    results, final = scorer.score_windows(found)
    ours_scores[name], ours_texts[name] = results, final.texts
  peer_texts = {name: run["predictions"] for name, run in theirs.items()}
  for metric in ("exact_match", "f1"):  # no ratio: each side scores its own trained model
    rows.append((metric, {
        k: v[metric] for k, v in ours_scores.items()
    }, {
        k: v[metric] for k, v in theirs.items()
    }, ".2f", None))
  rows.append((f"answers identical to {peer.REFERENCE} (%)", {
      k: share(v, ours_texts.get(peer.REFERENCE)) for k, v in ours_texts.items()
  }, {
      k: share(v, peer_texts.get(peer.REFERENCE)) for k, v in peer_texts.items()
  }, ".2f", None))
  print(f"\n{len(scorer.ids)} questions (the peer: {len(next(iter(peer_texts.values()), []))}); "
        f"load average at the end: {os.getloadavg()}\n")
  peer.print_table("full dev", ours_names, peer_precisions, rows)


def share(answers, reference):
  """peer.identical_share in percent (None without a reference)."""
  found = peer.identical_share(answers, reference)
  return None if found is None else 100 * found


def main(argv):
  del argv
  if FLAGS.export_dirs:
    given = [
        f"--{n}" for n in ("model_dir", "init_checkpoint", "configurations") if FLAGS[n].present
    ]
    if not FLAGS.records_dir or given:
      sys.exit(f"prediction_throughput.py: --export_dirs compares precisions on --records_dir "
               f"alone{'; drop ' + ', '.join(given) if given else ''}")
    if bool(FLAGS.peer_python) != bool(FLAGS.peer_model):
      sys.exit("prediction_throughput.py: the peer needs both --peer_python and --peer_model")
    compare_precisions(records.read_meta(FLAGS.records_dir))
    return
  if FLAGS["peer_precisions"].present:
    sys.exit("prediction_throughput.py: --peer_precisions goes with --export_dirs")
  if not FLAGS.records_dir or not (FLAGS.model_dir or FLAGS.init_checkpoint):
    sys.exit("prediction_throughput.py: give --records_dir and --model_dir or --init_checkpoint "
             "(or --export_dirs)")
  unknown = [c for c in FLAGS.configurations if c not in OURS + PEER]
  if unknown or not FLAGS.configurations:
    sys.exit(f"prediction_throughput.py: --configurations={','.join(FLAGS.configurations)}: "
             f"choose from {', '.join(OURS + PEER)}")
  peer_flags = [f"--{n}" for n in ("peer_python", "peer_model", "peer_dir") if FLAGS[n].present]
  if any(c in PEER for c in FLAGS.configurations):
    if not (FLAGS.peer_python and FLAGS.peer_model):
      sys.exit("prediction_throughput.py: the peer_* configurations need --peer_python and "
               "--peer_model")
  elif peer_flags:
    sys.exit(f"prediction_throughput.py: {', '.join(peer_flags)} given but no peer_* entry in "
             f"--configurations; add peer_sorted or peer_padded")
  meta = records.read_meta(FLAGS.records_dir)
  seq = meta["flags"]["max_seq_length"]
  paths = records.shard_paths(FLAGS.records_dir, meta, records.EVAL_SPLIT)
  predict_file = FLAGS.predict_file or meta["splits"][records.EVAL_SPLIT]["input_file"]
  model = load_model()

  def eval_dataset(trim):
    return records.eval_dataset(paths, seq, FLAGS.predict_batch_size, FLAGS.max_eval_examples,
                                trim=trim)

  datasets = {
      name: lambda trim=(name == "trimmed"): eval_dataset(trim) for name in FLAGS.configurations
      if name in OURS
  }
  peer_orders = [c[len("peer_"):] for c in FLAGS.configurations if c in PEER]
  widths = [
      int(b["input_mask"].shape[1]) * int(b["input_mask"].shape[0]) for b in eval_dataset(trim=True)
  ]
  masks = [b["input_mask"].numpy() for b in eval_dataset(trim=False)]
  real, num_windows = sum(int(m.sum()) for m in masks), sum(len(m) for m in masks)
  for make in datasets.values():  # trace the predict step's shapes outside the timed passes
    evaluation.predict(model, make().take(FLAGS.warmup_batches))

  print(f"ours: {num_windows} eval windows at max_seq_length {seq}, batch "
        f"{FLAGS.predict_batch_size}: real tokens per window {real / num_windows:.1f}, trimmed "
        f"batches {sum(widths) / num_windows:.1f} wide, padded {seq}")
  print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()} on {os.cpu_count()} CPUs")
  first = FLAGS.configurations[0]
  print(" | ".join(["pass"] + [f"{c} windows/s, questions/s" for c in FLAGS.configurations] +
                   [f"questions/s / {first}"]))
  windows = {}
  for p in range(FLAGS.passes):
    rates = {}
    for name, make in datasets.items():
      started = time.perf_counter()
      windows[name] = evaluation.predict(model, make())
      seconds = time.perf_counter() - started
      rates[name] = (num_windows / seconds, len(windows[name]) / seconds)
    if peer_orders:
      found = measure_peer(predict_file, peer_orders)
      run = found["runs"][peer.REFERENCE]
      for order in peer_orders:
        rates["peer_" + order] = (run[order]["windows_per_s"],
                                  found["questions"] / run[order]["seconds"])
      if p == 0:
        print(f"peer: torch {found['torch']}, transformers {found['transformers']}, "
              f"{found['threads']} threads; {run[peer_orders[0]]['windows']} windows for "
              f"{found['questions']} questions, real tokens per window "
              f"{found['real_tokens_per_window']:.1f}, sorted batches "
              f"{run.get('sorted', {}).get('width', float('nan')):.1f} wide")
    cells = [f"{rates[c][0]:.2f}, {rates[c][1]:.2f}" for c in FLAGS.configurations]
    ratios = [f"{c} {rates[c][1] / rates[first][1]:.2f}x" for c in FLAGS.configurations[1:]]
    print(" | ".join([f"{p + 1}"] + cells + [", ".join(ratios)]), flush=True)
  print(f"load average at the end: {os.getloadavg()}")
  if len(windows) < 2:
    return

  squad = squad_reader.read_squad(predict_file, is_training=False)
  contexts = {i: squad.contexts[squad.examples[i].paragraph_index] for i in windows["padded"]}
  answers = {name: span_decoding.decode_all(w, contexts) for name, w in windows.items()}
  span = lambda a: (a.text, a.start_char, a.end_char)  # scores differ in the last bits
  differ = [
      i for i in answers["padded"] if span(answers["padded"][i]) != span(answers["trimmed"][i])
  ]
  gap = max(
      float(np.max(np.abs(a.start_logits - b.start_logits))) for i in windows["padded"]
      for a, b in zip(windows["padded"][i], windows["trimmed"][i]))
  print(f"questions: {len(answers['padded'])}; answers (text and offsets) differing between "
        f"trimmed and padded: {len(differ)}; largest start-logit difference {gap:.2e}")
  for i in differ[:10]:
    print(f"  {squad.examples[i].qas_id}: padded {answers['padded'][i]} trimmed "
          f"{answers['trimmed'][i]}")


if __name__ == "__main__":
  command_line.run(main)
