"""Symbolic shapes: integer simplifier, bound analysis, Z3 prover, in-bounds proofs, `refcomp check`."""
from .analyzer import Analyzer
from .evaluate import EvaluationError, UnboundVariable, ZeroDivisionFailure, evaluate

__all__ = ["Analyzer", "EvaluationError", "UnboundVariable", "ZeroDivisionFailure", "evaluate"]
from .prove import ProofResult, prove

__all__ += ["ProofResult", "prove"]
from .in_bounds import Obligation, check_accesses, collect_obligations, verify_in_bounds

__all__ += ["Obligation", "check_accesses", "collect_obligations", "verify_in_bounds"]
from .guards import DimRelation, insert_runtime_guards, runtime_preconditions, shape_relations

__all__ += ["DimRelation", "insert_runtime_guards", "runtime_preconditions", "shape_relations"]
from .check import Problem, Report, check

__all__ += ["Problem", "Report", "check"]
