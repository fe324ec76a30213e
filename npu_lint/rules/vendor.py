"""NPU3xx: vendor kernels. Model code reaches vendor code (torch_npu, liger_kernel, flash_attn, triton, VeOmni's
own kernel modules) only through a ``VeomniOp``; the registry picks the implementation for the device."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path, PurePath

from npu_lint import vendor_map
from npu_lint.diagnostics import Applicability, Edit, Fix
from npu_lint.rules.base import Context, Example, Rule, make_fix

OPS_MODULE = "veomni.ops"
OPS_CONFIG_MODULE = "veomni.ops.config"

# top-level subpackages of VeOmni: a file under veomni/<one of these> (other than models/<family>/<pkg>/) is
# framework code, where the device layer legitimately imports vendor packages
_VEOMNI_SUBPACKAGES = frozenset(
    {
        "models",
        "ops",
        "utils",
        "distributed",
        "trainer",
        "data",
        "checkpoint",
        "optim",
        "lora",
        "patchgen",
        "arguments",
        "schedulers",
    }
)
# an `if` test that checks a device or a package's availability (other conditions are not guards of the import)
_AVAILABILITY = re.compile(r"available|IS_NPU|IS_CUDA|npu|cuda|device", re.IGNORECASE)
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def in_model_scope(path: str) -> bool:
    """Whether ``path`` is model code for the vendor rules: a file inside a model package of a VeOmni tree
    (``veomni/models/<family>/<package>/...``), or any file outside a VeOmni tree. VeOmni's framework files
    (``veomni/models/auto.py``, ``veomni/utils/device.py``...) bind kernels for the models: not model code."""
    parts = PurePath(path.replace("\\", "/")).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "veomni" and parts[i + 1] in _VEOMNI_SUBPACKAGES:
            return parts[i + 1] == "models" and len(parts) - i >= 5
    return True


def module_package(path: str) -> list[str]:
    """The dotted package of a file inside a VeOmni tree (``veomni.models.transformers.toy``), for relative
    imports; [] when the file is not inside one."""
    parts = PurePath(path.replace("\\", "/")).parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "veomni" and parts[i + 1] in _VEOMNI_SUBPACKAGES:
            return list(parts[i:-1])
    return []


def resolve_relative(path: str, module: str) -> str:
    """``....ops.kernels.x`` -> ``veomni.ops.kernels.x`` given the file's path (unchanged if not relative)."""
    if not module.startswith("."):
        return module
    level = len(module) - len(module.lstrip("."))
    rest = module[level:]
    package = module_package(path)
    if not package or level - 1 > len(package):
        return module
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, rest] if rest else base)


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
                text = sibling.read_text(encoding="utf-8", errors="replace")
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
    found = any(word in text for word in _VENDOR_LITERALS) and _VENDOR_WORDS.search(text) is not None
    _MENTIONS_MEMO[:] = [(text, found)]
    return found


def _from_module(path: str, node: ast.ImportFrom) -> str:
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


def _describe(entries: list[tuple[str, vendor_map.VendorKernel]], lead: str = "reach it through") -> str:
    """The advice part of a message: the registry ops that replace the names, or why none does."""
    mapped = [(short, k) for short, k in entries if k.op]
    if mapped:
        ops = ", ".join(f"`{short}` -> `{k.replacement()}`" for short, k in mapped)
        return f"{lead} an instance-local `VeomniOp`: {ops}"
    if all(k.name == "torch_npu" for _, k in entries):
        return (
            "its kernels (`torch_npu.npu_*`) belong behind `VeomniOp` handles (NPU302 reports each call) and the "
            "device helpers of `veomni.utils.device` load torch_npu for model code"
        )
    notes = sorted({k.note for _, k in entries if k.note})
    why = f" ({'; '.join(notes)})" if notes else ""
    return (
        f"no registry op covers it yet{why}: register the kernel as an op implementation under "
        "`veomni/ops/kernels` and call it through a `VeomniOp`"
    )


def _statement_lines_edit(ctx: Context, stmt: ast.stmt) -> Edit | None:
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


