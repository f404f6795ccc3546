"""Context parallelism with compressed K/V: ring attention over P chunks of the sequence.

- ``wire``: what one hop carries (fp32, bf16, int8 K/V, a fixed random projection, learned
  subspaces with a per-token index) as real uint8 payloads, both directions;
- ``ring``: the ring-attention math (online-softmax merge, causal, the dK/dV accumulators that
  travel back) vectorised in one process, and the ``cp_ring`` GPT block (with the mixture-of-
  subspaces K/V reparameterisation);
- ``actors``: the same ring on 4 Ray actors, one chunk each, blocks as object refs between them;
- ``simtime``: bytes per hop and the simulated step on the shared ``Link``;
- ``train`` / ``technique``: training loop and technique ``context_parallel``; the time to the
  uncompressed loss is the experiment's ``reach:`` metric (against ``ring_fp32``, seed by seed).
"""
