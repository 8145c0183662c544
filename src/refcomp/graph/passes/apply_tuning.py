"""apply_tuning_records: schedule kernels from a tuning database before the default schedule.

For each PrimFunc not marked `scheduled`, the database is asked for the best schedule it holds
for that function on the target (`database.schedule_for(func, target)`, which returns the
scheduled PrimFunc or None); a found one replaces the kernel, marked `scheduled`, so
default_schedule leaves it alone.  Kernels the database has no record of keep the default
schedule.  Any object with that method serves (refcomp.tune.Database is one); the graph level
knows nothing of how records are kept or replayed.
"""
from __future__ import annotations

import logging

from ...ast.function import IRModule, PrimFunc
from ...errors import BuildError

log = logging.getLogger("refcomp.graph")


def check_tuning_database(database: object) -> None:
    """BuildError unless database has a callable schedule_for(func, target)."""
    if not callable(getattr(database, "schedule_for", None)):
        raise BuildError(f"graph.build: tuning_database must have a method schedule_for(func, target) "
                         f"(refcomp.tune.Database has one), got {type(database).__name__}")


def apply_tuning_records(mod: IRModule, database: object, target: str) -> IRModule:
    """mod with every unscheduled kernel the database has a record of scheduled by its best one."""
    check_tuning_database(database)
    applied = []
    for name, func in list(mod.functions.items()):
        if not isinstance(func, PrimFunc) or func.attrs.get("scheduled"):
            continue
        tuned = database.schedule_for(func, target)
        if tuned is None:
            continue
        if not isinstance(tuned, PrimFunc):
            raise BuildError(f"graph.build: tuning_database.schedule_for returned {type(tuned).__name__} for "
                             f"kernel {name}, expected a PrimFunc or None")
        mod = mod.with_function(name, tuned.with_attr("scheduled", True).with_attr("tuned", True))
        applied.append(name)
    log.info("apply_tuning_records: %d kernel(s) scheduled from the tuning database%s", len(applied),
             f": {', '.join(applied)}" if applied else "")
    return mod
