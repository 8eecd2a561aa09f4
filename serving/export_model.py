"""export.py's job: the SavedModel of a trained run or of any --init_checkpoint, for serving.

`export_model(config)` decides what to export with train.py's rule, finds the encoder config,
vocab and qa_config that go with it, builds the span model in the --serving_precision, loads its
weights and writes the export.
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import time

from absl import logging
import tensorflow as tf

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.base import commands
from squad_qa.base import progress
from squad_qa.flags import settings
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import span_model
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features
from squad_qa.preprocess import wordpiece
from squad_qa.serving import export_config
from squad_qa.serving import export_folder
from squad_qa.serving import features_model
from squad_qa.serving import module as serving_module

# What the export records about its vocab (assets.extra/qa_config.json), to be checked, not served.
VOCAB_KEYS = ("vocab_sha256", "vocab_size")
# Featurization used when exporting straight from --init_checkpoint (make_records.py's defaults).
DEFAULT_FEATURIZATION = {
    name: value for name, value in settings.defaults(features.Featurization).items()
    if name in ("max_seq_length", "doc_stride", "max_query_length")
}
SERVING_POLICIES = export_config.SERVING_POLICIES

# The file that makes a folder a SavedModel (tf.saved_model.save writes it).
SAVED_MODEL_FILE = "saved_model.pb"
# What an export folder holds (a SavedModel's files, or the int8 model's): an --export_dir of these
# alone, with assets.extra/qa_config.json, is an earlier export that a new one replaces.
EXPORT_ENTRIES = (SAVED_MODEL_FILE, "fingerprint.pb", "variables", "assets",
                  artifacts.EXPORT_EXTRA_DIR, features_model.INT8_MODEL_FILE)

# export.py's config (its own module loads without TensorFlow, so the flags parse first).
ExportConfig = export_config.ExportConfig


def check_export_dir(export_dir):
  """Refuses an --export_dir that holds something other than an earlier export of this tool
  (which is replaced whole; nothing else is ever deleted).

  Raises:
    errors.OutputExistsError: `export_dir` is a file; a non-empty folder holding no export, or
      another tool's SavedModel (no assets.extra/qa_config.json); or an earlier export beside
      files that are not the export's.
  """
  if not os.path.lexists(export_dir):
    return
  if not os.path.isdir(export_dir):
    raise errors.OutputExistsError(
        f"--export_dir={export_dir} is a file, not a folder; choose a folder for the export")
  entries = sorted(os.listdir(export_dir))
  if not entries:
    return
  is_model = any(
      os.path.isfile(os.path.join(export_dir, name))
      for name in (SAVED_MODEL_FILE, features_model.INT8_MODEL_FILE))
  ours = os.path.isfile(
      os.path.join(export_dir, artifacts.EXPORT_EXTRA_DIR, artifacts.QA_CONFIG_FILE))
  others = [name for name in entries if name not in EXPORT_ENTRIES]

  def shown(names):
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")

  if not is_model:
    raise errors.OutputExistsError(
        f"--export_dir={export_dir} is a folder that holds no export ({shown(entries)}); export "
        f"replaces only an earlier export, so choose a new or empty folder")
  if not ours:
    raise errors.OutputExistsError(
        f"--export_dir={export_dir} holds a model that is not an export of this tool (no "
        f"{artifacts.EXPORT_EXTRA_DIR}/{artifacts.QA_CONFIG_FILE}); export replaces only its own "
        f"earlier export, so choose a new or empty folder")
  if others:
    raise errors.OutputExistsError(
        f"--export_dir={export_dir} holds an earlier export and other files ({shown(others)}); "
        f"export replaces the whole folder, so move them or choose a new or empty folder")


def _write_qa_config(temp_dir, qa_config):
  """Writes `qa_config` to the export's assets.extra/qa_config.json."""
  os.makedirs(os.path.join(temp_dir, artifacts.EXPORT_EXTRA_DIR), exist_ok=True)
  with open(os.path.join(temp_dir, artifacts.EXPORT_EXTRA_DIR, artifacts.QA_CONFIG_FILE), "w") as f:
    json.dump(qa_config, f, indent=2)


