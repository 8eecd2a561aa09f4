r"""The peer every comparison runs against, and what the comparisons share.

The peer is Hugging Face transformers on PyTorch CPU with the same weights. Its scripts
(`bench_serve.py`, `bench_train_real.py`, `finetune_eval.py`, `qa_common.py`, in --peer_dir) and
its virtualenv are not part of this repository: a benchmark runs them as subprocesses of
--peer_python, never imports them, and torch and transformers are never dependencies. This file
has both sides, so its top level imports the standard library alone:

  python -m benchmarks.peer hf_folder --model_dir=model_out --output_dir=peer_model
  <peer python> benchmarks/peer.py run --precision=bfloat16 <peer script> [its arguments...]
  <peer python> benchmarks/peer.py predict --model DIR --peer_dir DIR --predict_file dev-v1.1.json \
      --orders padded sorted --json out.json [--precisions float32 int8] [--max_questions N]
  <peer python> benchmarks/peer.py serve --model DIR [--precision int8] [--threads 2]

Ours (imported by the benchmarks, the project imported inside the functions):
  hf_folder: a --model_dir's latest checkpoint as a transformers `BertForQuestionAnswering` folder
      (config.json, model.safetensors, vocab.txt, tokenizer_config.json), the inverse of
      model/hf_checkpoint.py's reader, so the peer runs the very weights we serve.
  the precision axis: our exports by their qa_config.json's `serving_precision` (--export_dirs),
      the peer's --peer_precisions, and one Markdown table with a column per precision of each side
      and ours best / the peer's best per row.
  pick_cases: the serving inputs, chosen from a SQuAD file as bench_serve.py chooses them.
  PeerServer: the peer's `serve` as a subprocess, so that its calls and ours alternate.

The peer's side (run by --peer_python; torch and transformers imported inside the functions):
  run: a peer script at a precision. float32: as it is. bfloat16: as HF's Trainer runs
      `bf16=True` on a CPU, `BertForQuestionAnswering.forward` inside
      `torch.autocast("cpu", dtype=torch.bfloat16)` (a training script's backward pass and
      optimizer step stay outside). int8: PyTorch's documented recipe for BERT on a CPU, every model
      `from_pretrained` loads comes back as `quantize_dynamic(model, {nn.Linear}, dtype=qint8)`.
  predict: forward passes over SQuAD dev with qa_common.py's featurization (run_qa.py's, max_length
      384, overlap 128), windows in file order padded to 384 ("padded") or sorted by length and
      padded to each batch's longest ("sorted"), only the forward passes timed; then n-best decoding
      and v1.1 EM/F1 of the last order. Writes {"runs": {precision: {order: {windows, seconds,
      windows_per_s, width}, exact_match, f1, predictions}}} and the versions to --json.
  serve: transformers' `question-answering` pipeline at a precision, built and called as
      bench_serve.py builds and calls it (defaults: 384 tokens, step 128), kept loaded to time the
      calls asked on stdin (`serve_requests`), so that they alternate with ours in the same minutes
      of a shared machine rather than in minutes of their own.
"""

import argparse
import collections
import contextlib
import functools
import importlib.util
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import time

PRECISIONS = ("float32", "bfloat16", "int8")
REFERENCE = "float32"  # answers are compared with this precision's, on each side
SCRIPT = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(SCRIPT))

# The serving inputs (pick_cases): one question at three context lengths, and BATCH questions.
CASES = ("ctx~100", "ctx~1000", "ctx~10000")
BATCH = 32

# tfm's BertEncoder normalizes with google-research/bert's epsilon, transformers' default too;
# written out so that the folder does not depend on that default.
LAYER_NORM_EPS = 1e-12
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def default_peer_dir():
  """$PEER_DIR, else ../shared/peer beside the repository."""
  return os.environ.get("PEER_DIR", os.path.join(os.path.dirname(REPO), "shared", "peer"))


