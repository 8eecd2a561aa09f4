"""A small real slice of SQuAD through every command: make_records -> train -> predict -> EM/F1 ->
resume -> export -> reload in a fresh process -> ask. Each command runs as a user runs it."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.postprocess import span_decoding
from squad_qa.postprocess import squad_scoring
from squad_qa.preprocess import records
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece
from squad_qa.tasks import evaluation
from tests import testutil

NUM_TRAIN, NUM_DEV = 48, 40
SEQ, STRIDE, QUERY = 128, 64, 32


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  """Runs preprocess and training once for the module, from an empty working folder, with HOME
  and TMPDIR in folders of their own (checked by
  test_ask_answers_each_question_and_the_commands_write_only_into_their_folders); returns the
  paths and that environment."""
  tmp = tmp_path_factory.mktemp("e2e")
  for folder in ("work", "home", "tmpdir"):
    os.mkdir(tmp / folder)
  paths = {
      "tmp": str(tmp),
      "work": str(tmp / "work"),
      "env": dict(os.environ, HOME=str(tmp / "home"), TMPDIR=str(tmp / "tmpdir")),
      "train": testutil.write_squad_slice(testutil.TRAIN_FILE, tmp / "train.json", NUM_TRAIN),
      "dev": testutil.write_squad_slice(testutil.DEV_FILE, tmp / "dev.json", NUM_DEV),
      "config": testutil.write_tiny_config(tmp / "bert_config.json"),
      "records": str(tmp / "records"),
      "model": str(tmp / "model"),
      "export": str(tmp / "export"),
  }
  testutil.run_cli("preprocess/make_records.py", f"--train_file={paths['train']}",
                   f"--predict_file={paths['dev']}", f"--vocab_file={testutil.vocab_file()}",
                   f"--max_seq_length={SEQ}", f"--doc_stride={STRIDE}",
                   f"--max_query_length={QUERY}", "--num_shards=2",
                   f"--output_dir={paths['records']}", env=paths["env"], cwd=paths["work"])
  _, paths["train_log"] = testutil.run_cli(
      "train.py", f"--records_dir={paths['records']}", f"--model_dir={paths['model']}",
      f"--bert_config_file={paths['config']}", f"--vocab_file={testutil.vocab_file()}",
      "--max_steps=4", "--train_batch_size=8", "--save_checkpoints_steps=2", "--learning_rate=1e-3",
      f"--predict_file={paths['dev']}", "--predict_batch_size=16", env=paths["env"],
      cwd=paths["work"])
  return paths


@pytest.fixture(scope="module")
def exported(run):
  """The export of the module's training run (its folder), made once, as the run was."""
  testutil.run_cli("export.py", f"--model_dir={run['model']}", f"--export_dir={run['export']}",
                   env=run["env"], cwd=run["work"])
  return run["export"]


@pytest.mark.slow
def test_records_hold_the_real_slice(run):
  meta = records.read_meta(run["records"])
  assert meta["flags"]["max_seq_length"] == SEQ and meta["flags"]["doc_stride"] == STRIDE
  assert meta["splits"]["train"]["num_examples"] == NUM_TRAIN
  assert meta["splits"]["eval"]["num_examples"] == NUM_DEV
  assert meta["splits"]["train"]["shards"] == [
      "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"
  ]
  assert not [f for f in os.listdir(run["records"]) if "tmp" in f]  # no temporary leftovers
  # Every training window that holds the answer decodes back to the answer's own tokens.
  squad = squad_reader.read_squad(run["train"], is_training=True)
  from squad_qa.preprocess import wordpiece  # pylint: disable=g-import-not-at-top
  tokenizer = wordpiece.WordPieceTokenizer(testutil.vocab_file())
  spec = records.feature_spec("train", SEQ)
  positive = 0
  num_features = 0
  for path in records.shard_paths(run["records"], meta, "train"):
    for raw in tf.data.TFRecordDataset(path):
      feature = {k: v.numpy() for k, v in tf.io.parse_single_example(raw, spec).items()}
      num_features += 1
      start, end = feature["start_positions"], feature["end_positions"]
      assert 0 <= start <= end < SEQ
      if start:
        positive += 1
        index = feature["unique_ids"]  # ids are consecutive, so look the question up by tokens
        answer_ids = feature["input_ids"][start:end + 1].tolist()
        assert any(
            tokenizer.tokenize([e.answer_text])[0].ids.tolist() == answer_ids
            for e in squad.examples), (index, tokenizer.ids_to_tokens(answer_ids))
  assert num_features == meta["splits"]["train"]["num_features"]
  assert positive >= NUM_TRAIN  # each question has at least one window holding its answer


