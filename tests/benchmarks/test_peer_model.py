"""benchmarks/peer_model.py: our trained weights as an HF folder that reads back to the same
weights."""

import json

import numpy as np
import tensorflow as tf

from benchmarks import peer_model
from squad_qa.base import artifacts
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import hf_checkpoint
from squad_qa.model import span_model
from tests import testutil


def test_the_hf_folder_reads_back_to_the_same_weights(tmp_path):
  # An HF config: "gelu" there is the exact form, as the model was built.
  config = bert_config_lib.BertConfig.from_dict(
      dict(testutil.TINY_BERT_CONFIG, model_type="bert"))
  assert config.exact_gelu
  tf.keras.utils.set_random_seed(5)
  model, _ = span_model.build_span_model(config)
  model_dir = tmp_path / "model_out"
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(model_dir),
                             max_to_keep=1).save(checkpoint_number=7)
  artifacts.write_json(str(model_dir / artifacts.QA_CONFIG_FILE),
                       {"bert_config": config.to_dict(), "vocab_file": testutil.vocab_file(),
                        "do_lower_case": True})

  folder = tmp_path / "peer_model"
  # 3 embeddings and their LayerNorm's 2, 16 tensors per layer, and the head's 2 (no pooler).
  assert peer_model.write_hf_folder(str(model_dir), str(folder)) == (
      5 + 16 * config.num_hidden_layers + 2)
  written = json.loads((folder / "config.json").read_text())
  assert written["hidden_act"] == "gelu" and written["layer_norm_eps"] == 1e-12
  assert written["num_attention_heads"] == config.num_attention_heads
  assert (folder / "vocab.txt").read_text() == open(testutil.vocab_file()).read()
  assert json.loads((folder / "tokenizer_config.json").read_text())["do_lower_case"] is True

  # What the project's HF reader makes of it is the model we started from, variable by variable.
  again_config = bert_config_lib.BertConfig.from_json_file(str(folder / "config.json"))
  assert again_config == config
  tf.keras.utils.set_random_seed(6)
  again, _ = span_model.build_span_model(again_config)
  report = hf_checkpoint.read_hf_weights(again, str(folder), config.num_attention_heads)
  assert not report.unused
  assert not [name for name in report.new if "pooler" not in name]
  original = {w.name: w.numpy() for w in model.weights}
  assert len(original) == len(again.weights)
  for weight in again.weights:
    if "pooler" not in weight.name:
      np.testing.assert_array_equal(weight.numpy(), original[weight.name], err_msg=weight.name)


def test_a_tanh_gelu_model_is_written_as_gelu_new():
  config = bert_config_lib.BertConfig.from_dict(dict(testutil.TINY_BERT_CONFIG))
  assert not config.exact_gelu
  assert peer_model.hf_config(config)["hidden_act"] == "gelu_new"
