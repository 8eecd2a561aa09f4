"""Every absl flag of the project, grouped so each entry point defines only what it uses.

Names follow google-research/bert `run_squad.py` and tf-models-official (`max_seq_length`, `doc_stride`,
`vocab_file`, ...), so commands written for those tools read the same here. An entry point calls the
`define_*` functions it needs once, at import time, before `flags.command_line.run` (absl.app.run).

Defaults for the SQuAD files come from `$SQUAD_DIR` (default `data/squad`), see
`preprocess.squad_reader.default_squad_file`.
"""

import functools
import os

from absl import flags



def _once(define):
  """Wraps an absl DEFINE_* so that defining an already-defined flag is a no-op.

  Several entry points define the same group (train.py and export.py both define the model flags),
  and the tests import them into one process.
  """
  @functools.wraps(define)
  def define_once(name, *args, **kwargs):
    if name not in flags.FLAGS:
      define(name, *args, **kwargs)
  return define_once


DEFINE_string = _once(flags.DEFINE_string)
DEFINE_bool = _once(flags.DEFINE_bool)
DEFINE_integer = _once(flags.DEFINE_integer)
DEFINE_float = _once(flags.DEFINE_float)
DEFINE_multi_string = _once(flags.DEFINE_multi_string)

def define_squad_file_flags():
  """--train_file, --predict_file: the SQuAD JSON inputs (defaults under $SQUAD_DIR)."""
  DEFINE_string(
      "train_file", None,
      "SQuAD JSON for training. Default: $SQUAD_DIR/train-v1.1.json (or "
      "train-v1.1.reconstructed.json there).")
  DEFINE_string(
      "predict_file", None,
      "SQuAD JSON for evaluation (its gold answers score the predictions). Default: "
      "$SQUAD_DIR/dev-v1.1.json; for train.py, the file the eval records were made from "
      "(meta.json) while it exists.")
  define_squad_version_flag()


def define_squad_version_flag():
  """--version_2_with_negative (make_records.py, train.py, export.py)."""
  DEFINE_bool(
      "version_2_with_negative", False,
      "SQuAD 2.0: questions with \"is_impossible\": true have no answer; training targets [CLS] "
      "for them and prediction (and an export's serve_text) answers \"\" when the null score "
      "beats the best span by more than --null_score_diff_threshold (train.py and export.py also "
      "take it from the records / the model_dir's qa_config.json).")


def define_decoding_flags():
  """How answers are decoded from logits (train.py's prediction, export.py's serve_text, ask.py)."""
  define_squad_version_flag()
  define_span_limit_flags()
  DEFINE_float(
      "null_score_diff_threshold", 0.0,
      "SQuAD 2.0: predict \"\" when the null score (min over windows of start[0] + end[0]) minus "
      "the best non-null span score exceeds this (google-research/bert, tfm).")


def define_span_limit_flags():
  """--n_best_size, --max_answer_length: which spans decoding weighs (ask.py takes only these)."""
  DEFINE_integer("n_best_size", 20, "Start and end candidates considered per window.")
  DEFINE_integer("max_answer_length", 30, "Longest answer, in tokens.")


def define_tokenizer_flags():
  """--vocab_file, --do_lower_case: the WordPiece vocabulary and casing."""
  DEFINE_string(
      "vocab_file", None,
      "WordPiece vocab.txt of the encoder. Default: vocab.txt beside --init_checkpoint.")
  DEFINE_bool(
      "do_lower_case", True,
      "Lower-case and strip accents (true for uncased BERT vocabularies).")


def define_featurization_flags():
  """Flags of preprocess/make_records.py that shape the windowed features."""
  DEFINE_integer(
      "max_seq_length", 384,
      "Tokens per feature: [CLS] question [SEP] context-window [SEP], padded.")
  DEFINE_integer(
      "doc_stride", 128,
      "Step, in tokens, between the starts of consecutive context windows (as in bert/tfm).")
  DEFINE_integer(
      "max_query_length", 64, "Question tokens kept; longer questions are truncated.")
  DEFINE_string("output_dir", "records", "Where the TFRecord shards and meta.json go.")
  DEFINE_integer("num_shards", 8, "Shards per split (train and eval each).")
  DEFINE_integer(
      "num_workers", min(2, os.cpu_count() or 1),
      "Processes featurizing and writing shards (each takes a group of shards); 1 = in-process.")


