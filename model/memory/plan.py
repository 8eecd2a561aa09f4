"""Batch planning: the largest batch that fits, the batch train.py runs (--train_batch_size=auto
included), and what `python -m model.memory` prints (checked against google-research/bert's
table: docs/memory.md "Checked against measurements")."""

import dataclasses
import json
import os
from typing import Optional, Union

from squad_qa import errors
from squad_qa.base import commands
from squad_qa.base.wording import counted
from squad_qa.flags import settings
from squad_qa.model import precision
from squad_qa.model.memory import device as memory_device
from squad_qa.model.memory import diagnose
from squad_qa.model.memory import estimate
from squad_qa.model.memory import heads
from squad_qa.preprocess import features

TABLE_SEQ_LENGTHS = (64, 128, 256, 320, 384, 512)  # google-research/bert's out-of-memory table
DEFAULT_EFFECTIVE_BATCH_SIZE = 32  # --train_batch_size=auto without --effective_batch_size


class MemoryPlanError(errors.UserError, ValueError):
  """A batch configuration that cannot work; the message is the user-facing diagnosis."""


@dataclasses.dataclass(frozen=True)
class BatchPlan:
  """How train.py batches: `micro_batch_size` features per forward/backward pass,
  `accumulation_steps` passes per optimizer step, `effective_batch_size` = their product."""
  micro_batch_size: int
  accumulation_steps: int
  effective_batch_size: int
  estimate: estimate.Estimate


def accumulation_steps_for(train_batch_size, gradient_accumulation_steps=1,
                           effective_batch_size=None):
  """The accumulation steps train.py's batch flags ask for: an int for an int `train_batch_size`
  (`effective_batch_size` / it when given), None for "auto" (the planner chooses).

  Raises:
    MemoryPlanError: flags that contradict each other, or a count below 1.
  """
  if gradient_accumulation_steps < 1:
    raise MemoryPlanError("--gradient_accumulation_steps must be >= 1")
  if effective_batch_size is not None and effective_batch_size < 1:
    raise MemoryPlanError("--effective_batch_size must be >= 1")
  if train_batch_size == "auto":
    if gradient_accumulation_steps != 1:
      raise MemoryPlanError("--train_batch_size=auto chooses the accumulation steps itself; give "
                            "the batch per optimizer step as --effective_batch_size instead of "
                            "--gradient_accumulation_steps")
    return None
  if effective_batch_size is None:
    return gradient_accumulation_steps
  steps, remainder = divmod(effective_batch_size, train_batch_size)
  if (remainder or not steps) and gradient_accumulation_steps == 1:
    raise MemoryPlanError(
        f"--effective_batch_size={effective_batch_size} is not a multiple of --train_batch_size="
        f"{train_batch_size} (a step accumulates whole batches): use --effective_batch_size="
        f"{nearest_multiples(effective_batch_size, train_batch_size)}, a --train_batch_size that "
        f"divides {effective_batch_size}, or --train_batch_size=auto")
  if remainder or not steps or (gradient_accumulation_steps != 1 and
                                steps != gradient_accumulation_steps):
    raise MemoryPlanError(
        f"--effective_batch_size={effective_batch_size} is not --train_batch_size="
        f"{train_batch_size} x --gradient_accumulation_steps={gradient_accumulation_steps}; "
        f"give two of the three, or --train_batch_size=auto")
  return steps


def nearest_multiples(batch, divisor):
  """The multiples of `divisor` nearest below and above `batch`, as "30 or 33" for a refusal's
  fix; "4" (`divisor` alone) for a `batch` below it, which has no multiple below."""
  lower = batch - batch % divisor
  return f"{lower} or {lower + divisor}" if lower else str(divisor)


