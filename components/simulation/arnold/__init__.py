"""Arnold: topology-aligned placement of hybrid-parallel (DP x PP) LLM pre-training jobs."""