def define_model_flags():
  """Where the encoder comes from and where training writes: shared by train.py and export.py."""
  DEFINE_string(
      "bert_config_file", None,
      "BERT JSON config (google-research bert_config.json or an HF config.json). "
      "Default: the one beside --init_checkpoint.")
  DEFINE_string(
      "init_checkpoint", None,
      "Pretrained encoder to start from: an HF BERT folder (config.json, model.safetensors, "
      "vocab.txt), a google-research/bert TF1 checkpoint (folder or prefix, e.g. "
      "uncased_L-12_H-768_A-12/bert_model.ckpt), a tf-models-official TF2 encoder checkpoint, or "
      "a --model_dir of this tool. Without it the encoder starts from random weights.")
  DEFINE_string("model_dir", "model_out", "Checkpoints, predictions and eval results.")


def define_train_flags():
  """Flags of train.py: data, budget, optimizer, prediction and device."""
  DEFINE_string("records_dir", "records", "Output of preprocess/make_records.py.")
  DEFINE_bool("do_train", True, "Fine-tune on the train shards.")
  DEFINE_bool("do_predict", True, "Predict the eval shards and score them.")
  define_train_batch_size(32)
  define_length_buckets()
  DEFINE_integer("predict_batch_size", 64, "Features per prediction step.")
  DEFINE_float("learning_rate", 5e-5, "Peak learning rate of AdamW.")
  if "num_train_epochs" not in flags.FLAGS:
    flags.DEFINE_float("num_train_epochs", 2.0, "Passes over the train features (above 0).")
    flags.register_validator("num_train_epochs", lambda value: value > 0,
                             message="--num_train_epochs must be above 0")
  DEFINE_integer(
      "max_steps", None, "Training steps; a budget that overrides --num_train_epochs.",
      lower_bound=1)
  DEFINE_float(
      "warmup_proportion", 0.1,
      "Share of the training steps with a linear learning-rate warmup from 0.")
  DEFINE_integer("save_checkpoints_steps", 1000, "Steps between checkpoints.")
  DEFINE_integer(
      "max_eval_examples", None,
      "Score only the first N questions of --predict_file (a budget for CPU runs).")
  DEFINE_bool(
      "gpu", False,
      "Train on the GPU under the mixed_float16 policy with dynamic loss scaling. "
      "Fails if TensorFlow sees no GPU.")
  _DEFINE_enum(
      "mixed_precision_dtype", "auto", ["auto", "float32", "float16", "bfloat16"],
      "Compute dtype of training (tfm's runtime.mixed_precision_dtype); weights stay float32, and "
      "prediction runs in float32, as export.py serves by default. float16: mixed_float16 with "
      "dynamic loss scaling. bfloat16: mixed_bfloat16, no loss scaling; fast on GPUs from Ampere "
      "on and on CPUs with AVX512-BF16 or AMX. auto: float16 with --gpu; on the CPU bfloat16 "
      "where it has AVX512-BF16 or AMX, else float32 (the log says which and why).")
  DEFINE_integer("seed", 42, "Seed of weight init, dropout and shuffling.")
  define_decoding_flags()


def define_distribution_flags():
  """train.py's tf.distribute flags, named as tf-models-official names them (tasks/distribution.py)."""
  DEFINE_string(
      "distribution_strategy", None,
      "one_device, mirrored (the GPUs of this host), multi_worker_mirrored (hosts listed in "
      "$TF_CONFIG) or tpu. Default: mirrored when more than one GPU is visible, else one_device.")
  DEFINE_integer("num_gpus", None, "GPUs to use (default: every visible GPU).")
  DEFINE_string(
      "all_reduce_alg", None,
      "All-reduce of the gradients: nccl or hierarchical_copy (mirrored), ring or nccl "
      "(multi_worker_mirrored); default: TensorFlow's choice.")
  DEFINE_string("tpu", None, "The TPU's gRPC address or Cloud TPU name (--distribution_strategy=tpu).")
  DEFINE_integer(
      "num_cpu_devices", 1,
      "Without GPUs: split the CPU into this many logical devices; mirrored then runs one replica "
      "on each (for tests and trying a multi-device configuration).")
  DEFINE_integer(
      "steps_per_loop", 100,
      "The most training steps in one compiled loop (tfm's trainer.steps_per_loop): progress, "
      "summaries and the SIGTERM check happen between loops, which also end at checkpoint steps "
      "and where a progress line is due.")
  DEFINE_integer(
      "eval_every_steps", 0,
      "Score the first --max_eval_examples dev questions (official EM/F1) every this many steps "
      "while training: a learning curve in --model_dir/learning_curve.csv and TensorBoard's "
      "eval/; 0: off.")
  DEFINE_integer(
      "log_steps", 0,
      "A training progress line (step, epoch, loss, learning rate, examples/s, ETA) every this "
      "many steps; 0: about every 30 seconds (on several workers: every --steps_per_loop steps).")


