"""Raw-text serving: tokenization, windowing and span decoding as TensorFlow ops (see export.py)."""
