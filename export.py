r"""Writes a SavedModel of the QA model for serving, raw text in, answers out.

  python export.py --model_dir=model_out --export_dir=export
  python export.py --init_checkpoint=<any --init_checkpoint kind> --export_dir=export
      # warns when the checkpoint has no fine-tuned span head (run_squad.py / HF qa_outputs)
  python export.py --model_dir=model_out --export_dir=export --doc_stride=256
      # serve_text steps context windows by 256 tokens instead of training's doc_stride
  python export.py --model_dir=model_out --export_dir=export_bf16 --serving_precision=bfloat16
      # the encoder computes in bfloat16 from the same weights; logits and span
      # decoding stay float32
  python export.py --model_dir=model_out --export_dir=export_int8 --serving_precision=int8
      # the features model quantized to int8 for LiteRT (vocab + qa_config.json + .tflite, no
      # SavedModel, no serve_text); ask.py answers from it with Python tokenization

Signatures:
  serving_default = serve_text: tf.string [batch] `question`, `context` -> `answer` tf.string,
      `start_char`, `end_char` int32 (code points, end exclusive), `score` float32, `null_score`
      float32 (SQuAD 2.0's null answer score; +inf without a window). Tokenization
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
max_answer_length, version_2_with_negative, null_score_diff_threshold, window_batch_size) and the
`serving_precision` (float32, bfloat16 or int8), so a client of serve_features can tokenize and
decode as training did (see ask.py). Loading needs TensorFlow and `import tensorflow_text` (it
registers the tokenizer ops; not with --serve_text=false), not this project's code.
The export is written under a temporary name and renamed into place when complete.
"""

from squad_qa.base import cpu_runtime  # noqa: F401  (must precede tensorflow)
from squad_qa.base import console  # noqa: F401  (must precede tensorflow)

from squad_qa.flags import command_line
from squad_qa.flags import settings
from squad_qa.serving import export_config

settings.define_flags(export_config.ExportConfig)


def main(argv):
  """Exports what the flags name (`serving.export_model.export_model`)."""
  del argv
  config = command_line.config_from_flags(export_config.ExportConfig)
  # Imported after the flags parse, so --help and flag errors do not wait for TensorFlow.
  from squad_qa.serving import export_model  # pylint: disable=g-import-not-at-top
  export_model.export_model(config)


def cli():
  """Console-script entry point: parses the flags and runs main()."""
  command_line.run(main)


if __name__ == "__main__":
  cli()
