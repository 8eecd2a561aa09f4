"""The HF safetensors -> tfm BertEncoder conversion, against PyTorch/transformers reference values.

The fixture tests/fixtures/minilm_reference.npz was computed once by tools/make_hf_reference.py with
transformers' BertModel on the packaged all-MiniLM-L6-v2 (its `versions` array names the versions).
"""

import json
import os

import numpy as np
import pytest

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import hf_checkpoint
from squad_qa.model import span_model
from squad_qa.preprocess import wordpiece
from tests import testutil

FIXTURE = testutil.REPO / "tests" / "fixtures" / "minilm_reference.npz"


@pytest.fixture(scope="module")
def reference():
  return np.load(FIXTURE)


@pytest.fixture(scope="module")
def minilm():
  config = bert_config_lib.BertConfig.from_json_file(
      os.path.join(testutil.minilm_dir(), "config.json"))
  model, encoder = span_model.build_span_model(config)
  report = hf_checkpoint.load_hf_weights(model, testutil.minilm_dir())
  return model, encoder, report


def test_config_is_read_as_hf_with_exact_gelu():
  config = bert_config_lib.BertConfig.from_json_file(
      os.path.join(testutil.minilm_dir(), "config.json"))
  assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
          config.intermediate_size, config.vocab_size) == (384, 6, 12, 1536, 30522)
  assert config.exact_gelu  # HF "gelu" is the erf form
  google = bert_config_lib.BertConfig.from_dict(dict(testutil.TINY_BERT_CONFIG))
  assert not google.exact_gelu  # google-research "gelu" is the tanh form


def test_report_names_what_was_restored_and_what_is_new(minilm):
  _, _, report = minilm
  assert len(report["restored"]) == 5 + 6 * 16 + 2  # embeddings, 6 layers, pooler
  assert report["new"] == [
      "predictions/transform/logits/kernel", "predictions/transform/logits/bias"
  ]
  assert report["unused"] == ["embeddings.position_ids"]


def test_encoder_matches_transformers_within_1e_4(minilm, reference):
  _, encoder, _ = minilm
  sequence_output, pooled_output = encoder(
      {
          "input_word_ids": reference["input_ids"],
          "input_mask": reference["attention_mask"],
          "input_type_ids": reference["token_type_ids"]
      }, training=False)
  mask = reference["attention_mask"].astype(bool)
  diff = np.abs(sequence_output.numpy() - reference["last_hidden_state"])
  assert diff[mask].max() <= 1e-4
  assert diff.max() <= 1e-4  # padded positions too
  assert np.abs(pooled_output.numpy() - reference["pooler_output"]).max() <= 1e-4
  # The reference is not trivially small: a wrong mapping could not pass by accident.
  assert np.abs(reference["last_hidden_state"]).max() > 1.0


def test_our_tokenizer_gives_the_reference_input_ids(reference):
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file(), do_lower_case=True)
  for row, (first, second) in enumerate(reference["texts"]):
    pieces = [t.ids.tolist() for t in tokenizer.tokenize([str(first), str(second)])]
    ids = [tokenizer.cls_id] + pieces[0] + [tokenizer.sep_id]
    if str(second):
      ids += pieces[1] + [tokenizer.sep_id]
    length = int(reference["attention_mask"][row].sum())
    assert ids == reference["input_ids"][row, :length].tolist()


def test_shape_mismatch_is_an_error_naming_the_variable(tmp_path):
  config = bert_config_lib.BertConfig.from_dict(
      dict(json.load(open(os.path.join(testutil.minilm_dir(), "config.json"))), hidden_size=192,
           num_attention_heads=6))
  model, _ = span_model.build_span_model(config)
  # Names are checked in sorted order, so the first mismatch reported is the embedding LayerNorm.
  with pytest.raises(
      ValueError, match=r"embeddings\.LayerNorm\.bias has shape \(384,\) but "
      r"embeddings/layer_norm/beta needs \(192,\)"):
    hf_checkpoint.load_hf_weights(model, testutil.minilm_dir())


@pytest.mark.parametrize("architectures, auto_class",
                         [(["BertModel"], "AutoModel"),
                          (["BertForQuestionAnswering"], "AutoModelForQuestionAnswering")])
def test_pytorch_bin_alone_says_how_to_convert_keeping_its_heads(tmp_path, architectures,
                                                                 auto_class):
  """The conversion named keeps a fine-tuned span head (AutoModel would drop qa_outputs)."""
  config = json.load(open(os.path.join(testutil.minilm_dir(), "config.json")))
  (tmp_path / "config.json").write_text(json.dumps(dict(config, architectures=architectures)))
  (tmp_path / "pytorch_model.bin").write_bytes(b"not really")
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  with pytest.raises(FileNotFoundError) as raised:
    hf_checkpoint.load_hf_weights(model, str(tmp_path))
  assert f"(`{auto_class}.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)`)" in (
      str(raised.value))
