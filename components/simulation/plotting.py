"""Matplotlib helpers for the simulation techniques (the shared ones live in core.plotting)."""
from components.core.plotting import fig_png as png  # noqa: F401
from components.core.plotting import figure  # noqa: F401
