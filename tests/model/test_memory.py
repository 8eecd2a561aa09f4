"""The memory planner (model/memory/) and train.py's use of it: google-research/bert's measured
table, the flattened Dense(1604) head, batch planning, exact gradient accumulation, the pre-flight
check, OOM."""

import json
import os
import re
import resource
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import float32_gradients
from squad_qa import errors
from squad_qa.base import commands
from squad_qa.flags import settings
from squad_qa.model.memory import device as memory_device
from squad_qa.model.memory import diagnose
from squad_qa.model.memory import estimate
from squad_qa.model.memory import heads
from squad_qa.model.memory import plan as memory_plan
from squad_qa.model import span_model
from squad_qa.tasks import optimization
from squad_qa.tasks import question_answering
from squad_qa.tasks import model_dir as model_dir_lib
from squad_qa.tasks import run_plan
from squad_qa.tasks import trainer as trainer_lib
from tests import testutil

GIB = memory_device.GIB

# google-research/bert README, "Out-of-memory issues": the largest batch that fit a 12 GB Titan X
# with TensorFlow 1.11, float32, Adam.
GOOGLE_TABLE = {
    ("BERT-Base", 64): 64,
    ("BERT-Base", 128): 32,
    ("BERT-Base", 256): 16,
    ("BERT-Base", 320): 14,
    ("BERT-Base", 384): 12,
    ("BERT-Base", 512): 6,
    ("BERT-Large", 64): 12,
    ("BERT-Large", 128): 6,
    ("BERT-Large", 256): 2,
    ("BERT-Large", 320): 1,
    ("BERT-Large", 384): 0,
    ("BERT-Large", 512): 0
}
# What the planner answers for these cells, counting the program that produced them
# (estimate.GOOGLE_RESEARCH_TF1), and for this tool; pinned so that a change to the count is
# deliberate.
TF1_PLANNER_TABLE = {
    ("BERT-Base", 64): 111,
    ("BERT-Base", 128): 50,
    ("BERT-Base", 256): 21,
    ("BERT-Base", 320): 16,
    ("BERT-Base", 384): 12,
    ("BERT-Base", 512): 8,
    ("BERT-Large", 64): 11,
    ("BERT-Large", 128): 5,
    ("BERT-Large", 256): 2,
    ("BERT-Large", 320): 1,
    ("BERT-Large", 384): 1,
    ("BERT-Large", 512): 0
}
PLANNER_TABLE = {
    ("BERT-Base", 64): 121,
    ("BERT-Base", 128): 57,
    ("BERT-Base", 256): 25,
    ("BERT-Base", 320): 19,
    ("BERT-Base", 384): 15,
    ("BERT-Base", 512): 10,
    ("BERT-Large", 64): 29,
    ("BERT-Large", 128): 13,
    ("BERT-Large", 256): 6,
    ("BERT-Large", 320): 4,
    ("BERT-Large", 384): 3,
    ("BERT-Large", 512): 2
}


