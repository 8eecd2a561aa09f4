"""One contract from records to served answers: the vocab and the decoding settings a model was
trained and scored with travel with it, and every mismatch is refused in one line before any work.
"""

import json
import logging as std_logging
import os

import pytest

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import span_model
from squad_qa.preprocess import make_records_job
from squad_qa.preprocess import records
from squad_qa.preprocess import wordpiece
from squad_qa.serving import export_model
from squad_qa.serving import module as serving_module
from squad_qa.serving import saved_model_qa
from squad_qa.tasks import train_and_evaluate
from squad_qa.tasks import train_config
from tests import testutil

EXTRA_TOKENS = ["[NEW1]", "[NEW2]", "[NEW3]", "[NEW4]"]


def extended_vocab(tmp_path):
  """The encoder's vocab plus 4 added tokens (ids 30522..30525), as a user extending it would."""
  path = tmp_path / "vocab_plus_4.txt"
  with open(testutil.vocab_file(), encoding="utf-8") as f:
    path.write_text(f.read().rstrip("\n") + "\n" + "\n".join(EXTRA_TOKENS) + "\n", encoding="utf-8")
  return str(path)


def make_records(tmp_path, vocab_file, name="records"):
  """Tiny train records of 8 real questions made with `vocab_file` (in process)."""
  train_file = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 8)
  output_dir = str(tmp_path / name)
  make_records_job.make_records(
      make_records_job.RecordsConfig(vocab_file=vocab_file, max_seq_length=64, doc_stride=32,
                                     max_query_length=16, train_file=train_file,
                                     output_dir=output_dir, num_shards=1, num_workers=1))
  return output_dir


@pytest.mark.parametrize("settings, message", [
    ({
        "max_answer_length": 0
    }, "--max_answer_length=0: must be at least 1"),
    ({
        "n_best_size": 0
    }, "--n_best_size=0: must be at least 1"),
    ({
        "null_score_diff_threshold": float("nan")
    }, "--null_score_diff_threshold=nan: must be a finite number of logits"),
])
def test_decoding_settings_are_refused_alike_by_every_command(settings, message):
  """train.py, export.py and ask.py check the decoding settings with one rule, on construction of
  their configs, before any work (so nothing is written)."""
  configs = [
      lambda: train_config.TrainConfig(**settings), lambda: export_model.ExportConfig(**settings)
  ]
  if "null_score_diff_threshold" not in settings:
    configs.append(lambda: saved_model_qa.AskConfig(question="q", context="c", **settings))
  for make_config in configs:
    with pytest.raises(errors.UsageError) as error:
      make_config()
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_records_record_their_vocab_size(tmp_path):
  meta = records.read_meta(make_records(tmp_path, testutil.vocab_file()))
  assert meta["vocab_size"] == 30522 == records.vocab_size_of(meta)
  del meta["vocab_size"]  # records made before it was recorded: the vocab file is counted
  assert records.vocab_size_of(meta) == 30522


def test_token_ids_beyond_the_encoder_are_refused_before_training(tmp_path):
  records_dir = make_records(tmp_path, extended_vocab(tmp_path))
  config_file = testutil.write_tiny_config(tmp_path / "bert_config.json")
  config = train_config.TrainConfig(records_dir=records_dir, model_dir=str(tmp_path / "model"),
                                    bert_config_file=config_file)
  with pytest.raises(errors.UsageError) as error:
    train_and_evaluate.train_and_evaluate(config)
  assert str(error.value) == (
      f"the records in {records_dir} were made with a vocab of 30526 tokens "
      f"({tmp_path / 'vocab_plus_4.txt'}) but the encoder's vocab_size is 30522 ({config_file}): "
      f"ids from 30522 on have no embedding; make the records with the encoder's vocab.txt, or "
      f"resize the encoder's embedding to 30526 rows and its config's vocab_size with it")
  assert not os.path.exists(tmp_path / "model")  # nothing written


