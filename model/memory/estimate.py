"""The byte formula: what one training step of the BERT span model holds, counted from first
principles (no fitted factor), and the largest batch whose count fits a given number of bytes.
The formula per tensor and its sources: docs/memory.md "The byte formula"."""

import dataclasses
import math

from squad_qa.model.memory import device as memory_device

# Compute dtype bytes per policy: (most activations, the FFN activation); tfm's
# TransformerEncoderBlock keeps the FFN activation float32 under mixed_bfloat16.
POLICIES = {"float32": (4, 4), "mixed_float16": (2, 2), "mixed_bfloat16": (2, 4)}
SHORT_POLICY_NAMES = {"float32": "fp32", "mixed_float16": "fp16", "mixed_bfloat16": "bf16"}
OPTIMIZER_SLOTS = {"adamw": 2, "adam": 2, "lamb": 2, "momentum": 1, "sgd": 0}
LAYER_NORM_BYTES = 4  # tfm's layer norms run in float32 under every policy
# tf.nn.dropout keeps a boolean keep-mask. The XLA train step keeps none, but about as many bytes of
# other tensors (docs/memory.md "How the CPU benchmark measures"): the count keeps the masks.
MASK_BYTES = 1

# The float32 prediction copy after mixed-precision training, per parameter (weights and pooler):
# the NumPy arrays of `get_weights` while the copy is built. Measured with `/usr/bin/time -v` and
# VmHWM on train.py runs of MiniLM-L6 (22.7 M parameters, 86.6 MiB) under mixed_bfloat16 at seq 128:
# the peak resident set rose 93, 96 and 92 MiB above training's when the copy was made (batch 4 for
# 80 and 240 steps, 8 x 2 accumulated for 60), 74 MiB with 2 mirrored CPU replicas (one NumPy copy
# for both; docs/memory.md "The process on the CPU").
PREDICTION_COPY_BYTES_PER_PARAMETER = 4

# [s, i] tensors the backward pass keeps per FFN activation, its output included.
_ACTIVATION_KEPT = {"gelu_tanh": 5, "gelu_exact": 4, "relu": 1}


@dataclasses.dataclass(frozen=True)
class Program:
  """The facts of a training program that the count depends on beyond the model.

  Attributes:
    name: for messages and --program.
    mask_bytes: bytes per kept dropout-mask element.
    gelu_kept: [s, i] tensors the FFN activation keeps; None: `_ACTIVATION_KEPT` of the config's.
    early_moment_bytes: bytes per trained parameter of beta_1 * m, beta_2 * v, held from the
      step's start until the gradients arrive.
    early_decay_bytes: the same per weight-decayed parameter (weight_decay_rate * param).
  """
  name: str
  mask_bytes: int
  gelu_kept: object
  early_moment_bytes: int
  early_decay_bytes: int


THIS_TOOL = Program("tfm", mask_bytes=MASK_BYTES, gelu_kept=None, early_moment_bytes=0,
                    early_decay_bytes=0)
