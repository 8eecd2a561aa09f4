r"""Peak training memory of the BERT span model, and the largest batch that fits a device.

    python -m model.memory --bert_config_file=bert_config.json --max_seq_length=384 \
        --train_batch_size=12 --dtype=float32 --device_memory_gb=12
    python -m model.memory --device_memory_gb=16            # BERT-Base/Large table, seq 64...512

A first-principles count, not a fitted table. One training step of `train.py` (tfm `BertEncoder` +
`BertSpanLabeler`, tfm AdamW, TensorFlow 2 graph executor) holds the persistent state

  weights         4 B x all parameters (float32 variables, also under a mixed policy), pooler included
  weight casts    2 B x encoder kernels under mixed_float16/bfloat16: Keras casts each kernel to the
                  compute dtype and the matmul gradient keeps that copy
  optimizer slots 4 B x trained parameters x slots (AdamW: first and second moment = 2); trained =
                  everything but the pooler, which the span head skips
  accumulators    4 B x (trained parameters + the word embeddings) when gradients are accumulated
                  over micro-batches: the float32 sums, and the word-embedding gradient made dense

plus the larger of two peaks. At the start of the backward pass:

  gradients       4 B x trained parameters, except that the word embeddings' gradient is sparse
                  (tf.gather): the batch's rows, b s (4 h + 4) B
  activations     per example, the tensors the backward pass reads (below)
  logits          start/end logits and their softmax cross-entropy buffers, float32
  workspace       transients of one layer: max(3 a s^2, 3 s i) x c per example (the softmax gradient
                  or the GELU gradient chain, whichever is larger) + the [b, s, s] attention mask,
                  + 4 s (h + i) under mixed_float16 (float32 copies for exact weight gradients)

(all gradients are counted although the first appear as the last activations are freed: an upper
bound). At the optimizer update: the gradients plus the dense temporaries of AdamW's sparse update
of the word-embedding table, ~3 tables (`update_workspace`); this peak matters only for tiny models.

Activations kept per example and per transformer layer, for sequence length s, hidden h, FFN width i,
heads a, compute dtype bytes c (4 float32, 2 mixed), float32 layer norms (f = 4, tfm keeps them in
float32) and 1-byte boolean dropout masks (`tf.nn.dropout` selects with `where_v2(keep_mask, ...)`):

  layer input (read by the Q, K, V projections)        s h c
  Q (scaled), K, V (read by the two attention einsums) 3 s h c
  attention probabilities, softmax output              a s^2 c
  attention probabilities after dropout                a s^2 c      (if attention dropout > 0)
  attention context (input of the output projection)   s h c
  layer norms: input and 1/sigma broadcast, x 2       2 x 2 s h f  (tf.nn.batch_normalization: BERT's
                                                                     epsilon 1e-12 rules out the fused op)
  FFN input                                            s h c
  FFN intermediate [s, i]: GELU's kept tensors + its   g s i c      g = 5 for the tanh GELU (x^2, tanh,
  output (read by the second projection)                            x/2, 1 + tanh, output), 4 for the
                                                                    erf GELU, 1 for ReLU
  dropout masks: attention probs, 2 hidden dropouts    (a s^2 + 2 s h) x 1 B
  plus the embeddings (layer norm 2 s h f, dropout mask s h) and the head input s h c.

For float32 BERT with the tanh GELU that is 42 s h + 20 s i + 9 a s^2 bytes per layer and example.
The layer-by-layer structure follows Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (2022, section 4.1: 34 s h + 5 a s^2 bytes per layer in 16-bit with 1-byte masks),
with the counts changed to what TensorFlow's gradient functions actually keep for tfm's layers
(float32 layer norms, a multi-op GELU). Weights, gradients and two Adam moments per parameter are the
usual "model memory anatomy" (e.g. Hugging Face's performance guide, Rajbhandari et al., ZeRO, 2020).

Two programs. The count above is this tool's (tfm + tf_keras AdamW on TensorFlow 2). The planner
can also count google-research/bert's TF1 `run_squad.py` (`GOOGLE_RESEARCH_TF1`), the program
behind google-research/bert's out-of-memory table, by changing three facts read from its code:

  dropout masks   4 B, not 1: TF 1.11's `tf.nn.dropout` multiplies by floor(keep_prob + uniform)
                  in the input's dtype, so the backward pass keeps a float32 mask
  GELU            4 kept [s, i] tensors (x, the erf/tanh argument or output, the cdf, the output)
  early products 8 B per trained and 4 B more per weight-decayed parameter: its
                  AdamWeightDecayOptimizer (optimization.py) computes beta_1 * m, beta_2 * v and
                  (except for LayerNorm and biases) weight_decay_rate * param from variables
                  alone, and TensorFlow's executor runs an op as soon as its inputs are ready, so
                  these products are made at the start of every step and held until the
                  gradients arrive at its end (through the whole backward peak). Its update then
                  densifies the word-embedding gradient, as tf_keras' sparse Adam does: the same
                  ~3 tables of `update_workspace`.

The early products are what makes BERT-Large so tight on google-research's 12 GB card: 3.7 GiB
on top of 4.9 GiB of weights, moments and gradients, so that one example of 384 tokens takes 96 %
of the 11.1 GiB; counted without them, the planner would put 3 examples there (the table: 0) and
31 of 64 tokens (the table: 12); with them, 1 and 11.

Checked on TensorFlow's real executor (benchmarks/google_tf1_step.py rebuilds that program op for
op in TF1 graph mode and reads the allocator's peak over training steps): BERT-Base at 32 tokens x
2 peaks at 3092 MiB against 3088 counted (1843 without the early products), at 128 x 8 at 4009
against 4095; MiniLM-L6 at 128 x 16 at 1463 against 1330.

Allocator overhead. On a GPU, TensorFlow allocates from one pool with its BFC allocator
(xla/tsl/framework/bfc_allocator.cc: best fit with coalescing, a free chunk is split only when it
is at least twice the request), so a request fails when no contiguous free chunk is large enough
even if enough bytes are free in total. `GPU_ALLOCATOR_OVERHEAD` is that fragmentation, measured:
TensorFlow's CPU device can run on the same BFC code with a hard limit
(TF_CPU_ALLOCATOR_USE_BFC=true, TF_CPU_BFC_MEM_LIMIT_IN_MB), and benchmarks/memory_bfc.py finds
the smallest limit under which real training steps run and divides it by the peak of bytes in
use without a limit. Over tiny and MiniLM configurations at 128-384 tokens, for this tool and for
the TF1 program, that ratio is 0.96-1.03: `GPU_ALLOCATOR_OVERHEAD` = 1.04, the largest rounded
up. (The CPU's BFC grows its pool in regions of doubling size that a chunk cannot span, so it
should fragment no less than a GPU's single pre-allocated region; cuBLAS workspaces, XLA's
buffers and mixed precision are not exercised.) TensorFlow's default CPU
allocator has no fixed limit (with oneDNN it is a BFC pool that grows with the host's memory), so
fragmentation cannot fail a step there: `CPU_ALLOCATOR_OVERHEAD` = 1.0. How close the count
is to the peak is a separate question, answered by benchmarks/memory_cpu.py (this tool:
measured/predicted 0.81-1.10).

Usable GPU memory. TensorFlow leaves part of the GPU to the system: max(300 MiB, 5 %) of the free
memory in TF 1.x, 500-1800 MiB by compute capability in TF 2.x (`MinSystemMemory` in
tensorflow/core/common_runtime/gpu/gpu_device.cc), and the CUDA context takes ~0.3 GiB before that.
`usable_gpu_bytes` assumes 5 % + 0.3 GiB: a 12 GiB card leaves 11.1 GiB, the "about 11 GB" that
TF 1.11 could allocate on the Titan X of google-research/bert's out-of-memory table; a 16 GiB P100
leaves 14.9 GiB. When a GPU is visible, its own allocator limit (`memory_limit` of
`device_lib.list_local_devices()`) is used instead.

Validation: tests/model/test_memory.py holds `GOOGLE_RESEARCH_TF1` against the 12 cells of
google-research/bert's table (Titan X 12 GB, TF 1.11, float32, Adam) and against the TF1 graph's
measured peak. 8 cells are within max(1, 25 %): all of BERT-Large and BERT-Base at 320 and 384.
BERT-Base at 64, 128 and 256 tokens the planner says 111, 50, 21 where the table says 64, 32, 16
(4096 / s each, what a search by halving returns). Those are not maxima of any count whose
per-example memory is linear plus quadratic in s: per-token memory then does not rise as
sequences get shorter, so the table's own 384-token cell (12 x 384 = 4608 tokens fit) implies
at least 72, 36 and 18. BERT-Base at 512 misses by one beyond the tolerance: 8 against 6; for 6
to be the maximum while 12 fit at 384, one example of 512 tokens would have to cost more than
12/7 = 1.71 times one of 384, which the count's structure allows only up to (4/3)^2 = 1.78 and
BERT-Base's counts put at 1.51.
benchmarks/memory_cpu.py compares this tool's count with measured CPU training steps and
benchmarks/memory_bfc.py measures the allocator overhead.
"""

