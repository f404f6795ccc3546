"""Ensemble Rejection Sampling for channel simulation and Wyner-Ziv distributed compression
(Phan & Khisti, arXiv 2510.05552). Spec: ../shared/techniques/ers_channel_sim.md."""
from components.coding.ers_channel_sim.samplers import ers, pfr, rs_grouped

__all__ = ["ers", "pfr", "rs_grouped"]