class VendorKernelImport(Rule):
    code = "NPU301"
    name = "vendor-kernel-import"
    summary = "Model code imports a vendor kernel (torch_npu, liger_kernel, flash_attn, triton, veomni.ops.kernels)."
    why = (
        "A vendor import in model code ties the model to one device: `liger_kernel`, `flash_attn` and `triton` "
        "do not exist on an Ascend host and `torch_npu` does not exist on a GPU host. In the VeomniOp "
        "generation vendor code is imported only inside the kernel modules under `veomni/ops/kernels`, lazily; "
        "model code reaches it through an instance-local `VeomniOp(op, variant, impl)` whose implementation "
        "comes from the ops config, so one model file runs on every device. Guarding the import "
        "(`if IS_NPU_AVAILABLE:`, `try: ... except ImportError`, a lazy import inside a function) makes it "
        "importable but still bypasses the registry: the finding says so, and names the registry op that "
        "replaces the kernel when the mapping table (`npu_lint/vendor_map.py`) knows it. In a patch spec, "
        "`config.add_import(...)`, `create_patch_from_external(replacement_module=...)` and import lines in "
        "`add_post_import_block(...)` put the import into the generated file, and are reported too."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.utils.device import IS_NPU_AVAILABLE

            if IS_NPU_AVAILABLE:
                from torch_npu import npu_rms_norm


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    return npu_rms_norm(hidden_states, self.weight, epsilon=1e-6)[0]
            """,
            title="a guarded import is still a direct vendor import",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
            config.add_import("torch_npu", names=["npu_rotary_mul"])


            @config.replace_function("apply_rotary_pos_emb")
            def apply_rotary_pos_emb(q, k, cos, sin):
                return npu_rotary_mul(q, cos, sin), npu_rotary_mul(k, cos, sin)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="a spec adding a vendor import to the generated file",
        ),
        Example(
            """
            import torch
            import torch_npu


            def scale(hidden_states: torch.Tensor) -> torch.Tensor:
                return hidden_states * 2
            """,
            fixed="""
            import torch


            def scale(hidden_states: torch.Tensor) -> torch.Tensor:
                return hidden_states * 2
            """,
            title="an unused vendor import is removed (unsafe: it may be imported for a side effect)",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.ops.kernels.cross_entropy import ForCausalLMLoss
            """
        ),
        Example(
            """
            def _npu_rms_norm(hidden_states, weight, eps=1e-6):
                import torch_npu

                return torch_npu.npu_rms_norm(hidden_states, weight, epsilon=eps)[0]
            """,
            path="veomni/ops/kernels/rms_norm/npu.py",
            title="kernel modules under veomni/ops are where vendor imports belong",
        ),
        Example(
            """
            from ..ops.kernels.moe import apply_veomni_fused_moe_patch
            """,
            path="veomni/models/auto.py",
            title="VeOmni's model loader binds kernels for the models: framework code, not a model package",
        ),
    )
    fix_safety = (
        "Unsafe, and only for an import none of whose names is used in the file (typically after NPU302's fix "
        "replaced the last call): the statement is deleted. Unsafe because a vendor package may be imported for "
        "its side effect (`import torch_npu` registers the `npu` device; `veomni.utils.device` does that for "
        "model code). A used import has no fix: migrate its calls (NPU302) first."
    )
    precision = (
        "51/51 on veomni 0.1.12's model packages (16 generated, 16 spec, 19 plain files; one debatable: a "
        "device-registration `import torch_npu` in a captioning helper); bench/accuracy/vendor.md"
    )
    node_types = (ast.Import, ast.ImportFrom, ast.Call)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if not mentions_vendor(ctx.source.text):
            self.node_types = ()
        elif not ctx.source.kind.spec:
            self.node_types = (ast.Import, ast.ImportFrom)  # calls matter only in specs (add_import...)
        # (node, statement, names it binds, message, removable) awaiting the unused-import check in finish()
        self.pending: list[tuple[ast.AST, ast.stmt | None, tuple[str, ...], str, bool]] = []
        self._backend: bool | None = None

    @property
    def backend(self) -> bool:
        if self._backend is None:
            self._backend = is_backend_module(self.ctx)
        return self._backend

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.model_code and in_model_scope(ctx.source.path)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            self._import(node)
        elif isinstance(node, ast.ImportFrom):
            self._import_from(node)
        elif isinstance(node, ast.Call) and self.ctx.source.kind.spec:
            self._spec_call(node)

    # -- plain imports ------------------------------------------------------------------------------------
    def _import(self, node: ast.Import) -> None:
        entries: list[tuple[str, vendor_map.VendorKernel]] = []
        bound: list[str] = []
        for alias in node.names:
            kernel = vendor_map.lookup(alias.name)
            if kernel is not None:
                entries.append((alias.name, kernel))
                bound.append(alias.asname or alias.name.split(".")[0])
        if entries:
            text = self.ctx.source.segment(node)
            self._pending(node, node, tuple(bound), self._message(text, entries, node))

    def _import_from(self, node: ast.ImportFrom) -> None:
        module = _from_module(self.ctx.source.path, node)
        if not vendor_map.is_vendor(module) and not any(
            vendor_map.is_vendor(f"{module}.{a.name}") for a in node.names
        ):
            return
        entries: list[tuple[str, vendor_map.VendorKernel]] = []
        bound: list[str] = []
        for alias in node.names:
            dotted = f"{module}.{alias.name}" if alias.name != "*" else module
            kernel = vendor_map.lookup(dotted)
            if kernel is not None:
                entries.append((alias.name, kernel))
                bound.append(alias.asname or alias.name)
        if entries:
            text = self.ctx.source.segment(node)
            self._pending(
                node, node, tuple(bound), self._message(text, entries, node, module if node.level else "")
            )

    def _message(
        self, text: str, entries: list[tuple[str, vendor_map.VendorKernel]], node: ast.AST, resolved: str = ""
    ) -> str:
        first = " ".join(text.replace("( ", "(").replace(" )", ")").split())
        if len(first) > 90:
            first = first[:87] + "..."
        families = {k.family for _, k in entries}
        what = "a VeOmni kernel module" if families == {vendor_map.VEOMNI_KERNEL} else "vendor kernel code"
        guard = _guard(self.ctx, node)
        where = f" ({guard}: still a direct vendor import)" if guard else ""
        shown = f"`{first}` (`{resolved}`)" if resolved else f"`{first}`"
        if self.backend:
            return (
                f"{shown} imports {what} into a registry backend that lives in the model package{where}; in the "
                "VeomniOp generation backends are registered under `veomni/ops/kernels` with `register_op`: move "
                "the implementation there"
            )
        return f"{shown} imports {what} into model code{where}; {_describe(entries)}"

    # -- spec calls ---------------------------------------------------------------------------------------
    def _spec_call(self, node: ast.Call) -> None:
        func = node.func
        attr = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if attr == "add_import":
            self._add_import(node)
        elif attr == "create_patch_from_external":
            self._external(node)
        elif attr == "add_post_import_block":
            self._post_import_block(node)

    def _add_import(self, node: ast.Call) -> None:
        module = _str_arg(node, 0, "module")
        if module is None or not vendor_map.is_vendor(module):
            return
        names_node = _kw(node, "names")
        names = (
            [e.value for e in names_node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if isinstance(names_node, (ast.List, ast.Tuple))
            else []
        )
        if names:
            entries = [(n, vendor_map.lookup(f"{module}.{n}")) for n in names]
        else:
            entries = [(module, vendor_map.lookup(module))]
        entries_ok = [(n, k) for n, k in entries if k is not None]
        text = " ".join(self.ctx.source.segment(node).replace("( ", "(").split())
        text = text if len(text) <= 90 else text[:87] + "..."
        msg = f"`{text}` adds a vendor import to the generated file; {_describe(entries_ok)}"
        # no removal fix: the generated file (and inherited GPU patches) use the names, not the spec itself
        self.report(node, msg)

    def _external(self, node: ast.Call) -> None:
        module = _str_arg(node, 99, "replacement_module")
        if module is None or not vendor_map.is_vendor(module):
            return
        name = _str_arg(node, 99, "replacement_name") or ""
        target = _str_arg(node, 99, "target") or "a class"
        dotted = f"{module}.{name}" if name else module
        kernel = vendor_map.lookup(dotted)
        assert kernel is not None
        self.report(
            node,
            f"`{target}` is replaced by the vendor class `{dotted}` (imported into the generated file); "
            f"keep the upstream class and {_describe([(name or module, kernel)], 'call')}",
        )

    def _post_import_block(self, node: ast.Call) -> None:
        arg = node.args[0] if node.args else _kw(node, "code")
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            return
        try:
            block = ast.parse(textwrap.dedent(arg.value))
        except SyntaxError:
            return
        for stmt in ast.walk(block):
            modules: list[str] = []
            if isinstance(stmt, ast.Import):
                modules = [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom) and not stmt.level:
                modules = [f"{stmt.module}.{a.name}" for a in stmt.names]
            entries = [(m.rsplit(".", 1)[-1], vendor_map.lookup(m)) for m in modules]
            entries_ok = [(n, k) for n, k in entries if k is not None]
            if entries_ok:
                line = ast.get_source_segment(textwrap.dedent(arg.value), stmt) or ""
                self.report(
                    arg,
                    f"the post-import block imports vendor code into the generated file (`{line.strip()[:80]}`); "
                    f"{_describe(entries_ok)}",
                )
                return

    # -- reporting ----------------------------------------------------------------------------------------
    def _pending(self, node: ast.AST, stmt: ast.stmt | None, bound: tuple[str, ...], message: str) -> None:
        # removable: a statement outside functions (a lazy import is left to the author) whose block keeps
        # another statement after the deletion
        removable = False
        parent = self.ctx.parent
        if stmt is not None and self.ctx.function is None and parent is not None:
            for field in ("body", "orelse", "finalbody"):
                block = getattr(parent, field, None)
                if isinstance(block, list) and stmt in block:
                    removable = len(block) > 1
        self.pending.append((node, stmt, bound, message, removable))

    def _used(self, names: tuple[str, ...], stmt: ast.stmt) -> bool:
        """Whether any name appears in the file outside ``stmt`` (a text search: a mention in a comment or a
        string counts as a use, which only ever withholds the removal fix)."""
        start, end = self.ctx.source.node_range(stmt)
        text = self.ctx.source.text
        rest = text[:start] + text[end:]
        return any(re.search(rf"(?<![\w.]){re.escape(name)}\b", rest) for name in names)

    def finish(self) -> None:
        for node, stmt, bound, message, removable in self.pending:
            fix: Fix | None = None
            unused = bool(bound) and stmt is not None and not self._used(bound, stmt)
            if unused and bound == ("torch_npu",):
                message = message.split("; its kernels", 1)[0] + (
                    "; it is imported only for its side effect (registering the `npu` device), which "
                    "`veomni.utils.device` already does"
                )
            if stmt is not None and unused and removable:
                edit = _statement_lines_edit(self.ctx, stmt)
                if edit is not None:
                    fix = make_fix(
                        "Remove the unused vendor import",
                        [edit],
                        Applicability.UNSAFE,
                        "a vendor package may be imported for a side effect (torch_npu registers the `npu` device; "
                        "`veomni.utils.device` does that for model code)",
                    )
            self.report(node, message, fix)


def _kw(node: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in node.keywords if k.arg == name), None)


