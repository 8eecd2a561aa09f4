"""Explaining a batch that does not fit (train.py's pre-flight check, --train_batch_size=auto) or
a step that ran out of memory: the count, the usable memory and the fixes the count says fit."""

import math

from squad_qa.base import commands
from squad_qa.base.wording import counted
from squad_qa.model.memory import device as memory_device
from squad_qa.model.memory import estimate


def splits_well(batch, fit):
  """Whether passes of `batch` features use enough of the `fit` that memory allows to be worth
  naming or running: at least half of it (23 as 23 passes of 1, with 12 fitting, is not)."""
  return 2 * batch >= fit


def diagnosis(config, max_seq_length, batch_size, dtype, device, accumulation_steps=1,
              headline="the configuration does not fit in memory", replicas=1, predicts=False):
  """A multi-line message: the estimate, the device memory and the fixes that fit (`fixes`).

  `batch_size` is the micro-batch of one replica, `accumulation_steps` passes per optimizer step,
  `device` a `device.Device`, `headline` the first line's opening words, `replicas` the replicas
  training on it (`estimate.estimate`: on the CPU they share its RAM), `predicts` whether train.py
  predicts after training (`estimate.estimate`: the float32 copy).
  """
  est = estimate.estimate(config, max_seq_length, batch_size, dtype, device.kind, "adamw",
                          accumulation_steps, replicas=replicas, predicts=predicts)
  size = memory_device.format_bytes
  shared = f" on each of {est.replicas} replicas" if est.replicas > 1 else ""
  lines = [
      f"{headline}: estimated peak {size(est.total)} for batch {batch_size} x seq "
      f"{max_seq_length} ({dtype}){shared}; device: {device.description}",
      _breakdown(est, "activations"), "fixes:"
  ]
  effective = batch_size * accumulation_steps
  if est.total <= device.usable_bytes:  # the planner said it fits: its estimate was too low
    lines.insert(
        1, f"  that is below the {size(device.usable_bytes)} the device offers: "
        f"something else holds memory, or the planner is optimistic for this setup")
    if effective > 1:
      lines.append(f"  - {_same_effective(effective, max(1, batch_size // 2), replicas)}, half "
                   f"the activations")
    if dtype == "float32" and device.kind == "gpu":
      lines.append("  - --gpu (mixed_float16) halves most activations")
    lines.append("  - --train_batch_size=auto with a smaller --device_memory_gb plans for less "
                 "memory")
    return "\n".join(lines)
  lines += [
      f"  - {fix}" for fix in fixes(config, max_seq_length, batch_size, dtype, device,
                                    accumulation_steps, replicas, predicts)
  ]
  return "\n".join(lines)


def auto_diagnosis(config, max_seq_length, effective, dtype, device, margin, replicas=1,
                   predicts=False):
  """Why --train_batch_size=auto found no micro-batch for `effective` features per optimizer step
  (one replica's) within `margin` of `device`'s usable memory, and the fixes that do run: a
  multi-line message in `diagnosis`' format, the figures compared included.

  "auto" plans within `margin` (headroom for the count's error) and splitting a step into passes
  adds the float32 gradient accumulators (`estimate.Estimate.accumulators`), so a batch the
  pre-flight check would let through (it compares with all the usable memory) can find no plan.
  The fixes are a smaller `--effective_batch_size` that "auto" runs in one pass, an explicit batch
  the pre-flight check lets through, a shorter `--max_seq_length`; never "auto" with the same
  memory. `replicas` and `predicts` as in `diagnosis`; the flags named are global.
  """
  size = memory_device.format_bytes
  budget = int(device.usable_bytes * margin)
  within = (f"{margin * 100:g} % of the usable memory ({size(budget)} of "
            f"{size(device.usable_bytes)})")
  shared = f" on each of {replicas} replicas" if replicas > 1 else ""

  def peak(batch, steps):
    return estimate.estimate(config, max_seq_length, batch, dtype, device.kind, "adamw", steps,
                             replicas=replicas, predicts=predicts)

  one = peak(1, 1)
  compared = f"one feature x seq {max_seq_length} ({dtype}){shared} needs {size(one.total)}"
  if effective > 1:
    # Passes of 1 are the smallest split (the accumulators do not depend on the passes); one pass
    # of the whole batch has no accumulators.
    passes, whole = peak(1, effective), peak(effective, 1)
    per = "per replica and step" if replicas > 1 else "per step"
    compared = (f"for {effective} features {per}, {effective} passes of 1 x seq "
                f"{max_seq_length} ({dtype}){shared} need {size(passes.total)} with the float32 "
                f"gradient accumulators that splitting adds "
                f"({size(passes.accumulators * passes.replicas)}), one pass of {effective} needs "
                f"{size(whole.total)}, and one feature alone {size(one.total)}")
  what = ("not even one feature fits" if one.total > budget else
          f"no split of --effective_batch_size={effective * replicas} fits")
  headline = f"--train_batch_size=auto: {what} in {within}: {compared}"
  lines = [
      f"{headline}; device: {device.description}",
      _breakdown(one, "activations per feature"), "fixes:"
  ]
  return "\n".join(lines + [
      f"  - {fix}" for fix in auto_fixes(config, max_seq_length, effective, dtype, device, margin,
                                         replicas, predicts)
  ])


