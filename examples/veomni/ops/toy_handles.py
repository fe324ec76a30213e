"""Interned operator handles of this demo tree."""


def resolve_op(op, variant, impl):
    return (op, variant, impl)


class ToyHandle:
    _intern = {}

    def __new__(cls, op, variant, impl="eager"):
        # NPU232: the key leaves out `impl`, which __init__ resolves with
        cached = cls._intern.get((op, variant))
        return cached if cached is not None else super().__new__(cls)

    def __init__(self, op, variant, impl="eager"):
        self._entry = resolve_op(op, variant, impl)
        type(self)._intern[(op, variant)] = self