@pytest.mark.slow
def test_predictions_and_official_scores(run):
  with open(os.path.join(run["model"], "predictions.json")) as f:
    predictions = json.load(f)
  with open(os.path.join(run["model"], "eval_results.json")) as f:
    results = json.load(f)
  squad = squad_reader.read_squad(run["dev"], is_training=False)
  assert sorted(predictions) == sorted(e.qas_id for e in squad.examples)
  for example in squad.examples:  # answers are exact substrings of their own context
    assert predictions[example.qas_id] in squad.contexts[example.paragraph_index]
  with open(os.path.join(run["model"], "nbest_predictions.json")) as f:
    nbest = json.load(f)
  assert {q: entries[0]["text"] for q, entries in nbest.items()} == predictions
  assert all(1 <= len(entries) <= 20 for entries in nbest.values())
  rescored = squad_scoring.score_v1(squad_reader.load_json(run["dev"]), predictions)
  assert results["num_questions"] == NUM_DEV
  assert results["exact_match"] == pytest.approx(rescored["exact_match"])
  assert results["f1"] == pytest.approx(rescored["f1"])
  assert f"exact_match = {results['exact_match']:.2f}, f1 = {results['f1']:.2f}" in run["train_log"]
  assert tf.train.latest_checkpoint(run["model"]).endswith("ckpt-4")


@pytest.mark.slow
def test_trimmed_eval_batches_predict_what_padded_batches_predict(run):
  """predictions.json (eval batches cut to their longest window) equals a run padded to SEQ."""
  meta = records.read_meta(run["records"])
  paths = records.shard_paths(run["records"], meta, "eval")
  batches = list(records.eval_dataset(paths, SEQ, 16))
  widths = [int(b["input_word_ids"].shape[1]) for b in batches]
  assert min(widths) < SEQ and len(set(widths)) > 1  # really trimmed, to different lengths
  for batch in batches:  # each batch is exactly as wide as its longest window
    mask = batch["input_mask"].numpy()
    assert mask.sum(axis=1).max() == mask.shape[1]
  with open(run["config"]) as f:
    model, _ = span_model.build_span_model(bert_config_lib.BertConfig.from_dict(json.load(f)))
  # ckpt-4 made predictions.json (the resume test may add later checkpoints).
  tf.train.Checkpoint(model=model).read(os.path.join(run["model"], "ckpt-4")).expect_partial()
  trimmed = evaluation.predict(model, records.eval_dataset(paths, SEQ, 16))
  padded = evaluation.predict(model, records.eval_dataset(paths, SEQ, 16, trim=False))
  assert sorted(trimmed) == sorted(padded) == list(range(NUM_DEV))
  for index, windows in padded.items():
    assert len(trimmed[index]) == len(windows)
    for got, expected in zip(trimmed[index], windows):  # same windows, in the same order
      np.testing.assert_array_equal(got.token_start_char, expected.token_start_char)
      np.testing.assert_allclose(got.start_logits, expected.start_logits, atol=1e-5)
      np.testing.assert_allclose(got.end_logits, expected.end_logits, atol=1e-5)
  squad = squad_reader.read_squad(run["dev"], is_training=False)
  answers = span_decoding.decode_all(
      padded, {i: squad.contexts[squad.examples[i].paragraph_index] for i in padded})
  with open(os.path.join(run["model"], "predictions.json")) as f:
    assert json.load(f) == {squad.examples[i].qas_id: a.text for i, a in answers.items()}


