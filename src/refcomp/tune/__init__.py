"""Auto-tuning: design spaces from schedule rules, evolutionary search with a learned cost model,
a crash-safe database that several drivers can share, and a builder/runner that checks every
candidate against the reference, locally or on the workers of a Dask cluster.

    result = refcomp.tune.tune(func, "c", trials=64, database=Database("tune.jsonl"))
    fast = result.schedule.func          # the best schedule, replayed from its trace
    tune(func, "c", trials=256, runner="dask://scheduler:8786")   # measure on a Dask cluster
"""
from .cost_model import CostModel, RidgeModel, XGBModel, default_cost_model, xgboost_available
from .dask_runner import DaskRunner
from .database import Database, TuningRecord
from .features import FEATURE_NAMES, extract_features, features_of
from .final import Contestant, FinalComparison, final_comparison
from .gpu_rules import AutoBind, CrossThreadReduction, GPUMultiLevelTiling, GPURowReduction, gpu_rules
from .runner import Candidate, Checker, DeviceResident, MeasureResult, Runner, RunnerBackend, machine_description
from .model import ModelTuneResult, Task, TaskReport, extract_tasks, tune_model
from .progress import ProgressBar, format_seconds, matplotlib_available, plot_curve
from .rules import (AutoInline, BatchedMatmulTiling, ConvTiling, GraphDefault, ParallelOuter, RandomComputeLocation,
                    RowPrefetch, RowReductionDefault, TensorizeTiling)
from .search import Failure, TuneResult, apply_best, best_scheduled, count_flops, replay, tune
from .space import (DesignSpace, MultiLevelTiling, MutateCategorical, MutateTileSize, ParallelVectorizeUnroll,
                    ScheduleRule, default_mutators, default_rules, mutate_trace, neighbours)
from .workload import structural_hash

__all__ = [
    "AutoBind", "AutoInline", "BatchedMatmulTiling", "Candidate", "ConvTiling", "Contestant", "FinalComparison", "final_comparison", "CrossThreadReduction", "DeviceResident", "GPUMultiLevelTiling",
    "GPURowReduction", "GraphDefault", "gpu_rules", "Checker", "CostModel", "DaskRunner", "Database", "DesignSpace", "FEATURE_NAMES",
    "Failure", "MeasureResult", "ModelTuneResult", "MultiLevelTiling", "MutateCategorical", "MutateTileSize",
    "ParallelOuter", "ParallelVectorizeUnroll", "ProgressBar", "RandomComputeLocation", "RidgeModel",
    "RowPrefetch", "RowReductionDefault", "Runner", "RunnerBackend", "ScheduleRule", "Task", "TaskReport", "TensorizeTiling",
    "TuneResult", "TuningRecord", "XGBModel", "apply_best", "best_scheduled", "count_flops", "default_cost_model",
    "default_mutators", "default_rules", "extract_features", "extract_tasks", "features_of", "format_seconds",
    "machine_description", "matplotlib_available", "mutate_trace", "neighbours", "plot_curve", "replay", "structural_hash",
    "tune", "tune_model", "xgboost_available",
]
