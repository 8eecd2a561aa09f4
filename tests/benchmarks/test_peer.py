"""benchmarks/peer.py: the precision axis (the best of each side, the ratio, identical answers, flag
checks), and our trained weights as an HF folder that reads back to the same weights."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import peer
from squad_qa import errors
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import hf_checkpoint
from squad_qa.model import span_model
from squad_qa.base import artifacts
from squad_qa.base import commands
from tests import testutil


def test_best_skips_missing_values_and_knows_the_direction():
  assert peer.best({"float32": 30.0, "bfloat16": 45.5, "int8": None}, True) == ("bfloat16", 45.5)
  assert peer.best({"float32": 30.0, "bfloat16": 45.5}, False) == ("float32", 30.0)
  assert peer.best({"int8": None}, True) is None


def test_identical_share_counts_the_reference_questions():
  reference = {"q1": "Denver Broncos", "q2": "1990", "q3": "Santa Clara", "q4": "gold"}
  answers = {"q1": "Denver Broncos", "q2": "in 1990", "q3": "Santa Clara"}  # q4 missing
  assert peer.identical_share(answers, reference) == 0.5
  assert peer.identical_share(reference, reference) == 1.0
  assert peer.identical_share(answers, None) is None


def test_the_table_has_every_precision_and_ours_best_over_the_peers_best(capsys):
  peer.print_table("measure", ["float32", "bfloat16"], ["float32", "bfloat16", "int8"],
                   [("p50 ms", {
                       "float32": 40.0,
                       "bfloat16": 25.0
                   }, {
                       "float32": 50.0,
                       "bfloat16": 30.0,
                       "int8": 20.0
                   }, ".1f", False),
                    ("questions/s", {
                        "float32": 30.0,
                        "bfloat16": 45.0
                    }, {
                        "float32": 20.0,
                        "bfloat16": 36.0,
                        "int8": None
                    }, ".1f", True),
                    ("identical (%)", {
                        "float32": 100.0,
                        "bfloat16": 98.5
                    }, {}, ".2f", None)])
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == ("| measure | ours float32 | ours bfloat16 | HF float32 | HF bfloat16 | "
                      "HF int8 | ours best / HF best |")
  assert lines[2] == "| p50 ms | 40.0 | 25.0 | 50.0 | 30.0 | 20.0 | 1.25 (bfloat16 / int8) |"
  assert lines[3] == "| questions/s | 30.0 | 45.0 | 20.0 | 36.0 | - | 1.25 (bfloat16 / bfloat16) |"
  assert lines[4] == "| identical (%) | 100.00 | 98.50 | - | - | - | - |"


def test_peer_precisions_are_checked():
  assert peer.check_peer_precisions(["int8", "float32"]) == ["int8", "float32"]
  for bad in (["float16"], ["int8", "int8"], []):
    with pytest.raises(errors.UsageError, match="--peer_precisions=") as raised:
      peer.check_peer_precisions(bad)
    assert "\n" not in str(raised.value)


def test_exports_are_needed_once_per_precision(tmp_path):
  with pytest.raises(errors.UsageError, match="give --export_dirs"):
    peer.load_exports([])
  with pytest.raises(errors.MissingFileError, match="no SavedModel there"):
    peer.load_exports([str(tmp_path)])


def test_the_peer_command_runs_its_script_at_a_precision_through_this_file():
  assert peer.peer_command("/peer/python", "int8", "bench.py", "--calls", "3") == [
      "/peer/python", peer.SCRIPT, "run", "--precision=int8", "bench.py", "--calls", "3"
  ]


def test_serve_answers_each_request_with_one_json_line():
  asked = []

  def pipe(question, context, batch_size=None):
    asked.append((question, context, batch_size))
    return {"answer": context[:6]}

  requests = [
      json.dumps({
          "question": "Who?",
          "context": "Denver won.",
          "calls": 3
      }),
      json.dumps({
          "questions": ["Q1", "Q2"],
          "contexts": ["C1", "C2"],
          "batch_size": 8
      }),
  ]
  out = io.StringIO()
  peer.serve_requests(requests, out, pipe, lambda q, c: len(q) + len(c))
  first, second = [json.loads(line) for line in out.getvalue().splitlines()]
  assert asked == [("Who?", "Denver won.", None)] * 3 + [(["Q1", "Q2"], ["C1", "C2"], 8)]
  assert sorted(first) == ["ms", "windows"]
  assert len(first["ms"]) == 3 and all(ms >= 0 for ms in first["ms"])
  assert first["windows"] == 15
  assert list(second) == ["seconds"] and second["seconds"] >= 0


def test_a_peer_server_that_cannot_start_ends_the_benchmark_with_its_error(tmp_path):
  # No torch in this interpreter, or no model folder: either way the subprocess ends at once.
  with pytest.raises(SystemExit) as raised:
    peer.PeerServer(sys.executable, str(tmp_path / "no_model"), "int8")
  message = str(raised.value)
  assert message.startswith("the peer's serve at int8 failed:\n")
  assert "Error" in message.splitlines()[-1]


def test_the_hf_folder_reads_back_to_the_same_weights(tmp_path):
  # An HF config: "gelu" there is the exact form, as the model was built.
  config = bert_config_lib.BertConfig.from_dict(dict(testutil.TINY_BERT_CONFIG, model_type="bert"))
  assert config.exact_gelu
  tf.keras.utils.set_random_seed(5)
  model, _ = span_model.build_span_model(config)
  model_dir = tmp_path / "model_out"
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(model_dir),
                             max_to_keep=1).save(checkpoint_number=7)
  artifacts.write_json(str(model_dir / artifacts.QA_CONFIG_FILE), {
      "bert_config": config.to_dict(),
      "vocab_file": testutil.vocab_file(),
      "do_lower_case": True
  })

  folder = tmp_path / "peer_model"
  # 3 embeddings and their LayerNorm's 2, 16 tensors per layer, and the head's 2 (no pooler).
  assert peer.write_hf_folder(str(model_dir),
                              str(folder)) == (5 + 16 * config.num_hidden_layers + 2)
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
  assert peer.hf_config(config)["hidden_act"] == "gelu_new"


def test_the_peer_side_needs_nothing_but_the_standard_library():
  # The peer's interpreter has torch and transformers, not this project nor its dependencies.
  proc = subprocess.run([sys.executable, "-I", "-S", peer.SCRIPT], capture_output=True, text=True,
                        check=False)
  assert proc.returncode == 1
  assert proc.stderr.strip() == ("usage: peer.py {hf_folder,run,predict,serve} ... (see its "
                                 "docstring)")


def test_a_model_dir_without_a_trained_checkpoint_is_one_line(tmp_path):
  """Both benchmarks that read a train.py --model_dir (peer.py hf_folder, prediction_throughput)
  say in one line that it holds no checkpoint; hf_folder refuses an existing --output_dir."""
  with pytest.raises(errors.MissingFileError) as raised:
    peer.load_trained(str(tmp_path), flag="model_dir")
  assert str(raised.value) == (f"--model_dir={tmp_path} holds no trained checkpoint with its "
                               f"qa_config.json; train one with "
                               f"{commands.command('squad-qa-train')} first")
  with pytest.raises(SystemExit) as exited:
    peer.write_hf_folder(str(tmp_path), str(tmp_path / "new"))
  assert str(exited.value) == f"peer.py hf_folder: {raised.value}"
  with pytest.raises(SystemExit, match="exists; give a new --output_dir"):
    peer.write_hf_folder(str(tmp_path), str(tmp_path))
