"""A thread-local switch that layers read while a model is traced: a MirroredStrategy traces each
replica in a thread of its own, so one replica's tracing must not switch another's."""

import contextlib
import threading


class TraceSwitch:
  """False, except inside `on()` in the same thread."""

  def __init__(self):
    self._state = threading.local()

  def __bool__(self):
    return getattr(self._state, "on", False)

  @contextlib.contextmanager
  def on(self):
    """Within: the switch is True in this thread (restored after, so it nests)."""
    previous = bool(self)
    self._state.on = True
    try:
      yield
    finally:
      self._state.on = previous