import dataclasses
import json
import math
import os
import sys

from squad_qa import errors

GIB = 2 ** 30
MIB = 2 ** 20

# Compute dtype bytes per policy: (most activations, the FFN activation layer). tfm computes the FFN
# activation in float32 under mixed_bfloat16 (TransformerEncoderBlock: "bfloat16 causes BERT ... to
# not converge as well, so we use float32").
POLICIES = {"float32": (4, 4), "mixed_float16": (2, 2), "mixed_bfloat16": (2, 4)}
SHORT_POLICY_NAMES = {"float32": "fp32", "mixed_float16": "fp16", "mixed_bfloat16": "bf16"}
OPTIMIZER_SLOTS = {"adamw": 2, "adam": 2, "lamb": 2, "momentum": 1, "sgd": 0}
LAYER_NORM_BYTES = 4  # tfm's layer norms run in float32 under every policy
MASK_BYTES = 1        # tf.nn.dropout keeps a boolean keep-mask
# BFC fragmentation: smallest memory limit under which real training steps run / their peak bytes
# in use, the largest ratio measured by benchmarks/memory_bfc.py (module docstring).
GPU_ALLOCATOR_OVERHEAD = 1.04
CPU_ALLOCATOR_OVERHEAD = 1.0  # the CPU pool grows on demand (module docstring)
AUTO_BATCH_MARGIN = 0.9  # --train_batch_size=auto plans with 90 % of the usable memory
TABLE_SEQ_LENGTHS = (64, 128, 256, 320, 384, 512)  # google-research/bert's out-of-memory table

