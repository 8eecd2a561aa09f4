"""The byte formula: what one training step of the BERT span model holds, counted from first
principles, and the largest batch whose count fits a given number of bytes.

A first-principles count, not a fitted table. One training step of `train.py` (tfm `BertEncoder` +
`BertSpanLabeler`, tfm AdamW, TensorFlow 2 graph executor) holds the persistent state

  weights         4 B x all parameters (float32 variables, also under a mixed policy), pooler
                  included
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

Activations kept per example and per transformer layer, for sequence length s, hidden h,
FFN width i, heads a, compute dtype bytes c (4 float32, 2 mixed), float32 layer norms (f = 4, tfm
keeps them in float32) and 1-byte boolean dropout masks (`tf.nn.dropout` selects with
`where_v2(keep_mask, ...)`):

  layer input (read by the Q, K, V projections)        s h c
  Q (scaled), K, V (read by the two attention einsums) 3 s h c
  attention probabilities, softmax output              a s^2 c
  attention probabilities after dropout                a s^2 c      (if attention dropout > 0)
  attention context (input of the output projection)   s h c
  layer norms: input and 1/sigma broadcast, x 2       2 x 2 s h f  (tf.nn.batch_normalization:
                                                                     BERT's epsilon 1e-12 rules out
                                                                     the fused op)
  FFN input                                            s h c
  FFN intermediate [s, i]: GELU's kept tensors + its   g s i c      g = 5 for the tanh GELU (x^2,
  output (read by the second projection)                            tanh, x/2, 1 + tanh, output), 4
                                                                    for the erf GELU, 1 for ReLU
  dropout masks: attention probs, 2 hidden dropouts    (a s^2 + 2 s h) x 1 B
  plus the embeddings (layer norm 2 s h f, dropout mask s h) and the head input s h c.

For float32 BERT with the tanh GELU that is 42 s h + 20 s i + 9 a s^2 bytes per layer and example.
The layer-by-layer structure follows Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (2022, section 4.1: 34 s h + 5 a s^2 bytes per layer in 16-bit with 1-byte
masks), with the counts changed to what TensorFlow's gradient functions actually keep for tfm's
layers (float32 layer norms, a multi-op GELU). Weights, gradients and two Adam moments per parameter
are the usual "model memory anatomy" (e.g. Hugging Face's performance guide,
Rajbhandari et al., ZeRO, 2020).

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

Checked on TensorFlow's real executor (`benchmarks/memory.py --mode=google_tf1` rebuilds that
program op for op in TF1 graph mode and reads the allocator's peak over training steps): BERT-Base
at 32 tokens x 2 peaks at 3092 MiB against 3088 counted (1843 without the early products), at 128 x
8 at 4009 against 4095; MiniLM-L6 at 128 x 16 at 1463 against 1330.

The allocator overhead that multiplies the count, and how much of a device TensorFlow may use, are
in model/memory/device.py; the count against google-research/bert's table in model/memory/plan.py.
`benchmarks/memory.py --mode=cpu` compares this tool's count with measured CPU training steps.
"""

import dataclasses
import math

from squad_qa.model.memory import device as memory_device

# Compute dtype bytes per policy: (most activations, the FFN activation layer). tfm computes the FFN
# activation in float32 under mixed_bfloat16 (TransformerEncoderBlock: "bfloat16 causes BERT ... to
# not converge as well, so we use float32").
POLICIES = {"float32": (4, 4), "mixed_float16": (2, 2), "mixed_bfloat16": (2, 4)}
SHORT_POLICY_NAMES = {"float32": "fp32", "mixed_float16": "fp16", "mixed_bfloat16": "bf16"}
OPTIMIZER_SLOTS = {"adamw": 2, "adam": 2, "lamb": 2, "momentum": 1, "sgd": 0}
LAYER_NORM_BYTES = 4  # tfm's layer norms run in float32 under every policy
MASK_BYTES = 1  # tf.nn.dropout keeps a boolean keep-mask

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
  embeddings: int  # word + position + token type tables and their layer norm
  per_layer: int  # one transformer layer
  layer_kernels: int  # the six projection kernels of one layer (cast under mixed precision)
  num_layers: int
  pooler: int  # built by tfm's BertEncoder, not trained by the span head
  head: int  # the span head: Dense(2) over every token, 2 * hidden + 2

  @property
  def trained(self):
    """Parameters the span model's optimizer updates: all but the pooler."""
    return self.embeddings + self.num_layers * self.per_layer + self.head

  @property
  def total(self):
    """Every parameter the model holds, the untrained pooler included."""
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
  s, h, i, a = (max_seq_length, config.hidden_size, config.intermediate_size,
                config.num_attention_heads)
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
      "dropout masks": program.mask_bytes * ((a * s * s if attention_dropout else 0) +
                                             (2 * s * h if hidden_dropout else 0)),
  }


