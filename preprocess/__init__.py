"""SQuAD JSON -> windowed WordPiece features -> TFRecord shards."""