# Tensors the backward pass keeps per FFN activation (see the module docstring).
_ACTIVATION_KEPT = {"gelu_tanh": 5, "gelu_exact": 4, "relu": 1}


@dataclasses.dataclass(frozen=True)
class Program:
  """The facts of a training program that the count depends on beyond the model (module docstring).

  Attributes:
    name: for messages and --program.
    mask_bytes: bytes per dropout-mask element kept for the backward pass.
    gelu_kept: [s, i] tensors the FFN activation keeps (its output included); None: from the
      config's activation (`_ACTIVATION_KEPT`).
    early_moment_bytes: bytes per trained parameter that the optimizer computes from its moments
      alone (beta_1 * m, beta_2 * v) at the start of the step and holds until the gradients arrive.
    early_decay_bytes: the same per weight-decayed parameter (weight_decay_rate * param).
  """
  name: str
  mask_bytes: int
  gelu_kept: object
  early_moment_bytes: int
  early_decay_bytes: int


# This tool: tfm layers (boolean dropout masks), tf_keras AdamW (fused ResourceApplyAdam updates).
THIS_TOOL = Program("tfm", mask_bytes=MASK_BYTES, gelu_kept=None, early_moment_bytes=0,
                    early_decay_bytes=0)
# google-research/bert modeling.py + optimization.py under TensorFlow 1.11 (module docstring).
GOOGLE_RESEARCH_TF1 = Program("google_research_tf1", mask_bytes=4, gelu_kept=4,
                              early_moment_bytes=2 * 4, early_decay_bytes=4)
PROGRAMS = {p.name: p for p in (THIS_TOOL, GOOGLE_RESEARCH_TF1)}


def _bert_config(**kwargs):
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  return bert_config_lib.BertConfig(**kwargs)


def presets():
  """google-research/bert's uncased BERT-Base and BERT-Large configs, by display name."""
  return {
      "BERT-Base": _bert_config(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                num_attention_heads=12, intermediate_size=3072),
      "BERT-Large": _bert_config(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                                 num_attention_heads=16, intermediate_size=4096),
  }


@dataclasses.dataclass(frozen=True)
class ParameterCounts:
  """Parameter counts (numbers of scalars, not bytes) of the span model for a BertConfig."""
  embeddings: int      # word + position + token type tables and their layer norm
  per_layer: int       # one transformer layer
  layer_kernels: int   # the six projection kernels of one layer (cast under mixed precision)
  num_layers: int
  pooler: int          # built by tfm's BertEncoder, not trained by the span head
  head: int            # the span head: Dense(2) over every token, 2 * hidden + 2

  @property
  def trained(self):
    return self.embeddings + self.num_layers * self.per_layer + self.head

  @property
  def total(self):
    return self.trained + self.pooler


def count_parameters(config):
  """Counts the span model's parameters: tfm BertEncoder (+ pooler) + Dense(2) span head.

  Args:
    config: a `model.bert_config.BertConfig`.

  Returns:
    A `ParameterCounts`. BERT-Base (uncased) has 108,891,650 trained parameters.
  """
  h, i = config.hidden_size, config.intermediate_size
  embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h
  embeddings += 2 * h  # embedding layer norm
  kernels = 4 * h * h + 2 * h * i
  per_layer = kernels + 4 * h + i + h + 2 * 2 * h  # + q, k, v, output, FFN biases, 2 layer norms
  return ParameterCounts(embeddings=embeddings, per_layer=per_layer, layer_kernels=kernels,
                         num_layers=config.num_hidden_layers, pooler=h * h + h, head=2 * h + 2)


def decayed_parameters(config):
  """Parameters that AdamW decays: all trained ones but LayerNorm scales/offsets and biases
  (google-research/bert's and tfm's exclude_from_weight_decay)."""
  counts, h = count_parameters(config), config.hidden_size
  tables = counts.embeddings - 2 * h  # the embedding tables without their layer norm
  return tables + counts.num_layers * counts.layer_kernels + 2 * h  # + the span head's kernel


def _activation_kind(config):
  if config.hidden_act == "gelu":
    return "gelu_exact" if config.exact_gelu else "gelu_tanh"
  return config.hidden_act


