"""The trace of a schedule: every primitive call, printable as Python and serialisable as JSON.

An `Instruction` is one call: the primitive's name (`kind`), its keyword arguments with handles
kept as handles, and the handles it returned.  Sampling instructions carry their decision in the
`decision` argument, so printing a trace gives a deterministic, runnable script and replaying it
reproduces the same IR.

JSON form: `{"version": 1, "instructions": [{"kind": "split", "args": {"loop": {"rv": "l1"},
"factors": [null, 32]}, "outputs": ["l2", "l3"], "multi": true}, ...]}`.  Handle names (b = block,
l = loop, v = sampled value) are given in order of first appearance, so a replayed trace prints
the same text.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ScheduleError
from .primitives.index_map import IndexMap

if TYPE_CHECKING:
    from .schedule import Schedule

TRACE_VERSION = 1


@dataclass(frozen=True, eq=False)
class Instruction:
    """One recorded primitive call: kind, keyword arguments, returned handles."""

    kind: str
    args: dict[str, Any]
    outputs: Any  # None, a handle, or a list of handles
    multi: bool = False  # outputs is a list (printed as a tuple unpacking)


@dataclass(eq=False)
class Trace:
    """The instructions applied to a schedule so far, in order."""

    instructions: list[Instruction] = field(default_factory=list)

    def append(self, instruction: Instruction) -> None:
        """Record one more instruction."""
        self.instructions.append(instruction)

    def __len__(self) -> int:
        return len(self.instructions)

    def copy(self) -> "Trace":
        """An independent trace with the same instructions."""
        return Trace(list(self.instructions))

    # ------------------------------------------------------------------ naming

    def _names(self) -> dict[int, str]:
        """A name for every handle, in order of first appearance (as output or input)."""
        from .schedule import BlockRV, ExprRV, LoopRV

        prefix = {BlockRV: "b", LoopRV: "l", ExprRV: "v"}
        names: dict[int, str] = {}

        def visit(value: Any) -> None:
            if type(value) in prefix:
                if id(value) not in names:
                    names[id(value)] = f"{prefix[type(value)]}{len(names)}"
            elif isinstance(value, (list, tuple)):
                for item in value:
                    visit(item)

        for inst in self.instructions:
            for value in inst.args.values():
                visit(value)
            visit(inst.outputs)
        return names

    # ------------------------------------------------------------------ Python text

    def as_python(self) -> str:
        """The trace as the body of a Python function taking `sch`."""
        names = self._names()
        lines = []
        for inst in self.instructions:
            variadic = _variadic_parameter(inst.kind)
            parts = []
            for key, value in inst.args.items():
                if key == variadic:
                    parts.extend(_python_value(v, names) for v in value)
                else:
                    parts.append(f"{key}={_python_value(value, names)}")
            args = ", ".join(parts)
            call = f"sch.{inst.kind}({args})"
            if inst.outputs is None:
                lines.append(call)
            elif inst.multi:
                targets = [names[id(h)] for h in inst.outputs]
                if not targets:
                    lines.append(f"_ = {call}")
                else:
                    lines.append(f"{', '.join(targets)}, = {call}" if len(targets) == 1
                                 else f"{', '.join(targets)} = {call}")
            else:
                lines.append(f"{names[id(inst.outputs)]} = {call}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.as_python()

    __repr__ = __str__

    # ------------------------------------------------------------------ JSON

    def to_json(self) -> str:
        """The trace as a JSON string (see the module docstring for the layout)."""
        names = self._names()
        records = []
        for inst in self.instructions:
            outputs: Any
            if inst.outputs is None:
                outputs = None
            elif inst.multi:
                outputs = [names[id(h)] for h in inst.outputs]
            else:
                outputs = names[id(inst.outputs)]
            records.append({
                "kind": inst.kind,
                "args": {key: _json_value(value, names) for key, value in inst.args.items()},
                "outputs": outputs,
                "multi": inst.multi,
            })
        return json.dumps({"version": TRACE_VERSION, "instructions": records})

    @staticmethod
    def apply_json(sch: "Schedule", text: str | dict) -> None:
        """Replay a JSON trace onto sch (recording it again in sch.trace)."""
        data = json.loads(text) if isinstance(text, str) else text
        if not isinstance(data, dict) or data.get("version") != TRACE_VERSION:
            raise ScheduleError(f"from_trace: expected a trace JSON object of version {TRACE_VERSION}")
        env: dict[str, Any] = {}
        for number, record in enumerate(data["instructions"]):
            kind = record["kind"]
            method = getattr(sch, kind, None)
            if method is None or kind.startswith("_"):
                raise ScheduleError(f"from_trace: instruction {number}: unknown primitive {kind!r}")
            args = {key: _decode(value, env) for key, value in record["args"].items()}
            variadic = _variadic_parameter(kind)
            positional = args.pop(variadic, []) if variadic else []
            result = method(*positional, **args)
            outputs = record["outputs"]
            if outputs is None:
                continue
            if record.get("multi"):
                if len(outputs) != len(result):
                    raise ScheduleError(
                        f"from_trace: instruction {number} ({kind}) returned {len(result)} handles, "
                        f"the trace has {len(outputs)}"
                    )
                for name, handle in zip(outputs, result):
                    env[name] = handle
            else:
                env[outputs] = result


def _variadic_parameter(kind: str) -> str | None:
    """The name of the *args parameter of Schedule.<kind> (fuse, reorder take loops positionally)."""
    import inspect

    from .schedule import Schedule

    method = getattr(Schedule, kind, None)
    if method is None:
        return None
    for parameter in inspect.signature(method).parameters.values():
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return parameter.name
    return None


def _python_value(value: Any, names: dict[int, str]) -> str:
    if id(value) in names and not isinstance(value, (int, float, str, bool)):
        return names[id(value)]
    if isinstance(value, IndexMap):
        return value.as_lambda()
    if isinstance(value, list):
        return "[" + ", ".join(_python_value(v, names) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_python_value(v, names) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def _json_value(value: Any, names: dict[int, str]) -> Any:
    if id(value) in names and not isinstance(value, (int, float, str, bool)):
        return {"rv": names[id(value)]}
    if isinstance(value, IndexMap):
        return {"index_map": value.to_json()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v, names) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ScheduleError(f"trace: cannot serialise argument {value!r} ({type(value).__name__})")


def _decode(value: Any, env: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if "rv" in value:
            try:
                return env[value["rv"]]
            except KeyError:
                raise ScheduleError(f"from_trace: handle {value['rv']} is used before it is defined") from None
        if "index_map" in value:
            return IndexMap.from_json(value["index_map"])
        raise ScheduleError(f"from_trace: cannot decode argument {value!r}")
    if isinstance(value, list):
        return [_decode(v, env) for v in value]
    return value
