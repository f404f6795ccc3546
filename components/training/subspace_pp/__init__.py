"""Pipeline (model) parallelism across Ray actors with compressed boundaries, and Subspace Networks
(SSN, "Protocol Models", arXiv 2506.01260): outputs constrained to one fixed shared subspace so each
boundary sends k coordinates plus token ids, rebuilt exactly."""
from components.training.subspace_pp import technique  # noqa: F401  (registers technique "subspace_pp")