def test_records_of_another_vocab_than_the_model_dir_are_refused(tmp_path):
  """A --model_dir trained on one vocab, resumed (or scored) on records of another: same size,
  other tokens, so only the hash tells them apart."""
  vocab = wordpiece.read_vocab(testutil.vocab_file())
  swapped = tmp_path / "swapped_vocab.txt"  # two tokens trade ids: same size, other meaning
  vocab[1000], vocab[1001] = vocab[1001], vocab[1000]
  swapped.write_text("\n".join(vocab) + "\n", encoding="utf-8")
  records_dir = make_records(tmp_path, str(swapped))
  model_dir = tmp_path / "model"
  model_dir.mkdir()
  trained = {
      "vocab_file": testutil.vocab_file(),
      "vocab_sha256": wordpiece.file_sha256(testutil.vocab_file())
  }
  (model_dir / artifacts.QA_CONFIG_FILE).write_text(json.dumps(trained))
  before = sorted(os.listdir(model_dir))
  config = train_config.TrainConfig(
      records_dir=records_dir, model_dir=str(model_dir),
      bert_config_file=testutil.write_tiny_config(tmp_path / "bert_config.json"))
  with pytest.raises(errors.UsageError) as error:
    train_and_evaluate.train_and_evaluate(config)
  meta = records.read_meta(records_dir)
  assert str(error.value) == (
      f"the records in {records_dir} were made with {swapped} (SHA-256 "
      f"{meta['vocab_sha256'][:12]}…) but --model_dir={model_dir} was trained with "
      f"{testutil.vocab_file()} (SHA-256 {trained['vocab_sha256'][:12]}…); make the records with "
      f"that vocab, or pass a new --model_dir")
  assert sorted(os.listdir(model_dir)) == before


def test_a_vocab_in_crlf_lines_is_the_vocab_of_its_tokens(tmp_path):
  """The tokens decide the ids: a copy of the vocab with CRLF line endings makes the same records
  (by digest), is taken for them by training and served by export; a vocab with two ids swapped
  is refused by both."""
  lf = testutil.vocab_file()
  tokens = wordpiece.read_vocab(lf)
  crlf = tmp_path / "vocab_crlf.txt"
  crlf.write_bytes("".join(t + "\r\n" for t in tokens).encode("utf-8"))
  swapped = tmp_path / "swapped_vocab.txt"
  tokens[1000], tokens[1001] = tokens[1001], tokens[1000]
  swapped.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  lf_sha256 = wordpiece.file_sha256(lf)
  assert wordpiece.file_sha256(str(crlf)) != lf_sha256
  assert wordpiece.vocab_sha256(wordpiece.read_vocab(str(crlf))) == lf_sha256
  assert wordpiece.has_vocab_sha256(str(crlf), lf_sha256)
  assert wordpiece.has_vocab_sha256(str(crlf), wordpiece.file_sha256(str(crlf)))
  assert not wordpiece.has_vocab_sha256(str(swapped), lf_sha256)

  records_dir = make_records(tmp_path, str(crlf))
  assert records.read_meta(records_dir)["vocab_sha256"] == lf_sha256
  short = dict(testutil.TINY_BERT_CONFIG, max_position_embeddings=32)
  config_file = tmp_path / "bert_config_32.json"
  config_file.write_text(json.dumps(short))
  for vocab_file, message in [
      (lf, "records have max_seq_length 64 but the encoder has 32 positions"),
      (str(swapped), f"--vocab_file={swapped} is not the vocab the records were made with "
       f"({crlf}); rerun squad-qa-records with it"),
  ]:
    config = train_config.TrainConfig(records_dir=records_dir, model_dir=str(tmp_path / "model"),
                                      bert_config_file=str(config_file), vocab_file=vocab_file)
    with pytest.raises(errors.UsageError) as error:
      train_and_evaluate.train_and_evaluate(config)
    assert str(error.value) == message  # the first past the vocab check, or the vocab's own

  bert_config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  recorded = {"vocab_file": lf, "vocab_sha256": lf_sha256}
  assert export_model.check_vocab(str(crlf), bert_config, recorded, export_vocab_given=True) == {
      "vocab_sha256": lf_sha256,
      "vocab_size": 30522
  }
  with pytest.raises(errors.UsageError, match="is not the vocab the model was trained with"):
    export_model.check_vocab(str(swapped), bert_config, recorded, export_vocab_given=True)


