"""Model logits -> answer text (span decoding) -> official SQuAD scores."""
