"""Explaining a batch that does not fit (train.py's pre-flight check, --train_batch_size=auto) or
a step that ran out of memory: the count, the usable memory and the fixes the count says fit."""

import math

from squad_qa.base import commands
from squad_qa.model.memory import device as memory_device
from squad_qa.model.memory import estimate


def splits_well(batch, fit):
  """Whether passes of `batch` features use enough of the `fit` that memory allows to be worth
  naming or running: at least half of it (23 as 23 passes of 1, with 12 fitting, is not)."""
  return 2 * batch >= fit


def diagnosis(config, max_seq_length, batch_size, dtype, device, accumulation_steps=1,
              headline="the configuration does not fit in memory"):
  """A multi-line message: the estimate, the device memory and the fixes that fit (a smaller
  batch with accumulation, a shorter max_seq_length, `--gpu`, `--train_batch_size=auto`).

  `batch_size` is the micro-batch, `accumulation_steps` passes per optimizer step, `device` a
  `device.Device`, `headline` the first line's opening words.
  """
  est = estimate.estimate(config, max_seq_length, batch_size, dtype, device.kind, "adamw",
                          accumulation_steps)
  effective = batch_size * accumulation_steps
  fixed = est.weights + est.gradients + est.optimizer_slots
  size = memory_device.format_bytes
  lines = [
      f"{headline}: estimated peak {size(est.total)} for batch {batch_size} x seq "
      f"{max_seq_length} ({dtype}); device: {device.description}",
      f"  weights + gradients + AdamW slots {size(fixed)}, activations "
      f"{size(est.activations)}, allocator overhead x{est.overhead:g} "
      f"(`{commands.command('squad-qa-memory')}` prints the breakdown)", "fixes:"
  ]

  def fits(seq, batch, steps):
    return estimate.max_batch_size(config, seq, device.usable_bytes, dtype, device.kind, "adamw",
                                   steps, limit=batch) >= batch

  def split(micro):  # (batch, passes): the fewest passes of at most `micro` giving `effective`
    steps = next(
        k for k in range(math.ceil(effective / micro), effective + 1) if effective % k == 0)
    return effective // steps, steps

  def same_effective(micro):
    batch, steps = split(micro)
    return (f"--train_batch_size={batch} --gradient_accumulation_steps={steps}: the same "
            f"{effective} features per optimizer step")

  if est.total <= device.usable_bytes:  # the planner said it fits: its estimate was too low
    lines.insert(
        1, f"  that is below the {size(device.usable_bytes)} the device offers: "
        f"something else holds memory, or the planner is optimistic for this setup")
    if effective > 1:
      lines.append(f"  - {same_effective(max(1, batch_size // 2))}, half the activations")
    if dtype == "float32" and device.kind == "gpu":
      lines.append("  - --gpu (mixed_float16) halves most activations")
    lines.append("  - --train_batch_size=auto with a smaller --device_memory_gb plans for less "
                 "memory")
    return "\n".join(lines)
  fit = estimate.max_batch_size(config, max_seq_length, device.usable_bytes, dtype, device.kind,
                                "adamw", max(2, accumulation_steps))
  alone = estimate.max_batch_size(config, max_seq_length, device.usable_bytes, dtype, device.kind,
                                  "adamw", 1)
  if fit and splits_well(split(fit)[0], fit):
    lines.append(f"  - {same_effective(fit)} (the largest batch that fits with accumulation is "
                 f"{fit})")
  if alone and accumulation_steps == 1:
    lines.append(f"  - --train_batch_size={alone}: the largest batch that fits without "
                 f"accumulation")
  if not fit and not alone:
    lines.append(f"  - not even batch 1 fits at max_seq_length {max_seq_length}")
  seq = max_seq_length - 64
  while seq >= 64 and not fits(seq, batch_size, accumulation_steps):
    seq -= 64
  if seq >= 64:
    lines.append(f"  - --max_seq_length={seq} ({commands.command('squad-qa-records')}) fits batch "
                 f"{batch_size}")
  if dtype == "float32":
    if device.kind == "gpu":
      mixed = estimate.max_batch_size(config, max_seq_length, device.usable_bytes, "mixed_float16",
                                      device.kind, "adamw", accumulation_steps)
      lines.append(f"  - --gpu (mixed_float16) fits batch {mixed}")
    else:
      lines.append("  - on a GPU, --gpu (mixed_float16) halves most activations")
  lines.append("  - --train_batch_size=auto [--effective_batch_size=N] picks the batch and the "
               "accumulation steps itself")
  return "\n".join(lines)
