"""benchmarks/step_profile.py: the profile reader, the op categories, busy time and FLOPs."""

import sys

import pytest
import tensorflow as tf

from benchmarks import step_profile
from squad_qa.flags import command_line
from squad_qa.model import bert_config as bert_config_lib
from tests import testutil

LAYER = "bert_span_model/bert_span_labeler/bert_encoder/transformer/layer_3"
XLA_KERNELS = ("XLA kernels (layer norm, GELU, dropout, softmax gradient, attention layout, "
               "weight decay)")


@pytest.mark.parametrize("op, expected", [
    (f"{LAYER}/intermediate/einsum/Einsum:_MklEinsum", "encoder matmuls"),
    (f"gradient_tape/{LAYER}/output/einsum/Einsum_1:_MklEinsum", "encoder matmuls"),
    (f"{LAYER}/self_attention/query/einsum/Einsum:_MklEinsum", "encoder matmuls"),
    (f"{LAYER}/self_attention/einsum_1/Einsum:_MklEinsum", "attention matmuls (scores, values)"),
    (f"{LAYER}/self_attention/MatMul:_MklBatchMatMulV2", "attention matmuls (scores, values)"),
    (f"gradient_tape/{LAYER}/self_attention/MatMul_1/MatMul_1:_MklBatchMatMulV2",
     "attention matmuls (scores, values)"),
    (f"{LAYER}/self_attention/softmax/Softmax:_MklSoftmax", "attention mask, softmax, dropout"),
    (f"{LAYER}/self_attention/dropout_1/dropout/random_uniform/RandomUniform:RandomUniform",
     "attention mask, softmax, dropout"),
    (f"{LAYER}/self_attention/value/add:AddV2", "attention mask, softmax, dropout"),
    (f"{LAYER}/output_layer_norm/batchnorm/mul_1:Mul", "layer norm"),
    (f"gradient_tape/{LAYER}/activation/Gelu/Square:Square", "GELU"),
    (f"{LAYER}/dropout/dropout/SelectV2:SelectV2", "dropout, residuals, biases, casts"),
    (f"{LAYER}/add:AddV2", "dropout, residuals, biases, casts"),
    ("bert_span_model/bert_span_labeler/bert_encoder/word_embeddings/Gather:ResourceGather",
     "embeddings"),
    ("UnsortedSegmentSum:UnsortedSegmentSum", "embeddings"),
    ("AdamWeightDecay/AdamWeightDecay/update_3/mul_1:Mul", "gradient clipping and AdamW"),
    ("clip_by_global_norm/mul_2:Mul", "gradient clipping and AdamW"),
    ("bert_span_model/span_labeling/predictions/transform/logits/Tensordot/MatMul:_MklMatMul",
     "span head and loss"),
    ("AddN_3:AddN", step_profile.OTHER),
    ("negate_add_fusion.clone", XLA_KERNELS),
    ("broadcast_multiply_fusion.1.clone", XLA_KERNELS),
    ("reduce-window.clone", XLA_KERNELS),
    ("convert.3.clone", XLA_KERNELS),
    ("copy.3", XLA_KERNELS),
    ("call.2", step_profile.OTHER),
])
def test_each_op_of_a_step_falls_in_its_kind_of_work(op, expected):
  assert step_profile.category(op) == expected


def test_the_profile_reader_finds_a_named_op_with_its_time(tmp_path):
  a = tf.random.normal([256, 256])

  @tf.function
  def product():
    with tf.name_scope("the_product"):
      return tf.reduce_sum(tf.matmul(a, a))

  product()
  tf.profiler.experimental.start(str(tmp_path))
  product()
  tf.profiler.experimental.stop()
  ops = step_profile.profiled_ops(str(tmp_path))
  [matmul] = [op for op in ops if op[0].startswith("the_product/MatMul:")]
  assert matmul[2] > 0
  assert 0 < step_profile.busy_ps(ops) <= sum(duration for _, _, duration in ops)


