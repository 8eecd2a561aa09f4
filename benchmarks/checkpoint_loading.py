r"""Times --init_checkpoint loading at BERT-base size (random weights, google-research TF1 names).

  python -m benchmarks.checkpoint_loading [--workdir=ckpt_bench] [--layers=12]

A child process writes a 12-layer, 768-hidden checkpoint as google-research/bert does
(tests/model/test_checkpoints.py's writer, with the pre-training heads); this process then prints seconds
and its peak resident memory for: building the span model, loading the TF1 checkpoint, converting
it once (model.convert_checkpoint) and loading the converted TF2 checkpoint.
"""

import os
import resource
import shutil
import subprocess
import sys
import time

from absl import flags

from squad_qa.flags import command_line
from squad_qa.model import bert_config as bert_config_lib
from squad_qa.model import checkpoints
from squad_qa.model import convert_checkpoint
from squad_qa.model import span_model
from tests import numpy_bert
from tests.model import test_checkpoints

flags.DEFINE_string("workdir", "ckpt_bench", "Scratch folder (removed first and after).")
flags.DEFINE_integer("layers", 12, "Encoder layers (BERT-base: 12).")
flags.DEFINE_bool("write_only", False, "Internal: write the checkpoint and exit.")
FLAGS = flags.FLAGS


def _config():
  return dict(test_checkpoints.CONFIG, vocab_size=30522, hidden_size=768, num_attention_heads=12,
              intermediate_size=3072, num_hidden_layers=FLAGS.layers, max_position_embeddings=512)


def _peak_rss_mib():
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv):
  del argv
  tf1_dir = os.path.join(FLAGS.workdir, "uncased_L-12_H-768_A-12")
  if FLAGS.write_only:
    params = numpy_bert.random_bert_params(_config(), pretraining_heads=True)
    test_checkpoints.write_tf1_checkpoint(tf1_dir, params, config=_config())
    return
  shutil.rmtree(FLAGS.workdir, ignore_errors=True)
  started = time.time()
  subprocess.run([sys.executable, "-m", "benchmarks.checkpoint_loading", "--write_only",
                  f"--workdir={FLAGS.workdir}", f"--layers={FLAGS.layers}"],
                 check=True, capture_output=True, cwd=os.path.dirname(os.path.dirname(__file__)))
  sizes = {f: os.path.getsize(os.path.join(tf1_dir, f)) / 2**20 for f in os.listdir(tf1_dir)}
  print(f"wrote TF1 checkpoint in {time.time() - started:.1f} s: "
        + ", ".join(f"{f} {mib:.1f} MiB" for f, mib in sorted(sizes.items())))
  started = time.time()
  model, _ = span_model.build_span_model(bert_config_lib.BertConfig.from_dict(_config()))
  print(f"build span model ({model.count_params():,} parameters): {time.time() - started:.1f} s, "
        f"peak RSS {_peak_rss_mib():.0f} MiB")
  started = time.time()
  report = checkpoints.initialize_from(model, tf1_dir)
  print(f"load TF1: {time.time() - started:.1f} s, restored {len(report.restored)}, "
        f"peak RSS {_peak_rss_mib():.0f} MiB")
  output = os.path.join(FLAGS.workdir, "converted")
  started = time.time()
  convert_checkpoint.convert(tf1_dir, output)
  print(f"convert TF1 -> TF2 (build + load + save): {time.time() - started:.1f} s")
  started = time.time()
  report = checkpoints.initialize_from(model, output)
  print(f"load converted TF2: {time.time() - started:.1f} s, restored {len(report.restored)}, "
        f"peak RSS {_peak_rss_mib():.0f} MiB")
  shutil.rmtree(FLAGS.workdir, ignore_errors=True)


if __name__ == "__main__":
  command_line.run(main)
