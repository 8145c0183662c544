"""Loop-level tools: the reference interpreter, lowering, schedules (each in its own module).

Kept free of imports that could fail: import the submodule you need, e.g. `refcomp.loops.interpreter`.
"""
