"""The "numpy" backend: runs the program with numpy kernels."""
from __future__ import annotations

from .reference import evaluate


class NumpyExecutable:
    def __init__(self, graph, plan=None):
        self.graph = graph
        self.plan = plan
        self.source = ""

    def run(self, inputs):
        return evaluate(self.graph, inputs)
