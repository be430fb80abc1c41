"""Evaluation of memory backends, kept off the product path.

- `conditions.py` + `controls.py`: the control conditions used in experiments (`memory.condition`:
  no memory, full history, a static profile, a rolling summary) and the adapter over the file
  memory - loaded only when the config selects a condition or the check builds an adapter.
- `check.py` + `capabilities.py`: the swap-flow check behind `nanobot memory backend check` (write,
  read back, reset, with a trace of every step) and the optional capabilities it discovers -
  loaded only by that command.

The runtime never imports this package unless asked for one of these.
"""
