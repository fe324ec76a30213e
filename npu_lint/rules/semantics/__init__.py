"""NPU4xx: model semantics. Offset (Gemma-style) RMSNorm: the `offset` variant adds the 1 inside the op.

Upstream classes are read from the installed transformers source (located with ``importlib.util.find_spec``
and parsed with ``ast``; never imported)."""
