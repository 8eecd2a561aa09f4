r"""Writes a SavedModel of the QA model for serving, raw text in, answers out.

  python export.py --model_dir=model_out --export_dir=export
  python export.py --init_checkpoint=<any --init_checkpoint kind> --export_dir=export
      # warns when the checkpoint has no fine-tuned span head (run_squad.py / HF qa_outputs)
  python export.py --model_dir=model_out --export_dir=export --doc_stride=256
      # serve_text steps context windows by 256 tokens instead of training's doc_stride

Signatures (serving/module.py has the details):
  serving_default = serve_text: tf.string [batch] `question`, `context` -> `answer` tf.string,
      `start_char`, `end_char` int32 (code points, end exclusive), `score` float32. Tokenization
      (tensorflow-text), windowing, the model and span decoding all run in the graph; contexts of
      any length.
  serve_features: int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids`
      -> float32 [batch, seq] `start_logits`, `end_logits`.
  serve_examples: serialized tf.train.Example [batch] with the TFRecord feature names
      (`input_ids`, `input_mask`, `segment_ids`, optional `unique_ids`) -> `unique_ids`,
      `start_logits`, `end_logits`.
With --serve_text=false the raw-text signature is left out (serving_default = serve_features): that
SavedModel loads where the tensorflow-text ops are not available, since TensorFlow checks every op
of every function when it imports a SavedModel.
The SavedModel carries the WordPiece vocab as an asset (`vocab_file`) and, in
`assets.extra/qa_config.json`, the featurization settings (max_seq_length, doc_stride,
max_query_length, do_lower_case) and the decoding settings baked into serve_text (n_best_size,
max_answer_length, version_2_with_negative, null_score_diff_threshold, window_batch_size), so a client
of serve_features can tokenize and decode as training did (see ask.py). Loading needs TensorFlow and
`import tensorflow_text` (it registers the tokenizer ops; not with --serve_text=false), not this
project's code.
The export is written under a temporary name and renamed into place when complete.
"""

import json
import os
import shutil

from squad_qa import errors
from squad_qa.tasks import cpu_runtime  # pylint: disable=unused-import  (must precede tensorflow)
from absl import flags
from absl import logging
import tensorflow as tf

from squad_qa.flags import command_line
from squad_qa.flags import definitions
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import span_model
from squad_qa.serving import module as serving_module
from squad_qa.tasks import artifacts
from squad_qa.tasks import model_dir as model_dir_lib

definitions.define_tokenizer_flags()
definitions.define_model_flags()
definitions.define_export_flags()
FLAGS = flags.FLAGS

# Featurization used when exporting straight from --init_checkpoint (make_records.py's defaults).
DEFAULT_FEATURIZATION = {"max_seq_length": 384, "doc_stride": 128, "max_query_length": 64}


def export(model, vocab_file, qa_config, export_dir, serve_text=True, max_positions=None):
  """Saves `model` as a SavedModel at `export_dir`, replacing what was there only when complete.

  Args:
    model: a model from `model.span_model.build_span_model`, weights loaded.
    vocab_file: its vocab.txt (copied into the SavedModel's assets).
    qa_config: dict of featurization and decoding settings (serving.module.FEATURIZATION_KEYS and
      DECODING_DEFAULTS' keys), baked into serve_text and written to assets.extra/qa_config.json.
    export_dir: destination folder.
    serve_text: include the raw-text signature (serving_default = serve_text). Without it
      serving_default = serve_features and the SavedModel loads with core TensorFlow alone.
    max_positions: the encoder's max_position_embeddings; when qa_config's max_seq_length exceeds
      it (an --init_checkpoint with a small config), only serve_features is written, with a warning.

  Raises:
    ValueError: an unusable qa_config or vocab (one line).
  """
  module_class = (serving_module.QAServingModule if serve_text
                  else serving_module.FeatureServingModule)
  if max_positions is not None and qa_config["max_seq_length"] > max_positions:
    logging.warning("only serve_features is exported: windows of max_seq_length %d do not fit the "
                    "encoder's %d positions (serve_text and serve_examples need them)",
                    qa_config["max_seq_length"], max_positions)
    module_class = serving_module.LogitsServingModule
  module = module_class(model, vocab_file, qa_config)
  temp_dir = export_dir.rstrip("/") + ".tmp-export"
  if os.path.exists(temp_dir):
    shutil.rmtree(temp_dir)
  tf.saved_model.save(module, temp_dir, signatures=module.signatures())
  os.makedirs(os.path.join(temp_dir, artifacts.EXPORT_EXTRA_DIR), exist_ok=True)
  with open(os.path.join(temp_dir, artifacts.EXPORT_EXTRA_DIR, artifacts.QA_CONFIG_FILE), "w") as f:
    json.dump(qa_config, f, indent=2)
  if os.path.exists(export_dir):
    shutil.rmtree(export_dir)
  os.rename(temp_dir, export_dir)
  logging.info("exported SavedModel to %s", export_dir)