def per_replica_batches(train_batch_size, effective_batch_size, replicas):
  """One replica's (train_batch_size, effective_batch_size) from train.py's global batch flags:
  each divided by `replicas`; "auto" stays "auto", its effective batch defaulting to
  `DEFAULT_EFFECTIVE_BATCH_SIZE`; an effective batch of None stays None otherwise.

  Raises:
    MemoryPlanError: a global batch that `replicas` do not divide (one line naming the nearest
      global batches that they do).
  """
  per_replica = train_batch_size
  if per_replica != "auto":
    if per_replica % replicas:
      raise MemoryPlanError(
          f"--train_batch_size={per_replica} is the global batch and must be a multiple of the "
          f"{replicas} replicas; use {nearest_multiples(per_replica, replicas)}")
    per_replica //= replicas
  effective = effective_batch_size
  if effective is None and per_replica == "auto":
    effective = DEFAULT_EFFECTIVE_BATCH_SIZE
  if effective is not None:
    if effective % replicas:
      raise MemoryPlanError(f"--effective_batch_size={effective} must be a multiple of the "
                            f"{replicas} replicas; use {nearest_multiples(effective, replicas)}")
    effective //= replicas
  return per_replica, effective


def plan_batches(config, max_seq_length, dtype, device, train_batch_size,
                 gradient_accumulation_steps=1, effective_batch_size=None, replicas=1,
                 predicts=False):
  """Resolves one replica's batch flags into a `BatchPlan` (its estimate for the micro-batch).

  `train_batch_size` is features per pass, or "auto": the largest batch that fits in
  `estimate.AUTO_BATCH_MARGIN` of `device`'s usable memory, split to give `effective_batch_size`
  exactly (`estimate.auto_split`).
  With an int, `effective_batch_size` must be a multiple of it and sets the accumulation steps.
  `replicas` train on `device` (`estimate.estimate`: on the CPU they share its RAM); `predicts`:
  train.py predicts after training (`estimate.estimate`: the float32 copy).

  Raises:
    MemoryPlanError: inconsistent flags (`accumulation_steps_for`), or "auto" finds no batch that
      fits (`diagnose.auto_diagnosis`: why, and the fixes that run).
  """

  def plan(micro, steps):
    return BatchPlan(
        micro, steps, micro * steps,
        estimate.estimate(config, max_seq_length, micro, dtype, device.kind, "adamw", steps,
                          replicas=replicas, predicts=predicts))

  steps = accumulation_steps_for(train_batch_size, gradient_accumulation_steps,
                                 effective_batch_size)
  if steps is not None:
    return plan(train_batch_size, steps)
  wanted = effective_batch_size or DEFAULT_EFFECTIVE_BATCH_SIZE
  split = estimate.auto_split(config, max_seq_length, wanted, device.usable_bytes, dtype,
                              device.kind, replicas, predicts)
  if split:
    return plan(*split)
  raise MemoryPlanError(
      diagnose.auto_diagnosis(config, max_seq_length, wanted, dtype, device,
                              estimate.AUTO_BATCH_MARGIN, replicas, predicts))


