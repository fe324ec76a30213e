"""NPU109 collective-operand-off-device."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, keyword_arg, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import distlife

# collectives whose operands are device tensors: the object collectives pickle any value on the host
_TENSOR_COLLECTIVES = distlife.COLLECTIVES - {
    "all_gather_object",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
}
_FACTORIES = frozenset({"tensor", "zeros", "ones", "empty", "full", "scalar_tensor", "as_tensor"})


def _device_less(value: ast.AST) -> ast.Call | None:
    """A ``torch.tensor(...)`` / ``torch.zeros(...)`` without ``device=`` (and not moved by a chained ``.to``)."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return None
    if value.func.attr not in _FACTORIES or distlife.dotted(value.func.value) != "torch":
        return None
    if keyword_arg(value, "device") is not None or any(kw.arg is None for kw in value.keywords):
        return None
    return value


def _factory_of(value: ast.AST) -> ast.Call | None:
    """The device-less factory a value is (``torch.tensor(0.0)``) or a dict comprehension fills with."""
    if isinstance(value, ast.DictComp):
        return _device_less(value.value)
    if isinstance(value, ast.ListComp):
        return _device_less(value.elt)  # an output list for all_gather
    return _device_less(value)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _subject(target: ast.AST) -> str | None:
    while isinstance(target, ast.Subscript):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


_LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like"})


def _state_dict_shards(func: ast.AST) -> set[str]:
    """Loop variables over a ``state_dict()``'s entries: ``for name, p in model.state_dict().items()``, ``for p in
    sd.values()`` with ``sd = model.state_dict()``."""
    held = set()
    for sub in nodes_of(func, ast.Assign):
        assert isinstance(sub, ast.Assign)
        if isinstance(sub.value, ast.Call) and call_name(sub.value) == "state_dict":
            held |= {t.id for t in sub.targets if isinstance(t, ast.Name)}
    shards = set()
    for loop in nodes_of(func, ast.For):
        assert isinstance(loop, ast.For)
        it = loop.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr in ("items", "values")
        ):
            continue
        owner = it.func.value
        if not (
            (isinstance(owner, ast.Call) and call_name(owner) == "state_dict")
            or (isinstance(owner, ast.Name) and owner.id in held)
        ):
            continue
        target = loop.target
        if it.func.attr == "items" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            target = target.elts[1]
        if isinstance(target, ast.Name):
            shards.add(target.id)
    return shards


def _unstaged_gather(value: ast.AST, shards: set[str]) -> ast.Call | None:
    """``p.full_tensor()`` (or ``p.data.full_tensor()``) of a state-dict entry, as the value itself or a branch of
    a conditional expression: gathered where the shard lives, not staged on the device first."""
    branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
    for branch in branches:
        if (
            isinstance(branch, ast.Call)
            and isinstance(branch.func, ast.Attribute)
            and branch.func.attr == "full_tensor"
        ):
            recv = branch.func.value
            if isinstance(recv, ast.Attribute) and recv.attr == "data":
                recv = recv.value
            if isinstance(recv, ast.Name) and recv.id in shards:
                return branch
    return None


