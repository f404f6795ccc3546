"""Coding: channel simulation and distributed source coding with shared randomness (Ensemble
Rejection Sampling, arXiv 2510.05552). This is coding, not a search algorithm: the figures are bits
on the wire from real prefix codes and the exactness of the simulated channel, so it is a family of
its own rather than part of components/algorithms. See components/coding/README.md."""