def test_export_refuses_a_vocab_other_than_trainings(tmp_path):
  bert_config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  recorded = {
      "vocab_file": testutil.vocab_file(),
      "vocab_sha256": wordpiece.file_sha256(testutil.vocab_file())
  }
  other = extended_vocab(tmp_path)
  with pytest.raises(errors.UsageError) as error:
    export_model.check_vocab(other, bert_config, recorded, export_vocab_given=True)
  assert str(error.value).startswith(
      f"--vocab_file={other} (SHA-256 {wordpiece.file_sha256(other)[:12]}…, 30526 tokens) is not "
      f"the vocab the model was trained with ({testutil.vocab_file()}, SHA-256 "
      f"{recorded['vocab_sha256'][:12]}…)")
  # Training's vocab is served, and recorded in the export; a bigger one never fits the encoder.
  assert export_model.check_vocab(testutil.vocab_file(), bert_config, recorded, True) == {
      "vocab_sha256": recorded["vocab_sha256"],
      "vocab_size": 30522
  }
  with pytest.raises(
      errors.UsageError, match="has 30526 tokens but the encoder's vocab_size is "
      "30522: ids from 30522 on have no embedding"):
    export_model.check_vocab(other, bert_config, {}, export_vocab_given=True)


def test_export_refuses_the_recorded_vocab_when_it_changed_since_training(tmp_path):
  bert_config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  vocab = tmp_path / "vocab.txt"
  vocab.write_bytes(open(testutil.vocab_file(), "rb").read())
  recorded = {"vocab_file": str(vocab), "vocab_sha256": wordpiece.file_sha256(str(vocab))}
  assert export_model.check_vocab(str(vocab), bert_config, recorded, False)["vocab_size"] == 30522
  lines = vocab.read_text(encoding="utf-8").splitlines()
  lines[1000], lines[1001] = lines[1001], lines[1000]  # same size, other ids
  vocab.write_text("\n".join(lines) + "\n", encoding="utf-8")
  with pytest.raises(errors.UsageError) as error:
    export_model.check_vocab(str(vocab), bert_config, recorded, export_vocab_given=False)
  assert str(error.value) == (
      f"{vocab}, the vocab qa_config.json names, changed since training (SHA-256 "
      f"{wordpiece.file_sha256(str(vocab))[:12]}…, trained with {recorded['vocab_sha256'][:12]}…): "
      f"restore it, or pass --vocab_file=<the vocab training read>")


def test_export_of_a_moved_model_folder_names_the_missing_vocab(tmp_path):
  """A --model_dir copied from another machine names a vocab path that is not here: one line with
  the fix, not TensorFlow's NotFoundError."""
  bert_config = bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG)
  gone = str(tmp_path / "elsewhere" / "vocab.txt")
  recorded = {"vocab_file": gone, "vocab_sha256": wordpiece.file_sha256(testutil.vocab_file())}
  with pytest.raises(errors.MissingFileError) as error:
    export_model.check_vocab(gone, bert_config, recorded, export_vocab_given=False)
  assert str(error.value) == (
      f"{gone}: not found (the model's qa_config.json, written where it trained, names it); pass "
      f"--vocab_file=<the vocab.txt training read>, e.g. the one beside the starting checkpoint")
  assert export_model.check_vocab(testutil.vocab_file(), bert_config, recorded,
                                  export_vocab_given=True)["vocab_size"] == 30522


def test_export_serves_the_settings_training_scored_with_unless_told():
  recorded = {
      "max_seq_length": 384,
      "doc_stride": 128,
      "max_query_length": 64,
      "do_lower_case": True,
      "n_best_size": 5,
      "max_answer_length": 2,
      "version_2_with_negative": False,
      "null_score_diff_threshold": 0.0
  }
  config = export_model.ExportConfig(typed_flags=("export_dir",))
  served = export_model.serving_config(config, recorded)
  assert (served["n_best_size"], served["max_answer_length"]) == (5, 2)
  assert export_model.setting_sources(config, served, recorded) == (
      "serving max_seq_length=384 (qa_config.json), doc_stride=128 (qa_config.json), "
      "max_query_length=64 (qa_config.json), do_lower_case=True (qa_config.json), n_best_size=5 "
      "(qa_config.json), max_answer_length=2 (qa_config.json), version_2_with_negative=False "
      "(qa_config.json), null_score_diff_threshold=0.0 (qa_config.json), window_batch_size=32 "
      "(default)")
  told = export_model.ExportConfig(n_best_size=7, typed_flags=("n_best_size",))
  served = export_model.serving_config(told, recorded)
  assert (served["n_best_size"], served["max_answer_length"]) == (7, 2)
  assert "n_best_size=7 (--n_best_size)" in export_model.setting_sources(told, served, recorded)


