"""WordPiece tokenization with character offsets, batched through tensorflow-text.

`tensorflow_text.FastBertTokenizer` does BERT's basic tokenization (lower-casing and accent stripping
for uncased vocabularies, splitting on whitespace, punctuation and CJK characters) and WordPiece in C++,
and returns byte offsets into the *original* UTF-8 text. (`tensorflow_text.BertTokenizer` was checked
too: with `lower_case=True` its offsets point into the normalized text, so they cannot map answers
back to the context.) This module turns byte offsets into code-point offsets, the unit of SQuAD's
`answer_start` and of Python `str` indexing.
"""

import hashlib

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from preprocess.features import TokenizedText

# google-research/bert tokenization.py WordpieceTokenizer.max_input_chars_per_word: longer words
# become [UNK]. FastBertTokenizer counts bytes, which equals characters for ASCII words.
MAX_BYTES_PER_WORD = 200


def read_vocab(vocab_file):
  """Reads a vocab.txt (one token per line, id = line number) into a list of str.

  Raises:
    FileNotFoundError: with the path, when it does not exist.
    ValueError: the vocabulary lacks [CLS], [SEP] or [UNK].
  """
  with tf.io.gfile.GFile(vocab_file, "r") as f:
    vocab = [line.rstrip("\n").rstrip("\r") for line in f]
  missing = [t for t in ("[CLS]", "[SEP]", "[UNK]", "[PAD]") if t not in vocab]
  if missing:
    raise ValueError(f"{vocab_file}: not a BERT WordPiece vocab (no {', '.join(missing)})")
  return vocab


def file_sha256(path):
  """Hex SHA-256 of a file's bytes."""
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def byte_to_char_offsets(text):
  """Maps each UTF-8 byte offset of `text` (0..len(bytes), inclusive) to its code-point offset.

  Returns:
    None for ASCII text (offsets are equal), else an int32 array of len(utf8) + 1.
  """
  if text.isascii():
    return None
  data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
  starts_char = (data & 0xC0) != 0x80  # lead bytes (not UTF-8 continuation bytes)
  char_of_byte = np.cumsum(starts_char, dtype=np.int32) - 1
  return np.append(char_of_byte, np.int32(len(text)))


class WordPieceTokenizer:
  """BERT WordPiece tokenizer that returns ids with code-point offsets.

  Args:
    vocab_file: path of vocab.txt.
    do_lower_case: lower-case and strip accents (NFD, drop combining marks), for uncased vocabs.
  """

  def __init__(self, vocab_file, do_lower_case=True):
    self.vocab = read_vocab(vocab_file)
    self.vocab_file = vocab_file
    self.do_lower_case = do_lower_case
    self.cls_id = self.vocab.index("[CLS]")
    self.sep_id = self.vocab.index("[SEP]")
    self.pad_id = self.vocab.index("[PAD]")
    self._tokenizer = tf_text.FastBertTokenizer(
        vocab=self.vocab, lower_case_nfd_strip_accents=do_lower_case,
        token_out_type=tf.int32, unknown_token="[UNK]", max_bytes_per_word=MAX_BYTES_PER_WORD)

  def tokenize(self, texts, batch_size=512):
    """Tokenizes texts in batches.

    Args:
      texts: a sequence of str.
      batch_size: texts per tensorflow-text call.

    Returns:
      A list of `TokenizedText` (int32 ids, code-point start/end offsets), one per text.
    """
    results = []
    for i in range(0, len(texts), batch_size):
      batch = list(texts[i:i + batch_size])
      ids, starts, ends = self._tokenizer.tokenize_with_offsets(tf.constant(batch, tf.string))
      splits = ids.row_splits.numpy()
      flat_ids = ids.flat_values.numpy()
      flat_starts = starts.flat_values.numpy().astype(np.int32)
      flat_ends = ends.flat_values.numpy().astype(np.int32)
      for j, text in enumerate(batch):
        row = slice(splits[j], splits[j + 1])
        s, e = flat_starts[row], flat_ends[row]
        char_of_byte = byte_to_char_offsets(text)
        if char_of_byte is not None:
          s, e = char_of_byte[s], char_of_byte[e - 1] + 1
        results.append(TokenizedText(flat_ids[row], s, e))
    return results

  def ids_to_tokens(self, ids):
    """Vocabulary strings of `ids` (for logs and error messages)."""
    return [self.vocab[i] for i in ids]
