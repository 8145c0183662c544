"""Auto-tuning: design spaces from schedule rules, evolutionary search with a learned cost model,
a crash-safe database, and a builder/runner that checks every candidate against the reference.

    result = refcomp.tune.tune(func, "c", trials=64, database=Database("tune.jsonl"))
    fast = result.schedule.func          # the best schedule, replayed from its trace
"""
from .cost_model import CostModel, RidgeModel, XGBModel, default_cost_model, xgboost_available
from .database import Database, TuningRecord
from .features import FEATURE_NAMES, extract_features, features_of
from .runner import Candidate, Checker, MeasureResult, Runner
from .model import ModelTuneResult, Task, TaskReport, extract_tasks, tune_model
from .progress import ProgressBar, format_seconds, matplotlib_available, plot_curve
from .rules import AutoInline, ParallelOuter, RandomComputeLocation, RowReductionDefault, TensorizeTiling
from .search import Failure, TuneResult, apply_best, best_scheduled, count_flops, replay, tune
from .space import (DesignSpace, MultiLevelTiling, MutateCategorical, MutateTileSize, ParallelVectorizeUnroll,
                    ScheduleRule, default_mutators, default_rules, mutate_trace)
from .workload import structural_hash

__all__ = [
    "AutoInline", "RowReductionDefault", "ModelTuneResult", "ParallelOuter", "RandomComputeLocation", "Task", "TaskReport",
    "TensorizeTiling", "best_scheduled", "ProgressBar", "format_seconds", "matplotlib_available", "plot_curve", "extract_tasks", "tune_model",
    "Candidate", "Checker", "CostModel", "Database", "DesignSpace", "FEATURE_NAMES", "Failure", "MeasureResult",
    "MultiLevelTiling", "MutateCategorical", "MutateTileSize", "ParallelVectorizeUnroll", "RidgeModel", "Runner",
    "ScheduleRule", "TuneResult", "TuningRecord", "XGBModel", "apply_best", "count_flops", "default_cost_model",
    "default_mutators", "default_rules", "extract_features", "features_of", "mutate_trace", "replay",
    "structural_hash", "tune", "xgboost_available",
]
