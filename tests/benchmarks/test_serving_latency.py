"""benchmarks/serving_latency.py: --mode=precision's matmuls and their FLOP, --mode=peer's turns,
and the flags a mode does not read refused."""

import os

import pytest

from benchmarks import serving_latency
from squad_qa.model import bert_config as bert_config_lib
from tests import testutil


def test_the_matmuls_count_minilms_forward_flop():
  config = bert_config_lib.BertConfig.from_json_file(
      os.path.join(testutil.minilm_dir(), "config.json"))
  n = 221  # tokens of the ~1,000-character window
  shapes = serving_latency.matmul_shapes(config, n)
  total = sum(count * serving_latency.flop(a, b) for _, a, b, count, _ in shapes)
  # 6 layers x (8 H^2 n for the 4 projections, 4 H I n for the feed-forward, 4 n^2 H for attention).
  # docs/serving.md "What float32 on this CPU allows": 5.14 G.
  assert total == 6 * (n * (8 * 384**2 + 4 * 384 * 1536) + 4 * n**2 * 384) == 5_142_758_400
  assert [(a, b) for name, a, b, _, _ in shapes if name.startswith("attention")
         ] == [((12, n, 32), (12, 32, n)), ((12, n, n), (12, n, 32))]
  assert [has_weights for *_, has_weights in shapes] == [True, True, True, False, False]


def test_the_sides_alternate_in_short_turns_in_both_orders_each_after_a_pause():
  calls = []

  def side(name):

    def timed(n):
      calls.append((name, n))
      return [float(len(calls))] * n

    return timed

  sides = {"ours": side("ours"), "HF": side("HF")}
  times = serving_latency.alternate(sides, repeats=5, pause=lambda: calls.append("pause"))
  assert serving_latency.TURN_CALLS == 2
  assert calls == [
      "pause", ("ours", 2), "pause", ("HF", 2), "pause", ("HF", 2), "pause", ("ours", 2), "pause",
      ("ours", 1), "pause", ("HF", 1)
  ]
  assert times == {"ours": [2.0, 2.0, 8.0, 8.0, 10.0], "HF": [4.0, 4.0, 6.0, 6.0, 12.0]}


@pytest.mark.parametrize("args, line", [
    (["--mode=peer", "--peer_dir=peer"
     ], "serving_latency.py: --mode=peer does not read --peer_dir"),
    (["--mode=stages", "--train_file=train.json", "--runs=3"
     ], "serving_latency.py: --mode=stages does not read --runs, --train_file"),
])
def test_a_flag_the_mode_does_not_read_is_refused(args, line):
  code, output = testutil.run_cli("-m benchmarks.serving_latency", *args, expect_ok=False)
  assert code == 1 and output.strip().splitlines()[-1] == line
