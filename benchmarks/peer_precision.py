r"""Runs one of the peer's scripts at a precision: float32, bfloat16 autocast or dynamic int8.

    <peer venv>/bin/python benchmarks/peer_precision.py --precision=bfloat16 <peer script> [its arguments...]

  float32: the script as it is.
  bfloat16: how Hugging Face's Trainer runs `bf16=True` on a CPU: `BertForQuestionAnswering.forward`
      runs inside `torch.autocast("cpu", dtype=torch.bfloat16)` (matmuls in bfloat16, weights and
      optimizer in float32); a training script's backward pass and optimizer step stay outside it.
  int8: PyTorch's dynamic quantization, its documented recipe for BERT on a CPU: every model
      `BertForQuestionAnswering.from_pretrained` loads comes back as
      `torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)`
      (int8 weights, activations quantized per batch; inference only).
The script then runs as `__main__` with the remaining arguments, so it needs no change.

It runs in the peer's venv (torch, transformers), started by benchmarks/train_throughput.py
(`--mixed_precision_dtype=bfloat16`), benchmarks/serving_vs_peer.py and, imported by path, by
benchmarks/peer_prediction.py. It imports nothing of this project; the project imports only
PRECISIONS from it (torch is imported inside the functions).
"""

import functools
import runpy
import sys

PRECISIONS = ("float32", "bfloat16", "int8")


def autocast_forward(forward):
  """`forward` run inside torch.autocast("cpu", dtype=torch.bfloat16)."""
  import torch  # pylint: disable=g-import-not-at-top

  @functools.wraps(forward)
  def wrapped(*args, **kwargs):
    with torch.autocast("cpu", dtype=torch.bfloat16):
      return forward(*args, **kwargs)
  return wrapped


def quantized_loading(from_pretrained):
  """`from_pretrained` (a bound classmethod) whose model comes back dynamically quantized to int8."""
  import torch  # pylint: disable=g-import-not-at-top

  @functools.wraps(from_pretrained)
  def wrapped(*args, **kwargs):
    return torch.ao.quantization.quantize_dynamic(from_pretrained(*args, **kwargs),
                                                  {torch.nn.Linear}, dtype=torch.qint8)
  return classmethod(lambda cls, *args, **kwargs: wrapped(*args, **kwargs))


def for_inference(model, precision):
  """(model, context): a loaded float32 model at `precision` for inference, and a function giving
  the context its forward passes run in (bfloat16: autocast; else no context).

  Raises:
    ValueError: an unknown precision.
  """
  import contextlib  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  if precision == "bfloat16":
    return model, lambda: torch.autocast("cpu", dtype=torch.bfloat16)
  if precision == "int8":
    return (torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8),
            contextlib.nullcontext)
  if precision != "float32":
    raise ValueError(f"precision {precision!r}: choose from {', '.join(PRECISIONS)}")
  return model, contextlib.nullcontext


def apply(precision):
  """Makes BertForQuestionAnswering compute at `precision` (one of PRECISIONS) in this process.

  AutoModelForQuestionAnswering loads through BertForQuestionAnswering.from_pretrained, so both
  are covered.

  Raises:
    ValueError: an unknown precision.
  """
  import transformers  # pylint: disable=g-import-not-at-top
  cls = transformers.BertForQuestionAnswering
  if precision == "bfloat16":
    cls.forward = autocast_forward(cls.forward)
  elif precision == "int8":
    cls.from_pretrained = quantized_loading(cls.from_pretrained)
  elif precision != "float32":
    raise ValueError(f"precision {precision!r}: choose from {', '.join(PRECISIONS)}")


def main():
  # The script's own arguments follow it untouched, so only the first two are read here.
  usage = f"usage: peer_precision.py --precision={{{','.join(PRECISIONS)}}} <peer script> [...]"
  if len(sys.argv) < 3 or not sys.argv[1].startswith("--precision="):
    sys.exit(usage)
  precision = sys.argv[1].split("=", 1)[1]
  if precision not in PRECISIONS:
    sys.exit(usage)
  apply(precision)
  script = sys.argv[2]
  sys.argv = sys.argv[2:]
  runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
  main()
