"""Helpers shared by the rules of the vendor family (private to it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePath

from npu_lint.core.astutil import call_arg, keyword_arg, module_package, resolve_relative, str_value
from npu_lint.core.diagnostics import Edit
from npu_lint.core.safeio import read_text
from npu_lint.rules._handles import migration_available
from npu_lint.rules.base import Context
from npu_lint.veomni import vendor_map
from npu_lint.veomni.layout import is_model_code
from npu_lint.veomni.profile import ApiProfile, Generation
from npu_lint.veomni.project import Project

# an `if` test that checks a device or a package's availability (other conditions are not guards of the import)
_AVAILABILITY = re.compile(r"available|IS_NPU|IS_CUDA|npu|cuda|device", re.IGNORECASE)
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def in_model_scope(ctx: Context) -> bool:
    """Whether the file is model code for the vendor rules (``npu_lint.veomni.layout.is_model_code``): a file of
    a model package of the tree (any layout), or any file outside VeOmni's framework. Framework files
    (``veomni/models/auto.py``, ``veomni/utils/device.py``, ``veomni/models_kernel/utils/...``) bind kernels for
    the models: not model code."""
    project = ctx.project
    return is_model_code(ctx.source.path, project.root, project.model_packages, project.api.layouts)


_ENTRY = re.compile(r"""entry\s*=\s*["']([\w.]+):""")
_REGISTRATION_CALLS = ("BackendSpec(", "register_op(", "KernelSpec(")
_ENTRY_CACHE: dict[tuple[str, tuple[tuple[str, int], ...]], frozenset[str]] = {}


def _entries_in_directory(directory: Path) -> frozenset[str]:
    """Modules named by ``BackendSpec(entry="module:func")`` in the .py files of one directory (cached by the
    files' modification times, so a long-lived process such as the language server sees edits)."""
    try:
        siblings = sorted(directory.glob("*.py"))
        stamp = tuple((p.name, p.stat().st_mtime_ns) for p in siblings)
    except OSError:
        return frozenset()
    key = (str(directory), stamp)
    cached = _ENTRY_CACHE.get(key)
    if cached is None:
        found: set[str] = set()
        for sibling in siblings:
            try:
                text = read_text(sibling, errors="replace")
            except OSError:
                continue
            if "entry" in text:
                found.update(_ENTRY.findall(text))
        if len(_ENTRY_CACHE) > 256:
            _ENTRY_CACHE.clear()
        cached = _ENTRY_CACHE[key] = frozenset(found)
    return cached


def is_backend_module(ctx: Context) -> bool:
    """Whether a file in a model package is a registry backend: it registers backends itself
    (``BackendSpec(...)``, ``register_op(...)``), or a sibling names it in ``BackendSpec(entry="<module>:...")``.
    Its vendor calls are the kernel implementation (OpSlot generation); its imports are still reported (NPU301):
    in the VeomniOp generation backends live under ``veomni/ops/kernels``."""
    text = ctx.source.text
    if any(call in text for call in _REGISTRATION_CALLS):
        return True
    package = module_package(ctx.source.path)
    if not package:
        return False
    dotted = ".".join([*package, PurePath(ctx.source.path).stem])
    return dotted in _entries_in_directory(Path(ctx.source.path).parent)


_VENDOR_WORDS = re.compile(r"\b(" + "|".join(sorted(vendor_map.VENDOR_PACKAGES)) + r"|kernels|npu_\w+)\b")


# every match of _VENDOR_WORDS contains one of these substrings: when none occurs the regex cannot match
_VENDOR_LITERALS = (*sorted(vendor_map.VENDOR_PACKAGES), "kernels", "npu_")
_MENTIONS_MEMO: list[tuple[str, bool]] = []  # (text, answer) of the last call: two rules ask about each file


def mentions_vendor(text: str) -> bool:
    """A cheap text pre-check: a file that names no vendor package (nor ``kernels``, nor an ``npu_*`` name) can
    hold no vendor import or call, and the rules skip its nodes entirely."""
    if _MENTIONS_MEMO and _MENTIONS_MEMO[0][0] is text:
        return _MENTIONS_MEMO[0][1]
    found = _names_vendor_word(text)
    _MENTIONS_MEMO[:] = [(text, found)]
    return found


def _names_vendor_word(text: str) -> bool:
    """Whether ``_VENDOR_WORDS`` finds a match in ``text``: each literal's occurrences checked for word
    boundaries (``str.isalnum()`` or ``_`` is re's ``\\w``), twice as fast as the pattern tried at every
    position (tests/rules/test_precheck_equivalence.py)."""
    end_of_text = len(text)
    for lit in _VENDOR_LITERALS:
        at = text.find(lit)
        while at >= 0:
            if not at or not (text[at - 1].isalnum() or text[at - 1] == "_"):
                end = at + len(lit)
                after = text[end] if end < end_of_text else ""
                if (after.isalnum() or after == "_") == (lit == "npu_"):  # `npu_\w+`, or a whole word
                    return True
            at = text.find(lit, at + 1)
    return False