def define_flags():
  """The absl flags every comparison with the peer shares (called once by each benchmark)."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_list(
      "export_dirs", [], "export.py SavedModels, one per precision (each one's "
      "qa_config.json says its serving_precision).")
  flags.DEFINE_list("peer_precisions", [REFERENCE], "The peer's precisions, in order: "
                    f"{', '.join(PRECISIONS)}.")
  flags.DEFINE_string("peer_python", None, "Interpreter of the peer's virtualenv.")
  flags.DEFINE_string(
      "peer_model", None, "The peer's BertForQuestionAnswering folder "
      "(`python -m benchmarks.peer hf_folder` writes one from our weights).")
  flags.DEFINE_string(
      "peer_dir", None, "The peer's scripts; default $PEER_DIR, else "
      "../shared/peer beside the repository.")


def peer_script(peer_dir, name):
  """The path of the peer's script `name` in `peer_dir` (default: default_peer_dir()).

  Raises:
    SystemExit: no such file (one line).
  """
  path = os.path.join(peer_dir or default_peer_dir(), name)
  if not os.path.exists(path):
    sys.exit(f"the peer's {name} is not at {path}; pass --peer_dir (or set $PEER_DIR)")
  return path


def check_peer_precisions(peer_precisions):
  """The list, checked.

  Raises:
    errors.UsageError: empty, repeated, or a precision the peer does not run.
  """
  from squad_qa import errors  # pylint: disable=g-import-not-at-top
  unknown = [p for p in peer_precisions if p not in PRECISIONS]
  if unknown or not peer_precisions or len(set(peer_precisions)) != len(peer_precisions):
    raise errors.UsageError(f"--peer_precisions={','.join(peer_precisions)}: give each at most "
                            f"once, from {', '.join(PRECISIONS)}")
  return list(peer_precisions)


Export = collections.namedtuple("Export", ["export_dir", "qa"])


def load_exports(export_dirs):
  """{precision: Export(export_dir, SavedModelQA)} in the order given.

  Raises:
    errors.UsageError: no export, or two exports of one precision.
    errors.MissingFileError: as SavedModelQA.
  """
  from squad_qa import errors  # pylint: disable=g-import-not-at-top
  from squad_qa.serving import saved_model_qa  # pylint: disable=g-import-not-at-top
  if not export_dirs:
    raise errors.UsageError("give --export_dirs (export.py folders, one per serving_precision)")
  exports = {}
  for export_dir in export_dirs:
    qa = saved_model_qa.SavedModelQA(export_dir)
    if qa.serving_precision in exports:
      raise errors.UsageError(f"--export_dirs: two exports compute in {qa.serving_precision}; "
                              f"give one per precision")
    exports[qa.serving_precision] = Export(export_dir, qa)
  return exports


def peer_command(peer_python, precision, script, *args):
  """The argv running the peer's `script` at `precision` in its own interpreter."""
  return [peer_python, SCRIPT, "run", f"--precision={precision}", script, *args]


def _offline_env():
  """This process's environment with the Hugging Face hub off: the peer never downloads."""
  return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def _failed(headline, stderr):
  """Ends the benchmark with `headline` and the last lines of a failed peer process's stderr."""
  sys.exit(f"{headline}:\n" + "\n".join(stderr.splitlines()[-15:]))


def run_peer(argv):
  """Runs a peer command offline, stdout dropped.

  Raises:
    SystemExit: it failed; the message holds the last lines of its stderr (its warnings are dropped
      when it succeeds).
  """
  proc = subprocess.run(argv, env=_offline_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                        text=True, check=False)
  if proc.returncode:
    _failed(f"the peer failed ({' '.join(argv)})", proc.stderr)


class PeerServer:
  """The peer's `serve` at `precision` in `peer_python`, on the folder `model`, as a subprocess.

  `versions`: {"torch", "transformers", "threads"} as it reported them. `request(**fields)` sends
  one of `serve_requests`' requests and returns its reply (a dict).

  Raises:
    SystemExit: the subprocess ended or answered nothing (the last lines of its stderr).
  """

  def __init__(self, peer_python, model, precision, threads=2):
    self.precision = precision
    self._stderr = tempfile.TemporaryFile("w+")
    self._proc = subprocess.Popen([
        peer_python, SCRIPT, "serve", f"--model={model}", f"--precision={precision}",
        f"--threads={threads}"
    ], env=_offline_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                  text=True)
    self.versions = self._reply()

  def _reply(self):
    line = self._proc.stdout.readline()
    if not line:
      self._proc.wait()
      self._stderr.seek(0)
      _failed(f"the peer's serve at {self.precision} failed", self._stderr.read())
    return json.loads(line)

  def request(self, **fields):
    self._proc.stdin.write(json.dumps(fields) + "\n")
    self._proc.stdin.flush()
    return self._reply()

  def close(self):
    self._proc.stdin.close()
    self._proc.wait()
    self._stderr.close()

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    self.close()


