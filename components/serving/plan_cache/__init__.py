"""Agentic Plan Caching (arXiv 2506.14852): reuse plan templates across agent tasks; see technique.py."""
