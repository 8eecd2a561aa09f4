r"""Where serve_text's time goes: its stages timed one by one, at 100 / 1,000 / 10,000 characters.

  python -m benchmarks.serving_profile [--model=tiny|minilm] [--repeats=30] [--max_seq_length=384]

Builds serving/module.py's QAServingModule around the tiny test config (2 layers x 64, random
weights) or the packaged all-MiniLM-L6-v2 (pretrained encoder, untrained head: the time does not
depend on the weights) at max_seq_length 384, doc_stride 128, max_query_length 64, and times, as
separate tf.functions on the same inputs (median of --repeats calls, after two warm-up calls):

  tokenize   the graph tokenizer over question + context (serving/tokenizer.py)
  windows    tokenize + windowing (serving/windows.py); the row shows windowing alone (the difference)
  encoder    `window_logits` on those windows (the one-call path or the chunk loop)
  bare model the model called once on the same windows (no cond, no loop)
  decode     span choice and answer text (serving/answers.py)
  serve_text the whole signature function; "rest" = serve_text - (windows + encoder + decode), the
             cost of one call that no stage accounts for (function call, input checks)
  no-op      a tf.function returning its input: the floor of any call

Contexts are real dev paragraphs of one article joined and cut at a space (benchmarks/
serving_latency.py's `long_context`). Wall-clock times from time.perf_counter; on a shared machine
they move with the load, printed at the start and the end.
"""

import os
import sys
import time

from squad_qa.base import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf

from benchmarks import serving_latency
from squad_qa.flags import command_line
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import span_model
from squad_qa.preprocess import squad_reader
from squad_qa.serving import answers
from squad_qa.serving import module as serving_module
from tests import testutil

# --predict_file and --repeats come with benchmarks/serving_latency.py.
flags.DEFINE_enum("model", "tiny", ["tiny", "minilm"], "Encoder to profile.")
flags.DEFINE_integer("max_seq_length", 384, "Window length (doc_stride 128, max_query_length 64).")
FLAGS = flags.FLAGS


def build_module(model_name, max_seq_length):
  """A QAServingModule of the tiny config or the packaged MiniLM."""
  if model_name == "tiny":
    config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  else:
    config = bert_config_lib.BertConfig.from_json_file(
        os.path.join(testutil.minilm_dir(), "config.json"))
  model, _ = span_model.build_span_model(config)
  if model_name == "minilm":
    checkpoints.initialize_from(model, testutil.minilm_dir())
  qa_config = dict(max_seq_length=max_seq_length, doc_stride=128, max_query_length=64,
                   do_lower_case=True, **serving_module.DECODING_DEFAULTS)
  return serving_module.QAServingModule(model, testutil.vocab_file(), qa_config)


def median_ms(fn, args, repeats):
  """Median wall-clock milliseconds of fn(*args) over `repeats` calls after two warm-up calls."""
  fn(*args)
  fn(*args)
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    fn(*args)
    times.append(time.perf_counter() - started)
  return 1000 * float(np.median(times))


def main(argv):
  del argv
  predict_file = FLAGS.predict_file or squad_reader.default_squad_file(
      squad_reader.PREDICT_FILE_NAMES)
  try:
    squad = squad_reader.read_squad(predict_file, is_training=False)
  except squad_reader.SquadInputError as e:
    sys.exit(f"serving_profile.py: {e} (set SQUAD_DIR or pass --predict_file)")
  module = build_module(FLAGS.model, FLAGS.max_seq_length)
  config = module._config  # pylint: disable=protected-access

  tokenize = tf.function(lambda q, c: module.tokenizer.tokenize_with_offsets(tf.concat([q, c], 0)))
  windows_fn = tf.function(module.make_windows)
  encoder = tf.function(module.window_logits)
  bare = tf.function(module._logits)  # pylint: disable=protected-access

  @tf.function
  def decode(start_logits, end_logits, windows, question, context):
    spans = answers.best_spans(start_logits, end_logits, windows, tf.shape(question)[0],
                               config["n_best_size"], config["max_answer_length"])
    return answers.char_span_to_text(context, spans.start, spans.end)

  no_op = tf.function(tf.identity)
  question = squad.examples[0].question_text
  print(f"{FLAGS.model} at max_seq_length {FLAGS.max_seq_length}; median of {FLAGS.repeats} calls "
        f"(ms); load average {os.getloadavg()} on {os.cpu_count()} CPUs")
  print(f"{'chars':>6} {'windows':>7} {'width':>5} | {'tokenize':>8} {'windowing':>9} "
        f"{'encoder':>8} {'bare model':>10} {'decode':>7} | {'serve_text':>10} {'rest':>6} "
        f"{'no-op':>6}")
  for num_chars in serving_latency.CONTEXT_LENGTHS:
    context = serving_latency.long_context(squad.contexts[:40], num_chars)
    q, c = tf.constant([question]), tf.constant([context])
    windows = windows_fn(q, c)
    start_logits, end_logits = encoder(windows)
    ids, mask, types = windows.input_word_ids, windows.input_mask, windows.input_type_ids
    times = {
        "tokenize": median_ms(tokenize, (q, c), FLAGS.repeats),
        "windows": median_ms(windows_fn, (q, c), FLAGS.repeats),
        "encoder": median_ms(encoder, (windows,), FLAGS.repeats),
        "bare": median_ms(bare, (ids, mask, types), FLAGS.repeats),
        "decode": median_ms(decode, (start_logits, end_logits, windows, q, c), FLAGS.repeats),
        "serve_text": median_ms(module.serve_text, (q, c), FLAGS.repeats),
        "no-op": median_ms(no_op, (q,), FLAGS.repeats),
    }
    rest = times["serve_text"] - times["windows"] - times["encoder"] - times["decode"]
    print(f"{len(context):>6,d} {ids.shape[0]:>7d} {ids.shape[1]:>5d} | {times['tokenize']:8.2f} "
          f"{times['windows'] - times['tokenize']:9.2f} {times['encoder']:8.2f} "
          f"{times['bare']:10.2f} {times['decode']:7.2f} | {times['serve_text']:10.2f} "
          f"{rest:6.2f} {times['no-op']:6.2f}", flush=True)
  print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
  command_line.run(main)
