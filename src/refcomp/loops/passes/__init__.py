"""The lowering passes, one per module; `refcomp.loops.lower.lower` runs them in order."""
