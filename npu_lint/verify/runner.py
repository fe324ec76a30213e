"""Runs each check of ``npu-lint verify`` in its own interpreter, with a timeout.

The child is ``_child.py`` of this package, run by file path with ``python -I`` (isolated mode: neither
the working directory, ``PYTHONPATH`` nor the script's directory lands on ``sys.path``), through
``npu_lint.core.process`` (own process group, minimal environment, authenticated result pipe). Its working
directory is the VeOmni tree root, and the request lists exactly what goes on ``sys.path``: the tree root
(so ``veomni`` is the tree being verified, not another copy) and, when there is one, the directory holding
VeOmni's ``patchgen`` package. A crash, a hang or a ``sys.exit`` in model code ends the child, never
npu-lint.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.verify.model import ModelPackage

CHILD = Path(__file__).with_name("_child.py")
CHECKS = ("pin", "patchgen", "import", "parity", "isolation", "checkpoint", "multimodal")
DEFAULT_TIMEOUT = 600.0
INSTALL_HINT = "pip install 'npu-lint[verify]'"


@dataclass
class CheckResult:
    name: str
    status: str  # pass, fail, skip, error (cannot run)
    duration: float = 0.0
    findings: list[dict[str, str]] = field(default_factory=list)
    details: str = ""
    facts: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "check": self.name,
            "status": self.status,
            "duration_s": round(self.duration, 2),
            "findings": self.findings,
            "details": self.details,
            "facts": self.facts,
        }


class MissingDependency(Exception):
    """The child interpreter lacks torch or transformers (exit 2)."""


def probe(python: str) -> None:
    """Fail early, naming the install command, when the child interpreter cannot run any check."""
    code = (
        "import importlib.util as u, json; "
        "print(json.dumps({m: u.find_spec(m) is not None for m in ('torch', 'transformers')}))"
    )
    try:
        proc = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=120)
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise MissingDependency(f"cannot run the interpreter {python}: {exc}") from None
    missing = [m for m, ok in found.items() if not ok]
    if missing:
        raise MissingDependency(f"{' and '.join(missing)} not installed for {python}: {INSTALL_HINT}")


def patchgen_dirs(pkg: ModelPackage, explicit: str | None) -> list[str]:
    """Where the child imports ``patchgen`` from, besides its site-packages."""
    if explicit:
        path = Path(explicit).resolve()
        return [str(path.parent if path.name == "patchgen" else path)]
    checkout = pkg.root / "patchgen-pkg"
    if (checkout / "patchgen" / "__init__.py").is_file():
        return [str(checkout)]
    return []


def request(pkg: ModelPackage, check: str, patchgen: str | None = None, force_npu: bool = False) -> dict:
    return {
        "check": check,
        "root": str(pkg.root),
        "model_dir": str(pkg.model_dir),
        "package": pkg.package,
        "gpu_module": pkg.module_for("gpu"),
        "npu_module": pkg.module_for("npu"),
        "specs": [pkg.specs[s] for s in ("gpu", "npu") if s in pkg.specs],
        "registered": pkg.registered,
        "generated_missing": {
            side: f"{pkg.specs[side]}|{path.name}"
            for side, path in pkg.generated.items()
            if side in pkg.specs and not path.is_file()
        },
        "pin": pkg.pin,
        "pin_source": pkg.pin_source,
        "sys_path": [str(pkg.root), *patchgen_dirs(pkg, patchgen)],
        "force_npu": force_npu,
    }


_STATUSES = ("pass", "fail", "skip", "error", "not attainable")  # not attainable: isolation on an OpSlot tree


_clock = time.monotonic  # the import check's budget (a module attribute: tests replace it)


def _timed_out(name: str, duration: float, limit: float) -> CheckResult:
    return CheckResult(
        name,
        "fail",
        duration,
        [
            {
                "what": f"the check did not finish within {limit:g} s",
                "meaning": "model code hangs (a collective without peers, an endless loop) or is far too "
                "slow for a two-layer model",
                "fix": "run the check alone with a larger --timeout to tell the two apart",
            }
        ],
    )


def run_child(req: dict, python: str, timeout: float, cwd: Path, limit: float | None = None) -> CheckResult:
    """One check in its own interpreter (``core.process.run_untrusted``: own process group killed whole, minimal
    environment, the request on standard input and the verdict on an authenticated pipe: model code that
    writes a result file or prints "pass" is not believed). ``timeout`` is what is left of the check's
    budget, ``limit`` (default: ``timeout``) the ``--timeout`` the report names."""
    from npu_lint.core.process import run_untrusted

    name = req["check"]
    start = time.perf_counter()
    outcome = run_untrusted(
        [python, "-I", str(CHILD)],
        cwd=str(cwd),
        timeout=timeout,
        python=python,
        stdin_data=json.dumps(req).encode(),
    )
    duration = time.perf_counter() - start
    if outcome.timed_out:
        return _timed_out(name, duration, timeout if limit is None else limit)
    data = outcome.result
    if not isinstance(data, dict) or data.get("status") not in _STATUSES:
        tail = "\n".join((outcome.stderr or "").strip().splitlines()[-25:])
        died = outcome.returncode != 0 or not outcome.result_problem.startswith("no answer")
        return CheckResult(
            name,
            "fail",
            duration,
            [
                {
                    "what": f"the check's interpreter died (exit code {outcome.returncode})"
                    if died and outcome.result_problem.startswith("no answer")
                    else f"the check gave no trustworthy verdict: {outcome.result_problem or 'wrong shape'}",
                    "meaning": "model code crashed the process (segfault, abort, os._exit) while importing or "
                    "running the model, or wrote over the check's result",
                    "fix": "read the captured stderr in the details",
                }
            ],
            tail,
        )
    findings = data.get("findings") or []
    facts = data.get("facts") or {}
    return CheckResult(
        name,
        data["status"],
        duration,
        [f for f in findings if isinstance(f, dict)] if isinstance(findings, list) else [],
        data.get("details") if isinstance(data.get("details"), str) else "",
        dict(facts) if isinstance(facts, dict) else {},
    )


def run_check(
    pkg: ModelPackage, check: str, python: str, timeout: float, patchgen: str | None = None
) -> CheckResult:
    if (
        check == "multimodal"
        and pkg.registered
        and not any(n.endswith("ForConditionalGeneration") for n in pkg.registered)
    ):
        return CheckResult(
            check, "skip", details="not a vision-language model (it registers no *ForConditionalGeneration)"
        )
    if check != "import":
        return run_child(request(pkg, check, patchgen), python, timeout, pkg.root)
    # registration is checked twice: IS_NPU_AVAILABLE forced true, and as found (false on this machine);
    # --timeout bounds the whole check (R4-B14): the second child gets what the first left, none after a timeout
    deadline = _clock() + timeout
    stop = _timed_out(check, 0.0, timeout).findings
    results: list[CheckResult] = []
    for f in (False, True):
        left = deadline - _clock()
        if left <= 0:  # the first child used the whole budget without timing out (to the microsecond)
            results.append(_timed_out(check, 0.0, timeout))
            break
        results.append(run_child(request(pkg, check, patchgen, force_npu=f), python, left, pkg.root, timeout))
        if results[-1].findings[:1] == stop:  # timed out: the second child would hang the same way
            break
    merged = CheckResult(check, "pass", sum(r.duration for r in results))
    order = {"pass": 0, "not attainable": 1, "skip": 2, "error": 3, "fail": 4}
    for r in results:
        if order[r.status] > order[merged.status]:
            merged.status = r.status
        for f in r.findings:
            if f not in merged.findings:
                merged.findings.append(f)
        if r.details and r.details not in merged.details:
            merged.details = "\n".join(x for x in (merged.details, r.details) if x)
        merged.facts.update(r.facts)
    return merged


def default_python() -> str:
    return sys.executable
