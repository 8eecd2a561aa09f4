r"""Converts an --init_checkpoint of any kind once into a TF2 checkpoint, so later runs skip that.

  python -m model.convert_checkpoint --init_checkpoint=uncased_L-12_H-768_A-12 --output=bert_tf2
  python train.py --init_checkpoint=bert_tf2 ...     # config and vocab are found beside it

Reads every kind train.py's --init_checkpoint reads (google-research TF1, tfm TF2, HF folder, a
--model_dir of train.py) with the same checks, and writes into --output:
- `ckpt-1.*` + `checkpoint`: `tf.train.Checkpoint(encoder=BertEncoder)`, the layout of tfm's
  `tf2_bert_encoder_checkpoint_converter`, so tfm code reads it too; plus `model=<span model>` when
  the source had a trained span head (run_squad.py `cls/squad/*`, HF `qa_outputs`), so a fine-tuned
  head is kept.
- the BERT config file unchanged, under its own kind's name (`bert_config.json` for
  google-research, `config.json` for HF: "gelu" is the tanh approximation in one and the exact erf
  in the other, so rewriting it in the other format would change the model), and `vocab.txt`.
- a --model_dir's `qa_config.json` (its window, casing and SQuAD version), so an export of the
  output serves them as the model_dir's own export would.
- `conversion.json`: the source, its kind and what was restored.
The folder is written under a temporary name and renamed when complete; an existing --output is
an error, never overwritten.
"""

from squad_qa.base import console  # noqa: F401  (must precede tensorflow)

import dataclasses
import json
import os
from typing import Optional

from absl import logging

from squad_qa import errors
from squad_qa.base import artifacts
from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.model import model_files
from squad_qa.preprocess import features

CONVERSION_FILE = "conversion.json"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ConvertConfig(model_files.EncoderFiles, features.VocabFile):
  """The flags of `python -m model.convert_checkpoint`: the encoder's files, the vocab (copied as
  it is) and `output`.

  Raises (on construction):
    errors.UsageError: no `init_checkpoint` or no `output`.
  """
  init_checkpoint: Optional[str] = settings.variant(
      model_files.EncoderFiles, "init_checkpoint",
      help="The checkpoint to convert (required): an HF BERT folder, a google-research/bert TF1 "
      "checkpoint (folder or prefix), a tf-models-official TF2 encoder checkpoint, or a "
      "--model_dir of train.py.")
  vocab_file: Optional[str] = settings.variant(
      features.VocabFile, "vocab_file",
      help="WordPiece vocab.txt copied beside the converted checkpoint. Default: the vocab.txt "
      "beside --init_checkpoint (none there: the output has no vocab).")
  output: Optional[str] = settings.setting(
      None, "Folder for the converted TF2 checkpoint, with the config and vocab copied beside it; "
      "must not exist yet.")

  def check(self):
    if not self.init_checkpoint or not self.output:
      raise errors.UsageError("--init_checkpoint and --output are required")


settings.define_flags(ConvertConfig)


