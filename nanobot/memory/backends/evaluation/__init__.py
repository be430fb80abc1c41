"""Evaluation of memory backends, kept off the product path.

- `controls.py`: the control conditions used in experiments (`memory.condition`: no memory, full
  history, a static profile, a rolling summary) — loaded only when the config selects one.
- `check.py`: the swap-flow check behind `nanobot memory backend check` (write, read back, reset,
  with a trace of every step) — loaded only by that command.

The runtime never imports this package unless asked for one of these.
"""