def write_saved_model(model, vocab_file, qa_config, export_dir, serve_text=True,
                      max_positions=None):
  """Saves `model` (weights loaded) as a SavedModel at `export_dir`, replaced once complete.

  `qa_config` (featurization and decoding settings) is baked in and written to
  assets.extra/qa_config.json with the encoder's `serving_precision`; `vocab_file` becomes an asset.
  Without `serve_text` the export needs core TensorFlow alone; `max_positions` (the encoder's)
  below max_seq_length writes serve_features alone, with a warning.

  Raises:
    errors.UsageError: an unusable qa_config or vocab.
    errors.NoSpaceError: the disk filled up (the partial export is removed).
  """
  module_class = (serving_module.QAServingModule
                  if serve_text else serving_module.FeatureServingModule)
  if max_positions is not None and qa_config["max_seq_length"] > max_positions:
    logging.warning(
        "only serve_features is exported: windows of max_seq_length %d do not fit the "
        "encoder's %d positions (serve_text and serve_examples need them)",
        qa_config["max_seq_length"], max_positions)
    module_class = serving_module.LogitsServingModule
  qa_config = dict(qa_config, serving_precision=span_model.encoder_compute_dtype(model))
  module = module_class(model, vocab_file, qa_config)
  temp_dir = export_folder.temp_dir(export_dir)
  shutil.rmtree(temp_dir, ignore_errors=True)
  signatures = module.signatures()
  with export_folder.no_space_reported(export_dir):
    tf.saved_model.save(module, temp_dir, signatures=signatures)
    _write_qa_config(temp_dir, qa_config)
    check_export_dir(export_dir)
    export_folder.replace(export_dir)
  size = sum(
      os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(export_dir)
      for name in names)
  logging.info("exported SavedModel to %s: signatures %s; %.1f MB; computes in %s", export_dir,
               ", ".join(signatures), size / 1e6, qa_config["serving_precision"])


def write_int8_export(model, vocab_file, qa_config, export_dir):
  """Writes an int8 export (vocab asset, qa_config.json, LiteRT model) at `export_dir`, replacing
  it only once complete; arguments as `write_saved_model`, `model` float32.

  Raises:
    errors.UsageError: an unusable qa_config or vocab.
  """
  try:
    serving_module.validate_config(qa_config)
    wordpiece.read_vocab(vocab_file)
  except ValueError as error:
    raise errors.UsageError(str(error)) from None
  qa_config = dict(qa_config, serving_precision=features_model.INT8)
  temp_dir = export_folder.temp_dir(export_dir)
  shutil.rmtree(temp_dir, ignore_errors=True)
  with export_folder.no_space_reported(export_dir):
    os.makedirs(os.path.join(temp_dir, os.path.dirname(features_model.VOCAB_ASSET)))
    shutil.copyfile(vocab_file, os.path.join(temp_dir, features_model.VOCAB_ASSET))
    size = features_model.write_int8_model(model,
                                           os.path.join(temp_dir, features_model.INT8_MODEL_FILE),
                                           qa_config["max_seq_length"])
    _write_qa_config(temp_dir, qa_config)
    check_export_dir(export_dir)
    export_folder.replace(export_dir)
  needs = ("" if importlib.util.find_spec(features_model.LITERT_MODULE) else
           f"; running it needs LiteRT, not installed here: {features_model.LITERT_INSTALL}")
  logging.info(
      "exported the int8 LiteRT model to %s: %s, %.1f MB; no serve_text (%s and SavedModelQA "
      "tokenize in Python)%s", export_dir, features_model.INT8_MODEL_FILE, size / 1e6,
      commands.command("squad-qa-ask"), needs)


