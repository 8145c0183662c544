"""Graph passes, each a pure function IRModule -> IRModule (lower_to_vm produces VM code)."""
from .canonicalize_bindings import canonicalize_bindings  # noqa: F401
from .dead_code_elimination import dead_code_elimination  # noqa: F401
from .fold_constant import fold_constant  # noqa: F401
from .legalize_ops import legalize_ops  # noqa: F401
from .lower_to_vm import lower_to_vm  # noqa: F401
from .normalize import normalize  # noqa: F401
from .plan_memory import arena_expression, arena_size, plan_memory  # noqa: F401
from .reshape_views import rewrite_reshape_views  # noqa: F401
