"""Data sets shipped with packages (no downloads) and their partitioning."""