def define_export_flags():
  """Flags of export.py."""
  DEFINE_string("export_dir", "export", "Where the SavedModel is written.")
  define_decoding_flags()  # baked into the raw-text signature (serve_text)
  DEFINE_integer(
      "doc_stride", None,
      "serve_text's step, in tokens, between the starts of consecutive context windows. Default: "
      "the doc_stride the model was trained with (its qa_config.json; 128 for an "
      "--init_checkpoint). A longer step gives long contexts fewer windows: 256 at "
      "max_seq_length 384 is about the step of HF's question-answering pipeline "
      "(docs/serving.md has its measured effect on dev F1).")
  DEFINE_integer(
      "window_batch_size", 32,
      "Windows per model call inside serve_text (bounds memory for long contexts and big batches).")
  DEFINE_bool(
      "serve_text", True,
      "Include the raw-text signature serve_text (= serving_default), which needs the "
      "tensorflow-text ops wherever the SavedModel is loaded. false: serve_features (= "
      "serving_default) and serve_examples only, loadable with core TensorFlow alone.")
  _DEFINE_enum(
      "serving_precision", "float32", ["float32", "bfloat16", "float16", "int8"],
      "What the exported encoder computes in, from the same float32 weights. float32: the model as "
      "trained and scored. bfloat16: the encoder's matmuls in bfloat16 (layer norms, the span "
      "head, the logits and span decoding stay float32): about 2x faster matmuls on CPUs with "
      "AVX512-BF16 or AMX and on GPUs, slower elsewhere; answers may differ slightly from "
      "float32's. float16: the same under mixed_float16, fast on GPUs, slow on CPUs. int8: the "
      "encoder's matmul weights quantized to int8 (dynamic range) and run by LiteRT (needs pip "
      "install \"squad-qa[int8]\" where it is served); no SavedModel and no serve_text: ask.py and "
      "SavedModelQA tokenize and decode in Python.")


def define_ask_flags():
  """Flags of ask.py (questions about one passage, against an exported SavedModel)."""
  DEFINE_string("export_dir", "export", "The folder export.py wrote.")
  define_span_limit_flags()
  DEFINE_multi_string("question", None, "A question; give the flag again for more questions about "
                      "the same passage.")
  DEFINE_string("context", None, "The passage holding the answer.")
  DEFINE_string("context_file", None, "Read the passage from this UTF-8 file instead.")
  DEFINE_bool(
      "use_serve_features", False,
      "Tokenize and window in Python and call the serve_features signature instead of the raw-text "
      "serving_default (automatic for SavedModels without serve_text).")


def define_convert_flags():
  """Flags of `python -m model.convert_checkpoint` (besides the model and tokenizer flags)."""
  DEFINE_string(
      "output", None,
      "Folder for the converted TF2 checkpoint, with the config and vocab copied beside it; "
      "must not exist yet.")


_DEFINE_enum = _once(flags.DEFINE_enum)


def define_memory_flags():
  """Flags of `python -m model.memory` (the memory planner)."""
  DEFINE_string(
      "bert_config_file", None,
      "BERT JSON config (google-research bert_config.json or an HF config.json). "
      "Without it: google-research's BERT-Base and BERT-Large (uncased).")
  DEFINE_integer(
      "max_seq_length", None,
      "Tokens per feature. Without it: the largest batch for seq 64, 128, 256, 320, 384, 512.")
  define_train_batch_size(None)
  _DEFINE_enum(
      "dtype", "float32", ["float32", "mixed_float16", "mixed_bfloat16"],
      "Keras dtype policy of training (train.py --gpu trains under mixed_float16).")
  DEFINE_float(
      "device_memory_gb", None,
      "GPU memory in GiB (2^30 bytes; e.g. 12 for a 12 GB card). Default: the visible GPU's, "
      "else the host's available RAM.")
  _DEFINE_enum("format", "text", ["text", "json"], "Output format.")
  _DEFINE_enum(
      "program", "tfm", ["tfm", "google_research_tf1"],
      "Whose training step to count: tfm (this tool's train.py) or google_research_tf1 "
      "(google-research/bert's TF1 run_squad.py, to compare with its published OOM table).")


class _BatchSizeParser(flags.ArgumentParser):
  """Parses a positive integer or "auto" (absl flag parser)."""
  syntactic_help = "a positive integer or 'auto'"

  def parse(self, argument):
    if isinstance(argument, int) or argument in (None, "auto"):
      value = argument
    else:
      text = str(argument).strip().lower()
      value = text if text == "auto" else int(text) if text.lstrip("-").isdigit() else None
      if value is None:
        raise ValueError(f"expected a positive integer or 'auto', got {argument!r}")
    if isinstance(value, int) and value < 1:
      raise ValueError(f"expected a positive integer or 'auto', got {argument!r}")
    return value

  def flag_type(self):
    return "int or 'auto'"


