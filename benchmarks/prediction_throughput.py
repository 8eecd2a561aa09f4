r"""Prediction over the eval records: batches trimmed to their longest window vs padded, same answers?

  python benchmarks/prediction_throughput.py --records_dir=records --model_dir=model_out \
      [--predict_batch_size=64] [--max_eval_examples=N] [--passes=2]
  python benchmarks/prediction_throughput.py --records_dir=records --init_checkpoint=<HF folder>

The model is the latest checkpoint of --model_dir (its qa_config.json gives the config), or
--init_checkpoint (any kind train.py takes; for speed alone the weights do not matter). Each pass
predicts the eval records twice with tasks/evaluation.py's `predict`: padded (every batch
max_seq_length wide, file order: records.eval_dataset(trim=False)) and trimmed (windows grouped by
length, each batch cut to its longest window: the default), alternately, so load from other
processes hits both alike; before the passes each runs --warmup_batches batches untimed (tracing).
Prints windows/s of both and their ratio per pass, the real and padded tokens per window, and how
many answers differ (decoded with postprocess/span_decoding.py; expected: none).
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tasks import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf

from flags import command_line
from flags import definitions
from model import bert_config as bert_config_lib
from model import checkpoints
from model import span_model
from postprocess import span_decoding
from preprocess import records
from preprocess import squad_reader
from tasks import evaluation

definitions.define_squad_file_flags()
flags.DEFINE_string("records_dir", None, "make_records.py output with eval records.")
flags.DEFINE_string("model_dir", None, "train.py --model_dir (latest checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "Or any --init_checkpoint kind (HF folder, ...).")
flags.DEFINE_string("bert_config_file", None, "With --init_checkpoint, when not beside it.")
flags.DEFINE_integer("predict_batch_size", 64, "Windows per prediction batch.")
flags.DEFINE_integer("max_eval_examples", None, "Only the first N questions.")
flags.DEFINE_integer("passes", 2, "Padded + trimmed passes.")
flags.DEFINE_integer("warmup_batches", 3, "Untimed batches per configuration before the passes.")
FLAGS = flags.FLAGS


def load_model():
  """The span model from --model_dir's latest checkpoint or --init_checkpoint."""
  if FLAGS.model_dir:
    with open(os.path.join(FLAGS.model_dir, "qa_config.json")) as f:
      config = bert_config_lib.BertConfig(**json.load(f)["bert_config"])
    model, _ = span_model.build_span_model(config)
    tf.train.Checkpoint(model=model).read(
        tf.train.latest_checkpoint(FLAGS.model_dir)).expect_partial()
    return model
  config_file, _ = checkpoints.resolve_model_files(FLAGS.init_checkpoint, FLAGS.bert_config_file,
                                                   None)
  model, _ = span_model.build_span_model(bert_config_lib.BertConfig.from_json_file(config_file))
  checkpoints.initialize_from(model, FLAGS.init_checkpoint)
  return model


def main(argv):
  del argv
  if not FLAGS.records_dir or not (FLAGS.model_dir or FLAGS.init_checkpoint):
    sys.exit("prediction_throughput.py: give --records_dir and --model_dir or --init_checkpoint")
  meta = records.read_meta(FLAGS.records_dir)
  seq = meta["flags"]["max_seq_length"]
  paths = records.shard_paths(FLAGS.records_dir, meta, records.EVAL_SPLIT)
  model = load_model()
  datasets = {
      "padded": lambda: records.eval_dataset(paths, seq, FLAGS.predict_batch_size,
                                             FLAGS.max_eval_examples, trim=False),
      "trimmed": lambda: records.eval_dataset(paths, seq, FLAGS.predict_batch_size,
                                              FLAGS.max_eval_examples),
  }
  widths = [int(b["input_mask"].shape[1]) * int(b["input_mask"].shape[0])
            for b in datasets["trimmed"]()]
  real = sum(int(b["input_mask"].numpy().sum()) for b in datasets["padded"]())
  num_windows = sum(int(b["input_mask"].shape[0]) for b in datasets["padded"]())
  for make in datasets.values():  # trace the predict step's shapes outside the timed passes
    evaluation.predict(model, make().take(FLAGS.warmup_batches))

  print(f"{num_windows} eval windows at max_seq_length {seq}, batch {FLAGS.predict_batch_size}: "
        f"real tokens per window {real / num_windows:.1f}, trimmed batches "
        f"{sum(widths) / num_windows:.1f} wide, padded {seq}")
  print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()} on {os.cpu_count()} CPUs")
  print(f"{'pass':>4} | {'padded windows/s':>16} | {'trimmed windows/s':>17} | trimmed/padded")
  windows = {}
  for p in range(FLAGS.passes):
    rates = {}
    for name, make in datasets.items():
      started = time.perf_counter()
      windows[name] = evaluation.predict(model, make())
      rates[name] = num_windows / (time.perf_counter() - started)
    print(f"{p + 1:>4} | {rates['padded']:16.2f} | {rates['trimmed']:17.2f} | "
          f"{rates['trimmed'] / rates['padded']:.2f}x", flush=True)
  print(f"load average at the end: {os.getloadavg()}")

  predict_file = FLAGS.predict_file or meta["splits"][records.EVAL_SPLIT]["input_file"]
  squad = squad_reader.read_squad(predict_file, is_training=False)
  contexts = {i: squad.contexts[squad.examples[i].paragraph_index] for i in windows["padded"]}
  answers = {name: span_decoding.decode_all(w, contexts) for name, w in windows.items()}
  span = lambda a: (a.text, a.start_char, a.end_char)  # scores differ in the last bits
  differ = [i for i in answers["padded"]
            if span(answers["padded"][i]) != span(answers["trimmed"][i])]
  gap = max(float(np.max(np.abs(a.start_logits - b.start_logits)))
            for i in windows["padded"] for a, b in zip(windows["padded"][i], windows["trimmed"][i]))
  print(f"questions: {len(answers['padded'])}; answers (text and offsets) differing between "
        f"trimmed and padded: {len(differ)}; largest start-logit difference {gap:.2e}")
  for i in differ[:10]:
    print(f"  {squad.examples[i].qas_id}: padded {answers['padded'][i]} trimmed "
          f"{answers['trimmed'][i]}")


if __name__ == "__main__":
  command_line.run(main)