def served_version_2(config, saved_config):
  """Whether the export answers as SQuAD 2.0: --[no]version_2_with_negative when typed, else the
  run's qa_config.json (`saved_config`; False without one). A SQuAD 2.0 run served with
  --noversion_2_with_negative always answers with a span."""
  if config.given("version_2_with_negative"):
    return bool(config.version_2_with_negative)
  return bool(saved_config.get("version_2_with_negative"))


def decoding_config(config, saved_config):
  """The decoding settings to bake in: `config`'s, the version (`served_version_2`) and the other
  settings taken from the run's qa_config.json unless given."""
  version_2 = served_version_2(config, saved_config)
  chosen = {}
  defaults = settings.defaults(span_decoding.DecodingSettings)
  for name in ("n_best_size", "max_answer_length", "null_score_diff_threshold"):
    use_saved = not config.given(name) and name in saved_config
    value = saved_config[name] if use_saved else getattr(config, name)
    chosen[name] = defaults[name] if value is None else value
  return {
      "n_best_size": chosen["n_best_size"],
      "max_answer_length": chosen["max_answer_length"],
      "version_2_with_negative": version_2,
      "null_score_diff_threshold": float(chosen["null_score_diff_threshold"]),
      "window_batch_size": config.window_batch_size
  }


def check_version_2(config, recorded, source):
  """Refuses --version_2_with_negative for a model trained on SQuAD 1.1 records (its qa_config.json
  says version_2_with_negative=false, train.py's flag or its records'): it never learned the null
  answer. A model without a qa_config.json (an outside --init_checkpoint) is served as asked.
  Refuses --null_score_diff_threshold for an export that would answer as SQuAD 1.1 (every question
  gets a span), where it would go unused.

  Args:
    config: the ExportConfig.
    recorded: the model's qa_config.json ({} without one).
    source: the flag naming the model, e.g. "--model_dir=model_out".

  Raises:
    errors.UsageError: a flag is given for such a model (one line with the fix).
  """
  if config.version_2_with_negative and recorded.get("version_2_with_negative") is False:
    raise errors.UsageError(
        f"--version_2_with_negative: {source} was trained on SQuAD 1.1 records (its "
        f"{artifacts.QA_CONFIG_FILE}: version_2_with_negative=false) and never learned to answer "
        f"nothing; drop the flag, or export a model trained on records made with "
        f"`{commands.command('squad-qa-records')} --version_2_with_negative`")
  if config.given("null_score_diff_threshold") and not served_version_2(config, recorded):
    trained = ("is served as SQuAD 1.1 (--noversion_2_with_negative)"
               if config.given("version_2_with_negative") else
               "was trained on SQuAD 1.1 records" if "version_2_with_negative" in recorded else
               "is served as SQuAD 1.1 without --version_2_with_negative")
    raise span_decoding.unused_threshold(config.null_score_diff_threshold, f"{source} {trained}")


def setting_sources(config, served, recorded):
  """One log line: every setting of `served` with its source (--flag, the model's qa_config.json,
  which training and any later scoring of the model write, or default)."""

  def source(name):
    if name in ExportConfig.__dataclass_fields__ and config.given(name):
      return f"--{name}"
    if name in recorded:
      return artifacts.QA_CONFIG_FILE
    return "default"

  return "serving " + ", ".join(
      f"{name}={served[name]} ({source(name)})" for name in served if name not in VOCAB_KEYS)


def better_threshold(results, served):
  """One line when a SQuAD 2.0 model's scoring (`results`: its eval_results.json, the official
  scorer's with best_f1 and best_f1_thresh, or None) found a null_score_diff_threshold (logits)
  scoring its dev questions more than 0.005 F1 better than the one `served` applies; else None."""
  if not served.get("version_2_with_negative") or not results or "best_f1_thresh" not in results:
    return None
  if results.get("null_score_diff_threshold") != served["null_score_diff_threshold"]:
    return None  # scored under another threshold: its F1 is not the served one's
  if results["best_f1"] <= results["f1"] + 0.005:
    return None
  return (f"{artifacts.EVAL_RESULTS_FILE}: on its {results['total']} dev questions, "
          f"null_score_diff_threshold={results['best_f1_thresh']:.3f} scored F1 "
          f"{results['best_f1']:.2f} against {results['f1']:.2f} at the served "
          f"{served['null_score_diff_threshold']:g}; --null_score_diff_threshold="
          f"{results['best_f1_thresh']:.3f} serves at it")


