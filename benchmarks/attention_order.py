r"""tf_keras's key-first attention einsum against model/attention.py's query-first one, side by side.

  python -m benchmarks.attention_order [--repeats=5]

One process, one packaged all-MiniLM-L6-v2 span model (the weights do not change the time). The
model's attention layers are switched between tf_keras's `MultiHeadAttention` (scores as
einsum("aecd,abcd->acbe", key, query)) and `model.attention.QueryFirstMultiHeadAttention`; each
class gets its own tf.functions, traced while that class is in place. The script prints a table of
wall-clock milliseconds (median of --repeats calls after two warm-up calls, alternating the two
classes) for inference forward passes at 1 x 256, 15 x 384 and 64 x 176 tokens, and for one
AdamW training step at 16 x 192. Inputs are random token ids with no padding. The machine is
shared: compare the two columns of one run, never runs of different days.
"""

import os
import time

from squad_qa.base import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf
import tf_keras

from squad_qa.flags import command_line
from squad_qa.model import attention
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import span_model
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from tests.tasks import test_distribution
from tests import testutil

flags.DEFINE_integer("repeats", 5, "Timed calls per case and class.")
FLAGS = flags.FLAGS

CLASSES = {"key-first (tf_keras)": tf_keras.layers.MultiHeadAttention,
           "query-first (ours)": attention.QueryFirstMultiHeadAttention}
# (label, batch, tokens, train step?)
CASES = (("forward", 1, 256, False), ("forward", 15, 384, False), ("forward", 64, 176, False),
         ("train step", 16, 192, True))


def main(argv):
  del argv
  config = bert_config_lib.BertConfig.from_json_file(
      os.path.join(testutil.minilm_dir(), "config.json"))
  model, _ = span_model.build_span_model(config)
  checkpoints.initialize_from(model, testutil.minilm_dir())
  layers = [l for l in model.submodules if isinstance(l, tf_keras.layers.MultiHeadAttention)]
  optimizer = optimization.create_optimizer(5e-5, 1000, 0.1, loss_scale=False)

  def use(cls):
    for layer in layers:
      layer.__class__ = cls

  functions = {
      name: (tf.function(lambda b: model(span_model.model_inputs(b), training=False)),
             question_answering.make_train_step(model, optimizer))
      for name in CLASSES}
  print(f"MiniLM-L6, float32, {len(layers)} attention layers; median of {FLAGS.repeats} calls (ms); "
        f"load average {os.getloadavg()} on {os.cpu_count()} CPUs")
  print("| case | " + " | ".join(CLASSES) + " | query-first / key-first |")
  print("|---|---|---|---|")
  for label, batch_size, tokens, train in CASES:
    batch = test_distribution.synthetic_batch(batch_size, tokens)  # no padding
    for name, cls in CLASSES.items():
      use(cls)  # the class in place at a tf.function's first call is the one it traces
      for _ in range(2):
        tf.nest.map_structure(lambda t: t.numpy(), functions[name][train](batch))
    times = {name: [] for name in CLASSES}
    for _ in range(FLAGS.repeats):
      for name in CLASSES:
        started = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), functions[name][train](batch))
        times[name].append(time.perf_counter() - started)
    key_first, query_first = (1000 * float(np.median(times[name])) for name in CLASSES)
    print(f"| {label}, {batch_size} x {tokens} | {key_first:,.0f} | {query_first:,.0f} | "
          f"{query_first / key_first:.2f} |", flush=True)
  print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
  command_line.run(main)
