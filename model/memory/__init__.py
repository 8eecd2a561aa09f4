"""The memory planner: peak training memory of the span model and the batch that fits a device.

  estimate.py  the byte formula (weights, optimizer slots, gradients, activations per layer) and
               its sources; the largest batch whose count fits a number of bytes
  device.py    device facts: usable GPU memory, the host's RAM, the allocator's overhead
  plan.py      the batch train.py runs (--train_batch_size=auto), the max-batch table and what
               `python -m model.memory` prints; MemoryPlanError
  diagnose.py  explaining a batch that does not fit or a step that ran out of memory
  heads.py     an output head's training bytes: the span head against a flattened Dense head
  __main__.py  the command line (`python -m model.memory`, the squad-qa-memory console script)
"""
