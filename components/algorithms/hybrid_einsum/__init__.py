"""Hybrid dense/COO einsum ("Exploiting Dynamic Sparsity in Einsum", NeurIPS 2025).

Public API (plain functions, no DAG needed): :func:`einsum` (dense, COO or hybrid along one
opt_einsum path, with the per-step density trace), :func:`plan` / :func:`contract` to reuse a
path, :class:`COO`, :class:`MemoryCapExceeded`. Registered techniques live in ``technique.py``.
"""
from components.algorithms.hybrid_einsum.coo import COO, MemoryCapExceeded
from components.algorithms.hybrid_einsum.engine import REPRESENTATIONS, EinsumRun, Step, contract, einsum
from components.algorithms.hybrid_einsum.expression import Plan, parse, plan

__all__ = ["COO", "EinsumRun", "MemoryCapExceeded", "Plan", "REPRESENTATIONS", "Step", "contract", "einsum", "parse",
           "plan"]
