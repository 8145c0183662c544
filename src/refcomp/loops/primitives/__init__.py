"""Schedule primitives, one module per family; each primitive is a pure function (see loops/schedule.py)."""
