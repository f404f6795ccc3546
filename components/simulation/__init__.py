"""Cluster and hardware simulation toolkit shared by Arnold (job placement on a fat tree) and Mozart
(MoE expert allocation on wafer-scale chiplets): topologies, a link-contention cost model, pluggable
placement policies, a vectorised numpy engine and a Ray actor mode that must agree with it."""
