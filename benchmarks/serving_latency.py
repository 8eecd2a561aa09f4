r"""Latency and throughput of the raw-text signature against Python-side tokenization.

  python -m benchmarks.serving_latency --export_dir=export [--predict_file=dev-v1.1.json] \
      [--repeats=30] [--batch_size=32]

Two ways to answer with the same SavedModel (export.py), both in this process:
  serve_text:      the strings go to `serving_default`; tokenization, windowing and span decoding run
                   in the graph (saved_model_qa.SavedModelQA.answers).
  python+features: tensorflow-text tokenization called from Python, windowing in Python
                   (preprocess/features.py), one `serve_features` call, decoding in NumPy
                   (saved_model_qa.SavedModelQA.answers_with_serve_features).
Prints p50/p95 latency of one question at context lengths of 100, 1,000 and 10,000 characters (real
dev paragraphs of one article joined and cut at a space), then questions per second at batch
--batch_size (dev questions with their own paragraphs). Both paths are warmed up first, then called
alternately (so load from other processes hits both alike); times are wall-clock, from
time.perf_counter. The load average is printed: on a shared machine the numbers move with it.
"""

import os
import time

from squad_qa.base import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging
import numpy as np

from squad_qa.flags import command_line
from squad_qa.flags import definitions
from squad_qa.preprocess import squad_reader
from squad_qa.serving import saved_model_qa

definitions.define_export_flags()
definitions.define_squad_file_flags()
flags.DEFINE_integer("repeats", 30, "Timed calls per context length and path.")
flags.DEFINE_integer("batch_size", 32, "Questions per call in the throughput test.")
flags.DEFINE_integer("throughput_batches", 5, "Timed batches per path in the throughput test.")
FLAGS = flags.FLAGS

CONTEXT_LENGTHS = (100, 1000, 10000)


def long_context(contexts, num_chars):
  """Paragraphs joined with spaces, cut to at most `num_chars` at a word boundary."""
  text = " ".join(contexts)
  while len(text) < num_chars:
    text = text + " " + text
  cut = text[:num_chars]
  return cut[:cut.rfind(" ")] if " " in cut and len(text) > num_chars else cut


def timed(fns, repeats):
  """Wall-clock seconds of `repeats` calls of each of `fns`, interleaved (fn 0, fn 1, fn 0, ...) so
  that load from other processes on a shared machine hits every path alike.

  Returns:
    A float array [len(fns), repeats].
  """
  times = np.zeros([len(fns), repeats])
  for r in range(repeats):
    for i, fn in enumerate(fns):
      started = time.perf_counter()
      fn()
      times[i, r] = time.perf_counter() - started
  return times


def main(argv):
  del argv
  predict_file = FLAGS.predict_file or squad_reader.default_squad_file(
      squad_reader.PREDICT_FILE_NAMES)
  squad = squad_reader.read_squad(predict_file, is_training=False)
  qa = saved_model_qa.SavedModelQA(FLAGS.export_dir)
  paths = {
      "serve_text": lambda q, c: qa.answers(q, c),
      "python+features": lambda q, c: qa.answers_with_serve_features(q, c),
  }
  question = squad.examples[0].question_text
  first_article = squad.contexts[:40]
  print(f"SavedModel {FLAGS.export_dir}: max_seq_length {qa.config['max_seq_length']}, "
        f"doc_stride {qa.config['doc_stride']}, window_batch_size "
        f"{qa.config.get('window_batch_size')}, {qa.serving_precision}; {FLAGS.repeats} calls "
        f"per cell")
  print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()} on {os.cpu_count()} CPUs")
  rows = []
  for num_chars in CONTEXT_LENGTHS:
    context = long_context(first_article, num_chars)
    num_windows = len(qa.features(question, context))
    row = [f"{len(context):>7,d}", f"{num_windows:>7d}"]
    answers = {}
    for name, fn in paths.items():
      answers[name] = fn([question], [context])[0]  # warm-up (and tracing)
      fn([question], [context])
    times = timed([lambda fn=fn: fn([question], [context]) for fn in paths.values()],
                  FLAGS.repeats) * 1000
    for name, t in zip(paths, times):
      row.append(f"{np.percentile(t, 50):8.1f} {np.percentile(t, 95):8.1f}")
      logging.info("%d chars, %s: p50 %.1f ms", num_chars, name, np.percentile(t, 50))
    same = answers["serve_text"].text == answers["python+features"].text
    rows.append(row + ["yes" if same else "NO"])
  print()
  print("latency of one question (ms)")
  print(f"{'chars':>7} {'windows':>7} | {'serve_text p50 p95':>17} | "
        f"{'python+features p50 p95':>23} | same answer")
  for row in rows:
    print(f"{row[0]} {row[1]} | {row[2]:>17} | {row[3]:>23} | {row[4]}")

  batch = FLAGS.batch_size
  questions = [e.question_text for e in squad.examples[:batch * FLAGS.throughput_batches]]
  contexts = [squad.contexts[e.paragraph_index]
              for e in squad.examples[:batch * FLAGS.throughput_batches]]
  print()
  print(f"throughput at batch {batch} (dev questions with their paragraphs, "
        f"{FLAGS.throughput_batches} batches)")
  elapsed = np.zeros(len(paths))
  for fn in paths.values():
    fn(questions[:batch], contexts[:batch])  # warm-up
  for i in range(0, len(questions), batch):
    elapsed += timed([lambda fn=fn: fn(questions[i:i + batch], contexts[i:i + batch])
                      for fn in paths.values()], 1)[:, 0]
  for name, seconds in zip(paths, elapsed):
    print(f"  {name:>15}: {len(questions) / seconds:7.1f} questions/s "
          f"({seconds / FLAGS.throughput_batches * 1000:.0f} ms per batch)")
  print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")


if __name__ == "__main__":
  command_line.run(main)