@pytest.mark.slow
def test_training_resumes_from_the_latest_checkpoint(run):
  """Another --max_steps would change the learning-rate schedule: refused in one line. A run
  stopped at step 2 (the checkpoint state names ckpt-2) resumes there and ends at step 4."""
  common = (f"--records_dir={run['records']}", f"--model_dir={run['model']}",
            "--train_batch_size=8", "--save_checkpoints_steps=100", "--do_predict=false",
            "--learning_rate=1e-3")  # the run's: a resume keeps its schedule
  returncode, log = testutil.run_cli("train.py", "--max_steps=6", *common, expect_ok=False)
  assert returncode != 0 and "Traceback" not in log
  assert ("was trained on a learning-rate schedule of 4 steps, this run asks for 6; resume with "
          "--max_steps=4" in log)
  ckpt_2 = os.path.join(run["model"], "ckpt-2")
  tf.compat.v1.train.update_checkpoint_state(run["model"], ckpt_2,
                                             all_model_checkpoint_paths=[ckpt_2])
  _, log = testutil.run_cli("train.py", "--max_steps=4", *common)
  assert "resumed from" in log and "at step 2" in log
  assert "trained steps 2..4" in log
  assert tf.train.latest_checkpoint(run["model"]).endswith("ckpt-4")
  results_file = os.path.join(run["model"], "train_results.json")
  with open(results_file) as f:
    results = json.load(f)
  assert (results["start_step"], results["end_step"], results["steps"]) == (2, 4, 2)
  # Once more: nothing to train, and the results of the training are kept.
  _, log = testutil.run_cli("train.py", "--max_steps=4", *common)
  assert "already trained 4 of 4 steps" in log
  with open(results_file) as f:
    assert json.load(f) == results


@pytest.mark.slow
def test_float16_resume_of_a_float32_run_is_refused_in_one_line(run, tmp_path):
  """The float32 run saved no loss scale, which a float16 run would need: one line, not
  TensorFlow's unmatched-objects traceback."""
  model_dir = tmp_path / "model"
  shutil.copytree(run["model"], model_dir)
  ckpt_2 = str(model_dir / "ckpt-2")
  tf.compat.v1.train.update_checkpoint_state(str(model_dir), ckpt_2,
                                             all_model_checkpoint_paths=[ckpt_2])
  returncode, log = testutil.run_cli("train.py", f"--records_dir={run['records']}",
                                     f"--model_dir={model_dir}", "--train_batch_size=8",
                                     "--max_steps=4", "--do_predict=false", "--learning_rate=1e-3",
                                     "--mixed_precision_dtype=float16", expect_ok=False)
  assert returncode != 0 and "Traceback" not in log
  assert (f"train.py: {ckpt_2} was trained without loss scaling (float32 or bfloat16) and float16 "
          "(--mixed_precision_dtype=float16, the --gpu default) needs its state; resume with "
          "--mixed_precision_dtype=float32 or bfloat16, or start a new --model_dir" in log)


