"""The steps of the migration guide, each a function of the ``Run`` returning its ``StepResult``.

They reuse what the other commands do: the audit (``npu_lint.audit.build_audit``), the engine's fix
orchestration (``engine.fix_tree``, restricted to the packages' files and to the step's rule codes), the
tree's own patchgen and ruff (subprocesses with a timeout), the model-test generator, and ``verify``'s checks.
A step raises ``StepFailed`` to stop the run; the caller restores the snapshot taken before the step.
"""

from __future__ import annotations

import ast
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from npu_lint.core.process import EscapeGuard, kill_group
from npu_lint.core.safeio import read_text
from npu_lint.migrate.plan import Package, Run, StepResult


class StepFailed(Exception):
    """The step could not complete: the run stops with the tree as it was before the step."""


# -- fixes through the engine ------------------------------------------------------------------------------


def _codes(settings: object, want: Callable[[str], bool], force: tuple[str, ...] = ()) -> list[str]:
    from npu_lint.core.config import selected_codes
    from npu_lint.rules.base import all_rules

    known = {code: rule.default_enabled for code, rule in all_rules().items()}
    chosen = set(selected_codes(settings, known))  # type: ignore[arg-type]
    return sorted(c for c in known if want(c) and (c in chosen or c in force))


def _fix(
    run: Run,
    result: StepResult,
    want: Callable[[str], bool],
    unsafe: bool,
    force: tuple[str, ...] = (),
    apply: bool = True,
):  # noqa: ANN202
    """Lint the packages' files with the step's codes and apply their fixes in the staging tree (``fix_tree``).
    Returns the findings that remain (all of them when not ``apply``)."""
    from npu_lint.core.config import resolve_settings
    from npu_lint.core.discovery import discover
    from npu_lint.engine import fix_tree, lint_paths, project_diagnostics
    from npu_lint.veomni.project import load_project

    settings = resolve_settings(run.stage_root)
    codes = _codes(settings, want, force)
    if not codes:
        result.notes.append("no rule of this step is selected by the tree's configuration")
        return []
    dirs = [str(p.stage_dir) for p in run.packages]
    project = load_project(dirs, settings)
    found = discover(dirs, settings)
    errors: list[str] = list(found.errors)
    diags = []
    for res in lint_paths(found.files, codes, settings, project, None, jobs=1):
        if res.error:
            errors.append(res.error)
        diags.extend(res.diagnostics)
    diags.extend(project_diagnostics(project, found.files, codes, settings, fix_mode=True, errors=errors))
    if not apply:
        return diags
    tree_fix = fix_tree(diags, codes, settings, project, unsafe=unsafe, write=True)
    errors.extend(tree_fix.errors)
    if errors:
        raise StepFailed("; ".join(e.replace(str(run.stage_root) + "/", "") for e in errors[:5]))
    for path, counts in sorted(tree_fix.fixed_counts.items()):
        rel = run.rel(path)
        what = ", ".join(f"{code} x{n}" for code, n in sorted(counts.items()))
        result.notes.append(f"{rel}: fixed {what}")
    for path in tree_fix.created:
        result.notes.append(f"{run.rel(path)}: created")
    for line in tree_fix.dropped:
        result.todo.append(line.replace(str(run.stage_root) + "/", ""))
    return tree_fix.remaining


def _left(run: Run, result: StepResult, remaining: list, codes: Callable[[str], bool]) -> None:
    """One line per rule code of this step still reported, with its first message (the why)."""
    by_code: dict[str, list] = {}
    for diag in remaining:
        if codes(diag.code) and "/generated/" not in diag.path.replace(os.sep, "/"):
            by_code.setdefault(diag.code, []).append(diag)
    for code, diags in sorted(by_code.items()):
        first = diags[0]
        where = f"{run.rel(first.path)}:{first.line}"
        more = f" (and {len(diags) - 1} more)" if len(diags) > 1 else ""
        result.todo.append(f"{code} at {where}{more}: {first.message}")


# -- audit -------------------------------------------------------------------------------------------------


