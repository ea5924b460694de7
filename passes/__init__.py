"""Graph passes. Each is a public function taking a graph (and options) and returning a new
graph or an analysis object; `compiler.pipeline()` lists the default order.

    graph = cc.trace(fn, *args)
    graph, decisions = passes.reinplace(graph, inplace="auto")
    plan = passes.plan_memory(graph)
    passes.verify_plan(graph, plan)
"""
from .alias import AliasInfo, alias_analysis
from .cse import cse
from .liveness import Liveness, liveness
from .memory_plan import Buffer, MemoryPlan, plan_memory
from .reinplace import Decision, reinplace
from .gemm_accumulate import GemmDecision, gemm_accumulate
from .fusion import fuse
from .schedule import Schedule, schedule
from .simplify import dce
from .verify import PlanError, verify_graph, verify_plan

__all__ = ["alias_analysis", "AliasInfo", "liveness", "Liveness", "reinplace", "Decision",
           "plan_memory", "MemoryPlan", "Buffer", "dce", "cse", "verify_graph", "verify_plan",
           "PlanError", "schedule", "Schedule", "gemm_accumulate", "GemmDecision", "fuse"]