def layer_activation_bytes(config, max_seq_length, dtype="float32", program=THIS_TOOL):
  """Bytes one transformer layer keeps for the backward pass, per example, by tensor group.

  Args:
    config: a `model.bert_config.BertConfig`.
    max_seq_length: tokens per example (s).
    dtype: "float32", "mixed_float16" or "mixed_bfloat16".
    program: a `Program` (mask bytes, the GELU's kept tensors).

  Returns:
    {group name: bytes} for one example and one layer; groups as in the module docstring.
  """
  c, c_act = POLICIES[dtype]
  s, h, i, a = max_seq_length, config.hidden_size, config.intermediate_size, config.num_attention_heads
  attention_dropout = config.attention_probs_dropout_prob > 0
  hidden_dropout = config.hidden_dropout_prob > 0
  kept = program.gelu_kept or _ACTIVATION_KEPT.get(_activation_kind(config), 4)
  # The activation's own tensors in its compute dtype, its output as read by the next projection.
  ffn = ((kept - 1) * c_act + c) * s * i
  return {
      "layer input": s * h * c,
      "Q, K, V": 3 * s * h * c,
      "attention probs": a * s * s * c * (2 if attention_dropout else 1),
      "attention context": s * h * c,
      "layer norms": 2 * 2 * s * h * LAYER_NORM_BYTES,
      "FFN input": s * h * c,
      "FFN intermediate": ffn,
      "dropout masks": program.mask_bytes * ((a * s * s if attention_dropout else 0)
                                             + (2 * s * h if hidden_dropout else 0)),
  }


@dataclasses.dataclass(frozen=True)
class Estimate:
  """Estimated peak training memory, in bytes, of one configuration.

  A step has two peaks: the start of the backward pass (activations, workspace, logits and the
  gradients, all of them counted although the first gradients appear as the last activations go)
  and the optimizer update (gradients + `update_workspace`). `subtotal` is the persistent part
  (weights, casts, slots, accumulators, early optimizer products) plus the larger peak; `total` =
  `subtotal` x `overhead` (the allocator's, see the module docstring) is what is compared with the
  usable memory.
  """
  max_seq_length: int
  batch_size: int
  dtype: str
  device: str
  optimizer: str
  accumulation_steps: int
  weights: int
  weight_casts: int
  gradients: int
  optimizer_slots: int
  accumulators: int
  early_update: int    # optimizer products held from the step's start (GOOGLE_RESEARCH_TF1)
  activations: int
  activation_groups: dict  # {group: bytes for the whole batch and all layers}
  logits: int
  workspace: int
  update_workspace: int
  overhead: float
  program: str = THIS_TOOL.name

  @property
  def backward_peak(self):
    return self.gradients + self.activations + self.logits + self.workspace

  @property
  def update_peak(self):
    return self.gradients + self.update_workspace

  @property
  def persistent(self):
    return (self.weights + self.weight_casts + self.optimizer_slots + self.accumulators
            + self.early_update)

  @property
  def subtotal(self):
    return self.persistent + max(self.backward_peak, self.update_peak)

  @property
  def total(self):
    return int(math.ceil(self.subtotal * self.overhead))

  @property
  def step_bytes(self):
    """What one training step allocates and frees at its peak, x `overhead`.

    (Weights, casts, slots and accumulators persist between steps.)
    """
    return int(math.ceil(max(self.backward_peak, self.update_peak) * self.overhead))

  def to_dict(self):
    values = dataclasses.asdict(self)
    values.update(subtotal=self.subtotal, total=self.total, backward_peak=self.backward_peak,
                  update_peak=self.update_peak, step_bytes=self.step_bytes)
    return values


def overhead_for(device):
  """The allocator overhead factor of `device` ("gpu" or "cpu"); see the module docstring."""
  if device not in ("gpu", "cpu"):
    raise ValueError(f"device must be 'gpu' or 'cpu', not {device!r}")
  return GPU_ALLOCATOR_OVERHEAD if device == "gpu" else CPU_ALLOCATOR_OVERHEAD