def table_lower_bounds(table):
  """{cell: the smallest true maximum batch the cell can have, given the longer cells of its model}.

  A batch of b examples of s tokens that fits means that b * s // s' examples of s' < s tokens fit
  too, for any count whose per-example memory is linear plus quadratic in s (every kept tensor is
  linear in s or, attention's, quadratic; no per-example term is independent of s): per-token
  memory does not rise as sequences get shorter, and weights, moments and gradients do not
  depend on s.
  """
  bounds = {}
  for (name, seq), _batch in table.items():
    longer = [b * s // seq for (n, s), b in table.items() if n == name and s >= seq]
    bounds[(name, seq)] = max(longer)
  return bounds


def tiny_config(**overrides):
  return bert_config_lib.BertConfig.from_dict(dict(testutil.TINY_BERT_CONFIG, **overrides))


@pytest.fixture
def float32_policy_after():
  yield
  tf_keras.mixed_precision.set_global_policy("float32")


def test_parameter_counts_match_the_models():
  # The tfm model itself (tiny config) and Hugging Face's published counts of BertModel
  # (encoder + pooler): bert-base-uncased 109,482,240, bert-large-uncased 335,141,888.
  config = tiny_config()
  model, _ = span_model.build_span_model(config)
  counts = estimate.count_parameters(config)
  assert counts.total == model.count_params()
  assert counts.trained == sum(
      int(np.prod(v.shape)) for v in question_answering.trained_variables(model))
  presets = estimate.presets()
  base, large = (estimate.count_parameters(presets[n]) for n in ("BERT-Base", "BERT-Large"))
  assert base.total - base.head == 109_482_240
  assert large.total - large.head == 335_141_888
  assert base.head == 2 * 768 + 2


def test_layer_activation_bytes_by_hand():
  base = estimate.presets()["BERT-Base"]  # tanh GELU, dropout 0.1
  s, h, i, a = 128, 768, 3072, 12
  fp32 = estimate.layer_activation_bytes(base, s, "float32")
  # 42 s h + 20 s i + 9 a s^2 bytes (module docstring).
  assert sum(fp32.values()) == 42 * s * h + 20 * s * i + 9 * a * s * s == 13_762_560
  assert fp32["attention probs"] == 2 * a * s * s * 4
  assert fp32["FFN intermediate"] == 5 * s * i * 4
  fp16 = estimate.layer_activation_bytes(base, s, "mixed_float16")
  # Layer norms stay float32 (16 s h), the rest halves, masks stay 1 byte.
  assert sum(fp16.values()) == 30 * s * h + 10 * s * i + 5 * a * s * s == 7_864_320
  # The erf GELU of Hugging Face configs keeps one tensor fewer; no dropout drops the masks.
  exact = dataclass_replace(base, exact_gelu=True, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
  exact_bytes = estimate.layer_activation_bytes(exact, s, "float32")
  assert exact_bytes["FFN intermediate"] == 4 * s * i * 4
  assert exact_bytes["dropout masks"] == 0
  assert exact_bytes["attention probs"] == a * s * s * 4


def dataclass_replace(config, **changes):
  import dataclasses  # pylint: disable=g-import-not-at-top
  return dataclasses.replace(config, **changes)


dataclasses_replace = dataclass_replace


def test_google_research_12_gb_table():
  """google-research/bert's measured table against the count of its own program (TF1 run_squad.py).

  8 of the 12 cells are within the issue's max(1, 25 %). Of the 4 others, BERT-Base at 64, 128
  and 256 tokens are not maxima of such a count: the table's own 384-token cell (12 x 384 = 4608
  tokens fit) implies at least 72, 36 and 18 (`table_lower_bounds`), while the table says 64, 32,
  16 (4096 / s each, what a search by halving returns); the planner says more than both.
  BERT-Base at 512 misses by one beyond the tolerance: 8 against 6 (7 would be within).
  """
  usable = memory_device.usable_gpu_bytes(12 * GIB)
  assert usable / GIB == pytest.approx(11.1, abs=0.01)  # "about 11 GB" of the Titan X
  rows = memory_plan.table_rows(estimate.presets(), usable, "float32", "gpu",
                                program=estimate.GOOGLE_RESEARCH_TF1)
  predicted = {(name, seq): batch for name, seq, batch in rows}
  assert predicted == TF1_PLANNER_TABLE
  within = {
      cell for cell, measured in GOOGLE_TABLE.items()
      if abs(predicted[cell] - measured) <= max(1, 0.25 * measured)
  }
  assert within == {
      cell for cell in GOOGLE_TABLE if cell[0] == "BERT-Large" or cell[1] in (320, 384)
  }
  bounds = table_lower_bounds(GOOGLE_TABLE)
  assert ([bounds[("BERT-Base", s)] for s in memory_plan.TABLE_SEQ_LENGTHS
          ] == [72, 36, 18, 14, 12, 6])
  for seq in (64, 128, 256):
    cell = ("BERT-Base", seq)
    assert bounds[cell] > GOOGLE_TABLE[cell] and predicted[cell] >= bounds[cell]
  # This tool keeps 1-byte masks and no early products: more fits, above all for BERT-Large.
  ours = {
      (n, s): b for n, s, b in memory_plan.table_rows(estimate.presets(), usable, "float32", "gpu")
  }
  assert ours == PLANNER_TABLE


def test_early_optimizer_products_explain_bert_large():
  """google-research's AdamWeightDecayOptimizer holds beta_1 * m, beta_2 * v (and decay * param
  but for LayerNorm and biases) through the step: with them all six BERT-Large cells are within
  max(1, 25 %), without them none is."""
  large = estimate.presets()["BERT-Large"]
  usable = memory_device.usable_gpu_bytes(12 * GIB)
  tf1 = estimate.estimate(large, 384, 1, program=estimate.GOOGLE_RESEARCH_TF1)
  counts = estimate.count_parameters(large)
  assert tf1.early_update == 8 * counts.trained + 4 * estimate.decayed_parameters(large)
  assert counts.trained - estimate.decayed_parameters(large) == 24 * (4 * 1024 + 4096 + 1024 +
                                                                      4 * 1024) + 2 * 1024 + 2
  assert tf1.early_update / GIB == pytest.approx(3.73, abs=0.01)
  assert tf1.total / usable == pytest.approx(0.96, abs=0.005)  # batch 1 at 384: 96 % of 11.1 GiB
  without = dataclasses_replace(estimate.GOOGLE_RESEARCH_TF1, name="no_early", early_moment_bytes=0,
                                early_decay_bytes=0)
  rows = {
      p.name: {
          s: b for _, s, b in memory_plan.table_rows({"BERT-Large": large}, usable, "float32",
                                                     "gpu", program=p)
      } for p in (estimate.GOOGLE_RESEARCH_TF1, without)
  }
  measured = {s: b for (n, s), b in GOOGLE_TABLE.items() if n == "BERT-Large"}
  assert rows["google_research_tf1"] == {64: 11, 128: 5, 256: 2, 320: 1, 384: 1, 512: 0}
  assert rows[without.name] == {64: 31, 128: 14, 256: 6, 320: 4, 384: 3, 512: 2}
  assert all(abs(rows[without.name][s] - b) > max(1, 0.25 * b) for s, b in measured.items())
  # Per layer and example: 48 s h + 16 s i + 12 a s^2 bytes (float32 masks, 4-tensor GELU).
  s, h, i, a = 384, 1024, 4096, 16
  assert sum(
      estimate.layer_activation_bytes(
          large, s, "float32",
          estimate.GOOGLE_RESEARCH_TF1).values()) == 48 * s * h + 16 * s * i + 12 * a * s * s


@pytest.mark.slow
def test_google_tf1_count_matches_its_graph():
  """The TF1 program rebuilt op for op (benchmarks/memory.py --mode=google_tf1), run in graph mode:
  the allocator's peak is the count, not the count without the early products (MiniLM-L6 size,
  64 tokens x 4, where the 22.7 M parameters dominate)."""
  proc = subprocess.run([
      sys.executable, "-m", "benchmarks.memory", "--child", "--mode=google_tf1", "--model=minilm",
      "--seq=64", "--batch=4"
  ], env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), cwd=testutil.REPO, capture_output=True,
                        text=True, check=True, timeout=600)
  result = json.loads([l for l in proc.stdout.splitlines() if l.startswith("{")][-1])
  assert result["status"] == "OK"
  assert 0.9 <= result["peak"] / result["count"] <= 1.15  # measured 1.05
  assert result["peak"] / result["count_without_early"] > 1.4  # measured 1.67


def test_max_batch_size_is_the_boundary():
  base = estimate.presets()["BERT-Base"]
  usable = memory_device.usable_gpu_bytes(16 * GIB)
  for dtype in estimate.POLICIES:
    batch = estimate.max_batch_size(base, 384, usable, dtype)
    assert estimate.estimate(base, 384, batch, dtype).total <= usable
    assert estimate.estimate(base, 384, batch + 1, dtype).total > usable
  large = estimate.presets()["BERT-Large"]
  assert estimate.max_batch_size(large, 512, memory_device.usable_gpu_bytes(4 * GIB)) == 0


def test_flattened_dense_head_against_the_span_head():
  # The user's head: Dense(1604) over a flattened [2, 512, 768] input.
  dense = heads.dense_head_memory(2 * 512 * 768, 1604)
  assert 2 * 512 * 768 == 786432
  assert dense.parameters == 786432 * 1604 + 1604 == 1_261_438_532
  assert dense.weight_bytes == 5_045_754_128  # 4.70 GiB in float32
  assert dense.with_slots_bytes == 3 * dense.weight_bytes  # 14.10 GiB with Adam's two slots
  span = heads.span_head_memory(768)
  assert span.parameters == 2 * 768 + 2 == 1538
  assert span.weight_bytes == 6152 and span.with_slots_bytes == 18456
  lines = heads.flattened_dense_head_lines()
  assert lines[0] == ("Dense(1604) over flattened [2, 512, 768]: 1,261,438,532 parameters = "
                      "4.70 GiB float32 weights, 14.10 GiB with AdamW slots, 18.80 GiB with "
                      "gradients")
  assert "1,538 parameters" in lines[1]
  # BERT-Base on a 16 GB P100 at max_seq_length 384.
  base = estimate.presets()["BERT-Base"]
  p100 = memory_device.usable_gpu_bytes(16 * GIB)
  assert p100 / GIB == pytest.approx(14.9, abs=0.01)
  assert estimate.max_batch_size(base, 384, p100, "float32") == 21
  assert estimate.max_batch_size(base, 384, p100, "mixed_float16") == 36


def test_plan_batches():
  config = tiny_config()
  roomy = memory_device.Device("gpu", 16 * GIB, "test GPU")
  plan = memory_plan.plan_batches(config, 128, "float32", roomy, 16)
  assert (plan.micro_batch_size, plan.accumulation_steps, plan.effective_batch_size) == (16, 1, 16)
  plan = memory_plan.plan_batches(config, 128, "float32", roomy, 8, effective_batch_size=32)
  assert (plan.micro_batch_size, plan.accumulation_steps) == (8, 4)
  plan = memory_plan.plan_batches(config, 128, "float32", roomy, 8, gradient_accumulation_steps=3)
  assert plan.effective_batch_size == 24
  # auto: everything fits, so one pass of the wanted effective batch (default 32).
  plan = memory_plan.plan_batches(config, 128, "float32", roomy, "auto")
  assert (plan.micro_batch_size, plan.accumulation_steps) == (32, 1)
  # auto on a device where only a few features fit: the fewest equal passes that fit.
  base = estimate.presets()["BERT-Base"]
  gpu = memory_device.device_from_flag(12)
  fit = estimate.max_batch_size(base, 384, int(gpu.usable_bytes * estimate.AUTO_BATCH_MARGIN),
                                accumulation_steps=2)
  assert fit == 12
  plan = memory_plan.plan_batches(base, 384, "float32", gpu, "auto", effective_batch_size=64)
  # 64 = 8 passes of 8: 12 fits, but 64 is not 6 or 7 equal passes.
  assert (plan.micro_batch_size, plan.accumulation_steps, plan.effective_batch_size) == (8, 8, 64)
  assert plan.estimate.total <= gpu.usable_bytes * estimate.AUTO_BATCH_MARGIN
  assert plan.estimate.accumulators > 0
  with pytest.raises(memory_plan.MemoryPlanError) as raised:
    memory_plan.plan_batches(config, 128, "float32", roomy, 8, effective_batch_size=20)
  assert str(
      raised.value) == ("--effective_batch_size=20 is not a multiple of --train_batch_size=8 "
                        "(a step accumulates whole batches): use --effective_batch_size=16 or "
                        "24, a --train_batch_size that divides 20, or --train_batch_size=auto")
  with pytest.raises(memory_plan.MemoryPlanError,
                     match="use --effective_batch_size=8, a"):  # below a batch
    memory_plan.plan_batches(config, 128, "float32", roomy, 8, effective_batch_size=5)
  with pytest.raises(memory_plan.MemoryPlanError, match="is not --train_batch_size=8 x"):
    memory_plan.plan_batches(config, 128, "float32", roomy, 8, effective_batch_size=32,
                             gradient_accumulation_steps=2)  # three that disagree
  with pytest.raises(memory_plan.MemoryPlanError, match="--effective_batch_size instead"):
    memory_plan.plan_batches(config, 128, "float32", roomy, "auto", gradient_accumulation_steps=2)
  tiny_gpu = memory_device.Device("gpu", 256 * 2**20, "256 MiB GPU")
  with pytest.raises(memory_plan.MemoryPlanError, match="not even one feature fits"):
    memory_plan.plan_batches(estimate.presets()["BERT-Large"], 512, "float32", tiny_gpu, "auto")


def test_auto_names_a_nearby_effective_batch_when_its_split_runs_tiny_passes():
  """BERT-Base at 384 on a 12 GB GPU fits passes of 12 with accumulation: "auto" runs a prime 37
  as 37 passes of 1 (the documented rule) and says that 36 runs 12 x 3; 64 (8 x 8) and 36 get no
  hint, nor does an effective batch that fits in one pass."""
  base = estimate.presets()["BERT-Base"]
  gpu = memory_device.device_from_flag(12)

  def hint(effective, replicas=1):
    plan = memory_plan.plan_batches(base, 384, "float32", gpu, "auto",
                                    effective_batch_size=effective)
    return plan, memory_plan.auto_split_hint(base, 384, "float32", gpu, plan, replicas)

  plan, text = hint(37)
  assert (plan.micro_batch_size, plan.accumulation_steps) == (1, 37)
  assert text == ("--effective_batch_size=37 splits only into 37 passes of 1 (up to 12 fit in a "
                  "pass); --effective_batch_size=36 runs 12 features per pass x 3")
  assert hint(37, replicas=2)[1].startswith("--effective_batch_size=74 splits only into 37 passes")
  assert "--effective_batch_size=72 runs 12" in hint(37, replicas=2)[1]
  assert [hint(effective)[1] for effective in (64, 36, 12, 5)] == ["", "", "", ""]
  config = memory_plan.PlannerConfig(max_seq_length=384, gpu=True, device_memory_gb=12,
                                     mixed_precision_dtype="float32", train_batch_size="auto",
                                     effective_batch_size=37, bert_config_file=None)
  assert ("runs 1 features per pass x 37 accumulation steps = 37 per optimizer step; "
          "--effective_batch_size=37 splits only") in memory_plan.report(config)


def test_diagnosis_names_the_fixes():
  base = estimate.presets()["BERT-Base"]
  gpu = memory_device.device_from_flag(12)
  message = diagnose.diagnosis(base, 384, 32, "float32", gpu)
  est = estimate.estimate(base, 384, 32)
  first = message.splitlines()[0]
  assert first == (f"the configuration does not fit in memory: estimated peak "
                   f"{memory_device.format_bytes(est.total)} for batch 32 x seq 384 (float32); "
                   f"device: "
                   f"12 GiB GPU (11.1 GiB usable)")
  assert estimate.max_batch_size(base, 384, gpu.usable_bytes, accumulation_steps=2) == 14
  # 14 fits; the fewest passes of at most 14 that make 32 are 4 of 8.
  assert ("--train_batch_size=8 --gradient_accumulation_steps=4: the same 32 features per "
          "optimizer step (the largest batch that fits with accumulation is 14)") in message
  assert estimate.max_batch_size(base, 384, gpu.usable_bytes) == 15  # no accumulators
  assert "--train_batch_size=15: the largest batch that fits without accumulation" in message
  # 23 splits only into 23 passes of 1: not named; the batch that fits in one pass is.
  prime = diagnose.diagnosis(base, 384, 23, "float32", gpu)
  assert "--gradient_accumulation_steps" not in prime
  assert "--train_batch_size=15: the largest batch that fits without accumulation" in prime
  assert estimate.max_batch_size(base, 256, gpu.usable_bytes, limit=32) < 32  # so 192, not 256
  assert "--max_seq_length=192 (squad-qa-records) fits batch 32" in message
  assert "--gpu (mixed_float16) fits batch 25" in message
  assert "--train_batch_size=auto" in message


def test_auto_says_why_it_found_no_split_and_names_fixes_that_run():
  """"auto" plans within AUTO_BATCH_MARGIN (90 %) of the memory, and splitting into passes adds the
  float32 accumulators: a batch that fits the whole memory can find no plan. The refusal names
  the margin, the accumulators and the figures compared, and fixes that run, never "auto" with the
  same memory."""
  config = tiny_config()
  # 16 features fit 1.5 GiB in one pass (the pre-flight check's comparison), not its 90 %.
  ram = memory_device.Device("cpu", int(1.5 * GIB), "CPU with 1.5 GiB")
  with pytest.raises(memory_plan.MemoryPlanError) as refused:
    memory_plan.plan_batches(config, 64, "float32", ram, "auto", effective_batch_size=16)
  assert str(refused.value).splitlines() == [
      "--train_batch_size=auto: not even one feature fits in 90 % of the usable memory (1.35 GiB "
      "of 1.50 GiB): for 16 features per step, 16 passes of 1 x seq 64 (float32) need 1.52 GiB "
      "with the float32 gradient accumulators that splitting adds (15.3 MiB), one pass of 16 needs "
      "1.50 GiB, and one feature alone 1.50 GiB; device: CPU with 1.5 GiB",
      "  weights + gradients + AdamW slots 23.9 MiB, activations per feature 996.0 KiB, allocator "
      f"overhead x1, the process 1.45 GiB (`{commands.command('squad-qa-memory')}` prints the "
      "breakdown)",
      "fixes:",
      "  - --train_batch_size=16: one pass of the 16 features fits (the pre-flight check compares "
      "with all 1.50 GiB)",
  ]
  assert run_plan.plan_memory(batch_flags(16), config, 64, "float32", ram, 1).micro_batch_size == 16
  # One feature fits the 90 %, 16 in one pass and 16 passes of 1 (accumulators) do not.
  ram = memory_device.Device("cpu", int(1.6614 * GIB), "CPU with 1.66 GiB")
  with pytest.raises(memory_plan.MemoryPlanError) as refused:
    memory_plan.plan_batches(config, 64, "float32", ram, "auto", effective_batch_size=16)
  lines = str(refused.value).splitlines()
  assert lines[0].startswith("--train_batch_size=auto: no split of --effective_batch_size=16 fits "
                             "in 90 % of the usable memory (1.50 GiB of 1.66 GiB): for 16 features "
                             "per step, 16 passes of 1 x seq 64 (float32) need 1.52 GiB with the "
                             "float32 gradient accumulators that splitting adds (15.3 MiB)")
  assert lines[2:] == [
      "fixes:",
      "  - --effective_batch_size=5: --train_batch_size=auto runs it in one pass, without "
      "accumulators, within the 90 %",
      "  - --train_batch_size=16: one pass of the 16 features fits (the pre-flight check compares "
      "with all 1.66 GiB)",
  ]
  plan = memory_plan.plan_batches(config, 64, "float32", ram, "auto", effective_batch_size=5)
  assert (plan.micro_batch_size, plan.accumulation_steps) == (5, 1)
  assert run_plan.plan_memory(batch_flags(16), config, 64, "float32", ram, 1).micro_batch_size == 16
  # Nothing fits at all: no "auto" among the fixes (it would find nothing either), nor a --gpu
  # that fits batch 0.
  text = memory_plan.report(
      memory_plan.PlannerConfig(max_seq_length=384, device_memory_gb=2, gpu=True,
                                mixed_precision_dtype="float32", train_batch_size=1,
                                gradient_accumulation_steps=2))
  assert "auto" not in text.split("BERT-Base: fixes:")[1]
  assert "fits batch 0" not in text
  # The largest batch with the plan's 2 accumulation steps is 0: the figure quoted counts them.
  base = estimate.presets()["BERT-Base"]
  two = estimate.estimate(base, 384, 1, accumulation_steps=2)
  assert (memory_device.format_bytes(two.total),
          memory_device.format_bytes(estimate.estimate(base, 384,
                                                       1).total)) == ("2.83 GiB", "2.23 GiB")
  assert ("BERT-Base: largest batch that fits at seq 384 with 2 accumulation steps: 0: one feature "
          "needs 2.83 GiB of the 1.60 GiB usable; weights, gradients and AdamW slots alone take "
          "1.62 GiB, the gradient accumulators 504.8 MiB") in text.splitlines()


def test_the_cpu_count_holds_the_process_and_every_replica():
  """On the CPU the total adds the training process itself (device.CPU_PROCESS_BYTES, measured,
  and CPU_REPLICA_PROCESS_BYTES for each further logical CPU device) and holds every replica's
  tensors (logical CPU devices share the RAM); a GPU's total is one replica's tensors alone."""
  config = tiny_config()
  assert memory_device.CPU_PROCESS_BYTES == 1_556_925_644  # 1.45 GiB
  assert memory_device.CPU_REPLICA_PROCESS_BYTES == 375_809_638  # 0.35 GiB
  cpu = estimate.estimate(config, 64, 8, "float32", "cpu")
  assert (cpu.replica_total, cpu.process, cpu.total) == (48_633_120, 1_556_925_644, 1_605_558_764)
  two = estimate.estimate(config, 64, 8, "float32", "cpu", replicas=2)
  assert (two.replicas, two.process, two.total) == (2, 1_932_735_282,
                                                    2 * 48_633_120 + 1_932_735_282)
  gpu = estimate.estimate(config, 64, 8, "float32", "gpu", replicas=2)
  assert (gpu.replicas, gpu.process, gpu.replica_total, gpu.total) == (1, 0, 50_578_445, 50_578_445)
  assert memory_plan.format_estimate(two, 2 * GIB).splitlines()[-4:] == [
      "  1 other replica sharing the RAM           46.4 MiB",
      "  process (TensorFlow runtime, Python)      1.80 GiB",
      "  total                                     1.89 GiB",
      "  fits in 2.00 GiB usable",
  ]
  assert memory_plan.format_estimate(gpu).splitlines()[-2:] == [
      "  allocator overhead x1.04                   1.9 MiB",
      "  total                                     48.2 MiB",
  ]
  values = two.to_dict()
  assert (values["replicas"], values["process"], values["replica_total"],
          values["total"]) == (2, 1_932_735_282, 48_633_120, 2_030_001_522)
  # The largest batch beside one process: 57 for one replica, 7 each for two (beside the second
  # device's own runtime too).
  room = cpu.total + cpu.replica_total - 1
  assert estimate.max_batch_size(config, 64, room, "float32", "cpu") == 57
  assert estimate.max_batch_size(config, 64, room + memory_device.CPU_REPLICA_PROCESS_BYTES,
                                 "float32", "cpu", replicas=2) == 7
  with pytest.raises(ValueError, match="replicas must be >= 1"):
    estimate.estimate(config, 64, 8, "float32", "cpu", replicas=0)


def test_the_detected_ram_gives_back_what_the_planning_process_holds(monkeypatch):
  """MemAvailable leaves out what the planning process already holds (TensorFlow loaded), which
  the count includes in the process: the detected CPU adds this process's anonymous resident
  memory back, once; a --device_memory_gb is taken as given."""
  monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
  monkeypatch.setattr(memory_device, "host_available_bytes", lambda: 3 * GIB)
  monkeypatch.setattr(memory_device, "own_anonymous_bytes", lambda: 3 * GIB // 4)
  device = memory_device.detect_device()
  assert (device.kind, device.usable_bytes, device.description) == (
      "cpu", 3 * GIB + 3 * GIB // 4,
      "CPU with 3.8 GiB of RAM available (0.75 GiB of it held by this process)")
  assert memory_device.detect_device(2).usable_bytes == 2 * GIB
  monkeypatch.setattr(memory_device, "host_available_bytes", lambda: None)  # no /proc/meminfo
  assert memory_device.detect_device().usable_bytes == 0
  monkeypatch.undo()
  # The real reading: TensorFlow is loaded here, and anonymous memory is part of the resident set.
  with open("/proc/self/status") as f:
    status = dict(line.split(":", 1) for line in f)
  resident = int(status["VmRSS"].split()[0]) * 1024
  assert 100 * memory_device.MIB < memory_device.own_anonymous_bytes() <= resident


def test_the_cpu_count_holds_the_float32_copy_that_predicts_after_mixed_training():
  """train.py predicts after mixed-precision training with a float32 copy of the model, made from
  a NumPy copy of the weights: on the CPU, where train.py predicts (--do_predict), the total adds
  4 B per parameter once; not after float32 training, nor on a GPU."""
  config = tiny_config()
  assert estimate.count_parameters(config).total == 2_057_666
  mixed = estimate.estimate(config, 64, 8, "mixed_bfloat16", "cpu", predicts=True)
  alone = estimate.estimate(config, 64, 8, "mixed_bfloat16", "cpu")
  assert (mixed.prediction_copy, alone.prediction_copy) == (8_230_664, 0)
  assert (mixed.total, alone.total) == (1_613_920_500, 1_605_689_836)
  assert estimate.estimate(config, 64, 8, "mixed_bfloat16", "cpu", replicas=2,
                           predicts=True).prediction_copy == 8_230_664  # once
  assert estimate.estimate(config, 64, 8, "float32", "cpu", predicts=True).prediction_copy == 0
  gpu = estimate.estimate(config, 64, 8, "mixed_float16", "gpu", predicts=True)
  assert (gpu.prediction_copy, gpu.total) == (0,
                                              estimate.estimate(config, 64, 8, "mixed_float16",
                                                                "gpu").total)
  assert memory_plan.format_estimate(mixed, 2 * GIB).splitlines()[-4:] == [
      "  process (TensorFlow runtime, Python)      1.45 GiB",
      "  float32 copy to predict after training     7.8 MiB",
      "  total                                     1.50 GiB",
      "  fits in 2.00 GiB usable",
  ]
  # The pre-flight check counts it with --do_predict: a RAM where the step fits but not the copy.
  ram = memory_device.Device("cpu", alone.total + 4 * 2**20, "CPU with test RAM")
  assert run_plan.plan_memory(batch_flags(8), config, 64, "mixed_bfloat16", ram,
                              1).estimate == alone
  with pytest.raises(memory_plan.MemoryPlanError) as refused:
    run_plan.plan_memory(batch_flags(8, do_predict=True), config, 64, "mixed_bfloat16", ram, 1)
  assert str(refused.value).splitlines()[1:] == [
      "  weights + gradients + AdamW slots 24.0 MiB, activations 5.7 MiB, allocator overhead x1, "
      "the process 1.45 GiB, the float32 prediction copy 7.8 MiB "
      f"(`{commands.command('squad-qa-memory')}` prints the breakdown)",
      "fixes:",
      "  - not even batch 1 fits in all 1.50 GiB: one feature needs 1.50 GiB at max_seq_length "
      "64, most of it weights, AdamW slots and the process; train where that much memory is free",
      f"  - {commands.command('squad-qa-train')} --do_predict=false leaves out the float32 copy "
      "that predicts after training (7.8 MiB); "
      "then predict with --do_train=false, which builds the model in float32 alone",
      "  - or --nomemory_check to try anyway",
  ]
  assert run_plan.describe_estimate(mixed, ram) == (
      "1.50 GiB of CPU with test RAM (the process's 1.45 GiB and the float32 prediction copy's "
      "7.8 MiB included)")
  # "auto" plans within 90 %: one feature fits there without the copy, not with it; the fix says so.
  ram = memory_device.Device("cpu", 1_785_135_480, "CPU with test RAM")  # (a.total + 1 MiB) / 0.9
  with pytest.raises(memory_plan.MemoryPlanError) as refused:
    memory_plan.plan_batches(config, 64, "mixed_bfloat16", ram, "auto", effective_batch_size=4,
                             predicts=True)
  assert str(refused.value).splitlines()[-1] == (
      f"  - {commands.command('squad-qa-train')} --do_predict=false: --train_batch_size=auto then "
      "plans the 4 features per step; it "
      "leaves out the float32 copy that predicts after training (7.8 MiB); then predict with "
      "--do_train=false")
  plan = memory_plan.plan_batches(config, 64, "mixed_bfloat16", ram, "auto", effective_batch_size=4)
  assert (plan.micro_batch_size, plan.accumulation_steps) == (4, 1)
  # The planner's "one feature needs" names the copy it counts.
  assert memory_plan._fewest_bytes(
      config, 64, "mixed_bfloat16", memory_device.Device("cpu", GIB, "1 GiB"),
      estimate.THIS_TOOL).endswith(
          "the process itself 1.45 GiB, the float32 prediction copy 7.8 MiB")
  # The planner counts train.py's default --do_predict: BERT-Base's copy, 4 x 109.5 M parameters.
  text = memory_plan.report(
      memory_plan.PlannerConfig(max_seq_length=128, train_batch_size=8, device_memory_gb=16,
                                mixed_precision_dtype="bfloat16"))
  assert "  float32 copy to predict after training   417.6 MiB" in text.splitlines()
  assert 4 * estimate.count_parameters(estimate.presets()["BERT-Base"]).total == 437_935_112


def batch_flags(train_batch_size, effective_batch_size=None, do_predict=False):
  """The batch settings of a TrainConfig that run_plan.plan_memory reads."""
  return types.SimpleNamespace(train_batch_size=train_batch_size,
                               effective_batch_size=effective_batch_size,
                               gradient_accumulation_steps=1, memory_check=True,
                               do_predict=do_predict)


def test_the_preflight_check_counts_cpu_replicas_sharing_the_ram():
  """--num_cpu_devices=2 on a RAM where one replica of 8 and the process fit but two do not: the
  check refuses, its fixes name global batches; "auto" plans each replica's share; a GPU's
  replicas each have their own memory."""
  config = tiny_config()
  one = estimate.estimate(config, 64, 8, "float32", "cpu")
  two = estimate.estimate(config, 64, 8, "float32", "cpu", replicas=2)
  ram = memory_device.Device("cpu", two.total - 1, "CPU with test RAM")
  assert run_plan.plan_memory(batch_flags(8), config, 64, "float32", ram, 1).estimate == one
  with pytest.raises(memory_plan.MemoryPlanError) as refused:
    run_plan.plan_memory(batch_flags(16), config, 64, "float32", ram, 2)
  assert str(refused.value).splitlines() == [
      "the planner estimates that this batch does not fit: estimated peak 1.89 GiB for batch 8 x "
      "seq 64 (float32) on each of 2 replicas; device: CPU with test RAM",
      "  weights + gradients + AdamW slots 24.0 MiB, activations 7.8 MiB, allocator overhead x1, "
      f"the process 1.80 GiB (`{commands.command('squad-qa-memory')}` prints the breakdown)",
      "fixes:",
      "  - --train_batch_size=14: the largest batch that fits without accumulation",
      "  - on a GPU, --gpu (mixed_float16) halves most activations",
      "  - or --nomemory_check to try anyway",
  ]
  # "auto" at 256 per step in 2.16 GiB: one replica runs 256 at once; two replicas (the second
  # device's runtime beside them), 128 each, 16 x 8.
  roomy = memory_device.Device("cpu", int(2.16 * GIB), "CPU with 2.16 GiB")
  splits = [
      run_plan.plan_memory(batch_flags("auto", 256), config, 64, "float32", roomy, replicas)
      for replicas in (1, 2)
  ]
  assert [(p.micro_batch_size, p.accumulation_steps, p.estimate.replicas) for p in splits
         ] == [(256, 1, 1), (16, 8, 2)]
  assert all(p.estimate.total <= roomy.usable_bytes * estimate.AUTO_BATCH_MARGIN for p in splits)
  gpu = memory_device.Device("gpu", 50_578_445, "test GPU")  # one replica of 8 exactly
  assert run_plan.plan_memory(batch_flags(16), config, 64, "float32", gpu,
                              2).estimate.total == (50_578_445)
  assert run_plan.describe_estimate(splits[1].estimate, roomy) == (
      "1.93 GiB of CPU with 2.16 GiB (2 replicas sharing it and the process's 1.80 GiB included)")
  assert run_plan.describe_estimate(
      gpu_estimate := estimate.estimate(config, 64, 8),
      gpu) == (f"{memory_device.format_bytes(gpu_estimate.total)} of test GPU per replica")


def test_the_planner_counts_the_prediction_copy_as_train_py_does_with_do_predict(tmp_path):
  """squad-qa-memory --do_predict (train.py's setting, declared once) counts the float32 copy that
  predicts after mixed-precision training on the CPU, or leaves it out, as train.py's pre-flight
  check does for the same flag."""
  from squad_qa.tasks import train_config  # pylint: disable=g-import-not-at-top
  config_file = testutil.write_tiny_config(tmp_path / "tiny.json")
  ram = memory_device.Device("cpu", 4 * GIB, "CPU with 4 GiB")
  totals = {}
  for do_predict in (True, False):
    report = json.loads(
        memory_plan.report(
            memory_plan.PlannerConfig(bert_config_file=config_file, max_seq_length=64,
                                      train_batch_size=8, device_memory_gb=4,
                                      mixed_precision_dtype="bfloat16", do_predict=do_predict,
                                      format="json")))
    checked = run_plan.plan_memory(batch_flags(8, do_predict=do_predict), tiny_config(), 64,
                                   "mixed_bfloat16", ram, 1)
    (entry,) = report["estimates"]
    assert entry["estimate"] == checked.estimate.to_dict()
    totals[do_predict] = (entry["estimate"]["prediction_copy"], entry["estimate"]["total"])
  assert totals[True][0] == 8_230_664 and totals[False][0] == 0  # 4 B x 2,057,666 parameters
  assert totals[True][1] - totals[False][1] == 8_230_664
  trained, planned = (config.__dataclass_fields__["do_predict"]
                      for config in (train_config.TrainConfig, memory_plan.PlannerConfig))
  assert settings.spec_of(trained) == settings.spec_of(planned)
  assert trained.default is planned.default is True


def test_the_planner_counts_cpu_replicas_as_train_py_does(tmp_path):
  """squad-qa-memory --num_cpu_devices (the setting train.py declares through it) counts the
  mirrored CPU replicas as train.py's pre-flight check does: global batch flags split among them,
  their tensors and runtimes sharing the RAM; a global batch they do not divide is refused with
  train.py's line, and so are CPU devices beside --gpu."""
  from squad_qa.tasks import train_config  # pylint: disable=g-import-not-at-top
  config_file = testutil.write_tiny_config(tmp_path / "tiny.json")
  options = dict(bert_config_file=config_file, max_seq_length=64, device_memory_gb=4,
                 mixed_precision_dtype="float32", num_cpu_devices=2)
  report = json.loads(
      memory_plan.report(memory_plan.PlannerConfig(train_batch_size=16, format="json", **options)))
  ram = memory_device.Device("cpu", 4 * GIB, "CPU with 4 GiB")
  checked = run_plan.plan_memory(batch_flags(16, do_predict=True), tiny_config(), 64, "float32",
                                 ram, 2)
  (entry,) = report["estimates"]
  assert (report["replicas"], entry["train_plan"]) == (2, {
      "micro_batch_size": 8,
      "accumulation_steps": 1,
      "effective_batch_size": 8
  })
  assert entry["estimate"] == checked.estimate.to_dict()
  assert entry["estimate"]["total"] == 2_030_001_522  # 2 x 48_633_120 + 1.45 + 0.35 GiB
  # The largest global batch: an even split, each replica's share beside the other's.
  per_replica = estimate.max_batch_size(tiny_config(), 64, 4 * GIB, "float32", "cpu", replicas=2,
                                        predicts=True)
  assert (entry["max_batch_size"], per_replica) == (2 * 924, 924)
  text = memory_plan.report(memory_plan.PlannerConfig(train_batch_size=16, **options))
  lines = [line.split("tiny.json: ", 1)[-1] for line in text.splitlines()]
  train = commands.command("squad-qa-train")
  assert (f"{train} --distribution_strategy=mirrored --num_cpu_devices=2 runs 2 "
          f"replicas x 8 features per pass x 1 accumulation steps = 16 per optimizer step") in lines
  assert "largest batch that fits at seq 64: 1848 (924 per replica)" in lines
  assert text.splitlines()[0].endswith(
      "; 2 replicas (--distribution_strategy=mirrored --num_cpu_devices=2) share the RAM, "
      "batches are global")
  # A global batch the replicas do not divide: train.py's own refusal.
  with pytest.raises(memory_plan.MemoryPlanError) as planner:
    memory_plan.PlannerConfig(train_batch_size=15, **options)
  with pytest.raises(run_plan.distribution.DistributionError) as trainer:
    run_plan.plan_memory(batch_flags(15), tiny_config(), 64, "float32", ram, 2)
  assert str(planner.value) == str(trainer.value) == (
      "--train_batch_size=15 is the global batch and must be a multiple of the 2 replicas; use 14 "
      "or 16")
  with pytest.raises(errors.UsageError) as error:
    memory_plan.PlannerConfig(num_cpu_devices=2, gpu=True, device_memory_gb=16)
  assert str(error.value) == ("--num_cpu_devices=2 splits the CPU, and --gpu plans a GPU (each GPU "
                              "replica has its own memory): drop one of the two")
  # One declaration: train.py's flag is the planner's.
  trained, planned = (settings.spec_of(config.__dataclass_fields__["num_cpu_devices"])
                      for config in (train_config.TrainConfig, memory_plan.PlannerConfig))
  assert trained == planned and trained.help.startswith("Without GPUs: split the CPU")


def test_the_planner_counts_the_accumulators_in_the_largest_batch_and_names_the_fixes():
  """With --gradient_accumulation_steps the largest batch is counted with the same steps (their
  float32 sums), so it agrees with the verdict; a plan that does not fit is not said to run, and
  gets train.py's pre-flight fixes (`diagnose.fixes`)."""
  options = dict(max_seq_length=384, gpu=True, device_memory_gb=16)
  text = memory_plan.report(
      memory_plan.PlannerConfig(train_batch_size=9, gradient_accumulation_steps=4, **options))
  train = commands.command("squad-qa-train")
  summary = [line for line in text.splitlines() if not line.startswith("  ")]
  assert summary[1:] == [
      "BERT-Base: seq 384, batch 9, mixed_float16, adamw, gpu, 4 accumulation steps",
      f"BERT-Base: {train} runs 9 features per pass x 4 accumulation steps = 36 per optimizer "
      "step",
      "BERT-Base: largest batch that fits at seq 384 with 4 accumulation steps: 34",
      "BERT-Large: seq 384, batch 9, mixed_float16, adamw, gpu, 4 accumulation steps",
      f"BERT-Large: {train} would run 9 features per pass x 4 accumulation steps = 36 per "
      "optimizer step, but its pre-flight check stops it: this does not fit",
      "BERT-Large: largest batch that fits at seq 384 with 4 accumulation steps: 8",
      "BERT-Large: fixes:",
  ]
  report = json.loads(
      memory_plan.report(
          memory_plan.PlannerConfig(train_batch_size=9, gradient_accumulation_steps=4,
                                    format="json", **options)))
  large = estimate.presets()["BERT-Large"]
  gpu = memory_device.device_from_flag(16)
  fixes = diagnose.fixes(large, 384, 9, "mixed_float16", gpu, 4)
  records = commands.command("squad-qa-records")
  assert fixes == [
      "--train_batch_size=6 --gradient_accumulation_steps=6: the same 36 features per optimizer "
      "step (the largest batch that fits with accumulation is 8)",
      f"--max_seq_length=320 ({records}) fits batch 9",
      "--train_batch_size=auto --effective_batch_size=36: runs 6 features per pass x 6 "
      "accumulation steps",
  ]
  assert [(e["model"], e["max_batch_size"], e["fits"], e.get("fixes")) for e in report["estimates"]
         ] == [("BERT-Base", 34, True, None), ("BERT-Large", 8, False, fixes)]
  assert text.splitlines()[-3:] == [f"  - {fix}" for fix in fixes]
  # The batch without accumulation that does not fit: the same fixes as train.py's refusal.
  base = estimate.presets()["BERT-Base"]
  text = memory_plan.report(memory_plan.PlannerConfig(train_batch_size=48, **options))
  base_lines = text.splitlines()[text.splitlines().index("BERT-Base: fixes:") + 1:][:4]
  refusal = diagnose.diagnosis(base, 384, 48, "mixed_float16", gpu).splitlines()
  assert base_lines == refusal[refusal.index("fixes:") + 1:] == [
      "  - --train_batch_size=24 --gradient_accumulation_steps=2: the same 48 features per "
      "optimizer step (the largest batch that fits with accumulation is 34)",
      "  - --train_batch_size=36: the largest batch that fits without accumulation",
      f"  - --max_seq_length=256 ({records}) fits batch 48",
      "  - --train_batch_size=auto --effective_batch_size=48: runs 24 features per pass x 2 "
      "accumulation steps",
  ]
  assert "BERT-Base: largest batch that fits at seq 384: 36" in text
  # The table with accumulation: each row's largest batch counts the same steps.
  table = memory_plan.report(
      memory_plan.PlannerConfig(gpu=True, device_memory_gb=16, train_batch_size=9,
                                gradient_accumulation_steps=4, format="json"))
  for row in json.loads(table)["table"]:
    assert row["fits"] == (row["max_batch_size"] >= 9), row


@pytest.mark.slow
def test_cli_table_and_breakdown(tmp_path):
  _, output = testutil.run_cli("-m model.memory", "--device_memory_gb=12", "--gpu",
                               "--mixed_precision_dtype=float32")
  lines = output.strip().splitlines()
  assert lines[0].startswith(
      "device: 12 GiB GPU (11.1 GiB usable); float32 (--mixed_precision_dtype=float32); "
      "AdamW; "
      "allocator overhead x1.04")
  assert lines[1].split() == ["model", "seq", "max", "batch", "(12", "GiB,", "fp32)"]
  table = {(l.split()[0], int(l.split()[1])): int(l.split()[2]) for l in lines[2:14]}
  assert table == PLANNER_TABLE
  _, tf1_output = testutil.run_cli("-m model.memory", "--device_memory_gb=12", "--gpu",
                                   "--program=google_research_tf1", "--format=json")
  tf1, _ = json.JSONDecoder().raw_decode(tf1_output[tf1_output.index("{"):])
  assert tf1["program"] == "google_research_tf1"
  assert {
      (r["model"], r["max_seq_length"]): r["max_batch_size"] for r in tf1["table"]
  } == TF1_PLANNER_TABLE
  code, refused = testutil.run_cli("-m model.memory", "--device_memory_gb=12",
                                   "--program=google_research_tf1",
                                   "--mixed_precision_dtype=float16", expect_ok=False)
  assert code != 0 and "trained in float32 only" in refused and "Traceback" not in refused
  assert lines[14] == ""
  assert "Dense(1604) over flattened [2, 512, 768]: 1,261,438,532 parameters = 4.70 GiB" in output
  assert "span head Dense(2) per token (768 -> 2): 1,538 parameters = 6,152 bytes" in output
  config = testutil.write_tiny_config(tmp_path / "tiny.json")
  _, output = testutil.run_cli("-m model.memory", f"--bert_config_file={config}",
                               "--max_seq_length=128", "--train_batch_size=8",
                               "--device_memory_gb=1", "--gpu", "--mixed_precision_dtype=float32",
                               "--format=json")
  result, _ = json.JSONDecoder().raw_decode(output[output.index("{"):])  # stderr follows
  entry = result["estimates"][0]
  est = estimate.estimate(tiny_config(), 128, 8, "float32", "gpu")
  assert entry["estimate"]["total"] == est.total and entry["fits"]
  assert entry["max_batch_size"] == estimate.max_batch_size(tiny_config(), 128,
                                                            memory_device.usable_gpu_bytes(GIB))
  assert result["device"]["usable_bytes"] == memory_device.usable_gpu_bytes(GIB)


@pytest.mark.parametrize("output_format", ["text", "json"])
def test_the_table_answers_for_a_batch_without_a_length(output_format):
  """--train_batch_size without --max_seq_length: the table gets that batch's peak and verdict at
  each of its lengths (text column, JSON "estimate" and "fits"), not the bare table."""
  config = memory_plan.PlannerConfig(device_memory_gb=12, gpu=True, mixed_precision_dtype="float32",
                                     train_batch_size=8, format=output_format)
  report = memory_plan.report(config)
  usable = memory_device.usable_gpu_bytes(12 * GIB)
  presets = estimate.presets()
  expected = {
      (n, s): estimate.estimate(presets[n], s, 8, "float32", "gpu") for n, s in PLANNER_TABLE
  }
  if output_format == "json":
    rows = json.loads(report)["table"]
    assert [(r["model"], r["max_seq_length"]) for r in rows] == list(PLANNER_TABLE)
    for row in rows:
      est = expected[(row["model"], row["max_seq_length"])]
      assert row["estimate"] == est.to_dict()
      assert row["fits"] == (est.total <= usable) == (row["max_batch_size"] >= 8)
    assert [r["fits"] for r in rows].count(False) == 4  # BERT-Large at 256 tokens and beyond
    return
  lines = report.splitlines()
  assert lines[1] == "model        seq  max batch (12 GiB, fp32)  batch 8"
  assert lines[2] == "BERT-Base     64  121                       fits (peak 2.22 GiB)"
  assert lines[10] == "BERT-Large   256  6                         does NOT fit (peak 12.90 GiB)"
  for line, ((name, seq), batch) in zip(lines[2:14], PLANNER_TABLE.items()):
    verdict = "fits" if batch >= 8 else "does NOT fit"
    peak = memory_device.format_bytes(expected[(name, seq)].total)
    assert line.split(None, 3) == [name, str(seq), str(batch), f"{verdict} (peak {peak})"]
  assert lines[14] == ""


def synthetic_batch(config, batch_size, seq, seed=0):
  rng = np.random.default_rng(seed)
  return {
      "input_word_ids": tf.constant(rng.integers(1000, config.vocab_size, (batch_size, seq)),
                                    tf.int32),
      "input_mask": tf.constant((np.arange(seq) < rng.integers(seq // 2, seq + 1,
                                                               (batch_size, 1))).astype(np.int32)),
      "input_type_ids": tf.constant(
          np.repeat([[0] * (seq // 4) + [1] * (seq - seq // 4)], batch_size, 0), tf.int32),
      "start_positions": tf.constant(rng.integers(0, seq // 2, batch_size), tf.int32),
      "end_positions": tf.constant(rng.integers(0, seq // 2, batch_size), tf.int32),
  }


def twin_models(seed):
  """(config, model, its twin): two span models with the same weights, under the current policy,
  on the tiny config without dropout (so both see the same arithmetic)."""
  config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  tf_keras.utils.set_random_seed(seed)
  model, _ = span_model.build_span_model(config)
  twin, _ = span_model.build_span_model(config)
  twin.set_weights(model.get_weights())
  return config, model, twin


@pytest.mark.parametrize("precision", ["float32", "float32_loss_scaled", "mixed_float16"])
def test_gradient_accumulation_is_exact(precision, float32_policy_after):
  """k = 4 micro-batches of 2 against one batch of 8: gradients, loss and weights after a step.

  float32_loss_scaled runs the loss-scaling path (scale, unscale, finiteness check) in float32.
  mixed_float16 is the real thing (float16 matmuls, float32 loss, dynamic loss scale): its float16
  work is per row and the same in both, and every sum over the batch into a weight gradient is
  float32 (question_answering.make_gradient_fn), so all three are held to float32 tolerance.
  """
  mixed = precision == "mixed_float16"
  question_answering.set_precision_policy("float16" if mixed else "float32")
  config, reference, accumulating = twin_models(seed=3)
  assert question_answering.computes_in_float16(reference) == mixed
  initial = [w.copy() for w in reference.get_weights()]
  batch = synthetic_batch(config, 8, 64)

  def optimizer():  # no warmup: step 1 moves the weights
    return optimization.create_optimizer(1e-3, 10, 0.0, loss_scale=precision != "float32")

  one_optimizer, k_optimizer = optimizer(), optimizer()
  loss_1, grads_1 = tf.function(question_answering.make_gradient_fn(reference, one_optimizer,
                                                                    1))(batch)
  loss_k, grads_k = tf.function(question_answering.make_gradient_fn(accumulating, k_optimizer,
                                                                    4))(batch)
  grads_1 = [tf.convert_to_tensor(g).numpy() for g in grads_1]
  grads_k = [g.numpy() for g in grads_k]
  assert all(g.dtype == np.float32 for g in grads_1 + grads_k)
  assert float(loss_k) == pytest.approx(float(loss_1), rel=1e-6)
  for g1, gk in zip(grads_1, grads_k):
    np.testing.assert_allclose(gk, g1, rtol=1e-5, atol=1e-7)
  # Sensitivity: one micro-batch's gradient alone is far from the batch's.
  _, grads_first = tf.function(question_answering.make_gradient_fn(reference, one_optimizer, 1))({
      k: v[:2] for k, v in batch.items()
  })
  full = np.concatenate([g.ravel() for g in grads_1])
  first = np.concatenate([tf.convert_to_tensor(g).numpy().ravel() for g in grads_first])
  assert np.linalg.norm(first - full) > 0.3 * np.linalg.norm(full)
  # One optimizer step each (AdamW, gradient clipping and loss scaling included).
  question_answering.make_train_step(reference, one_optimizer, 1)(batch)
  question_answering.make_train_step(accumulating, k_optimizer, 4)(batch)
  assert int(one_optimizer.iterations) == int(k_optimizer.iterations) == 1
  if precision != "float32":  # the step was applied, not skipped for an overflow
    assert float(one_optimizer.loss_scale) == float(k_optimizer.loss_scale) == 2.0**15
  for w1, wk in zip(reference.get_weights(), accumulating.get_weights()):
    np.testing.assert_allclose(wk, w1, rtol=1e-6, atol=1e-6)
  moved = [not np.array_equal(w0, w1) for w0, w1 in zip(initial, reference.get_weights())]
  assert sum(moved) >= len(moved) - 2  # all but the untrained pooler's kernel and bias


def test_float16_weight_gradients_without_the_override(float32_policy_after):
  """--nofloat32_weight_gradients: the ops' own float16 weight gradients, which differ from the
  float32 reductions by float16 rounding (so the override is what makes accumulation exact)."""
  question_answering.set_precision_policy("float16")
  config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  tf_keras.utils.set_random_seed(6)
  model, _ = span_model.build_span_model(config)
  batch = synthetic_batch(config, 8, 64)
  optimizer = optimization.create_optimizer(1e-3, 10, 0.0, loss_scale=True)
  gradients = {}
  for exact in (True, False):
    _, grads = tf.function(question_answering.make_gradient_fn(model, optimizer, 1, exact))(batch)
    gradients[exact] = np.concatenate([tf.convert_to_tensor(g).numpy().ravel() for g in grads])
  difference = np.linalg.norm(gradients[False] - gradients[True]) / np.linalg.norm(gradients[True])
  assert 1e-5 < difference < 3e-3  # measured 2.9e-4: float16 rounding of the weight gradients


def test_a_missed_override_raises(monkeypatch, float32_policy_after):
  """If tfm fed its weights through op types the override does not know, training would go on
  with float16 weight gradients: the override refuses at trace time, naming what it missed,
  when it covers nothing and when it covers only part of the weights."""
  question_answering.set_precision_policy("float16")
  config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  model, _ = span_model.build_span_model(config)
  optimizer = optimization.create_optimizer(1e-3, 10, 0.0, loss_scale=True)
  batch = synthetic_batch(config, 2, 16)
  tf.function(question_answering.make_gradient_fn(model, optimizer, 1))(batch)  # covers all
  monkeypatch.setattr(float32_gradients, "WEIGHT_CONSUMING_OPS", ())
  with pytest.raises(float32_gradients.OverrideError) as error:
    tf.function(question_answering.make_gradient_fn(model, optimizer, 1))(batch)
  assert "covered 0 float16 weight reads" in str(error.value)
  monkeypatch.setattr(float32_gradients, "WEIGHT_CONSUMING_OPS", ("Einsum", "MatMul"))
  with pytest.raises(float32_gradients.OverrideError) as error:
    tf.function(question_answering.make_gradient_fn(model, optimizer, 1))(batch)
  message = str(error.value)
  assert "missed" in message and "bias" in message and "covered 0 " not in message
  assert "--nofloat32_weight_gradients" in message


@pytest.mark.slow
@pytest.mark.parametrize("overflow", ["loss_scale", "one_micro_batch"])
def test_float16_overflow_skips_the_step_as_one_batch(overflow, float32_policy_after):
  """mixed_float16: a non-finite gradient skips the whole step and halves the scale, for k = 1
  and k = 4 alike. "loss_scale": a 2**40 loss scale overflows float16 in every pass.
  "one_micro_batch": only the last example (so only the last of 4 micro-batches) holds a token
  whose embedding row (1e5) overflows float16; the other 3 passes are finite."""
  question_answering.set_precision_policy("float16")
  config = tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  tf_keras.utils.set_random_seed(5)
  reference, encoder = span_model.build_span_model(config)
  accumulating, _ = span_model.build_span_model(config)
  batch = synthetic_batch(config, 8, 32)
  scale = 2.0**40 if overflow == "loss_scale" else 2.0**15
  if overflow == "one_micro_batch":
    token = config.vocab_size - 1
    ids = batch["input_word_ids"].numpy()
    ids[ids == token] = token - 1
    ids[7, 3] = token
    batch["input_word_ids"] = tf.constant(ids)
    embeddings = encoder.get_embedding_table()
    embeddings.assign(tf.tensor_scatter_nd_update(embeddings, [[token]], [[1e5] * 64]))
  accumulating.set_weights(reference.get_weights())
  initial = [w.copy() for w in reference.get_weights()]
  results = []
  for model, k in ((reference, 1), (accumulating, 4)):
    optimizer = tf_keras.mixed_precision.LossScaleOptimizer(
        optimization.create_optimizer(1e-3, 10, 0.0, loss_scale=False), initial_scale=scale)
    if overflow == "one_micro_batch":  # the premise: passes 1..3 are finite, pass 4 is not
      finite = [
          np.isfinite(
              float(
                  tf.function(question_answering.make_gradient_fn(model, optimizer, 1))({
                      key: v[2 * i:2 * i + 2] for key, v in batch.items()
                  })[0])) for i in (0, 3)
      ]
      assert finite == [True, False]
    loss = question_answering.make_train_step(model, optimizer, k)(batch)
    results.append((int(optimizer.iterations), float(optimizer.loss_scale)))
    assert not np.isfinite(float(loss)) or overflow == "loss_scale"
    for w0, w in zip(initial, model.get_weights()):
      np.testing.assert_array_equal(w, w0)
  assert results == [(1, scale / 2)] * 2


@pytest.mark.slow
@pytest.mark.parametrize("mixed", [False, True], ids=["float32", "mixed_float16"])
def test_accumulation_under_xla(mixed, float32_policy_after):
  """--xla (on by default with --gpu) compiles the accumulation loop.

  float32: the same step as plain TF. mixed_float16: XLA fuses float16 ops with its own roundings
  (its step differs from plain TF's by ~4e-5 of a 1e-3 update on this CPU), so compiled k = 1 is
  compared with compiled k = 4. That needs XLA's float16 forward pass to be row-independent, which
  it is here (asserted) but not for every shape on this CPU: batch 4 vs 2 x 2 at seq 32 already
  differ by 2.4e-4 in the compiled logits, before any gradient (see docs/training.md)."""
  question_answering.set_precision_policy("float16" if mixed else "float32")
  config, plain, compiled = twin_models(seed=4)
  initial = plain.get_weights()
  batch, k = (synthetic_batch(config, 8, 64), 4) if mixed else (synthetic_batch(config, 4, 32), 2)
  if mixed:
    forward = tf.function(lambda x: plain(x, training=True)[0], jit_compile=True)
    inputs = span_model.model_inputs(batch)
    micro = [forward({key: v[2 * i:2 * i + 2] for key, v in inputs.items()}) for i in range(4)]
    np.testing.assert_array_equal(np.concatenate(micro), forward(inputs))
  plain_loss = question_answering.make_train_step(
      plain, optimization.create_optimizer(1e-3, 10, 0.0, mixed), 1, jit_compile=mixed)(batch)
  xla_loss = question_answering.make_train_step(compiled,
                                                optimization.create_optimizer(1e-3, 10, 0.0, mixed),
                                                k, jit_compile=True)(batch)
  assert float(xla_loss) == pytest.approx(float(plain_loss), rel=1e-5)
  for w_plain, w_xla in zip(plain.get_weights(), compiled.get_weights()):
    np.testing.assert_allclose(w_xla, w_plain, rtol=1e-5, atol=1e-6)
  assert sum(not np.array_equal(w0, w) for w0, w in zip(initial, plain.get_weights())) > 30


def test_out_of_memory_keeps_the_last_checkpoint(tmp_path):
  question_answering.set_precision_policy("float32")
  config = tiny_config()
  tf_keras.utils.set_random_seed(5)
  model, _ = span_model.build_span_model(config)
  optimizer = optimization.create_optimizer(1e-3, 10, 0.0, loss_scale=False)
  batch = synthetic_batch(config, 4, 32)
  strategy = tf.distribute.get_strategy()
  trainer = trainer_lib.QATrainer(strategy, question_answering.make_replica_step(model, optimizer),
                                  optimizer, 4)
  real_train = trainer.train
  calls = []

  def failing_train(num_steps):  # the controller's call for each loop (here: each step)
    calls.append(1)
    if len(calls) == 3:
      raise tf.errors.ResourceExhaustedError(
          None, None, "OOM when allocating tensor with shape[786432,1604] and type float\n"
          "[[{{node dense/MatMul}}]]")
    return real_train(num_steps)

  trainer.train = failing_train
  with pytest.raises(trainer_lib.OutOfMemoryError) as error:
    trainer_lib.train(
        trainer, model_dir_lib.make_checkpoint(model, optimizer),
        lambda context, skip: tf.data.Dataset.from_tensors(batch).repeat(),
        run_plan.RunPlan(model_dir=str(tmp_path), num_train_steps=10, save_checkpoints_steps=1,
                         steps_per_loop=1))
  message = str(error.value)
  assert message.startswith("step 3 ran out of memory (OOM when allocating tensor with "
                            "shape[786432,1604] and type float)")
  assert "ckpt-2, unchanged" in message and "node" not in message
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-2")
  restored, _ = span_model.build_span_model(config)
  tf.train.Checkpoint(model=restored).read(tf.train.latest_checkpoint(
      str(tmp_path))).expect_partial()
  for w_model, w_restored in zip(model.get_weights(), restored.get_weights()):
    np.testing.assert_array_equal(w_restored, w_model)  # the failed step changed nothing


@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("memory_records")
  # 9,546 windows: an epoch holds one global batch of 8192 (check_real_out_of_memory).
  return {
      "records": testutil.make_train_records(tmp, 1700),
      "config": testutil.write_tiny_config(tmp / "tiny.json"),
      "tmp": tmp
  }


# The memory figures these tests assert are float32's; the default precision (auto) would be
# bfloat16 on a CPU with bfloat16 matmuls.
FLOAT32 = "--mixed_precision_dtype=float32"


def train_cli(records, model_dir, *args, expect_ok=True):
  """train.py in float32 on the tiny records for 2 steps (unless args say otherwise)."""
  return testutil.run_cli("train.py", f"--records_dir={records['records']}",
                          f"--model_dir={model_dir}", f"--bert_config_file={records['config']}",
                          f"--vocab_file={testutil.vocab_file()}", "--do_predict=false",
                          "--max_steps=2", FLOAT32, *args, expect_ok=expect_ok)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="setrlimit(RLIMIT_AS)")
@pytest.mark.slow
def test_preflight_check_and_real_out_of_memory(tiny_records):
  model_dir = tiny_records["tmp"] / "preflight"
  # 1.6 GiB of RAM: 0.15 GiB beside the process's own 1.45 GiB (device.CPU_PROCESS_BYTES).
  returncode, output = train_cli(tiny_records, model_dir, "--train_batch_size=512",
                                 "--device_memory_gb=1.6", expect_ok=False)
  assert returncode != 0
  est = estimate.estimate(tiny_config(), 64, 512, "float32", "cpu")
  assert (f"train.py: the planner estimates that this batch does not fit: estimated peak "
          f"{memory_device.format_bytes(est.total)} for batch 512 x seq 64 (float32); device: "
          f"CPU with "
          f"1.6 GiB of RAM (--device_memory_gb)") in output
  fit = estimate.max_batch_size(tiny_config(), 64, int(1.6 * GIB), device="cpu",
                                accumulation_steps=2)
  assert 64 < fit < 128  # so 512 = 8 passes of 64
  assert "--train_batch_size=64 --gradient_accumulation_steps=8: the same 512 features" in output
  assert "--nomemory_check" in output
  assert "Traceback" not in output
  assert not tf.train.latest_checkpoint(str(model_dir))
  # --nomemory_check trains anyway: 64 features x 128 accumulated, the global batch of 8192 that
  # check_real_out_of_memory resumes with in one pass.
  train_cli(tiny_records, model_dir, "--train_batch_size=64", "--gradient_accumulation_steps=128",
            "--device_memory_gb=0.02", "--nomemory_check", "--max_steps=4",
            "--save_checkpoints_steps=2")
  assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-4")
  # As if stopped at step 2 of the 4-step schedule (resuming needs the same --max_steps and global
  # batch).
  ckpt_2 = str(model_dir / "ckpt-2")
  tf.compat.v1.train.update_checkpoint_state(str(model_dir), ckpt_2,
                                             all_model_checkpoint_paths=[ckpt_2])
  # Then a real ResourceExhaustedError when resuming with a batch that does not fit (below).
  check_real_out_of_memory(tiny_records, model_dir)


def check_real_out_of_memory(tiny_records, model_dir):
  """A real out-of-memory error: TensorFlow's CPU allocator is the best-fit allocator GPUs use,
  capped at 4 GiB (TF_CPU_ALLOCATOR_USE_BFC, TF_CPU_BFC_MEM_LIMIT_IN_MB), so an allocation fails
  inside step 3 (batch 8192 needs ~9.6 GiB) with a ResourceExhaustedError, as on a GPU, instead of
  the kernel killing the process; the planner was told the device has 64 GiB, so the pre-flight
  check passes. A cap on the address space alone (setrlimit) can fail any allocation of any thread
  first, some of them in C++ code that aborts; here it is only the backstop, at 12 GiB."""
  saved = {
      name: (model_dir / name).read_bytes() for name in os.listdir(model_dir)
      if name.startswith("ckpt-2")
  }
  assert saved

  def cap_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (12 * GIB, 12 * GIB))

  command = [
      sys.executable, "train.py", f"--records_dir={tiny_records['records']}",
      f"--model_dir={model_dir}", f"--bert_config_file={tiny_records['config']}",
      f"--vocab_file={testutil.vocab_file()}", "--do_predict=false", "--max_steps=4",
      "--train_batch_size=8192", "--device_memory_gb=64", "--save_checkpoints_steps=1", FLOAT32
  ]
  env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPU_BFC_MEM_LIMIT_IN_MB="4096")
  proc = subprocess.run(command, cwd=testutil.REPO, capture_output=True, text=True, timeout=600,
                        preexec_fn=cap_address_space, env=env, check=False)
  output = proc.stdout + proc.stderr
  # A crash's first lines say what failed; its last ones only list extension modules.
  crash = [
      line for line in output.splitlines()
      if re.search(r"Fatal|terminate|what\(\)|Check fail", line)
  ]
  assert proc.returncode == 1, "\n".join(crash[:20]) + output[-3000:]
  # TensorFlow's allocator, XLA's (in a compiled attention function) or, on a CPU, a oneDNN
  # kernel's own allocation fails first. Which tensor crosses the cap depends on the graph's
  # allocation order; it is one that grows with the batch of 8192 (e.g. [8192, 64, 128], uint32
  # random bits [67108864] for a dropout mask, or XLA's 536870912 bytes of attention scores).
  allocation = re.search(
      r"train\.py: step 3 ran out of memory \(OOM when allocating tensor with shape\[([\d,]+)\] "
      r"and type \w+\)", output)
  xla_allocation = re.search(
      r"train\.py: step 3 ran out of memory \(Out of memory while trying to allocate (\d+) "
      r"bytes\.\)", output)
  # Or the host's allocator fails while TensorFlow builds its error's message (std::bad_alloc).
  if allocation:
    assert np.prod([int(d) for d in allocation.group(1).split(",")]) % 8192 == 0, allocation[0]
  elif xla_allocation:
    # At least one head's float32 scores [8192, 64, 64] (128 MiB); the tiny model's largest
    # weight, its [30522, 64] word embeddings, is 7.5 MiB.
    assert int(xla_allocation.group(1)) >= 8192 * 64 * 64 * 4, xla_allocation[0]
  else:
    assert ("train.py: step 3 ran out of memory (oneDNN out of memory (" in output or
            "train.py: step 3 ran out of memory (a host allocation failed: "
            in output), output[-3000:]
  assert f"the last checkpoint is {model_dir}/ckpt-2, unchanged" in output
  assert "out of memory: estimated peak" in output and "fixes:" in output
  assert "--train_batch_size=4096 --gradient_accumulation_steps=2" in output
  assert "Traceback" not in output
  assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-2")
  assert {name: (model_dir / name).read_bytes() for name in saved} == saved


@pytest.mark.slow
def test_auto_batch_with_accumulation_trains(tiny_records):
  model_dir = tiny_records["tmp"] / "auto"
  config = tiny_config()
  # A CPU budget where 32 features fit (with accumulators) but 64 do not: 128 = 4 passes of 32.
  budget = estimate.estimate(config, 64, 32, "float32", "cpu", accumulation_steps=2).total
  assert estimate.estimate(config, 64, 64, "float32", "cpu", accumulation_steps=2).total > budget
  gb = budget / estimate.AUTO_BATCH_MARGIN / GIB * 1.001
  _, output = train_cli(tiny_records, model_dir, "--train_batch_size=auto",
                        "--effective_batch_size=128", f"--device_memory_gb={gb}")
  with open(os.path.join(model_dir, "train_results.json")) as f:
    results = json.load(f)
  assert (results["train_batch_size"], results["gradient_accumulation_steps"],
          results["effective_batch_size"]) == (32, 4, 128)
  assert results["steps"] == 2 and results["xla"] is False
  assert "batch: 128 features per step = 1 replica x 32 features x 4 accumulated" in output


@pytest.mark.slow
def test_the_planner_reads_a_config_without_importing_tensorflow(tmp_path):
  """`python -m model.memory --bert_config_file=...` answers in about a second: neither the
  planner nor the config reader imports TensorFlow (10 s on a 2-core CPU)."""
  config = testutil.write_tiny_config(tmp_path / "tiny.json")
  code = ("import sys\n"
          "from squad_qa.model import bert_config\n"
          "from squad_qa.model.memory import plan\n"
          "size = bert_config.BertConfig.from_json_file(sys.argv[1]).hidden_size\n"
          "print(size, 'tensorflow' in sys.modules)")
  output = subprocess.run([sys.executable, "-c", code, str(config)], cwd=testutil.REPO,
                          capture_output=True, text=True, check=True).stdout
  assert output.split() == [str(testutil.TINY_BERT_CONFIG["hidden_size"]), "False"]


@pytest.mark.parametrize("options, native_bfloat16, policy, why", [
    ({
        "gpu": True
    }, False, "mixed_float16", "train.py --mixed_precision_dtype=auto: --gpu"),
    ({
        "gpu": True,
        "mixed_precision_dtype": "float32"
    }, False, "float32", "--mixed_precision_dtype=float32"),
    ({}, True, "mixed_bfloat16", "train.py --mixed_precision_dtype=auto: this CPU has bfloat16 "
     "matmuls (AVX512-BF16 or AMX); --gpu trains mixed_float16"),
    ({}, False, "float32", "train.py --mixed_precision_dtype=auto: this CPU has no bfloat16 "
     "matmuls (AVX512-BF16 or AMX); --gpu trains mixed_float16"),
    ({
        "program": "google_research_tf1",
        "gpu": True
    }, True, "float32", "google_research_tf1 trained in float32"),
])
def test_the_planner_counts_the_precision_train_py_would_train_in(monkeypatch, options,
                                                                  native_bfloat16, policy, why):
  monkeypatch.setattr(memory_plan.precision, "cpu_has_native_bfloat16", lambda: native_bfloat16)
  # The training command as this process names it (a console script under pytest).
  why = why.replace("train.py", commands.command("squad-qa-train"))
  assert memory_plan.PlannerConfig(**options).policy_and_reason == (policy, why)
  report = memory_plan.report(memory_plan.PlannerConfig(device_memory_gb=12, **options))
  # Without --gpu, 12 GiB is the memory of what train.py would train on here: this host has no GPU.
  device = ("12 GiB GPU (11.1 GiB usable)"
            if options.get("gpu") else "CPU with 12 GiB of RAM (--device_memory_gb)")
  assert report.splitlines()[0].startswith(f"device: {device}; {policy} ({why}); AdamW")
  assert report.splitlines()[0].endswith("; --gpu plans a GPU of that size") != options.get("gpu")


@pytest.mark.parametrize("values, message", [
    ({
        "max_seq_length": 0
    }, "--max_seq_length=0: must be at least 1 (omit it for the table)"),
    ({
        "device_memory_gb": -3.0
    },
     "--device_memory_gb=-3.0: must be 0 or more (0 or omitted: the visible GPU's, else the RAM)"),
    ({
        "device_memory_gb": float("nan")
    }, "--device_memory_gb=nan: must be a finite number"),
    ({
        "device_memory_gb": float("inf")
    }, "--device_memory_gb=inf: must be a finite number"),
])
def test_the_planner_refuses_a_length_or_memory_no_device_has(values, message):
  with pytest.raises(errors.UsageError) as error:
    memory_plan.PlannerConfig(**values)
  assert str(error.value) == message


def test_the_planner_refuses_a_length_beyond_the_model_s_positions():
  with pytest.raises(errors.UsageError) as error:
    memory_plan.report(
        memory_plan.PlannerConfig(max_seq_length=100000, device_memory_gb=16,
                                  mixed_precision_dtype="float32"))
  assert str(error.value) == "--max_seq_length=100000: BERT-Base has 512 positions"


def test_the_planner_prints_the_batches_train_py_would_run():
  """The planner resolves --train_batch_size, --effective_batch_size and
  --gradient_accumulation_steps as train.py does (`plan_batches`): the same split, the same
  breakdown, and "auto" as its micro-batch x steps, not the bare largest batch."""
  base = estimate.presets()["BERT-Base"]
  gpu = memory_device.device_from_flag(12)
  options = dict(device_memory_gb=12, gpu=True, mixed_precision_dtype="float32", format="json")
  for batch_flags, split in [
      ({
          "train_batch_size": "auto",
          "effective_batch_size": 64
      }, (8, 8)),
      ({
          "train_batch_size": 8,
          "effective_batch_size": 32
      }, (8, 4)),
      ({
          "train_batch_size": 6,
          "gradient_accumulation_steps": 3
      }, (6, 3)),
  ]:
    trained = memory_plan.plan_batches(base, 384, "float32", gpu, **batch_flags)
    assert (trained.micro_batch_size, trained.accumulation_steps) == split
    report = json.loads(
        memory_plan.report(memory_plan.PlannerConfig(max_seq_length=384, **batch_flags, **options)))
    entry = report["estimates"][0]
    # The largest batch with the plan's accumulation steps: their float32 sums leave room for 14,
    # where 15 fit without them.
    assert entry["model"] == "BERT-Base" and entry["max_batch_size"] == 14
    assert estimate.max_batch_size(base, 384, gpu.usable_bytes, accumulation_steps=split[1]) == 14
    assert entry["train_plan"] == {
        "micro_batch_size": split[0],
        "accumulation_steps": split[1],
        "effective_batch_size": split[0] * split[1]
    }
    assert entry["estimate"] == trained.estimate.to_dict() and entry["fits"]
  text = memory_plan.report(
      memory_plan.PlannerConfig(max_seq_length=384, train_batch_size="auto",
                                effective_batch_size=64, **dict(options, format="text")))
  assert ("BERT-Base: squad-qa-train runs 8 features per pass x 8 accumulation steps = 64 per "
          "optimizer step").replace("squad-qa-train", commands.command("squad-qa-train")) in text
  # The table: "auto"'s split at each length. BERT-Large at 512 fits 2 features in 12 GiB, but
  # "auto" plans within 90 % of it: 1 per pass.
  table = memory_plan.report(
      memory_plan.PlannerConfig(train_batch_size="auto", **dict(options, format="text")))
  lines = table.splitlines()
  assert lines[1].endswith("max batch (12 GiB, fp32)  --train_batch_size=auto (32 per step)")
  assert lines[2].split(None, 3)[3].startswith("32 x 1, fits (peak ")
  assert lines[13].split(None, 3)[:3] == ["BERT-Large", "512", "2"]
  assert lines[13].split(None, 3)[3].startswith("1 x 32, fits (peak ")


@pytest.mark.parametrize("values, message", [
    ({
        "effective_batch_size": 32
    }, "--effective_batch_size and --gradient_accumulation_steps split a --train_batch_size: give "
     "one too (a number, or auto)"),
    ({
        "train_batch_size": 8,
        "effective_batch_size": 30
    }, "--effective_batch_size=30 is not a multiple of --train_batch_size=8 (a step accumulates "
     "whole batches): use --effective_batch_size=24 or 32, a --train_batch_size that divides 30, "
     "or --train_batch_size=auto"),
    ({
        "train_batch_size": 8,
        "effective_batch_size": 6
    }, "--effective_batch_size=6 is not a multiple of --train_batch_size=8 (a step accumulates "
     "whole batches): use --effective_batch_size=8, a --train_batch_size that divides 6, or "
     "--train_batch_size=auto"),
    ({
        "train_batch_size": 1,
        "num_cpu_devices": 2
    }, "--train_batch_size=1 is the global batch and must be a multiple of the 2 replicas; use 2"),
    ({
        "train_batch_size": "auto",
        "gradient_accumulation_steps": 2
    }, "--train_batch_size=auto chooses the accumulation steps itself; give the batch per "
     "optimizer step as --effective_batch_size instead of --gradient_accumulation_steps"),
])
def test_the_planner_refuses_batch_flags_train_py_refuses(values, message):
  with pytest.raises(errors.UserError) as error:
    memory_plan.PlannerConfig(**values)
  assert str(error.value) == message


def test_the_planner_says_why_no_batch_fits_and_wants_a_gpu_it_can_plan():
  tiny = memory_device.Device("gpu", 300 * 2**20, "300 MiB GPU")
  base = estimate.presets()["BERT-Base"]
  one = estimate.estimate(base, 384, 1, "float32", "gpu")
  fixed = one.weights + one.gradients + one.optimizer_slots
  assert fixed > tiny.usable_bytes  # the weights alone do not fit, so batch 0
  assert estimate.max_batch_size(base, 384, tiny.usable_bytes, "float32", "gpu") == 0
  assert memory_plan._fewest_bytes(base, 384, "float32", tiny, estimate.THIS_TOOL) == (
      f"one feature needs {memory_device.format_bytes(one.total)} of the 300.0 MiB usable; "
      f"weights, gradients and AdamW slots alone take {memory_device.format_bytes(fixed)}")
  report = memory_plan.report(
      memory_plan.PlannerConfig(max_seq_length=384, device_memory_gb=0.5, gpu=True,
                                mixed_precision_dtype="float32"))
  assert "BERT-Base: largest batch that fits at seq 384: 0: one feature needs " in report
  if not tf.config.list_physical_devices("GPU"):  # --gpu without a GPU: a size is needed
    with pytest.raises(errors.UsageError) as error:
      memory_plan.report(memory_plan.PlannerConfig(gpu=True))
    assert str(error.value) == ("--gpu: TensorFlow sees no GPU here; give the GPU's memory to "
                                "plan for one, e.g. --device_memory_gb=16 for a 16 GB card")


def test_another_program_s_breakdown_counts_its_step_and_takes_no_batch_plan():
  """--program=google_research_tf1 with a batch: its own count (TF1 run_squad.py); auto and the
  accumulation flags are this tool's training, refused with it."""
  base = estimate.presets()["BERT-Base"]
  report = json.loads(
      memory_plan.report(
          memory_plan.PlannerConfig(max_seq_length=384, train_batch_size=12, device_memory_gb=12,
                                    gpu=True, program="google_research_tf1", format="json")))
  tf1 = estimate.estimate(base, 384, 12, "float32", "gpu",
                          program=estimate.PROGRAMS["google_research_tf1"])
  assert report["estimates"][0]["estimate"] == tf1.to_dict()
  with pytest.raises(errors.UsageError, match="plan this tool's training; drop them or --program"):
    memory_plan.PlannerConfig(train_batch_size="auto", program="google_research_tf1")


def test_a_memory_past_the_batch_search_says_at_least_its_limit():
  """1e9 GiB fits more than the largest batch the search tries: the planner says ">= 1048576",
  not 1048576 as if it were the answer; a real size prints the batch itself."""
  limit = estimate.BATCH_SEARCH_LIMIT
  for text in (memory_plan.report(
      memory_plan.PlannerConfig(gpu=True, device_memory_gb=1e9, mixed_precision_dtype="float32")),
               memory_plan.report(
                   memory_plan.PlannerConfig(max_seq_length=128, gpu=True, device_memory_gb=1e9,
                                             mixed_precision_dtype="float32"))):
    assert f">= {limit}" in text
  assert memory_plan.format_batch(limit) == f">= {limit}"
  assert memory_plan.format_batch(limit - 1) == str(limit - 1)
  assert memory_plan.format_batch(0) == "0"
