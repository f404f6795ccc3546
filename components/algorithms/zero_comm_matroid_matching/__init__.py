"""Zero-communication max-weight matroid independent set and matching (NeurIPS 2025, OpenReview
iYHaTWZORB): each of m servers sends one message (greedy top-k independent set; degree-capped
greedy edge kernel of at most (2k-1)(2k-2)+1 edges), the centre solves exactly on the union.
Spec: ../shared/techniques/zero_comm_matroid_matching.md."""
from components.algorithms.zero_comm_matroid_matching.matching import (kcapped_mwm, matching_kernel, naive_topk,
                                                                       kernel_bound)
from components.algorithms.zero_comm_matroid_matching.matroids import MATROIDS, greedy, oracle

__all__ = ["MATROIDS", "greedy", "oracle", "kcapped_mwm", "matching_kernel", "naive_topk", "kernel_bound"]
