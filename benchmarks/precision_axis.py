"""The precision axis the comparisons with the peer share: our exports by precision, the peer's
precisions, and a table with every precision of both sides and ours best / the peer's best.

Ours: one or more SavedModels (`--export_dirs`), each computing at the `serving_precision` of its
qa_config.json (`serving.saved_model_qa.SavedModelQA.serving_precision`: float32, bfloat16, or any
other precision an export declares). The peer: `--peer_precisions`, run by
benchmarks/peer_precision.py in the peer's own interpreter (float32; bfloat16 under
`torch.autocast`; int8 by `torch.ao.quantization.quantize_dynamic`).
"""

import collections
import os
import subprocess
import sys

from absl import flags

from benchmarks import peer_precision
from squad_qa import errors
from squad_qa.serving import saved_model_qa

PEER_PRECISION_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "peer_precision.py")
REFERENCE = "float32"  # answers are compared with this precision's, on each side


def define_flags():
  """--export_dirs and --peer_precisions (each benchmark calls it once, at import)."""
  flags.DEFINE_list("export_dirs", [], "export.py SavedModels, one per precision (each one's "
                    "qa_config.json says its serving_precision).")
  flags.DEFINE_list("peer_precisions", [REFERENCE], "The peer's precisions, in order: "
                    f"{', '.join(peer_precision.PRECISIONS)}.")


def check_peer_precisions(peer_precisions):
  """The list, checked.

  Raises:
    errors.UsageError: empty, repeated, or a precision the peer does not run.
  """
  unknown = [p for p in peer_precisions if p not in peer_precision.PRECISIONS]
  if unknown or not peer_precisions or len(set(peer_precisions)) != len(peer_precisions):
    raise errors.UsageError(f"--peer_precisions={','.join(peer_precisions)}: give each at most "
                            f"once, from {', '.join(peer_precision.PRECISIONS)}")
  return list(peer_precisions)


Export = collections.namedtuple("Export", ["export_dir", "qa"])


def load_exports(export_dirs):
  """{precision: Export(export_dir, SavedModelQA)} in the order given.

  Raises:
    errors.UsageError: no export, or two exports of one precision.
    errors.MissingFileError: as SavedModelQA.
  """
  if not export_dirs:
    raise errors.UsageError("give --export_dirs (export.py folders, one per serving_precision)")
  exports = {}
  for export_dir in export_dirs:
    qa = saved_model_qa.SavedModelQA(export_dir)
    if qa.serving_precision in exports:
      raise errors.UsageError(f"--export_dirs: two exports compute in {qa.serving_precision}; "
                              f"give one per precision")
    exports[qa.serving_precision] = Export(export_dir, qa)
  return exports


def peer_command(peer_python, precision, script, *args):
  """The argv running the peer's `script` at `precision` in its own interpreter."""
  return [peer_python, PEER_PRECISION_SCRIPT, f"--precision={precision}", script, *args]


def run_peer(argv):
  """Runs a peer command (offline, stdout dropped); its failure ends the benchmark with the last
  lines of its stderr (its warnings are dropped when it succeeds)."""
  env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
  proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                        text=True, check=False)
  if proc.returncode:
    sys.exit(f"the peer failed ({' '.join(argv)}):\n" + "\n".join(proc.stderr.splitlines()[-15:]))


def best(values, higher_is_better):
  """(key, value) of the best value of a {key: value} dict (None values skipped; None if none)."""
  present = [(k, v) for k, v in values.items() if v is not None]
  if not present:
    return None
  return (max if higher_is_better else min)(present, key=lambda item: item[1])


def identical_share(answers, reference):
  """The share (0..1) of `reference`'s question ids whose answer in `answers` is the same text."""
  if not reference:
    return None
  return sum(answers.get(qid) == text for qid, text in reference.items()) / len(reference)


def print_table(measures, ours, peer, rows):
  """Prints a Markdown table: one column per precision of each side, then ours best / peer best.

  Args:
    measures: the first column's heading.
    ours, peer: the precisions, in column order.
    rows: (label, {precision: value} of ours, {precision: value} of the peer, format, higher is
      better or None for no ratio); a value None prints as "-".
  """
  print(f"| {measures} | " + " | ".join([f"ours {p}" for p in ours] + [f"HF {p}" for p in peer])
        + " | ours best / HF best |")
  print("|---" * (2 + len(ours) + len(peer)) + "|")
  for label, mine, theirs, fmt, higher in rows:
    cells = [("-" if v is None else format(v, fmt))
             for v in [mine.get(p) for p in ours] + [theirs.get(p) for p in peer]]
    ratio = "-"
    if higher is not None:
      a, b = best(mine, higher), best(theirs, higher)
      if a and b and b[1]:
        ratio = f"{a[1] / b[1]:.2f} ({a[0]} / {b[0]})"
    print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
  print(flush=True)