def best(values, higher_is_better):
  """(key, value) of the best value of a {key: value} dict (None values skipped; None if none)."""
  present = [(k, v) for k, v in values.items() if v is not None]
  if not present:
    return None
  return (max if higher_is_better else min)(present, key=lambda item: item[1])


def identical_share(answers, reference):
  """The share (0..1) of `reference`'s question ids whose answer in `answers` is the same text."""
  if not reference:
    return None
  return sum(answers.get(qid) == text for qid, text in reference.items()) / len(reference)


def print_table(measures, ours, peer, rows):
  """Prints a Markdown table: one column per precision of each side, then ours best / peer best.

  Args:
    measures: the first column's heading.
    ours, peer: the precisions, in column order.
    rows: (label, {precision: value} of ours, {precision: value} of the peer, format, higher is
      better or None for no ratio); a value None prints as "-".
  """
  print(f"| {measures} | " + " | ".join([f"ours {p}" for p in ours] + [f"HF {p}" for p in peer]) +
        " | ours best / HF best |")
  print("|---" * (2 + len(ours) + len(peer)) + "|")
  for label, mine, theirs, fmt, higher in rows:
    cells = [("-" if v is None else format(v, fmt))
             for v in [mine.get(p) for p in ours] + [theirs.get(p) for p in peer]]
    ratio = "-"
    if higher is not None:
      a, b = best(mine, higher), best(theirs, higher)
      if a and b and b[1]:
        ratio = f"{a[1] / b[1]:.2f} ({a[0]} / {b[0]})"
    print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
  print(flush=True)


