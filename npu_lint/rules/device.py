"""NPU1xx: device neutrality. Model code must not name CUDA; the device comes from data in scope."""

from __future__ import annotations

import ast
import re

from npu_lint.astutil import walk, walk_pairs
from npu_lint.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix

DEVICE_MODULE = "veomni.utils.device"

_TENSOR_ANNOTATIONS = {
    "Tensor",
    "FloatTensor",
    "LongTensor",
    "BoolTensor",
    "IntTensor",
    "HalfTensor",
    "BFloat16Tensor",
}
_PREFERRED_PARAMS = ("hidden_states", "inputs_embeds", "x", "input", "inputs", "query", "q")


def _is_tensor_annotation(ctx: Context, ann: ast.expr | None) -> bool:
    """``torch.Tensor`` / ``Tensor`` / ``torch.FloatTensor``... (not Optional: it may be None)."""
    if ann is None:
        return False
    dotted = ctx.dotted(ann)
    return dotted is not None and dotted.split(".")[-1] in _TENSOR_ANNOTATIONS


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _self_parameters(cls: ast.ClassDef) -> list[str]:
    """Attributes assigned ``nn.Parameter(...)`` in the class's ``__init__`` (``self.weight``...)."""
    out: list[str] = []
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            for node in ast.walk(stmt):
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, (ast.Name, ast.Attribute))
                    and (
                        node.value.func.attr
                        if isinstance(node.value.func, ast.Attribute)
                        else node.value.func.id
                    )
                    == "Parameter"
                ):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            out.append(target.attr)
    return out


def device_source(ctx: Context, avoid: str | None = None) -> str | None:
    """An expression naming the training device from data in scope, e.g. ``hidden_states.device``.

    Candidates, nearest first: required parameters of the enclosing function annotated as tensors (a
    conventional name such as ``hidden_states`` preferred), else required parameters it uses as tensors
    (``x.shape``, ``x.device``, ``x.view(...)``), then ``self.<p>.device`` for a parameter the
    enclosing class creates in ``__init__``. ``avoid`` is a root name that must not be used (the receiver
    of ``.cuda()``: its own device would make the move a no-op). None when nothing in scope qualifies.
    """
    func = ctx.function
    if func is not None:
        args = func.args
        positional = [*args.posonlyargs, *args.args]
        n_defaults = len(args.defaults)
        required = positional[: len(positional) - n_defaults] if n_defaults else positional
        required += [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is None]
        tensors = [a.arg for a in required if a.arg != avoid and _is_tensor_annotation(ctx, a.annotation)]
        if not tensors:  # else a required parameter the function uses as a tensor (``x.shape``, ``x.device``)
            tensors = [
                a.arg
                for a in required
                if a.arg not in (avoid, "self", "cls") and _used_as_tensor(func, a.arg)
            ]
        for name in _PREFERRED_PARAMS:
            if name in tensors:
                return f"{name}.device"
        if tensors:
            return f"{tensors[0]}.device"
        is_method = positional and positional[0].arg == "self"
        cls = ctx.class_
        if is_method and cls is not None and avoid != "self":
            params = _self_parameters(cls)
            if params:
                name = "weight" if "weight" in params else params[0]
                return f"self.{name}.device"
    return None