# google-research/bert modeling.py + optimization.py under TensorFlow 1.11.
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
  """`ParameterCounts` of tfm's BertEncoder (+ pooler) + Dense(2) span head for a BertConfig."""
  h, i = config.hidden_size, config.intermediate_size
  embeddings = (config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h
  embeddings += 2 * h  # embedding layer norm
  kernels = 4 * h * h + 2 * h * i
  per_layer = kernels + 4 * h + i + h + 2 * 2 * h  # + q, k, v, output, FFN biases, 2 layer norms
  return ParameterCounts(embeddings=embeddings, per_layer=per_layer, layer_kernels=kernels,
                         num_layers=config.num_hidden_layers, pooler=h * h + h, head=2 * h + 2)


def decayed_parameters(config):
  """Parameters AdamW decays: all trained ones but LayerNorm and biases (tfm's exclusions)."""
  counts, h = count_parameters(config), config.hidden_size
  tables = counts.embeddings - 2 * h  # the embedding tables without their layer norm
  return tables + counts.num_layers * counts.layer_kernels + 2 * h  # + the span head's kernel


def _activation_kind(config):
  if config.hidden_act == "gelu":
    return "gelu_exact" if config.exact_gelu else "gelu_tanh"
  return config.hidden_act


def layer_activation_bytes(config, max_seq_length, dtype="float32", program=THIS_TOOL):
  """{tensor group: bytes} one transformer layer keeps for the backward pass, per example of
  `max_seq_length` tokens, under policy `dtype` (a key of POLICIES)."""
  c, c_act = POLICIES[dtype]
  s, h, i, a = (max_seq_length, config.hidden_size, config.intermediate_size,
                config.num_attention_heads)
  attention_dropout = config.attention_probs_dropout_prob > 0
  hidden_dropout = config.hidden_dropout_prob > 0
  kept = program.gelu_kept or _ACTIVATION_KEPT.get(_activation_kind(config), 4)
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
  """Estimated peak training memory, in bytes: one replica's tensors, `replica_total` = (persistent
  part + the larger of the backward and update peaks) x the allocator `overhead`; `total` =
  `replicas` x that + `process` (the training process itself where it shares the device's memory:
  `device.process_bytes`) + `prediction_copy` (the float32 copy of the weights that train.py
  predicts with after training under a mixed policy, on the CPU)."""
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
  replicas: int = 1  # replicas whose tensors share the device's memory (CPU devices)
  process: int = 0  # the process's own bytes on the device (the CPU's RAM), once
  prediction_copy: int = 0  # the float32 prediction copy's bytes on the CPU, once

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
  def replica_total(self):
    """One replica's tensors at their peak, x `overhead` (bytes)."""
    return int(math.ceil(self.subtotal * self.overhead))

  @property
  def total(self):
    """What the device must hold (bytes): `replicas` x `replica_total` + `process` +
    `prediction_copy`."""
    return self.replicas * self.replica_total + self.process + self.prediction_copy

  @property
  def step_bytes(self):
    """What one training step allocates and frees at its peak, x `overhead`."""
    return int(math.ceil(max(self.backward_peak, self.update_peak) * self.overhead))

  def to_dict(self):
    """The fields and the derived totals (bytes), as `python -m model.memory --format=json`."""
    values = dataclasses.asdict(self)
    values.update(subtotal=self.subtotal, replica_total=self.replica_total, total=self.total,
                  backward_peak=self.backward_peak, update_peak=self.update_peak,
                  step_bytes=self.step_bytes)
    return values


def estimate(config, max_seq_length, batch_size, dtype="float32", device="gpu", optimizer="adamw",
             accumulation_steps=1, program=THIS_TOOL, replicas=1, predicts=False):
  """The `Estimate` of one training step of the span model.

  Args:
    config: a `model.bert_config.BertConfig`.
    max_seq_length: tokens per example.
    batch_size: examples per forward/backward pass (the micro-batch under accumulation).
    dtype: a key of `POLICIES` (the Keras dtype policy).
    device: "gpu" or "cpu" (the allocator overhead).
    optimizer: a key of `OPTIMIZER_SLOTS`.
    accumulation_steps: micro-batches per optimizer step.
    program: the `Program` counted: `THIS_TOOL` (train.py) or `GOOGLE_RESEARCH_TF1`.
    replicas: replicas training on the device. Logical CPU devices share the host's RAM, each
      with its own weights, slots and activations: on "cpu" the total counts `replicas` of them
      and one process (`device.process_bytes`). Each GPU has its own memory: on "gpu" the total
      is one replica's, whatever `replicas` is.
    predicts: whether train.py predicts after training (`--do_predict`, its default). Under a
      mixed policy it predicts with a float32 copy of the model, built from a NumPy copy of the
      weights (`get_weights`) outside TensorFlow's pool: on "cpu" the total adds 4 B x all
      parameters, once (`PREDICTION_COPY_BYTES_PER_PARAMETER`). On "gpu" the copy's variables take
      memory the training step freed, and the NumPy copy is in host RAM: nothing is added.

  Raises:
    ValueError: unknown dtype, device or optimizer, or a non-positive size.
  """
  if dtype not in POLICIES:
    raise ValueError(f"dtype must be one of {', '.join(POLICIES)}, not {dtype!r}")
  if optimizer not in OPTIMIZER_SLOTS:
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_SLOTS)}, not {optimizer!r}")
  if max_seq_length < 1 or batch_size < 0 or accumulation_steps < 1 or replicas < 1:
    raise ValueError("max_seq_length, accumulation_steps and replicas must be >= 1, batch_size "
                     ">= 0")
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
    # float32 copies of an FFN projection's float16 operands for exact weight gradients.
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
      # AdamW's sparse update of the word embeddings: ~3 dense temporaries of the table at once.
      update_workspace=3 * 4 * word_embeddings,
      overhead=overhead,
      program=program.name,
      replicas=replicas if device == "cpu" else 1,
      process=memory_device.process_bytes(device, replicas),
      prediction_copy=(PREDICTION_COPY_BYTES_PER_PARAMETER *
                       counts.total if predicts and mixed and device == "cpu" else 0))


# The largest batch `max_batch_size` tries: a batch this large fits only in an absurd memory size.
BATCH_SEARCH_LIMIT = 1 << 20
AUTO_BATCH_MARGIN = 0.9  # --train_batch_size=auto plans with 90 % of the usable memory


def max_batch_size(config, max_seq_length, usable_bytes, *args, limit=BATCH_SEARCH_LIMIT, **kwargs):
  """The largest batch (an int >= 0, at most `limit`) whose `estimate(...).total` fits in
  `usable_bytes`; `args` and `kwargs` are `estimate`'s after the batch size (dtype, device, ...).
  """

  def fits(batch):
    return estimate(config, max_seq_length, batch, *args, **kwargs).total <= usable_bytes

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


def auto_split(config, max_seq_length, effective_batch_size, usable_bytes, dtype, device,
               replicas=1, predicts=False):
  """--train_batch_size=auto's split of `effective_batch_size` features per optimizer step:
  (micro_batch_size, accumulation_steps) for the fewest equal passes whose micro-batch (with its
  float32 accumulators from 2 passes on) fits in `AUTO_BATCH_MARGIN` of `usable_bytes`, or None
  when not even passes of 1 fit. The other arguments are `estimate`'s (AdamW).
  """
  budget = int(usable_bytes * AUTO_BATCH_MARGIN)
  for steps in range(1, effective_batch_size + 1):
    if effective_batch_size % steps:
      continue
    micro = effective_batch_size // steps
    if micro <= max_batch_size(config, max_seq_length, budget, dtype, device, "adamw", steps,
                               replicas=replicas, predicts=predicts, limit=micro):
      return micro, steps
  return None
