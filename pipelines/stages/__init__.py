"""The DAG's stages, one module each: prepare, execute, evaluate, report."""
