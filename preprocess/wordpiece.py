"""WordPiece tokenization with code-point offsets, identical to the reference's `FullTokenizer`
(run_squad.py, tfm `squad_lib.py`), batched in C++ (docs/featurization.md).

The reference's tokens are a function of each whitespace-free run alone. Runs of printable ASCII
go through tensorflow-text's FastWordpiece kernel, a batch of texts per call, where the two agree;
a run holding any other character is tokenized by tfm's `FullTokenizer` itself, once per distinct
word, and aligned back to its characters (`word_alignment.align_word`).
"""

import functools
import hashlib
import os
import re

import numpy as np
import tensorflow as tf
from tensorflow_text.python.ops.fast_wordpiece_tokenizer import gen_fast_wordpiece_tokenizer

from squad_qa import errors
from squad_qa.preprocess import word_alignment
from squad_qa.preprocess.features import RaggedTokens

# tfm WordpieceTokenizer.max_input_chars_per_word (a longer basic token is [UNK]); tensorflow-text
# counts bytes, which are characters here since it only sees ASCII.
MAX_CHARS_PER_WORD = 400

_RUN_WITH_OTHER_CHARS = re.compile(r"(?<![^ \t\r\n])[^ \t\r\n]*?[^\x21-\x7e \t\r\n][^ \t\r\n]*")
_OTHER_CHAR = re.compile(r"[^\x20-\x7e\t\r\n]")
_RUN_SQUAD_WORD_SEPARATOR = "\u202f"  # run_squad.py whitespace that is not ASCII


def refuse_a_folder(vocab_file):
  """Raises errors.UsageError when `vocab_file` (the commands' --vocab_file) is a folder (as
  --init_checkpoint takes), naming the vocab.txt inside it when there is one."""
  if tf.io.gfile.isdir(vocab_file):
    inside = os.path.join(vocab_file, "vocab.txt")
    raise errors.UsageError(f"--vocab_file={vocab_file} is a folder, not a vocab file; pass " + (
        f"--vocab_file={inside}" if tf.io.gfile.exists(inside) else "the vocab.txt file"))


def read_vocab(vocab_file):
  """Reads a vocab.txt (one token per line, id = line number, stripped as tfm's `load_vocab`).

  Raises:
    FileNotFoundError: it does not exist.
    errors.UsageError: a folder, or a file that lacks [CLS], [SEP], [UNK] or [PAD], or repeats a
      token.
  """
  refuse_a_folder(vocab_file)
  with tf.io.gfile.GFile(vocab_file, "r") as f:
    vocab = [line.strip() for line in f]
  while vocab and not vocab[-1]:
    vocab.pop()
  missing = [t for t in ("[CLS]", "[SEP]", "[UNK]", "[PAD]") if t not in vocab]
  if missing:
    raise errors.UsageError(f"{vocab_file}: not a BERT WordPiece vocab (no {', '.join(missing)})")
  if len(set(vocab)) != len(vocab):
    seen = set()
    repeated = next(t for t in vocab if t in seen or seen.add(t))
    raise errors.UsageError(f"{vocab_file}: token {repeated!r} appears on two lines; fix the vocab")
  return vocab


# A vocab is cased when more than this share of its tokens change under lower-casing (none in an
# uncased BERT vocab, 26 % in bert-base-cased).
CASED_VOCAB_SHARE = 0.01


def check_casing(vocab, vocab_file, do_lower_case):
  """Refuses a `do_lower_case` that contradicts the vocab's casing.

  `vocab` is `read_vocab`'s list, read from `vocab_file` (named in the message).

  Raises:
    errors.UsageError: naming the vocab, its casing and the flag to pass.
  """
  words = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
  cased = [t for t in words if t.lower() != t]
  if do_lower_case and len(cased) > CASED_VOCAB_SHARE * len(words):
    raise errors.UsageError(
        f"--do_lower_case=true but {vocab_file} is a cased vocab ({len(cased)} tokens with "
        f"capitals, e.g. {cased[0]!r}), which lower-cased text never reaches; pass "
        f"--do_lower_case=false")
  if not do_lower_case and not cased:
    raise errors.UsageError(
        f"--do_lower_case=false but {vocab_file} is an uncased vocab (no token has a capital), so "
        f"every capitalized word would be split or [UNK]; pass --do_lower_case=true")