def estimate(config, max_seq_length, batch_size, dtype="float32", device="gpu", optimizer="adamw",
             accumulation_steps=1, program=THIS_TOOL):
  """Estimates the peak memory of one training step of the span model.

  Args:
    config: a `model.bert_config.BertConfig`.
    max_seq_length: tokens per example.
    batch_size: examples per forward/backward pass (the micro-batch under accumulation).
    dtype: "float32", "mixed_float16" or "mixed_bfloat16" (the Keras dtype policy).
    device: "gpu" or "cpu" (selects the allocator overhead).
    optimizer: a key of `OPTIMIZER_SLOTS` ("adamw": two float32 slots per weight).
    accumulation_steps: micro-batches per optimizer step; > 1 adds a float32 gradient accumulator.
    program: the `Program` counted: `THIS_TOOL` (train.py) or `GOOGLE_RESEARCH_TF1`.

  Returns:
    An `Estimate` (bytes).

  Raises:
    ValueError: unknown dtype, device or optimizer, or a non-positive size.
  """
  if dtype not in POLICIES:
    raise ValueError(f"dtype must be one of {', '.join(POLICIES)}, not {dtype!r}")
  if optimizer not in OPTIMIZER_SLOTS:
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_SLOTS)}, not {optimizer!r}")
  if max_seq_length < 1 or batch_size < 0 or accumulation_steps < 1:
    raise ValueError("max_seq_length and accumulation_steps must be >= 1, batch_size >= 0")
  overhead = overhead_for(device)
  c = POLICIES[dtype][0]
  counts = count_parameters(config)
  s, b, h = max_seq_length, batch_size, config.hidden_size
  layers = config.num_hidden_layers
  per_layer = layer_activation_bytes(config, s, dtype, program)
  groups = {name: b * layers * value for name, value in per_layer.items()}
  hidden_dropout = config.hidden_dropout_prob > 0
  groups["embeddings"] = b * (2 * s * h * LAYER_NORM_BYTES
                              + (program.mask_bytes * s * h if hidden_dropout else 0))
  groups["head input"] = b * s * h * c
  mixed = dtype != "float32"
  word_embeddings = config.vocab_size * h
  if accumulation_steps > 1:  # train.py adds dense float32 gradients
    gradients = 4 * counts.trained
  else:  # tf.gather's gradient: IndexedSlices of the batch's rows (float32 values, int32 indices)
    gradients = 4 * (counts.trained - word_embeddings) + b * s * (4 * h + 4)
  workspace_per_example = max(3 * config.num_attention_heads * s * s * c,
                              3 * s * config.intermediate_size * c)
  if dtype == "mixed_float16" and program == THIS_TOOL:
    # train.py computes weight gradients from float32 copies of the float16 operands (exact
    # gradient accumulation): an FFN projection's input and output gradient, 4 s (h + i) bytes.
    workspace_per_example += 4 * s * (h + config.intermediate_size)
  return Estimate(
      max_seq_length=s, batch_size=b, dtype=dtype, device=device, optimizer=optimizer,
      accumulation_steps=accumulation_steps,
      weights=4 * counts.total,
      weight_casts=2 * counts.layer_kernels * layers if mixed else 0,
      gradients=gradients,
      optimizer_slots=4 * counts.trained * OPTIMIZER_SLOTS[optimizer],
      # The float32 sums, plus the word-embedding gradient made dense to be added to them.
      accumulators=(4 * (counts.trained + config.vocab_size * h) if accumulation_steps > 1 else 0),
      # Weight decay skips LayerNorm and bias parameters (optimization.py's exclude list).
      early_update=(program.early_moment_bytes * counts.trained
                    + program.early_decay_bytes * decayed_parameters(config)),
      activations=sum(groups.values()),
      activation_groups=groups,
      # float32 start/end logits [b, s], their casts and softmax cross-entropy buffers.
      logits=b * s * 2 * 4 * 3,
      workspace=b * workspace_per_example + b * s * s * c,
      # AdamW's update of the word embeddings from a sparse gradient (legacy Adam's
      # _resource_apply_sparse: m * beta_1, v * beta_2, sqrt(v), ... each a dense temporary of the
      # table) and the weight-decay op (lr * var * rate): ~3 tables alive at once.
      update_workspace=3 * 4 * word_embeddings,
      overhead=overhead, program=program.name)


def max_batch_size(config, max_seq_length, usable_bytes, dtype="float32", device="gpu",
                   optimizer="adamw", accumulation_steps=1, limit=1 << 20, program=THIS_TOOL):
  """The largest batch whose `estimate(...).total` fits in `usable_bytes`; 0 if not even one.

  Args:
    usable_bytes: memory the framework may allocate (see `usable_gpu_bytes`), in bytes.
    limit: the answer is capped here (a CPU with lots of RAM would otherwise say millions).
    Other arguments as `estimate`.

  Returns:
    An int >= 0.
  """
  def fits(batch):
    return estimate(config, max_seq_length, batch, dtype, device, optimizer,
                    accumulation_steps, program).total <= usable_bytes
  if not fits(1):
    return 0
  low, high = 1, 2  # the estimate grows with the batch: double, then bisect
  while high <= limit and fits(high):
    low, high = high, 2 * high
  high = min(high, limit + 1)
  while high - low > 1:
    middle = (low + high) // 2
    low, high = (middle, high) if fits(middle) else (low, middle)
  return low


def usable_gpu_bytes(capacity_bytes):
  """Memory TensorFlow can allocate on a GPU of `capacity_bytes`: 95 % minus 0.3 GiB.

  TensorFlow leaves max(300 MiB, 5 %) of the free memory to the system (TF 1.x `MinSystemMemory`)
  and the CUDA context takes ~0.3 GiB first; see the module docstring. 12 GiB -> 11.1 GiB.
  """
  return max(0, int(capacity_bytes * 0.95 - 0.3 * GIB))


def host_available_bytes():
  """`MemAvailable` of /proc/meminfo in bytes (Linux), else None."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


@dataclasses.dataclass(frozen=True)
class Device:
  """Where training runs and how much of its memory TensorFlow may use."""
  kind: str          # "gpu" or "cpu"
  usable_bytes: int
  description: str   # for messages, e.g. "12.0 GiB GPU (--device_memory_gb), 11.1 GiB usable"


def device_from_flag(device_memory_gb):
  """A GPU of `device_memory_gb` GiB of capacity (the number on the box)."""
  usable = usable_gpu_bytes(device_memory_gb * GIB)
  return Device("gpu", usable, f"{device_memory_gb:g} GiB GPU ({usable / GIB:.1f} GiB usable)")


def detect_device(device_memory_gb=None):
  """The device TensorFlow trains on, with the memory it may use.

  Args:
    device_memory_gb: memory in GiB given by the user instead of detecting it: a GPU's capacity
      when a GPU is visible, else the RAM to plan the CPU with.

  Returns:
    A `Device`: the first visible GPU (TensorFlow places training there even without --gpu) with
    its allocator limit (`memory_limit` of device_lib.list_local_devices(), already net of the
    system reserve); else the CPU with the host's available RAM.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpu_visible = bool(tf.config.list_physical_devices("GPU"))
  if device_memory_gb:
    if gpu_visible:
      return device_from_flag(device_memory_gb)
    return Device("cpu", int(device_memory_gb * GIB),
                  f"CPU with {device_memory_gb:g} GiB of RAM (--device_memory_gb)")
  if gpu_visible:
    from tensorflow.python.client import device_lib  # pylint: disable=g-import-not-at-top
    for d in device_lib.list_local_devices():
      if d.device_type == "GPU":
        return Device("gpu", int(d.memory_limit),
                      f"GPU ({d.physical_device_desc}), TensorFlow may allocate "
                      f"{d.memory_limit / GIB:.1f} GiB")
  available = host_available_bytes() or 0
  return Device("cpu", available, f"CPU with {available / GIB:.1f} GiB of RAM available")


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
  estimate: Estimate


