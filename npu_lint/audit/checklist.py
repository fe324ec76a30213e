"""The migration completion checklist: each item, its status (pass / FAIL / unknown / not attainable) and evidence.

Items map to rule codes (:data:`CHECKLIST`); inventory facts settle what the rules cannot see (a missing NPU
spec, a missing generated file, the transformers pin, registered model types). The ``scope`` item compares the
files changed since ``--base REV`` with :data:`OUT_OF_SCOPE` (:func:`changed_since`).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_lint.audit.inventory import Lint, Package, parse_file

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"


NOT_ATTAINABLE = (
    "not attainable"  # the item needs an API the tree's generation does not have (OpSlot: no handles)
)


CHECKLIST: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("pin", "transformers pin matches the installed transformers", ("NPU506",)),
    (
        "gpu-deps",
        "GPU-only dependencies classified (vendor kernels reached only through the registry)",
        ("NPU3xx",),
    ),
    ("device", "device-neutral allocations, dtype conversions and distributed APIs", ("NPU1xx", "NPU6xx")),
    ("npu-backends", "NPU backends present in the registry for every dispatched op", ("NPU205",)),
    (
        "veomniop",
        "every model-side operator an instance-local handle (VeomniOp / VeomniKernel)",
        ("NPU201", "NPU202", "NPU203"),
    ),
    ("semantics", "normalisation and loss semantics preserved", ("NPU401", "NPU402")),
    ("npu-spec", "NPU spec reuses GPU bodies", ("NPU504",)),
    (
        "registration",
        "every model type registered (a multimodal wrapper and its text backbone)",
        ("NPU503", "NPU732"),
    ),
    ("generated", "generated files in sync", ("NPU505",)),
    ("scope", "no out-of-scope files", ()),
)


# files changed since --base that a model migration should not touch
OUT_OF_SCOPE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("checkpoint", re.compile(r"(^|/)(checkpoints?|ckpts?)/|\.(safetensors|bin|pt|pth|ckpt|gguf)$", re.I)),
    ("log", re.compile(r"(^|/)(logs?|wandb|runs|tensorboard)/|\.(log|out|err)$", re.I)),
    ("plot", re.compile(r"(^|/)(plots?|figures?|figs?)/|\.(png|jpe?g|svg|gif|pdf)$", re.I)),
    ("dataset", re.compile(r"(^|/)(datasets?|data)/|\.(jsonl|parquet|arrow|csv|tsv)$", re.I)),
    (
        "report",
        re.compile(r"(^|/)reports?/|(^|/)[^/]*(report|summary|results?)[^/]*\.(md|txt|html|json)$", re.I),
    ),
    (
        "launch script",
        re.compile(r"\.sh$|(^|/)(scripts|launch|launcher)/|(^|/)(train|launch|run)[^/]*\.py$", re.I),
    ),
    ("training config", re.compile(r"(^|/)(configs?|recipes?)/.*\.(ya?ml|json|toml)$|\.ya?ml$", re.I)),
)


_REVISION = re.compile(r"[^\s\x00-\x1f\x7f-][^\s\x00-\x1f\x7f]*")


def valid_revision(rev: str) -> bool:
    """A git revision given on the command line: never an option (``--output=FILE`` would make git write a
    file), no whitespace or control characters."""
    return bool(_REVISION.fullmatch(rev))


_FILTER_KEYS = r"^filter\..*\.(clean|smudge|process|required)$"


def _filter_overrides(listing: str) -> list[str]:
    """``-c`` options that empty every filter driver the configuration (any level) names, so git compares
    raw bytes and never runs a clean/smudge/process command; ``listing`` is ``git config -z --get-regexp``."""
    out: list[str] = []
    for entry in listing.split("\0"):
        key = entry.split("\n", 1)[0]
        if not key.startswith("filter.") or key.count(".") < 2:
            continue
        name = key[len("filter.") : key.rindex(".")]
        for opt in ("clean=", "smudge=", "process=", "required=false"):
            pair = f"filter.{name}.{opt}"
            if pair not in out:
                out += ["-c", pair]
    return out


def changed_since(root: Path, base: str) -> tuple[list[dict[str, str]] | None, str]:
    # the repository's own config must not run anything (core.fsmonitor is a command git runs on diff
    # and ls-files; a filter driver's clean/process command runs when diff hashes a modified work-tree file);
    # no external diff or textconv either
    safe = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external="]

    def git(*args: str, cwd: Path = root, ok: tuple[int, ...] = (0,)) -> str:
        proc = subprocess.run(
            ["git", *safe, "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"},
        )
        if proc.returncode not in ok:
            raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "git failed")
        return proc.stdout

    if not valid_revision(base):
        return None, f"not a revision: {base!r}"
    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
        # the revision resolved to a commit id first (after --end-of-options it can never be an option), then
        # the diff names only that id: nothing the user typed reaches git's option parser
        commit = git(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}", cwd=top
        ).strip()
        if not re.fullmatch(r"[0-9a-f]{40,64}", commit):
            return None, f"git: not a commit: {base!r}"
        safe += _filter_overrides(git("config", "-z", "--get-regexp", _FILTER_KEYS, cwd=top, ok=(0, 1)))
        # paths relative to the repository root: diff (tracked changes since REV) and untracked files
        names = git(
            "diff", "--no-ext-diff", "--no-textconv", "--name-only", commit, "--", cwd=top
        ).splitlines()
        names += git("ls-files", "--others", "--exclude-standard", cwd=top).splitlines()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return None, f"git: {exc}"
    model_rel = root.relative_to(top).as_posix() if root.is_relative_to(top) else ""
    # the package that imports every model package (``<layout>/transformers/__init__.py``, any layout)
    parent = root.resolve().parent
    registry_import = (
        (parent / "__init__.py").relative_to(top).as_posix() if parent.is_relative_to(top) else ""
    )
    out = []
    for name in sorted(set(n.strip() for n in names if n.strip())):
        if model_rel and (name == model_rel or name.startswith(model_rel + "/")):
            category, scope = "model package", "in scope"
        elif re.search(r"(^|/)tests?/", name) or Path(name).name.startswith("test_"):
            category, scope = "test", "in scope"
        elif registry_import and name == registry_import:
            category, scope = "model registry import", "in scope"
        else:
            category = next((label for label, rx in OUT_OF_SCOPE if rx.search(name)), "")
            scope = "out of scope" if category else "review"
            category = category or "other"
        out.append({"path": name, "category": category, "scope": scope})
    return out, ""


def _codes_status(rules: dict[str, Any], by_code: Counter, codes: tuple[str, ...]) -> tuple[str, str, int]:
    """(status, note, findings) for an item mapped to rule codes (prefixes end in 'xx')."""
    present: list[str] = []
    missing: list[str] = []
    count = 0
    for code in codes:
        if code.endswith("xx"):
            prefix = code[:-2]
            matched = [c for c in rules if c.startswith(prefix)]
            (present if matched else missing).append(code)
            count += sum(by_code[c] for c in matched)
        else:
            (present if code in rules else missing).append(code)
            count += by_code[code]
    if count:
        return FAIL, f"{count} findings ({', '.join(present)})", count
    if not present:
        return UNKNOWN, f"{', '.join(missing)} not in this npu-lint build's rule registry", 0
    if missing:
        return (
            UNKNOWN,
            f"no {', '.join(present)} findings, but {', '.join(missing)} not in the rule registry",
            0,
        )
    return PASS, f"no {', '.join(present)} findings", 0


@dataclass(frozen=True)
class AuditFacts:
    """What the checklist and the steps are decided from."""

    package: Package
    lint: Lint
    inventory: list[dict[str, Any]]
    op_table: list[dict[str, Any]]
    deps: list[dict[str, Any]]
    changed: list[dict[str, str]] | None  # files changed since --base (None without it, or when git failed)
    scope_error: str = ""


def build_checklist(facts: AuditFacts) -> list[dict[str, Any]]:
    lint = facts.lint
    rules, by_code, diags, opslot_tree = lint.rules, lint.by_code, lint.diags, lint.opslot_tree
    inventory, op_table, deps = facts.inventory, facts.op_table, facts.deps
    changed, scope_error = facts.changed, facts.scope_error
    npu_spec, init, root = facts.package.npu_spec, facts.package.init, facts.package.root
    present = {i["role"]: i for i in inventory}
    out = []
    for key, label, codes in CHECKLIST:
        evidence: list[str] = []
        if key == "scope":
            if changed is None:
                status, note = UNKNOWN, scope_error or "run with `--base REV` to list files changed since REV"
            else:
                bad = [c for c in changed if c["scope"] == "out of scope"]
                status = FAIL if bad else PASS
                note = (
                    f"{len(bad)} of {len(changed)} changed files are out of scope"
                    if bad
                    else f"{len(changed)} changed files, none out of scope"
                )
                evidence = [f"{c['path']} ({c['category']})" for c in bad[:10]]
            out.append(
                {"item": label, "key": key, "codes": [], "status": status, "note": note, "evidence": evidence}
            )
            continue
        status, note, _ = _codes_status(rules, by_code, codes)
        matched = [
            d
            for d in diags
            if any(d.code.startswith(c[:-2]) if c.endswith("xx") else d.code == c for c in codes)
        ]
        evidence = [
            f"{Path(d.path).resolve().relative_to(root).as_posix()}:{d.line}: {d.code} {d.message}"
            for d in matched[:5]
        ]
        # inventory facts that settle an item the rules cannot see
        if key == "npu-spec" and not present["NPU patch spec"]["present"]:
            status, note = FAIL, "no NPU patch spec yet"
        elif key == "npu-spec" and npu_spec and status != FAIL:
            evidence.append(
                f"NPU spec shape {npu_spec.get('shape') or 'unknown'}; re-registers "
                f"{len(npu_spec.get('imports_gpu') or [])} GPU patch functions"
            )
        elif key == "generated":
            missing = [i["path"] for i in inventory if i["role"].startswith("generated") and not i["present"]]
            if any(i["role"] == "generated NPU file" and not i["present"] for i in inventory):
                status, note = FAIL, "the NPU generated file does not exist yet"
            if missing:
                evidence.append("missing: " + ", ".join(missing))
        elif key == "veomniop" and opslot_tree:
            slots = [o for o in op_table if "OpSlot" in o["source"]]
            evidence = evidence[:0] + (
                ["inventory: " + ", ".join(f"{o['op']}/{o['variant']} (OpSlot)" for o in slots)]
                if slots
                else []
            )
            others = [d for d in matched if d.code != "NPU201"]
            if others:
                status, note = FAIL, f"{len(others)} findings besides the OpSlot dispatch"
            else:
                status, note = (
                    NOT_ATTAINABLE,
                    "this tree is of the OpSlot generation, which has no instance-local handle API: its dispatch is "
                    "module-global by design (NPU201 lists it once per file); attainable once the tree moves to "
                    "VeomniOp or VeomniKernel",
                )
        elif key == "veomniop":
            slots = [o for o in op_table if "OpSlot" in o["source"] or "vendor kernel call" in o["source"]]
            if slots:
                evidence.append(
                    "inventory: " + ", ".join(f"{o['op']}/{o['variant']} ({o['source']})" for o in slots)
                )
                if status != FAIL:
                    status, note = (
                        FAIL,
                        note + f"; the inventory finds {len(slots)} ops not yet instance-local",
                    )
        elif key == "npu-backends":
            no_npu = [
                f"{o['op']}/{o['variant']}" if o["variant"] else o["op"]
                for o in op_table
                if not [i for i in o["npu"] if not i.endswith("(device-agnostic)")]
            ]
            if no_npu:
                evidence.append(
                    "no NPU row (eager or a device-agnostic implementation on NPU): " + ", ".join(no_npu)
                )
        elif key == "gpu-deps":
            gpu_only = [d for d in deps if d["kind"] == "vendor import"]
            if gpu_only:
                evidence.append("vendor imports: " + ", ".join(sorted({d["name"] for d in gpu_only})))
        elif key == "registration" and init is not None:
            evidence.append("registered: " + (", ".join(init["model_types"]) or "none"))
            if not init["model_types"] and status == PASS:
                status, note = FAIL, "`__init__.py` registers no model type"
            elif init.get("registry_missing") and init["model_types"]:
                status, note = (
                    FAIL,
                    f"`__init__.py` imports `MODELING_REGISTRY` from `{init['registry_missing']}`, which this tree "
                    "does not have: importing the package fails and nothing is registered",
                )
            elif init.get("parent_imports") is False and init["model_types"]:
                package = Path(root).name
                status, note = (
                    FAIL,
                    f"the parent package's `__init__.py` does not import `{package}`: its registrations never run, "
                    "so its model types find no VeOmni model (`Unknown Modeling name`, or the stock unpatched "
                    f"transformers classes under `MODELING_BACKEND=hf`; add `{package}` to `from . import ...` "
                    "there)",
                )
            classes = _generated_classes(root, inventory)
            wrappers = sorted(c for c in classes if c.endswith("ForConditionalGeneration"))
            backbones = sorted(c for c in classes if c.endswith(("TextModel", "ForCausalLM")))
            if wrappers and backbones:
                evidence.append(
                    f"the GPU generated file defines a multimodal wrapper ({', '.join(wrappers)}) and a text backbone "
                    f"({', '.join(backbones)}): a vision-language model registers both model types"
                )
        elif key == "pin":
            pins = sorted({i["note"] for i in inventory if i["note"].startswith("Based on transformers")})
            try:
                import importlib.metadata as md

                installed = md.version("transformers")
            except md.PackageNotFoundError:
                installed = "not installed"
            evidence.append(f"generated files: {'; '.join(pins) or 'no banner'}; installed: {installed}")
            versions = {m.group(1) for p in pins for m in [re.search(r"transformers==(\S+)", p)] if m}
            if status != FAIL:  # a pass needs the comparison to have been made, and to agree
                if installed == "not installed":
                    status, note = UNKNOWN, "transformers is not installed here: the pin cannot be compared"
                elif not versions:
                    status, note = UNKNOWN, "no generated file names its transformers version"
                elif versions != {installed}:
                    status, note = (
                        FAIL,
                        f"generated from transformers {', '.join(sorted(versions))}, installed {installed}",
                    )
                else:
                    note = f"generated from transformers {installed}, the installed version"
        out.append(
            {
                "item": label,
                "key": key,
                "codes": list(codes),
                "status": status,
                "note": note,
                "evidence": evidence,
            }
        )
    return out


def _generated_classes(root: Path, inventory: list[dict[str, Any]]) -> set[str]:
    for i in inventory:
        if i["role"] == "generated GPU file" and i["present"]:
            tree = parse_file(root / i["path"])
            if tree is not None:
                return {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
    return set()
