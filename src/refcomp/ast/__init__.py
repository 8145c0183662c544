"""The IR of refcomp, both levels: dtypes, expressions, statements, buffers, functions, modules."""
from .dtype import DTYPE_NAMES, DataType, dtype
from .node import Node
from .expr import (
    EQ, GE, GT, LE, LT, NE, Add, And, BinaryOp, Broadcast, BufferLoad, Call, Cast, CompareOp, Div,
    FloatImm, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mul, Not, Or, PrimExpr, Ramp, Range, Select,
    SizeVar, StringImm, Sub, TruncDiv, TruncMod, Var, all_, any_, as_int, const, convert, floordiv,
    floormod, max_, min_, select, truncdiv, truncmod,
)
from .buffer import Buffer, BufferRegion, decl_buffer
from .stmt import (
    Allocate, AssertStmt, Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, IterVar,
    LetStmt, MatchBufferRegion, SeqStmt, Stmt, While, seq,
)
from .function import IRModule, PrimFunc
from .functor import Mutator, Visitor, collect, free_vars, post_order_visit, substitute
from .structural import assert_structural_equal, structural_equal
from . import printer as _printer  # noqa: F401  (shows the IR of refcomp errors)