def plan_batches(config, max_seq_length, dtype, device, train_batch_size,
                 gradient_accumulation_steps=1, effective_batch_size=None):
  """Resolves train.py's batch flags into a `BatchPlan`.

  Args:
    config: a `model.bert_config.BertConfig`.
    max_seq_length: tokens per feature.
    dtype: the Keras policy name.
    device: a `Device`.
    train_batch_size: features per pass (int), or "auto": the largest batch the planner says fits
      in `AUTO_BATCH_MARGIN` (90 %) of the usable memory, split so that the effective batch is
      `effective_batch_size` (default `DEFAULT_EFFECTIVE_BATCH_SIZE`) exactly.
    gradient_accumulation_steps: passes per optimizer step (with an int `train_batch_size`).
    effective_batch_size: features per optimizer step; with an int `train_batch_size` it must be
      a multiple of it and sets the accumulation steps.

  Returns:
    A `BatchPlan`; its estimate is for the micro-batch (the pre-flight check is the caller's).

  Raises:
    MemoryPlanError: inconsistent flags, or "auto" finds no batch that fits (with a diagnosis).
  """
  def plan(micro, steps):
    return BatchPlan(micro, steps, micro * steps,
                     estimate(config, max_seq_length, micro, dtype, device.kind, "adamw", steps))

  if gradient_accumulation_steps < 1:
    raise MemoryPlanError("--gradient_accumulation_steps must be >= 1")
  if effective_batch_size is not None and effective_batch_size < 1:
    raise MemoryPlanError("--effective_batch_size must be >= 1")
  if train_batch_size != "auto":
    if effective_batch_size is None:
      return plan(train_batch_size, gradient_accumulation_steps)
    steps, remainder = divmod(effective_batch_size, train_batch_size)
    if remainder or not steps or (gradient_accumulation_steps != 1
                                  and steps != gradient_accumulation_steps):
      raise MemoryPlanError(
          f"--effective_batch_size={effective_batch_size} is not --train_batch_size="
          f"{train_batch_size} x --gradient_accumulation_steps={gradient_accumulation_steps}; "
          f"give two of the three, or --train_batch_size=auto")
    return plan(train_batch_size, steps)
  if gradient_accumulation_steps != 1:
    raise MemoryPlanError("--train_batch_size=auto chooses the accumulation steps itself; give "
                          "the batch per optimizer step as --effective_batch_size instead of "
                          "--gradient_accumulation_steps")
  wanted = effective_batch_size or DEFAULT_EFFECTIVE_BATCH_SIZE
  budget = int(device.usable_bytes * AUTO_BATCH_MARGIN)
  for steps in range(1, wanted + 1):  # the fewest passes whose equal micro-batches fit
    if wanted % steps:
      continue
    micro = wanted // steps
    if micro <= max_batch_size(config, max_seq_length, budget, dtype, device.kind, "adamw", steps,
                               limit=micro):
      return plan(micro, steps)
  raise MemoryPlanError(diagnosis(config, max_seq_length, 1, dtype, device,
                                  headline="--train_batch_size=auto: not even one feature fits"))


