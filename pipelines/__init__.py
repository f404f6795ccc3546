"""The shared experiment DAG (prepare -> execute -> evaluate -> report) and the `dtlab` CLI."""
