"""Algorithms measured against the libraries users pick: Adaptive Beam Search (graph ANN search)
and hybrid dense/COO einsum. See components/algorithms/README.md."""