def pick_cases(predict_file):
  """The serving inputs, as bench_serve.py's `pick_cases` chooses them from a SQuAD file.

  Unique paragraphs in file order with their first question, first gold answers: the first
  sentence of 90-110 characters holding its answer, the paragraph closest to 1,000 characters,
  and consecutive paragraphs (from the first of >= 600 characters) joined up to >= 10,000.

  Returns:
    ({case in CASES: (question, context)}, BATCH questions, their BATCH contexts: the paragraphs
    closest to 1,000 characters).

  Raises:
    errors.MissingFileError: no file at predict_file.
  """
  from squad_qa import errors  # pylint: disable=g-import-not-at-top
  if not os.path.exists(predict_file):
    raise errors.MissingFileError(
        f"{predict_file}: not found; set SQUAD_DIR or pass --predict_file")
  with open(predict_file, encoding="utf-8") as f:
    articles = json.load(f)["data"]
  examples = [(qa["question"], paragraph["context"], qa["answers"][0]["answer_start"],
               qa["answers"][0]["text"]) for article in articles
              for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
  paragraphs, seen = [], set()
  for example in examples:
    if example[1] not in seen:
      seen.add(example[1])
      paragraphs.append(example)
  mid = min(paragraphs, key=lambda e: abs(len(e[1]) - 1000))
  short = None
  for question, context, answer_start, answer in examples:
    pos = 0
    for sentence in re.split(r"(?<=[.!?])\s+", context):
      start = context.find(sentence, pos)
      pos = start + len(sentence)
      if (90 <= len(sentence) <= 110 and start <= answer_start < start + len(sentence) and
          answer in sentence):
        short = (question, sentence)
        break
    if short:
      break
  first = next(i for i, e in enumerate(paragraphs) if len(e[1]) >= 600)
  parts, total = [], 0
  for example in paragraphs[first:]:
    parts.append(example[1])
    total += len(example[1]) + 1
    if total >= 10000:
      break
  cases = {
      "ctx~100": short,
      "ctx~1000": mid[:2],
      "ctx~10000": (paragraphs[first][0], " ".join(parts))
  }
  batch = sorted(paragraphs, key=lambda e: abs(len(e[1]) - 1000))[:BATCH]
  return cases, [e[0] for e in batch], [e[1] for e in batch]


def hf_names_and_shapes(config):
  """{HF name: shape in PyTorch layout} of a `BertForQuestionAnswering` without a pooler.

  Args:
    config: a `model.bert_config.BertConfig`.
  """
  hidden, inner = config.hidden_size, config.intermediate_size
  shapes = {
      "bert.embeddings.word_embeddings.weight": (config.vocab_size, hidden),
      "bert.embeddings.position_embeddings.weight": (config.max_position_embeddings, hidden),
      "bert.embeddings.token_type_embeddings.weight": (config.type_vocab_size, hidden),
      "bert.embeddings.LayerNorm.weight": (hidden,),
      "bert.embeddings.LayerNorm.bias": (hidden,),
      "qa_outputs.weight": (2, hidden),
      "qa_outputs.bias": (2,)
  }
  for i in range(config.num_hidden_layers):
    layer = f"bert.encoder.layer.{i}."
    for module, (out, inp) in (("attention.self.query", (hidden, hidden)), ("attention.self.key",
                                                                            (hidden, hidden)),
                               ("attention.self.value",
                                (hidden, hidden)), ("attention.output.dense", (hidden, hidden)),
                               ("intermediate.dense", (inner, hidden)), ("output.dense", (hidden,
                                                                                          inner))):
      shapes[layer + module + ".weight"] = (out, inp)
      shapes[layer + module + ".bias"] = (out,)
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
      shapes[layer + norm + ".weight"] = (hidden,)
      shapes[layer + norm + ".bias"] = (hidden,)
  return shapes


def hf_weights(model, config):
  """{HF name: float32 NumPy array in PyTorch layout} of a span model's encoder and head.

  Each HF name maps to a google-research/bert name (model/hf_checkpoint.py), then through
  model/tf1_checkpoint.py's table to a tfm variable; the variable is reshaped back to the
  google-research layout and an `nn.Linear` weight transposed back to [out, in].

  Args:
    model: from `model.span_model.build_span_model(config)`.
    config: its `model.bert_config.BertConfig`.

  Raises:
    KeyError: a weight the name table maps to is not in the model.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  from squad_qa.model import hf_checkpoint  # pylint: disable=g-import-not-at-top
  from squad_qa.model import named_weights  # pylint: disable=g-import-not-at-top
  from squad_qa.model import tf1_checkpoint  # pylint: disable=g-import-not-at-top
  variables = {named_weights.variable_name(v): v for v in model.weights}
  weights = {}
  for hf_name, shape in hf_names_and_shapes(config).items():
    google_name, transposed = hf_checkpoint.google_name(hf_name)
    google_shape = tuple(shape[::-1]) if transposed else tuple(shape)
    (entry,), _ = tf1_checkpoint.to_entries({google_name: google_shape}, None,
                                            config.num_attention_heads)
    value = variables[entry.target].numpy()
    # The reader transposes the head's [2, hidden] to the kernel's [hidden, 2], reshapes the rest.
    value = value.T if google_name == "cls/squad/output_weights" else value.reshape(google_shape)
    weights[hf_name] = np.ascontiguousarray(value.T if transposed else value, dtype=np.float32)
  return weights


def hf_config(config):
  """transformers' BertConfig fields (config.json) for a `model.bert_config.BertConfig`."""
  return {
      "architectures": ["BertForQuestionAnswering"],
      "model_type": "bert",
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_hidden_layers,
      "num_attention_heads": config.num_attention_heads,
      "intermediate_size": config.intermediate_size,
      # transformers' "gelu" is the exact erf form, its "gelu_new" google-research's tanh one.
      "hidden_act": ("gelu" if config.exact_gelu else "gelu_new")
                    if config.hidden_act == "gelu" else config.hidden_act,
      "hidden_dropout_prob": config.hidden_dropout_prob,
      "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
      "max_position_embeddings": config.max_position_embeddings,
      "type_vocab_size": config.type_vocab_size,
      "initializer_range": config.initializer_range,
      "layer_norm_eps": LAYER_NORM_EPS,
      "pad_token_id": 0
  }


def tokenizer_config(do_lower_case, config):
  """transformers' tokenizer_config.json for the WordPiece vocab: BERT's special tokens."""
  return {
      "tokenizer_class": "BertTokenizer",
      "do_lower_case": do_lower_case,
      "unk_token": "[UNK]",
      "sep_token": "[SEP]",
      "pad_token": "[PAD]",
      "cls_token": "[CLS]",
      "mask_token": "[MASK]",
      "model_max_length": config.max_position_embeddings
  }


def load_trained(model_dir, flag="model_dir"):
  """(the span model with `model_dir`'s latest checkpoint, its BertConfig, its qa_config.json as
  a dict): a train.py --model_dir as the benchmarks read it, in our interpreter.

  Raises:
    errors.MissingFileError: no checkpoint or no qa_config.json there (one line naming `flag`).
  """
  from squad_qa.base import cpu_runtime  # noqa: F401
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa import errors  # pylint: disable=g-import-not-at-top
  from squad_qa.base import artifacts  # pylint: disable=g-import-not-at-top
  from squad_qa.base import commands  # pylint: disable=g-import-not-at-top
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top
  qa_config = artifacts.read_qa_config(model_dir)
  checkpoint = tf.train.latest_checkpoint(model_dir)
  if not qa_config or not checkpoint:
    raise errors.MissingFileError(
        f"--{flag}={model_dir} holds no trained checkpoint with its {artifacts.QA_CONFIG_FILE}; "
        f"train one with {commands.command('squad-qa-train')} first")
  config = bert_config_lib.BertConfig(**qa_config["bert_config"])
  model, _ = span_model.build_span_model(config)
  tf.train.Checkpoint(model=model).read(checkpoint).expect_partial()
  return model, config, qa_config


def write_hf_folder(model_dir, output_dir):
  """Writes model_dir's latest checkpoint as an HF folder; returns the number of tensors.

  Raises:
    SystemExit: no checkpoint, or output_dir exists (one line each).
  """
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  from squad_qa import errors  # pylint: disable=g-import-not-at-top
  from squad_qa.model import hf_checkpoint  # pylint: disable=g-import-not-at-top
  if os.path.exists(output_dir):
    sys.exit(f"peer.py hf_folder: {output_dir} exists; give a new --output_dir")
  try:
    model, config, qa_config = load_trained(model_dir)
  except errors.MissingFileError as e:
    sys.exit(f"peer.py hf_folder: {e}")
  weights = hf_weights(model, config)
  os.makedirs(output_dir)
  save_file(weights, os.path.join(output_dir, hf_checkpoint.WEIGHTS_FILE),
            metadata={"format": "pt"})
  with open(os.path.join(output_dir, hf_checkpoint.CONFIG_FILE), "w") as f:
    json.dump(hf_config(config), f, indent=2)
  with open(os.path.join(output_dir, TOKENIZER_CONFIG_FILE), "w") as f:
    json.dump(tokenizer_config(qa_config["do_lower_case"], config), f, indent=2)
  shutil.copy(qa_config["vocab_file"], os.path.join(output_dir, hf_checkpoint.VOCAB_FILE))
  return len(weights)


# The peer's side, in the peer's interpreter.


def for_inference(model, precision):
  """(model, context): a loaded float32 model at `precision` for inference, and a function giving
  the context its forward passes run in (bfloat16: autocast; else none).

  Raises:
    ValueError: an unknown precision.
  """
  import torch  # pylint: disable=g-import-not-at-top
  if precision == "bfloat16":
    return model, lambda: torch.autocast("cpu", dtype=torch.bfloat16)
  if precision == "int8":
    return (torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear},
                                                   dtype=torch.qint8), contextlib.nullcontext)
  if precision != "float32":
    raise ValueError(f"precision {precision!r}: choose from {', '.join(PRECISIONS)}")
  return model, contextlib.nullcontext


