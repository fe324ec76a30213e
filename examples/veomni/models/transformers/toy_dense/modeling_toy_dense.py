"""Toy dense model helpers: the rotary helper was moved out of this package and this import was left behind."""

from .rope_utils import apply_rotary  # NPU509: the package has no rope_utils module


def rotate(q, k, cos, sin):
    return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
