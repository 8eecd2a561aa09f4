"""Loads a Hugging Face BERT folder (config.json, model.safetensors, vocab.txt)
into a tfm BertEncoder.

Weights are read with `safetensors` into NumPy. Each HF name is renamed to the google-research/bert
name it was converted from, PyTorch [out, in] weights transposed to TF kernels, so the TF1 path
(`model.tf1_checkpoint`) maps both with one table and one set of checks.
"""

import json
import os
import re

from absl import logging
from safetensors import safe_open

from squad_qa import errors
from squad_qa.model import bert_config
from squad_qa.model import named_weights
from squad_qa.model import tf1_checkpoint

CONFIG_FILE = bert_config.HF_CONFIG_FILE
WEIGHTS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"
VOCAB_FILE = "vocab.txt"
KIND = "HF folder"

_EMBEDDING = re.compile(r"embeddings\.(word_embeddings|position_embeddings|token_type_embeddings)"
                        r"\.weight")
_LAYER_NORM = re.compile(r"(embeddings|encoder\.layer\.\d+\.(?:attention\.output|output))"
                         r"\.LayerNorm\.(weight|bias|gamma|beta)")
_LINEAR = re.compile(r"(encoder\.layer\.\d+\.(?:attention\.self\.(?:query|key|value)|"
                     r"attention\.output\.dense|intermediate\.dense|output\.dense)|pooler\.dense)"
                     r"\.(weight|bias)")


def is_hf_folder(path):
  """True when `path` is a folder holding an HF config.json and model weights."""
  return bool(path) and os.path.isdir(path) and os.path.exists(os.path.join(
      path, CONFIG_FILE)) and (os.path.exists(os.path.join(path, WEIGHTS_FILE)) or
                               os.path.exists(os.path.join(path, PYTORCH_FILE)))


def _google_path(hf_module):
  """`encoder.layer.3.attention.self.query` -> `bert/encoder/layer_3/attention/self/query`."""
  return "bert/" + re.sub(r"layer\.(\d+)", r"layer_\1", hf_module).replace(".", "/")


def google_name(hf_name):
  """(google-research/bert variable name, transpose?) of an HF BERT weight name; None for what is
  not an encoder or SQuAD-head weight."""
  name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
  if name in ("qa_outputs.weight", "qa_outputs.bias"):
    # Both are [out=2, in=hidden] / [2]: already run_squad.py's cls/squad/output_weights layout.
    return "cls/squad/output_" + ("weights" if name.endswith("weight") else "bias"), False
  m = _EMBEDDING.fullmatch(name)
  if m:
    return f"bert/embeddings/{m.group(1)}", False
  m = _LAYER_NORM.fullmatch(name)
  if m:
    return _google_path(m.group(1)) + "/LayerNorm/" + ("gamma" if m.group(2) in ("weight", "gamma")
                                                       else "beta"), False
  m = _LINEAR.fullmatch(name)
  if m:
    is_weight = m.group(2) == "weight"
    return _google_path(m.group(1)) + ("/kernel" if is_weight else "/bias"), is_weight
  return None


def _auto_class(folder):
  """The transformers Auto class that keeps every weight of the folder's model: a fine-tuned
  `*ForQuestionAnswering` (config.json's `architectures`) keeps its span head only through
  AutoModelForQuestionAnswering; AutoModel loads the encoder alone."""
  try:
    with open(os.path.join(folder, CONFIG_FILE), encoding="utf-8") as f:
      architectures = json.load(f).get("architectures") or []
  except (OSError, ValueError, AttributeError):
    architectures = []
  if any(str(a).endswith("ForQuestionAnswering") for a in architectures):
    return "AutoModelForQuestionAnswering"
  return "AutoModel"


def _weights_path(folder):
  path = os.path.join(folder, WEIGHTS_FILE)
  if not os.path.exists(path):
    if os.path.exists(os.path.join(folder, PYTORCH_FILE)):
      raise errors.MissingFileError(
          f"{folder}: has {PYTORCH_FILE} but no {WEIGHTS_FILE}; convert it once with "
          f"transformers (`{_auto_class(folder)}.from_pretrained(dir).save_pretrained(dir, "
          f"safe_serialization=True)`), torch is not a dependency here")
    raise errors.MissingFileError(f"{path}: not found")
  return path


def read_hf_weights(model, folder, num_heads):
  """Copies an HF BERT `folder`'s weights into a span model; returns a `named_weights.LoadReport`
  (`unused`: HF names).

  Raises:
    FileNotFoundError: no model.safetensors.
    named_weights.CheckpointError: an encoder weight is missing or has another shape.
  """
  path = _weights_path(folder)
  with safe_open(path, framework="np") as tensors:
    shapes, display, transposed, unused = {}, {}, {}, []  # transposed: by HF name
    for hf_name in tensors.keys():
      mapped = google_name(hf_name)
      if mapped is None:
        unused.append(hf_name)
        continue
      name, transpose = mapped
      shape = tuple(tensors.get_slice(hf_name).get_shape())
      shapes[name] = shape[::-1] if transpose else shape
      display[name], transposed[hf_name] = hf_name, transpose

    def read(name):
      array = tensors.get_tensor(display[name])
      return array.T if transposed[display[name]] else array

    entries, skipped = tf1_checkpoint.to_entries(shapes, read, num_heads, display=display.get)
    for entry in entries:  # messages show the HF tensor's own shape
      if transposed[entry.source_name]:
        entry.source_shape = entry.source_shape[::-1]
    return named_weights.assign(model, entries, unused + skipped, path, KIND,
                                hint="does the model's config.json match?")


def load_hf_weights(model, folder):
  """`read_hf_weights` with the model's heads: {"restored": tfm names, "new": weights left as
  initialized, "unused": HF names}."""
  encoder = model.labeler.checkpoint_items["encoder"]
  report = read_hf_weights(model, folder, encoder.get_config()["num_attention_heads"])
  logging.info("%s", report)
  return {"restored": report.restored, "new": report.new, "unused": report.unused}