class CudaCall(Rule):
    code = "NPU101"
    name = "cuda-call"
    summary = "`.cuda()` moves a tensor or module to a CUDA device, which does not exist on an Ascend NPU."
    why = (
        "`x.cuda()` is bound to the CUDA backend: on an NPU host it raises (or silently targets the wrong "
        "device through a compatibility shim). Device-neutral code moves data to the device of the data it "
        "meets (`.to(hidden_states.device)`), or to VeOmni's current device type "
        "(`.to(get_device_type())` from `veomni.utils.device`)."
    )
    bad = (
        Example(
            """
            import torch


            def rotate(hidden_states: torch.Tensor, inv_freq):
                return hidden_states * inv_freq.cuda(non_blocking=True)
            """,
            fixed="""
            import torch


            def rotate(hidden_states: torch.Tensor, inv_freq):
                return hidden_states * inv_freq.to(hidden_states.device, non_blocking=True)
            """,
            title="a tensor parameter in scope gives the device",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyNorm(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, hidden_states):
                    scale = torch.tensor(2.0).cuda()
                    return hidden_states * self.weight * scale
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyNorm(nn.Module):
                def __init__(self, dim):
                    super().__init__()
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, hidden_states):
                    scale = torch.tensor(2.0).to(self.weight.device)
                    return hidden_states * self.weight * scale
            """,
            title="the module's own parameter gives the device",
        ),
        Example(
            """
            import torch


            def build(model):
                model = model.cuda()
                return model
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type


            def build(model):
                model = model.to(get_device_type())
                return model
            """,
            title="no device in scope: VeOmni's device helper",
        ),
    )
    good = (
        Example(
            """
            def rotate(hidden_states, inv_freq):
                return hidden_states * inv_freq.to(hidden_states.device)
            """
        ),
        Example(
            """
            import torch

            # torch.cuda is a module, and is_available() is not a device move
            ok = torch.cuda.is_available()
            """
        ),
        Example(
            """
            from veomni.utils.device import get_device_type


            def place(x):
                if get_device_type() == "cuda":  # explicit dispatch: the CUDA branch is deliberate
                    x = x.cuda(non_blocking=True)
                return x
            """
        ),
    )
    fix_safety = (
        "Safe: `.to(<device>)` moves to the device the surrounding data already lives on (a tensor "
        'parameter, else a parameter of the module), or to `get_device_type()`, which is `"cuda"` on a GPU '
        "host: behaviour on GPUs is unchanged. `non_blocking=` and other keywords are kept. When `.cuda(i)` "
        "names an explicit device index the fix is unsafe: the index is dropped in favour of the current device."
    )
    precision = "veomni 0.1.12 `veomni/models`: 0 findings (VeOmni's own gate keeps `.cuda()` out). transformers 5.9.0 `models/`: 4 findings, 4 true positives (1.0). Reviewed by hand: bench/accuracy/device.md."
    node_types = (ast.Call,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "cuda"):
            return
        receiver = func.value
        dotted = self.ctx.qualname(receiver)
        if dotted == "torch":  # torch.cuda(...) is not a thing; be conservative
            return
        if any(k.arg not in ("device", "non_blocking", "memory_format") for k in node.keywords):
            return  # not Tensor.cuda / Module.cuda (a quantizer's own ``cuda(t, meta=...)``, ``**kwargs``)
        if any(isinstance(a, ast.Starred) for a in node.args):
            return
        enclosing = self.ctx.function
        if enclosing is not None and enclosing.name == "cuda":
            return  # an override of ``Module.cuda`` implements the API it calls
        if in_cuda_dispatch(self.ctx, node):
            return  # ``if get_device_type() == "cuda": x = x.cuda()`` is deliberate
        ctx = self.ctx
        avoid = _root_name(receiver)
        source = device_source(ctx, avoid=avoid)
        edits: list[Edit] = []
        if source is None:
            source = "get_device_type()"
            helper = helper_edits(ctx, "get_device_type")
            if helper is None:
                self._report_no_fix(node, func)
                return
            edits.extend(helper)
        args = [source]
        applicability = Applicability.SAFE
        reason = ""
        if node.args:
            applicability = Applicability.UNSAFE
            reason = "drops the explicit device index passed to .cuda()"
            if len(node.args) > 1:
                return  # not a real .cuda() signature; leave it alone
        for kw in node.keywords:
            if kw.arg == "device":
                applicability = Applicability.UNSAFE
                reason = "drops the explicit device passed to .cuda()"
                continue
            args.append(ctx.source.segment(kw))
        start = ctx.source.node_range(receiver)[1]
        end = ctx.source.node_range(node)[1]
        edits.append(Edit(start, end, f".to({', '.join(args)})"))
        fix = make_fix(f"Replace `.cuda()` with `.to({source})`", edits, applicability, reason)
        self.report(
            self._where(node, func), f"`.cuda()` hard-codes the CUDA backend; use `.to({source})`", fix
        )

    def _where(self, node: ast.Call, func: ast.Attribute) -> tuple[int, int, int, int]:
        src = self.ctx.source
        line = func.end_lineno or node.lineno
        col = src.char_col(line, func.end_col_offset or 0) - len("cuda")
        end_line = node.end_lineno or line
        return (line, col, end_line, src.char_col(end_line, node.end_col_offset or 0))

    def _report_no_fix(self, node: ast.Call, func: ast.Attribute) -> None:
        self.report(
            self._where(node, func),
            "`.cuda()` hard-codes the CUDA backend; use `.to(get_device_type())` (veomni.utils.device)",
        )


# -- shared helpers for NPU102-NPU104 ----------------------------------------------------------------

_CUDA_INDEXED = re.compile(r"cuda:(\d+)")


def _cuda_string(node: ast.AST | None) -> str | None:
    """``"cuda"`` or ``"cuda:N"`` when ``node`` is that string constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if node.value == "cuda" or _CUDA_INDEXED.fullmatch(node.value):
            return node.value
    return None


def _is_nccl(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "nccl"


def helper_edits(ctx: Context, name: str) -> list[Edit] | None:
    """Edits that make VeOmni's device helper ``name`` callable here; None when the name is taken.

    A helper already imported from any ``...utils.device`` module (VeOmni's own files import it relatively)
    needs no edit; a name bound to something else (a local function, another import) blocks the fix.
    The answer depends only on the file, so it is computed once per file and name (a fresh list each call).
    """
    key = ("helper_edits", name)
    cached = ctx.memo.get(key, ctx)
    if cached is ctx:
        cached = ctx.memo[key] = _helper_edits(ctx, name)
    return None if cached is None else list(cached)  # type: ignore[call-overload]


def _helper_edits(ctx: Context, name: str) -> list[Edit] | None:
    bound = ctx.imports.get(name)
    if bound is not None:
        # ``veomni.utils.device.X``, ``...utils.device.X``, or ``.device.X`` from a sibling in veomni/utils
        return [] if bound.endswith(f"utils.device.{name}") or bound == f".device.{name}" else None
    for stmt in ctx.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            return None
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in stmt.targets
        ):
            return None
    if not ctx.source.kind.spec:
        for stmt in ctx.tree.body:
            if (
                isinstance(stmt, ast.ImportFrom)
                and (stmt.module or "").endswith("utils.device")
                and (stmt.level > 0 or stmt.module == DEVICE_MODULE)
                and all(a.name != "*" for a in stmt.names)
            ):
                end = ctx.source.node_range(stmt.names[-1])[1]
                return [Edit(end, end, f", {name}")]
    return ctx.import_edits(DEVICE_MODULE, name)


def _child_of(ctx: Context, node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(ancestor, child-on-the-path) pairs, innermost first."""
    chain = [*ctx.parents, node]
    return [(chain[i], chain[i + 1]) for i in range(len(chain) - 2, -1, -1)]


def in_annotation(ctx: Context, node: ast.AST) -> bool:
    for parent, child in _child_of(ctx, node):
        if isinstance(parent, ast.arg) and parent.annotation is child:
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.returns is child:
            return True
        if isinstance(parent, ast.AnnAssign) and parent.annotation is child:
            return True
        if isinstance(parent, ast.Subscript) and (ctx.dotted(parent.value) or "").split(".")[-1] == "Literal":
            return True
        if isinstance(parent, (ast.stmt, ast.Lambda)):
            return False
    return False


def _mentions_cuda_dispatch(ctx: Context, test: ast.AST) -> bool:
    """Whether a condition explicitly selects the CUDA backend (VeOmni's flag or device-type helper)."""
    for sub in ast.walk(test):
        if isinstance(sub, (ast.Name, ast.Attribute)):
            dotted = ctx.dotted(sub) or ""
            last = dotted.split(".")[-1]
            if last in ("IS_CUDA_AVAILABLE", "is_cuda"):
                return True
        if isinstance(sub, ast.Compare) and any(_cuda_string(c) for c in [sub.left, *sub.comparators]):
            return True
        if isinstance(sub, ast.Compare) and any(
            isinstance(c, (ast.Tuple, ast.List, ast.Set)) and any(_cuda_string(e) for e in c.elts)
            for c in sub.comparators
        ):
            return True
    return False


def _guard_test(ctx: Context, test: ast.AST) -> bool:
    """``_mentions_cuda_dispatch``, also through a local flag (``unsupported = not IS_CUDA_AVAILABLE``)."""
    if _mentions_cuda_dispatch(ctx, test):
        return True
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    func = ctx.function
    if not names or func is None:
        return False
    for sub in ast.walk(func):
        if (
            isinstance(sub, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id in names for t in sub.targets)
            and _mentions_cuda_dispatch(ctx, sub.value)
        ):
            return True
    return False


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def in_cuda_dispatch(ctx: Context, node: ast.AST) -> bool:
    """Inside a branch that explicitly selects CUDA (``if IS_CUDA_AVAILABLE:``, ``if get_device_type() ==
    "cuda":``, ``match device_type: case "cuda":``, ``x.is_cuda and ...``, or after ``if not
    IS_CUDA_AVAILABLE: return``): CUDA-only code there is deliberate."""
    for parent, child in _child_of(ctx, node):
        if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and child is not parent.test:
            if _guard_test(ctx, parent.test):
                return True
        elif isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            for value in parent.values:
                if value is child:
                    break
                if _mentions_cuda_dispatch(ctx, value):
                    return True
        elif isinstance(parent, ast.Dict) and child in parent.values:
            key = parent.keys[parent.values.index(child)]
            if _cuda_string(key):
                return True  # a dispatch table: {"cuda": torch.cuda.empty_cache, "npu": ...}
        elif isinstance(parent, ast.match_case):
            for sub in ast.walk(parent.pattern):
                if isinstance(sub, ast.MatchValue) and _cuda_string(sub.value):
                    return True
        if isinstance(child, ast.stmt) and _after_cuda_exit(ctx, parent, child):
            return True
    return False


def _after_cuda_exit(ctx: Context, parent: ast.AST, child: ast.stmt) -> bool:
    """``child`` follows ``if not IS_CUDA_AVAILABLE: return`` in the same block."""
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and child in block:
            for stmt in block[: block.index(child)]:
                if (
                    isinstance(stmt, ast.If)
                    and isinstance(stmt.test, ast.UnaryOp)
                    and isinstance(stmt.test.op, ast.Not)
                    and _exits(stmt.body)
                    and _guard_test(ctx, stmt.test.operand)
                ):
                    return True
    return False


def _in_fstring(ctx: Context) -> bool:
    return any(isinstance(p, ast.JoinedStr) for p in ctx.parents)


# torch.cuda.<f>() with an exact VeOmni helper: helper name, and the arguments the helper accepts
# (positional count, keyword names) for the replacement to be exact.
_EXACT_HELPERS: dict[str, tuple[str, int, frozenset[str]]] = {
    "synchronize": ("synchronize", 0, frozenset()),
    "current_device": ("get_device_id", 0, frozenset()),
    "empty_cache": ("empty_cache", 0, frozenset()),
    "set_device": ("set_device", 1, frozenset({"device"})),
    "current_stream": ("get_current_stream", 0, frozenset()),
    "stream": ("switch_to_specified_stream", 1, frozenset({"stream"})),
    "Stream": ("create_stream", 2, frozenset({"device", "priority"})),
    "Event": ("create_event", 2, frozenset({"enable_timing", "blocking"})),
}
# torch.cuda attributes that torch.npu (torch_npu) mirrors with the same signature: `get_torch_device().<f>`.
_MIRRORED = frozenset(
    {
        "synchronize", "current_device", "empty_cache", "set_device", "current_stream", "stream", "Stream",
        "Event", "device", "device_count", "default_stream", "memory_allocated", "max_memory_allocated",
        "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated",
        "memory_stats", "memory_summary", "mem_get_info", "manual_seed", "manual_seed_all", "seed",
        "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
        "get_device_name", "get_device_properties", "is_bf16_supported", "ipc_collect", "set_stream",
    }
)  # fmt: skip
LEGACY_TENSOR_TYPES: dict[str, str] = {
    "FloatTensor": "torch.float32",
    "DoubleTensor": "torch.float64",
    "HalfTensor": "torch.float16",
    "BFloat16Tensor": "torch.bfloat16",
    "ByteTensor": "torch.uint8",
    "CharTensor": "torch.int8",
    "ShortTensor": "torch.int16",
    "IntTensor": "torch.int32",
    "LongTensor": "torch.int64",
    "BoolTensor": "torch.bool",
}
# calls whose first positional argument is a device (type) string
_DEVICE_FIRST_ARG = (
    "torch.device",
    "torch.autocast",
    "torch.amp.autocast",
    "torch.set_default_device",
    "torch.get_device_module",
    "torch.amp.GradScaler",
    "torch.Generator",
    "torch.distributed.device_mesh.init_device_mesh",
    "torch.distributed.init_device_mesh",
    "torch.distributed.device_mesh.DeviceMesh",
)
_KERNEL_WORDS = ("impl", "kernel", "triton", "tilelang", "flash", "cudnn", "liger", "fused", "cutlass", "fa3")


def _is_device_name(name: str | None) -> bool:
    return bool(name) and ("device" in name.lower() or name == "map_location")  # type: ignore[union-attr]


def _target_name(target: ast.AST) -> str | None:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


class HardcodedCudaDevice(Rule):
    code = "NPU102"
    name = "hardcoded-cuda-device"
    summary = (
        'Model code names the CUDA backend: a `"cuda"` device, a `torch.cuda.*` runtime call, a CUDA-only '
        'branch (`.is_cuda`, `device.type == "cuda"`), or the `"nccl"` backend.'
    )
    why = (
        "On an Ascend NPU host the device type is `npu` and the collective backend is `hccl`. A literal "
        '`"cuda"` device fails there (or, as a default, silently picks the wrong device); `torch.cuda.*` calls '
        'act on a backend that is not present; a branch on `x.is_cuda` or `x.device.type == "cuda"` treats '
        'NPU tensors like CPU tensors; `"nccl"` cannot initialise a process group. VeOmni\'s '
        "`veomni.utils.device` names the current backend: `get_device_type()`, `get_torch_device()`, "
        "`get_device_id()`, `synchronize()`, `empty_cache()`, `set_device()`, `create_stream()`, "
        "`create_event()`, `get_dist_comm_backend()`, `IS_CUDA_AVAILABLE`. Comments, docstrings, type "
        'annotations (`Literal["cpu", "cuda"]`), explicit device dispatch (`if get_device_type() == '
        '"cuda":`, `if IS_CUDA_AVAILABLE:`) and guards of CUDA-only kernels (`impl == "triton" and '
        "x.is_cuda`) are legitimate and not reported."
    )
    bad = (
        Example(
            """
            import torch


            def load(model, path, init_device="cuda"):
                model.to_empty(device=init_device)
                torch.cuda.synchronize()
                return torch.device("cuda", torch.cuda.current_device())
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type, synchronize, get_device_id


            def load(model, path, init_device=get_device_type()):
                model.to_empty(device=init_device)
                synchronize()
                return torch.device(get_device_type(), get_device_id())
            """,
            title="device defaults and runtime calls",
        ),
        Example(
            """
            import torch.distributed as dist


            def setup(rank, world_size):
                dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
            """,
            fixed="""
            import torch.distributed as dist
            from veomni.utils.device import get_dist_comm_backend


            def setup(rank, world_size):
                dist.init_process_group(backend=get_dist_comm_backend(), rank=rank, world_size=world_size)
            """,
            title="the collective backend",
        ),
        Example(
            """
            import torch


            def forward(self, hidden_states):
                with torch.autocast(device_type="cuda", enabled=False):
                    hidden_states = self.proj(hidden_states.float())
                stats = torch.cuda.max_memory_allocated()
                return hidden_states, stats
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type, get_torch_device


            def forward(self, hidden_states):
                with torch.autocast(device_type=get_device_type(), enabled=False):
                    hidden_states = self.proj(hidden_states.float())
                stats = get_torch_device().max_memory_allocated()
                return hidden_states, stats
            """,
            title="autocast and memory statistics",
        ),
        Example(
            """
            import torch


            def gather(hidden_states):
                if hidden_states.is_cuda:
                    hidden_states = hidden_states.contiguous()
                return hidden_states
            """,
            title="a CUDA-only branch (no fix: what the branch needs on NPU is a judgement)",
        ),
        Example(
            """
            import torch


            def maybe_sync():
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type, synchronize


            def maybe_sync():
                if get_device_type() != "cpu":
                    synchronize()
            """,
            title="an availability guard (unsafe fix: the guarded code then also runs on NPU)",
        ),
    )
    good = (
        Example(
            '''
            from typing import Literal

            import torch
            from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


            def pick(init_device: Literal["cpu", "cuda", "npu"]) -> torch.device:
                """Defaults to "cuda" on GPU hosts."""
                # a "cuda" string in a comment is fine
                if get_device_type() == "cuda":
                    torch.cuda.synchronize()
                if IS_CUDA_AVAILABLE:
                    major, _ = torch.cuda.get_device_capability()
                return torch.device(get_device_type())
            '''
        ),
        Example(
            """
            def select_kernel(self, hidden_states, impl):
                use_triton = impl == "triton" and hidden_states.is_cuda
                if not hidden_states.is_cuda:
                    raise ValueError(f"triton kernel needs CUDA tensors, is_cuda={hidden_states.is_cuda}")
                return use_triton
            """
        ),
    )
    fix_safety = (
        'Safe where the replacement is exact on a GPU host: a `"cuda"` device becomes `get_device_type()` '
        '(`"cuda:N"` becomes `f"{get_device_type()}:N"`), `"nccl"` becomes `get_dist_comm_backend()`, '
        "`torch.cuda.synchronize()` / `current_device()` / `empty_cache()` / `set_device(d)` / "
        "`current_stream()` / `stream(s)` / `Stream(...)` / `Event(...)` become `synchronize()` / "
        "`get_device_id()` / `empty_cache()` / `set_device(d)` / `get_current_stream()` / "
        "`switch_to_specified_stream(s)` / `create_stream(...)` / `create_event(...)`, other runtime calls "
        "that torch_npu mirrors become `get_torch_device().<name>(...)`, and `torch.cuda.amp.autocast(...)` "
        "becomes `torch.autocast(get_device_type(), ...)`. The import from `veomni.utils.device` is added (and "
        "`config.add_import(...)` in a patch spec). Unsafe: `torch.cuda.is_available()` becomes "
        '`get_device_type() != "cpu"`, which also runs the guarded code on NPU hosts (keep `IS_CUDA_AVAILABLE` '
        'when that code is CUDA-only). No fix for `.is_cuda` / `device.type == "cuda"` branches and '
        "CUDA-only APIs (`get_device_capability`, `nvtx`...): what the NPU path needs is a judgement."
    )
    precision = 'veomni 0.1.12 `veomni/models`: 7 findings, 7 true positives (1.0); rest of the wheel outside `veomni/ops`: 2 of 2; transformers 5.9.0 `models/`: 25 of 25 after the fixes to the false-positive patterns found there (CUDA-kernel flags such as `use_cuda = x.is_cuda`, a `"cuda"` fallback replaced on the next line). Reviewed by hand: bench/accuracy/device.md.'
    node_types = (
        ast.Call,
        ast.Attribute,
        ast.Compare,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.Lambda,
        ast.Assign,
        ast.AnnAssign,
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._seen: set[int] = set()

    # -- reporting helpers ----------------------------------------------------------------------------
    def _report_string(self, node: ast.expr, what: str) -> None:
        """Report a ``"cuda"`` / ``"nccl"`` literal in a device or backend position, with its fix."""
        if id(node) in self._seen or in_cuda_dispatch(self.ctx, node):
            return
        self._seen.add(id(node))
        ctx = self.ctx
        if _is_nccl(node):
            helper, text = "get_dist_comm_backend", "get_dist_comm_backend()"
            message = f'`"nccl"` ({what}) is the CUDA collective backend (NPU uses HCCL); use `get_dist_comm_backend()`'
        else:
            value = _cuda_string(node)
            assert value is not None
            helper = "get_device_type"
            match = _CUDA_INDEXED.fullmatch(value)
            text = f'f"{{get_device_type()}}:{match.group(1)}"' if match else "get_device_type()"
            message = f'`"{value}"` ({what}) names the CUDA backend; use `{text}` (veomni.utils.device)'
        edits = helper_edits(ctx, helper)
        fix = None
        if edits is not None:
            fix = make_fix(f"Replace with `{text}`", [*edits, ctx.replace(node, text)])
        self.report(node, message, fix)

    def visit(self, node: ast.AST) -> None:
        typ = type(node)
        if typ is ast.Call:
            self._visit_call(node)  # type: ignore[arg-type]
        elif typ is ast.Attribute:
            self._visit_attribute(node)  # type: ignore[arg-type]
        elif isinstance(node, ast.Compare):
            self._visit_compare(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self._visit_defaults(node.args)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None or len(targets) != 1:
                return
            name = _target_name(targets[0])
            if _is_device_name(name) and _cuda_string(node.value):
                if self._overridden_next(node, targets[0]):
                    return  # a fallback replaced right away: ``device = "cuda"; if <accelerator>: device = ...``
                self._report_string(node.value, f"assigned to `{name}`")
            elif name and "backend" in name.lower() and _is_nccl(node.value):
                self._report_string(node.value, f"assigned to `{name}`")

    def _overridden_next(self, stmt: ast.stmt, target: ast.expr) -> bool:
        parent = self.ctx.parent
        block = getattr(parent, "body", None)
        if not isinstance(block, list) or stmt not in block:
            return False
        index = block.index(stmt)
        follower = block[index + 1] if index + 1 < len(block) else None
        if not isinstance(follower, ast.If):
            return False
        dumped = ast.dump(target)
        return any(
            isinstance(s, ast.Assign) and any(ast.dump(t) == dumped for t in s.targets) for s in follower.body
        )

    def _visit_defaults(self, args: ast.arguments) -> None:
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=False))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is not None]
        for arg, default in pairs:
            if _is_device_name(arg.arg) and _cuda_string(default):
                self._report_string(default, f"default of `{arg.arg}`")
            elif "backend" in arg.arg.lower() and _is_nccl(default):
                self._report_string(default, f"default of `{arg.arg}`")

    def _visit_call(self, node: ast.Call) -> None:
        args = node.args
        if not node.keywords and (
            not args
            or (
                len(args) < 2
                and not (isinstance(args[0], ast.Constant) and args[0].value in ("cuda", "nccl"))
                and _cuda_string(args[0]) is None
            )
        ):
            return  # nothing below can report: no keyword, no "cuda"/"nccl" first argument, no default
        ctx = self.ctx
        qual = ctx.qualname(node.func) or ""
        func_attr = node.func.attr if isinstance(node.func, ast.Attribute) else qual
        for kw in node.keywords:
            if kw.arg == "type" and qual == "torch.device" and _cuda_string(kw.value):
                self._report_string(kw.value, "`type=` argument of `torch.device(...)`")
            elif _is_device_name(kw.arg) and _cuda_string(kw.value):
                self._report_string(kw.value, f"`{kw.arg}=` argument")
            elif kw.arg == "backend" and _is_nccl(kw.value):
                self._report_string(kw.value, "`backend=` argument")
        if not node.args:
            return
        first = node.args[0]
        if _cuda_string(first):
            if qual in _DEVICE_FIRST_ARG or qual.endswith(("init_device_mesh", "DeviceMesh")):
                if qual == "torch.device" and len(node.args) == 1 and _CUDA_INDEXED.fullmatch(first.value):
                    self._report_torch_device_index(node, first)
                else:
                    self._report_string(first, f"argument of `{qual.split('.')[-1]}(...)`")
            elif func_attr in ("to", "pin_memory") and isinstance(node.func, ast.Attribute):
                self._report_string(first, f"argument of `.{func_attr}(...)`")
        elif _is_nccl(first) and qual.endswith(("init_process_group", "new_group")):
            self._report_string(first, f"argument of `{qual.split('.')[-1]}(...)`")
        if (
            len(node.args) >= 2
            and func_attr in ("pop", "get", "getattr")
            and (_cuda_string(node.args[-1]) or _is_nccl(node.args[-1]))
        ):
            key = node.args[-2]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                if _is_device_name(key.value) or ("backend" in key.value and _is_nccl(node.args[-1])):
                    self._report_string(node.args[-1], f"default of `{key.value}`")

    def _report_torch_device_index(self, node: ast.Call, first: ast.Constant) -> None:
        if id(first) in self._seen or in_cuda_dispatch(self.ctx, first):
            return
        self._seen.add(id(first))
        match = _CUDA_INDEXED.fullmatch(first.value)
        assert match is not None
        text = f"get_device_type(), {match.group(1)}"
        edits = helper_edits(self.ctx, "get_device_type")
        fix = (
            None
            if edits is None
            else make_fix(f"Use `torch.device({text})`", [*edits, self.ctx.replace(first, text)])
        )
        self.report(
            first, f'`torch.device("{first.value}")` names the CUDA backend; use `torch.device({text})`', fix
        )

    # -- torch.cuda.* and .is_cuda -----------------------------------------------------------------------
    def _visit_attribute(self, node: ast.Attribute) -> None:
        ctx = self.ctx
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            self._visit_is_cuda(node)
            return
        value = node.value
        if type(value) is ast.Attribute and value.attr != "cuda":
            return  # the qualname below ends with the attribute
        if ctx.qualname(value) != "torch.cuda":
            return
        if node.attr in LEGACY_TENSOR_TYPES or in_annotation(ctx, node) or in_cuda_dispatch(ctx, node):
            return
        parent = ctx.parent
        if node.attr == "amp":
            if isinstance(parent, ast.Attribute):
                self._visit_amp(node, parent)
            return
        call = parent if isinstance(parent, ast.Call) and parent.func is node else None
        if node.attr == "is_available" and call is not None:
            self._visit_is_available(call)
            return
        if call is not None and node.attr in _EXACT_HELPERS:
            helper, n_pos, kws = _EXACT_HELPERS[node.attr]
            if len(call.args) <= n_pos and all(k.arg in kws for k in call.keywords):
                edits = helper_edits(ctx, helper)
                if edits is not None:
                    start = ctx.source.node_range(node)[0]
                    end = ctx.source.node_range(node)[1]
                    fix = make_fix(f"Replace with `{helper}(...)`", [*edits, Edit(start, end, helper)])
                    self.report(
                        node,
                        f"`torch.cuda.{node.attr}()` is CUDA-only; use `{helper}()` (veomni.utils.device)",
                        fix,
                    )
                    return
        if node.attr in _MIRRORED:
            edits = helper_edits(ctx, "get_torch_device")
            fix = None
            if edits is not None:
                text = f"get_torch_device().{node.attr}"
                fix = make_fix(f"Replace with `{text}`", [*edits, ctx.replace(node, text)])
            self.report(
                node,
                f"`torch.cuda.{node.attr}` is CUDA-only; use `get_torch_device().{node.attr}` "
                "(veomni.utils.device)",
                fix,
            )
            return
        self.report(
            node,
            f"`torch.cuda.{node.attr}` is a CUDA-only API with no NPU equivalent; put it behind "
            "`if IS_CUDA_AVAILABLE:` (veomni.utils.device) or dispatch on `get_device_type()`",
        )

    def _visit_is_available(self, call: ast.Call) -> None:
        ctx = self.ctx
        parent = ctx.parents[-2] if len(ctx.parents) >= 2 else None
        if isinstance(parent, ast.Assign) and any("CUDA" in (_target_name(t) or "") for t in parent.targets):
            return  # defines a CUDA flag (IS_CUDA_AVAILABLE = torch.cuda.is_available())
        if self._kernel_gate(call):
            return  # availability of a CUDA-only kernel (triton...)
        if _in_fstring(ctx):
            return  # shown in a message (``f"{torch.cuda.is_available() = }"``), not a branch
        text = 'get_device_type() != "cpu"'
        target: ast.AST = call
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            # ``not torch.cuda.is_available()`` -> ``get_device_type() == "cpu"``
            text, target = 'get_device_type() == "cpu"', parent
            parent = ctx.parents[-3] if len(ctx.parents) >= 3 else None
        statement_like = (
            ast.If,
            ast.IfExp,
            ast.While,
            ast.BoolOp,
            ast.Assign,
            ast.Return,
            ast.keyword,
            ast.Call,
        )
        if not isinstance(parent, (*statement_like, ast.Assert)) and not (
            isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)
        ):
            text = f"({text})"
        edits = helper_edits(ctx, "get_device_type")
        fix = None
        if edits is not None and not call.args and not call.keywords:
            fix = make_fix(
                f"Replace with `{text}`",
                [*edits, ctx.replace(target, text)],
                Applicability.UNSAFE,
                "the guarded code then also runs on NPU hosts; keep `IS_CUDA_AVAILABLE` if it is CUDA-only",
            )
        self.report(
            call,
            '`torch.cuda.is_available()` is False on an NPU host; use `get_device_type() != "cpu"` for '
            '"any accelerator", or `IS_CUDA_AVAILABLE` (veomni.utils.device) for CUDA-only code',
            fix,
        )

    def _visit_amp(self, amp: ast.Attribute, node: ast.Attribute) -> None:
        ctx = self.ctx
        grand = ctx.parents[-2] if len(ctx.parents) >= 2 else None
        call = grand if isinstance(grand, ast.Call) and grand.func is node else None
        fix = None
        if node.attr in ("autocast", "GradScaler") and ctx.imports.get("torch") == "torch":
            edits = helper_edits(ctx, "get_device_type")
            if edits is not None:
                if node.attr == "autocast":
                    names = ("enabled", "dtype", "cache_enabled")
                    if call is None or len(call.args) > len(names):
                        edits = None
                    else:
                        args = ["get_device_type()"]
                        args += [
                            f"{n}={ctx.source.segment(a)}" for n, a in zip(names, call.args, strict=False)
                        ]
                        args += [ctx.source.segment(k) for k in call.keywords]
                        edits = [*edits, ctx.replace(call, f"torch.autocast({', '.join(args)})")]
                        text = "torch.autocast(get_device_type(), ...)"
                else:
                    if call is None:
                        edits = None
                    else:
                        start = ctx.source.node_range(call)[0]
                        open_paren = ctx.source.node_range(node)[1]
                        sep = ", " if call.args or call.keywords else ""
                        edits = [
                            *edits,
                            Edit(start, open_paren + 1, f"torch.amp.GradScaler(get_device_type(){sep}"),
                        ]
                        text = "torch.amp.GradScaler(get_device_type(), ...)"
                if edits is not None:
                    fix = make_fix(f"Replace with `{text}`", edits)
        self.report(
            node,
            f"`torch.cuda.amp.{node.attr}` is CUDA-only; use `torch.amp.{node.attr}` with "
            "`get_device_type()` (veomni.utils.device)",
            fix,
        )

    def _visit_is_cuda(self, node: ast.Attribute) -> None:
        ctx = self.ctx
        if _in_fstring(ctx) or self._kernel_gate(node):
            return
        if in_cuda_dispatch(ctx, node):
            return
        what = ctx.source.segment(node)
        self.report(
            node,
            f"`{what}` is False for NPU tensors, so this branch treats them like CPU tensors; compare "
            '`.device.type` with `get_device_type()` (veomni.utils.device), or with `"cpu"`',
        )

    def _visit_compare(self, node: ast.Compare) -> None:
        ctx = self.ctx
        if len(node.comparators) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return
        left, right = node.left, node.comparators[0]
        side = left if _cuda_string(right) else right if _cuda_string(left) else None
        if not (isinstance(side, ast.Attribute) and side.attr == "type"):
            return
        owner = _target_name(side.value) if not isinstance(side.value, ast.Call) else None
        if not _is_device_name(owner):
            return
        if _in_fstring(ctx) or self._kernel_gate(node) or in_cuda_dispatch(ctx, node):
            return
        what = ctx.source.segment(node)
        self.report(
            node,
            f"`{what}` is False for NPU tensors, so this branch treats them like CPU tensors; compare with "
            '`get_device_type()` (veomni.utils.device), or with `"cpu"`',
        )

    def _kernel_gate(self, node: ast.AST) -> bool:
        """A guard of a CUDA-only kernel: ``impl == "triton" and x.is_cuda``, or ``if not x.is_cuda:`` whose
        body only raises or records an unsupported reason."""
        ctx = self.ctx
        for parent, child in _child_of(ctx, node):
            if isinstance(parent, (ast.Assign, ast.AnnAssign)):
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                # ``use_cuda = x.is_cuda`` names a flag that selects a CUDA kernel
                return any("cuda" in (_target_name(t) or "").lower() for t in targets)
            if isinstance(parent, ast.BoolOp):
                for value in parent.values:
                    if value is not child and _names_kernel(ctx, value):
                        return True
            elif isinstance(parent, ast.If) and child is parent.test:
                return all(_is_requirement_stmt(s) for s in parent.body)
            elif isinstance(parent, (ast.stmt, ast.Lambda)):
                return False
        return False


def _names_kernel(ctx: Context, node: ast.AST) -> bool:
    """A condition that selects a kernel implementation (``impl == "tilelang"``, ``use_triton``...)."""
    for sub in ast.walk(node):
        words: list[str] = []
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            words.append(sub.value)
        elif isinstance(sub, ast.Name):
            words.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            words.append(sub.attr)
        if any(w in word.lower() for word in words for w in _KERNEL_WORDS):
            return True
    return False


def _is_requirement_stmt(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Raise):
        return True
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr in ("append", "add", "warning", "warn", "info")
    )


