"""Loads a Hugging Face BERT folder (config.json, model.safetensors, vocab.txt) into a tfm BertEncoder.

Weights are read with the `safetensors` package into NumPy (no PyTorch). PyTorch `nn.Linear` stores
[out, in] matrices, Keras kernels are [in, out]; tfm's attention projections are `EinsumDense` kernels
of [hidden, heads, head_size] (query/key/value) and [heads, head_size, hidden] (output), so those are
transposed and reshaped. The mapping is from transformers' `BertModel` names (modeling_bert.py) to
tfm `BertEncoder` variable names (official/nlp/modeling/networks/bert_encoder.py).
"""

import os
import re

import numpy as np
import tensorflow as tf
from absl import logging
from safetensors.numpy import load_file

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.txt"


def is_hf_folder(path):
  """True when `path` is a folder holding an HF config.json and model weights."""
  return bool(path) and os.path.isdir(path) and os.path.exists(os.path.join(path, CONFIG_FILE)) and (
      os.path.exists(os.path.join(path, WEIGHTS_FILE)) or
      os.path.exists(os.path.join(path, "pytorch_model.bin")))


def _tfm_name(hf_name):
  """tfm variable-name suffix and array transform for an HF BertModel weight name, or None."""
  name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
  fixed = {
      "embeddings.word_embeddings.weight": "word_embeddings/embeddings",
      "embeddings.position_embeddings.weight": "position_embedding/embeddings",
      "embeddings.token_type_embeddings.weight": "type_embeddings/embeddings",
      "embeddings.LayerNorm.weight": "embeddings/layer_norm/gamma",
      "embeddings.LayerNorm.bias": "embeddings/layer_norm/beta",
      "pooler.dense.weight": ("pooler_transform/kernel", "linear"),
      "pooler.dense.bias": "pooler_transform/bias",
      "qa_outputs.weight": ("predictions/transform/logits/kernel", "linear"),
      "qa_outputs.bias": "predictions/transform/logits/bias",
  }
  if name in fixed:
    return fixed[name] if isinstance(fixed[name], tuple) else (fixed[name], "copy")
  m = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", name)
  if not m:
    return None
  layer, module, kind = m.groups()
  prefix = f"transformer/layer_{layer}/"
  per_layer = {
      "attention.self.query": ("self_attention/query", "qkv"),
      "attention.self.key": ("self_attention/key", "qkv"),
      "attention.self.value": ("self_attention/value", "qkv"),
      "attention.output.dense": ("self_attention/attention_output", "attention_output"),
      "attention.output.LayerNorm": ("self_attention_layer_norm", "norm"),
      "intermediate.dense": ("intermediate", "linear"),
      "output.dense": ("output", "linear"),
      "output.LayerNorm": ("output_layer_norm", "norm"),
  }
  if module not in per_layer:
    return None
  tfm_module, shape_kind = per_layer[module]
  if shape_kind == "norm":
    return prefix + tfm_module + ("/gamma" if kind == "weight" else "/beta"), "copy"
  if kind == "bias":
    return prefix + tfm_module + "/bias", "copy"
  return prefix + tfm_module + "/kernel", shape_kind if shape_kind != "linear" else "linear"


def _convert(array, transform, target_shape):
  if transform == "copy":
    return array.reshape(target_shape)
  if transform == "linear":
    return array.T
  # qkv: [out=heads*size, in=hidden] -> [hidden, heads, size]; bias handled by "copy" reshape.
  # attention_output: [out=hidden, in=heads*size] -> [heads, size, hidden].
  return array.T.reshape(target_shape)


def load_hf_weights(model, folder):
  """Copies an HF BERT folder's weights into a model built by `model.span_model.build_span_model`.

  Args:
    model: a Keras model whose weights include a tfm BertEncoder's (and optionally the span head).
    folder: HF folder with model.safetensors.

  Returns:
    A dict: `restored` (tfm names), `new` (model weights the checkpoint did not have, e.g. the span
    head of a not-yet-fine-tuned encoder) and `unused` (checkpoint names not mapped).

  Raises:
    FileNotFoundError: no model.safetensors (a pytorch_model.bin alone is named with a fix).
    ValueError: an encoder weight is missing from the checkpoint or has another shape.
  """
  path = os.path.join(folder, WEIGHTS_FILE)
  if not os.path.exists(path):
    if os.path.exists(os.path.join(folder, "pytorch_model.bin")):
      raise FileNotFoundError(
          f"{folder}: has pytorch_model.bin but no model.safetensors; convert it once with "
          f"transformers (`AutoModel.from_pretrained(dir).save_pretrained(dir, "
          f"safe_serialization=True)`), torch is not a dependency here")
    raise FileNotFoundError(f"{path}: not found")
  tensors = load_file(path)
  by_suffix = {}
  for weight in model.weights:
    by_suffix[re.sub(r"(_\d+)?:0$", "", weight.name)] = weight
  assignments = {}
  unused = []
  for hf_name, array in sorted(tensors.items()):
    mapped = _tfm_name(hf_name)
    if mapped is None:
      unused.append(hf_name)
      continue
    tfm_name, transform = mapped
    weight = by_suffix.get(tfm_name)
    if weight is None:
      unused.append(hf_name)
      continue
    if array.size != np.prod(weight.shape) or (transform == "linear" and
                                                array.T.shape != tuple(weight.shape)):
      raise ValueError(f"{path}: {hf_name} has shape {tuple(array.shape)} but {tfm_name} needs "
                       f"{tuple(weight.shape)}; does the model's config.json match?")
    value = _convert(array, transform, weight.shape)
    assignments[tfm_name] = (weight, value)
  new = [name for name in by_suffix if name not in assignments]
  missing_encoder = [name for name in new if not name.startswith("predictions/")]
  if missing_encoder:
    raise ValueError(f"{path}: no weights for encoder variables {missing_encoder[:5]}"
                     f"{' ...' if len(missing_encoder) > 5 else ''}; is it a BERT checkpoint?")
  for weight, value in assignments.values():
    weight.assign(value.astype(weight.dtype.as_numpy_dtype))
  logging.info("restored %d weights from %s; new (randomly initialized): %s; unused: %s",
               len(assignments), path, new or "none", unused or "none")
  return {"restored": sorted(assignments), "new": new, "unused": unused}