def apply_precision(precision):
  """Makes transformers' BertForQuestionAnswering (and so AutoModelForQuestionAnswering, which
  loads through it) compute at `precision` in this process.

  Raises:
    ValueError: an unknown precision.
  """
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  cls = transformers.BertForQuestionAnswering
  if precision == "bfloat16":
    forward = cls.forward

    @functools.wraps(forward)
    def autocast_forward(*args, **kwargs):
      with torch.autocast("cpu", dtype=torch.bfloat16):
        return forward(*args, **kwargs)

    cls.forward = autocast_forward
  elif precision == "int8":
    from_pretrained = cls.from_pretrained

    def quantized(_, *args, **kwargs):
      return torch.ao.quantization.quantize_dynamic(from_pretrained(*args, **kwargs),
                                                    {torch.nn.Linear}, dtype=torch.qint8)

    cls.from_pretrained = classmethod(quantized)
  elif precision != "float32":
    raise ValueError(f"precision {precision!r}: choose from {', '.join(PRECISIONS)}")


def run_at_precision(argv):
  """`run --precision=P <script> [its arguments]`: the script as `__main__` at precision P."""
  usage = f"usage: peer.py run --precision={{{','.join(PRECISIONS)}}} <peer script> [...]"
  if len(argv) < 2 or not argv[0].startswith("--precision="):
    sys.exit(usage)
  precision = argv[0].split("=", 1)[1]
  if precision not in PRECISIONS:
    sys.exit(usage)
  apply_precision(precision)
  sys.argv = argv[1:]
  runpy.run_path(argv[1], run_name="__main__")


