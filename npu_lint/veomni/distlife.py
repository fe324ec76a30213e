"""A rank and lifecycle model of a distributed training tree's own code (stdlib only, syntactic).

VeOmni's distributed, checkpoint and trainer code runs the same source on every rank; what differs per rank is a
handful of identities and what each rank is allowed to do on its own. This module names them once so the rules of
the distributed family can ask the same questions at every site:

- **rank identities** (:func:`identity`): the *global* rank (unique per job: ``dist.get_rank()`` without a group,
  the ``RANK`` variable, a ``global_rank`` field), the *local* rank (unique per node only: ``LOCAL_RANK``, a
  ``local_rank`` field), a *group* rank (``dist.get_rank(group)``, ``mesh.get_local_rank(dim)``, ``sp_rank``...),
  and the job's world size versus a group's;
- **rank-dependent conditions** (:func:`rank_test`): an ``if`` that only some ranks enter (``if is_rank0:``,
  ``if dist.get_rank() == 0:``, ``if local_rank == 0``);
- **collectives and barriers** (:func:`collective`): calls every rank of a group must reach (``dist.barrier``,
  ``all_reduce``, ``broadcast``, ``dcp.save``...);
- **explicit groups** (:func:`group_params`): the parameters through which a caller hands a function the process
  group it must use, and the *ambient* reads that bypass them (:func:`ambient_read`): a getter of the current
  parallel state called without the group, a ``get_parallel_state()`` size/rank field, the job-wide
  ``dist.get_world_size()`` / ``dist.get_rank()``;
- **checkpoint lifecycle** (:func:`save_kind`, :func:`drains`): synchronous and asynchronous DCP saves, the
  future an async save leaves behind and the calls that drain it.
"""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)

GLOBAL = "global"  # unique per job
LOCAL = "local"  # unique per node only
GROUP = "group"  # rank inside a process group / mesh dimension

_GLOBAL_ENV = frozenset({"RANK"})
_LOCAL_ENV = frozenset({"LOCAL_RANK"})
_GROUP_RANK_FIELD = re.compile(
    r"^(sp|ulysses|cp|dp|fsdp|ep|tp|pp|dp_shard|dp_replicate|extra_parallel)_rank$"
)
# getters of the current (ambient) parallel state's size or rank: get_ulysses_sequence_parallel_world_size(),
# get_unified_sequence_parallel_rank(), get_data_parallel_world_size(), get_context_parallel_rank()...
_AMBIENT_GETTER = re.compile(r"^get_\w*(parallel|_sp|ulysses|_cp|_ep|_dp|fsdp)\w*_(world_size|rank|size)$")
_AMBIENT_GROUP = re.compile(r"^get_\w*(parallel|ulysses|_sp|_cp|_ep|_dp)\w*_group$")
_STATE_FIELD = re.compile(
    r"^(sp|ulysses|cp|dp|fsdp|ep|tp|pp|dp_shard|dp_replicate|dp_shard_sp|extra_parallel)_(size|rank)$"
)
_STATE_GETTERS = frozenset({"get_parallel_state"})
_GROUP_PARAM = re.compile(r"^(group|process_group|pg|\w+_group|\w+_pg)$")

COLLECTIVES = frozenset(
    {
        "barrier",
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "broadcast",
        "broadcast_object_list",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "gather",
        "scatter",
        "monitored_barrier",
    }
)
_DIST_MODULES = frozenset({"dist", "torch.distributed", "distributed"})
_DCP_MODULES = frozenset({"dcp", "torch.distributed.checkpoint", "checkpoint"})
_RANK0_NAMES = re.compile(
    r"^(is_)?(global_|local_|main_)?(rank_?0|rank_?zero|master|main_process|chief|is_master|is_main)$"
)


