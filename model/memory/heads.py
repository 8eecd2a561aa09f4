"""Training bytes of an output head: the span head against a Dense head over a flattened encoder
output, the head behind "OOM when allocating tensor with shape[786432,1604]"."""

import dataclasses

from squad_qa.model.memory import device as memory_device
from squad_qa.model.memory import estimate


@dataclasses.dataclass(frozen=True)
class HeadMemory:
  """Parameters and training bytes (float32 weights + gradients + Adam slots) of an output head."""
  name: str
  parameters: int
  weight_bytes: int
  with_slots_bytes: int  # weights + optimizer slots (x3 with AdamW)
  training_bytes: int  # weights + gradients + optimizer slots (x4 with AdamW)


def dense_head_memory(input_units, units, optimizer="adamw", name=None):
  """`HeadMemory` of a Dense(`units`) over `input_units` features: (input_units + 1) x units
  parameters."""
  parameters = (input_units + 1) * units
  weight_bytes = 4 * parameters
  slots = estimate.OPTIMIZER_SLOTS[optimizer]
  return HeadMemory(name or f"Dense({units}) over {input_units} inputs", parameters, weight_bytes,
                    weight_bytes * (1 + slots), weight_bytes * (2 + slots))


def span_head_memory(hidden_size, optimizer="adamw"):
  """`HeadMemory` of the span head: one Dense(2) per token, 2 x hidden + 2 parameters."""
  head = dense_head_memory(hidden_size, 2, optimizer)
  return dataclasses.replace(head, name=f"span head Dense(2) per token ({hidden_size} -> 2)")


def flattened_dense_head_lines():
  """Two lines: the flattened Dense(1604) head's arithmetic, then the span head's (binary units,
  as the rest of the planner's output)."""
  dense = dense_head_memory(2 * 512 * 768, 1604, name="Dense(1604) over flattened [2, 512, 768]")
  span = span_head_memory(768)

  def size(n):
    return memory_device.format_bytes(n) if n >= memory_device.MIB else f"{n:,} bytes"

  return [
      f"{head.name}: {head.parameters:,} parameters = {size(head.weight_bytes)} float32 "
      f"weights, {size(head.with_slots_bytes)} with AdamW slots, {size(head.training_bytes)} "
      f"with gradients" for head in (dense, span)
  ]