def test_casing_that_contradicts_the_vocab_is_refused_before_any_work(tmp_path):
  uncased = wordpiece.read_vocab(testutil.vocab_file())
  # A cased vocab: the uncased one with its first 2,000 plain words capitalized (still unique).
  seen, cased, capitalized = set(uncased), [], 0
  for token in uncased:
    capital = token.capitalize()
    if capitalized < 2000 and token.isalpha() and capital != token and capital not in seen:
      seen.add(capital)
      token, capitalized = capital, capitalized + 1
    cased.append(token)
  cased_file = tmp_path / "cased_vocab.txt"
  cased_file.write_text("\n".join(cased) + "\n", encoding="utf-8")
  train_file = testutil.write_squad_slice(testutil.TRAIN_FILE, tmp_path / "train.json", 2)
  for vocab_file, do_lower_case, message in [
      (str(cased_file), True, f"--do_lower_case=true but {cased_file} is a cased vocab (2000 "
       f"tokens with capitals, e.g. 'A'), which lower-cased text never "
       f"reaches; pass --do_lower_case=false"),
      (testutil.vocab_file(), False, f"--do_lower_case=false but {testutil.vocab_file()} is an "
       f"uncased vocab (no token has a capital), so every "
       f"capitalized word would be split or [UNK]; pass "
       f"--do_lower_case=true")
  ]:
    with pytest.raises(errors.UsageError) as error:
      make_records_job.make_records(
          make_records_job.RecordsConfig(vocab_file=vocab_file, do_lower_case=do_lower_case,
                                         train_file=train_file,
                                         output_dir=str(tmp_path / "records"), num_workers=1))
    assert str(error.value) == message
    assert not os.path.exists(tmp_path / "records")


def test_scoring_a_trained_model_again_records_the_settings_it_scored_with(tmp_path, caplog):
  """--do_train=false scores with the decoding settings qa_config.json records unless a flag
  names another; a typed one is then recorded there, so export.py serves what the dev set was
  last scored with."""
  records_dir = testutil.make_train_records(tmp_path, 8, dev_questions=6)
  model, _ = span_model.build_span_model(
      bert_config_lib.BertConfig.from_dict(testutil.TINY_BERT_CONFIG))
  trained = dict(
      max_seq_length=64, doc_stride=32, max_query_length=16, do_lower_case=True,
      **dict(serving_module.DECODING_DEFAULTS, n_best_size=5, max_answer_length=7,
             version_2_with_negative=False))
  model_dir = testutil.write_model_dir(tmp_path / "model", model, trained)

  def rescore(**typed):
    """(the settings eval_results.json says the scoring used, qa_config.json's after it)."""
    config = train_config.TrainConfig(records_dir=records_dir, model_dir=model_dir, do_train=False,
                                      typed_flags=("records_dir", "model_dir", "do_train", *typed),
                                      **typed)
    train_and_evaluate.train_and_evaluate(config)
    used = artifacts.read_json(os.path.join(model_dir, artifacts.EVAL_RESULTS_FILE))
    recorded = artifacts.read_qa_config(model_dir)
    return ((used["n_best_size"], used["max_answer_length"]), (recorded["n_best_size"],
                                                               recorded["max_answer_length"]))

  with caplog.at_level(std_logging.INFO, logger="absl"):
    assert rescore() == ((5, 7), (5, 7))  # training's, not the flags' defaults (20, 30)
    # Said, since --help gives the flags' defaults.
    export = commands.command("squad-qa-export")
    assert (f"scoring with qa_config.json's n_best_size=5, max_answer_length=7, as {export} "
            f"serves (a flag names another)") in caplog.messages
    caplog.clear()
    assert rescore(max_answer_length=2) == ((5, 2), (5, 2))
    assert (f"scoring with qa_config.json's n_best_size=5, as {export} serves (a flag names "
            f"another)") in caplog.messages
  assert rescore() == ((5, 2), (5, 2))
  served = export_model.decoding_config(export_model.ExportConfig(model_dir=model_dir),
                                        artifacts.read_qa_config(model_dir))
  assert (served["n_best_size"], served["max_answer_length"]) == (5, 2)