def convert(init_checkpoint, output, bert_config_file=None, vocab_file=None):
  """Converts `init_checkpoint` into a new TF2 checkpoint folder `output`; returns the
  `checkpoints.LoadReport` of the source. `bert_config_file`, `vocab_file` override those found
  beside it.

  Raises:
    FileExistsError: `output` exists.
    FileNotFoundError: no config, or nothing usable at `init_checkpoint`.
    checkpoints.CheckpointError: the checkpoint does not fit the config.
    errors.MissingFileError: no file at `vocab_file`.
    errors.UsageError: a `vocab_file` with more tokens than the config's vocab_size, or other tokens
      than the checkpoint's own vocab (`checkpoints.resolve_model_files`).
    errors.NotWritableError: `output`'s folder cannot be made.
  """
  # TensorFlow loads here, not at the top: --help and flag errors answer before it.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  from squad_qa.model import checkpoints  # pylint: disable=g-import-not-at-top
  from squad_qa.model import span_model  # pylint: disable=g-import-not-at-top
  from squad_qa.preprocess import wordpiece  # pylint: disable=g-import-not-at-top
  if tf.io.gfile.exists(output):
    raise errors.OutputExistsError(f"--output={output} exists; remove it or choose another folder")
  config_file, vocab_file = checkpoints.resolve_model_files(init_checkpoint, bert_config_file,
                                                            vocab_file)
  if not config_file:
    raise errors.MissingFileError(f"--init_checkpoint={init_checkpoint}: no bert_config.json or "
                                  f"config.json beside it; pass --bert_config_file")
  if vocab_file and not tf.io.gfile.exists(vocab_file):
    raise errors.MissingFileError(f"--vocab_file={vocab_file}: no such file")
  config = bert_config_lib.BertConfig.from_json_file(config_file)
  tokens = len(wordpiece.read_vocab(vocab_file)) if vocab_file else 0
  if tokens > config.vocab_size:
    raise errors.UsageError(
        f"--vocab_file={vocab_file} has {tokens} tokens, but the "
        f"encoder's vocab_size is {config.vocab_size} ({config_file}): ids from "
        f"{config.vocab_size} on have no embedding; pass the checkpoint's own vocab")
  model, encoder = span_model.build_span_model(config)
  report = checkpoints.initialize_from(model, init_checkpoint)
  objects = {"encoder": encoder}
  if report.head_restored:
    objects["model"] = model
  temp = output.rstrip("/") + ".tmp-convert"
  if tf.io.gfile.exists(temp):
    tf.io.gfile.rmtree(temp)
  try:
    tf.io.gfile.makedirs(temp)
  except (tf.errors.OpError, OSError) as e:
    reason = e.message if isinstance(e, tf.errors.OpError) else e.strerror
    raise errors.NotWritableError(f"--output={output}: cannot make the folder ({reason}); pass a "
                                  f"folder you can write to") from None
  try:
    _write(temp, output, objects, config_file, vocab_file, init_checkpoint, report)
  except BaseException:  # failed or interrupted: nothing half-written is left
    if tf.io.gfile.exists(temp):
      tf.io.gfile.rmtree(temp)
    raise
  return report


def _write(temp, output, objects, config_file, vocab_file, init_checkpoint, report):
  """Writes the converted checkpoint, config, vocab and conversion.json into `temp`, then renames
  it to `output`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from squad_qa.model import checkpoints  # pylint: disable=g-import-not-at-top
  from squad_qa.model import hf_checkpoint  # pylint: disable=g-import-not-at-top
  saved = tf.train.CheckpointManager(tf.train.Checkpoint(**objects), temp, max_to_keep=1).save()
  with tf.io.gfile.GFile(config_file) as f:
    values = json.load(f)
  # An HF config (model_type/architectures) keeps its name, config.json; else bert_config.json.
  is_hf = "model_type" in values or "architectures" in values
  config_name = hf_checkpoint.CONFIG_FILE if is_hf else checkpoints.BERT_CONFIG_FILE
  tf.io.gfile.copy(config_file, os.path.join(temp, config_name))
  if vocab_file:
    tf.io.gfile.copy(vocab_file, os.path.join(temp, hf_checkpoint.VOCAB_FILE))
  else:
    logging.warning("no vocab.txt beside %s and no --vocab_file: the output has none",
                    init_checkpoint)
  # A --model_dir's training settings (window, casing, SQuAD version) go with its weights, so an
  # export of the output serves them as the model_dir's own export would.
  trained = os.path.join(checkpoints.checkpoint_folder(init_checkpoint), artifacts.QA_CONFIG_FILE)
  if tf.io.gfile.exists(trained):
    tf.io.gfile.copy(trained, os.path.join(temp, artifacts.QA_CONFIG_FILE))
  with tf.io.gfile.GFile(os.path.join(temp, CONVERSION_FILE), "w") as f:
    json.dump(
        {
            "source": os.path.abspath(init_checkpoint),
            "source_kind": report.kind,
            "bert_config_file": os.path.abspath(config_file),
            "objects": sorted(objects),
            "restored": len(report.restored),
            "new": report.new,
            "head_restored": report.head_restored
        }, f, indent=2)
  tf.io.gfile.rename(temp, output)
  logging.info("wrote %s (%s) from %s", os.path.join(output, os.path.basename(saved)),
               " + ".join(sorted(objects)), report)


def main(argv):
  del argv
  config = command_line.config_from_flags(ConvertConfig)
  convert(config.init_checkpoint, config.output, config.bert_config_file, config.vocab_file)


def cli():
  """Console-script entry point: parses the flags and runs main()."""
  command_line.run(main)


if __name__ == "__main__":
  cli()
