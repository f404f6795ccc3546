"""Megatron-style tensor parallelism of the shared GPT, for the blocks of FAL (First Attentions Last).

- ``comm``: the counted all-reduce (gloo between actors, threads, or a counting stand-in) and
  Megatron's f / g autograd operators on it;
- ``model``: one TP rank of the GPT (column-parallel QKV / up-projection, row-parallel output /
  down-projection) for ``pre_ln``, ``parallel``, ``fal`` and ``fal_plus``; sharding and gathering;
- ``ranks``: ranks as threads or as Ray actors over gloo, a rank's measured compute;
- ``check``: TP against the single-process model (logits, loss, every gradient);
- ``simtime``: a rank's compute plus its all-reduces on the shared ``Link``;
- ``train`` / ``technique``: single-process training (same math) and technique ``tensor_parallel``.
"""
