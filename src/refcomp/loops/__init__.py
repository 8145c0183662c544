"""Loop-level tools: the reference interpreter, lowering, schedules (each in its own module).

Kept free of imports that could fail: import the submodule you need, e.g. `refcomp.loops.interpreter`.
"""


def __getattr__(name: str):
    """`refcomp.loops.Schedule`, imported on first use."""
    if name == "Schedule":
        from .schedule import Schedule

        return Schedule
    raise AttributeError(f"module 'refcomp.loops' has no attribute {name!r}")