def file_sha256(path):
  """Hex SHA-256 of a file's bytes."""
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def vocab_sha256(vocab):
  """Hex SHA-256 of a vocab's tokens (`read_vocab`'s list), each written with a "\n" after it.

  The tokens alone decide the ids, so a copy with CRLF line endings, spaces around tokens or
  blank lines at the end has the same digest; a vocab.txt written one token per "\n"-ended line
  (as BERT's are) has its file's SHA-256.
  """
  return hashlib.sha256("".join(token + "\n" for token in vocab).encode("utf-8")).hexdigest()


def has_vocab_sha256(vocab_file, recorded_sha256):
  """Whether the vocab at `vocab_file` is the one a records' meta.json or a model's qa_config.json
  records as `recorded_sha256`: `vocab_sha256` of its tokens, or its file's SHA-256 (a digest of
  the bytes, which such files may hold).

  Raises:
    errors.UsageError: as `read_vocab`.
  """
  return recorded_sha256 in (vocab_sha256(read_vocab(vocab_file)), file_sha256(vocab_file))


def same_vocab(one, other):
  """Whether the vocab files `one` and `other` hold the same tokens in the same order (the same
  ids), whatever their line endings.

  Raises:
    errors.UsageError: as `read_vocab`, for files whose bytes differ.
  """
  if one == other or file_sha256(one) == file_sha256(other):
    return True
  return read_vocab(one) == read_vocab(other)


@functools.lru_cache(maxsize=4)
def wordpiece_model(vocab):
  """tensorflow-text's FastWordpiece model (bytes) for a tuple of tokens, with run_squad.py's
  settings ("##" suffixes, [UNK] past MAX_CHARS_PER_WORD, split at whitespace and punctuation)."""
  from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder  # pylint: disable=g-import-not-at-top
  return pywrap_fast_wordpiece_tokenizer_model_builder.build_fast_wordpiece_model(
      list(vocab), MAX_CHARS_PER_WORD, "##", "[UNK]", False, False)