def auto_fixes(config, max_seq_length, effective, dtype, device, margin, replicas=1,
               predicts=False):
  """`auto_diagnosis`' fixes (same arguments), one line each (no bullet)."""
  size = memory_device.format_bytes
  budget = int(device.usable_bytes * margin)

  def largest(room, steps, seq=max_seq_length, limit=estimate.BATCH_SEARCH_LIMIT,
              predicts=predicts):
    return estimate.max_batch_size(config, seq, room, dtype, device.kind, "adamw", steps,
                                   replicas=replicas, predicts=predicts, limit=limit)

  fixes_ = []
  single = largest(budget, 1, limit=effective)
  if single:  # below `effective`: that one pass would have been planned
    fixes_.append(f"--effective_batch_size={single * replicas}: --train_batch_size=auto runs it "
                  f"in one pass, without accumulators, within the {margin * 100:g} %")
  # An explicit batch: the pre-flight check compares it with all the usable memory.
  fit = largest(device.usable_bytes, 2)
  alone = largest(device.usable_bytes, 1)
  checked = f"(the pre-flight check compares with all {size(device.usable_bytes)})"
  if alone >= effective:
    fixes_.append(f"--train_batch_size={effective * replicas}: one pass of the "
                  f"{effective * replicas} features fits {checked}")
  else:
    if effective > 1 and fit and splits_well(_split(effective, fit)[0], fit):
      fixes_.append(f"{_same_effective(effective, fit, replicas)} {checked}")
    if alone:
      fixes_.append(f"--train_batch_size={alone * replicas}: the largest batch that fits without "
                    f"accumulation, {counted(alone * replicas, 'feature')} per optimizer step "
                    f"{checked}")
  if not alone:
    fixes_.append(_nothing_fits(config, max_seq_length, dtype, device, replicas, predicts))
  seq = max_seq_length - 64
  while seq >= 64 and not largest(budget, max(2, effective) if effective > 1 else 1, seq, 1):
    seq -= 64
  if seq >= 64:
    fixes_.append(f"--max_seq_length={seq} ({commands.command('squad-qa-records')}): "
                  f"--train_batch_size=auto plans passes within the {margin * 100:g} % there")
  copy = estimate.estimate(config, max_seq_length, 1, dtype, device.kind, "adamw",
                           replicas=replicas, predicts=predicts).prediction_copy
  if copy and not single:  # without the float32 copy that predicts after training
    planned = largest(budget, 1, limit=effective, predicts=False)
    split = effective > 1 and largest(budget, effective, limit=1, predicts=False)
    explicit = largest(device.usable_bytes, 1, limit=effective, predicts=False)
    leaves = (f"leaves out the float32 copy that predicts after training ({size(copy)}); then "
              f"predict with --do_train=false")
    if split or planned >= effective:
      fixes_.append(f"{_no_predict()}: --train_batch_size=auto then plans the "
                    f"{effective * replicas} features per step; it {leaves}")
    elif planned:
      fixes_.append(f"{_no_predict()} --effective_batch_size={planned * replicas}: "
                    f"--train_batch_size=auto runs it in one pass; it {leaves}")
    elif explicit:
      fixes_.append(f"{_no_predict()} --train_batch_size={explicit * replicas}: fits {checked}; "
                    f"it {leaves}")
  if dtype == "float32" and device.kind == "gpu":
    fixes_.append("--gpu (mixed_float16) halves most activations")
  return fixes_


def _nothing_fits(config, max_seq_length, dtype, device, replicas, predicts):
  """The line for a device where not even one feature fits: what one feature needs here and at 64
  tokens (its fixed part, weights, slots and the process, does not shrink with the length)."""
  size = memory_device.format_bytes

  def one(seq):
    return estimate.estimate(config, seq, 1, dtype, device.kind, "adamw", replicas=replicas,
                             predicts=predicts).total

  shorter = f" ({size(one(64))} at 64)" if max_seq_length > 64 else ""
  return (f"not even batch 1 fits in all {size(device.usable_bytes)}: one feature needs "
          f"{size(one(max_seq_length))} at max_seq_length {max_seq_length}{shorter}, most of it "
          f"weights, AdamW slots" + (" and the process" if device.kind == "cpu" else "") +
          "; train where that much memory is free")


