r"""Writes a trained model of ours as a Hugging Face `BertForQuestionAnswering` folder, so the peer
runs the very weights we serve and the two sides' EM/F1 differ only by featurization, decoding and
arithmetic, not by training.

  python -m benchmarks.peer_model --model_dir=model_out --output_dir=peer_model

The folder holds config.json (transformers' BertConfig fields, from the model's qa_config.json),
model.safetensors, vocab.txt and tokenizer_config.json (the featurization's do_lower_case). The
names and layouts are the inverse of the reader's (model/hf_checkpoint.py: each HF name maps to a
google-research/bert name, then through model/tf1_checkpoint.py's table to a tfm variable): a tfm
variable is reshaped back to the google-research layout and `nn.Linear` weights are transposed back
to [out, in]. Reading the folder back with `hf_checkpoint.read_hf_weights` gives the same weights
(tests/benchmarks/test_peer_model.py).
"""

import json
import os
import shutil
import sys

from squad_qa.base import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags  # pylint: disable=g-import-not-at-top
import numpy as np
from safetensors.numpy import save_file
import tensorflow as tf

from squad_qa.flags import command_line
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import hf_checkpoint
from squad_qa.model import named_weights
from squad_qa.model import span_model
from squad_qa.model import tf1_checkpoint
from squad_qa.base import artifacts

FLAGS = flags.FLAGS

# tfm's BertEncoder normalizes with this epsilon (google-research/bert's); transformers' default
# BertConfig.layer_norm_eps is the same, written out so the folder does not depend on it.
LAYER_NORM_EPS = 1e-12
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


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
      "bert.embeddings.LayerNorm.weight": (hidden,), "bert.embeddings.LayerNorm.bias": (hidden,),
      "qa_outputs.weight": (2, hidden), "qa_outputs.bias": (2,)}
  for i in range(config.num_hidden_layers):
    layer = f"bert.encoder.layer.{i}."
    for module, (out, inp) in (("attention.self.query", (hidden, hidden)),
                               ("attention.self.key", (hidden, hidden)),
                               ("attention.self.value", (hidden, hidden)),
                               ("attention.output.dense", (hidden, hidden)),
                               ("intermediate.dense", (inner, hidden)),
                               ("output.dense", (hidden, inner))):
      shapes[layer + module + ".weight"] = (out, inp)
      shapes[layer + module + ".bias"] = (out,)
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
      shapes[layer + norm + ".weight"] = (hidden,)
      shapes[layer + norm + ".bias"] = (hidden,)
  return shapes


def hf_weights(model, config):
  """{HF name: float32 NumPy array in PyTorch layout} of a span model's encoder and head.

  Args:
    model: from `model.span_model.build_span_model(config)`.
    config: its `model.bert_config.BertConfig`.

  Raises:
    KeyError: a weight the name table maps to is not in the model.
  """
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
  return {"architectures": ["BertForQuestionAnswering"], "model_type": "bert",
          "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
          "num_hidden_layers": config.num_hidden_layers,
          "num_attention_heads": config.num_attention_heads,
          "intermediate_size": config.intermediate_size,
          # transformers' "gelu" is the exact erf form, its "gelu_new" google-research's tanh one.
          "hidden_act": ("gelu" if config.exact_gelu else "gelu_new") if config.hidden_act == "gelu"
                        else config.hidden_act,
          "hidden_dropout_prob": config.hidden_dropout_prob,
          "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
          "max_position_embeddings": config.max_position_embeddings,
          "type_vocab_size": config.type_vocab_size,
          "initializer_range": config.initializer_range, "layer_norm_eps": LAYER_NORM_EPS,
          "pad_token_id": 0}


def tokenizer_config(do_lower_case, config):
  """transformers' tokenizer_config.json for the WordPiece vocab: BERT's special tokens."""
  return {"tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
          "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
          "mask_token": "[MASK]", "model_max_length": config.max_position_embeddings}


def write_hf_folder(model_dir, output_dir):
  """Writes --model_dir's latest checkpoint as an HF folder; returns the number of tensors.

  Raises:
    SystemExit: no checkpoint, or output_dir exists (one line each).
  """
  qa_config = artifacts.read_qa_config(model_dir)
  checkpoint = tf.train.latest_checkpoint(model_dir)
  if not checkpoint:
    sys.exit(f"peer_model.py: {model_dir} has no checkpoint; train one with train.py")
  if os.path.exists(output_dir):
    sys.exit(f"peer_model.py: {output_dir} exists; give a new --output_dir")
  config = bert_config_lib.BertConfig(**qa_config["bert_config"])
  model, _ = span_model.build_span_model(config)
  tf.train.Checkpoint(model=model).read(checkpoint).expect_partial()
  weights = hf_weights(model, config)
  os.makedirs(output_dir)
  save_file(weights, os.path.join(output_dir, hf_checkpoint.WEIGHTS_FILE),
            metadata={"format": "pt"})
  with open(os.path.join(output_dir, hf_checkpoint.CONFIG_FILE), "w") as f:
    json.dump(hf_config(config), f, indent=2)
  shutil.copy(qa_config["vocab_file"], os.path.join(output_dir, hf_checkpoint.VOCAB_FILE))
  with open(os.path.join(output_dir, TOKENIZER_CONFIG_FILE), "w") as f:
    json.dump(tokenizer_config(qa_config["do_lower_case"], config), f, indent=2)
  return len(weights)


def main(argv):
  if len(argv) > 1:
    sys.exit(f"peer_model.py: unexpected arguments {argv[1:]}")
  if not FLAGS.model_dir or not FLAGS.output_dir:
    sys.exit("peer_model.py: give --model_dir and --output_dir")
  count = write_hf_folder(FLAGS.model_dir, FLAGS.output_dir)
  print(f"wrote {count} tensors of {FLAGS.model_dir} to {FLAGS.output_dir}")


def define_flags():
  """The command's flags, defined when run as a script (importing the module defines none)."""
  flags.DEFINE_string("model_dir", None, "train.py --model_dir (its latest checkpoint).")
  flags.DEFINE_string("output_dir", None, "The HF folder to write (must not exist yet).")


if __name__ == "__main__":
  define_flags()
  command_line.run(main)
