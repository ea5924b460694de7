"""Execution: the numpy reference interpreter, the arena executor and native backends."""