@pytest.mark.slow
def test_export_reloads_without_project_code_and_matches_the_checkpoint(run, exported):
  meta = records.read_meta(run["records"])
  batch = next(iter(records.eval_dataset(records.shard_paths(run["records"], meta, "eval"), SEQ,
                                         3)))
  inputs = {
      k: batch[k].numpy().tolist()
      for k in ("input_word_ids", "input_mask", "input_type_ids")
  }  # yapf: disable (yapf does not split a dict comprehension before `for`)
  # A fresh interpreter that imports only TensorFlow (and tensorflow-text, whose ops the raw-text
  # signature uses), from a folder outside the repository.
  script = ("import json, sys, tensorflow as tf, tensorflow_text\n"
            "m = tf.saved_model.load(sys.argv[1])\n"
            "x = json.loads(sys.stdin.read())\n"
            "out = m.signatures['serve_features'](**{k: tf.constant(v, tf.int32) "
            "for k, v in x.items()})\n"
            "print(json.dumps({k: v.numpy().tolist() for k, v in out.items()}))\n"
            "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in "
            "('train', 'export', 'model', 'preprocess', 'postprocess', 'flags'))))\n")
  proc = subprocess.run([sys.executable, "-c", script, run["export"]], input=json.dumps(inputs),
                        capture_output=True, text=True, cwd="/", timeout=300, check=True)
  lines = proc.stdout.strip().splitlines()
  served, project_modules = json.loads(lines[-2]), json.loads(lines[-1])
  assert project_modules == []
  with open(os.path.join(run["config"])) as f:
    config = bert_config_lib.BertConfig.from_dict(json.load(f))
  model, _ = span_model.build_span_model(config)
  tf.train.Checkpoint(model=model).read(tf.train.latest_checkpoint(run["model"])).expect_partial()
  start_logits, end_logits = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)
  assert np.abs(np.array(served["start_logits"]) - start_logits.numpy()).max() < 1e-4
  assert np.abs(np.array(served["end_logits"]) - end_logits.numpy()).max() < 1e-4
  with open(os.path.join(run["export"], "assets.extra", "qa_config.json")) as f:
    assert json.load(f) == {
        "max_seq_length": SEQ,
        "doc_stride": STRIDE,
        "max_query_length": QUERY,
        "do_lower_case": True,
        "n_best_size": 20,
        "max_answer_length": 30,
        "version_2_with_negative": False,
        "null_score_diff_threshold": 0.0,
        "window_batch_size": 32,
        "vocab_size": 30522,
        "vocab_sha256": wordpiece.file_sha256(testutil.vocab_file()),
        "serving_precision": "float32"
    }
  assert os.path.exists(os.path.join(run["export"], "assets", "vocab.txt"))
  show = subprocess.run(["saved_model_cli", "show", "--all", "--dir", run["export"]],
                        capture_output=True, text=True, timeout=300, check=True).stdout
  assert "signature_def['serve_features']" in show and "signature_def['serving_default']" in show


@pytest.mark.slow
def test_ask_answers_each_question_and_the_commands_write_only_into_their_folders(run, exported):
  """ask.py answers each question from the export with a span of the context. make_records,
  train, export and that ask, run from an empty working folder: each writes only into its
  --output_dir / --model_dir / --export_dir. The one file elsewhere is Keras's own config,
  `$HOME/.keras/keras.json`, which tf_keras writes when imported (any Keras program does)."""
  context = "The harbour bridge was painted red in 1932 by a crew of forty workers."
  questions = ("When was the bridge painted?", "How many workers painted the bridge?")
  _, output = testutil.run_cli("ask.py", f"--export_dir={exported}",
                               *(f"--question={q}" for q in questions), f"--context={context}",
                               env=run["env"], cwd=run["work"])
  lines = output.splitlines()
  assert [l[len("Q: "):] for l in lines if l.startswith("Q: ")] == list(questions)
  answers = [l for l in lines if l.startswith("A: ")]
  assert len(answers) == 2
  for line in answers:
    text = line[len("A: "):].split(" (characters ")[0]
    start, end = line.split(" (characters ")[1].split(",")[0].split("..")
    assert eval(text) == context[int(start):int(end)]  # pylint: disable=eval-used
    assert re.search(r", score -?\d+\.\d\d, \d+ ms\)$", line), line
  assert re.search(
      r"^answered 2 questions in \d+\.\d\d s \(the export loaded and warmed up in "
      r"\d+\.\d\d s\)$", output, re.M), output
  assert sorted(os.listdir(run["tmp"])) == [
      "bert_config.json", "dev.json", "export", "home", "model", "records", "tmpdir", "train.json",
      "work"
  ]
  assert os.listdir(run["work"]) == [] and os.listdir(os.path.join(run["tmp"], "tmpdir")) == []
  home = [
      os.path.relpath(os.path.join(folder, name), run["env"]["HOME"])
      for folder, _, names in os.walk(run["env"]["HOME"]) for name in names
  ]
  assert home == [os.path.join(".keras", "keras.json")]
