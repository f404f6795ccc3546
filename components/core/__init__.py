"""Shared platform mechanisms: registry, parameter checks, links, claims, cache, tracking."""
