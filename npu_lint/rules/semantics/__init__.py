"""NPU4xx: model semantics. NPU40x: the RMSNorm contract (a registry variant's contract from
``veomni.norms``, the model class's from its upstream transformers source); NPU41x: loss paths a spec replaces,
compared with the upstream forward.

Upstream classes are read from the installed transformers source (located with ``importlib.util.find_spec``
and parsed with ``ast``; never imported)."""
