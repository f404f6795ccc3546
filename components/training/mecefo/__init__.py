"""MeCeFO (NeurIPS 2025): a failed data-parallel replica's ring neighbour processes both micro-batches,
with attention skipped in backward, FFN activations recomputed and low-rank FFN weight gradients, against
exact neighbour-do-both, checkpoint-restart and fault-free training; replicas are Ray actors that die
and are restarted by Ray."""
