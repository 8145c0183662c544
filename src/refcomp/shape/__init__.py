"""Symbolic shapes: integer simplifier, bound analysis, Z3 prover, in-bounds proofs, `refcomp check`."""
from .analyzer import Analyzer
from .evaluate import EvaluationError, evaluate

__all__ = ["Analyzer", "EvaluationError", "evaluate"]
from .prove import ProofResult, prove

__all__ += ["ProofResult", "prove"]