# -- NPU103 -------------------------------------------------------------------------------------------

FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "arange", "range", "tensor", "as_tensor", "rand", "randn",
        "randint", "randperm", "eye", "linspace", "logspace", "empty_strided", "tril_indices",
        "triu_indices", "bartlett_window", "hann_window", "hamming_window", "blackman_window", "normal",
        "scalar_tensor", "sparse_coo_tensor", "asarray",
    }
)  # fmt: skip
INIT_METHODS = frozenset(
    {
        "__init__", "_init_weights", "init_weights", "reset_parameters", "_reset_parameters", "post_init",
        "_initialize_weights", "initialize_weights", "from_pretrained", "_from_config", "from_config",
        "_post_init", "tie_weights", "_tie_weights", "reset_buffers",
    }
)  # fmt: skip
_MODULE_BASES = frozenset(
    {"Module", "ModuleList", "ModuleDict", "Sequential", "GradientCheckpointingLayer", "PreTrainedModel",
     "ModelMixin", "Embedding", "Linear", "LayerNorm", "Conv1d", "Conv2d", "Conv3d"}
)  # fmt: skip
# method calls a freshly allocated tensor can pass through before a device move (``.to(x.device)``)
_HOST_SINKS = frozenset({"tolist", "item", "numpy", "cpu", "pin_memory"})
# tensor methods that return host values (ints, bools, strings), not tensors
_SCALAR_METHODS = frozenset(
    {"size", "dim", "numel", "nelement", "element_size", "stride", "is_contiguous", "data_ptr", "get_device",
     "type", "is_floating_point", "is_complex", "storage_offset", "__len__"}
)  # fmt: skip
_MOVES = frozenset({"to", "cuda", "npu", "type_as", "type"})
_DTYPE_WORDS = ("dtype", "float", "int", "bool", "half", "bfloat16", "long", "double", "complex")