def _no_predict():
  """The flag that leaves out the prediction after training, named with the command that trains
  (squad-qa-memory, which prints it too, counts without the copy with the same flag)."""
  return f"{commands.command('squad-qa-train')} --do_predict=false"


def _breakdown(est, activations):
  """A diagnosis' second line: what the `estimate.Estimate` `est` counts (`activations` names its
  activations' figure)."""
  size = memory_device.format_bytes
  fixed = est.weights + est.gradients + est.optimizer_slots
  process = f", the process {size(est.process)}" if est.process else ""
  if est.prediction_copy:
    process += f", the float32 prediction copy {size(est.prediction_copy)}"
  return (f"  weights + gradients + AdamW slots {size(fixed)}, {activations} "
          f"{size(est.activations)}, allocator overhead x{est.overhead:g}{process} "
          f"(`{commands.command('squad-qa-memory')}` prints the breakdown)")


def _split(effective, micro):
  """(batch, passes): the fewest equal passes of at most `micro` features giving `effective`."""
  steps = next(k for k in range(math.ceil(effective / micro), effective + 1) if effective % k == 0)
  return effective // steps, steps


def _same_effective(effective, micro, replicas):
  """The flags of `_split` for each of `replicas` (train.py's batch flags are global)."""
  batch, steps = _split(effective, micro)
  return (f"--train_batch_size={batch * replicas} --gradient_accumulation_steps={steps}: the same "
          f"{effective * replicas} features per optimizer step")


def fixes(config, max_seq_length, batch_size, dtype, device, accumulation_steps=1, replicas=1,
          predicts=False):
  """The fixes for a batch that does not fit `device`, one line each (no bullet): a smaller batch
  with accumulation keeping the effective batch, the largest batch without accumulation, a shorter
  max_seq_length (in steps of 64 tokens), `--do_predict=false` when the float32 prediction copy
  is what does not fit, `--gpu`, `--train_batch_size=auto` where it plans the same effective
  batch. The arguments are
  `diagnosis`' (`batch_size` one replica's); the flags named are train.py's, global over the
  `replicas`.
  """
  effective = batch_size * accumulation_steps
  lines = []

  def largest(seq, steps, limit=estimate.BATCH_SEARCH_LIMIT, dtype=dtype):
    return estimate.max_batch_size(config, seq, device.usable_bytes, dtype, device.kind, "adamw",
                                   steps, replicas=replicas, predicts=predicts, limit=limit)

  fit = largest(max_seq_length, max(2, accumulation_steps))
  alone = largest(max_seq_length, 1)
  if fit and splits_well(_split(effective, fit)[0], fit):
    lines.append(f"{_same_effective(effective, fit, replicas)} (the largest batch that fits "
                 f"with accumulation is {fit * replicas})")
  if alone and accumulation_steps == 1:
    lines.append(f"--train_batch_size={alone * replicas}: the largest batch that fits without "
                 f"accumulation")
  if not fit and not alone:
    lines.append(_nothing_fits(config, max_seq_length, dtype, device, replicas, predicts))
  seq = max_seq_length - 64
  while seq >= 64 and largest(seq, accumulation_steps, limit=batch_size) < batch_size:
    seq -= 64
  if seq >= 64:
    lines.append(f"--max_seq_length={seq} ({commands.command('squad-qa-records')}) fits batch "
                 f"{batch_size * replicas}")
  copy = estimate.estimate(config, max_seq_length, batch_size, dtype, device.kind, "adamw",
                           accumulation_steps, replicas=replicas, predicts=predicts)
  if copy.prediction_copy and copy.total - copy.prediction_copy <= device.usable_bytes:
    lines.append(f"{_no_predict()} leaves out the float32 copy that predicts after training "
                 f"({memory_device.format_bytes(copy.prediction_copy)}); then predict with "
                 f"--do_train=false, which builds the model in float32 alone")
  if dtype == "float32":
    if device.kind == "gpu":
      mixed = largest(max_seq_length, accumulation_steps, dtype="mixed_float16")
      if mixed:
        lines.append(f"--gpu (mixed_float16) fits batch {mixed * replicas}")
    else:
      lines.append("on a GPU, --gpu (mixed_float16) halves most activations")
  # "auto" plans within a margin of the memory: offered only where it plans this effective batch.
  auto = estimate.auto_split(config, max_seq_length, effective, device.usable_bytes, dtype,
                             device.kind, replicas, predicts)
  if auto:
    lines.append(f"--train_batch_size=auto --effective_batch_size={effective * replicas}: runs "
                 f"{auto[0] * replicas} features per pass x {auto[1]} accumulation steps")
  return lines
