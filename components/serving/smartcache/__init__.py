"""SmartCache (NeurIPS 2025, reconstructed): semantic forest of conversation turns, attention-based
topic-shift detection, session -> semantic node -> shared physical KV blocks, STEP eviction; against
vLLM-style prefix caching, a query-only semantic answer cache and no cache. Spec:
../shared/techniques/smartcache.md. Modules: ``prepare`` (the tiny LM), ``embed`` (MiniLM, once),
``kvpool`` (paged KV blocks), ``forest``, ``eviction``, ``systems`` (the caches), ``technique``,
``service`` (Ray Serve)."""
