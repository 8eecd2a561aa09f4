"""FeatureArrays as tf.train.Example bytes in preprocess/records.py's schema, assembled with NumPy
for a chunk of features at once; the bytes are a pure function of the features.
"""

import functools

import numpy as np

from squad_qa.preprocess import records


def _varint(value):
  """Protocol-buffer varint of a non-negative int (bytes)."""
  out = bytearray()
  while True:
    byte = value & 0x7F
    value >>= 7
    if value:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _varints(values):
  """(data, sizes): the varints of int [n] `values` back to back, uint8 [sum(sizes)], and the
  bytes of each, uint8 [n] (a negative value takes 10, as int64 two's complement)."""
  flat = np.asarray(values).astype(np.int64).view(np.uint64)
  sizes = np.ones(flat.shape, np.uint8)
  width = 1  # bytes of the longest varint
  largest = int(flat.max()) if flat.size else 0
  while width < 10 and largest >= 1 << (7 * width):
    sizes += flat >= np.uint64(1 << (7 * width))
    width += 1
  if width == 1:
    return flat.astype(np.uint8), sizes
  groups = np.empty((flat.size, width), np.uint8)
  for k in range(width):
    group = ((flat >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
    group |= (sizes > k + 1).view(np.uint8) << 7  # continuation bit
    groups[:, k] = group
  return groups[np.arange(width)[None, :] < sizes[:, None]], sizes


def _packed_rows(values, inside=None):
  """(data, row_offsets): packed varints of each row of int [rows, n] `values` back to back
  (uint8), and int64 [rows + 1] offsets into them. `inside`, bool [rows, n] with one contiguous
  run per row, encodes only those values."""
  values = np.asarray(values)
  if inside is None:
    data, sizes = _varints(values.ravel())
    row_sizes = sizes.reshape(values.shape[0], -1).sum(axis=1, dtype=np.int64)
  else:
    data, sizes = _varints(values[inside])
    ends = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    row_sizes = np.diff(ends[np.concatenate([[0], np.cumsum(inside.sum(axis=1))])])
  return data, np.concatenate([[0], np.cumsum(row_sizes)]).astype(np.int64)


@functools.lru_cache(maxsize=None)
def _field_header(key, payload_size):
  """Bytes before a packed Int64List payload of `payload_size` bytes in a Features map entry.

  Layout (tensorflow/core/example/example.proto, feature.proto): Features.feature entry (field 1) =
  {key (1): str, value (2): Feature {int64_list (3): Int64List {value (1): packed varints}}}.
  """
  int64_list = b"\n" + _varint(payload_size)
  feature = b"\x1a" + _varint(len(int64_list) + payload_size) + int64_list
  name = key.encode()
  entry_size = (1 + len(_varint(len(name))) + len(name) + 1 +
                len(_varint(len(feature) + payload_size)))
  entry_size += len(feature) + payload_size
  return (b"\n" + _varint(entry_size) + b"\n" + _varint(len(name)) + name + b"\x12" +
          _varint(len(feature) + payload_size) + feature)


class _Source:
  """The buffer records are cut from: constant bytes (each distinct one stored once), then the
  varint payloads."""

  def __init__(self):
    self.pool = bytearray()
    self._pool_index = {}
    self.payloads = []  # uint8 arrays

  def pooled(self, constant):
    """Offset of `constant` (bytes) in the pool."""
    if constant not in self._pool_index:
      self._pool_index[constant] = len(self.pool)
      self.pool.extend(constant)
    return self._pool_index[constant]

  def payload(self, data, offsets):
    """A segment per row of a `_packed_rows` result: ("payload", index, starts, sizes)."""
    self.payloads.append(data)
    return ("payload", len(self.payloads) - 1, offsets[:-1], np.diff(offsets))


def _key_segments(key, features, unique_ids, source, zeros):
  """The segments after `key`'s header in each record: (kind, payload index, starts, sizes)."""
  if key == "input_ids":
    # Real tokens, then zeros (1 byte each) for the padding.
    width = features.input_ids.shape[1]
    lengths = np.asarray(features.input_mask).sum(axis=1).astype(np.int64)
    inside = np.arange(width)[None, :] < lengths[:, None]
    padding = ("pool", None, np.full(len(features), zeros, np.int64), width - lengths)
    return [source.payload(*_packed_rows(features.input_ids, inside)), padding]
  if key in records.PLUS_ONE_KEYS:
    return [source.payload(*_packed_rows(getattr(features, key).astype(np.int64) + 1))]
  column = {
      "unique_ids": unique_ids,
      "example_index": features.example_index,
      "start_positions": features.start_positions,
      "end_positions": features.end_positions,
      "is_impossible": features.is_impossible
  }.get(key)
  column = (np.asarray(column, np.int64)[:, None] if column is not None else getattr(features, key))
  return [source.payload(*_packed_rows(column))]


def serialize_features(features, unique_ids, split):
  """Serializes FeatureArrays as tf.train.Example protos, vectorized.

  The bytes are those of a tf.train.Example with an Int64List per key (packed varints, keys in
  `records.split_keys` order), so `tf.io.parse_example` reads them. Each record is a list of byte
  segments (headers, varint payloads, runs of constant padding bytes) cut from one buffer, for
  all records of a batch at once. The bytes are a pure function of the features.

  Args:
    features: preprocess.features.FeatureArrays.
    unique_ids: int [F].
    split: records.TRAIN_SPLIT or records.EVAL_SPLIT.

  Returns:
    A list of F bytes objects.
  """
  if not len(features):
    return []
  source = _Source()
  zeros = source.pooled(bytes(features.input_ids.shape[1]))
  fields = [(key, _key_segments(key, features, unique_ids, source, zeros))
            for key in records.split_keys(split)]
  return _assemble(fields, len(features), source)


def _assemble(fields, num, source):
  """The `num` records made of each key's header and `fields` segments, as a list of bytes."""
  # Headers depend on each record's payload sizes.
  header_starts, header_sizes = [], []
  body_sizes = np.zeros(num, np.int64)
  for key, segments in fields:
    payload_sizes = sum(sizes for _, _, _, sizes in segments)
    distinct, inverse = np.unique(payload_sizes, return_inverse=True)
    headers = [_field_header(records.stored_name(key), int(size)) for size in distinct]
    header_starts.append(np.array([source.pooled(h) for h in headers], np.int64)[inverse])
    header_sizes.append(np.array([len(h) for h in headers], np.int64)[inverse])
    body_sizes += header_sizes[-1] + payload_sizes
  distinct, inverse = np.unique(body_sizes, return_inverse=True)
  record_headers = [b"\n" + _varint(int(size)) for size in distinct]
  record_header_sizes = np.array([len(h) for h in record_headers], np.int64)[inverse]
  segment_starts = [np.array([source.pooled(h) for h in record_headers], np.int64)[inverse]]
  segment_sizes = [record_header_sizes]
  payload_bases = np.cumsum([len(source.pool)] + [len(p) for p in source.payloads])
  for (_, segments), starts, sizes in zip(fields, header_starts, header_sizes):
    segment_starts.append(starts)
    segment_sizes.append(sizes)
    for kind, index, starts, sizes in segments:
      segment_starts.append(starts + (payload_bases[index] if kind == "payload" else 0))
      segment_sizes.append(sizes)
  buffer = b"".join([bytes(source.pool)] + [p.tobytes() for p in source.payloads])
  starts = np.stack(segment_starts, axis=1).ravel()  # record-major order
  ends = starts + np.stack(segment_sizes, axis=1).ravel()
  # Slicing bytes and joining them is a memcpy per segment, without index arrays.
  data = b"".join(map(buffer.__getitem__, map(slice, starts.tolist(), ends.tolist())))
  record_ends = np.cumsum(record_header_sizes + body_sizes).tolist()
  return [data[b:e] for b, e in zip([0] + record_ends[:-1], record_ends)]