def from_module(path: str, node: ast.ImportFrom) -> str:
    module = node.module or ""
    if node.level:
        return resolve_relative(path, "." * node.level + module)
    return module


def _guard(ctx: Context, node: ast.AST) -> str:
    """How an import is guarded (``if IS_NPU_AVAILABLE:``, ``try/except ImportError``, a function), or ""."""
    child: ast.AST = node
    notes: list[str] = []
    for parent in reversed(ctx.parents):
        if isinstance(parent, ast.Try) and child in parent.body:
            caught = set()
            for handler in parent.handlers:
                if handler.type is None:
                    caught.add("Exception")
                for t in handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]:
                    if t is not None:
                        caught.add((ctx.dotted(t) or "").rsplit(".", 1)[-1])
            if caught & _IMPORT_ERRORS:
                notes.append("inside `try: ... except ImportError`")
        elif isinstance(parent, ast.If) and (child in parent.body or child in parent.orelse):
            test = " ".join(ctx.source.segment(parent.test).split())
            if _AVAILABILITY.search(test):
                if len(test) > 60:
                    test = test[:57] + "..."
                notes.append(
                    f"under `if {test}:`" if child in parent.body else f"in the `else` of `if {test}:`"
                )
        elif isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            notes.append(f"imported lazily inside `{parent.name}()`")
            break
        elif isinstance(parent, ast.ClassDef):
            break
        child = parent
    return ", ".join(dict.fromkeys(notes))


def tree_rows(project: Project, op: str, variant: str | None) -> str:
    """The tree's registry rows of ``op/variant`` as ``impl (device)`` (an OpSlot tree's ``KernelSpec`` rows,
    else its register rows), or ""."""
    rows = [
        r
        for r in (project.registered or project.slot_rows)
        if r.op == op and (variant is None or r.variant == variant)
    ]
    shown = [r.impl if r.requirement == "any" else f"{r.impl} ({r.requirement})" for r in sorted(rows)]
    return ", ".join(dict.fromkeys(shown))


def op_advice(project: Project, op: str | None, variant: str | None, lead: str = "call") -> tuple[str, str]:
    """(advice, fix title) for reaching a catalog ``op/variant`` in this tree, in the tree's own names and
    dispatch API: a handle generation's instance-local handle, an OpSlot tree's slot and its ops-config field,
    or, when the tree registers nothing for it, what the tree has instead (attention through transformers'
    ``ALL_ATTENTION_FUNCTIONS``) or how to register it. The title is "" when there is nothing to call."""
    api = project.api
    found = api.tree_op(op, variant) if op else None
    if found is not None:
        t_op, t_variant = found
        name = f"{t_op}/{t_variant}" if t_variant else t_op
        rows = tree_rows(project, t_op, t_variant)
        registered = f"; registered here: {rows}" if rows else ""
        if migration_available(api):
            return (
                f"{lead} the registry op `{name}` through an instance-local `{api.handle}` built in `__init__`"
                f"{registered}",
                f"Call `{name}` through an instance-local `{api.handle}`",
            )
        if api.generation is Generation.OP_SLOT and t_variant:
            field = api.config_field(t_op)
            bound = f", bound from the ops-config field `{field}`" if field else ""
            slot = f'`{api.handle}("{t_op}", "{t_variant}")`'
            return (
                f"{lead} it through this tree's {slot} slot{bound}{registered}",
                f"Dispatch through this tree's {slot} slot",
            )
        return (
            f"{lead} the `{name}` op of the {api.handle} API once the tree has it (target-api names "
            f"`{api.handle}`, which this tree does not define)",
            "",
        )
    if op is None:
        return "", ""
    if op == "attention" and api.attention_functions:
        field = api.config_field("attention")
        chosen = f"by the ops-config field `{field}` " if field else ""
        names = ", ".join(api.attention_functions[:4]) + (", ..." if len(api.attention_functions) > 4 else "")
        where = f" in `{api.attention_functions_module}`" if api.attention_functions_module else ""
        return (
            f"this tree registers no `attention` op: attention is chosen {chosen}through transformers' "
            f"`ALL_ATTENTION_FUNCTIONS` (this tree registers {names}{where}); register the kernel there",
            "",
        )
    return f"this tree registers no `{op}` op: {register_advice(api)}", ""


def register_advice(api: ApiProfile) -> str:
    """How to add a kernel to this tree's registry, in its own names."""
    where = f"`{api.register_function}`" if api.register_function else "the registry"
    if api.register_function and api.registry_module:
        where += f" (`{api.registry_module}`)"
    return f"register the kernel as an implementation with {where} and {dispatch_phrase(api)}"