def predict(argv):
  """`predict ...`: the peer's forward passes over SQuAD dev (the module docstring)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(prog="peer.py predict")
  parser.add_argument("--model", required=True, help="BertForQuestionAnswering folder.")
  parser.add_argument("--peer_dir", required=True, help="The peer's folder (its qa_common.py).")
  parser.add_argument("--predict_file", required=True)
  parser.add_argument("--orders", nargs="+", choices=("padded", "sorted"), required=True)
  parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=[REFERENCE])
  parser.add_argument("--max_questions", type=int, default=0, help="0: all.")
  parser.add_argument("--batch", type=int, default=64, help="Windows per forward pass.")
  parser.add_argument("--max_len", type=int, default=384)
  parser.add_argument("--stride", type=int, default=128, help="HF's overlap, in tokens.")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--warmup_batches", type=int, default=3)
  parser.add_argument("--json", required=True)
  args = parser.parse_args(argv)
  spec = importlib.util.spec_from_file_location("qa_common",
                                                os.path.join(args.peer_dir, "qa_common.py"))
  qa_common = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(qa_common)

  torch.set_num_threads(args.threads)
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
  examples = qa_common.load_squad(args.predict_file)
  if args.max_questions:
    examples = examples[:args.max_questions]
  features = qa_common.prepare_eval_features(tokenizer, examples, args.max_len, args.stride)
  lengths = features["attention_mask"].sum(axis=1)
  num_windows = len(lengths)

  def batches(order):
    index = np.arange(num_windows) if order == "padded" else np.argsort(lengths, kind="stable")
    for i in range(0, num_windows, args.batch):
      rows = index[i:i + args.batch]
      width = args.max_len if order == "padded" else int(lengths[rows].max())
      yield rows, {
          k: torch.from_numpy(features[k][rows, :width]).long()
          for k in ("input_ids", "token_type_ids", "attention_mask")
      }

  result = {
      "torch": torch.__version__,
      "transformers": transformers.__version__,
      "threads": torch.get_num_threads(),
      "questions": len(examples),
      "real_tokens_per_window": float(lengths.mean()),
      "runs": {}
  }
  for precision in args.precisions:
    model, context = for_inference(
        transformers.AutoModelForQuestionAnswering.from_pretrained(args.model).eval(), precision)
    run = result["runs"][precision] = {}
    with torch.inference_mode():
      for order in args.orders:
        for _, (_, batch) in zip(range(args.warmup_batches), batches(order)):
          with context():
            model(**batch)
        widths, logits, started = 0, [], time.perf_counter()
        for rows, batch in batches(order):
          with context():
            out = model(**batch)
          logits.append((rows, out.start_logits, out.end_logits))
          widths += int(batch["input_ids"].shape[0]) * int(batch["input_ids"].shape[1])
        seconds = time.perf_counter() - started
        run[order] = {
            "windows": num_windows,
            "seconds": seconds,
            "windows_per_s": num_windows / seconds,
            "width": widths / num_windows
        }
        print(json.dumps({precision: {order: run[order]}}), flush=True)
    # The windows back in feature order, padded to max_len with -inf (never chosen).
    start = np.full((num_windows, args.max_len), -np.inf, np.float32)
    end = np.full((num_windows, args.max_len), -np.inf, np.float32)
    for rows, start_logits, end_logits in logits:
      start[rows, :start_logits.shape[1]] = start_logits.float().numpy()
      end[rows, :end_logits.shape[1]] = end_logits.float().numpy()
    predictions = qa_common.postprocess(examples, features, start, end)
    run.update(qa_common.squad_v1_score(examples, predictions), predictions=predictions)
  os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
  with open(args.json, "w") as f:
    json.dump(result, f, indent=1)


def serve_requests(lines, out, pipe, windows):
  """Answers `serve`'s requests, one JSON object a line of `lines`, one JSON line each on `out`.

  {"question", "context", "calls"}: `calls` calls of `pipe(question=, context=)`, one at a time;
      the reply {"ms": wall-clock milliseconds of each, "windows": windows(question, context)}.
  {"questions", "contexts", "batch_size"}: one `pipe` call over all of them at `batch_size`; the
      reply {"seconds": its wall-clock seconds}.
  """
  for line in lines:
    request = json.loads(line)
    if "calls" in request:
      question, context, times = request["question"], request["context"], []
      for _ in range(request["calls"]):
        started = time.perf_counter()
        pipe(question=question, context=context)
        times.append(1000 * (time.perf_counter() - started))
      reply = {"ms": times, "windows": windows(question, context)}
    else:
      started = time.perf_counter()
      pipe(question=request["questions"], context=request["contexts"],
           batch_size=request["batch_size"])
      reply = {"seconds": time.perf_counter() - started}
    out.write(json.dumps(reply) + "\n")
    out.flush()


def serve(argv):
  """`serve --model DIR [--precision P] [--threads N]`: the pipeline (the module docstring)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(prog="peer.py serve")
  parser.add_argument("--model", required=True, help="BertForQuestionAnswering folder.")
  parser.add_argument("--precision", choices=PRECISIONS, default=REFERENCE)
  parser.add_argument("--threads", type=int, default=2)
  args = parser.parse_args(argv)
  apply_precision(args.precision)  # as `run` applies it to bench_serve.py
  torch.set_num_threads(args.threads)
  tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
  pipe = transformers.pipeline(
      "question-answering",
      model=transformers.AutoModelForQuestionAnswering.from_pretrained(args.model),
      tokenizer=tokenizer, device="cpu")

  def windows(question, context):  # bench_serve.py's count, at the pipeline's defaults
    return len(
        tokenizer(question, context, truncation="only_second", max_length=384, stride=128,
                  return_overflowing_tokens=True)["input_ids"])

  print(
      json.dumps({
          "torch": torch.__version__,
          "transformers": transformers.__version__,
          "threads": torch.get_num_threads()
      }), flush=True)
  serve_requests(sys.stdin, sys.stdout, pipe, windows)


def hf_folder(argv):
  """`hf_folder --model_dir=... --output_dir=...`: our weights as the peer's model folder."""
  parser = argparse.ArgumentParser(prog="python -m benchmarks.peer hf_folder")
  parser.add_argument("--model_dir", required=True, help="train.py --model_dir (its latest "
                      "checkpoint).")
  parser.add_argument("--output_dir", required=True, help="The HF folder to write (must not "
                      "exist yet).")
  args = parser.parse_args(argv)
  count = write_hf_folder(args.model_dir, args.output_dir)
  print(f"wrote {count} tensors of {args.model_dir} to {args.output_dir}")


COMMANDS = {"hf_folder": hf_folder, "run": run_at_precision, "predict": predict, "serve": serve}


def main():
  if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
    sys.exit(f"usage: peer.py {{{','.join(COMMANDS)}}} ... (see its docstring)")
  COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
  main()