def check_vocab(vocab_file, bert_config, recorded, export_vocab_given):
  """Refuses a vocab the exported encoder cannot serve; returns {"vocab_sha256", "vocab_size"}.

  `recorded`: the run's qa_config.json ({} without one); `export_vocab_given`: --vocab_file
  named it, else the path came from `recorded` (a file outside the model folder, so it is named in
  the log and must still be the file training read).

  Raises:
    errors.MissingFileError: no file at `vocab_file` (a model folder moved from where it trained).
    errors.UsageError: a vocab other than training's (`wordpiece.has_vocab_sha256`), or more
      tokens than the encoder's embedding rows.
  """
  if not tf.io.gfile.exists(vocab_file):
    named = ("--vocab_file" if export_vocab_given else
             f"the model's {artifacts.QA_CONFIG_FILE}, written where it trained,")
    raise errors.MissingFileError(
        f"{vocab_file}: not found ({named} names it); pass --vocab_file=<the vocab.txt training "
        f"read>, e.g. the one beside the starting checkpoint")
  vocab = wordpiece.read_vocab(vocab_file)
  sha256, size = wordpiece.vocab_sha256(vocab), len(vocab)
  trained_sha256 = recorded.get("vocab_sha256")
  if trained_sha256 and wordpiece.has_vocab_sha256(vocab_file, trained_sha256):
    sha256 = trained_sha256  # the same tokens: the export records training's digest
  if export_vocab_given and trained_sha256 and sha256 != trained_sha256:
    raise errors.UsageError(
        f"--vocab_file={vocab_file} (SHA-256 {sha256[:12]}…, {size} tokens) is not the vocab the "
        f"model was trained with ({recorded['vocab_file']}, SHA-256 {trained_sha256[:12]}…): its "
        f"token ids mean other words to the encoder; drop --vocab_file to serve with training's")
  if trained_sha256 and sha256 != trained_sha256:
    raise errors.UsageError(
        f"{vocab_file}, the vocab {artifacts.QA_CONFIG_FILE} names, changed since training "
        f"(SHA-256 {sha256[:12]}…, trained with {trained_sha256[:12]}…): restore it, or pass "
        f"--vocab_file=<the vocab training read>")
  if not export_vocab_given and recorded.get("vocab_file") == vocab_file:
    logging.info("vocab: %s (named by the model's %s; the file training read, by SHA-256)",
                 vocab_file, artifacts.QA_CONFIG_FILE)
  if size > bert_config.vocab_size:
    raise errors.UsageError(
        f"{vocab_file} has {size} tokens but the encoder's vocab_size is {bert_config.vocab_size}: "
        f"ids from {bert_config.vocab_size} on have no embedding; export with the encoder's "
        f"vocab.txt")
  return {"vocab_sha256": sha256, "vocab_size": size}


def serving_config(config, saved_config):
  """The qa_config baked into the export: `saved_config`'s featurization (doc_stride replaced when
  given) and `decoding_config`'s settings.

  Raises:
    errors.UsageError: a doc_stride given that is not positive.
  """
  featurization = {k: saved_config[k] for k in serving_module.FEATURIZATION_KEYS}
  if config.given("doc_stride"):
    if config.doc_stride <= 0:
      raise errors.UsageError(f"--doc_stride={config.doc_stride}: the window step must be a "
                              f"positive number of tokens (training used "
                              f"{featurization['doc_stride']})")
    logging.info("serving steps windows by %d tokens (training's records: %d)", config.doc_stride,
                 featurization["doc_stride"])
    featurization["doc_stride"] = config.doc_stride
    features.warn_if_stride_clamped(features.Featurization(**featurization))
  return dict(featurization, **decoding_config(config, saved_config))


