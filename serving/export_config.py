"""export.py's settings as one frozen config, without TensorFlow (its flags parse first)."""

import dataclasses
from typing import Optional

from squad_qa.flags import settings
from squad_qa.model import model_files
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features

# --serving_precision -> the tf_keras policy the encoder is built under (model.span_model): bfloat16
# and float16 compute the encoder's matmuls in that dtype from the same float32 weights; the span
# head, the logits and span decoding stay float32. int8 builds the float32 model and quantizes it
# for LiteRT (serving.features_model.write_int8_model).
SERVING_POLICIES = {
    "float32": "float32",
    "bfloat16": "mixed_bfloat16",
    "float16": "mixed_float16",
    "int8": "float32"
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExportConfig(model_files.ModelFiles, features.Tokenization, span_decoding.DecodingSettings,
                   settings.GivenFields):
  """What export.py exports and how: each field is its flag.

  Three rules tell a value the user gave from a default: the --model_dir not given yields to an
  --init_checkpoint, training's doc_stride and SQuAD 2.0 threshold hold unless overridden. A
  config read from flags lists the flags typed on the command line in `typed_flags`; a config
  built in Python leaves it None, and then a field counts as given when it differs from its
  default.

  Attributes:
    export_dir: destination folder of the SavedModel (replaced only once the new one is complete).
    model_dir: the training run whose latest checkpoint is exported. Not given with
      `init_checkpoint`: that checkpoint is exported, whatever this folder holds.
    init_checkpoint: a checkpoint of any kind `model.checkpoints.initialize_from` reads, exported
      when `model_dir` holds no checkpoint (refused when it holds one that started elsewhere).
    bert_config_file, vocab_file: the encoder's config and WordPiece vocab for `init_checkpoint`
      (default: beside it); `vocab_file` also replaces a --model_dir's recorded vocab.
    do_lower_case: the casing of an `init_checkpoint` that records none.
    doc_stride: serve_text's window step in tokens (> 0); not given: the trained one.
    n_best_size, max_answer_length, window_batch_size: decoding settings baked into serve_text
      (`serving.module.DECODING_DEFAULTS`).
    version_2_with_negative: SQuAD 2.0 null answers (also on when the run's qa_config.json says so).
    null_score_diff_threshold: SQuAD 2.0 null-answer threshold (logit units); not given: the run's
      qa_config.json value, else 0.0.
    serve_text: include the raw-text signature (needs the tensorflow-text ops wherever it loads).
    serving_precision: what the encoder computes in, a key of SERVING_POLICIES ("float32";
      "bfloat16": about 2x faster matmuls where the CPU has AVX512-BF16 or AMX, answers within
      bfloat16 rounding of float32's; docs/serving.md "Reduced precision"; "float16": fast on
      GPUs, slow on CPUs; "int8": int8 matmul weights run by LiteRT, no SavedModel and no
      serve_text, answered through Python tokenization).
    typed_flags: names of the fields whose flags were typed (`flags.command_line.config_from_flags`
      fills it), or None for a config built in Python.
  """
  export_dir: str = settings.setting("export", "Where the SavedModel is written.")
  doc_stride: Optional[int] = settings.variant(
      features.Featurization, "doc_stride", default=None,
      help="serve_text's step, in tokens, between the starts of consecutive context windows. "
      "Default: the doc_stride the model was trained with (its qa_config.json; "
      f"{features.Featurization.doc_stride} for an --init_checkpoint). A longer step gives "
      "long contexts fewer windows: 256 at max_seq_length "
      f"{features.Featurization.max_seq_length} is about the step of HF's "
      "question-answering pipeline (docs/serving.md has its measured effect on dev F1).")
  window_batch_size: int = settings.setting(
      32, "Windows per model call inside serve_text (bounds memory for long contexts and big "
      "batches).", check=settings.at_least(1))
  serve_text: bool = settings.setting(
      True, "Include the raw-text signature serve_text (= serving_default), which needs the "
      "tensorflow-text ops wherever the SavedModel is loaded. false: serve_features (= "
      "serving_default) and serve_examples only, loadable with core TensorFlow alone.")
  serving_precision: str = settings.setting(
      "float32",
      "What the exported encoder computes in, from the same float32 weights. float32: the model "
      "as trained and scored. bfloat16: the encoder's matmuls in bfloat16 (layer norms, the span "
      "head, the logits and span decoding stay float32): about 2x faster matmuls on CPUs with "
      "AVX512-BF16 or AMX and on GPUs, slower elsewhere; answers may differ slightly from "
      "float32's. float16: the same under mixed_float16, fast on GPUs, slow on CPUs. int8: the "
      "encoder's matmul weights quantized to int8 (dynamic range) and run by LiteRT (needs pip "
      "install \"squad-qa[int8]\" where it is served); no SavedModel and no serve_text: ask.py "
      "and SavedModelQA tokenize and decode in Python.", choices=SERVING_POLICIES)
  typed_flags: Optional[tuple] = None