def diagnosis(config, max_seq_length, batch_size, dtype, device, accumulation_steps=1,
              headline="the configuration does not fit in memory"):
  """A multi-line message: the estimate, the device memory and concrete fixes.

  Fixes offered: the largest batch that fits (with gradient accumulation to keep the effective
  batch), the longest max_seq_length (in steps of 64) that fits this batch, mixed precision
  (`--gpu`), and `--train_batch_size=auto`.
  """
  est = estimate(config, max_seq_length, batch_size, dtype, device.kind, "adamw", accumulation_steps)
  effective = batch_size * accumulation_steps
  fixed = est.weights + est.gradients + est.optimizer_slots
  lines = [f"{headline}: estimated peak {format_bytes(est.total)} for batch {batch_size} x seq "
           f"{max_seq_length} ({dtype}); device: {device.description}",
           f"  weights + gradients + AdamW slots {format_bytes(fixed)}, activations "
           f"{format_bytes(est.activations)}, allocator overhead x{est.overhead:g} "
           f"(`python -m model.memory` prints the breakdown)",
           "fixes:"]

  def fits(seq, batch, steps):
    return max_batch_size(config, seq, device.usable_bytes, dtype, device.kind, "adamw", steps,
                          limit=batch) >= batch

  def same_effective(micro):  # the fewest passes of at most `micro` features giving `effective`
    steps = next(k for k in range(math.ceil(effective / micro), effective + 1) if effective % k == 0)
    return (f"--train_batch_size={effective // steps} --gradient_accumulation_steps={steps}: the "
            f"same {effective} features per optimizer step")

  if est.total <= device.usable_bytes:  # the planner said it fits: its estimate was too low
    lines.insert(1, f"  that is below the {format_bytes(device.usable_bytes)} the device offers: "
                    f"something else holds memory, or the planner is optimistic for this setup")
    if effective > 1:
      lines.append(f"  - {same_effective(max(1, batch_size // 2))}, half the activations")
    if dtype == "float32" and device.kind == "gpu":
      lines.append("  - --gpu (mixed_float16) halves most activations")
    lines.append("  - --train_batch_size=auto with a smaller --device_memory_gb plans for less "
                 "memory")
    return "\n".join(lines)
  fit = max_batch_size(config, max_seq_length, device.usable_bytes, dtype, device.kind, "adamw",
                       max(2, accumulation_steps))
  if fit:
    lines.append(f"  - {same_effective(fit)} (the largest batch that fits is {fit})")
  else:
    lines.append(f"  - not even batch 1 fits at max_seq_length {max_seq_length}")
  seq = max_seq_length - 64
  while seq >= 64 and not fits(seq, batch_size, accumulation_steps):
    seq -= 64
  if seq >= 64:
    lines.append(f"  - --max_seq_length={seq} (preprocess/make_records.py) fits batch {batch_size}")
  if dtype == "float32":
    if device.kind == "gpu":
      mixed = max_batch_size(config, max_seq_length, device.usable_bytes, "mixed_float16",
                             device.kind, "adamw", accumulation_steps)
      lines.append(f"  - --gpu (mixed_float16) fits batch {mixed}")
    else:
      lines.append("  - on a GPU, --gpu (mixed_float16) halves most activations")
  lines.append("  - --train_batch_size=auto [--effective_batch_size=N] picks the batch and the "
               "accumulation steps itself")
  return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class HeadMemory:
  """Parameters and training bytes (float32 weights + gradients + Adam slots) of an output head."""
  name: str
  parameters: int
  weight_bytes: int
  with_slots_bytes: int  # weights + optimizer slots (x3 with AdamW)
  training_bytes: int    # weights + gradients + optimizer slots (x4 with AdamW)


def dense_head_memory(input_units, units, optimizer="adamw", name=None):
  """A Dense(`units`) over `input_units` features: (input_units + 1) x units parameters.

  A Dense(1604) softmax over a flattened [2 x 512 x 768] input (the head behind "OOM when
  allocating tensor with shape[786432,1604]") has 786432 x 1604 weights, 5.0 GB in float32, x3 with AdamW's two slots, x4 with the gradients too.
  """
  parameters = (input_units + 1) * units
  weight_bytes = 4 * parameters
  slots = OPTIMIZER_SLOTS[optimizer]
  return HeadMemory(name or f"Dense({units}) over {input_units} inputs", parameters, weight_bytes,
                    weight_bytes * (1 + slots), weight_bytes * (2 + slots))


def span_head_memory(hidden_size, optimizer="adamw"):
  """The span head: one Dense(2) applied to every token's hidden state, 2 x hidden + 2 parameters."""
  head = dense_head_memory(hidden_size, 2, optimizer)
  return dataclasses.replace(head, name=f"span head Dense(2) per token ({hidden_size} -> 2)")


def format_bytes(n):
  """1536 -> '1.5 KiB'; binary units (GPU and TensorFlow memory is counted in MiB/GiB)."""
  for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
    if abs(n) >= size:
      return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.1f} {unit}"
  return f"{int(n)} B"


def format_estimate(est, usable_bytes=None, config_name=""):
  """A multi-line breakdown of an `Estimate`, with a fit verdict when `usable_bytes` is given."""
  lines = [f"{config_name}seq {est.max_seq_length}, batch {est.batch_size}, {est.dtype}, "
           f"{est.optimizer}, {est.device}"
           + (f", counted as {est.program}" if est.program != THIS_TOOL.name else "")
           + (f", {est.accumulation_steps} accumulation steps" if est.accumulation_steps > 1 else "")]
  rows = [("weights", est.weights), ("weight casts (mixed precision)", est.weight_casts),
          ("gradients", est.gradients),
          (f"optimizer slots ({OPTIMIZER_SLOTS[est.optimizer]} per weight)", est.optimizer_slots),
          ("gradient accumulators", est.accumulators),
          ("early optimizer products", est.early_update), ("activations", est.activations)]
  rows += [(f"  {name}", value) for name, value in est.activation_groups.items()]
  peak = "backward" if est.backward_peak >= est.update_peak else "optimizer update"
  rows += [("logits and loss", est.logits), ("workspace", est.workspace),
           ("optimizer update workspace", est.update_workspace),
           (f"subtotal (peak: {peak})", est.subtotal),
           (f"allocator overhead x{est.overhead:g}", est.total - est.subtotal), ("total", est.total)]
  lines += [f"  {name:<34}{format_bytes(value):>12}" for name, value in rows
            if value or name == "total"]
  if usable_bytes is not None:
    verdict = "fits" if est.total <= usable_bytes else "does NOT fit"
    lines.append(f"  {verdict} in {format_bytes(usable_bytes)} usable")
  return "\n".join(lines)