def model_settings(config, start, model_dir):
  """(BertConfig, vocab file, qa_config, recorded) of what `start` exports: train.py's
  qa_config.json, the one beside an --init_checkpoint, else make_records.py's defaults; `recorded`
  is the qa_config.json found ({} without one).

  Raises:
    errors.UsageError: missing files, or a --bert_config_file, --vocab_file or --do_lower_case
      against the --model_dir's or the --init_checkpoint's own.
  """
  if start.resume:
    qa_config = artifacts.read_qa_config(model_dir)
    if not qa_config:
      raise errors.UsageError(
          f"--model_dir={model_dir} holds {os.path.basename(start.resume)} but no "
          f"{artifacts.QA_CONFIG_FILE} ({commands.command('squad-qa-train')} writes it with the "
          f"first checkpoint); export it "
          f"with --init_checkpoint={start.resume} --bert_config_file=... --vocab_file=... instead")
    if config.given("bert_config_file"):
      raise errors.UsageError(
          f"--bert_config_file={config.bert_config_file}: the model in {model_dir} is exported "
          f"with the encoder it trained ({artifacts.QA_CONFIG_FILE} records its config); drop the "
          f"flag")
    window_lengths(config, qa_config, f"--model_dir={model_dir}",
                   bert_config_lib.BertConfig(**qa_config["bert_config"]))
    if config.given("do_lower_case") and config.do_lower_case != qa_config["do_lower_case"]:
      raise errors.UsageError(
          f"--do_lower_case={str(config.do_lower_case).lower()}: the model in {model_dir} was "
          f"trained with do_lower_case={str(qa_config['do_lower_case']).lower()} "
          f"({artifacts.QA_CONFIG_FILE}), and serving must tokenize as training did; drop the flag")
    return (bert_config_lib.BertConfig(**qa_config["bert_config"]), config.vocab_file or
            qa_config["vocab_file"], qa_config, qa_config)
  if not start.init_checkpoint:
    raise errors.UsageError(
        f"--model_dir={config.model_dir} has no trained checkpoint and no "
        f"--init_checkpoint was given; run {commands.command('squad-qa-train')} first")
  config_file, vocab_file = checkpoints.resolve_model_files(start.init_checkpoint,
                                                            config.bert_config_file,
                                                            config.vocab_file)
  if not config_file or not vocab_file:
    raise errors.UsageError(
        "--bert_config_file and --vocab_file are needed for this --init_checkpoint")
  saved = artifacts.read_qa_config(checkpoints.checkpoint_folder(start.init_checkpoint))
  bert_config = bert_config_lib.BertConfig.from_json_file(config_file)
  return (bert_config, vocab_file, {
      **DEFAULT_FEATURIZATION, "do_lower_case": config.do_lower_case,
      **window_lengths(config, saved, f"--init_checkpoint={start.init_checkpoint}", bert_config),
      **saved
  }, saved)


def window_lengths(config, recorded, source, bert_config):
  """{max_seq_length, max_query_length} given as flags (tokens) for a model that records none.

  Raises:
    errors.UsageError: one given for a model whose qa_config.json records its own (`source`
      names it), or lengths that leave a window no context token or exceed the encoder's
      max_position_embeddings.
  """
  given = {
      name: getattr(config, name) for name in ("max_seq_length", "max_query_length")
      if config.given(name)
  }
  for name, value in given.items():
    if name in recorded:
      raise errors.UsageError(
          f"--{name}={value}: the model of {source} was trained on windows of {name}="
          f"{recorded[name]} ({artifacts.QA_CONFIG_FILE}) and is served so; drop the flag")
  lengths = {
      **{
          k: DEFAULT_FEATURIZATION[k] for k in ("max_seq_length", "max_query_length")
      },
      **given
  }
  if given and lengths["max_seq_length"] <= lengths["max_query_length"] + 3:
    raise errors.UsageError(
        f"max_seq_length={lengths['max_seq_length']} with max_query_length="
        f"{lengths['max_query_length']} leaves a window no context token; max_seq_length must "
        f"exceed max_query_length + 3")
  if given and lengths["max_seq_length"] > bert_config.max_position_embeddings:
    raise errors.UsageError(
        f"--max_seq_length={lengths['max_seq_length']}: the encoder has "
        f"{bert_config.max_position_embeddings} positions (max_position_embeddings); use at most "
        f"that")
  return given


