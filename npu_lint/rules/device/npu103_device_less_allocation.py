"""NPU103 device-less-allocation."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk_pairs
from npu_lint.core.diagnostics import Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import (
    _HOST_SINKS,
    _MOVES,
    _SCALAR_METHODS,
    FACTORIES,
    _bound_before,
    _is_init_method,
    _is_submodule_call,
    _is_tensor_annotation,
    _module_classes,
    _moves_device,
    _self_parameters,
    _spec_targets,
    _subtree,
    _to_cpu,
    _used_as_tensor,
    _uses_after,
    _zero_size,
    device_source,
)


class DevicelessAllocation(Rule):
    code = "NPU103"
    name = "device-less-allocation"
    summary = "A tensor factory without `device=` on the forward path allocates on the CPU, next to accelerator data."
    why = (
        "`torch.zeros(n)`, `torch.arange(n)`, `torch.tensor([...])`... without `device=` allocate on the CPU "
        "(or wherever a global default device points). In `forward` the result then meets accelerator tensors: "
        "a host-to-device copy and a synchronisation on every step, an error where an op refuses mixed "
        "devices, and code that only worked because a CUDA default device was set. Device-neutral code "
        "allocates where its data lives: `device=hidden_states.device`. The `*_like` and `x.new_*` families "
        "inherit a device and are fine; so are allocations in `__init__`/`_init_weights` (parameters and "
        "buffers move with the module), allocations moved at once (`.to(x.device)`), an explicit "
        '`device="cpu"`, code under `with torch.device(...)`, and values only used on the host (`.tolist()`).'
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn


            class ToyAttention(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    seq_len = hidden_states.shape[1]
                    positions = torch.arange(seq_len)
                    mask = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
                    return hidden_states.masked_fill(~mask, 0.0) + positions[None, :, None]
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyAttention(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    seq_len = hidden_states.shape[1]
                    positions = torch.arange(seq_len, device=hidden_states.device)
                    mask = torch.ones(seq_len, seq_len, dtype=torch.bool, device=hidden_states.device).tril()
                    return hidden_states.masked_fill(~mask, 0.0) + positions[None, :, None]
            """,
            title="the input tensor gives the device",
        ),
        Example(
            """
            import torch


            def make_causal_mask(attention_mask: torch.Tensor, seq_len: int) -> torch.Tensor:
                causal = torch.full((seq_len, seq_len), float("-inf")).triu(1)
                return causal[None, None] + attention_mask[:, None, None, :]


            class ToyModel(torch.nn.Module):
                def forward(self, input_ids, attention_mask):
                    return make_causal_mask(attention_mask, input_ids.shape[1])
            """,
            fixed="""
            import torch


            def make_causal_mask(attention_mask: torch.Tensor, seq_len: int) -> torch.Tensor:
                causal = torch.full((seq_len, seq_len), float("-inf"), device=attention_mask.device).triu(1)
                return causal[None, None] + attention_mask[:, None, None, :]


            class ToyModel(torch.nn.Module):
                def forward(self, input_ids, attention_mask):
                    return make_causal_mask(attention_mask, input_ids.shape[1])
            """,
            title="a module-level helper called from forward",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyHead(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.proj = nn.Linear(4, 4)

                def forward(self, features):
                    return self.proj(features) + torch.ones(4)
            """,
            title="no tensor in scope: reported without a fix",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch import nn


            class ToyRotary(nn.Module):
                def __init__(self, dim, base=10000.0):
                    super().__init__()
                    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
                    self.register_buffer("inv_freq", inv_freq, persistent=False)

                def forward(self, hidden_states, position_ids):
                    ids = torch.arange(position_ids.shape[-1]).to(hidden_states.device)
                    lengths = torch.tensor([3, 4]).tolist()
                    zeros = torch.zeros_like(hidden_states)
                    with torch.device(hidden_states.device):
                        extra = torch.ones(3)
                    host = torch.zeros(2, device="cpu")
                    return zeros, ids, lengths, extra, host
            """
        ),
    )
    fix_safety = (
        "Safe: `device=` is added from the nearest tensor in scope (a parameter annotated or used as a tensor, "
        "else a parameter the module creates in `__init__`, `self.weight.device`). The values are the same; "
        "they are created on the device they were going to meet. When no tensor is in scope there is no fix "
        "and the message says so."
    )
    precision = (
        "veomni 0.1.12 `veomni/models` and transformers 5.9.0 `models/`: 0 findings (VeOmni's gate keeps `.cuda()` "
        "out; transformers' four are inside OpenFold's own `def cuda(self)` methods, which implement a `cuda()` "
        "API and are reported at their callers instead). Whole transformers package: 1 finding, a false "
        "positive (HQQ's `module.cuda(device)` used to emulate `.to`; its fix is unsafe). Reviewed by hand: "
        "bench/accuracy/device.md."
    )
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.module_classes = _module_classes(ctx.tree, ctx)
        self.spec_targets = _spec_targets(ctx.tree)
        self.functions = {
            s.name for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        # unit -> names it calls; a unit is ("", function) or (class, method)
        self.calls: dict[tuple[str, str], set[str]] = {}
        self.self_calls: dict[tuple[str, str], set[str]] = {}
        self.pending: list[tuple[tuple[str, str], ast.Call, str, str | None]] = []
        self._accel_cache: dict[int, set[str]] = {}
        self._param_cache: dict[int, set[str]] = {}
        self._parents_cache: dict[int, dict[int, ast.AST]] = {}

    def _unit(self) -> tuple[str, str] | None:
        parents = self.ctx.parents
        if len(parents) < 2:
            return None
        top = parents[1]
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return ("", top.name)
        if isinstance(top, ast.ClassDef) and len(parents) >= 3:
            method = parents[2]
            if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return (top.name, method.name)
        return None

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        unit = self._unit()
        if unit is None:
            return
        func = node.func
        if isinstance(func, ast.Name):
            self.calls.setdefault(unit, set()).add(func.id)
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
        ):
            self.self_calls.setdefault(unit, set()).add(func.attr)
        if type(func) is ast.Attribute and func.attr not in FACTORIES:
            return  # the qualname below ends with the attribute
        qual = self.ctx.qualname(func) or ""
        if not qual.startswith("torch.") or qual.count(".") != 1 or qual[6:] not in FACTORIES:
            return
        if any(k.arg == "device" or k.arg is None for k in node.keywords):
            return
        if any(isinstance(a, ast.Starred) for a in node.args):
            return
        if self._exempt(node) or (qual[6:] in ("empty", "zeros", "ones") and _zero_size(node)):
            return
        met = self._meets_accelerator(node)
        if met is None:
            return
        source = self._device_source(node, met)
        self.pending.append((unit, node, qual[6:], source))

    # -- does the allocation meet accelerator data? ---------------------------------------------------
    def _accel_names(self, func: ast.AST) -> set[str]:
        """Names holding accelerator tensors in ``func``: parameters used as tensors, and locals assigned
        from a submodule call (``self.norm(x)``) or from another such name without a host move."""
        cached = self._accel_cache.get(id(func))
        if cached is not None:
            return cached
        names: set[str] = set()
        assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        args = func.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.arg in ("self", "cls"):
                continue
            if _is_tensor_annotation(self.ctx, arg.annotation) or _used_as_tensor(func, arg.arg):
                names.add(arg.arg)
        assigns = [n for n in _subtree(func) if isinstance(n, ast.Assign) and len(n.targets) == 1]
        changed = True
        while changed:
            changed = False
            for assign in assigns:
                target = assign.targets[0]
                if isinstance(target, ast.Name) and target.id not in names:
                    value = assign.value
                    if isinstance(value, ast.BinOp):
                        is_accel = self._is_accel(value.left, names) or self._is_accel(value.right, names)
                    else:
                        is_accel = _is_submodule_call(value) or self._is_accel(value, names)
                    if is_accel:
                        names.add(target.id)
                        changed = True
        self._accel_cache[id(func)] = names
        return names

    def _is_accel(self, expr: ast.AST, names: set[str]) -> bool:
        """``expr`` is (a view or method result of) an accelerator tensor, with no host move on the way."""
        node = expr
        while True:
            if isinstance(node, ast.BinOp):
                return self._is_accel(node.left, names) or self._is_accel(node.right, names)
            if _is_submodule_call(node):
                return True
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Attribute):
                    if node.func.attr in _HOST_SINKS or node.func.attr in _SCALAR_METHODS or _to_cpu(node):
                        return False
                    node = node.func.value
                    continue
                return False
            if isinstance(node, ast.Subscript):
                node = node.value
                continue
            if isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    return node.attr in self._self_params()
                if node.attr in ("shape", "device", "dtype", "ndim", "T", "mT") and node is expr:
                    return False
                if node.attr in ("shape", "device", "dtype", "ndim"):
                    return False
                node = node.value
                continue
            if isinstance(node, ast.Name):
                return node.id in names
            return False

    def _self_params(self) -> set[str]:
        cls = self.ctx.class_
        if cls is None:
            return set()
        cached = self._param_cache.get(id(cls))
        if cached is None:
            cached = set(_self_parameters(cls))
            self._param_cache[id(cls)] = cached
        return cached

    def _parent_map(self, func: ast.AST) -> dict[int, ast.AST]:
        cached = self._parents_cache.get(id(func))
        if cached is None:
            cached = {id(c): p for c, p in walk_pairs(func)}
            self._parents_cache[id(func)] = cached
        return cached

    def _climb(self, expr: ast.AST, parents: dict[int, ast.AST]) -> tuple[ast.AST, ast.AST | None]:
        """From a value up through method chains, subscripts and unary operators to where it is used."""
        while True:
            parent = parents.get(id(expr))
            if parent is None:
                return expr, None
            if isinstance(parent, ast.Attribute) and parent.value is expr:
                grand = parents.get(id(parent))
                if isinstance(grand, ast.Call) and grand.func is parent and parent.attr not in _HOST_SINKS:
                    expr = grand
                    continue
                return expr, parent
            if isinstance(parent, ast.Subscript) and parent.value is expr:
                expr = parent
                continue
            if isinstance(parent, ast.UnaryOp):
                expr = parent
                continue
            return expr, parent

    def _meets_accelerator(self, node: ast.Call) -> ast.AST | None:
        """The accelerator expression the allocation's value meets (directly, or through one local name)."""
        func = self.ctx.function
        if func is None:
            return None
        names = self._accel_names(func)
        parents = self._parent_map(func)
        expr, parent = self._climb(node, parents)
        if parent is None:
            return None
        met = self._meets(expr, parent, names, parents)
        if met is not None:
            return met
        if (
            isinstance(parent, ast.Assign)
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
        ):
            target = parent.targets[0].id
            others = names - {target}
            for use in _uses_after(self.ctx, func, target, parent, parents) or ():
                use_expr, use_parent = self._climb(use, parents)
                if use_parent is not None:
                    met = self._meets(use_expr, use_parent, others, parents)
                    if met is not None:
                        return met
        return None

    def _meets(
        self, expr: ast.AST, parent: ast.AST, names: set[str], parents: dict[int, ast.AST]
    ) -> ast.AST | None:
        """The accelerator operand ``expr`` meets at ``parent`` (an arithmetic operand, a comparison, an index
        into an accelerator tensor, a sibling argument of a torch op or a method of an accelerator tensor)."""
        accel = self._is_accel
        candidates: list[ast.AST] = []
        if isinstance(parent, ast.BinOp):
            candidates = [parent.right if parent.left is expr else parent.left]
        elif isinstance(parent, ast.Compare):
            candidates = [o for o in [parent.left, *parent.comparators] if o is not expr]
        elif isinstance(parent, ast.Subscript) and parent.value is not expr:
            candidates = [parent.value]
        elif isinstance(parent, (ast.Tuple, ast.List)) and isinstance(parent.ctx, ast.Load):
            candidates = [e for e in parent.elts if e is not expr]
            grand = parents.get(id(parent))
            if isinstance(grand, ast.Subscript) and grand.slice is parent:
                candidates.append(grand.value)
        elif isinstance(parent, ast.Call) and expr is not parent.func:
            func = parent.func
            if isinstance(func, ast.Attribute):
                candidates = [func.value]
            if (self.ctx.qualname(func) or "").startswith("torch."):
                candidates += [a for a in parent.args if a is not expr]
        return next((c for c in candidates if accel(c, names)), None)

    def _exempt(self, node: ast.Call) -> bool:
        ctx = self.ctx
        chain = [*ctx.parents, node]
        # passes through method calls (``.float()``, ``.view(...)``) to a move or a host sink
        i = len(chain) - 1
        while i >= 2:
            attr, call = chain[i - 1], chain[i - 2]
            if not (isinstance(attr, ast.Attribute) and attr.value is chain[i]):
                break
            if not (isinstance(call, ast.Call) and call.func is attr):
                break
            if attr.attr in _HOST_SINKS:
                return True
            if attr.attr in _MOVES and _moves_device(ctx, call):
                return True
            i -= 2
        for parent in ctx.parents:
            if isinstance(parent, ast.With):
                for item in parent.items:
                    if (
                        ctx.qualname(getattr(item.context_expr, "func", item.context_expr)) or ""
                    ) == "torch.device":
                        return True
            if isinstance(parent, ast.Call):
                name = (ctx.dotted(parent.func) or "").split(".")[-1]
                if name in ("Parameter", "register_buffer", "Buffer"):
                    return True
        return False

    def _device_source(self, node: ast.Call, met: ast.AST) -> str | None:
        """The device of the tensor the allocation meets, when it is nameable at the allocation (a
        parameter, a local bound before the allocation, ``self.<param>``); else ``device_source()``."""
        root = met
        while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
            if (
                isinstance(root, ast.Attribute)
                and isinstance(root.value, ast.Name)
                and root.value.id == "self"
            ):
                if root.attr in self._self_params():
                    return f"self.{root.attr}.device"
                break
            if isinstance(root, ast.Call):
                if not isinstance(root.func, ast.Attribute):
                    break
                root = root.func.value
            else:
                root = root.value
        if isinstance(root, ast.Name) and root.id != "self":
            func = self.ctx.function
            assert func is not None
            params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
            if root.id in params or _bound_before(func, root.id, node.lineno):
                return f"{root.id}.device"
        return device_source(self.ctx)

    def finish(self) -> None:
        if not self.pending:
            return
        forward = self._forward_units()
        for unit, node, factory, source in self.pending:
            if unit not in forward:
                continue
            if source is None:
                self.report(
                    node,
                    f"`torch.{factory}(...)` without `device=` allocates on the CPU on the forward path; no tensor "
                    "in scope gives the device (pass one in, or use `device=` from the caller's data)",
                )
                continue
            fix = make_fix(f"Add `device={source}`", [self._device_edit(node, source)])
            self.report(
                node,
                f"`torch.{factory}(...)` without `device=` allocates on the CPU on the forward path; "
                f"add `device={source}`",
                fix,
            )

    def _device_edit(self, node: ast.Call, source: str) -> Edit:
        src = self.ctx.source
        items = [*node.args, *node.keywords]
        if items:
            last = max(items, key=lambda n: (n.end_lineno, n.end_col_offset))
            end = src.node_range(last)[1]
            return Edit(end, end, f", device={source}")
        end = src.node_range(node)[1]
        return Edit(end - 1, end - 1, f"device={source}")

    def _forward_units(self) -> set[tuple[str, str]]:
        roots: set[tuple[str, str]] = set()
        units = set(self.calls) | set(self.self_calls) | {u for u, *_ in self.pending}
        init_only: set[tuple[str, str]] = set()
        for cls in self.module_classes:
            methods = {u[1] for u in units if u[0] == cls}
            called_from: dict[str, set[str]] = {}
            for (c, m), names in self.self_calls.items():
                if c == cls:
                    for name in names:
                        called_from.setdefault(name, set()).add(m)
            # methods reached only from construction/init methods are init-time too
            init_side = {m for m in methods if _is_init_method(m)}
            changed = True
            while changed:
                changed = False
                for m in methods - init_side:
                    callers = called_from.get(m)
                    if callers and callers <= init_side:
                        init_side.add(m)
                        changed = True
            init_only |= {(cls, m) for m in init_side}
            roots |= {(cls, m) for m in methods - init_side}
        for func, target in self.spec_targets.items():
            if not _is_init_method(target):
                roots.add(("", func))
        forward = set(roots)
        todo = list(roots)
        while todo:
            unit = todo.pop()
            for name in self.calls.get(unit, ()):
                if name in self.functions and ("", name) not in forward:
                    forward.add(("", name))
                    todo.append(("", name))
        return forward - init_only
