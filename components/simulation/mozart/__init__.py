"""Mozart: MoE expert allocation by co-activation clustering and token/expert streaming on a
wafer of chiplet packages (NoP-Tree vs 2D mesh)."""
