"""--init_checkpoint of every kind, checked against an independent NumPy BERT (tests/numpy_bert.py).

Each kind is written the way its own tool writes it: a google-research/bert TF1 checkpoint with
`tf.compat.v1` variables and a v1 `Saver` (pretrained, and run_squad.py-fine-tuned with Adam slots),
a TF2 encoder checkpoint by tf-models-official's own `tf2_bert_encoder_checkpoint_converter`, an HF
folder with safetensors under transformers' names (and the packaged real MiniLM). Each is loaded
through the code path of `--init_checkpoint` (`model.checkpoints.resolve_model_files` +
`checkpoints.initialize_from`) and its outputs compared with the NumPy forward pass over the same
weights. Measured differences are printed (`pytest -s`).
"""

import json
import logging as std_logging
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import flagsaver
from safetensors.numpy import load_file
from safetensors.numpy import save_file

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import named_weights
from squad_qa.model import span_model
from tests import numpy_bert
from tests import testutil

TOLERANCE = 1e-4
# google-research bert_config.json keys; small, with a head size (12) unlike hidden/heads
CONFIG = {
    "vocab_size": 97,
    "hidden_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "initializer_range": 0.02
}
HEAD = ["predictions/transform/logits/kernel", "predictions/transform/logits/bias"]