def test_the_profile_reader_finds_the_kernels_of_an_xla_function(tmp_path):
  x = tf.random.normal([512, 384])
  compiled = tf.function(lambda v: tf.nn.relu(v * 2.0 + 1.0), jit_compile=True)
  step = tf.function(lambda v: compiled(v) - 1.0)  # as a train step calls it, in its graph
  step(x)
  tf.profiler.experimental.start(str(tmp_path))
  step(x)
  tf.profiler.experimental.stop()
  kernels = [op for op in step_profile.profiled_ops(str(tmp_path)) if ":" not in op[0]]
  assert kernels and all(step_profile.category(name) == XLA_KERNELS for name, _, _ in kernels)


def test_busy_time_counts_overlapping_ops_once():
  ops = [("a", 0, 10), ("b", 5, 10), ("c", 30, 5), ("d", 31, 2)]
  assert step_profile.busy_ps(ops) == 15 + 5


def test_useful_flops_of_a_minilm_step():
  config = bert_config_lib.BertConfig.from_json_file(f"{testutil.minilm_dir()}/config.json")
  # 6 layers of 384 (12 heads), intermediate 1536: per token and layer 2 * (4 * 384^2 + 2 * 384 *
  # 1536) = 3,538,944 FLOP; attention 4 * 128 * 384 per token; forward + backward = 3 x forward.
  assert step_profile.train_flops(config, 16, 128) == 3 * 6 * 16 * 128 * (3538944 + 4 * 128 * 384)


def test_the_floors_matmuls_are_the_useful_flops_of_a_step():
  config = bert_config_lib.BertConfig.from_json_file(f"{testutil.minilm_dir()}/config.json")

  def flops(a, b, transpose_a, transpose_b):
    rows, inner = (a[-1], a[-2]) if transpose_a else (a[-2], a[-1])
    columns = b[-2] if transpose_b else b[-1]
    assert inner == (b[-1] if transpose_b else b[-2])
    return 2 * rows * inner * columns * (a[0] if len(a) == 3 else 1)

  for length in (120, 384):
    shapes = step_profile.layer_matmuls(config, 16, length)
    total = sum(flops(a, b, ta, tb) for a, b, ta, tb, _ in shapes)
    attention = sum(flops(a, b, ta, tb) for a, b, ta, tb, kind in shapes if kind == "attention")
    assert total * config.num_hidden_layers == step_profile.train_flops(config, 16, length)
    assert attention * config.num_hidden_layers == step_profile.attention_train_flops(
        config, 16, length)
    assert [kind for *_, kind in shapes].count("dense") == 18


def test_the_matmul_floor_times_both_kinds_for_each_layer():
  config = bert_config_lib.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=32)
  floor = step_profile.matmul_floor_s(config, 2, [8, 16], tf.float32, repeats=1)
  assert set(floor) == {"dense", "attention"}
  assert all(0 < seconds < 5 for seconds in floor.values())


@pytest.mark.parametrize("flag, message", [
    ("--steps=0", "--steps=0: must be at least 1"),
    ("--batch=-1", "--batch=-1: must be at least 1"),
    ("--skip=-2", "--skip=-2: must be at least 0"),
    ("--rounds=0", "--rounds=0: must be at least 1"),
])
def test_counts_below_their_bound_end_in_one_line_before_any_work(monkeypatch, flag, message):
  monkeypatch.setattr(sys, "argv", ["step_profile.py", "--records_dir=/nope", flag])
  monkeypatch.setattr(step_profile, "run", lambda args: pytest.fail("ran with " + flag))
  with pytest.raises(SystemExit) as stopped:
    command_line.run_argparse(step_profile.main)
  assert stopped.value.code == f"step_profile.py: {message}"


@pytest.mark.parametrize(
    "step_s, profiled_s, dense, rate, warned",
    [
        (0.944, 0.953, 382.5, 397.1, []),  # a quiet run
        (1.081, 0.946, 302.8, 396.3, ["without the profiler"]),  # the step slowed after profiling
        (0.929, 0.991, 347.7, 203.5, ["faster than"]),  # the 2048^3 rate slowed: utilization 113 %
    ])
def test_a_disturbed_host_is_named_not_read_as_utilization(step_s, profiled_s, dense, rate, warned):
  lines = step_profile.disturbed(step_s, profiled_s, dense, rate)
  assert len(lines) == len(warned) and all(w in l for w, l in zip(warned, lines)), lines