def _str_arg(node: ast.Call, index: int, name: str) -> str | None:
    value = node.args[index] if index < len(node.args) else _kw(node, name)
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    return None


# -- NPU302 ---------------------------------------------------------------------------------------------------

# names of kernel-module functions that are not kernels (compatibility predicates, metadata builders)
_HELPER_PREFIXES = ("check_", "is_", "has_", "get_", "supports_", "precompute_")

RMS_NORM_FIX_REASON = (
    "the implementation now comes from the ops config (`rms_norm_implementation`): without an ops config the "
    "handle resolves to eager instead of always running the Ascend kernel, and on a GPU host it no longer needs "
    "torch_npu"
)


class VendorKernelCall(Rule):
    code = "NPU302"
    name = "vendor-kernel-call"
    summary = "Model code calls a vendor kernel directly instead of an instance-local `VeomniOp`."
    why = (
        "`torch_npu.npu_rms_norm(...)`, `liger_rotary_pos_emb(...)`, `flash_attn_func(...)` bind the model to one "
        "vendor: the call fails (or was never importable) on every other device, and the ops config cannot choose "
        "an implementation. The registry op that covers the kernel (`rms_norm`, `rope`, `attention`, ...) has a "
        "row per device; model classes build their handle once in `__init__` "
        '(`self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))`) '
        "and call it in `forward`, tensors positional, other arguments keyword. Calls of `torch.ops.npu.npu_*` "
        "are the same kernels and are reported too. Calls into `triton` itself (`triton.cdiv`, `tl.load`) are "
        "not: the `import triton` (NPU301) is the finding for a hand-written kernel. Calls inside a registry "
        "backend that lives in a model package (a module that registers `BackendSpec(...)`s, or that a sibling "
        'names in `BackendSpec(entry="<module>:<function>")`) are the kernel implementation and are not '
        "reported either: NPU301 says where that backend belongs."
    )
    bad = (
        Example(
            """
            import torch
            import torch_npu
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(hidden_size))
                    self.variance_epsilon = eps

                def forward(self, hidden_states):
                    return torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)[0]
            """,
            fixed="""
            import torch
            import torch_npu
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                    self.weight = nn.Parameter(torch.ones(hidden_size))
                    self.variance_epsilon = eps

                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """,
            title="an RMSNorm forward maps exactly onto the registry contract; NPU301 then offers to drop the import",
        ),
        Example(
            """
            from liger_kernel.transformers.rope import liger_rotary_pos_emb


            def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
                return liger_rotary_pos_emb(q, k, cos, sin, position_ids=position_ids, unsqueeze_dim=unsqueeze_dim)
            """,
            title="a module-level function: no `__init__` to own the handle (display-only)",
        ),
    )
    good = (
        Example(
            """
            import torch_npu

            torch_npu.npu.set_device(0)
            """,
            title="device APIs are not kernels (NPU1xx covers them)",
        ),
        Example(
            """
            class ToyRMSNorm:
                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """
        ),
    )
    fix_safety = (
        "Unsafe, only for `torch_npu.npu_rms_norm(x, w, epsilon=eps)[0]` (or `torch.ops.npu.npu_rms_norm`) inside a "
        "method of a class whose `__init__` is in the same plain model module, with a plain weight (not "
        "`1 + w`): the call becomes `self.veomni_rms_norm(x, w, eps=eps)` and `__init__` builds the handle after "
        "`super().__init__()`. Unsafe because the implementation then comes from the ops config (eager when no "
        "config is installed) instead of always being the Ascend kernel. Every other call is display-only with "
        "the reason (another kernel's arguments do not map 1:1 onto its op, a patch spec needs "
        '`override_method("Cls.__init__")`, a function outside a class has no `__init__`).'
    )
    precision = (
        "54/54 on veomni 0.1.12's model packages (24 generated, 12 spec, 18 plain files); "
        "bench/accuracy/vendor.md"
    )
    node_types = (ast.Call, ast.Import, ast.ImportFrom)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._local_imports: dict[int, dict[str, str]] = {}
        self._backend: bool | None = None
        if not mentions_vendor(ctx.source.text):
            self.node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return ctx.source.kind.model_code and in_model_scope(ctx.source.path)

    # -- name resolution (module imports, function-local imports, relative imports) -----------------------
    def _record_local_import(self, node: ast.Import | ast.ImportFrom) -> None:
        """Function-local imports are collected as the traversal meets them (they precede their uses)."""
        func = self.ctx.function
        if func is None:
            return
        names = self._local_imports.setdefault(id(func), {})
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        else:
            module = _from_module(self.ctx.source.path, node)
            for a in node.names:
                if a.name != "*":
                    names[a.asname or a.name] = f"{module}.{a.name}"

    def _imports_of(self, func: ast.AST) -> dict[str, str]:
        return self._local_imports.get(id(func), {})

    def resolve(self, node: ast.AST) -> str | None:
        dotted = self.ctx.dotted(node)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        resolved = None
        for parent in reversed(self.ctx.parents) if self._local_imports else ():
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                resolved = self._imports_of(parent).get(root)
                if resolved is not None:
                    break
        if resolved is None:
            resolved = self.ctx.imports.get(root, root)
            resolved = resolve_relative(self.ctx.source.path, resolved)
        full = f"{resolved}.{rest}" if rest else resolved
        if full.startswith("torch.ops.npu."):
            full = "torch_npu." + full[len("torch.ops.npu.") :]
        return full

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self._record_local_import(node)
            return
        assert isinstance(node, ast.Call)
        full = self.resolve(node.func)
        if full is None or not vendor_map.is_vendor(full):
            return
        if self._backend is None:
            self._backend = is_backend_module(self.ctx)
        if self._backend:
            return  # the kernel implementation of a registry backend (NPU301 reports where it lives)
        family = vendor_map.family_of(full)
        root = full.split(".", 1)[0]
        if root == "triton":
            return
        if root == "torch_npu":
            attr = full.split(".")[1] if "." in full else ""
            if not attr.startswith("npu_"):
                return  # torch_npu.npu.* device APIs, torch_npu.contrib...: not kernels
        last = full.rsplit(".", 1)[-1]
        if family == vendor_map.VEOMNI_KERNEL and last.startswith(_HELPER_PREFIXES):
            return  # a predicate / metadata helper of a kernel module, not a kernel (NPU301 reports the import)
        kernel = vendor_map.lookup(full)
        assert kernel is not None
        replacement = kernel.replacement()
        if full == "torch_npu.npu_rotary_mul":
            mode = _kw(node, "rotary_mode")
            if isinstance(mode, ast.Constant) and mode.value == "interleave":
                replacement = "rope/wan"
        shown = self.ctx.dotted(node.func) or full
        if last[:1].isupper():
            what = "instantiates the vendor class"
        elif family == vendor_map.VEOMNI_KERNEL:
            what = "calls the VeOmni kernel function"
        else:
            what = "calls the vendor kernel"
        resolved = f" `{full}`" if shown != full else ""
        if replacement:
            message = (
                f"`{shown}(...)` {what}{resolved} directly; call the registry op `{replacement}` through an "
                f"instance-local `VeomniOp` built in `__init__`"
            )
        else:
            message = f"`{shown}(...)` {what}{resolved} directly; {_describe([(shown, kernel)])}"
        fix = None
        if full == "torch_npu.npu_rms_norm":
            fix = self._rms_norm_fix(node)
        elif replacement:
            fix = Fix(
                f"Call `{replacement}` through an instance-local `VeomniOp`",
                (),
                Applicability.DISPLAY,
                reason=self._display_reason(kernel, replacement),
            )
        self.report(node.func, message, fix)

    def _display_reason(self, kernel: vendor_map.VendorKernel, replacement: str = "") -> str:
        if self.ctx.source.kind.spec:
            return (
                'in a patch spec the handle is built in `__init__` through `override_method("Cls.__init__")` / '
                "`modify_init`: migrate the patch by hand"
            )
        if self.ctx.source.kind.generated:
            return "generated file: fix the patch spec and regenerate"
        return (
            f"the kernel's arguments and outputs do not map 1:1 onto the `{replacement or kernel.replacement()}` op "
            "contract" + (f" ({kernel.note})" if kernel.note else "") + ": rewrite the call by hand"
        )

    # -- the exact fix: torch_npu.npu_rms_norm(x, w, epsilon=eps)[0] --------------------------------------
    def _rms_norm_fix(self, node: ast.Call) -> Fix:
        ctx = self.ctx

        def display(reason: str) -> Fix:
            return Fix(
                "Call `rms_norm/standard` through an instance-local `VeomniOp`",
                (),
                Applicability.DISPLAY,
                reason=reason,
            )

        if ctx.source.kind.spec or ctx.source.kind.generated:
            return display(self._display_reason(vendor_map.lookup("torch_npu.npu_rms_norm")))  # type: ignore[arg-type]
        parent = ctx.parent
        if not (
            isinstance(parent, ast.Subscript)
            and parent.value is node
            and isinstance(parent.slice, ast.Constant)
            and parent.slice.value == 0
        ):
            return display(
                "the call's second output (rstd) is used, or its result is not indexed with `[0]`: "
                "the registry op returns only the normalised tensor"
            )
        func = ctx.function
        cls = ctx.class_
        if func is None or cls is None or func not in cls.body:
            return display("not inside a method: there is no `__init__` to own the handle")
        init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is None or not init.body:
            return display(f"`{cls.name}` has no `__init__` in this file to build the handle in")
        if init.body[0].lineno == init.lineno:
            return display(f"`{cls.name}.__init__` is written on one line: build the handle in it by hand")
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return display("starred arguments")
        args = list(node.args)
        kws = {k.arg: k.value for k in node.keywords}
        if set(kws) - {"epsilon"} or len(args) not in (2, 3) or (len(args) == 3 and "epsilon" in kws):
            return display("arguments beyond (x, gamma, epsilon)")
        eps_node = args[2] if len(args) == 3 else kws.get("epsilon")
        weight = args[1]
        if not isinstance(weight, (ast.Name, ast.Attribute)):
            return display(
                "the weight is an expression (e.g. `1 + self.weight`, Gemma-style): choose between the `standard` and "
                "`offset` variants by hand (`offset` adds the 1 itself)"
            )
        src = ctx.source
        x_text = src.segment(args[0])
        w_text = src.segment(weight)
        eps_text = src.segment(eps_node) if eps_node is not None else "1e-06"
        handle = "veomni_rms_norm"
        edits = [ctx.replace(parent, f"self.{handle}({x_text}, {w_text}, eps={eps_text})")]
        if not _assigns_self_attr(init, handle):
            edits.append(self._init_edit(init, handle))
        import_edits = []
        if "VeomniOp" not in ctx.imports:
            import_edits += ctx.import_edits(OPS_MODULE, "VeomniOp")
        if "resolve_op_impl" not in ctx.imports:
            import_edits += ctx.import_edits(OPS_CONFIG_MODULE, "resolve_op_impl")
        edits += _merge_insertions(import_edits)
        return make_fix(
            f"Replace with `self.{handle}(...)` built in `{cls.name}.__init__`",
            edits,
            Applicability.UNSAFE,
            RMS_NORM_FIX_REASON,
        )

    def _init_edit(self, init: ast.FunctionDef, handle: str) -> Edit:
        src = self.ctx.source
        body = init.body
        after: ast.stmt | None = None
        for stmt in body:
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Call)
                and isinstance(stmt.value.func, ast.Attribute)
                and stmt.value.func.attr == "__init__"
                and isinstance(stmt.value.func.value, ast.Call)
                and isinstance(stmt.value.func.value.func, ast.Name)
                and stmt.value.func.value.func.id == "super"
            ):
                after = stmt
                break
        indent = src.line_indent(body[0].lineno)
        line = f'{indent}self.{handle} = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))\n'
        if after is not None:
            end_line = after.end_lineno or after.lineno
        elif isinstance(body[-1], ast.Return):
            offset = src.offset(body[-1].lineno, 0)  # before a trailing `return`, where it still runs
            return Edit(offset, offset, line)
        else:
            end_line = body[-1].end_lineno or body[-1].lineno
        offset = src.offset(end_line + 1, 0) if end_line < len(src.lines) else len(src.text)
        if offset == len(src.text) and not src.text.endswith(("\n", "\r")):
            line = "\n" + line.rstrip("\n")
        return Edit(offset, offset, line)


def _assigns_self_attr(func: ast.FunctionDef, attr: str) -> bool:
    for node in ast.walk(func):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name):
                    if t.value.id == "self":
                        return True
    return False


def _merge_insertions(edits: list[Edit]) -> list[Edit]:
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