class WordPieceTokenizer:
  """The reference's WordPiece tokens with code-point offsets, from vocab.txt at `vocab_file`;
  `do_lower_case` lower-cases and strips accents (uncased vocabs)."""

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab = read_vocab(vocab_file)
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self._ids = {t: i for i, t in enumerate(self.vocab)}
    self.cls_id = self._ids["[CLS]"]
    self.sep_id = self._ids["[SEP]"]
    self.pad_id = self._ids["[PAD]"]
    self.unk_id = self._ids["[UNK]"]
    # A uint8 tensor made from a NumPy view (tensorflow-text would build it from a Python list).
    self._model = tf.constant(np.frombuffer(wordpiece_model(tuple(self.vocab)), np.uint8))
    self._reference = None  # tf-models-official FullTokenizer, built on the first non-ASCII word
    self._word_index = {}  # memo of reference-tokenized words: word -> index into _word_tokens
    self._word_tokens = []  # per word: [(id, start, end), ...] (offsets within the word)
    self._word_arrays = None

  def _reference_tokenizer(self):
    """tfm's `FullTokenizer.tokenize` (BasicTokenizer, then WordpieceTokenizer) over our vocab
    dict, which equals its `load_vocab`'s."""
    if self._reference is None:
      from official.nlp.tools import tokenization  # pylint: disable=g-import-not-at-top
      basic = tokenization.BasicTokenizer(do_lower_case=self.do_lower_case)
      wordpiece = tokenization.WordpieceTokenizer(vocab=self._ids)
      self._reference = lambda text: [
          piece for token in basic.tokenize(text) for piece in wordpiece.tokenize(token)
      ]
    return self._reference

  def _reference_word(self, word):
    """Index of `word` in the memo of reference-tokenized words (tokenized the first time)."""
    index = self._word_index.get(word)
    if index is None:
      tokens = self._reference_tokenizer()(word)
      offsets = word_alignment.align_word(word, tokens, self.do_lower_case)
      index = self._word_index[word] = len(self._word_tokens)
      self._word_tokens.append([(self._ids[t], s, e) for t, (s, e) in zip(tokens, offsets)])
      self._word_arrays = None
    return index

  def _reference_arrays(self):
    """The memo as flat arrays: (ids, starts, ends) int32 and int64 [words + 1] row splits."""
    if self._word_arrays is None:
      flat = [token for tokens in self._word_tokens for token in tokens]
      values = np.asarray(flat, np.int64).reshape(-1, 3)
      counts = [len(tokens) for tokens in self._word_tokens]
      self._word_arrays = (values[:, 0].astype(np.int32),
                           values[:, 1].astype(np.int32), values[:, 2].astype(np.int32),
                           np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
    return self._word_arrays

  def tokenize_ragged(self, texts, batch_size=4096):
    """RaggedTokens (code-point offsets) of a sequence of str, `batch_size` per kernel call."""
    texts = list(texts)
    fast_texts = []
    occurrences = ([], [], [])  # text index, start char, memo index of reference-path words
    for index, text in enumerate(texts):
      if not _OTHER_CHAR.search(text):
        fast_texts.append(text)
        continue
      blanked = []
      kept_from = 0
      for match in _RUN_WITH_OTHER_CHARS.finditer(text):
        run_start, run = match.start(), match.group()
        blanked += [text[kept_from:run_start], " " * len(run)]
        kept_from = match.end()
        for word in run.split(_RUN_SQUAD_WORD_SEPARATOR):
          occurrences[0].append(index)
          occurrences[1].append(run_start)
          occurrences[2].append(self._reference_word(word))
          run_start += len(word) + 1
      blanked.append(text[kept_from:])
      fast_texts.append("".join(blanked))
    ids, starts, ends, lengths = [], [], [], []
    for i in range(0, len(fast_texts), batch_size):
      batch = fast_texts[i:i + batch_size]
      if self.do_lower_case:  # on ASCII, all that BERT's normalization does
        batch = [text.lower() for text in batch]
      # The kernel of tensorflow-text's FastWordpieceTokenizer.tokenize_with_offsets, called
      # directly: flat outputs, no ragged wrappers, no tracing.
      _, token_ids, row_splits, token_starts, token_ends = (
          gen_fast_wordpiece_tokenizer.fast_wordpiece_tokenize_with_offsets(
              input_values=tf.constant(batch, tf.string), wp_model=self._model))
      ids.append(token_ids.numpy())
      starts.append(token_starts.numpy())
      ends.append(token_ends.numpy())
      lengths.append(np.diff(row_splits.numpy()))
    if not fast_texts:
      return RaggedTokens(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                          np.zeros(1, np.int64))
    ids = np.concatenate(ids).astype(np.int32)
    starts = np.concatenate(starts).astype(np.int32)
    ends = np.concatenate(ends).astype(np.int32)
    lengths = np.concatenate(lengths).astype(np.int64)
    if occurrences[0]:
      word_ids, word_starts, word_ends, word_splits = self._reference_arrays()
      memo = np.asarray(occurrences[2], np.int64)
      counts = word_splits[memo + 1] - word_splits[memo]
      total = int(counts.sum())
      rows = (np.repeat(word_splits[memo] - (np.cumsum(counts) - counts), counts) +
              np.arange(total, dtype=np.int64))
      shift = np.repeat(np.asarray(occurrences[1], np.int32), counts)
      extra_text = np.repeat(np.asarray(occurrences[0], np.int64), counts)
      extra_ids, extra_starts = word_ids[rows], word_starts[rows] + shift
      extra_ends = word_ends[rows] + shift
      # Insert the reference-path tokens among the others by (text, start char); both sides are
      # sorted that way already (the occurrences in text order, each word's tokens in order).
      fast_key = np.repeat(np.arange(len(texts), dtype=np.int64), lengths) << 32 | starts
      extra_key = extra_text << 32 | extra_starts.astype(np.int64)
      where = np.searchsorted(fast_key, extra_key)
      ids = np.insert(ids, where, extra_ids)
      starts = np.insert(starts, where, extra_starts)
      ends = np.insert(ends, where, extra_ends)
      lengths = lengths + np.bincount(extra_text, minlength=len(texts))
    row_splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return RaggedTokens(ids, starts, ends, row_splits)

  def tokenize(self, texts, batch_size=4096):
    """A `TokenizedText` per text of a sequence of str (as `tokenize_ragged`)."""
    ragged = self.tokenize_ragged(texts, batch_size)
    return [ragged.row(i) for i in range(len(ragged))]

  def ids_to_tokens(self, ids):
    """Vocabulary strings of `ids` (for logs and error messages)."""
    return [self.vocab[i] for i in ids]