def env_name(node: ast.AST) -> str | None:
    """``os.getenv("X", d)``, ``os.environ.get("X")``, ``os.environ["X"]`` -> ``"X"`` (also under ``int(...)``)."""
    if isinstance(node, ast.Call) and call_name(node) in ("int", "str") and node.args:
        return env_name(node.args[0])
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        if isinstance(func, ast.Attribute) and (
            func.attr == "getenv" or (func.attr == "get" and _is_environ(func.value))
        ):
            value = node.args[0].value
            return value if isinstance(value, str) else None
    if isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.slice, ast.Constant):
        value = node.slice.value
        return value if isinstance(value, str) else None
    return None


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def dist_call(node: ast.AST, *names: str) -> str | None:
    """The name of a ``torch.distributed`` call (``dist.barrier()``, ``torch.distributed.get_rank()``)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if names and node.func.attr not in names:
        return None
    owner = dotted(node.func.value)
    if owner in _DIST_MODULES or owner.endswith(".distributed"):
        return node.func.attr
    return None


def _group_given(call: ast.Call) -> bool:
    """Whether a ``dist.get_rank``/``get_world_size`` call names a group (positionally or as ``group=``)."""
    for arg in call.args:
        if not (isinstance(arg, ast.Constant) and arg.value is None):
            return True
    return any(
        kw.arg in ("group", "process_group")
        and not (isinstance(kw.value, ast.Constant) and kw.value.value is None)
        for kw in call.keywords
    )


def identity(
    node: ast.AST | None, local_values: dict[str, ast.expr] | None = None, depth: int = 0
) -> str | None:
    """The rank identity ``node`` carries, if any (GLOBAL, LOCAL or GROUP); follows simple locals."""
    if node is None or depth > 4:
        return None
    env = env_name(node)
    if env in _GLOBAL_ENV:
        return GLOBAL
    if env in _LOCAL_ENV:
        return LOCAL
    if isinstance(node, ast.Call):
        name = dist_call(node, "get_rank")
        if name:
            return GROUP if _group_given(node) else GLOBAL
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get_local_rank" and node.args:
            return GROUP  # DeviceMesh.get_local_rank(dim): a rank inside one mesh dimension
        if call_name(node) in ("int",) and node.args:
            return identity(node.args[0], local_values, depth + 1)
        return None
    if isinstance(node, ast.Attribute):
        attr = node.attr
    elif isinstance(node, ast.Name):
        attr = node.id
        if local_values and attr in local_values:
            found = identity(local_values[attr], local_values, depth + 1)
            if found:
                return found
    else:
        return None
    low = attr.lower()
    if low in ("global_rank", "rank_global", "world_rank"):
        return GLOBAL
    if low in ("local_rank", "node_rank_local", "local_process_index"):
        return LOCAL
    if _GROUP_RANK_FIELD.match(low):
        return GROUP
    return None


def identities_in(node: ast.AST, local_values: dict[str, ast.expr] | None = None) -> set[str]:
    out: set[str] = set()
    for sub in _walk(node):
        if isinstance(sub, (ast.Call, ast.Attribute, ast.Name, ast.Subscript)):
            found = identity(sub, local_values)
            if found:
                out.add(found)
    return out


def rank_test(test: ast.AST) -> bool:
    """An ``if`` test that only some ranks pass: a rank compared with a constant, or a rank-0 flag."""
    for sub in _walk(test):
        if isinstance(sub, ast.Compare):
            sides = [sub.left, *sub.comparators]
            if any(isinstance(s, ast.Constant) and isinstance(s.value, int) for s in sides) and any(
                identity(s) for s in sides
            ):
                return True
            if any(isinstance(s, ast.Name) and "rank" in s.id.lower() for s in sides) and any(
                isinstance(s, ast.Constant) and isinstance(s.value, int) for s in sides
            ):
                return True
        elif isinstance(sub, ast.Name) and _RANK0_NAMES.match(sub.id):
            return True
        elif isinstance(sub, ast.Attribute) and _RANK0_NAMES.match(sub.attr):
            return True
    return False


# positional index of the ``group`` argument of the data collectives
GROUP_INDEX = {
    "all_reduce": 2,
    "all_gather": 2,
    "all_gather_into_tensor": 2,
    "all_gather_object": 2,
    "broadcast": 2,
    "reduce_scatter": 3,
    "reduce_scatter_tensor": 3,
    "all_to_all": 2,
    "all_to_all_single": 4,
}


def default_group_collective(node: ast.AST) -> str | None:
    """A data collective called without a group (or with ``group=None``): it runs on the whole job."""
    name = dist_call(node)
    if name not in GROUP_INDEX:
        return None
    assert isinstance(node, ast.Call)
    if any(isinstance(a, ast.Starred) for a in node.args) or any(kw.arg is None for kw in node.keywords):
        return None
    if len(node.args) > GROUP_INDEX[name]:
        given: ast.AST | None = node.args[GROUP_INDEX[name]]
    else:
        given = next((kw.value for kw in node.keywords if kw.arg == "group"), None)
    if given is None or (isinstance(given, ast.Constant) and given.value is None):
        return name
    return None


def collective(node: ast.AST) -> str | None:
    """The collective a call issues on every rank of its group (``barrier``, ``all_reduce``, ``dcp.save``...)."""
    if not isinstance(node, ast.Call):
        return None
    name = dist_call(node)
    if name in COLLECTIVES:
        return name
    kind = save_kind(node)
    if kind:
        return f"dcp.{kind}"
    return None


def dcp_names(imports: dict[str, str]) -> dict[str, str]:
    """Bare names bound to DCP's save functions (``from torch.distributed.checkpoint import async_save``)."""
    out: dict[str, str] = {}
    for local, qualified in imports.items():
        module, _, last = qualified.rpartition(".")
        if last in ("save", "async_save") and module.startswith("torch.distributed.checkpoint"):
            out[local] = last
    return out