@dataclasses.dataclass(frozen=True)
class Estimate:
  """Estimated peak training memory, in bytes, of one configuration.

  A step has two peaks: the start of the backward pass (activations, workspace, logits and the
  gradients, all of them counted although the first gradients appear as the last activations go)
  and the optimizer update (gradients + `update_workspace`). `subtotal` is the persistent part
  (weights, casts, slots, accumulators, early optimizer products) plus the larger peak; `total` =
  `subtotal` x `overhead` (the allocator's, see model/memory/device.py) is what is compared with the
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
  early_update: int  # optimizer products held from the step's start (GOOGLE_RESEARCH_TF1)
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
    return (self.weights + self.weight_casts + self.optimizer_slots + self.accumulators +
            self.early_update)

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
    """The fields and the derived totals (bytes), as `python -m model.memory --format=json`."""
    values = dataclasses.asdict(self)
    values.update(subtotal=self.subtotal, total=self.total, backward_peak=self.backward_peak,
                  update_peak=self.update_peak, step_bytes=self.step_bytes)
    return values


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
  overhead = memory_device.overhead_for(device)
  c = POLICIES[dtype][0]
  counts = count_parameters(config)
  s, b, h = max_seq_length, batch_size, config.hidden_size
  layers = config.num_hidden_layers
  per_layer = layer_activation_bytes(config, s, dtype, program)
  groups = {name: b * layers * value for name, value in per_layer.items()}
  hidden_dropout = config.hidden_dropout_prob > 0
  groups["embeddings"] = b * (2 * s * h * LAYER_NORM_BYTES +
                              (program.mask_bytes * s * h if hidden_dropout else 0))
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
      max_seq_length=s,
      batch_size=b,
      dtype=dtype,
      device=device,
      optimizer=optimizer,
      accumulation_steps=accumulation_steps,
      weights=4 * counts.total,
      weight_casts=2 * counts.layer_kernels * layers if mixed else 0,
      gradients=gradients,
      optimizer_slots=4 * counts.trained * OPTIMIZER_SLOTS[optimizer],
      # The float32 sums, plus the word-embedding gradient made dense to be added to them.
      accumulators=(4 * (counts.trained + config.vocab_size * h) if accumulation_steps > 1 else 0),
      # Weight decay skips LayerNorm and bias parameters (optimization.py's exclude list).
      early_update=(program.early_moment_bytes * counts.trained +
                    program.early_decay_bytes * decayed_parameters(config)),
      activations=sum(groups.values()),
      activation_groups=groups,
      # float32 start/end logits [b, s], their casts and softmax cross-entropy buffers.
      logits=b * s * 2 * 4 * 3,
      workspace=b * workspace_per_example + b * s * s * c,
      # AdamW's update of the word embeddings from a sparse gradient (legacy Adam's
      # _resource_apply_sparse: m * beta_1, v * beta_2, sqrt(v), ... each a dense temporary of the
      # table) and the weight-decay op (lr * var * rate): ~3 tables alive at once.
      update_workspace=3 * 4 * word_embeddings,
      overhead=overhead,
      program=program.name)


def max_batch_size(config, max_seq_length, usable_bytes, dtype="float32", device="gpu",
                   optimizer="adamw", accumulation_steps=1, limit=1 << 20, program=THIS_TOOL):
  """The largest batch whose `estimate(...).total` fits in `usable_bytes`; 0 if not even one.

  Args:
    usable_bytes: memory the framework may allocate (see `device.usable_gpu_bytes`), in bytes.
    limit: the answer is capped here (a CPU with lots of RAM would otherwise say millions).
    Other arguments as `estimate`.

  Returns:
    An int >= 0.
  """

  def fits(batch):
    return estimate(config, max_seq_length, batch, dtype, device, optimizer, accumulation_steps,
                    program).total <= usable_bytes

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
