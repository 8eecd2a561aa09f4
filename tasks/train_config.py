"""train.py's settings as one frozen config."""

import dataclasses
from typing import Optional, Tuple, Union

from squad_qa import errors
from squad_qa.flags import settings
from squad_qa.model import model_files
from squad_qa.model import precision as precision_lib
from squad_qa.model.memory import plan
from squad_qa.postprocess import span_decoding
from squad_qa.preprocess import features
from squad_qa.preprocess import squad_reader


def _length_buckets(name, value):
  if isinstance(value, tuple) and not settings.increasing_token_counts(value):
    raise errors.UsageError(f"--{name}={value}: expected increasing positive token counts")


# Settings of training alone: typed with --do_train=false, they are refused, not ignored.
TRAINING_ONLY = ("train_batch_size", "effective_batch_size", "gradient_accumulation_steps",
                 "length_buckets", "learning_rate", "num_train_epochs", "max_steps",
                 "warmup_proportion", "save_checkpoints_steps", "steps_per_loop",
                 "float32_weight_gradients", "xla", "seed", "memory_check", "device_memory_gb")
# Settings of scoring alone (the final prediction and --eval_every_steps' scorings).
PREDICTION_ONLY = ("predict_file", "predict_batch_size", "max_eval_examples")


def _seed_range(name, value):
  """Refuses a --seed above TensorFlow's (tf.random.set_seed's) range, 2^32 - 1."""
  if value > 2**32 - 1:
    raise errors.UsageError(f"--{name}={value}: must be at most 4294967295 (2^32 - 1)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig(model_files.ModelFiles, features.Tokenization, squad_reader.SquadFiles,
                  span_decoding.DecodingSettings, settings.GivenFields):
  """Everything train.py does: each field is its flag (help, default and rule declared here or in
  the groups it inherits). Token counts are in WordPiece tokens; `device_memory_gb` in GiB.

  `train_file` and `do_lower_case` are make_records.py's (run_squad.py takes them too): training
  reads the questions and the casing from the records, so `train_file` is refused and a
  `do_lower_case` other than the records' too (`run_inputs.bert_config_and_meta`).

  Not flags: `typed_flags`, the flags typed (`settings.GivenFields`; None: built in Python), and
  `planned_train_steps`, the steps a `train_budget` planned, which train.py records here in
  train_config.json.

  Raises (on construction):
    errors.UsageError: a value no run can use (a non-positive epoch count or batch, an unknown
      precision, length buckets that are not increasing positive token counts, decoding settings
      `span_decoding.check_decoding_settings` refuses), or settings that exclude each other.
  """
  records_dir: str = settings.setting("records", "Output of preprocess/make_records.py.")
  do_train: bool = settings.setting(True, "Fine-tune on the train shards.")
  do_predict: bool = settings.variant(plan.PlannerConfig, "do_predict")
  train_batch_size: Union[int, str] = settings.variant(plan.PlannerConfig, "train_batch_size",
                                                       default=32)
  effective_batch_size: Optional[int] = settings.variant(plan.PlannerConfig, "effective_batch_size")
  gradient_accumulation_steps: int = settings.variant(plan.PlannerConfig,
                                                      "gradient_accumulation_steps")
  length_buckets: Union[None, str, Tuple[int, ...]] = settings.setting(
      "auto", "Train on batches of windows of similar real length (sum of input_mask; each epoch's "
      "windows sorted by length in pools of 100 batches), each padded only to the first of "
      "these lengths that holds its longest window: increasing token counts (max_seq_length is "
      "added as the last), or 'auto': every multiple of 8 below max_seq_length (of 64 under "
      "--xla, which compiles once per length), then max_seq_length. A step's global batch (all "
      "replicas and accumulation micro-batches) has one length. 'auto' is off under "
      "--distribution_strategy=tpu (TPUs compile static shapes). "
      "--nolength_buckets pads every batch to max_seq_length.", parser=settings.TokenCountsParser(),
      flag_class=settings.OptionalValueFlag, check=_length_buckets)
  predict_batch_size: int = settings.setting(64, "Features per prediction step.", lower_bound=1)
  learning_rate: float = settings.setting(5e-5, "Peak learning rate of AdamW.", above=0)
  num_train_epochs: float = settings.setting(
      2.0, "Passes over the train features (above 0); 2 is google-research/bert's SQuAD 1.1 "
      "recipe (run_squad.py's and run_qa.py's flags default to 3).", above=0)
  max_steps: Optional[int] = settings.setting(
      None, "Training steps; a budget that overrides --num_train_epochs.", lower_bound=1)
  train_budget: Optional[int] = settings.setting(
      None, "Wall time for training and the scoring it does, e.g. 90s, 20m, 1h or 1h30m: after "
      "tracing, the step is timed on real batches and the dev scoring on a few eval batches, and "
      "the number of steps (the schedule's end) is set to fit the --eval_every_steps scorings and "
      "the final prediction (--do_predict) in it, from the command's start; the run's own step "
      "time plans it again a quarter of the way in and every eighth after, when it would end "
      "early or late. A resume keeps the plan in the checkpoint. Excludes --max_steps "
      "and --num_train_epochs.", parser=settings.DurationParser(),
      check=settings.at_least(1, f"a duration above 0 like {settings.DURATION_FORMS}"))
  warmup_proportion: float = settings.setting(
      0.1, "Share of the training steps with a linear learning-rate warmup from 0.",
      check=settings.within(0, 1))
  save_checkpoints_steps: int = settings.setting(1000, "Steps between checkpoints.",
                                                 check=settings.at_least(1))
  max_eval_examples: Optional[int] = settings.setting(
      None, "Score only the first N questions of --predict_file (a budget for CPU runs).",
      lower_bound=1)
  gpu: bool = settings.variant(plan.PlannerConfig, "gpu")
  mixed_precision_dtype: str = settings.variant(plan.PlannerConfig, "mixed_precision_dtype")
  xla: Optional[bool] = settings.setting(
      None, "Compile the training step with XLA (tf.function jit_compile). Default: on with --gpu, "
      "and under bfloat16 on a CPU without AVX512-BF16 or AMX (TensorFlow's own einsum sums in "
      "bfloat16 there); off otherwise on the CPU.")
  float32_weight_gradients: bool = settings.setting(
      True, "Under float16 compute (--gpu's default), sum each weight's gradient over the batch in "
      "float32 from the float16 operands, so that --gradient_accumulation_steps gives the update "
      "of one big batch to float32 rounding. Costs float32 matmuls for the weight gradients (about "
      "a third of the step's FLOPs; not measured on a GPU). --nofloat32_weight_gradients keeps "
      "them float16. Under bfloat16 or float32 compute it changes nothing and is refused.")
  memory_check: bool = settings.setting(
      True, "Before training, stop with a diagnosis if the memory planner (python -m "
      "model.memory) estimates that the batch does not fit the device. --nomemory_check trains "
      "anyway.")
  device_memory_gb: Optional[float] = settings.variant(
      plan.PlannerConfig, "device_memory_gb",
      help="Memory of the training device in GiB, instead of detecting it (a GPU: its capacity, "
      "e.g. 16 for a 16 GB card; the CPU: RAM to use).")
  seed: int = settings.setting(
      42, "Seed of weight init, dropout and shuffling (0 to 2^32 - 1, "
      "TensorFlow's range).", lower_bound=0, check=_seed_range)
  distribution_strategy: Optional[str] = settings.setting(
      None, "one_device, mirrored (the GPUs of this host), multi_worker_mirrored (hosts listed in "
      "$TF_CONFIG) or tpu. Default: mirrored when more than one GPU is visible, else one_device.")
  num_gpus: Optional[int] = settings.setting(None, "GPUs to use (default: every visible GPU).")
  all_reduce_alg: Optional[str] = settings.setting(
      None, "All-reduce of the gradients: nccl or hierarchical_copy (mirrored), ring or nccl "
      "(multi_worker_mirrored); default: TensorFlow's choice.")
  tpu: Optional[str] = settings.setting(
      None, "The TPU's gRPC address or Cloud TPU name (--distribution_strategy=tpu).")
  num_cpu_devices: int = settings.variant(plan.PlannerConfig, "num_cpu_devices")
  steps_per_loop: int = settings.setting(
      100, "The most training steps in one compiled loop (tfm's trainer.steps_per_loop): progress, "
      "summaries and the SIGTERM check happen between loops, which also end at checkpoint steps, "
      "where a progress line is due and (on one host) after about 5 s of steps.",
      check=settings.at_least(1))
  log_steps: int = settings.setting(
      0, "A training progress line (step, epoch, loss, learning rate, examples/s, ETA) every this "
      "many steps; 0: about every 30 seconds (on several workers: every --steps_per_loop steps).",
      check=settings.at_least(0, "0 (about every 30 s) or more"))
  eval_every_steps: int = settings.setting(
      0, "Score the first --max_eval_examples dev questions (official EM/F1) every this many steps "
      "while training: a learning curve in --model_dir/learning_curve.csv and TensorBoard's "
      "eval/; 0: off.", check=settings.at_least(0, "0 (off) or more"))
  typed_flags: Optional[tuple] = None
  planned_train_steps: Optional[int] = None

  def check(self):
    if self.train_file is not None:
      raise errors.UsageError(
          f"--train_file={self.train_file} applies to making the records: training reads the "
          f"train records in --records_dir; drop it")
    if not self.do_train and not self.do_predict:
      raise errors.UsageError("--do_train=false and --do_predict=false leave nothing to do: drop "
                              "one of the two")
    if not self.do_train:  # these shape training only: refuse rather than ignore them
      refused = [n for n in ("eval_every_steps", "log_steps", "train_budget") if getattr(self, n)]
      refused += [n for n in TRAINING_ONLY if self.given(n)]
      if refused:
        raise errors.UsageError(f"{self.typed(refused[0])} applies to training; --do_train=false "
                                f"only predicts: drop one of the two")
    if self.do_train:  # as typed: the replicas split them later (run_plan.plan_memory)
      try:
        plan.accumulation_steps_for(self.train_batch_size, self.gradient_accumulation_steps,
                                    self.effective_batch_size)
      except plan.MemoryPlanError as e:
        raise errors.UsageError(str(e)) from None
    if not self.do_predict and not self.eval_every_steps:  # nothing scores: refuse these too
      for name in PREDICTION_ONLY:
        if self.given(name):
          raise errors.UsageError(f"--{name}={self.flag_text(name)} applies to scoring; "
                                  f"--do_predict=false without --eval_every_steps scores nothing: "
                                  f"drop one of the two")
    if (self.do_train and self.eval_every_steps and self.max_steps and
        self.eval_every_steps > self.max_steps and not self.do_predict):
      raise errors.UsageError(
          f"--eval_every_steps={self.eval_every_steps} is past --max_steps={self.max_steps}, and "
          f"--do_predict=false: no point would be scored; use at most {self.max_steps}, or drop "
          f"--do_predict=false (the final score is the curve's last point)")
    if self.do_train and self.given("float32_weight_gradients") and self.precision != "float16":
      raise errors.UsageError(
          f"{self.typed('float32_weight_gradients')} applies to float16 compute; this run "
          f"computes in {self.precision} ({self.precision_and_reason[1]}): drop it")
    if self.train_budget:
      for name in ("max_steps", "num_train_epochs"):
        if self.given(name) and getattr(self, name) is not None:
          raise errors.UsageError(
              f"--train_budget={self.flag_text('train_budget')} and --{name}="
              f"{self.flag_text(name)} both set the length of training: drop one of the two")

  def typed(self, name):
    """Setting `name` as a flag on the command line: --noname (False or None), --name (True), or
    --name=value."""
    value = getattr(self, name)
    if value is None or value is False:
      return f"--no{name}"
    return f"--{name}" if value is True else f"--{name}={self.flag_text(name)}"

  def flag_text(self, name):
    """Setting `name`'s value as typed on the command line (a budget as 20m, 1h30m, ...)."""
    value = getattr(self, name)
    return settings.format_duration(value) if name == "train_budget" else str(value)

  @property
  def use_xla(self):
    """Whether the training step is compiled with XLA: `xla`, or by default with `gpu` and under
    bfloat16 on a CPU without bfloat16 matmuls (`precision.bfloat16_needs_xla`)."""
    return self.xla_and_reason[0]

  @property
  def xla_and_reason(self):
    """(`use_xla`, why in a few words, e.g. "default with --gpu")."""
    if self.xla is not None:
      return self.xla, "--xla" if self.xla else "--noxla"
    if self.gpu:
      return True, "default with --gpu"
    if self.precision == "bfloat16" and precision_lib.bfloat16_needs_xla():
      return True, "default for bfloat16 on a CPU without bfloat16 matmuls"
    return False, "default on the CPU"

  @property
  def precision(self):
    """The training compute dtype: `mixed_precision_dtype`, or for "auto": float16 with `gpu`,
    bfloat16 on a CPU with bfloat16 matmuls (AVX512-BF16 or AMX), else float32."""
    return self.precision_and_reason[0]

  @property
  def precision_and_reason(self):
    """(`precision`, why in a few words, e.g. "auto: this CPU has bfloat16 matmuls")."""
    return precision_lib.compute_dtype(self.mixed_precision_dtype, self.gpu)
