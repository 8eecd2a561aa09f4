"""What train.py checks before any TensorFlow work: the records, the encoder's config and vocab
against them and against the --model_dir, and the dev file it will score against."""

import os

from absl import logging

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.preprocess import records
from squad_qa.preprocess import squad_reader
from squad_qa.preprocess import wordpiece


def bert_config_and_meta(config):
  """The records' meta.json and the encoder's BertConfig (from the flags or the model_dir).

  Returns:
    (a `model.bert_config.BertConfig`, the path of its file, meta.json as a dict).

  Raises:
    errors.UsageError: no config, a vocab or casing other than the records', SQuAD 1.1 asked of
      SQuAD 2.0 records (or the reverse), too few positions, records without the train split
      `do_train` needs, or a model trained on SQuAD 1.1 to score on SQuAD 2.0 records.
  """
  meta = records.read_meta(config.records_dir)
  if config.do_train and records.TRAIN_SPLIT not in meta["splits"]:
    raise errors.UsageError(
        f"the records in {config.records_dir} hold no train split "
        f"({commands.command('squad-qa-records')} was given no "
        f"--train_file): pass --do_train=false to only predict, or make the records again with "
        f"a --train_file")
  made_lower_case = meta["flags"].get("do_lower_case", config.do_lower_case)
  if config.do_lower_case != made_lower_case:
    raise errors.UsageError(
        f"--do_lower_case={str(config.do_lower_case).lower()}: the records in "
        f"{config.records_dir} were made with do_lower_case={str(made_lower_case).lower()}, and "
        f"training tokenizes as they were made; drop the flag, or make the records again with it")
  check_squad_version(config, meta)
  config_file, vocab_file = checkpoints.resolve_model_files(config.init_checkpoint,
                                                            config.bert_config_file,
                                                            config.vocab_file)
  config_file = config_file or artifacts.read_qa_config(config.model_dir).get("bert_config_file")
  if not config_file:
    raise errors.UsageError("--bert_config_file is required (or an --init_checkpoint with a config "
                            "beside it)")
  if vocab_file and not wordpiece.has_vocab_sha256(vocab_file, meta["vocab_sha256"]):
    raise errors.UsageError(
        f"--vocab_file={vocab_file} is not the vocab the records were made "
        f"with ({meta['flags']['vocab_file']}); rerun {commands.command('squad-qa-records')} "
        f"with it")
  bert_config = bert_config_lib.BertConfig.from_json_file(config_file)
  if meta["flags"]["max_seq_length"] > bert_config.max_position_embeddings:
    raise errors.UsageError(f"records have max_seq_length {meta['flags']['max_seq_length']} but "
                            f"the encoder has {bert_config.max_position_embeddings} positions")
  vocab_size = records.vocab_size_of(meta)
  if vocab_size and vocab_size > bert_config.vocab_size:
    raise errors.UsageError(
        f"the records in {config.records_dir} were made with a vocab of {vocab_size} tokens "
        f"({meta['flags']['vocab_file']}) but the encoder's vocab_size is {bert_config.vocab_size} "
        f"({config_file}): ids from {bert_config.vocab_size} on have no embedding; make the "
        f"records with the encoder's vocab.txt, or resize the encoder's embedding to "
        f"{vocab_size} rows and its config's vocab_size with it")
  trained = artifacts.read_qa_config(config.model_dir)
  if trained.get("vocab_sha256") and trained["vocab_sha256"] != meta["vocab_sha256"]:
    raise errors.UsageError(
        f"the records in {config.records_dir} were made with {meta['flags']['vocab_file']} "
        f"(SHA-256 {meta['vocab_sha256'][:12]}…) but --model_dir={config.model_dir} was trained "
        f"with {trained['vocab_file']} (SHA-256 {trained['vocab_sha256'][:12]}…); make the records "
        f"with that vocab, or pass a new --model_dir")
  if config.do_train:
    _warn_if_other_records(config, meta, trained)
  elif (meta["flags"].get("version_2_with_negative", False) and
        trained.get("version_2_with_negative") is False):
    raise errors.UsageError(
        f"the records in {config.records_dir} are SQuAD 2.0, but --model_dir={config.model_dir} "
        f"was trained on SQuAD 1.1 records (its {artifacts.QA_CONFIG_FILE}: "
        f"version_2_with_negative=false) and never learned to answer nothing; score it on records "
        f"made from a SQuAD 1.1 file, or train it on these")
  return bert_config, config_file, meta