def _is_init_method(name: str) -> bool:
    return name in INIT_METHODS or name.startswith(("_init_", "init_"))


def _module_classes(tree: ast.Module, ctx: Context) -> set[str]:
    """Top-level classes that are ``nn.Module`` subclasses (by base name, transitively within the file)."""
    classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, cls in classes.items():
            if name in out:
                continue
            for base in cls.bases:
                last = (ctx.dotted(base) or "").split(".")[-1]
                if last in _MODULE_BASES or last.endswith(("PreTrainedModel", "Module")) or last in out:
                    out.add(name)
                    changed = True
                    break
    return out


def _spec_targets(tree: ast.Module) -> dict[str, str]:
    """Spec functions installed by ``@config.override_method("Cls.m")`` / ``replace_function("f")``:
    function name -> the method or function name they replace."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef):
            continue
        for deco in stmt.decorator_list:
            if (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr in ("override_method", "replace_function", "modify_init")
            ):
                target = next((a.value for a in deco.args[:1] if isinstance(a, ast.Constant)), None)
                if deco.func.attr == "modify_init":
                    out[stmt.name] = "__init__"
                elif isinstance(target, str):
                    out[stmt.name] = target.split(".")[-1]
    return out


def _is_dtype_expr(ctx: Context, node: ast.AST) -> bool:
    dotted = ctx.dotted(node) or ""
    last = dotted.split(".")[-1].lower()
    return bool(last) and any(w in last for w in _DTYPE_WORDS)


def _moves_device(ctx: Context, call: ast.Call) -> bool:
    """``.to(...)``-style call that sets a device (not ``.to(torch.float32)``)."""
    func = call.func
    assert isinstance(func, ast.Attribute)
    if func.attr in ("cuda", "npu", "type_as"):
        return True
    if func.attr == "type":
        return any("cuda" in ast.dump(a) for a in call.args)
    if any(k.arg == "device" or k.arg is None for k in call.keywords):
        return True
    return bool(call.args) and not _is_dtype_expr(ctx, call.args[0])


def _is_submodule_call(node: ast.AST) -> bool:
    """``self.norm(x)`` / ``self.layers[i](x)``: a submodule's output lives on the accelerator."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Subscript):
        func = func.value
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
        and not func.attr.startswith(("_", "get_", "compute_", "prepare_"))
    )