def save_kind(node: ast.AST, bare: dict[str, str] | None = None) -> str | None:
    """``"save"`` for a synchronous ``dcp.save(...)``, ``"async_save"`` for ``dcp.async_save(...)``; ``bare``:
    :func:`dcp_names` of the file, for the functions imported by name."""
    if bare and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in bare:
        return bare[node.func.id]
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr not in ("save", "async_save"):
        return None
    owner = dotted(node.func.value)
    if owner in _DCP_MODULES or owner.endswith(".checkpoint"):
        return node.func.attr
    return None


def is_barrier(node: ast.AST) -> bool:
    return dist_call(node, "barrier", "monitored_barrier") is not None


def group_params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Parameters through which a caller hands ``func`` a process group."""
    args = func.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return {n for n in names if _GROUP_PARAM.match(n) and n not in ("self", "cls")}


def state_getters(func: ast.AST, imports: dict[str, str] | None = None) -> set[str]:
    """Names that call the ambient parallel-state getter here: ``get_parallel_state`` and its import aliases (of
    the module, ``imports``: local name -> qualified name, or of the function itself)."""
    out = set(_STATE_GETTERS)
    for local, qualified in (imports or {}).items():
        if qualified.rsplit(".", 1)[-1] in _STATE_GETTERS:
            out.add(local)
    for sub in _walk(func):
        if isinstance(sub, ast.ImportFrom):
            for alias in sub.names:
                if alias.name in _STATE_GETTERS and alias.asname:
                    out.add(alias.asname)
    return out


def state_locals(func: ast.AST, getters: set[str] | None = None) -> set[str]:
    """Locals bound to the ambient parallel state (``ps = get_parallel_state()``)."""
    getters = getters or set(_STATE_GETTERS)
    out: set[str] = set()
    for sub in _walk(func):
        if (
            isinstance(sub, ast.Assign)
            and isinstance(sub.value, ast.Call)
            and call_name(sub.value) in getters
        ):
            for target in sub.targets:
                if isinstance(target, ast.Name):
                    out.add(target.id)
    return out


def ambient_read(node: ast.AST, state_names: set[str], getters: set[str] | None = None) -> str | None:
    """What ``node`` reads from outside a given group: ``"the job's world size"``, ``"the ambient ..."``; or None."""
    getters = getters or set(_STATE_GETTERS)
    if isinstance(node, ast.Call):
        name = dist_call(node, "get_world_size", "get_rank")
        if name and not _group_given(node):
            return f"`dist.{name}()` (the whole job's, not a group's)"
        if name:
            given = (
                node.args[0]
                if node.args
                else next((kw.value for kw in node.keywords if kw.arg in ("group", "process_group")), None)
            )
            if (
                isinstance(given, ast.Call)
                and _AMBIENT_GROUP.match(call_name(given) or "")
                and not given.args
            ):
                return f"`dist.{name}({call_name(given)}())` (the current parallel state's group, not the one given)"
            if (
                isinstance(given, ast.Attribute)
                and given.attr.endswith("_group")
                and (
                    (isinstance(given.value, ast.Call) and call_name(given.value) in getters)
                    or (isinstance(given.value, ast.Name) and given.value.id in state_names)
                )
            ):
                return f"`dist.{name}({dotted(given) or given.attr})` (the global parallel state's group)"
        callee = call_name(node)
        if callee and _AMBIENT_GETTER.match(callee) and not node.args and not node.keywords:
            return f"`{callee}()` (the current parallel state's group, not the one given)"
        return None
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _STATE_FIELD.match(node.attr):
        owner = node.value
        if isinstance(owner, ast.Call) and call_name(owner) in getters:
            return f"`{call_name(owner)}().{node.attr}` (the global parallel state's)"
        if isinstance(owner, ast.Name) and owner.id in state_names:
            return f"`{owner.id}.{node.attr}` (the global parallel state's)"
    return None


def fallback_branch(test: ast.AST, names: set[str]) -> str | None:
    """Which branch of an ``if`` on one of ``names`` handles a missing group: ``"body"`` for ``group is None`` /
    ``not group``, ``"orelse"`` for ``group is not None`` / ``group``; None when the test is not about them."""

    def named(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in names

    if named(test):
        return "orelse"
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and named(test.operand):
        return "body"
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and named(test.left):
        right = test.comparators[0]
        if isinstance(right, ast.Constant) and right.value is None:
            if isinstance(test.ops[0], (ast.Is, ast.Eq)):
                return "body"
            if isinstance(test.ops[0], (ast.IsNot, ast.NotEq)):
                return "orelse"
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            found = fallback_branch(value, names)
            if found:
                return found
    return None


def drains(node: ast.AST) -> bool:
    """A call that waits for a pending async save: ``fut.result()``, ``fut.wait()``, ``wait_for_pending_save()``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)):
        return False
    name = call_name(node) or ""
    if re.search(r"wait_for_\w*save|wait_\w*pending|drain\w*save|finalize\w*save", name):
        return True
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("result", "wait"):
        return "future" in dotted(node.func.value).lower() or "save" in dotted(node.func.value).lower()
    return False
