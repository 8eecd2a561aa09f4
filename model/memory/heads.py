"""Training bytes of an output head, worked for the span head against a Dense head over a
flattened encoder output, the head behind "OOM when allocating tensor with shape[786432,1604]".

A head's parameters are float32 weights; training holds them, their gradients and the optimizer's
slots (`estimate.OPTIMIZER_SLOTS`: AdamW keeps two), so 4x the weights' bytes under AdamW. The span
head that train.py uses is one Dense(2) applied to every token: its parameters do not grow with
the sequence. A Dense head over the flattened [2, 512, 768] encoder output has a kernel row per
input value: 5.0 GB of weights before anything else (`python -m model.memory` prints both).
"""

import dataclasses

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
  """A Dense(`units`) over `input_units` features: (input_units + 1) x units parameters.

  A Dense(1604) softmax over a flattened [2 x 512 x 768] input (the head behind "OOM when
  allocating tensor with shape[786432,1604]") has 786432 x 1604 weights, 5.0 GB in float32, x3
  with AdamW's two slots, x4 with the gradients too.
  """
  parameters = (input_units + 1) * units
  weight_bytes = 4 * parameters
  slots = estimate.OPTIMIZER_SLOTS[optimizer]
  return HeadMemory(name or f"Dense({units}) over {input_units} inputs", parameters, weight_bytes,
                    weight_bytes * (1 + slots), weight_bytes * (2 + slots))


def span_head_memory(hidden_size, optimizer="adamw"):
  """The span head: one Dense(2) applied to every token's hidden state,
  2 x hidden + 2 parameters."""
  head = dense_head_memory(hidden_size, 2, optimizer)
  return dataclasses.replace(head, name=f"span head Dense(2) per token ({hidden_size} -> 2)")


def flattened_dense_head_lines():
  """The flattened Dense(1604) head's arithmetic next to the span head's (`dense_head_memory`).

  Returns:
    Two lines of text (the Dense head's, then the span head's), sizes in decimal GB as in the
    out-of-memory report they answer.
  """
  dense = dense_head_memory(2 * 512 * 768, 1604, name="Dense(1604) over flattened [2, 512, 768]")
  span = span_head_memory(768)

  def size(n):  # decimal units, as the user's report ("5.0 GB")
    return f"{n / 1e9:.4g} GB" if n >= 1e6 else f"{n:,} bytes"

  return [
      f"{head.name}: {head.parameters:,} parameters = {size(head.weight_bytes)} float32 "
      f"weights, {size(head.with_slots_bytes)} with AdamW slots, {size(head.training_bytes)} "
      f"with gradients" for head in (dense, span)
  ]