def _zero_size(call: ast.Call) -> bool:
    """``torch.empty(0)`` / ``torch.empty([0])``: an empty placeholder argument, never computed with."""
    if len(call.args) != 1:
        return False
    arg = call.args[0]
    if isinstance(arg, (ast.List, ast.Tuple)) and len(arg.elts) == 1:
        arg = arg.elts[0]
    return isinstance(arg, ast.Constant) and type(arg.value) is int and arg.value == 0


def _bound_before(func: ast.AST, name: str, line: int) -> bool:
    """Every assignment of ``name`` in ``func`` comes before ``line`` (so ``name`` is bound there)."""
    lines = [
        t.lineno
        for n in walk(func)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id == name
    ]
    return bool(lines) and max(lines) < line


def _to_cpu(call: ast.Call) -> bool:
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "to"
        and any(
            isinstance(a, ast.Constant) and a.value == "cpu"
            for a in [*call.args, *(k.value for k in call.keywords)]
        )
    )


def _subtree(func: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(func))``, sharing the walk of ``walk_pairs`` with the other per-function helpers."""
    return [func, *(child for child, _ in walk_pairs(func))]


def _names_with_parents(ctx: Context, func: ast.AST) -> dict[str, list[tuple[ast.Name, ast.AST]]]:
    """Every ``Name`` in ``func`` with its parent, by identifier, in ``ast.walk`` order (once per function)."""
    key = ("names_with_parents", id(func))
    cached = ctx.memo.get(key)
    if cached is not None and cached[0] is func:  # type: ignore[index]
        return cached[1]  # type: ignore[index]
    out: dict[str, list[tuple[ast.Name, ast.AST]]] = {}
    for child, parent in walk_pairs(func):
        if isinstance(child, ast.Name):
            out.setdefault(child.id, []).append((child, parent))  # type: ignore[arg-type]
    ctx.memo[key] = (func, out)
    return out


def _uses_after(
    ctx: Context, func: ast.AST, name: str, assign: ast.Assign, parents: dict[int, ast.AST]
) -> list[ast.Name] | None:
    """Loads of ``name`` after ``assign`` up to its next rebinding; None when the value is moved to a
    device or the host (``name.to(x.device)``, ``name.cpu()``, ``name.tolist()``) before that: later uses
    then no longer see the allocation."""
    line = assign.end_lineno or assign.lineno
    events = [
        (child.lineno, child.col_offset, child, parent)
        for child, parent in _names_with_parents(ctx, func).get(name, ())
        if child.lineno > line
    ]
    events.sort(key=lambda e: (e[0], e[1]))
    uses: list[ast.Name] = []
    for _, _, child, parent in events:
        if isinstance(child.ctx, ast.Store):
            break
        if isinstance(parent, ast.Attribute):
            if parent.attr in _HOST_SINKS:
                return None
            call = parents.get(id(parent))
            if parent.attr in _MOVES and isinstance(call, ast.Call) and call.func is parent:
                if _moves_device(ctx, call):
                    return None
        uses.append(child)
    return uses


_TENSOR_ATTRS = frozenset(("device", "dtype", "shape", "size", "view", "reshape", "unsqueeze", "transpose"))
_TENSOR_USES: dict[int, tuple[ast.AST, frozenset[str]]] = {}


def _names_used_as_tensors(func: ast.AST) -> frozenset[str]:
    """Names used as tensors in ``func`` (``name.device`` / ``.dtype`` / ``.shape``...), one walk per function."""
    cached = _TENSOR_USES.get(id(func))
    if cached is not None and cached[0] is func:
        return cached[1]
    names = frozenset(
        sub.value.id
        for sub in _subtree(func)
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.attr in _TENSOR_ATTRS
    )
    if len(_TENSOR_USES) > 4096:
        _TENSOR_USES.clear()
    _TENSOR_USES[id(func)] = (func, names)
    return names


def _used_as_tensor(func: ast.AST, name: str) -> bool:
    """Whether ``name`` is used as a tensor in ``func``."""
    return name in _names_used_as_tensors(func)


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


# -- NPU104 -------------------------------------------------------------------------------------------

_LEGACY_STRING = re.compile(r"torch\.cuda\.(\w+Tensor)")


class CudaTensorType(Rule):
    code = "NPU104"
    name = "cuda-tensor-type"
    summary = "A legacy CUDA tensor type (`torch.cuda.FloatTensor`...) binds both the device and the dtype."
    why = (
        '`torch.cuda.FloatTensor(...)`, `x.type(torch.cuda.HalfTensor)` and `x.type("torch.cuda.LongTensor")` '
        "name the CUDA backend and leave the dtype implicit in a class name. They have no NPU counterpart "
        "in device-neutral code. Modern PyTorch says both explicitly: `torch.tensor(data, dtype=torch.float32, "
        "device=...)`, `torch.empty(*sizes, dtype=..., device=...)`, `x.to(device=..., dtype=...)`."
    )
    bad = (
        Example(
            """
            import torch


            def gate(hidden_states: torch.Tensor, scores):
                weights = scores.type(torch.cuda.HalfTensor)
                bias = torch.cuda.FloatTensor([0.5, 0.25])
                return hidden_states * weights + bias
            """,
            fixed="""
            import torch


            def gate(hidden_states: torch.Tensor, scores):
                weights = scores.to(device=hidden_states.device, dtype=torch.float16)
                bias = torch.tensor([0.5, 0.25], dtype=torch.float32, device=hidden_states.device)
                return hidden_states * weights + bias
            """,
            title="a tensor in scope gives the device",
        ),
        Example(
            """
            import torch


            def to_ids(values):
                return values.type("torch.cuda.LongTensor")
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type


            def to_ids(values):
                return values.to(device=get_device_type(), dtype=torch.int64)
            """,
            title="no device in scope: unsafe fix to VeOmni's device type",
        ),
    )
    good = (
        Example(
            """
            import torch


            def gate(hidden_states: torch.Tensor, scores: torch.Tensor):
                ids = scores.to(device=hidden_states.device, dtype=torch.int64)
                half = scores.type(torch.HalfTensor)  # a CPU type: not device-bound to CUDA
                return ids, half
            """
        ),
    )
    fix_safety = (
        "Safe when a tensor in scope gives the device (`hidden_states.device`, `self.weight.device`): the dtype "
        "of the legacy type is written out (`torch.cuda.HalfTensor` -> `torch.float16`). Unsafe when nothing in "
        "scope names the device: `get_device_type()` is used (the current device, as the CUDA type used), "
        "which differs on a host without an accelerator. `torch.cuda.XTensor(data)` becomes `torch.tensor(...)` "
        "for a list or tuple literal and `torch.empty(...)` for integer sizes; an ambiguous single argument, "
        "`isinstance` checks and other references get no fix."
    )
    precision = "No findings in veomni 0.1.12 `veomni/models` nor in transformers 5.9.0 `models/` (legacy CUDA types are gone from both); measured on the rule's examples and fixtures only."
    node_types = (ast.Call, ast.Attribute)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(name in text for name in LEGACY_TENSOR_TYPES):
            self.node_types = (ast.Call,)  # an attribute is reported only when it names a legacy type

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "type"
                and len(node.args) == 1
                and not node.keywords
            ):
                type_name = self._legacy_name(node.args[0])
                if type_name is not None:
                    self._report_type_call(node, func, type_name)
            return
        assert isinstance(node, ast.Attribute)
        if node.attr not in LEGACY_TENSOR_TYPES or ctx.qualname(node.value) != "torch.cuda":
            return
        if in_annotation(ctx, node):
            return
        parent = ctx.parent
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
            func = parent.func
            if isinstance(func, ast.Attribute) and func.attr == "type" and len(parent.args) == 1:
                return  # reported with the .type(...) call
        if isinstance(parent, ast.Call) and parent.func is node:
            self._report_constructor(parent, node)
            return
        self.report(
            node,
            f"`torch.cuda.{node.attr}` is a CUDA-bound legacy type; check `x.dtype == "
            f"{LEGACY_TENSOR_TYPES[node.attr]}` and the device separately",
        )

    def _legacy_name(self, arg: ast.AST) -> str | None:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            match = _LEGACY_STRING.fullmatch(arg.value)
            if match and match.group(1) in LEGACY_TENSOR_TYPES:
                return match.group(1)
            return None
        if isinstance(arg, ast.Attribute) and arg.attr in LEGACY_TENSOR_TYPES:
            if self.ctx.qualname(arg.value) == "torch.cuda":
                return arg.attr
        return None

    def _source(self, avoid: str | None) -> tuple[str, list[Edit], Applicability, str] | None:
        ctx = self.ctx
        source = device_source(ctx, avoid=avoid)
        if source is not None:
            return source, [], Applicability.SAFE, ""
        edits = helper_edits(ctx, "get_device_type")
        if edits is None:
            return None
        reason = "no tensor in scope gives the device; get_device_type() is the current device type"
        return "get_device_type()", edits, Applicability.UNSAFE, reason

    def _torch_edits(self) -> list[Edit] | None:
        bound = self.ctx.imports.get("torch")
        if bound == "torch":
            return []
        if bound is not None:
            return None
        return [self.ctx._module_import_edit("import torch\n")]

    def _report_type_call(self, call: ast.Call, func: ast.Attribute, type_name: str) -> None:
        ctx = self.ctx
        dtype = LEGACY_TENSOR_TYPES[type_name]
        message = f"`.type(torch.cuda.{type_name})` binds CUDA; use `.to(device=..., dtype={dtype})`"
        found = self._source(_root_name(func.value))
        torch_edits = self._torch_edits()
        fix = None
        if found is not None and torch_edits is not None:
            source, edits, applicability, reason = found
            start = ctx.source.node_range(func.value)[1]
            end = ctx.source.node_range(call)[1]
            text = f".to(device={source}, dtype={dtype})"
            fix = make_fix(
                f"Replace with `{text}`",
                [*torch_edits, *edits, Edit(start, end, text)],
                applicability,
                reason,
            )
        self.report(call, message, fix)

    def _report_constructor(self, call: ast.Call, node: ast.Attribute) -> None:
        ctx = self.ctx
        dtype = LEGACY_TENSOR_TYPES[node.attr]
        args = call.args
        factory = None
        if call.keywords or any(isinstance(a, ast.Starred) for a in args):
            factory = None
        elif len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
            factory = "tensor"
        elif args and all(isinstance(a, ast.Constant) and type(a.value) is int for a in args):
            factory = "empty"
        message = (
            f"`torch.cuda.{node.attr}(...)` binds CUDA and hides the dtype; use `torch.tensor`/`torch.empty` "
        )
        message += f"with `dtype={dtype}` and `device=`"
        fix = None
        found = self._source(None)
        if factory is not None and found is not None:
            source, edits, applicability, reason = found
            inner = ", ".join(ctx.source.segment(a) for a in args)
            text = f"torch.{factory}({inner}, dtype={dtype}, device={source})"
            fix = make_fix(
                f"Replace with `torch.{factory}(...)`",
                [*edits, ctx.replace(call, text)],
                applicability,
                reason,
            )
        self.report(call, message, fix)
