"""Regression guard: NPU101 on one block grows linearly with its findings (work counted, not timed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "npu101_scaling.py"


def _bench():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("npu101_scaling", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_npu101_work_is_linear_in_findings_of_one_block() -> None:
    bench = _bench()
    small, large = bench.calls(500), bench.calls(2000)
    # linear work quadruples (ratio 4); the former rescan of earlier statements per finding gave ~16
    assert large / small < 5.5, (small, large)
    assert bench.lint(2000) == 2000
