"""NPU112 pin-memory-device-unset."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import last_name, resolve_relative
from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import child_of, cuda_presence_probe, helper_edits, npu_test
from npu_lint.veomni.patchgen import load_file

# torchdata's checkpointable loader: its pin-memory thread takes `torch.cuda.current_device()` unless
# `pin_memory_device` names another accelerator (torch's own DataLoader asks the current accelerator since 2.7)
_STATEFUL = frozenset(
    {
        "torchdata.stateful_dataloader.StatefulDataLoader",
        "torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader",
    }
)
_CLASS = "StatefulDataLoader"


def _mentions_pin_device(node: ast.AST) -> bool:
    """The class sets the pin device itself (``kwargs.setdefault("pin_memory_device", ...)``, a keyword)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.keyword) and sub.arg == "pin_memory_device":
            return True
        if isinstance(sub, ast.Constant) and sub.value == "pin_memory_device":
            return True
    return False


def _pins(call: ast.Call) -> ast.keyword | None:
    """The ``pin_memory=`` keyword when pinning may be on and no ``pin_memory_device=`` is given; None when the
    call gives the device, pins nothing (absent, ``False``), or passes ``**kwargs`` (undecidable)."""
    found = None
    for kw in call.keywords:
        if kw.arg is None or kw.arg == "pin_memory_device":
            return None
        if kw.arg == "pin_memory":
            found = kw
    if found is None or len(call.args) > 7:  # a positional `pin_memory` (8th) is not read
        return None
    value = found.value
    if isinstance(value, ast.Constant) and value.value in (False, None, 0):
        return None
    return found