def _warn_if_other_records(config, meta, trained):
  """Logs one warning when --records_dir holds records made otherwise, or from another train file,
  than those the --model_dir's qa_config.json (`trained`) says it trained on: a resume trains on
  the new ones (a moved folder of the same records passes)."""
  changed = [
      f"{key} {trained[key]} -> {meta['flags'].get(key, False)}"
      for key in artifacts.FEATURIZATION_KEYS + ("version_2_with_negative",)
      if key in trained and trained[key] != meta["flags"].get(key, False)
  ]
  train = meta["splits"].get(records.TRAIN_SPLIT, {})
  if "train_file_sha256" in trained and trained["train_file_sha256"] != train.get("input_sha256"):
    changed.append(f"train file {trained['train_file']} -> {train.get('input_file')}"
                   f"{'' if trained['train_file'] != train.get('input_file') else ' (changed)'}")
  if changed:
    logging.warning(
        "--records_dir=%s holds other records than those --model_dir=%s trained on so far (%s)",
        config.records_dir, config.model_dir, "; ".join(changed))


def default_predict_file(meta):
  """train.py's default --predict_file (str): the SQuAD JSON the eval records were made from
  (`meta`'s `input_file`) while it is there, else $SQUAD_DIR's dev file."""
  recorded = meta["splits"].get(records.EVAL_SPLIT, {}).get("input_file")
  if recorded and os.path.exists(recorded):
    return recorded
  return squad_reader.default_squad_file(squad_reader.PREDICT_FILE_NAMES)


def check_predict_file(predict_file, meta, records_dir, typed=True):
  """Checks what scoring needs: eval records in `records_dir` (its meta.json: `meta`) and the
  SQuAD file `predict_file` that holds their answers, the very file they were made from (its
  SHA-256), so that a wrong file stops the command before training rather than after it.

  Args:
    typed: whether the user passed `predict_file` (else it is `default_predict_file`'s).

  Raises:
    errors.UsageError: (one line) records made without an eval split, no `predict_file`, another
      file than the records', their file changed since (or, `typed` False, gone).
  """
  eval_meta = meta["splits"].get(records.EVAL_SPLIT)
  if not eval_meta:
    raise errors.UsageError(
        f"the records in {records_dir} hold no eval split "
        f"({commands.command('squad-qa-records')} was given no "
        f"--predict_file): pass --do_predict=false to train only, or make the records again "
        f"with a --predict_file")
  made_from, remake = eval_meta["input_file"], commands.command("squad-qa-records")
  if not typed and not os.path.exists(made_from):
    raise errors.UsageError(
        f"the eval records in {records_dir} were made from {made_from}, which is no longer there: "
        f"pass --predict_file=<that file> or make the records again with {remake}")
  if not os.path.exists(predict_file):
    raise errors.UsageError(squad_reader.missing_squad_file_message("predict_file", predict_file))
  if wordpiece.file_sha256(predict_file) != eval_meta["input_sha256"]:
    if not typed or os.path.abspath(predict_file) == os.path.abspath(made_from):
      raise errors.UsageError(
          f"{made_from} changed since the eval records in {records_dir} were made from it: make "
          f"the records again with {remake}, or pass --predict_file=<the file as it was>")
    raise errors.UsageError(f"--predict_file={predict_file} is not the file the eval records were "
                            f"made from ({made_from}); pass that file or make the records again "
                            f"with {remake}")


def check_squad_version(config, meta):
  """Refuses SQuAD version flags the records (`meta`, meta.json as a dict) contradict: the records
  decide the version, and SQuAD 1.1 records hold no unanswerable question, so a model trained on
  them never learns the null answer and its threshold would go unused.

  Raises:
    errors.UsageError: --noversion_2_with_negative on SQuAD 2.0 records, or
      --version_2_with_negative / --null_score_diff_threshold on SQuAD 1.1 records.
  """
  if meta["flags"].get("version_2_with_negative", False):
    if config.version_2_with_negative is False:
      raise errors.UsageError(
          f"--noversion_2_with_negative: the records in {config.records_dir} were made with "
          f"version_2_with_negative=true (SQuAD 2.0), and the records decide; drop the flag, or "
          f"make the records again from a SQuAD 1.1 file")
    return
  typed = ("--version_2_with_negative" if config.version_2_with_negative else
           f"--null_score_diff_threshold={config.null_score_diff_threshold}"
           if config.given("null_score_diff_threshold") else None)
  if typed:
    raise errors.UsageError(
        f"{typed}: the records in {config.records_dir} were made with "
        f"version_2_with_negative=false (SQuAD 1.1: no question without an answer, no null answer "
        f"to weigh); drop the flag, or make the records with "
        f"`{commands.command('squad-qa-records')} --version_2_with_negative` from a SQuAD 2.0 file")