def step_audit(run: Run, result: StepResult) -> None:
    from npu_lint.audit import AuditError, build_audit

    audits = {}
    for pkg in run.packages:
        try:
            report = build_audit(str(pkg.real_dir))  # the tree as it is, before any edit
        except AuditError as exc:
            raise StepFailed(f"{pkg.name}: {exc}") from None
        pin = next((c for c in report["checklist"] if c["key"] == "pin"), None)
        reused = [r for r in report["reuse"] if r["status"] == "reuse"]
        audits[pkg.name] = {
            "registry_rows": report["registry_rows"],
            "ops": len(report["ops"]),
            "pin": {"status": pin["status"], "note": pin.get("note", "")} if pin else None,
            "plan": report["steps"],
            "reused": reused,
            "files": [
                {"path": f["path"], "role": f["role"], "present": f["present"]} for f in report["files"]
            ],
            "findings_total": report["findings_total"],
        }
        result.notes.append(
            f"{pkg.name}: {report['findings_total']} findings, {len(report['ops'])} ops (registry rows: "
            f"{report['registry_rows']}), transformers pin: "
            + (f"{pin['status']} ({pin.get('note') or 'no detail'})" if pin else "unknown")
        )
        for r in reused:
            result.notes.append(f"{pkg.name}: reused unchanged: {r['file']}: {r['why']}")
        if pin and pin["status"] == "fail":
            result.todo.append(
                f"{pkg.name}: {pin.get('note')} (NPU506): regenerate only with the pinned release"
            )
    result.data["audit"] = audits
    result.status = "read"


# -- fix steps ---------------------------------------------------------------------------------------------

_DEVICE_SEMANTICS = ("NPU1", "NPU4", "NPU6", "NPU7")
_DISPATCH = ("NPU2", "NPU303")
_SPEC = ("NPU501", "NPU504")
_INIT = ("NPU502", "NPU503", "NPU732")


def step_device(run: Run, result: StepResult) -> None:
    want = lambda c: c.startswith(_DEVICE_SEMANTICS) and c not in _INIT  # noqa: E731  (NPU732: the init step's)
    remaining = _fix(run, result, want, unsafe=False)
    _left(run, result, remaining, want)
    if any(d.fix is not None and d.fix.applicability == "unsafe" for d in remaining if want(d.code)):
        result.notes.append(
            "unsafe device/semantic fixes are not applied (they change behaviour): see the list"
        )


def step_dispatch(run: Run, result: StepResult) -> None:
    from npu_lint.veomni.project import load_project

    api = load_project([str(p.stage_dir) for p in run.packages]).api
    want = lambda c: c.startswith(_DISPATCH)  # noqa: E731
    if not api.has_handle or api.resolver is None:  # OpSlot: module globals bound at build time
        result.status = "skipped"
        found = Counter(
            d.code for d in _fix(run, result, want, unsafe=False, apply=False) if "/generated/" not in d.path
        )
        stay = ", ".join(f"{code} x{n}" for code, n in sorted(found.items()))
        result.notes.append(
            f"the tree has no instance-local handle API ({api.generation.value} generation, `{api.handle}` slots "
            "bound at model-build time): the dispatch migration needs a VeomniOp/VeomniKernel tree, so its "
            f"findings stay ({stay or 'none'}); the other steps are done"
        )
        return
    remaining = _fix(run, result, want, unsafe=True)
    _left(run, result, remaining, want)


def step_npu_spec(run: Run, result: StepResult) -> None:
    want = lambda c: c.startswith(_SPEC)  # noqa: E731
    remaining = _fix(run, result, want, unsafe=True, force=_SPEC)
    _left(run, result, remaining, want)
    for pkg in run.packages:
        specs = sorted(p.name for p in pkg.stage_dir.glob("*_npu_patch_gen_config.py"))
        if not specs:
            raise StepFailed(f"{pkg.name}: no NPU spec could be created (see the findings above)")


