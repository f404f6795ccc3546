"""Adaptive Beam Search (arXiv 2505.15636) on HNSW (faiss), Vamana and exactly navigable graphs.

Public API (plain functions, no DAG needed): :func:`build_graph`, :func:`load_graph`, :func:`search`,
:func:`recall_at_k`; the registered techniques live in ``technique.py``.
"""
from components.algorithms.adaptive_beam_search.api import (RULES, SearchResult, build_graph, recall_at_k,
                                                            search)
from components.algorithms.adaptive_beam_search.graphs import Graph, is_navigable, load_graph

__all__ = ["Graph", "RULES", "SearchResult", "build_graph", "is_navigable", "load_graph", "recall_at_k", "search"]
