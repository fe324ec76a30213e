"""NPU110 host-copy-to-kernel."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.device._shared import device_neutral_scope
from npu_lint.veomni.collectives import SPLIT_SIZE_KEYWORDS, host_meant_argument

_KEEPS = frozenset(
    {"cumsum", "cumprod", "long", "int", "float", "contiguous", "clone", "view", "reshape", "flatten"}
)


def _host_copy(value: ast.AST) -> bool:
    """``x.cpu()``, ``x.to("cpu")``, ``x.to(torch.device("cpu"), non_blocking=True)``."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return False
    if value.func.attr == "cpu" and not value.args:
        return True
    if value.func.attr == "to" and value.args:
        first = value.args[0]
        if isinstance(first, ast.Constant) and first.value == "cpu":
            return True
        if (
            isinstance(first, ast.Call)
            and isinstance(first.func, ast.Attribute)
            and first.func.attr == "device"
            and first.args
            and isinstance(first.args[0], ast.Constant)
            and first.args[0].value == "cpu"
        ):
            return True
    return False


def _host_returns(func: ast.FunctionDef) -> set[int]:
    """Positions of the returned tuple (or -1 for a single value) that hold a host copy made in ``func``."""
    host: set[str] = set()
    assigns = sorted(
        (n for n in walk(func) if isinstance(n, ast.Assign) and len(n.targets) == 1),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for n in assigns:
        if isinstance(n.targets[0], ast.Name):
            if _host_copy(n.value):
                host.add(n.targets[0].id)
            else:
                host.discard(n.targets[0].id)
    out: set[int] = set()
    for n in walk(func):
        if isinstance(n, ast.Return) and n.value is not None:
            if isinstance(n.value, ast.Tuple):
                out.update(
                    i
                    for i, e in enumerate(n.value.elts)
                    if (isinstance(e, ast.Name) and e.id in host) or _host_copy(e)
                )
            elif (isinstance(n.value, ast.Name) and n.value.id in host) or _host_copy(n.value):
                out.add(-1)
    return out


def _source(value: ast.AST) -> str | None:
    """The local a value is computed from, through ops that keep its device (``torch.cumsum(h, 0)``, ``h.long()``)."""
    while True:
        if isinstance(value, ast.Name):
            return value.id
        if not isinstance(value, ast.Call):
            return None
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in _KEEPS:
            if isinstance(func.value, ast.Name) and func.value.id == "torch" and value.args:
                value = value.args[0]
            elif not (isinstance(func.value, ast.Name) and func.value.id == "torch"):
                value = func.value
            else:
                return None
        else:
            return None


def host_read(func: ast.FunctionDef, name: str) -> bool:
    """Whether ``func`` reads its parameter ``name`` as host values: `.tolist()` / `.item()` / `.numpy()` of
    it, a split-size keyword (`input_split_sizes=name`), `torch.split(x, name)` / `x.split(name)`, a `range`
    over it, or a Python `for` loop over it."""

    def is_name(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Name) and node.id == name

    for node in walk(func):
        if isinstance(node, ast.Call):
            callee = node.func
            if (
                isinstance(callee, ast.Attribute)
                and callee.attr in ("tolist", "item", "numpy")
                and is_name(callee.value)
            ):
                return True
            if any(k.arg in SPLIT_SIZE_KEYWORDS and is_name(k.value) for k in node.keywords):
                return True
            if isinstance(callee, ast.Attribute) and callee.attr == "split":
                args = (
                    node.args[1:]
                    if isinstance(callee.value, ast.Name) and callee.value.id == "torch"
                    else node.args
                )
                if args and is_name(args[0]):
                    return True
            if isinstance(callee, ast.Name) and callee.id == "range" and any(is_name(a) for a in node.args):
                return True
        elif isinstance(node, ast.For) and is_name(node.iter):
            return True
    return False


class HostCopyToKernel(Rule):
    code = "NPU110"
    name = "host-copy-to-kernel"
    summary = (
        "A tensor a helper copied to the host (for split sizes or loops) is handed, directly or through a "
        "cumulative sum, to an autograd kernel (`Fn.apply(tokens, offsets)`) next to device tensors."
    )
    why = (
        "Expert-parallel code copies token counts to the CPU on purpose: all-to-all split sizes and Python loops "
        "need host integers (`counts.to(torch.device('cpu'), non_blocking=True)`). The same counts also feed "
        "the grouped GEMM as offsets (`torch.cumsum(counts, 0)`), and there they must live where the tokens "
        "live: the `.to(tokens.device)` that moves them back is easy to lose. CUDA grouped-GEMM wrappers often "
        "accept host offsets; Ascend's grouped-matmul kernels reject them (or sync per call). The helper's own "
        "return is the reference: a returned local it built with `.cpu()` / `.to('cpu')` is a host tensor in "
        "every caller, and each argument of a `<Function>.apply(...)` call computed from it (through "
        "device-keeping ops) without a move is reported, except split sizes (`input_splits`), which an "
        "all-to-all reads on the host."
        " Whether the kernel reads an argument on the host is read from its `forward` when the file defines the Function (`.tolist()`, split-size keywords, `torch.split`, `range`, a loop over it); the argument's name decides only when it does not. Kernel code NPU hosts run (`veomni/ops` adapters) is read as well as model code."
    )
    bad = (
        Example(
            """
            import torch


            def preprocess(expert_mask):
                counts = expert_mask.sum(dim=(1, 2))
                splits = counts.tolist()
                host_counts = counts.to(torch.device("cpu"), non_blocking=True)
                return splits, host_counts


            def dispatch(hidden_states, expert_mask, experts_fn):
                splits, host_counts = preprocess(expert_mask)
                tokens = hidden_states.repeat_interleave(2, dim=0)
                offsets = torch.cumsum(host_counts, dim=0)
                return experts_fn.apply(tokens, offsets, splits)
            """,
            path="veomni/distributed/moe/toy_moe_layer.py",
            title="expert offsets left on the host copy made for the split sizes",
        ),
    )
    good = (
        Example(
            """
            import torch


            def preprocess(expert_mask):
                counts = expert_mask.sum(dim=(1, 2))
                host_counts = counts.to(torch.device("cpu"), non_blocking=True)
                return counts.tolist(), host_counts


            def dispatch(hidden_states, expert_mask, experts_fn):
                splits, host_counts = preprocess(expert_mask)
                offsets = torch.cumsum(host_counts, dim=0).to(hidden_states.device)
                return experts_fn.apply(hidden_states, offsets, splits)
            """,
            path="veomni/distributed/moe/toy_moe_layer.py",
        ),
    )
    fix_safety = "No fix: the device to move to is the tokens' (`.to(tokens.device)`), named by the author."

    requires = ("cpu", ".apply(")

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        # model code and the kernel code NPU hosts run (MoE adapters under veomni/ops, eager fallbacks), not CUDA
        # kernels
        return device_neutral_scope(ctx)

    node_types = (ast.FunctionDef,)

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        self._helpers: dict[str, set[int]] | None = None
        self._forwards: dict[tuple[str, ...], ast.FunctionDef] = {}

    def _helper_returns(self) -> dict[str, set[int]]:
        if self._helpers is None:
            self._helpers = {}
            for stmt in self.ctx.tree.body:
                if isinstance(stmt, ast.FunctionDef):
                    found = _host_returns(stmt)
                    if found:
                        self._helpers[stmt.name] = found
        return self._helpers

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.FunctionDef)
        if node not in self.ctx.tree.body:
            return
        helpers = self._helper_returns()
        host: set[str] = set()
        derived: dict[str, str] = {}  # local -> the host local it is computed from
        # assignments bind when their value is done, calls run where they start: read both in source order
        events: list[tuple[tuple[int, int], ast.AST]] = []
        for n in walk(node):
            if isinstance(n, ast.Assign) and len(n.targets) == 1:
                events.append(((n.end_lineno or n.lineno, n.end_col_offset or n.col_offset), n))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "apply":
                events.append(((n.lineno, n.col_offset), n))
        events.sort(key=lambda e: e[0])
        for _, n in events:
            if isinstance(n, ast.Call):
                self._check_apply(node, n, derived)
                continue
            assert isinstance(n, ast.Assign)
            target, value = n.targets[0], n.value
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id in helpers
                and value.func.id != node.name
            ):
                positions = helpers[value.func.id]
                if isinstance(target, ast.Tuple):
                    for i, e in enumerate(target.elts):
                        if i in positions and isinstance(e, ast.Name):
                            host.add(e.id)
                elif isinstance(target, ast.Name) and -1 in positions:
                    host.add(target.id)
                continue
            if isinstance(target, ast.Name):
                src = _source(value)
                if src is not None and (src in host or src in derived) and src != target.id:
                    derived[target.id] = derived.get(src, src)
                else:
                    derived.pop(target.id, None)

    def _kernel_params(self, call: ast.Call) -> list[str] | None:
        """The parameters (after `ctx`) of the `forward` of the autograd Function `Fn.apply` calls, when this
        file defines it."""
        owner = call.func.value if isinstance(call.func, ast.Attribute) else None  # type: ignore[union-attr]
        if not isinstance(owner, ast.Name):
            return None
        for stmt in self.ctx.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == owner.id:
                for item in stmt.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "forward":
                        params = [a.arg for a in item.args.posonlyargs + item.args.args]
                        self._forwards[tuple(params[1:])] = item
                        return params[1:]
        return None

    def _check_apply(self, func: ast.FunctionDef, n: ast.Call, derived: dict[str, str]) -> None:
        if len(n.args) < 2:
            return
        params = self._kernel_params(n)
        forward = self._forwards.get(tuple(params)) if params is not None else None
        for index, arg in enumerate(n.args):
            if not isinstance(arg, ast.Name):
                continue
            if forward is not None and params is not None and index < len(params):
                # the kernel's own body says how it reads the parameter, whatever the caller calls it
                if host_read(forward, params[index]):
                    continue
            elif host_meant_argument(arg.id):
                continue  # split sizes are read on the host (the kernel is not in this file: its name says)
            origin = derived.get(arg.id)
            if origin is None:
                continue
            self.report(
                arg,
                f"`{arg.id}` is computed from `{origin}`, which `{func.name}` gets from a helper that copied it "
                f"to the host, and is handed to `{self.ctx.source.segment(n.func)}` next to device tensors: "
                f"move it to their device (`.to(<tokens>.device)`)",
            )
