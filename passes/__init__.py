"""Graph passes, one module per pass: each is a public function taking a graph (and options)
and returning a new graph or an analysis object (`passes.reinplace.reinplace`,
`passes.memory_plan.plan_memory`, ...); `compiler.pipeline()` lists the default order.

This package binds no names of its own, so `passes.reinplace` is always the module: the
pass-level API that gathers the functions under one name is `compiler.passes`::

    from compiler import passes
    graph, decisions = passes.reinplace(graph, inplace="auto")
    plan = passes.plan_memory(graph)
    passes.verify_plan(graph, plan)
"""
