"""Hydra launcher that runs multirun jobs as Ray tasks (hydra/launcher=dtlab_ray).

Why ours: hydra-ray-launcher 1.2.2 works but pins cloudpickle<3 (our stack has 3.1.3) and its
AWS half drags in boto3; this one is the local/remote half in a page of code. Jobs run on the
Ray cluster the `cluster` config group names (embedded by default, `cluster=remote` for a real
one); each job is a zero-CPU task whose variants then take the CPUs, so jobs never deadlock.
"""