def auto_split_hint(config, max_seq_length, dtype, device, batches, replicas=1, predicts=False):
  """What to say when "auto" split the effective batch into passes of under half what fits, e.g. a
  prime 37 with 12 fitting runs 37 passes of 1: the nearest effective batch whose split runs
  passes of at least half of it ("--effective_batch_size=36 runs 12 features per pass x 3"), or
  "" when the split is fine (`diagnose.splits_well`). `batches` is `plan_batches`' "auto" plan
  for one of `replicas` (with `predicts`).
  """
  wanted = batches.effective_batch_size
  budget = int(device.usable_bytes * estimate.AUTO_BATCH_MARGIN)
  # Passes of `fit` fit with accumulation (its float32 sums included).
  fit = estimate.max_batch_size(config, max_seq_length, budget, dtype, device.kind, "adamw", 2,
                                replicas=replicas, predicts=predicts, limit=wanted)
  if batches.accumulation_steps == 1 or diagnose.splits_well(batches.micro_batch_size, fit):
    return ""
  for distance in range(1, wanted // 4 + 1):
    for other in (wanted - distance, wanted + distance):
      split = plan_batches(config, max_seq_length, dtype, device, "auto", 1, other, replicas,
                           predicts)
      if diagnose.splits_well(split.micro_batch_size, fit):
        return (f"--effective_batch_size={wanted * replicas} splits only into "
                f"{batches.accumulation_steps} passes of {batches.micro_batch_size} (up to {fit} "
                f"fit in a pass); --effective_batch_size={other * replicas} runs "
                f"{split.micro_batch_size} features per pass x {split.accumulation_steps}")
  return ""


def table_rows(configs, usable_bytes, dtype="float32", device="gpu", seq_lengths=TABLE_SEQ_LENGTHS,
               program=estimate.THIS_TOOL, accumulation_steps=1, predicts=False, replicas=1):
  """[(model name, seq, max batch)] for each config and sequence length (within its positions),
  the batch counted with `accumulation_steps` (its float32 sums from 2 on), `predicts` and
  `replicas` (`estimate.estimate`; the batch is global, `replicas` x one replica's)."""
  return [(name, seq, replicas * estimate.max_batch_size(
      config, seq, usable_bytes, dtype, device, accumulation_steps=accumulation_steps,
      program=program, predicts=predicts, replicas=replicas)) for name, config in configs.items()
          for seq in seq_lengths if seq <= config.max_position_embeddings]


def format_batch(limit):
  """`estimate.max_batch_size`'s answer as text: ">= N" where the search stopped at its limit."""
  return f">= {limit}" if limit >= estimate.BATCH_SEARCH_LIMIT else str(limit)


def format_table(rows, header, extra_column=None):
  """`table_rows`' rows as aligned text under a "model  seq  <header>" line.

  `extra_column`: (its header, one cell per row) printed right of the max batch, e.g. the verdict
  of the user's --train_batch_size at each length.
  """
  width = max([len("model")] + [len(name) for name, _, _ in rows])
  cells = [header] + [format_batch(batch) for _, _, batch in rows]  # the max-batch column
  if extra_column is not None:
    extra_header, extra = extra_column
    column = max(len(cell) for cell in cells)
    cells = [f"{cell:<{column}}  {more}" for cell, more in zip(cells, [extra_header, *extra])]
  lines = [f"{'model':<{width}}  {'seq':>4}  {cells[0]}"]
  lines += [f"{name:<{width}}  {seq:>4}  {cell}" for (name, seq, _), cell in zip(rows, cells[1:])]
  return "\n".join(lines)


def format_estimate(est, usable_bytes=None, config_name=""):
  """A multi-line breakdown of an `estimate.Estimate`, with a fit verdict given `usable_bytes`."""
  size = memory_device.format_bytes
  lines = [
      f"{config_name}seq {est.max_seq_length}, batch {est.batch_size}, {est.dtype}, "
      f"{est.optimizer}, {est.device}" +
      (f", counted as {est.program}" if est.program != estimate.THIS_TOOL.name else "") +
      (f", {est.accumulation_steps} accumulation steps" if est.accumulation_steps > 1 else "")
  ]
  slots = estimate.OPTIMIZER_SLOTS[est.optimizer]
  rows = [("weights", est.weights), ("weight casts (mixed precision)", est.weight_casts),
          ("gradients", est.gradients),
          (f"optimizer slots ({slots} per weight)", est.optimizer_slots),
          ("gradient accumulators", est.accumulators),
          ("early optimizer products", est.early_update), ("activations", est.activations)]
  rows += [(f"  {name}", value) for name, value in est.activation_groups.items()]
  peak = "backward" if est.backward_peak >= est.update_peak else "optimizer update"
  rows += [("logits and loss", est.logits), ("workspace", est.workspace),
           ("optimizer update workspace", est.update_workspace),
           (f"subtotal (peak: {peak})", est.subtotal),
           (f"allocator overhead x{est.overhead:g}", est.replica_total - est.subtotal)]
  if est.replicas > 1:  # CPU devices sharing the RAM
    rows += [(f"{counted(est.replicas - 1, 'other replica')} sharing the RAM",
              (est.replicas - 1) * est.replica_total)]
  rows += [("process (TensorFlow runtime, Python)", est.process),
           ("float32 copy to predict after training", est.prediction_copy), ("total", est.total)]
  lines += [f"  {name:<38}{size(value):>12}" for name, value in rows if value or name == "total"]
  if usable_bytes is not None:
    verdict = "fits" if est.total <= usable_bytes else "does NOT fit"
    lines.append(f"  {verdict} in {size(usable_bytes)} usable")
  return "\n".join(lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannerConfig(settings.Settings):
  """What `python -m model.memory` counts and prints; each field is the flag of the same name.

  Attributes:
    bert_config_file: a google-research or HF BERT JSON config; None: `estimate.presets`.
    max_seq_length: tokens per feature (at most the model's positions); None: the table over
      `TABLE_SEQ_LENGTHS`.
    train_batch_size: an int adds that batch's breakdown with `max_seq_length`, else its peak and
      fit verdict at each length of the table; "auto" is the largest batch, printed anyway.
    effective_batch_size, gradient_accumulation_steps: train.py's, resolved with
      `train_batch_size` as train.py does (`plan_batches`).
    mixed_precision_dtype: train.py's compute dtype, a key of `precision.POLICIES` or "auto"
      (`policy_and_reason`).
    gpu: train.py's --gpu (mixed_float16 unless `dtype` says otherwise).
    device_memory_gb: the training device's memory in GiB (not negative): a GPU's capacity with
      `gpu` or when TensorFlow sees a GPU, else the host's RAM; None (or 0): detected
      (`device.detect_device`).
    format: one of `settings.OUTPUT_FORMATS`.
    program: whose training step to count, a key of `estimate.PROGRAMS`.
    do_predict: train.py predicts after training (`estimate.estimate`'s `predicts`: its float32
      copy under a mixed policy on the CPU).
    num_cpu_devices: logical CPU devices train.py runs one replica on each of under
      --distribution_strategy=mirrored (at least 1): their tensors and runtimes share the RAM,
      and the batch flags are global over them (`per_replica_batches`).

  Raises:
    errors.UsageError: (on construction) a value outside those, a program other than this
      tool's under a mixed policy or with several CPU devices, or CPU devices with `gpu`.
    MemoryPlanError: (on construction) batch flags train.py refuses, a global batch the CPU
      devices do not divide among them included.
  """
  bert_config_file: Optional[str] = settings.setting(
      None, "BERT JSON config (google-research bert_config.json or an HF config.json). "
      "Without it: google-research's BERT-Base and BERT-Large (uncased).")
  max_seq_length: Optional[int] = settings.variant(
      features.Featurization, "max_seq_length", default=None,
      help="Tokens per feature. Without it: the largest batch for seq "
      f"{', '.join(str(n) for n in TABLE_SEQ_LENGTHS)}.",
      check=settings.at_least(1, "at least 1 (omit it for the table)"))
  train_batch_size: Union[None, int, str] = settings.setting(
      None, "Global features per forward/backward pass, over all replicas (each replica takes "
      "train_batch_size / replicas), or 'auto': the largest per-replica batch that the memory "
      "planner (python -m model.memory) says fits one device (90 % of its usable memory), with "
      "gradient accumulation keeping --effective_batch_size.", parser=settings.BatchSizeParser(),
      check=settings.check_batch_size)
  effective_batch_size: Optional[int] = settings.setting(
      None,
      "Global features per optimizer step. With --train_batch_size=auto (default 32 then) the tool "
      "picks the micro-batch and the accumulation steps; with a number, the accumulation "
      "steps are effective_batch_size / train_batch_size.")
  gradient_accumulation_steps: int = settings.setting(
      1, "Forward/backward passes per optimizer step; their gradients are averaged, so the update "
      "equals one batch of train_batch_size x gradient_accumulation_steps.")
  mixed_precision_dtype: str = settings.setting(
      precision.AUTO,
      "Compute dtype of training (tfm's runtime.mixed_precision_dtype); weights stay float32, and "
      "prediction runs in float32, as export.py serves by default. float16: mixed_float16 with "
      "dynamic loss scaling. bfloat16: mixed_bfloat16, no loss scaling; fast on GPUs from Ampere "
      "on and on CPUs with AVX512-BF16 or AMX. auto: float16 with --gpu; on the CPU bfloat16 "
      "where it has AVX512-BF16 or AMX, else float32 (the log says which and why).",
      choices=(precision.AUTO, *precision.POLICIES))
  gpu: bool = settings.setting(
      False, "Train on the GPU under the mixed_float16 policy with dynamic loss scaling "
      "(train.py fails if TensorFlow sees no GPU; the memory planner plans for one).")
  device_memory_gb: Optional[float] = settings.setting(
      None, "Memory of the device training runs on, in GiB (2^30 bytes): a GPU's capacity (e.g. "
      "12 for a 12 GB card) with --gpu or when TensorFlow sees a GPU, else the host's RAM. "
      "Default: the visible GPU's, else the host's available RAM.",
      check=settings.at_least(0, "0 or more (0 or omitted: the "
                              "visible GPU's, else the RAM)"))
  format: str = settings.setting("text", "Output format.", choices=settings.OUTPUT_FORMATS)
  program: str = settings.setting(
      estimate.THIS_TOOL.name,
      "Whose training step to count: tfm (this tool's train.py) or google_research_tf1 "
      "(google-research/bert's TF1 run_squad.py, to compare with its published OOM table).",
      choices=estimate.PROGRAMS)
  do_predict: bool = settings.setting(
      True, "Predict the eval shards and score them (after training, when it trains). After "
      "training under a mixed precision on the CPU a float32 copy of the model predicts, and the "
      "memory planner counts it.")
  num_cpu_devices: int = settings.setting(
      1, "Without GPUs: split the CPU into this many logical devices; "
      "--distribution_strategy=mirrored then runs one replica on each (for tests and trying a "
      "multi-device configuration). They share the RAM, and --train_batch_size and "
      "--effective_batch_size are global over them.", check=settings.at_least(1))

  def check(self):
    if self.program != estimate.THIS_TOOL.name and self.mixed_precision_dtype not in (
        precision.AUTO, "float32"):
      raise errors.UsageError(
          f"--program={self.program} trained in float32 only (TensorFlow 1.11 BERT had no mixed "
          f"precision); drop --mixed_precision_dtype={self.mixed_precision_dtype}")
    if self.program != estimate.THIS_TOOL.name and (self.train_batch_size == "auto" or
                                                    self.effective_batch_size is not None or
                                                    self.gradient_accumulation_steps != 1):
      raise errors.UsageError(
          f"--program={self.program} counts a batch as given: --train_batch_size=auto, "
          f"--effective_batch_size and --gradient_accumulation_steps plan this tool's training; "
          f"drop them or --program")
    if self.num_cpu_devices > 1 and self.gpu:
      raise errors.UsageError(
          f"--num_cpu_devices={self.num_cpu_devices} splits the CPU, and --gpu plans a GPU (each "
          f"GPU replica has its own memory): drop one of the two")
    if self.num_cpu_devices > 1 and self.program != estimate.THIS_TOOL.name:
      raise errors.UsageError(f"--program={self.program} counts one device: drop "
                              f"--num_cpu_devices={self.num_cpu_devices}")
    if self.train_batch_size is None:
      if self.effective_batch_size is not None or self.gradient_accumulation_steps != 1:
        raise errors.UsageError(
            "--effective_batch_size and --gradient_accumulation_steps split a --train_batch_size: "
            "give one too (a number, or auto)")
    else:
      accumulation_steps_for(self.train_batch_size, self.gradient_accumulation_steps,
                             self.effective_batch_size)
      per_replica_batches(self.train_batch_size, self.effective_batch_size, self.num_cpu_devices)

  @property
  def policy_and_reason(self):
    """(the Keras dtype policy counted, why in a few words): train.py's for the same
    `mixed_precision_dtype` and `gpu`; float32 for another `program`."""
    if self.program != estimate.THIS_TOOL.name:
      return "float32", f"{self.program} trained in float32"
    dtype, why = precision.compute_dtype(self.mixed_precision_dtype, self.gpu)
    if self.mixed_precision_dtype == precision.AUTO:  # why: "auto: <the device's reason>"
      why = f"{commands.command('squad-qa-train')} --mixed_precision_dtype={why}"
      if not self.gpu:
        why += "; --gpu trains mixed_float16"
    return precision.POLICIES[dtype], why


def _fewest_bytes(config, max_seq_length, dtype, device, program, accumulation_steps=1, replicas=1,
                  predicts=True):
  """Why no batch fits: one feature's peak (on each of `replicas`, with the prediction copy when
  `predicts`) with `accumulation_steps` (their float32 sums from 2 on, as the largest batch it
  explains counts them) against `device`'s usable memory, in a few words."""
  est = estimate.estimate(config, max_seq_length, 1, dtype, device.kind,
                          accumulation_steps=accumulation_steps, program=program, replicas=replicas,
                          predicts=predicts)
  size = memory_device.format_bytes
  fixed = est.weights + est.gradients + est.optimizer_slots
  shared = f" on each of {est.replicas} replicas" if est.replicas > 1 else ""
  return (
      f"one feature{shared} needs {size(est.total)} of the {size(device.usable_bytes)} usable; "
      f"weights, gradients and AdamW slots alone take {size(fixed)}" +
      (f", the gradient accumulators {size(est.accumulators)}" if est.accumulators else "") +
      (f", the process itself {size(est.process)}" if est.process else "") +
      (f", the float32 prediction copy {size(est.prediction_copy)}" if est.prediction_copy else ""))


def _train_plan(config, bert, seq, dtype, device):
  """(`plan_batches` for one replica of the config's batch flags, or None; a line saying what
  train.py runs, or would run and refuses when it does not fit `device`). Another `program`'s step
  is counted for the batch as given (it has no accumulation)."""
  if config.program != estimate.THIS_TOOL.name:
    batch = config.train_batch_size
    return BatchPlan(
        batch, 1, batch,
        estimate.estimate(bert, seq, batch, dtype, device.kind,
                          program=estimate.PROGRAMS[config.program])), ""
  replicas = config.num_cpu_devices
  per_replica, effective = per_replica_batches(config.train_batch_size, config.effective_batch_size,
                                               replicas)
  try:
    batches = plan_batches(bert, seq, dtype, device, per_replica,
                           config.gradient_accumulation_steps, effective, replicas,
                           config.do_predict)
  except MemoryPlanError as e:  # "auto" found no batch; the flags themselves were checked (`check`)
    return None, str(e)
  if config.train_batch_size == "auto" or batches.accumulation_steps > 1 or replicas > 1:
    hint = (auto_split_hint(bert, seq, dtype, device, batches, replicas, config.do_predict)
            if config.train_batch_size == "auto" else "")
    fits = batches.estimate.total <= device.usable_bytes
    train = commands.command("squad-qa-train")
    if replicas > 1:
      train += f" --distribution_strategy=mirrored --num_cpu_devices={replicas}"
    return batches, (f"{train} {'runs' if fits else 'would run'} " +
                     (f"{replicas} replicas x " if replicas > 1 else "") +
                     f"{batches.micro_batch_size} features per pass x "
                     f"{batches.accumulation_steps} accumulation steps = "
                     f"{batches.effective_batch_size * replicas} per optimizer step" +
                     ("" if fits else ", but its pre-flight check stops it: this does not fit") +
                     (f"; {hint}" if hint else ""))
  return batches, ""


def report(config):
  """What `python -m model.memory` prints for a `PlannerConfig` (text, or a JSON document).

  With `max_seq_length`: per model, the largest batch at that length (with the accumulation steps
  of the batch's plan, so that it fits exactly when that micro-batch is at most it), after the
  breakdown of the batch train.py would run for `train_batch_size` (an int or "auto", with
  `effective_batch_size` and `gradient_accumulation_steps` resolved as train.py does:
  `plan_batches`) and, when it does not fit, the fixes train.py's pre-flight check names
  (`diagnose.fixes`). Without: the max-batch table (with a column of that batch's peak and whether
  it fits at each length, or "auto"'s split, so the flag is never ignored) and, for the presets,
  the flattened Dense head next to the span head. On the CPU every total includes the process
  itself (`device.process_bytes`); with `num_cpu_devices` every replica's tensors, the batches
  printed being global over them, as train.py's flags are.

  Raises:
    errors.MissingFileError, errors.UsageError: a --bert_config_file missing or not a BERT config,
      a `max_seq_length` beyond a model's positions, or `gpu` without a GPU or a
      `device_memory_gb` to plan one.
  """
  # Imported here, as estimate.presets does: bert_config loads TensorFlow, the planner does not.
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  if config.bert_config_file:
    path = os.path.abspath(config.bert_config_file)  # "folder/config.json": HF files share names
    configs = {
        os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path)):
            bert_config_lib.BertConfig.from_json_file(config.bert_config_file)
    }
  else:
    configs = estimate.presets()
  dtype, why = config.policy_and_reason
  if config.device_memory_gb and config.gpu:
    device = memory_device.device_from_flag(config.device_memory_gb)
  else:  # what train.py without --gpu trains on: a visible GPU, else the CPU
    device = memory_device.detect_device(config.device_memory_gb)
    if config.gpu and device.kind == "cpu":
      raise errors.UsageError("--gpu: TensorFlow sees no GPU here; give the GPU's memory to plan "
                              "for one, e.g. --device_memory_gb=16 for a 16 GB card")
  replicas = config.num_cpu_devices  # train.py's mirrored replicas on the CPU
  if replicas > 1 and device.kind == "gpu":
    raise errors.UsageError(f"--num_cpu_devices={replicas} splits the CPU, and training here runs "
                            f"on the GPU TensorFlow sees: drop it")
  program = estimate.PROGRAMS[config.program]
  this_tool = program == estimate.THIS_TOOL
  output = {
      "device": dataclasses.asdict(device),
      "dtype": dtype,
      "program": program.name,
      "replicas": replicas
  }
  text = [
      f"device: {device.description}; {dtype} ({why}); AdamW; allocator overhead "
      f"x{memory_device.overhead_for(device.kind):g}" +
      ("" if this_tool else f"; counting {program.name}, not this tool") +
      ("; --gpu plans a GPU of that size"
       if config.device_memory_gb and device.kind == "cpu" else "") +
      (f"; {replicas} replicas (--distribution_strategy=mirrored --num_cpu_devices={replicas}) "
       f"share the RAM, batches are global" if replicas > 1 else "")
  ]
  if config.max_seq_length:
    seq = config.max_seq_length
    for name, bert in configs.items():
      if seq > bert.max_position_embeddings:
        raise errors.UsageError(f"--max_seq_length={seq}: {name} has "
                                f"{bert.max_position_embeddings} positions")
    output["estimates"] = []
    for name, bert in configs.items():
      batches, line = (_train_plan(config, bert, seq, dtype, device)
                       if config.train_batch_size is not None else (None, ""))
      # The largest batch with the plan's accumulation steps (their float32 sums): it fits exactly
      # when the plan's micro-batch is at most it.
      steps = batches.accumulation_steps if batches else 1
      limit = estimate.max_batch_size(bert, seq, device.usable_bytes, dtype, device.kind,
                                      accumulation_steps=steps, program=program,
                                      predicts=config.do_predict, replicas=replicas)
      entry = {"model": name, "max_seq_length": seq, "max_batch_size": limit * replicas}
      if config.train_batch_size is not None:
        entry["train_plan"] = None
        if batches:
          est = batches.estimate
          entry["train_plan"] = {
              "micro_batch_size": batches.micro_batch_size,
              "accumulation_steps": batches.accumulation_steps,
              "effective_batch_size": batches.effective_batch_size
          }
          entry["estimate"] = est.to_dict()
          entry["fits"] = est.total <= device.usable_bytes
          text.append(format_estimate(est, device.usable_bytes, f"{name}: "))
        if line:
          text.append(f"{name}: {line}")
      why = ("" if limit else ": " +
             _fewest_bytes(bert, seq, dtype, device, program, steps, replicas, config.do_predict))
      text.append(f"{name}: largest batch that fits at seq {seq}" +
                  (f" with {steps} accumulation steps" if steps > 1 else "") +
                  f": {format_batch(limit * replicas)}" +
                  (f" ({limit} per replica)" if replicas > 1 and limit else "") + why)
      if batches and not entry["fits"] and this_tool:  # train.py's pre-flight fixes
        entry["fixes"] = diagnose.fixes(bert, seq, batches.micro_batch_size, dtype, device,
                                        batches.accumulation_steps, replicas, config.do_predict)
        text.append(f"{name}: fixes:")
        text += [f"  - {fix}" for fix in entry["fixes"]]
      output["estimates"].append(entry)
  else:
    size = (f"{config.device_memory_gb:g} GiB" if config.device_memory_gb else
            memory_device.format_bytes(device.usable_bytes) + " usable")
    # "auto" chooses its steps per length; a number's are the flags' (each row's max batch counts
    # their float32 sums, as the batch's verdict does).
    steps = (accumulation_steps_for(config.train_batch_size, config.gradient_accumulation_steps,
                                    config.effective_batch_size)
             if config.train_batch_size is not None else 1)
    rows = table_rows(configs, device.usable_bytes, dtype, device.kind, program=program,
                      accumulation_steps=steps or 1, predicts=config.do_predict, replicas=replicas)
    output["table"] = [{"model": n, "max_seq_length": s, "max_batch_size": b} for n, s, b in rows]
    extra_column = None
    if config.train_batch_size is not None:
      cells = []
      for entry in output["table"]:
        batches, _ = _train_plan(config, configs[entry["model"]], entry["max_seq_length"], dtype,
                                 device)
        if batches is None:
          cells.append("no batch fits")
          continue
        est = batches.estimate
        entry["estimate"] = est.to_dict()
        entry["fits"] = est.total <= device.usable_bytes
        verdict = "fits" if entry["fits"] else "does NOT fit"
        split = (f"{batches.micro_batch_size} x {batches.accumulation_steps}, "
                 if config.train_batch_size == "auto" or batches.accumulation_steps > 1 else "")
        if split and replicas > 1:
          split = f"{replicas} replicas x {split}"
        cells.append(f"{split}{verdict} (peak {memory_device.format_bytes(est.total)})")
      effective = config.effective_batch_size or DEFAULT_EFFECTIVE_BATCH_SIZE
      header = (f"--train_batch_size=auto ({effective} per step)" if steps is None else
                f"batch {config.train_batch_size}" + (f" x {steps} steps" if steps > 1 else ""))
      extra_column = (header, cells)
    accumulating = f", {steps} accumulation steps" if steps and steps > 1 else ""
    if replicas > 1:
      accumulating += f", {replicas} replicas"
    text.append(
        format_table(rows,
                     f"max batch ({size}, {estimate.SHORT_POLICY_NAMES[dtype]}{accumulating})",
                     extra_column))
    if not config.bert_config_file:
      text += [
          "", f"output heads (the span head is what {commands.command('squad-qa-train')} uses):"
      ]
      text += [f"  {line}" for line in heads.flattened_dense_head_lines()]
  if config.format == "json":
    return json.dumps(output, indent=2)
  return "\n".join(text)