def _moved(value: ast.AST, name: str) -> bool:
    """``name.to(...)`` / ``name.npu()`` / ``name.cuda()``: the value moved onto a device."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("to", "npu", "cuda")
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == name
    )


def _gloo_groups(func: ast.AST) -> set[str]:
    """Locals bound to a gloo process group (``dist.new_group(backend="gloo")``): collectives over it take host
    tensors."""
    out = set()
    for sub in nodes_of(func, ast.Assign):
        assert isinstance(sub, ast.Assign)
        value = sub.value
        if isinstance(value, ast.Call) and call_name(value) in ("new_group", "new_subgroups"):
            backend = keyword_arg(value, "backend")
            if (
                isinstance(backend, ast.Constant)
                and isinstance(backend.value, str)
                and "gloo" in backend.value
            ):
                out |= {t.id for t in sub.targets if isinstance(t, ast.Name)}
    return out


class CollectiveOperandOffDevice(Rule):
    code = "NPU109"
    name = "collective-operand-off-device"
    summary = (
        "A tensor created without a device (`torch.tensor(0.0)`, `torch.zeros(())`) reaches a collective: "
        "handed to it, returned by a helper whose result is reduced, or kept as the default of an accumulator the "
        "reduced values are stored into; or a `state_dict()` entry gathered with `full_tensor()` where it lives "
        "(not staged on the device) is handed to one."
    )
    why = (
        "Without `device=` a factory allocates on the CPU. An accumulator that only becomes a device tensor when "
        "a rank has something to add (a gradient norm over a shard that happens to hold no gradients: a frozen "
        "tower, an empty expert shard) stays on the CPU on exactly those ranks, and the HCCL all-reduce that "
        "follows rejects a CPU tensor (or the combination with the other ranks' device values fails with a "
        "device mismatch). On GPUs NCCL fails the same way, but only on the rare rank with nothing local, so it "
        "goes unnoticed until a migration changes the sharding. Allocate collective operands on the device "
        "(`device=torch.device(get_device_type())`, or the device of the tensors they accumulate). The same holds "
        "for a model's `state_dict()` under FSDP2's `CPUOffloadPolicy` (a configuration VeOmni offers): its "
        "DTensor shards live on the host, so `p.full_tensor()` all-gathers over gloo and returns a CPU tensor; "
        "a weight export that broadcasts it (expert weights over the EP group) fails on HCCL. Stage the shard "
        "first: `p.to(torch.device(get_device_type(), get_device_id())).full_tensor()`. A gather that only "
        "feeds a save to disk is not reported, nor one moved onto the device before the collective (`full = "
        'full.to(device)`) or exchanged over a gloo group (`dist.new_group(backend="gloo")`); the object '
        "collectives (`all_gather_object`, `broadcast_object_list`) pickle their operands on the host and are not "
        "read."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def _local_sq_sum(grads):
                acc = torch.tensor(0.0, dtype=torch.float32)
                for g in grads:
                    acc = acc + g.float().pow(2).sum()
                return acc


            def global_grad_norm(grads, group):
                total = _local_sq_sum(grads)
                dist.all_reduce(total, group=group)
                return total.sqrt()
            """,
            path="veomni/distributed/toy_norm.py",
            title="a helper's CPU accumulator, reduced by its caller",
        ),
        Example(
            """
            import torch.distributed as dist
            from torch.distributed.tensor import DTensor


            def export_experts(model, rank, group):
                for name, param in model.state_dict().items():
                    full = param.full_tensor() if isinstance(param, DTensor) else param
                    dist.broadcast(full, group_src=0, group=group)
                    yield name, full
            """,
            path="veomni/checkpoint/toy_export.py",
            title="a state-dict shard gathered where it lives (the host under CPU offload), then broadcast",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist

            from veomni.utils.device import get_device_type


            def _local_sq_sum(grads):
                acc = torch.tensor(0.0, device=torch.device(get_device_type()), dtype=torch.float32)
                for g in grads:
                    acc = acc + g.float().pow(2).sum()
                return acc


            def global_grad_norm(grads, group):
                total = _local_sq_sum(grads)
                dist.all_reduce(total, group=group)
                steps = torch.tensor(len(grads))
                return total.sqrt(), steps
            """,
            path="veomni/distributed/toy_norm.py",
            title="on the device; a CPU count that never reaches a collective",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist
            from torch.distributed.tensor import DTensor

            from veomni.utils.device import get_device_id, get_device_type


            def export_experts(model, rank, group):
                device = torch.device(get_device_type(), get_device_id())
                for name, param in model.state_dict().items():
                    full = param.to(device).full_tensor() if isinstance(param, DTensor) else param
                    dist.broadcast(full, group_src=0, group=group)
                    yield name, full
            """,
            path="veomni/checkpoint/toy_export.py",
            title="staged on the device before the gather",
        ),
    )
    fix_safety = "No fix: which device the operand belongs on is read from the tree's device helper by hand."
    requires = (("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"), "torch.")
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        funcs = nodes_of(node, ast.FunctionDef, ast.AsyncFunctionDef)
        calls = nodes_of(node, ast.Call)
        if "full_tensor" in self.ctx.source.text and "state_dict" in self.ctx.source.text:
            for func in funcs:
                self._gathered_where_offloaded(func)
        if not any(_device_less(c) for c in calls):
            return  # nothing allocated without a device in this file
        if not any(distlife.dist_call(c) in _TENSOR_COLLECTIVES for c in calls):
            return  # no collective in this file: nothing is reduced, no operand reaches one
        # functions whose result reaches a collective (in the caller, or in a reducing helper of this file)
        reduced: set[str] = set()
        reducers: set[str] = set()  # functions of this file that run a collective
        for func in funcs:
            colls = [c for c in nodes_of(func, ast.Call) if distlife.dist_call(c) in _TENSOR_COLLECTIVES]
            if not colls:
                continue
            reducers.add(func.name)  # type: ignore[attr-defined]
            into: set[str] = set()  # locals handed to a collective in this function
            for call in colls:
                if call.args:  # type: ignore[attr-defined]
                    into |= _names(call.args[0])  # type: ignore[attr-defined]
            for sub in nodes_of(func, ast.Assign):
                value = sub.value  # type: ignore[attr-defined]
                if isinstance(value, ast.Call) and any(_subject(t) in into for t in sub.targets):  # type: ignore[attr-defined]
                    reduced.add(call_name(value))
        for func in funcs:
            self._function(func, reduced, reducers)
        # a factory written straight into a collective's tensor arguments (an all_gather output list)
        for sub in calls:
            assert isinstance(sub, ast.Call)
            if distlife.dist_call(sub) not in _TENSOR_COLLECTIVES:
                continue
            for arg in sub.args[:2]:
                for inner in nodes_of(arg, ast.Call):
                    factory = _device_less(inner)
                    if factory is not None:
                        self.report(
                            factory,
                            f"a tensor created without a device (on the CPU) is an operand of "
                            f"`dist.{distlife.dist_call(sub)}`: the HCCL collective rejects CPU tensors; "
                            "allocate it on the device of the tensors it exchanges",
                        )
                        break

    def _gathered_where_offloaded(self, func: ast.AST) -> None:
        """A ``state_dict()`` entry gathered with ``full_tensor()`` where it lives, handed to a collective."""
        colls = [c for c in nodes_of(func, ast.Call) if distlife.dist_call(c) in _TENSOR_COLLECTIVES]
        if not colls:
            return
        shards = _state_dict_shards(func)
        if not shards:
            return
        gathered: dict[str, ast.Call] = {}
        assigns = [
            s
            for s in nodes_of(func, ast.Assign)
            if len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        ]  # type: ignore[attr-defined]
        for sub in assigns:
            found = _unstaged_gather(sub.value, shards)  # type: ignore[attr-defined]
            if found is not None:
                gathered[sub.targets[0].id] = found  # type: ignore[attr-defined]
        if not gathered:
            return
        for _ in range(
            2
        ):  # aliases: `t = gathered if mine else buffer`, `buffer = torch.empty_like(gathered)`
            for sub in assigns:
                value = sub.value  # type: ignore[attr-defined]
                name = sub.targets[0].id  # type: ignore[attr-defined]
                if name in gathered:
                    continue
                parts = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                for part in parts:
                    if isinstance(part, ast.Call) and call_name(part) in _LIKE and part.args:
                        part = part.args[0]
                    if isinstance(part, ast.Name) and part.id in gathered:
                        gathered[name] = gathered[part.id]
                        break
        staged = {
            s.targets[0].id  # type: ignore[attr-defined]
            for s in assigns
            if _moved(s.value, s.targets[0].id)  # type: ignore[attr-defined]
        }  # `full = full.to(device)`: staged on the device after the gather
        gloo = _gloo_groups(func)
        for call in colls:
            assert isinstance(call, ast.Call)
            group = keyword_arg(call, "group")
            if isinstance(group, ast.Name) and group.id in gloo:
                continue  # exchanged over a gloo group: host tensors are what it takes
            hit = next(
                (n for a in call.args[:2] for n in sorted(_names(a)) if n in gathered and n not in staged),
                None,
            )
            if hit is None:
                continue
            gather = gathered[hit]
            self.report(
                gather,
                f"`{self.ctx.source.segment(gather)}` gathers a `state_dict()` shard where it lives and `{hit}` is "
                f"handed to `dist.{distlife.dist_call(call)}`: under FSDP2's `CPUOffloadPolicy` the shards live "
                "on the host, so the gather runs over gloo and the HCCL collective gets a CPU tensor; stage the "
                "shard on the device first (`p.to(torch.device(get_device_type(), get_device_id())).full_tensor()`)",
            )
            return

    def _function(self, func: ast.AST, reduced: set[str], reducers: set[str]) -> None:
        made: dict[str, ast.Call] = {}
        for sub in nodes_of(func, ast.Assign):
            assert isinstance(sub, ast.Assign)
            if len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                factory = _factory_of(sub.value)
                if factory is not None:
                    made.setdefault(sub.targets[0].id, factory)
        if not made:
            return
        name = getattr(func, "name", "")
        for sub in nodes_of(func, ast.Call, ast.Return, ast.Assign):
            why = None
            if isinstance(sub, ast.Call) and distlife.dist_call(sub) in _TENSOR_COLLECTIVES and sub.args:
                hit = set().union(*(_names(a) for a in sub.args[:2])) & made.keys()
                if hit:
                    why = (hit.pop(), f"is handed to `dist.{distlife.dist_call(sub)}`")
            elif isinstance(sub, ast.Return) and sub.value is not None and name in reduced:
                hit = _names(sub.value) & made.keys()
                if hit:
                    why = (hit.pop(), f"is returned by `{name}`, whose result a caller reduces")
            elif (
                isinstance(sub, ast.Assign)
                and len(sub.targets) == 1
                and isinstance(sub.targets[0], ast.Subscript)
                and _subject(sub.targets[0]) in made
                and isinstance(sub.value, ast.Name | ast.Call)
                and self._reduced_value(func, sub.value, reduced | reducers)
            ):
                why = (
                    _subject(sub.targets[0]),
                    "keeps CPU defaults next to the reduced device values stored into it",
                )
            if why:
                local, how = why
                factory = made.pop(local)  # type: ignore[arg-type]
                self.report(
                    factory,
                    f"`{local}` is created without a device (on the CPU) and {how}: on a rank with nothing to add "
                    "it stays a CPU tensor, which the HCCL collective rejects (or combines with device tensors "
                    "from other ranks); allocate it on the device (`device=torch.device(get_device_type())`)",
                )
                if not made:
                    return

    def _reduced_value(self, func: ast.AST, value: ast.AST, producers: set[str]) -> bool:
        if isinstance(value, ast.Call):
            return call_name(value) in producers
        assert isinstance(value, ast.Name)
        for sub in nodes_of(func, ast.Assign):
            assert isinstance(sub, ast.Assign)
            if (
                any(isinstance(t, ast.Name) and t.id == value.id for t in sub.targets)
                and isinstance(sub.value, ast.Call)
                and call_name(sub.value) in producers
            ):
                return True
        return False