def table_rows(configs, usable_bytes, dtype="float32", device="gpu", seq_lengths=TABLE_SEQ_LENGTHS,
               program=THIS_TOOL):
  """[(model name, seq, max batch)] for each config and sequence length (within its positions)."""
  return [(name, seq, max_batch_size(config, seq, usable_bytes, dtype, device, program=program))
          for name, config in configs.items() for seq in seq_lengths
          if seq <= config.max_position_embeddings]


def format_table(rows, header):
  width = max([len("model")] + [len(name) for name, _, _ in rows])
  lines = [f"{'model':<{width}}  {'seq':>4}  {header}"]
  lines += [f"{name:<{width}}  {seq:>4}  {batch}" for name, seq, batch in rows]
  return "\n".join(lines)


def flattened_dense_head_lines():
  """The flattened Dense(1604) head's arithmetic next to the span head's (`dense_head_memory`)."""
  dense = dense_head_memory(2 * 512 * 768, 1604, name="Dense(1604) over flattened [2, 512, 768]")
  span = span_head_memory(768)
  def size(n):  # decimal units, as the user's report ("5.0 GB")
    return f"{n / 1e9:.4g} GB" if n >= 1e6 else f"{n:,} bytes"
  return [f"{head.name}: {head.parameters:,} parameters = {size(head.weight_bytes)} float32 "
          f"weights, {size(head.with_slots_bytes)} with AdamW slots, {size(head.training_bytes)} "
          f"with gradients" for head in (dense, span)]


def main(argv):
  """`python -m model.memory`: a breakdown for one configuration, or the max-batch table."""
  del argv
  from absl import flags  # pylint: disable=g-import-not-at-top
  from squad_qa.model import bert_config as bert_config_lib  # pylint: disable=g-import-not-at-top
  FLAGS = flags.FLAGS  # pylint: disable=invalid-name
  try:
    if FLAGS.bert_config_file:
      path = os.path.abspath(FLAGS.bert_config_file)  # "folder/config.json": HF files share names
      configs = {os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path)):
                 bert_config_lib.BertConfig.from_json_file(FLAGS.bert_config_file)}
    else:
      configs = presets()
  except (FileNotFoundError, ValueError) as e:
    sys.exit(f"model.memory: {e}")
  dtype = FLAGS.dtype
  if FLAGS.device_memory_gb:
    device = device_from_flag(FLAGS.device_memory_gb)
  else:
    device = detect_device()
  short = SHORT_POLICY_NAMES[dtype]
  program = PROGRAMS[FLAGS.program]
  if program != THIS_TOOL and dtype != "float32":
    sys.exit(f"model.memory: --program={program.name} trained in float32 only (TensorFlow 1.11 "
             f"BERT had no mixed precision); drop --dtype={dtype}")
  output = {"device": dataclasses.asdict(device), "dtype": dtype, "program": program.name}
  text = [f"device: {device.description}; {dtype}; AdamW; allocator overhead "
          f"x{overhead_for(device.kind):g}"
          + (f"; counting {program.name}, not this tool" if program != THIS_TOOL else "")]
  if FLAGS.max_seq_length:
    output["estimates"] = []
    for name, config in configs.items():
      limit = max_batch_size(config, FLAGS.max_seq_length, device.usable_bytes, dtype, device.kind,
                             program=program)
      entry = {"model": name, "max_seq_length": FLAGS.max_seq_length, "max_batch_size": limit}
      if isinstance(FLAGS.train_batch_size, int):  # "auto" is the max batch printed below
        est = estimate(config, FLAGS.max_seq_length, FLAGS.train_batch_size, dtype, device.kind,
                       program=program)
        entry["estimate"] = est.to_dict()
        entry["fits"] = est.total <= device.usable_bytes
        text.append(format_estimate(est, device.usable_bytes, f"{name}: "))
      text.append(f"{name}: largest batch that fits at seq {FLAGS.max_seq_length}: {limit}")
      output["estimates"].append(entry)
  else:
    size = (f"{FLAGS.device_memory_gb:g} GB" if FLAGS.device_memory_gb
            else format_bytes(device.usable_bytes) + " usable")
    rows = table_rows(configs, device.usable_bytes, dtype, device.kind, program=program)
    output["table"] = [{"model": n, "max_seq_length": s, "max_batch_size": b} for n, s, b in rows]
    text.append(format_table(rows, f"max batch ({size}, {short})"))
    if not FLAGS.bert_config_file:
      text += ["", "output heads (the span head is what train.py uses):"]
      text += [f"  {line}" for line in flattened_dense_head_lines()]
  if FLAGS.format == "json":
    print(json.dumps(output, indent=2))
  else:
    print("\n".join(text))


def cli():
  """Console-script entry point: defines and parses the planner's flags and runs main()."""
  from squad_qa.flags import command_line  # pylint: disable=g-import-not-at-top
  from squad_qa.flags import definitions  # pylint: disable=g-import-not-at-top
  definitions.define_memory_flags()
  command_line.run(main)


if __name__ == "__main__":
  cli()
