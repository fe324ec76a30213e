"""``npu-lint migrate MODEL_DIR...``: the migration guide end to end for one model package (or several that
depend on each other), ending with one reviewable result.

Front end: it reuses the audit, the engine's fix orchestration (restricted to the packages' files), the tree's
own patchgen and ruff, and ``verify``. Every step runs on a staging copy of the tree (``plan``); without
``--apply`` nothing is written to the tree and the report shows the diff; with ``--apply`` the staged result is
written through the engine's atomic writer. A failing step is rolled back and stops the run.
"""

from __future__ import annotations

import time

from npu_lint.migrate.plan import (
    MigrateError,
    Package,
    Run,
    StepResult,
    changes,
    commit,
    drop_stage,
    make_stage,
    resolve_packages,
    restore,
)
from npu_lint.migrate.steps import (
    STEPS,
    StepFailed,
    step_audit,
    step_device,
    step_dispatch,
    step_init,
    step_model_test,
    step_npu_spec,
    step_patchgen,
    step_ruff,
    step_verify,
)

__all__ = ["MigrateError", "MigrationResult", "migrate"]


class MigrationResult:
    """What a run did: the step results, the changes (path, before, after), whether they were written."""

    def __init__(
        self, run: Run, diff: list[tuple[str, bytes | None, bytes | None]], written: list[str]
    ) -> None:
        self.run = run
        self.changes = diff
        self.written = written
        self.failed = next((r for r in run.results if r.status == "failed"), None)


def migrate(
    model_dirs: list[str],
    apply: bool = False,
    python: str | None = None,
    timeout: float = 900.0,
    run_verify: bool = True,
    progress: object = None,
) -> MigrationResult:
    """Run every step on a staging copy; write the result into the tree only when ``apply``."""
    from npu_lint.verify.runner import default_python

    real_root, found = resolve_packages(model_dirs)
    stage = make_stage(real_root)
    try:
        packages = [
            Package(name, directory, stage / directory.relative_to(real_root), module)
            for name, directory, module in found
        ]
        run = Run(real_root, stage, packages, apply, python or default_python(), timeout, run_verify)
        original = run.tracked()
        from npu_lint.migrate.testgen import model_test_path

        for pkg in packages:  # the model tests are tracked from the start (they may exist already)
            run.extra_files.add(model_test_path(stage, pkg))
        original = run.tracked()
        actions = {
            "audit": step_audit,
            "device": step_device,
            "dispatch": step_dispatch,
            "npu-spec": step_npu_spec,
            "init": step_init,
            "patchgen": step_patchgen,
            "ruff": lambda r, res: step_ruff(r, res, original),
            "model-test": step_model_test,
            "verify": step_verify,
        }
        for name, title in STEPS:
            result = StepResult(name, title)
            run.results.append(result)
            if callable(progress):
                progress(f"{name} ...")
            snapshot = run.tracked()
            start = time.perf_counter()
            try:
                actions[name](run, result)
            except StepFailed as exc:
                restore(run, snapshot)
                result.status = "failed"
                result.todo.append(f"step failed, its changes undone and the run stopped: {exc}")
            result.duration = time.perf_counter() - start
            after = run.tracked()
            moved = sorted(k for k in set(after) | set(snapshot) if after.get(k) != snapshot.get(k))
            result.changed = moved
            if moved and result.status == "unchanged":
                result.status = "changed"
            if callable(progress):
                progress(f"{name}: {result.status} ({result.duration:.1f} s)")
            if result.status == "failed":
                break
        diff = changes(run, original)
        written = commit(real_root, diff) if apply and diff else []
        return MigrationResult(run, diff, written)
    finally:
        drop_stage(stage)