def export_model(config):
  """Writes the export `config` (an ExportConfig) asks for: export.py's job.

  Raises:
    errors.UserError: (one line each) a start `tasks.model_dir.decide_start` refuses, an
      --export_dir that is not an earlier export, in use by another export.py or not writable,
      missing files, an unusable setting or vocab, --version_2_with_negative for a model trained
      on SQuAD 1.1 records (`check_version_2`), checkpoint errors of `model.checkpoints`, a full
      disk.
  """
  started = time.time()
  typed = config.export_dir
  export_dir = export_folder.followed(typed)
  if export_dir != typed:
    config = dataclasses.replace(config, export_dir=export_dir)
    logging.info("--export_dir=%s links to %s: exporting there", typed, export_dir)
  with export_folder.writing(config.export_dir):
    check_export_dir(config.export_dir)
    _export(config)
  logging.info("done in %s; ask it: %s --export_dir=%s --question=... --context=...",
               progress.format_seconds(time.time() - started), commands.command("squad-qa-ask"),
               typed)


def _export(config):
  """`export_model` once --export_dir is locked and checked."""
  given = config.given("model_dir")
  model_dir = config.model_dir if given or not config.init_checkpoint else None
  if model_dir is None and config.model_dir and tf.io.gfile.isdir(config.model_dir):
    logging.info(
        "exporting --init_checkpoint=%s, not the default --model_dir=%s (pass "
        "--model_dir=%s alone to export that one)", config.init_checkpoint, config.model_dir,
        config.model_dir)
  start, pinned = export_folder.pinned_start(model_dir, config.init_checkpoint, config.export_dir)
  bert_config, vocab_file, qa_config, recorded = model_settings(config, start, model_dir)
  check_version_2(
      config, recorded,
      f"--model_dir={model_dir}" if start.resume else f"--init_checkpoint={start.init_checkpoint}")
  model, _ = span_model.build_span_model(bert_config, SERVING_POLICIES[config.serving_precision])
  if start.resume:
    try:
      tf.train.Checkpoint(
          model=model).read(pinned).expect_partial().assert_existing_objects_matched()
    except tf.errors.NotFoundError:
      if checkpoints.damage(pinned) is None:  # intact when decide_start checked it
        raise
      raise export_folder.deleted_while_read(model_dir) from None
    logging.info("%s", start.describe("exporting"))
    unfinished = export_folder.describe_progress(start.resume, pinned)
    if unfinished:
      logging.warning("%s", unfinished)
  else:
    report = checkpoints.initialize_from(model, start.init_checkpoint)
    logging.info("exporting %s", report)
    if not report.head_restored:
      logging.warning("%s", checkpoints.UNTRAINED_HEAD)
  served = dict(serving_config(config, qa_config),
                **check_vocab(vocab_file, bert_config, recorded, config.given("vocab_file")),
                serving_precision=config.serving_precision)
  logging.info("%s", setting_sources(config, served, recorded))
  if model_dir and not config.given("null_score_diff_threshold"):
    try:  # a hint: a damaged scoring file does not stop the export
      results = artifacts.read_json(os.path.join(model_dir, artifacts.EVAL_RESULTS_FILE))
    except errors.UsageError:
      results = None
    hint = better_threshold(results, served)
    if hint:
      logging.info("%s", hint)
  if config.serving_precision == features_model.INT8:
    write_int8_export(model, vocab_file, served, config.export_dir)
  else:
    write_saved_model(model, vocab_file, served, config.export_dir, config.serve_text,
                      bert_config.max_position_embeddings)
