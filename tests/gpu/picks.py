"""The first opdb sample of each (op, output dtype) whose gpu lowering contains it, found once
per test session: the NVRTC test (test_gpu_codegen) and the fiber harness test
(test_harness_programs) take the same programs, and finding them lowers every sample (~10k
pipelines, most of either test's time). The first to search writes the picked samples' indices
to the session folder (tests/conftest.py: $INPLACE_TEST_SESSION_DIR, shared by the xdist
workers); the other lowers only those. The union of the picked programs' keys is every key of
every sample (each new key picks its sample), so both give the same `seen` and programs."""
from __future__ import annotations

import json
import os

import numpy as np

import compiler as cc


def _lower(sample):
    return cc.compile(sample.fn, backend="gpu").lower(
        *[a.copy() if isinstance(a, np.ndarray) else a for a in sample.args])


def first_per_key(samples, key, name: str | None = None):
    """(every key seen, [(sample, lowered program)] of the first sample giving each new key);
    `name` shares the search through the session folder."""
    folder = os.environ.get("INPLACE_TEST_SESSION_DIR")
    path = os.path.join(folder, f"picks-{name}.json") if folder and name else None
    if path and os.path.exists(path):
        with open(path) as f:
            picked = [(samples[i], _lower(samples[i])) for i in json.load(f)]
        return {key(n) for _, p in picked for n in p.graph.nodes}, picked
    seen, picked, index = set(), [], []
    for i, sample in enumerate(samples):
        try:
            prog = _lower(sample)
        except cc.CompilerError:
            continue
        keys = {key(n) for n in prog.graph.nodes} - seen
        if keys:
            seen |= keys
            picked.append((sample, prog))
            index.append(i)
    if path:
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(index, f)
        os.replace(tmp, path)   # (atomic: a reader sees the whole list or none)
    return seen, picked