def _cuda_only(ctx: Context, test: ast.AST) -> bool:
    """A condition that holds on CUDA hosts only: ``torch.cuda.is_available()``, ``IS_CUDA_AVAILABLE``, ``not
    IS_NPU_AVAILABLE``, ``device.type == "cuda"``, ``get_device_type() != "npu"``, or an ``and`` with one of them
    (an Ascend host never pins through it)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_cuda_only(ctx, v) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return npu_test(test.operand)
    if isinstance(test, ast.Call):
        return cuda_presence_probe(ctx, test)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        # `device.type == "cuda"`, `get_device_type() != "npu"`
        values = {c.value for c in (test.left, *test.comparators) if isinstance(c, ast.Constant)}
        op = test.ops[0]
        return (isinstance(op, ast.Eq) and "cuda" in values) or (
            isinstance(op, ast.NotEq) and "npu" in values
        )
    return isinstance(test, (ast.Name, ast.Attribute)) and last_name(test) == "IS_CUDA_AVAILABLE"


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _on_cuda_hosts_only(ctx: Context, node: ast.AST) -> bool:
    """The call runs on CUDA hosts only: in the body of ``if <CUDA-only>:``, the ``else`` of ``if
    IS_NPU_AVAILABLE:``, or after ``if IS_NPU_AVAILABLE: return ...`` in the same block."""
    for parent, child in child_of(ctx, node):
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            in_body = child is parent.body or (isinstance(parent.body, list) and child in parent.body)
            if _cuda_only(ctx, parent.test) if in_body else npu_test(parent.test):
                return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and child in block:
                for stmt in block[: block.index(child)]:
                    if isinstance(stmt, ast.If) and npu_test(stmt.test) and _exits(stmt.body):
                        return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            break
    return False


class PinMemoryDeviceUnset(Rule):
    code = "NPU112"
    name = "pin-memory-device-unset"
    summary = (
        "A torchdata `StatefulDataLoader` (or a subclass of it) pins memory (`pin_memory=...`) without "
        "`pin_memory_device=`."
    )
    why = (
        "torchdata's `StatefulDataLoader` (VeOmni's `DistributedDataloader` and any loader built on it) starts "
        "its pin-memory thread on `torch.cuda.current_device()` unless `pin_memory_device` names the "
        "accelerator. On an Ascend host that call raises (no CUDA driver) as soon as the first batch is "
        "fetched, so training dies in the data loader. Pass the host's device type "
        "(`pin_memory_device=get_device_type()`). torch's own `DataLoader` asks the current accelerator and "
        "is not reported; a loader given `**kwargs` or a subclass that sets the pin device itself is not "
        "reported either, nor one that pins on CUDA hosts only (`pin_memory=torch.cuda.is_available()`, "
        "`pin_memory=pin and IS_CUDA_AVAILABLE`, a call under `if IS_CUDA_AVAILABLE:` or after `if "
        "IS_NPU_AVAILABLE: return ...`)."
    )
    bad = (
        Example(
            """
            from torchdata.stateful_dataloader import StatefulDataLoader


            def build_eval_loader(dataset, batch_size, workers):
                return StatefulDataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=True)
            """,
            fixed="""
            from torchdata.stateful_dataloader import StatefulDataLoader
            from veomni.utils.device import get_device_type


            def build_eval_loader(dataset, batch_size, workers):
                return StatefulDataLoader(dataset, batch_size=batch_size, num_workers=workers, pin_memory=True, pin_memory_device=get_device_type())
            """,
            path="veomni/trainer/toy_eval.py",
            title="a checkpointable loader that pins for CUDA",
        ),
        Example(
            """
            from torchdata.stateful_dataloader import StatefulDataLoader


            class ShardLoader(StatefulDataLoader):
                def __init__(self, dataset, pin: bool = True, **kwargs):
                    super().__init__(dataset, pin_memory=pin, **kwargs)


            def build(dataset):
                return ShardLoader(dataset, batch_size=4, pin_memory=True)
            """,
            fixed="""
            from torchdata.stateful_dataloader import StatefulDataLoader
            from veomni.utils.device import get_device_type


            class ShardLoader(StatefulDataLoader):
                def __init__(self, dataset, pin: bool = True, **kwargs):
                    super().__init__(dataset, pin_memory=pin, **kwargs)


            def build(dataset):
                return ShardLoader(dataset, batch_size=4, pin_memory=True, pin_memory_device=get_device_type())
            """,
            path="veomni/data/toy_shards.py",
            title="a subclass of it, built with pinning on",
        ),
    )
    good = (
        Example(
            """
            from torchdata.stateful_dataloader import StatefulDataLoader
            from veomni.utils.device import get_device_type


            def build_eval_loader(dataset, batch_size, workers):
                return StatefulDataLoader(
                    dataset,
                    batch_size=batch_size,
                    num_workers=workers,
                    pin_memory=True,
                    pin_memory_device=get_device_type(),
                )
            """,
            path="veomni/trainer/toy_eval.py",
        ),
    )
    fix_safety = (
        "Safe: adds `pin_memory_device=get_device_type()` (imported from the tree's device module), the device "
        "the loader pinned for on CUDA hosts and the NPU on Ascend. Offered only where the helper can be imported."
    )
    requires = ("pin_memory",)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _own_classes(self) -> dict[str, ast.ClassDef]:
        ctx = self.ctx
        found = ctx.memo.get("npu112-classes")
        if found is None:
            found = {s.name: s for s in ctx.tree.body if isinstance(s, ast.ClassDef)}
            ctx.memo["npu112-classes"] = found
        return found  # type: ignore[return-value]

    def _stateful_class(self, cls: ast.ClassDef, depth: int = 0) -> bool:
        """A class of this file built on ``StatefulDataLoader`` (through this file's classes) that does not set
        the pin device itself."""
        if depth > 4 or _mentions_pin_device(cls):
            return False
        for base in cls.bases:
            if self.ctx.qualname(base) in _STATEFUL:
                return True
            own = self._own_classes().get(last_name(base) or "") if isinstance(base, ast.Name) else None
            if own is not None and own is not cls and self._stateful_class(own, depth + 1):
                return True
        return False

    def _imported_stateful(self, func: ast.Name) -> bool:
        """A class another module of the tree defines on ``StatefulDataLoader`` (read by its base's name)."""
        ctx = self.ctx
        qual = ctx.imports.get(func.id)
        root = ctx.project.root
        if root is None:  # no tree recognised: the directory holding the file's `veomni` package
            path = os.path.abspath(ctx.source.path).replace("\\", "/")
            cut = path.rfind("/veomni/")
            root = path[:cut] if cut >= 0 else None
        if qual is None or root is None or "." not in qual:
            return False
        if qual.startswith("."):
            qual = resolve_relative(ctx.source.path, qual)
        if not qual or not qual.startswith("veomni."):
            return False
        module, name = qual.rsplit(".", 1)
        base = os.path.join(root, *module.split("."))
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            parsed = load_file(path)
            tree = parsed.tree if parsed is not None else None
            if tree is None:
                continue
            for stmt in tree.body:
                if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                    return not _mentions_pin_device(stmt) and any(last_name(b) == _CLASS for b in stmt.bases)
        return False

    def _is_stateful_loader(self, call: ast.Call) -> bool:
        ctx = self.ctx
        func = call.func
        if ctx.qualname(func) in _STATEFUL:
            return True
        if isinstance(func, ast.Name):
            own = self._own_classes().get(func.id)
            if own is not None:
                return self._stateful_class(own)
            return self._imported_stateful(func)
        # `super().__init__(...)` in a class of this file built on StatefulDataLoader
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "__init__"
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super"
        ):
            cls = next((p for p in reversed(ctx.parents) if isinstance(p, ast.ClassDef)), None)
            return cls is not None and self._stateful_class(cls)
        return False

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        kw = _pins(node)
        if kw is None or not self._is_stateful_loader(node):
            return
        ctx = self.ctx
        if _cuda_only(ctx, kw.value) or _on_cuda_hosts_only(ctx, node):
            return  # pins on CUDA hosts only: an Ascend host never reaches `torch.cuda.current_device()`
        fix = None
        edits = helper_edits(ctx, "get_device_type")
        if edits is not None:
            end = ctx.source.node_range(kw)[1]
            fix = make_fix(
                "Pin for the host's accelerator: `pin_memory_device=get_device_type()`",
                [Edit(end, end, ", pin_memory_device=get_device_type()"), *edits],
                Applicability.SAFE,
            )
        self.report(
            kw,
            f"`{ctx.source.segment(node.func)}` pins memory without `pin_memory_device`: torchdata's loader then "
            "pins on `torch.cuda.current_device()`, which raises on an Ascend host; pass "
            "`pin_memory_device=get_device_type()`",
            fix,
        )
