"""export.py's settings as one frozen config, without TensorFlow (its flags parse first)."""

import dataclasses
from typing import Optional

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.model import model_files
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features
from squad_qa.preprocess import squad_reader

# --serving_precision -> the tf_keras policy the encoder is built under; int8 quantizes the float32
# model for LiteRT.
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

  A config read from flags lists the flags typed in `typed_flags`; built in Python (None), a field
  counts as given when it differs from its default.

  Attributes:
    export_dir: destination folder (replaced only once the new export is complete).
    model_dir: the run whose latest checkpoint is exported; not given with `init_checkpoint`: that
      checkpoint is exported.
    init_checkpoint: a checkpoint `model.checkpoints.initialize_from` reads, exported when
      `model_dir` holds none.
    bert_config_file, vocab_file: the encoder's config and vocab (default: beside the checkpoint);
      `vocab_file` also replaces a --model_dir's recorded vocab.
    do_lower_case: the casing of an `init_checkpoint` that records none.
    doc_stride: serve_text's window step in tokens; not given: the trained one.
    max_seq_length, max_query_length: the windows of an `init_checkpoint` without a qa_config.json
      (None: make_records.py's defaults); refused for a model that records its own.
    n_best_size, max_answer_length, window_batch_size: decoding settings baked into serve_text.
    version_2_with_negative: SQuAD 2.0 null answers; None: as the run's qa_config.json says
      (refused when it says the run trained on SQuAD 1.1 records; False serves a SQuAD 2.0 run
      always answering with a span).
    null_score_diff_threshold: SQuAD 2.0 threshold (logits); None: the run's, else 0.0.
    serve_text: include the raw-text signature (needs the tensorflow-text ops wherever it loads).
    serving_precision: what the encoder computes in, a key of SERVING_POLICIES.
    typed_flags: names of the fields whose flags were typed, or None.

  Raises:
    errors.UsageError: --serve_text or --window_batch_size given with --serving_precision=int8 (no
      serve_text to hold them).
  """
  model_dir: str = settings.variant(
      model_files.ModelFiles, "model_dir",
      help="The training run to export: its latest checkpoint and the settings its "
      "qa_config.json records.")
  export_dir: str = settings.setting("export", "Where the SavedModel is written.")
  doc_stride: Optional[int] = settings.variant(
      features.Featurization, "doc_stride", default=None,
      help="serve_text's step, in tokens, between the starts of consecutive context windows. "
      "Default: the doc_stride the model was trained with (its qa_config.json; "
      f"{features.Featurization.doc_stride} for an --init_checkpoint). A longer step gives "
      "long contexts fewer windows: 256 at max_seq_length "
      f"{features.Featurization.max_seq_length} is about the step of HF's "
      "question-answering pipeline; on the dev questions with contexts of 1,500+ characters it "
      "scored F1 59.3 against 58.6 at 128.")
  max_seq_length: Optional[int] = settings.variant(
      features.Featurization, "max_seq_length", default=None,
      help="Tokens per serving window, for an --init_checkpoint this tool did not train (a "
      "run_squad.py or Hugging Face model; default "
      f"{features.Featurization.max_seq_length}); a model trained here serves its records' length.",
      check=settings.at_least(1))
  max_query_length: Optional[int] = settings.variant(
      features.Featurization, "max_query_length", default=None,
      help="Question tokens kept, for an --init_checkpoint this tool did not train (default "
      f"{features.Featurization.max_query_length}); a model trained here serves its records'.",
      check=settings.at_least(1))
  version_2_with_negative: Optional[bool] = settings.variant(
      squad_reader.SquadVersion, "version_2_with_negative", default=None,
      help="SQuAD 2.0: serve_text (and ask.py) answer \"no answer\" when the null score beats "
      "the best span by more than --null_score_diff_threshold. Unset: as the model was trained "
      "(its qa_config.json; false for an --init_checkpoint); false serves a SQuAD 2.0 model "
      "always answering with a span; refused for a model trained on SQuAD 1.1 records.")
  null_score_diff_threshold: Optional[float] = settings.variant(
      span_decoding.DecodingSettings, "null_score_diff_threshold", default=None,
      help="SQuAD 2.0: the null answer's margin, in logits. Unset: the training run's (its "
      "qa_config.json), else 0.0; train.py's best_f1_thresh is a value to try.")
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

  def check(self):
    super().check()
    if self.serving_precision == "int8" and self.serve_text and self.given("serve_text"):
      raise errors.UsageError(
          "--serve_text with --serving_precision=int8: an int8 export has no serve_text (LiteRT "
          "has no tensorflow-text ops; ask.py and SavedModelQA tokenize and decode in Python); "
          "drop --serve_text, or export float32 or bfloat16 for it")
    if self.serving_precision == "int8" and self.given("window_batch_size"):
      raise errors.UsageError(
          f"--window_batch_size={self.window_batch_size} with --serving_precision=int8: it sets "
          f"serve_text's windows per model call, and an int8 export runs each window alone; drop "
          f"it")
