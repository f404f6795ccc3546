"""SpecReason (arXiv 2504.07891): step-level speculative reasoning with a small speculator and a
base-model judge, stacked with token-level speculative decoding.

session.py   prefix-cached per-request model calls with token accounting
loop.py      the SpecReason loop and the judge's greedy/average/log-likelihood scores
evaluate.py  the harness every variant shares (held-out problems, metrics, judge AUROC)
technique.py registered techniques: specreason, speculative_decoding, reasoning_lm_only
"""
