"""The intrinsic calls the IR knows: name, arity, purity, and how their result dtype is found.

Every backend (interpreter, C, CUDA) implements exactly this table; spec/ir.md gives the semantics.
"""
from __future__ import annotations

from dataclasses import dataclass

# float -> float math, applied element-wise, result dtype == argument dtype
FLOAT_UNARY = ("exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos",
               "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
               "sigmoid", "erf", "floor", "ceil", "round", "trunc", "nearbyint")
FLOAT_BINARY = ("pow", "atan2", "fmod", "hypot", "copysign")
# defined on ints and floats, result dtype == argument dtype
ANY_UNARY = ("abs",)
PREDICATES = ("isnan", "isinf", "isfinite")  # float -> bool


@dataclass(frozen=True)
class IntrinsicInfo:
    """What the IR knows about one intrinsic."""

    name: str
    arity: int  # -1: variadic
    pure: bool = True


INTRINSICS: dict[str, IntrinsicInfo] = {}
for _name in FLOAT_UNARY + ANY_UNARY + PREDICATES:
    INTRINSICS[_name] = IntrinsicInfo(_name, 1)
for _name in FLOAT_BINARY:
    INTRINSICS[_name] = IntrinsicInfo(_name, 2)
# if_then_else(cond, a, b) evaluates only the taken branch (unlike Select).
INTRINSICS["if_then_else"] = IntrinsicInfo("if_then_else", 3)
# assume(cond): a fact the prover may use; no effect at run time.
INTRINSICS["assume"] = IntrinsicInfo("assume", 1, pure=False)
# reinterpret(x): the same bits as another type of equal width.
INTRINSICS["reinterpret"] = IntrinsicInfo("reinterpret", 1)
# Opaque effects used by lowered code and tensor intrinsics.
INTRINSICS["tvm_storage_sync"] = IntrinsicInfo("tvm_storage_sync", 1, pure=False)
# prefetch(buffer[indices], write): a hint, as a statement (Evaluate), that the element's cache
# line is read (write 0) or written (write 1) soon (the schedule primitive `prefetch`, sparse
# kernels' gathered rows, the paged attention's next page); its indices are in bounds as a load's
# are, and it has no effect on any value.
INTRINSICS["prefetch"] = IntrinsicInfo("prefetch", 2, pure=False)
# call_extern("c_function_name", args...): a call into C (tensor intrinsic micro-kernels).
INTRINSICS["call_extern"] = IntrinsicInfo("call_extern", -1, pure=False)
# warp_reduce("sum" | "max" | "min", value, width): the reduction of value over the `width` (a
# power of two, 2 to 32) threads of the calling thread's warp, returned to every one of them; like
# a barrier, every one of those threads must reach it.
INTRINSICS["warp_reduce"] = IntrinsicInfo("warp_reduce", 3, pure=False)
# address_of(BufferLoad): the address of that element, for passing to call_extern.
INTRINSICS["address_of"] = IntrinsicInfo("address_of", 1)


def is_pure_call(op: str) -> bool:
    info = INTRINSICS.get(op)
    return info.pure if info is not None else False




# ------------------------------------------------------------------ what an address handed out does
# A tensor intrinsic declares, per buffer operand, whether its micro-kernel reads, writes or
# reads and writes it (TensorIntrin.operand_access); tensorize records that in the function's
# attrs under EXTERN_ACCESS as ((c_function, (access per call_extern argument after the name,
# "" where the argument is not an address)), ...).  An address whose access is not declared there
# (an address_of anywhere else, a call without a declaration) may be written: the conservative
# default.
EXTERN_ACCESS = "extern_access"
ACCESS_KINDS = ("read", "write", "readwrite")


def extern_access_table(attrs) -> dict:
    """{c_function: (access per argument position)} from a function's attrs (EXTERN_ACCESS)."""
    return {name: tuple(accesses) for name, accesses in (attrs or {}).get(EXTERN_ACCESS, ())}


def merge_extern_access(current, name: str, accesses: tuple) -> tuple:
    """current (an EXTERN_ACCESS value) with name's accesses added; two declarations of one C
    function join per position (read and write give readwrite; an undeclared position stays so)."""
    table = dict(current or ())
    old = table.get(name)
    if old is not None and tuple(old) != tuple(accesses):
        width = max(len(old), len(accesses))
        old, new = tuple(old) + ("",) * (width - len(old)), tuple(accesses) + ("",) * (width - len(accesses))
        accesses = tuple(a if a == b else ("" if "" in (a, b) else "readwrite") for a, b in zip(old, new))
    table[name] = tuple(accesses)
    return tuple(sorted(table.items()))


def address_accesses(node, attrs=None) -> list:
    """(BufferLoad, access) for each address_of in node, one entry per place it occurs: the
    declared access where that place is an argument of a call_extern declared in attrs
    (EXTERN_ACCESS), else "write".  Places are told apart by position in the tree, not by node
    identity: one immutable address_of node may sit under a declared call and elsewhere too."""
    import dataclasses

    from .expr import BufferLoad, Call
    from .functor import _children

    table = extern_access_table(attrs)
    out: list = []

    def address(call, access: str) -> None:
        out.extend((load, access) for load in call.args if isinstance(load, BufferLoad))
        walk(call.args)

    def walk(value) -> None:
        for child in _children(value):
            if isinstance(child, Call) and child.op == "address_of":
                address(child, "write")
                continue
            accesses = None
            if isinstance(child, Call) and child.op == "call_extern" and child.args:
                accesses = table.get(getattr(child.args[0], "value", None))
            if accesses is None:
                for field in dataclasses.fields(child):
                    walk(getattr(child, field.name))
                continue
            walk(child.args[0])
            for position, arg in enumerate(child.args[1:]):
                access = accesses[position] if position < len(accesses) else ""
                if access in ACCESS_KINDS and isinstance(arg, Call) and arg.op == "address_of":
                    address(arg, access)
                else:
                    walk(arg)
            for field in dataclasses.fields(child):
                if field.name != "args":
                    walk(getattr(child, field.name))

    walk(node)
    return out


def addressed_writes(node, attrs=None) -> set:
    """The buffers whose address node hands to something that may write through it."""
    return {load.buffer for load, access in address_accesses(node, attrs) if access != "read"}
