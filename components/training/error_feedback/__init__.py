"""Error feedback (EF, EF21) vs compressed GD: tight rates and Lyapunov functions (arXiv 2506.05271).

theory.py    the paper's optimal steps, tight rates and Lyapunov functions, implemented once
agents.py    the algorithms as agent (compress) + server (aggregate) halves; single agent = n=1
prepare.py   the prepare step `ef_problems` (cached, one problem set per seed)
technique.py the technique `error_feedback` and the theory-grid check `ef_theory_grid`
The problems themselves (quadratics, load_digits logistic regression) are in training/problems.py.
"""
