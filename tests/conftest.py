"""Loaded by pytest before any test module: TensorFlow gets the CPU settings the commands use."""

from squad_qa.base import cpu_runtime  # noqa: F401  (must precede tensorflow)
