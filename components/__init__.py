"""dtlab building blocks: one package per family, shared mechanisms in core/ and compression/."""
