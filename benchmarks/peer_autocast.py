r"""Runs one of the peer's scripts with its model's forward pass under bfloat16 autocast.

    <peer venv>/bin/python -m benchmarks.peer_autocast <peer script> [its arguments...]

This is how Hugging Face's Trainer trains with `bf16=True` on a CPU: the forward pass and the
loss run inside `torch.autocast("cpu", dtype=torch.bfloat16)` (matmuls in bfloat16, weights and
optimizer in float32), the backward pass and the optimizer step outside it. Here
`BertForQuestionAnswering.forward` is wrapped in that context, then the script runs as
`__main__` with the remaining arguments, so it needs no change.

It runs in the peer's venv (torch, transformers), started by benchmarks/train_throughput.py
`--mixed_precision_dtype=bfloat16`; it imports nothing of this project.
"""

import functools
import runpy
import sys

import torch
import transformers


def autocast_forward(forward):
  """`forward` run inside torch.autocast("cpu", dtype=torch.bfloat16)."""
  @functools.wraps(forward)
  def wrapped(*args, **kwargs):
    with torch.autocast("cpu", dtype=torch.bfloat16):
      return forward(*args, **kwargs)
  return wrapped


def main():
  if len(sys.argv) < 2:
    sys.exit("usage: peer_autocast.py <peer script> [its arguments...]")
  cls = transformers.BertForQuestionAnswering
  cls.forward = autocast_forward(cls.forward)
  script = sys.argv[1]
  sys.argv = sys.argv[1:]
  runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
  main()