def define_train_batch_size(default):
  """--train_batch_size: features per forward/backward pass, or "auto" (the memory planner)."""
  if "train_batch_size" not in flags.FLAGS:
    flags.DEFINE(
        _BatchSizeParser(), "train_batch_size", default,
        "Global features per forward/backward pass, over all replicas (each replica takes "
        "train_batch_size / replicas), or 'auto': the largest per-replica batch that "
        "model/memory/plan.py says fits one device (90 % of its usable memory), with gradient "
        "accumulation keeping --effective_batch_size.", serializer=flags.ArgumentSerializer())


class _LengthBucketsParser(flags.ArgumentParser):
  """Parses --length_buckets: "auto" (also a bare --length_buckets), "false" (--nolength_buckets)
  or comma-separated increasing token counts; gives "auto", None or a tuple of ints."""
  syntactic_help = "'auto', or increasing token counts separated by commas, e.g. 64,128,256"

  def parse(self, argument):
    if argument is None or isinstance(argument, tuple):
      return argument
    text = str(argument).strip().lower()
    if text in ("auto", "true"):
      return "auto"
    if text in ("false", "none", ""):
      return None
    try:
      values = tuple(int(v) for v in text.split(","))
    except ValueError:
      raise ValueError(f"expected 'auto' or token counts like 64,128,256, got {argument!r}") from None
    if any(v < 1 for v in values) or any(a >= b for a, b in zip(values, values[1:])):
      raise ValueError(f"expected increasing positive token counts, got {argument!r}")
    return values

  def flag_type(self):
    return "'auto' or int list"


class _LengthBucketsFlag(flags.Flag):
  """A flag with a value that also has the --noname form (absl offers that to booleans only)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, boolean=True, **kwargs)

  def _serialize(self, value):
    if value is None:
      return f"--no{self.name}"
    text = value if isinstance(value, str) else ",".join(str(v) for v in value)
    return f"--{self.name}={text}"


def define_length_buckets():
  """--length_buckets / --nolength_buckets: bucket training windows by real length.

  A flag with a value that also takes absl's boolean --noname form, so --nolength_buckets works
  while --length_buckets=64,128,256 names the boundaries.
  """
  if "length_buckets" not in flags.FLAGS:
    flags.DEFINE_flag(_LengthBucketsFlag(
        _LengthBucketsParser(), None, "length_buckets", "auto",
        "Train on batches of windows of similar real length (sum of input_mask; each epoch's "
        "windows sorted by length in pools of 100 batches), each padded only to the first of "
        "these lengths that holds its longest window: increasing token counts (max_seq_length is "
        "added as the last), or 'auto': every multiple of 8 below max_seq_length (of 64 under "
        "--xla, which compiles once per length), then max_seq_length. A step's global batch (all "
        "replicas and accumulation micro-batches) has one length. 'auto' is off under "
        "--distribution_strategy=tpu (TPUs compile static shapes). "
        "--nolength_buckets pads every batch to max_seq_length."))


def define_memory_use_flags():
  """train.py's batching and memory flags: accumulation, the pre-flight check, XLA."""
  DEFINE_integer(
      "gradient_accumulation_steps", 1,
      "Forward/backward passes per optimizer step; their gradients are averaged, so the update "
      "equals one batch of train_batch_size x gradient_accumulation_steps.")
  DEFINE_integer(
      "effective_batch_size", None,
      "Global features per optimizer step. With --train_batch_size=auto (default 32 then) the tool "
      "picks the micro-batch and the accumulation steps; with a number, the accumulation "
      "steps are effective_batch_size / train_batch_size.")
  DEFINE_bool(
      "memory_check", True,
      "Before training, stop with a diagnosis if model/memory/estimate.py estimates that the "
      "batch does not fit the device. --nomemory_check trains anyway.")
  DEFINE_float(
      "device_memory_gb", None,
      "Memory of the training device in GiB, instead of detecting it (a GPU: its capacity, "
      "e.g. 16 for a 16 GB card; the CPU: RAM to use).")
  DEFINE_bool(
      "xla", None,
      "Compile the training step with XLA (tf.function jit_compile). Default: on with --gpu, "
      "and under bfloat16 on a CPU without AVX512-BF16 or AMX (TensorFlow's own einsum sums in "
      "bfloat16 there); off otherwise on the CPU.")
  DEFINE_bool(
      "float32_weight_gradients", True,
      "Under float16 compute (--gpu's default), sum each weight's gradient over the batch in "
      "float32 from the float16 operands, so that --gradient_accumulation_steps gives the update "
      "of one big batch to float32 rounding. Costs float32 matmuls for the weight gradients (about "
      "a third of the step's FLOPs; not measured on a GPU). --nofloat32_weight_gradients keeps "
      "them float16. bfloat16 and float32 compute are not changed by it.")