def decoding_config(saved_config):
  """The decoding settings to bake in: flags, with SQuAD 2.0 also switched on by the model_dir's
  qa_config.json (`version_2_with_negative`, `null_score_diff_threshold` when train.py saved them)."""
  version_2 = bool(FLAGS.version_2_with_negative or saved_config.get("version_2_with_negative"))
  threshold = FLAGS.null_score_diff_threshold
  if not FLAGS["null_score_diff_threshold"].present and "null_score_diff_threshold" in saved_config:
    threshold = saved_config["null_score_diff_threshold"]
  return {"n_best_size": FLAGS.n_best_size, "max_answer_length": FLAGS.max_answer_length,
          "version_2_with_negative": version_2, "null_score_diff_threshold": float(threshold),
          "window_batch_size": FLAGS.window_batch_size}


def serving_config(saved_config):
  """The qa_config baked into the export: `saved_config`'s featurization (its doc_stride replaced
  by --doc_stride when given) and the decoding settings of `decoding_config`.

  Args:
    saved_config: dict with serving.module.FEATURIZATION_KEYS (tokens; train.py's qa_config.json or
      DEFAULT_FEATURIZATION), plus optionally its SQuAD 2.0 settings.

  Raises:
    ValueError: --doc_stride is not positive (one line).
  """
  featurization = {k: saved_config[k] for k in serving_module.FEATURIZATION_KEYS}
  if not FLAGS["doc_stride"].using_default_value:  # typed (or set by flagsaver in tests)
    if FLAGS.doc_stride <= 0:
      raise errors.UsageError(f"--doc_stride={FLAGS.doc_stride}: the window step must be a positive "
                       f"number of tokens (training used {featurization['doc_stride']})")
    logging.info("serve_text steps windows by %d tokens (training's records: %d)",
                 FLAGS.doc_stride, featurization["doc_stride"])
    featurization["doc_stride"] = FLAGS.doc_stride
  return dict(featurization, **decoding_config(saved_config))


def model_settings(start, model_dir):
  """The encoder config, vocab and qa_config of what `start` (a `tasks.model_dir.Start`) exports.

  A --model_dir checkpoint comes with train.py's qa_config.json; an --init_checkpoint with the one
  beside it when it is a --model_dir of this tool, else with make_records.py's default
  featurization and --do_lower_case.

  Returns:
    (bert_config_lib.BertConfig, vocab file path, qa_config dict).

  Raises:
    ValueError: the files needed are missing (one line).
  """
  if start.resume:
    qa_config = artifacts.read_qa_config(model_dir)
    if not qa_config:
      raise errors.UsageError(f"--model_dir={model_dir} holds {os.path.basename(start.resume)} but no "
                       f"{artifacts.QA_CONFIG_FILE} (train.py writes it with the first "
                       f"checkpoint); export it with --init_checkpoint={start.resume} "
                       f"--bert_config_file=... --vocab_file=... instead")
    return (bert_config_lib.BertConfig(**qa_config["bert_config"]),
            FLAGS.vocab_file or qa_config["vocab_file"], qa_config)
  if not start.init_checkpoint:
    raise errors.UsageError(f"--model_dir={FLAGS.model_dir} has no trained checkpoint and no "
                     f"--init_checkpoint was given; run train.py first")
  config_file, vocab_file = model_dir_lib.resolve_model_files(
      start.init_checkpoint, FLAGS.bert_config_file, FLAGS.vocab_file)
  if not config_file or not vocab_file:
    raise errors.UsageError("--bert_config_file and --vocab_file are needed for this --init_checkpoint")
  saved = artifacts.read_qa_config(checkpoints.checkpoint_folder(start.init_checkpoint))
  return (bert_config_lib.BertConfig.from_json_file(config_file), vocab_file,
          {**DEFAULT_FEATURIZATION, "do_lower_case": FLAGS.do_lower_case, **saved})


def run():
  """export.py's job from FLAGS.

  What it exports follows train.py's rule (`tasks.model_dir.decide_start`): the latest checkpoint of
  --model_dir, unless --init_checkpoint names another start (refused when --model_dir holds a
  checkpoint). --init_checkpoint without --model_dir exports that checkpoint, whatever the default
  ./model_out holds.
  """
  given = not FLAGS["model_dir"].using_default_value
  model_dir = FLAGS.model_dir if given or not FLAGS.init_checkpoint else None
  if model_dir is None and tf.io.gfile.isdir(FLAGS.model_dir):
    logging.info("exporting --init_checkpoint=%s, not the default --model_dir=%s (pass "
                 "--model_dir=%s alone to export that one)", FLAGS.init_checkpoint,
                 FLAGS.model_dir, FLAGS.model_dir)
  start = model_dir_lib.decide_start(model_dir, FLAGS.init_checkpoint)
  config, vocab_file, qa_config = model_settings(start, model_dir)
  model, _ = span_model.build_span_model(config)
  if start.resume:
    tf.train.Checkpoint(model=model).read(start.resume).expect_partial(
        ).assert_existing_objects_matched()
    logging.info("%s", start.describe("exporting"))
  else:
    report = checkpoints.initialize_from(model, start.init_checkpoint)
    logging.info("exporting %s", report)
    if not report.head_restored:
      logging.warning("the span head is untrained: answers will be meaningless until fine-tuned")
  export(model, vocab_file, serving_config(qa_config), FLAGS.export_dir, FLAGS.serve_text,
         config.max_position_embeddings)


def main(argv):
  del argv
  run()


def cli():
  """Console-script entry point: parses the flags and runs main()."""
  command_line.run(main)


if __name__ == "__main__":
  cli()
