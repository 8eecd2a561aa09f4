"""The memory planner: peak training memory of the span model and the batch that fits a device
(docs/memory.md lists its modules)."""