def dispatch_phrase(api: ApiProfile) -> str:
    """How model code reaches a registered kernel in this tree."""
    if migration_available(api):
        return f"call it through an instance-local `{api.handle}`"
    if api.generation is Generation.OP_SLOT:
        return f"dispatch it through this tree's `{api.handle}` slots"
    return f"call it through a `{api.handle}` (which this tree does not define)"


def describe(
    entries: list[tuple[str, vendor_map.VendorKernel]],
    lead: str = "reach it through",
    project: Project | None = None,
) -> str:
    """The advice part of a message: the tree's registry ops that replace the names (in the tree's names and
    dispatch API), or why none does."""
    assert project is not None
    api = project.api
    mapped = [(short, k) for short, k in entries if k.op]
    if mapped:
        through: list[str] = []  # "`short` -> what the tree calls"
        other: list[str] = []  # ops the tree does not register: what it has instead
        for short, k in mapped:
            found = api.tree_op(k.op, k.variant)  # type: ignore[arg-type]
            if found is not None and api.instance_local:
                through.append(f"`{short}` -> `{'/'.join(p for p in found if p)}`")
            elif found is not None and api.generation is Generation.OP_SLOT and found[1]:
                field = api.config_field(found[0])
                bound = f" (ops-config field `{field}`)" if field else ""
                through.append(f'`{short}` -> `{api.handle}("{found[0]}", "{found[1]}")`{bound}')
            else:
                other.append(f"`{short}`: {op_advice(project, k.op, k.variant, 'call')[0]}")
        parts = []
        if through:
            where = (
                f"an instance-local `{api.handle}`"
                if api.instance_local
                else f"this tree's `{api.handle}` slots"
            )
            parts.append(f"{lead} {where}: {', '.join(through)}")
        parts.extend(dict.fromkeys(other))
        return "; ".join(parts)
    if all(k.name == "torch_npu" for _, k in entries):
        return (
            f"its kernels (`torch_npu.npu_*`) belong in the tree's registry ({register_advice(api)}; NPU302 "
            "reports each call) and the device helpers load torch_npu for model code"
        )
    if all(k.note == vendor_map.HELPER_NOTE for _, k in entries):
        names = ", ".join(f"`{short}`" for short, _ in entries)
        return (
            f"{names} is {vendor_map.HELPER_NOTE}, so no registry op replaces it: it belongs with the kernel "
            "it serves, inside that op's implementation, not in model code"
        )
    notes = sorted({k.note for _, k in entries if k.note})
    why = f" ({'; '.join(notes)})" if notes else ""
    return f"no registry op covers it yet{why}: {register_advice(api)}"


def statement_lines_edit(ctx: Context, stmt: ast.stmt) -> Edit | None:
    """An edit deleting ``stmt`` when it occupies whole lines of its own, else None."""
    src = ctx.source
    first = src.line_text(stmt.lineno)
    start_col = src.char_col(stmt.lineno, stmt.col_offset)
    if first[:start_col].strip():
        return None
    end_line = stmt.end_lineno or stmt.lineno
    tail = src.line_text(end_line)[src.char_col(end_line, stmt.end_col_offset or 0) :]
    if tail.strip() and not tail.strip().startswith("#"):
        return None
    start = src.offset(stmt.lineno, 0)
    end = src.offset(end_line + 1, 0) if end_line < len(src.lines) else len(src.text)
    return Edit(start, end, "")


kw = keyword_arg  # core.astutil's helpers (thin aliases for the family's callers)


def str_arg(node: ast.Call, index: int, name: str) -> str | None:
    return str_value(call_arg(node, index, name))


# -- NPU302 ---------------------------------------------------------------------------------------------------

# names of kernel-module functions that are not kernels (compatibility predicates, metadata builders)
HELPER_PREFIXES = vendor_map.HELPER_PREFIXES

RMS_NORM_FIX_REASON = (
    "the implementation now comes from the ops config (`rms_norm_implementation`): without an ops config the "
    "handle resolves to eager instead of always running the Ascend kernel, and on a GPU host it no longer needs "
    "torch_npu"
)


def assigns_self_attr(func: ast.FunctionDef, attr: str) -> bool:
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name):
                    if t.value.id == "self":
                        return True
    return False


def merge_insertions(edits: list[Edit]) -> list[Edit]:
    """Combine insertions at one offset into one edit, in the given order (the engine would order them
    arbitrarily otherwise)."""
    merged: dict[tuple[int, int], str] = {}
    order: list[tuple[int, int]] = []
    out: list[Edit] = []
    for e in edits:
        if e.start == e.end:
            key = (e.start, e.end)
            if key not in merged:
                merged[key] = ""
                order.append(key)
            merged[key] += e.content
        else:
            out.append(e)
    return out + [Edit(k[0], k[1], merged[k]) for k in order]