def make_inputs(vocab_size=CONFIG["vocab_size"], batch=3, seq=24, seed=7):
  """int32 [batch, seq] ids, mask and segment ids; rows 1 and 2 padded, two segments each."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab_size, size=(batch, seq)).astype(np.int32)
  mask = np.zeros((batch, seq), np.int32)
  types = np.zeros((batch, seq), np.int32)
  for row, length in enumerate([seq, 15, 7][:batch]):
    mask[row, :length] = 1
    types[row, length // 2:length] = 1
    ids[row, length:] = 0
  return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def write_tf1_checkpoint(folder, params, name="bert_model.ckpt", global_step=None, adam_slots=False,
                         config=CONFIG):
  """Writes `params` as google-research/bert does: tf.compat.v1 variables, a v1 Saver.

  A pretrained release (`global_step=None`) has no `checkpoint` state file; a run_squad.py output
  dir has one, a global step and Adam's `adam_m`/`adam_v` slots. bert_config.json and a vocab.txt
  go beside it.
  """
  os.makedirs(folder, exist_ok=True)
  with tf.Graph().as_default():
    values = {}
    for var_name, value in params.items():
      # Initialized from random ops as in modeling.py, then loaded: the .meta stays small.
      values[tf.compat.v1.get_variable(var_name, shape=value.shape, dtype=tf.float32)] = value
      if adam_slots:
        for slot in ("adam_m", "adam_v"):
          values[tf.compat.v1.get_variable(f"{var_name}/{slot}", shape=value.shape,
                                           dtype=tf.float32, trainable=False)] = value * 0 + 0.5
    step = tf.compat.v1.train.get_or_create_global_step()
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for variable, value in values.items():
        variable.load(value, sess)
      if global_step is not None:
        step.load(global_step, sess)
      saver.save(sess, os.path.join(folder, name), global_step=global_step, write_state=global_step
                 is not None)
  with open(os.path.join(folder, "bert_config.json"), "w") as f:
    json.dump(config, f)
  with open(os.path.join(folder, "vocab.txt"), "w") as f:
    f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                      [f"w{i}" for i in range(5, config["vocab_size"])]) + "\n")
  return str(folder)


def load_as_init_checkpoint(path, bert_config_file=None):
  """What train.py/export.py do with --init_checkpoint; returns (model, encoder, report)."""
  config_file, _ = checkpoints.resolve_model_files(path, bert_config_file, None)
  model, encoder = span_model.build_span_model(
      bert_config_lib.BertConfig.from_json_file(config_file))
  report = checkpoints.initialize_from(model, path)
  return model, encoder, report


def max_diffs(model, encoder, params, inputs, exact_gelu=False, label="",
              num_heads=CONFIG["num_attention_heads"], compare_pooled=True):
  """Max abs differences (sequence, pooled[, start, end]) of the model against NumPy BERT."""
  sequence, pooled = encoder(inputs, training=False)
  ref_sequence, ref_pooled = numpy_bert.bert_forward(params, inputs["input_word_ids"],
                                                     inputs["input_mask"], inputs["input_type_ids"],
                                                     num_heads, exact_gelu=exact_gelu)
  diffs = {"sequence_output": np.abs(sequence.numpy() - ref_sequence).max()}
  if compare_pooled:
    diffs["pooled_output"] = np.abs(pooled.numpy() - ref_pooled).max()
  assert np.abs(ref_sequence).max() > 1.0  # not trivially small
  if "cls/squad/output_weights" in params:
    start, end = model(inputs, training=False)
    ref_start, ref_end = numpy_bert.squad_logits(params, ref_sequence)
    diffs["start_logits"] = np.abs(start.numpy() - ref_start).max()
    diffs["end_logits"] = np.abs(end.numpy() - ref_end).max()
  print(f"\nMAX_ABS_DIFF {label}: " + ", ".join(f"{k} {v:.3g}" for k, v in diffs.items()))
  return diffs


@pytest.fixture(scope="module")
def tf1_pretrained(tmp_path_factory):
  """A google-research pretrained release: bert_model.ckpt.*, no state file, with MLM/NSP heads."""
  params = numpy_bert.random_bert_params(CONFIG, seed=1, pretraining_heads=True)
  return write_tf1_checkpoint(tmp_path_factory.mktemp("uncased_L-2_H-48_A-4"), params), params


@pytest.fixture(scope="module")
def tf1_squad(tmp_path_factory):
  """A run_squad.py --output_dir: model.ckpt-88 with cls/squad/*, global_step, Adam slots."""
  params = numpy_bert.random_bert_params(CONFIG, seed=2, squad_head=True)
  folder = write_tf1_checkpoint(tmp_path_factory.mktemp("squad_out"), params, name="model.ckpt",
                                global_step=88, adam_slots=True)
  return folder, params


def test_tf1_pretrained_checkpoint_matches_numpy_bert(tf1_pretrained):
  folder, params = tf1_pretrained
  assert not os.path.exists(os.path.join(folder, "checkpoint"))  # as in Google's zip files
  assert checkpoints.checkpoint_kind(folder) == checkpoints.TF1_CHECKPOINT
  model, encoder, report = load_as_init_checkpoint(folder)
  diffs = max_diffs(model, encoder, params, make_inputs(), label="TF1 pretrained")
  assert max(diffs.values()) <= TOLERANCE
  assert report.new == HEAD and not report.head_restored  # the NSP head is NOT the span head
  assert len(report.restored) == 5 + 2 * 16 + 2
  assert "cls/seq_relationship/output_weights" in report.unused and "global_step" in report.unused
  assert "span head new" in str(report) and "\n" not in str(report)
  # The pretraining heads and the pretraining run's step and slots are what such a release
  # holds besides the encoder: nothing to act on, so not said.
  assert str(report) == (f"{report.kind} {report.path}: restored {len(report.restored)} variables, "
                         f"span head new (randomly initialized, untrained)")


def test_tf1_prefix_forms_all_name_the_same_checkpoint(tf1_pretrained):
  folder, _ = tf1_pretrained
  prefix = os.path.join(folder, "bert_model.ckpt")
  for path in (folder, prefix, prefix + ".index", prefix + ".data-00000-of-00001",
               prefix + ".meta"):
    assert checkpoints.checkpoint_prefix(path) == prefix
    assert checkpoints.checkpoint_kind(path) == checkpoints.TF1_CHECKPOINT
  assert checkpoints.resolve_model_files(prefix, None,
                                         None) == (os.path.join(folder, "bert_config.json"),
                                                   os.path.join(folder, "vocab.txt"))


def test_an_init_checkpoint_that_does_not_exist_is_named_as_such(tmp_path, tf1_pretrained):
  """A mistyped --init_checkpoint is one line saying it is not there (not that a config is
  missing); a prefix whose files exist is accepted as before."""
  missing = str(tmp_path / "no" / "such" / "bert_model.ckpt")
  with pytest.raises(errors.MissingFileError) as error:
    checkpoints.resolve_model_files(missing, None, None)
  assert str(error.value) == (f"--init_checkpoint={missing}: no such file, folder or checkpoint "
                              f"prefix")
  folder, _ = tf1_pretrained
  assert checkpoints.resolve_model_files(os.path.join(folder, "bert_model.ckpt"), None,
                                         None)[1] == os.path.join(folder, "vocab.txt")
  # A folder as --vocab_file (train.py, export.py, convert_checkpoint): named, with the file in it.
  with pytest.raises(errors.UsageError) as error:
    checkpoints.resolve_model_files(folder, None, folder)
  assert str(error.value) == (f"--vocab_file={folder} is a folder, not a vocab file; pass "
                              f"--vocab_file={os.path.join(folder, 'vocab.txt')}")
  # A vocab with other tokens than the checkpoint's (train.py, export.py, convert_checkpoint):
  # refused; the same tokens in another file (here: other line endings) are taken.
  own = os.path.join(folder, "vocab.txt")
  with open(own, encoding="utf-8") as f:
    tokens = f.read().splitlines()
  shuffled, same = tmp_path / "shuffled.txt", tmp_path / "same.txt"
  shuffled.write_text("\n".join(tokens[:5] + [tokens[6], tokens[5]] + tokens[7:]) + "\n")
  same.write_text("\r\n".join(tokens) + "\r\n")
  with pytest.raises(errors.UsageError) as error:
    checkpoints.resolve_model_files(folder, None, str(shuffled))
  assert str(error.value) == (
      f"--vocab_file={shuffled} is not the vocab of --init_checkpoint={folder} ({own}, other "
      f"tokens): its token ids mean other words to the encoder; drop --vocab_file to use the "
      f"checkpoint's")
  assert checkpoints.resolve_model_files(folder, None, str(same))[1] == str(same)


def test_tf1_squad_checkpoint_restores_the_span_head(tf1_squad):
  folder, params = tf1_squad
  assert checkpoints.checkpoint_prefix(folder) == os.path.join(folder, "model.ckpt-88")
  model, encoder, report = load_as_init_checkpoint(folder)
  diffs = max_diffs(model, encoder, params, make_inputs(), label="TF1 run_squad fine-tuned")
  assert max(diffs.values()) <= TOLERANCE
  assert report.head_restored and report.new == []
  assert any(name.endswith("/adam_m") for name in report.unused)
  assert len([n for n in report.unused if n.endswith(("/adam_m", "/adam_v"))]) == 82  # of 41
  assert str(report).endswith("; its training state (optimizer, step counts, dropout) is left: "
                              "this run starts its own")  # no weight of the model is left out
  # cls/squad/output_weights is [2, hidden]; the Dense kernel is its transpose.
  head = {w.name.split(":")[0]: w.numpy() for w in model.weights if "logits" in w.name}
  np.testing.assert_array_equal(head["predictions/transform/logits/kernel"],
                                params["cls/squad/output_weights"].T)


def _one_line_error(path, config, match):
  model, _ = span_model.build_span_model(bert_config_lib.BertConfig.from_dict(config))
  with pytest.raises(checkpoints.CheckpointError, match=match) as error:
    checkpoints.initialize_from(model, path)
  assert "\n" not in str(error.value)
  # Nothing was assigned: the model still has its random initialization (no half-loaded model).
  return model


def test_missing_tf1_encoder_variable_is_a_named_error(tmp_path):
  params = numpy_bert.random_bert_params(CONFIG, seed=3)
  del params["bert/encoder/layer_1/attention/self/key/bias"]
  folder = write_tf1_checkpoint(tmp_path / "ckpt", params)
  _one_line_error(
      folder, CONFIG,
      r"transformer/layer_1/self_attention/key/bias \(shape \(4, 12\)\) is missing: "
      r"bert/encoder/layer_1/attention/self/key/bias is not in the checkpoint")


def test_shape_mismatch_names_both_variables_and_shapes(tf1_pretrained):
  folder, params = tf1_pretrained
  model = _one_line_error(
      folder, dict(CONFIG, intermediate_size=80),
      r"bert/encoder/layer_0/intermediate/dense/bias has shape \(96,\) but "
      r"transformer/layer_0/intermediate/bias needs \(80,\); does --bert_config_file match")
  word_embeddings = [w for w in model.weights if "word_embeddings" in w.name][0]
  assert not np.allclose(word_embeddings.numpy(), params["bert/embeddings/word_embeddings"])


def test_checkpoint_with_more_layers_than_the_config_is_an_error(tf1_pretrained):
  folder, _ = tf1_pretrained
  _one_line_error(
      folder, dict(CONFIG, num_hidden_layers=1),
      r"bert/encoder/layer_1/attention/output/LayerNorm/beta \(48,\) \(for "
      r"transformer/layer_1/self_attention_layer_norm/beta\) has no variable in the "
      r"model")


def test_not_a_checkpoint_is_a_one_line_error(tmp_path):
  """Said before a missing config is: a folder of no checkpoint needs another path, not a
  --bert_config_file."""
  (tmp_path / "vocab.txt").write_text("[PAD]\n")
  for find in (checkpoints.checkpoint_kind,
               lambda path: checkpoints.resolve_model_files(path, None, None)):
    with pytest.raises(FileNotFoundError) as raised:
      find(str(tmp_path))
    assert str(raised.value).startswith(f"--init_checkpoint={tmp_path}: not found or not a "
                                        f"checkpoint; expected an HF BERT folder")


@pytest.fixture(scope="module")
def tfm_tf2(tf1_pretrained, tmp_path_factory):
  """tf-models-official's own converter run on the TF1 checkpoint, as its users run it."""
  folder, params = tf1_pretrained
  out = tmp_path_factory.mktemp("tfm_tf2")
  testutil.run_cli("-m official.nlp.tools.tf2_bert_encoder_checkpoint_converter",
                   f"--bert_config_file={folder}/bert_config.json",
                   f"--checkpoint_to_convert={folder}/bert_model.ckpt",
                   f"--converted_checkpoint_path={out}/bert_model.ckpt")
  return str(out), params


@pytest.mark.slow
def test_tfm_tf2_encoder_checkpoint_matches_numpy_bert(tfm_tf2, tf1_pretrained):
  out, params = tfm_tf2
  config_file = os.path.join(tf1_pretrained[0], "bert_config.json")
  # What tfm's converter writes: tf.train.Checkpoint(encoder=BertEncoder), saved as <prefix>-1.
  prefix = checkpoints.checkpoint_prefix(out)
  assert prefix == os.path.join(out, "bert_model.ckpt-1")
  names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  assert "_CHECKPOINTABLE_OBJECT_GRAPH" in names
  assert {n.split("/")[0] for n in names
         } == {"encoder", "save_counter", "_CHECKPOINTABLE_OBJECT_GRAPH"}
  assert checkpoints.checkpoint_kind(out) == checkpoints.TF2_CHECKPOINT
  for path in (out, prefix):
    model, encoder, report = load_as_init_checkpoint(path, config_file)
    diffs = max_diffs(model, encoder, params, make_inputs(), label=f"tfm TF2 encoder ({path})")
    assert max(diffs.values()) <= TOLERANCE
    assert report.new == HEAD and "encoder=" in report.kind


def test_own_model_dir_restores_encoder_and_head(tf1_squad, tmp_path):
  folder, params = tf1_squad
  model, _, _ = load_as_init_checkpoint(folder)
  model_dir = tmp_path / "model_out"
  # As train.py writes it: the span model and the optimizer, and qa_config.json naming the files.
  optimizer_state = tf.Variable(3, dtype=tf.int64)
  tf.train.CheckpointManager(
      tf.train.Checkpoint(model=model, optimizer=tf.train.Checkpoint(iterations=optimizer_state)),
      str(model_dir), max_to_keep=1).save(checkpoint_number=5)
  with open(model_dir / "qa_config.json", "w") as f:
    json.dump(
        {
            "bert_config_file": os.path.join(folder, "bert_config.json"),
            "vocab_file": os.path.join(folder, "vocab.txt")
        }, f)
  model, encoder, report = load_as_init_checkpoint(str(model_dir))
  diffs = max_diffs(model, encoder, params, make_inputs(), label="own --model_dir (TF2 model=)")
  assert max(diffs.values()) <= TOLERANCE
  assert report.head_restored and report.new == [] and "model=" in report.kind
  assert report.unused == ["optimizer/iterations", "save_counter"]
  assert str(report).endswith("span head restored (fine-tuned); its training state (optimizer, "
                              "step counts, dropout) is left: this run starts its own")


def google_to_hf(params):
  """transformers' BertForQuestionAnswering names and layouts for google-research-named weights.

  Like a real BertForQuestionAnswering (`BertModel(add_pooling_layer=False)`) it has no pooler.

  Written here, apart from model/hf_checkpoint.py, so the test does not share the code it checks.
  """
  hf = {"bert.embeddings.position_ids": np.arange(CONFIG["max_position_embeddings"])[None]}
  for name, value in params.items():
    if name.startswith("cls/squad/"):
      hf["qa_outputs." + ("weight" if name.endswith("weights") else "bias")] = value
      continue
    if name.startswith("bert/pooler/"):
      continue
    module, leaf = name[len("bert/"):].rsplit("/", 1)
    module = re.sub(r"layer_(\d+)", r"layer.\1", module).replace("/", ".")
    if leaf == "kernel":
      hf[f"bert.{module}.weight"] = np.ascontiguousarray(value.T)
    elif leaf in ("gamma", "beta"):
      hf[f"bert.{module}.{'weight' if leaf == 'gamma' else 'bias'}"] = value
    elif leaf == "bias":
      hf[f"bert.{module}.bias"] = value
    else:  # the three embedding tables
      hf[f"bert.{module}.{leaf}.weight"] = value
  return hf


def hf_to_google(tensors):
  """The inverse of `google_to_hf` for a BertModel's safetensors (no "bert." prefix needed)."""
  params = {}
  for name, value in tensors.items():
    name = name[len("bert."):] if name.startswith("bert.") else name
    if name == "embeddings.position_ids":
      continue
    parts = re.sub(r"layer\.(\d+)", r"layer_\1", name).split(".")
    module, leaf = "/".join(parts[:-1]), parts[-1]
    if module.endswith("LayerNorm"):
      params[f"bert/{module}/{'gamma' if leaf == 'weight' else 'beta'}"] = value
    elif module.endswith("_embeddings"):
      params[f"bert/{module}"] = value
    else:
      params[f"bert/{module}/{'kernel' if leaf == 'weight' else 'bias'}"] = (value.T if leaf
                                                                             == "weight" else value)
  return params


def test_a_checkpoint_file_or_an_export_as_init_checkpoint_names_what_to_pass(tmp_path):
  """The weights file of an HF folder names its folder; an export (assets.extra/qa_config.json)
  names the --model_dir it came from. A plain missing path keeps the general line."""
  folder = tmp_path / "hf"
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps(CONFIG))
  (folder / "model.safetensors").write_bytes(b"")
  for name in ("model.safetensors", "config.json"):
    path = str(folder / name)
    with pytest.raises(errors.UsageError) as by_loader:
      checkpoints.checkpoint_kind(path)
    with pytest.raises(errors.UsageError) as by_resolver:  # before train.py sizes the run from
      checkpoints.resolve_model_files(path, None, None)  # the config beside the path
    assert str(by_loader.value) == str(by_resolver.value) == (
        f"--init_checkpoint={path} is a file of a Hugging Face checkpoint; pass the folder "
        f"holding it: --init_checkpoint={folder}")
  export = tmp_path / "export"
  (export / "assets.extra").mkdir(parents=True)
  (export / "assets.extra" / "qa_config.json").write_text("{}")
  with pytest.raises(errors.UsageError) as raised:
    checkpoints.resolve_model_files(str(export), None, None)
  assert str(raised.value) == (f"--init_checkpoint={export} is an export of "
                               f"{commands.command('squad-qa-export')}, which "
                               f"serves and does not train; pass the --model_dir it was exported "
                               f"from")
  with pytest.raises(FileNotFoundError, match="not found or not a checkpoint"):
    checkpoints.checkpoint_kind(str(tmp_path / "model.safetensors"))


def test_a_hub_id_or_a_package_folder_says_what_to_pass(tmp_path, monkeypatch):
  """Hub ids are not downloaded: said; a folder whose subfolder holds the checkpoint (an installed
  model package) names that subfolder."""
  monkeypatch.chdir(tmp_path)
  # A bare name may also be a local folder not there (Google's release not unpacked): "if".
  for hub_id in ("bert-base-uncased", "google-bert/bert-base-uncased", "uncased_L-12_H-768_A-12"):
    with pytest.raises(FileNotFoundError) as raised:
      checkpoints.resolve_model_files(hub_id, None, None)
    assert str(raised.value) == (
        f"--init_checkpoint={hub_id}: no such file, folder or checkpoint prefix (if that is a "
        f"Hugging Face Hub id: ids are not downloaded; pass the model's folder, with config.json, "
        f"model.safetensors and vocab.txt)")
  with pytest.raises(FileNotFoundError) as raised:
    checkpoints.resolve_model_files(str(tmp_path / "no" / "such"), None, None)
  assert str(raised.value).endswith("no such file, folder or checkpoint prefix")
  package = tmp_path / "gt_model_package"
  shutil.copytree(testutil.minilm_dir(), package / "model")
  (package / "__init__.py").write_text("")
  with pytest.raises(FileNotFoundError) as raised:
    checkpoints.resolve_model_files(str(package), None, None)
  assert str(raised.value) == (f"--init_checkpoint={package}: not a checkpoint, but "
                               f"{package / 'model'} in it is one: pass that folder")
  assert checkpoints.checkpoint_kind(str(package / "model")) == checkpoints.HF_FOLDER


def test_hf_folder_with_qa_head_matches_numpy_bert(tmp_path):
  params = numpy_bert.random_bert_params(CONFIG, seed=4, squad_head=True)
  folder = tmp_path / "hf_bert_squad"
  folder.mkdir()
  save_file(google_to_hf(params), str(folder / "model.safetensors"))
  # An HF config: "gelu" there is the exact erf GELU.
  with open(folder / "config.json", "w") as f:
    json.dump(dict(CONFIG, model_type="bert", architectures=["BertForQuestionAnswering"]), f)
  shutil.copy(testutil.vocab_file(), folder / "vocab.txt")
  assert checkpoints.checkpoint_kind(str(folder)) == checkpoints.HF_FOLDER
  model, encoder, report = load_as_init_checkpoint(str(folder))
  diffs = max_diffs(model, encoder, params, make_inputs(), exact_gelu=True,
                    label="HF BertForQuestionAnswering folder", compare_pooled=False)
  assert max(diffs.values()) <= TOLERANCE
  assert report.head_restored and report.unused == ["bert.embeddings.position_ids"]
  # No pooler in a QA folder: it stays new (the span head does not use it), not an error.
  assert report.new == ["pooler_transform/kernel", "pooler_transform/bias"]
  # HF "gelu" is the erf form: the same weights under google-research's tanh GELU would fail.
  inputs = make_inputs()
  ref_tanh, _ = numpy_bert.bert_forward(params, *inputs.values(), 4, exact_gelu=False)
  assert np.abs(encoder(inputs, training=False)[0].numpy() - ref_tanh).max() > 5 * TOLERANCE


def test_real_minilm_hf_folder_matches_numpy_bert_and_transformers():
  folder = testutil.minilm_dir()
  reference = np.load(testutil.REPO / "tests" / "fixtures" / "minilm_reference.npz")
  params = hf_to_google(load_file(os.path.join(folder, "model.safetensors")))
  inputs = {
      "input_word_ids": reference["input_ids"],
      "input_mask": reference["attention_mask"],
      "input_type_ids": reference["token_type_ids"]
  }
  ref_sequence, _ = numpy_bert.bert_forward(params, *inputs.values(), 12, exact_gelu=True)
  # The NumPy reference itself agrees with transformers' BertModel (PyTorch) on the real weights.
  transformers_diff = np.abs(ref_sequence - reference["last_hidden_state"]).max()
  model, encoder, report = load_as_init_checkpoint(folder)
  sequence, _ = encoder(inputs, training=False)
  diff = np.abs(sequence.numpy() - ref_sequence).max()
  print(f"\nMAX_ABS_DIFF HF MiniLM: sequence_output vs NumPy {diff:.3g}; NumPy vs transformers "
        f"{transformers_diff:.3g}")
  assert transformers_diff <= TOLERANCE and diff <= TOLERANCE
  assert report.new == HEAD


def test_convert_refuses_a_vocab_larger_than_the_encoder_s(tf1_pretrained, tmp_path):
  """A checkpoint with no vocab beside it and a --vocab_file of more tokens than vocab_size: one
  line, nothing written (ids past the table would have no embedding)."""
  folder, _ = tf1_pretrained
  bare = tmp_path / "bare"
  bare.mkdir()
  for name in os.listdir(folder):
    if name != "vocab.txt":
      shutil.copy(os.path.join(folder, name), bare / name)
  big = tmp_path / "big_vocab.txt"
  with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
    tokens = f.read().splitlines()
  big.write_text("\n".join(tokens + [f"extra{i}" for i in range(CONFIG["vocab_size"])]) + "\n")
  from squad_qa.model import convert_checkpoint  # pylint: disable=g-import-not-at-top
  output = tmp_path / "converted"
  with pytest.raises(errors.UsageError) as raised:
    convert_checkpoint.convert(str(bare / "bert_model.ckpt"), str(output), vocab_file=str(big))
  assert str(raised.value) == (
      f"--vocab_file={big} has {len(tokens) + CONFIG['vocab_size']} tokens, but the encoder's "
      f"vocab_size is {CONFIG['vocab_size']} ({bare / 'bert_config.json'}): ids from "
      f"{CONFIG['vocab_size']} on have no embedding; pass the checkpoint's own vocab")
  assert not output.exists()


@pytest.mark.slow
def test_convert_checkpoint_once_then_start_from_the_output(tf1_squad, tmp_path):
  folder, params = tf1_squad
  others = os.listdir(tmp_path)
  output = str(tmp_path / "converted")
  wrong_config = tmp_path / "wrong_config.json"
  wrong_config.write_text(json.dumps(dict(CONFIG, intermediate_size=80)))
  code, log = testutil.run_cli("-m model.convert_checkpoint", f"--init_checkpoint={folder}",
                               f"--output={output}", f"--bert_config_file={wrong_config}",
                               expect_ok=False)
  assert code != 0 and "Traceback" not in log and not os.path.exists(output)
  assert log.splitlines()[-1].startswith("model.convert_checkpoint: ") and "needs (80,)" in log
  from squad_qa.model import convert_checkpoint  # pylint: disable=g-import-not-at-top
  convert_checkpoint.convert(folder, output)  # main() of the command above, without a process
  assert sorted(os.listdir(output)) == [
      "bert_config.json", "checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index",
      "conversion.json", "vocab.txt"
  ]
  assert checkpoints.checkpoint_kind(output) == checkpoints.TF2_CHECKPOINT
  model, encoder, report = load_as_init_checkpoint(output)
  diffs = max_diffs(model, encoder, params, make_inputs(), label="converted (TF1 squad -> TF2)")
  assert max(diffs.values()) <= TOLERANCE and report.head_restored
  # tfm code reads it as it reads its converter's output: tf.train.Checkpoint(encoder=...).
  config = bert_config_lib.BertConfig.from_dict(CONFIG)
  encoder = span_model.build_encoder(config)
  tf.train.Checkpoint(encoder=encoder).read(checkpoints.checkpoint_prefix(output)) \
      .assert_existing_objects_matched()
  assert not os.path.exists(output + ".tmp-convert")
  with pytest.raises(FileExistsError, match="exists; remove it or choose another folder"):
    convert_checkpoint.convert(folder, output)
  # A missing --vocab_file or an --output that cannot be made: one line, nothing written.
  missing = str(tmp_path / "nowhere" / "vocab.txt")
  with pytest.raises(errors.MissingFileError) as raised:
    convert_checkpoint.convert(folder, str(tmp_path / "c2"), vocab_file=missing)
  assert str(raised.value) == f"--vocab_file={missing}: no such file"
  blocked = str(tmp_path / "converted" / "vocab.txt" / "sub")  # a file where a folder should be
  with pytest.raises(errors.NotWritableError, match=r"^--output=.*/sub: cannot make the folder \("):
    convert_checkpoint.convert(folder, blocked)
  assert sorted(os.listdir(tmp_path)) == sorted(["converted", "wrong_config.json", *others])


def _export_and_run(init_checkpoint, export_dir, inputs, *flags):
  _, log = testutil.run_cli("export.py", f"--init_checkpoint={init_checkpoint}",
                            f"--export_dir={export_dir}", "--model_dir=/nonexistent", *flags)
  serve = tf.saved_model.load(export_dir).signatures["serve_features"]
  outputs = serve(**{k: tf.constant(v) for k, v in inputs.items()})
  return log, outputs["start_logits"].numpy(), outputs["end_logits"].numpy()


@pytest.mark.slow
def test_export_from_a_tf1_squad_checkpoint_serves_its_logits(tf1_squad, tmp_path):
  folder, params = tf1_squad
  inputs = make_inputs()
  log, start, end = _export_and_run(folder, str(tmp_path / "export"), inputs)
  assert "span head is untrained" not in log and "span head restored" in log
  ref_sequence, _ = numpy_bert.bert_forward(params, *inputs.values(), 4)
  ref_start, ref_end = numpy_bert.squad_logits(params, ref_sequence)
  diff = max(np.abs(start - ref_start).max(), np.abs(end - ref_end).max())
  print(f"\nMAX_ABS_DIFF export.py from TF1 run_squad checkpoint: logits {diff:.3g}")
  assert diff <= TOLERANCE


@pytest.mark.slow
def test_export_from_a_tfm_encoder_checkpoint_warns_that_the_head_is_untrained(
    tfm_tf2, tf1_pretrained, tmp_path, caplog):
  from squad_qa import export  # pylint: disable=g-import-not-at-top
  out, _ = tfm_tf2
  export_dir = str(tmp_path / "export")
  testutil.use_flag_defaults()
  with flagsaver.flagsaver(init_checkpoint=out, export_dir=export_dir, model_dir=str(tmp_path),
                           bert_config_file=f"{tf1_pretrained[0]}/bert_config.json",
                           vocab_file=f"{tf1_pretrained[0]}/vocab.txt"):
    # Set the absl logger's own level: an earlier test may have left it at WARNING.
    with caplog.at_level(std_logging.INFO, logger="absl"):
      export.main(["export.py"])  # `python export.py --init_checkpoint=...`, in this process
  assert ("the span head is untrained" in caplog.text and
          "TF2 checkpoint (encoder=...)" in caplog.text)
  serve = tf.saved_model.load(export_dir).signatures["serve_features"]
  start = serve(**{k: tf.constant(v) for k, v in make_inputs().items()})["start_logits"].numpy()
  assert start.shape == (3, 24) and np.isfinite(start).all()


@pytest.mark.parametrize(
    "unused, head_restored, said",
    [
        # all-MiniLM-L6-v2 from PyPI: HF's position_ids buffer is no weight.
        (["embeddings.position_ids"], False, ""),
        # HF BertForPreTraining and Google's release: the pretraining heads, its step and slots.
        (["bert.embeddings.position_ids", "cls.predictions.bias", "cls.seq_relationship.weight"
         ], False, ""),
        (["cls/predictions/output_bias", "global_step", "bert/pooler/dense/kernel/adam_m"
         ], False, ""),
        # A classifier fine-tuned for another task: its head has no place in the span model.
        (["bert.embeddings.position_ids", "classifier.weight", "classifier.bias"], False,
         "; not loaded, as the model has no place for them: classifier.weight, classifier.bias"),
        # A fine-tuned run's optimizer is not resumed by a new --model_dir.
        (["optimizer/iterations", "save_counter"], True,
         "; its training state (optimizer, step counts, dropout) is left: this run starts its own"),
        # A --model_dir of this tool: its Adam slots sit under each variable's path.
        ([
            "model/layer_with_weights-0/layer_with_weights-0/embeddings/.OPTIMIZER_SLOT/optimizer/m",
            "model/layer_with_weights-0/layer_with_weights-0/embeddings/.OPTIMIZER_SLOT/optimizer/v",
            "checkpointed_runs", "save_counter"
        ], True,
         "; its training state (optimizer, step counts, dropout) is left: this run starts its own"),
    ])
def test_the_load_report_says_only_what_matters(unused, head_restored, said):
  report = named_weights.LoadReport(kind="HF folder", path="m/model.safetensors",
                                    restored=["a", "b"], new=["pooler_transform/kernel"],
                                    unused=unused, head_restored=head_restored)
  head = ("span head restored (fine-tuned)"
          if head_restored else "span head new (randomly initialized, untrained)")
  assert str(report) == f"HF folder m/model.safetensors: restored 2 variables, {head}{said}"


def test_a_config_folder_names_the_file_to_pass(tmp_path):
  """--bert_config_file takes the JSON file; given the folder (as --init_checkpoint takes), the
  line names the config file inside it."""
  hf = tmp_path / "hf"
  hf.mkdir()
  testutil.write_tiny_config(hf / "config.json")
  with pytest.raises(errors.UsageError) as raised:
    bert_config_lib.BertConfig.from_json_file(str(hf))
  assert str(raised.value) == (f"--bert_config_file={hf} is a folder; pass "
                               f"--bert_config_file={hf / 'config.json'}")
  with pytest.raises(errors.UsageError) as raised:
    bert_config_lib.BertConfig.from_json_file(str(tmp_path))
  assert str(
      raised.value) == f"--bert_config_file={tmp_path} is a folder; pass the config's JSON file"


@pytest.mark.parametrize("change, line", [
    ({
        "hidden_size": "384"
    }, 'hidden_size="384" must be a whole number of at least 1'),
    ({
        "hidden_size": -384
    }, "hidden_size=-384 must be a whole number of at least 1"),
    ({
        "hidden_size": 384.5
    }, "hidden_size=384.5 must be a whole number of at least 1"),
    ({
        "num_hidden_layers": True
    }, "num_hidden_layers=true must be a whole number of at least 1"),
    ({
        "max_position_embeddings": 0
    }, "max_position_embeddings=0 must be a whole number of at least 1"),
    ({
        "hidden_size": 384,
        "num_attention_heads": 5
    }, "hidden_size=384 is not a multiple of num_attention_heads=5 (each head takes an equal "
     "share)"),
    ({
        "hidden_dropout_prob": 1.0
    }, "hidden_dropout_prob=1.0 must be a probability from 0 up to (not including) 1"),
    ({
        "initializer_range": "x"
    }, 'initializer_range="x" must be a number above 0 (the weights\' initial standard deviation)'),
    ({
        "hidden_act": "swish_custom"
    }, 'hidden_act="swish_custom" is not one of gelu, gelu_new, relu, tanh, swish, silu, sigmoid, '
     'elu, selu, mish, linear'),
])
def test_a_config_value_no_encoder_can_have_is_one_line(tmp_path, change, line):
  """Before the planner counts it or TensorFlow builds it (which printed an estimate for a negative
  width, or a traceback): the file, the key, its value and why."""
  path = tmp_path / "config.json"
  testutil.write_tiny_config(path)
  values = {**json.loads(path.read_text(encoding="utf-8")), **change}
  path.write_text(json.dumps(values), encoding="utf-8")
  with pytest.raises(errors.UsageError) as raised:
    bert_config_lib.BertConfig.from_json_file(str(path))
  assert str(raised.value) == f"{path}: {line}; correct it in the config file"


def test_the_activations_a_config_may_name_all_build():
  import tf_keras  # pylint: disable=g-import-not-at-top
  for name in bert_config_lib.ACTIVATIONS:
    if name != "gelu_new":  # read as "gelu" (the tanh form)
      assert callable(tf_keras.activations.get(name)), name
