"""Graph passes. Each is a public function taking a graph (and options) and returning a new
graph or an analysis object; `compiler.pipeline()` lists the default order."""
