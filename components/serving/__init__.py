"""Serving family: model deployments on Ray Serve, request controllers, cost accounting."""