def step_init(run: Run, result: StepResult) -> None:
    want = lambda c: c.startswith(_INIT)  # noqa: E731
    remaining = _fix(run, result, want, unsafe=True, force=_INIT)
    _left(run, result, remaining, want)
    for pkg in run.packages:
        types = registered_model_types(pkg.stage_dir / "__init__.py")
        switched = _has_switch(pkg.stage_dir / "__init__.py")
        result.notes.append(
            f"{pkg.name}: registers {', '.join(f'`{t}`' for t in types) or 'no model type'}; "
            + ("imports switch on IS_NPU_AVAILABLE" if switched else "no IS_NPU_AVAILABLE switch")
        )
        result.data.setdefault("registered", {})[pkg.name] = types  # type: ignore[index]
        if not switched:
            result.todo.append(f"{pkg.name}/__init__.py: no `if IS_NPU_AVAILABLE:` switch (see NPU502 above)")


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(read_text(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None


def registered_model_types(init: Path) -> list[str]:
    """The model types the package's ``__init__`` registers with ``MODELING_REGISTRY.register("...")``."""
    from npu_lint.veomni.registration import registered_types

    tree = _parse(init)
    out: list[str] = []
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.extend(t for t in registered_types(node) if t not in out)
    return out


def _has_switch(init: Path) -> bool:
    tree = _parse(init)
    return tree is not None and any(
        isinstance(n, ast.If) and "IS_NPU_AVAILABLE" in ast.unparse(n.test) for n in ast.walk(tree)
    )


# -- patchgen ----------------------------------------------------------------------------------------------

# one interpreter runs every spec (patchgen's CLI per spec, as a user would): argv[1] is a JSON request
_RUN_MANY = (
    "import json, sys\n"
    "req = json.loads(sys.argv[1])\n"
    "sys.path[:0] = req['path']\n"
    "from patchgen.cli import main\n"
    "rc = 0\n"
    "for spec, out in req['specs']:\n"
    "    rc = rc or main([spec, '-o', out, '--diff'])\n"
    "sys.exit(rc)\n"
)


def patchgen_dirs(run: Run) -> list[str]:
    """Where the tree's patchgen is imported from: its checkout's ``patchgen-pkg/`` (as ``verify`` finds it)."""
    from npu_lint.verify.model import load_model_package
    from npu_lint.verify.runner import patchgen_dirs as verify_dirs

    return verify_dirs(load_model_package(str(run.packages[0].stage_dir)), None)


def _env(run: Run, isolated: bool = True) -> dict[str, str]:
    """A minimal environment (``core.process.minimal_env``: no credentials, a private HOME and TMPDIR), the
    interpreter's directory first on PATH (patchgen formats with the ``ruff`` beside it, as in verify)."""
    from npu_lint.core.process import minimal_env

    home = run.stage_root.parent / "home"
    home.mkdir(exist_ok=True)
    extra = (
        {} if isolated else {"PYTHONPATH": str(run.stage_root)}
    )  # the tree's tests import `veomni` from it
    return minimal_env(run.python, str(home), extra)


def _python_child(
    run: Run, argv: list[str], timeout: float | None = None, isolated: bool = True
) -> subprocess.CompletedProcess[str]:
    """The tree's code in a child of its own process group (killed whole on timeout), cwd = the staging root."""

    limit = timeout or run.timeout
    cmd = [run.python, *(["-I"] if isolated else []), *argv]
    with EscapeGuard() as guard:
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=str(run.stage_root),
                env=_env(run, isolated),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        except OSError as exc:
            raise StepFailed(f"cannot run {run.python}: {exc}") from None
        deadline = time.monotonic() + limit
        try:
            while True:
                try:
                    out, err = proc.communicate(timeout=min(0.5, max(deadline - time.monotonic(), 0.01)))
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() >= deadline:
                        raise
                    if proc.poll() is not None:
                        # the child is gone but something still holds its pipes: what it left running, in its
                        # group or (having left it) re-parented to us
                        kill_group(proc.pid)
                        guard.kill_escaped()
        except BaseException as exc:
            kill_group(proc.pid)
            guard.kill_escaped()
            try:
                proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                for pipe in (proc.stdout, proc.stderr):
                    if pipe is not None:
                        pipe.close()
                proc.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise StepFailed(f"`{' '.join(cmd[1:4])}` timed out after {limit:.0f} s") from None
            raise
        kill_group(proc.pid)  # whatever the child left running in its group
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def spec_modules(pkg: Package) -> list[tuple[str, str]]:
    """(dotted spec module, output directory relative to the root) of every spec of the package, GPU first."""
    specs = sorted(pkg.stage_dir.glob("*_patch_gen_config.py"), key=lambda p: ("_npu_" in p.name, p.name))
    return [(f"{pkg.module}.{p.stem}", f"{pkg.rel}/generated") for p in specs]


def run_patchgen(run: Run) -> subprocess.CompletedProcess[str]:
    import json

    specs = [s for pkg in run.packages for s in spec_modules(pkg)]
    req = {"path": [str(run.stage_root), *patchgen_dirs(run)], "specs": specs}
    return _python_child(run, ["-c", _RUN_MANY, json.dumps(req)])


def step_patchgen(run: Run, result: StepResult) -> None:
    from npu_lint.veomni.patchgen import regen_command

    if not patchgen_dirs(run):
        result.status = "skipped"
        for pkg in run.packages:
            for spec in sorted(pkg.stage_dir.glob("*_patch_gen_config.py")):
                result.todo.append(
                    f"run `{regen_command(str(spec))}`: the tree has no patchgen-pkg/ checkout"
                )
        return
    before = run.tracked()
    first = run_patchgen(run)
    if first.returncode != 0:
        raise StepFailed(f"patchgen failed (exit {first.returncode}): {_tail(first)}")
    after_first = run.tracked()
    second = run_patchgen(run)
    if second.returncode != 0:
        raise StepFailed(f"patchgen failed on its second run (exit {second.returncode}): {_tail(second)}")
    after_second = run.tracked()
    moved = sorted(
        k for k in set(after_first) | set(after_second) if after_first.get(k) != after_second.get(k)
    )
    if moved:
        raise StepFailed(f"patchgen is not reproducible: the second run changed {', '.join(moved)}")
    specs = [m for pkg in run.packages for m, _ in spec_modules(pkg)]
    result.notes.append(f"ran twice over {len(specs)} specs ({', '.join(s.rsplit('.', 1)[1] for s in specs)}); "
                        "the second run changed nothing")  # fmt: skip
    regenerated = sorted(k for k in after_first if before.get(k) != after_first.get(k))
    result.data["regenerated"] = regenerated


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    text = (proc.stderr or proc.stdout or "").strip().splitlines()
    return " | ".join(text[-6:])


# -- ruff --------------------------------------------------------------------------------------------------


def step_ruff(run: Run, result: StepResult, original: dict[str, bytes | None]) -> None:
    from npu_lint.core.tools import ruff_binary
    from npu_lint.migrate.plan import changes

    ruff = ruff_binary()
    if ruff is None:
        result.status = "skipped"
        result.todo.append(
            "ruff is not installed with npu-lint: run the tree's `make quality` on the changed files"
        )
        return
    files = [
        rel
        for rel, _, after in changes(run, original)
        if after is not None and rel.endswith(".py") and "/generated/" not in rel
    ]
    if not files:
        result.notes.append("no changed Python file outside generated/ (patchgen formats its own output)")
        return
    env = _env(run)
    limit = min(run.timeout, 120.0)

    def ruff_run(*argv: str) -> subprocess.CompletedProcess[str] | None:
        try:  # every call bounded: a ruff that hangs on the tree's configuration never hangs the migration
            return subprocess.run(
                [ruff, *argv], cwd=str(run.stage_root), env=env, capture_output=True, text=True, timeout=limit
            )
        except subprocess.TimeoutExpired:
            result.todo.append(f"ruff {argv[0]} did not finish in {limit:g} s: run the tree's `make quality`")
            return None

    ruff_run("format", *files)
    ruff_run("check", "--fix", "--quiet", *files)
    check = ruff_run("check", "--output-format", "concise", *files)
    fmt = ruff_run("format", "--check", *files)
    if check is None or fmt is None:
        result.status = "failed-check"  # the files stand as ruff left them; the check is the user's to run
        return
    result.notes.append(
        f"`ruff format` and `ruff check --fix` (the tree's configuration) on {len(files)} files"
    )
    findings = [
        ln for ln in check.stdout.splitlines() if ln and not ln.startswith(("Found", "All checks", "["))
    ]
    for line in findings:
        result.todo.append(f"ruff: {line}")
    if fmt.returncode != 0:
        result.todo.append(f"ruff format: {fmt.stdout.strip() or fmt.stderr.strip()}")
    result.data["ruff_findings"] = len(findings) + (fmt.returncode != 0)


# -- model test --------------------------------------------------------------------------------------------


def step_model_test(run: Run, result: StepResult) -> None:
    from npu_lint.migrate.testgen import MARKER, model_test_path, render_test

    for pkg in run.packages:
        rel = model_test_path(run.stage_root, pkg)
        path = run.stage(rel)
        run.extra_files.add(rel)
        from npu_lint.fixers.npu_spec import format_with_ruff

        text = format_with_ruff(
            render_test(run.stage_root, pkg), str(path)
        )  # as the ruff step would leave it
        if path.is_file():
            old = read_text(path)
            if MARKER not in old:
                result.todo.append(f"{rel} exists and was not written by npu-lint migrate: left as is; compare it "
                                   "with the generated test (`--format json` carries it)")  # fmt: skip
                result.data.setdefault("tests", {})[pkg.name] = text  # type: ignore[index]
                continue
            if old == text:
                continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        result.notes.append(f"{rel}: model test for {pkg.name}")


# -- verify ------------------------------------------------------------------------------------------------

# verify's import, parity and multimodal checks are what the generated model test exercises (run here too);
# isolation is not attainable on an OpSlot tree and is the generated test's last part on a handle-API tree
VERIFY_CHECKS = ("pin", "checkpoint")


def step_verify(run: Run, result: StepResult) -> None:
    from npu_lint.migrate.testgen import model_test_path
    from npu_lint.verify.model import NotAModel, load_model_package
    from npu_lint.verify.runner import MissingDependency, probe, run_check

    if not run.run_verify:
        result.status = "skipped"
        result.notes.append("--no-verify: not run")
        return
    try:
        probe(run.python)
    except MissingDependency as exc:
        result.status = "skipped"
        result.todo.append(f"verify not run: {exc}")
        return
    failed = []
    for pkg in run.packages:
        try:
            model = load_model_package(str(pkg.stage_dir))
        except NotAModel as exc:
            raise StepFailed(str(exc)) from None
        for check in VERIFY_CHECKS:
            res = run_check(model, check, run.python, run.timeout)
            result.notes.append(f"{pkg.name}: verify {check}: {res.status} ({res.duration:.1f} s)")
            for finding in res.findings:
                what = " ".join(str(finding.get(k, "")) for k in ("what", "meaning")).strip() or str(finding)
                line = f"{pkg.name}: verify {check}: {what}" + (
                    f" ({finding['fix']})" if finding.get("fix") else ""
                )
                (failed if res.status == "fail" else result.todo).append(line)
        rel = model_test_path(run.stage_root, pkg)
        proc = _python_child(run, ["-m", "pytest", "-q", "-p", "no:cacheprovider", rel], isolated=False)
        summary = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        result.notes.append(f"{pkg.name}: pytest {rel}: {summary}")
        if proc.returncode != 0:
            failed.append(f"{pkg.name}: the generated model test fails: {_tail(proc)}")
    result.data["verify_checks"] = list(VERIFY_CHECKS)
    if failed:
        result.todo.extend(failed)
        result.status = "failed-check"
    else:
        result.status = "passed"


STEPS: tuple[tuple[str, str], ...] = (
    ("audit", "Audit: inventory, transformers pin, registry rows, ordered plan, files reused"),
    ("device", "Device fixes and certain semantic fixes (safe fixes of NPU1xx/NPU4xx/NPU6xx/NPU7xx)"),
    ("dispatch", "Dispatch migration to the tree's handle API (NPU2xx, NPU303)"),
    ("npu-spec", "NPU sibling spec: deepcopy of the GPU spec (NPU501, NPU504)"),
    # patchgen before the switch: a failure never leaves an __init__ importing a module that does not exist
    ("patchgen", "The tree's patchgen, twice; the second run must change nothing"),
    (
        "init",
        "`__init__` switch on IS_NPU_AVAILABLE and registration of every model type (NPU502, NPU503, NPU732)",
    ),
    ("model-test", "A focused model test in the style of the tree's tests/models/"),
    ("ruff", "The tree's ruff on the changed files"),
    ("verify", "verify (pin, checkpoint) and the generated model test, when the verify extra is installed"),
)
