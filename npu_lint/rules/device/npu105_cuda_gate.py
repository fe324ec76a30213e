"""NPU105 cuda-gate."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name, nodes_of
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import (
    CUDA_ONLY_IMPLS,
    bool_operand_removal,
    cuda_gate_on_npu_path,
    cuda_presence_probe,
    cuda_string,
    device_neutral_scope,
    in_fstring,
    npu_guard_in,
    npu_module,
    npu_test,
)
from npu_lint.veomni import backends
from npu_lint.veomni.backends import DEVICE_HELPERS


def _device_like(node: ast.AST) -> bool:
    """`x.device.type`, `x.device`, `device_type`, `str(x.device)`, `x.device.type.lower()`."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("lower", "strip")
    ):
        node = node.func.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Attribute):
        return node.attr in ("type", "device", "device_type")
    return isinstance(node, ast.Name) and "device" in node.id


def _cuda_member(node: ast.AST) -> bool:
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(cuda_string(e) for e in node.elts)


def _cuda_compare(node: ast.Compare) -> bool:
    """`<device> == "cuda"`, `<device> in ("cuda", ...)`, `"cuda" in str(<device>)` (negations included)."""
    left, right, op = node.left, node.comparators[0], node.ops[0]
    if isinstance(op, (ast.Eq, ast.NotEq)):
        side = left if cuda_string(right) else right if cuda_string(left) else None
        return side is not None and _device_like(side)
    if isinstance(op, (ast.In, ast.NotIn)):
        if _cuda_member(right):
            return _device_like(left)
        return cuda_string(left) is not None and _device_like(right)
    return False


_HOST_CUDA_FLAGS = frozenset({"IS_CUDA_AVAILABLE"})  # VeOmni's host flag (``veomni.utils.device``)
_BARE_HELPERS = frozenset({"get_torch_device", "get_device_type", "get_device_id"})  # distinctive unqualified


def _host_cuda_probe(ctx: Context, node: ast.AST) -> bool:
    """``IS_CUDA_AVAILABLE`` (VeOmni's flag, however imported) or ``torch.cuda.is_available()``."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return last_name(node) in _HOST_CUDA_FLAGS
    return isinstance(node, ast.Call) and cuda_presence_probe(ctx, node)


def _cuda_probe(ctx: Context, node: ast.AST, flags: bool = True) -> bool:
    """A host probe (``IS_CUDA_AVAILABLE``, ``torch.cuda.is_available()``), the host's device type compared with
    CUDA (``get_device_type() == "cuda"``; not a setting such as ``init_device == "cuda"``, which may name "the
    accelerator") or, with ``flags``, a local flag assigned
    once in the function from a CUDA-only gate (``use_mem = IS_CUDA_AVAILABLE and profile_memory``)."""
    if _host_cuda_probe(ctx, node):
        return True
    if (
        isinstance(node, ast.Compare)
        and len(node.comparators) == 1
        and isinstance(node.ops[0], (ast.Eq, ast.In))
    ):
        left, right = (
            node.left,
            node.comparators[0],
        )  # the host's device type; a value's device may be a setting
        side = left if cuda_string(right) else right if cuda_string(left) else None
        return isinstance(side, ast.Call) and last_name(side.func) == "get_device_type"
    if flags and isinstance(node, ast.Name) and ctx.function is not None:
        values = [
            s.value
            for s in nodes_of(ctx.function, ast.Assign, ast.AnnAssign, ast.AugAssign)
            if any(
                isinstance(x, ast.Name) and x.id == node.id
                for x in getattr(s, "targets", [getattr(s, "target", None)])
            )
        ]
        return (
            len(values) == 1 and values[0] is not None and _gate_of(ctx, values[0], flags=False) is not None
        )
    return False


def _gate_of(ctx: Context, test: ast.AST, flags: bool = True) -> ast.AST | None:
    if _cuda_probe(ctx, test, flags):
        return test
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
        return None
    probe = next((v for v in test.values if _cuda_probe(ctx, v, flags)), None)
    if probe is None or any(npu_test(sub) for sub in ast.walk(test)):
        return None
    return probe


def cuda_only_host_gate(ctx: Context, test: ast.AST) -> ast.AST | None:
    """The CUDA probe an ``if`` test requires (the whole test, or an operand of its top-level ``and``); None when
    the test admits another accelerator anywhere (``IS_CUDA_AVAILABLE or IS_NPU_AVAILABLE``)."""
    if any(npu_test(sub) for sub in ast.walk(test)):
        return None
    return _gate_of(ctx, test)


def _neutral_helper_call(ctx: Context, node: ast.AST) -> bool:
    """A call of the tree's device-neutral helpers (``get_torch_device()``, ``get_device_type()``...)."""
    if not isinstance(node, ast.Call):
        return False
    name = last_name(node.func)
    if name not in DEVICE_HELPERS:
        return False
    parts = (ctx.qualname(node.func) or "").split(".")
    if len(parts) >= 2:
        return parts[-2] == "device" and parts[-1] == name
    return name in _BARE_HELPERS


# NVIDIA-only tooling and libraries a CUDA-gated body may use without naming CUDA (NVTX ranges, NVML queries,
# Transformer Engine, apex), and the ROCm marker a test excludes AMD hosts with (``torch.version.hip is None``)
_NVIDIA_WORDS = ("nvtx", "nvml", "nvidia", "transformer_engine", "apex")
_NVIDIA_EXACT = frozenset({"hip", "rocm"})


def _cuda_specific(ctx: Context, nodes: list[ast.AST]) -> bool:
    """Code that names CUDA itself: ``torch.cuda.*`` / ``torch.backends.cuda``, a ``"cuda"``/``"nccl"`` string, a
    CUDA or GPU flag or a CUDA-only implementation name (``triton``, ``flash_attn``...): it is CUDA code on
    purpose. Docstrings and bare string statements are prose, not code, and are not read."""
    stack: list[ast.AST] = list(nodes)
    while stack:
        sub = stack.pop()
        if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant):
            continue
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            low = sub.value.lower()
            if "cuda" in low or "nccl" in low or any(w in low for w in CUDA_ONLY_IMPLS):
                return True
        elif isinstance(sub, (ast.Name, ast.Attribute)):
            word = (sub.id if isinstance(sub, ast.Name) else sub.attr).lower()
            if "cuda" in word or "gpu" in word or "nccl" in word or any(w in word for w in CUDA_ONLY_IMPLS):
                return True
            if word in _NVIDIA_EXACT or any(w in word for w in _NVIDIA_WORDS):
                return True
        elif isinstance(sub, ast.alias):
            if any(w in sub.name.lower() for w in (*_NVIDIA_WORDS, *CUDA_ONLY_IMPLS)):
                return True
        stack.extend(ast.iter_child_nodes(sub))
    return False


def _top_definitions(ctx: Context) -> dict[str, ast.AST]:
    found = ctx.memo.get("npu105-top-defs")
    if found is None:
        found = {}
        for stmt in ctx.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[stmt.name] = stmt
        ctx.memo["npu105-top-defs"] = found
    return found  # type: ignore[return-value]


def _neutral_code(ctx: Context, body: list[ast.stmt]) -> str | None:
    """What makes ``body`` device-neutral code: a call of a device-neutral helper in it, or in a top-level
    function or class of the file it calls (one level); None when it has none or names CUDA itself."""
    if _cuda_specific(ctx, body):
        return None
    defs = _top_definitions(ctx)
    for stmt in body:
        for sub in ast.walk(stmt):
            if _neutral_helper_call(ctx, sub):
                return f"`{ctx.source.segment(sub)}`"
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in defs:
                target = defs[sub.func.id]
                if _cuda_specific(ctx, [target]):
                    continue
                for inner in ast.walk(target):
                    if _neutral_helper_call(ctx, inner):
                        return f"`{sub.func.id}`, which calls `{ctx.source.segment(inner)}`"
    return None


def _names_cuda_only_impl_in(test: ast.AST) -> bool:
    return _cuda_specific_words(test)


def _cuda_specific_words(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        word = sub.value if isinstance(sub, ast.Constant) and isinstance(sub.value, str) else last_name(sub)
        if word and any(w in word.lower() for w in CUDA_ONLY_IMPLS):
            return True
    return False


def _called_names(nodes: list[ast.stmt]) -> set[str]:
    return {
        name
        for n in nodes
        for sub in ast.walk(n)
        if isinstance(sub, ast.Call) and (name := last_name(sub.func))
    }


def _npu_path_beside(ctx: Context, node: ast.If) -> bool:
    """The NPU gets its own path for the same work: the ``else``/``elif`` tests for an NPU host, or an ``if``
    on an NPU host in the same block calls something the CUDA-gated body calls."""
    if any(npu_test(sub) for s in node.orelse for sub in ast.walk(s)):
        return True
    parent = ctx.parents[-1] if ctx.parents else None
    block = None
    for field in ("body", "orelse", "finalbody"):
        candidate = getattr(parent, field, None)
        if isinstance(candidate, list) and node in candidate:
            block = candidate
            break
    if block is None:
        return False
    called: set[str] | None = None
    for stmt in block:
        if stmt is node or not isinstance(stmt, ast.If) or npu_guard_in(stmt.test, whole=True) is None:
            continue
        if called is None:
            called = _called_names(node.body)
        if called & _called_names(stmt.body):
            return True
    return False


def _names_npu(nodes: list[ast.stmt]) -> bool:
    """A block that names the NPU (``torch_npu``, ``torch.npu``, an ``npu_*`` function): the NPU's own path."""
    for stmt in nodes:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.alias):
                word = sub.name
            elif isinstance(sub, (ast.Name, ast.Attribute)):
                word = sub.id if isinstance(sub, ast.Name) else sub.attr
            else:
                continue
            if backends.name_backend(word) == backends.NPU:
                return True
    return False


def _off_npu_by_construction(ctx: Context, node: ast.If) -> bool:
    """The gate never runs on an NPU host, or its scope is CUDA code by name: it is in the ``else`` of ``if
    IS_NPU_AVAILABLE:``, after ``if IS_NPU_AVAILABLE: ... return`` in its block, or in a class or function
    named for CUDA (``CudaGraphRunner``)."""
    chain = [*ctx.parents, node]
    for i in range(len(chain) - 2, -1, -1):
        parent, child = chain[i], chain[i + 1]
        if isinstance(parent, ast.If) and child in parent.orelse and npu_test(parent.test):
            return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and child in block:
                for stmt in block[: block.index(child)]:
                    if (
                        isinstance(stmt, ast.If)
                        and npu_test(stmt.test)
                        and stmt.body
                        and isinstance(stmt.body[-1], (ast.Return, ast.Raise))
                    ):
                        return True
        if isinstance(parent, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if backends.name_backend(parent.name) == backends.CUDA:
                return True
    return False


def _negative_cuda_test(ctx: Context, test: ast.AST) -> bool:
    """A test that holds for every non-CUDA device: ``x.device.type != "cuda"``, ``not x.is_cuda``, ``not
    IS_CUDA_AVAILABLE`` (or an ``or`` with one of them)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_negative_cuda_test(ctx, v) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        return isinstance(test.ops[0], (ast.NotEq, ast.NotIn)) and _cuda_compare(test)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = test.operand
        if isinstance(inner, ast.Attribute) and inner.attr == "is_cuda":
            return True
        if isinstance(inner, ast.Compare) and len(inner.comparators) == 1:
            return isinstance(inner.ops[0], (ast.Eq, ast.In)) and _cuda_compare(inner)
        return _host_cuda_probe(ctx, inner)
    return False


def _returns_none(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Return) and (
        stmt.value is None or (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
    )


def _text_value(node: ast.AST | None) -> bool:
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _text_value(node.left) or _text_value(node.right)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


_ADVICE = ("warn", "hint", "advice", "suggest", "message")  # functions returning a text to log or show
_CAPABILITY_WORDS = ("capability", "get_device_properties")


def _non_cuda_passes_probe(ctx: Context, node: ast.If) -> bool:
    """``if <not CUDA>: return None`` at the top of a reason probe (a function that returns why a kernel is
    unavailable, ``None`` when it is usable) that vets CUDA devices by their compute capability afterwards: every
    other accelerator gets no reason, so the CUDA-only kernel is called on it."""
    func = ctx.function
    if (
        not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef))
        or any(w in func.name.lower() for w in _ADVICE)  # a text to log (None: nothing to say)
        or node not in func.body
        or node.orelse
        or len(node.body) != 1
        or not _returns_none(node.body[0])
        or not _returns_none(func.body[-1])
        or not _negative_cuda_test(ctx, node.test)
    ):
        return False
    before = func.body[: func.body.index(node)]
    if any(
        isinstance(s, ast.If)
        and npu_test(s.test)
        and s.body
        and not _returns_none(s.body[-1])
        and isinstance(s.body[-1], (ast.Return, ast.Raise))
        for s in before
    ):
        return False  # the NPU host got its own answer first (`if IS_NPU_AVAILABLE: return "CUDA-only"`)
    after = func.body[func.body.index(node) + 1 :]
    reasons = capability = False
    for stmt in after:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Return) and _text_value(sub.value):
                reasons = True
            elif isinstance(sub, ast.Call):
                name = (last_name(sub.func) or "").lower()
                capability = capability or any(w in name for w in _CAPABILITY_WORDS)
    return reasons and capability


def _original_scope(ctx: Context) -> bool:
    kind = ctx.source.kind
    return kind.model_code or npu_module(ctx.source.path) or device_neutral_scope(ctx)


class CudaGate(Rule):
    code = "NPU105"
    name = "cuda-gate"
    summary = (
        'A CUDA test (`.is_cuda`, `device.type == "cuda"`, `device.type in ("cuda", ...)`, '
        "`torch.cuda.is_available()`) guards a dispatch handle or an NPU code path; a CUDA-only host gate "
        "(`IS_CUDA_AVAILABLE`) wraps device-neutral code; a kernel probe gives every non-CUDA device no reason."
    )
    why = (
        '`x.is_cuda` and `x.device.type == "cuda"` are False for Ascend tensors. Added to a generic dispatch '
        "guard (`if slot.use_non_eager_impl and x.is_cuda:`), to the branch that calls a registry handle (a "
        "module-global one, or one the instance owns: `self.veomni_x = VeomniOp(...)` or a callable bound to it), or "
        "to any condition in an NPU module or spec, they switch the NPU kernel off: the eager fallback runs "
        "silently, every step, on the hardware the kernel was bound for. The registry already picks the "
        "kernel per device, so the guard needs no device test. A CUDA test that sits next to a CUDA-only "
        'implementation name (`impl == "triton"`, `"tilelang"`, `use_flash_attn`...) or inside a branch '
        "or function that selects one guards a CUDA kernel on purpose and is not reported (NPU102 reports "
        "other device-type branches). In every region of the tree (data, trainer, utils, checkpoint, optim...): "
        "`if IS_CUDA_AVAILABLE [and ...]:` around code written for any accelerator (it calls "
        "`get_torch_device()`, `get_device_type()`..., itself or through a function or class of the file) drops "
        "that feature on Ascend, silently (a memory profiler that never records, a cache never emptied); and a "
        "probe that returns why a CUDA-only kernel is unavailable (`None`: usable) but returns `None` for every "
        "non-CUDA device before vetting CUDA devices by compute capability sends Ascend tensors to the CUDA "
        "kernel instead of the fallback. A gate whose body names CUDA itself (or NVIDIA-only tooling: NVTX, NVML, "
        "Transformer Engine), whose test also requires a CUDA-only trait (`get_gpu_compute_capability() >= 90`, "
        "`torch.version.hip is None`), that has an NPU branch beside it (or an `else` that names the NPU or says "
        "the feature is CUDA-only), that never runs on an NPU host (after `if IS_NPU_AVAILABLE: ... return`, in "
        "the `else` of an NPU test, in a class or function named for CUDA), or a negated early exit (`if not "
        "IS_CUDA_AVAILABLE: return`) is not reported: whether that feature exists on Ascend is the author's call; "
        "nor is a probe that returns a text to log (a function named for a warning, hint or message)."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    if veomni_rms_norm.use_non_eager_impl and hidden_states.is_cuda:
                        return veomni_rms_norm(hidden_states, self.weight, self.eps)
                    variance = hidden_states.pow(2).mean(-1, keepdim=True)
                    return self.weight * hidden_states * torch.rsqrt(variance + self.eps)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    if veomni_rms_norm.use_non_eager_impl:
                        return veomni_rms_norm(hidden_states, self.weight, self.eps)
                    variance = hidden_states.pow(2).mean(-1, keepdim=True)
                    return self.weight * hidden_states * torch.rsqrt(variance + self.eps)
            """,
            title="a CUDA test added to a generic non-eager guard (unsafe fix: drop it)",
        ),
        Example(
            """
            import torch


            def apply_rope(q, cos, sin, rope_kernel):
                if q.device.type == "cuda":
                    return rope_kernel(q, cos, sin)
                return q * cos
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="any device-type gate in an NPU module",
        ),
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rope = OpSlot("rotary_pos_emb", "full")


            def apply_rope(q, k, cos, sin):
                if veomni_rope.use_non_eager_impl and q.device.type in ("cuda", "xpu"):
                    return veomni_rope(q, k, cos, sin)
                return q * cos, k * cos
            """,
            fixed="""
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rope = OpSlot("rotary_pos_emb", "full")


            def apply_rope(q, k, cos, sin):
                if veomni_rope.use_non_eager_impl:
                    return veomni_rope(q, k, cos, sin)
                return q * cos, k * cos
            """,
            title="a device-type membership test in a dispatch guard",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyGatedMLP(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.veomni_gated_mlp = VeomniOp("swiglu_mlp", "standard", config.ops_config.swiglu_mlp_implementation)

                def forward(self, x):
                    if x.is_cuda:
                        return self.veomni_gated_mlp(x, self.gate_w, None, self.up_w, None, self.down_w, None)
                    return self.down(self.act(self.gate(x)) * self.up(x))
            """,
            title="a CUDA test around the call of a handle the instance owns",
        ),
        Example(
            """
            from . import reference


            def fused_swiglu(gate, up):
                if not gate.is_cuda or gate.numel() == 0:
                    return reference.swiglu(gate, up)
                import torch_npu

                return torch_npu.npu_swiglu(torch.cat([gate, up], dim=-1))
            """,
            path="veomni/ops/kernels/swiglu/npu_fused.py",
            title="an NPU kernel adapter (an ops module named for the NPU) that falls back unless the input is CUDA",
        ),
        Example(
            """
            import torch


            class ToyRotary(torch.nn.Module):
                def forward(self, x, cos, sin):
                    if x.device.type != "cuda":
                        return x * cos + self.rotate(x) * sin
                    import torch_npu

                    return torch_npu.npu_rotary_mul(x, cos, sin)
            """,
            title="a CUDA test in a function that calls a torch_npu kernel",
        ),
        Example(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def host_seqlens(cu_seqlens):
                if IS_NPU_AVAILABLE and cu_seqlens.device.type == "cuda":
                    cu_seqlens = cu_seqlens.cpu()
                return cu_seqlens
            """,
            fixed="""
            from veomni.utils.device import IS_NPU_AVAILABLE


            def host_seqlens(cu_seqlens):
                if IS_NPU_AVAILABLE:
                    cu_seqlens = cu_seqlens.cpu()
                return cu_seqlens
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="a CUDA test conjoined with an NPU guard: the NPU branch can never run",
        ),
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def rms_norm(x, weight, eps):
                if veomni_rms_norm.use_non_eager_impl and torch.cuda.is_available():
                    return veomni_rms_norm(x, weight, eps)
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
            """,
            fixed="""
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def rms_norm(x, weight, eps):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(x, weight, eps)
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
            """,
            title="a CUDA-presence probe (`torch.cuda.is_available()`) in a dispatch guard",
        ),
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


            class ProfilerWithMem:
                def __init__(self, inner):
                    self._p = inner

                def start(self):
                    get_torch_device().memory._record_memory_history()
                    return self._p.start()


            def create_profiler(base_profiler, profile_memory):
                if IS_CUDA_AVAILABLE and profile_memory:
                    return ProfilerWithMem(base_profiler)
                return base_profiler
            """,
            fixed="""
            from veomni.utils.device import get_torch_device


            class ProfilerWithMem:
                def __init__(self, inner):
                    self._p = inner

                def start(self):
                    get_torch_device().memory._record_memory_history()
                    return self._p.start()


            def create_profiler(base_profiler, profile_memory):
                if profile_memory:
                    return ProfilerWithMem(base_profiler)
                return base_profiler
            """,
            path="veomni/utils/toy_helper.py",
            title="a CUDA-only host gate around device-neutral code (any region; unsafe fix: drop it)",
        ),
        Example(
            """
            import torch


            def fused_unavailable_reason(grad):
                if grad.device.type != "cuda":
                    return None
                major, minor = torch.cuda.get_device_capability(grad.device)
                if major < 9:
                    return f"compute capability {major}.{minor} is unsupported"
                return None
            """,
            path="veomni/optim/toy_ns.py",
            title="a kernel probe that gives every non-CUDA device no reason",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


            def start_memory_history(profile_memory):
                if (IS_CUDA_AVAILABLE or IS_NPU_AVAILABLE) and profile_memory:
                    get_torch_device().memory._record_memory_history()
            """,
            path="veomni/utils/toy_helper.py",
        ),
        Example(
            """
            import torch


            def fused_unavailable_reason(grad):
                if grad.device.type != "cuda":
                    return f"{grad.device.type} tensors are unsupported"
                major, minor = torch.cuda.get_device_capability(grad.device)
                if major < 9:
                    return f"compute capability {major}.{minor} is unsupported"
                return None
            """,
            path="veomni/optim/toy_ns.py",
        ),
        Example(
            """
            import torch


            def select(hidden_states: torch.Tensor, impl: str, slot):
                use_tilelang = impl == "tilelang" and hidden_states.is_cuda
                if slot.use_non_eager_impl and impl == "triton" and hidden_states.is_cuda:
                    return slot(hidden_states)
                return use_tilelang
            """
        ),
    )
    fix_safety = (
        "Unsafe, offered when the CUDA test is an operand of an `and`: the test is removed. It is unsafe because "
        "the guarded kernel might really be CUDA-only under a generic name; check that the bound kernel has an "
        "NPU row. No fix otherwise."
    )
    requires = (
        ("cuda", "CUDA"),
    )  # `.is_cuda`, a "cuda" comparison, `torch.cuda.is_available()`, `IS_CUDA_AVAILABLE`
    node_types = (ast.Attribute, ast.Compare, ast.Call, ast.If)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Any code but tests: a CUDA-only host gate around device-neutral code is a defect in every region
        (data, trainer, utils, checkpoint...). The other gates are read in model code and the NPU adapters
        among kernel code (``veomni/ops/.../npu*.py``)."""
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._reported: set[int] = set()
        self._scoped: bool | None = None

    def _gate_on_neutral_code(self, node: ast.If) -> None:
        """``if IS_CUDA_AVAILABLE [and ...]:`` around device-neutral code, with no NPU path beside it."""
        ctx = self.ctx
        probe = cuda_only_host_gate(ctx, node.test)
        if probe is None or _names_cuda_only_impl_in(node.test):
            return
        others = [v for v in node.test.values if v is not probe] if isinstance(node.test, ast.BoolOp) else []
        if _cuda_specific(ctx, others):
            return  # `IS_CUDA_AVAILABLE and get_gpu_compute_capability() >= 90`: a CUDA feature by construction
        what = _neutral_code(ctx, node.body)
        if what is None:
            return
        if node.orelse and _neutral_code(ctx, node.orelse) is not None:
            return  # the other accelerators get their own device-neutral path
        if node.orelse and (_names_npu(node.orelse) or _cuda_specific(ctx, node.orelse)):
            return  # the else is the NPU's own path, or says the feature is CUDA-only: the author's call
        if _off_npu_by_construction(ctx, node):
            return
        func = ctx.function
        if func is not None and any(w in func.name.lower() for w in CUDA_ONLY_IMPLS):
            return
        if _npu_path_beside(ctx, node):
            return
        self._reported.add(id(probe))
        test = ctx.source.segment(probe)
        fix = None
        edit = bool_operand_removal(ctx, probe, node.test) if probe is not node.test else None
        if edit is not None:
            fix = make_fix(
                f"Remove `{test}` from the condition",
                [edit],
                Applicability.UNSAFE,
                "the guarded feature may really be missing on Ascend: check that the device API it uses exists there",
            )
        self.report(
            probe,
            f"`{test}` is False on an Ascend host, but the code it gates is device-neutral ({what}): the "
            "feature is silently dropped on the NPU; test for any accelerator (`IS_CUDA_AVAILABLE or "
            "IS_NPU_AVAILABLE`) or drop the CUDA test",
            fix,
        )

    def _report_passing_probe(self, node: ast.If) -> None:
        for sub in ast.walk(node.test):
            self._reported.add(id(sub))
        test = self.ctx.source.segment(node.test)
        self.report(
            node.test,
            f"`{test}` returns no reason (None) for every non-CUDA device, while CUDA devices are vetted by compute "
            "capability: on an Ascend NPU the probe says the CUDA-only kernel is usable and the caller runs it "
            "instead of falling back; return a reason for devices that are not CUDA",
        )

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, ast.If):
            if _non_cuda_passes_probe(ctx, node):
                self._report_passing_probe(node)
            else:
                self._gate_on_neutral_code(node)
            return
        if self._scoped is None:
            self._scoped = _original_scope(ctx)
        if not self._scoped or id(node) in self._reported:
            return
        if isinstance(node, ast.Attribute):
            if node.attr != "is_cuda" or not isinstance(node.ctx, ast.Load):
                return
        elif isinstance(node, ast.Call):
            if not cuda_presence_probe(ctx, node):
                return
        else:
            assert isinstance(node, ast.Compare)
            if len(node.comparators) != 1 or not _cuda_compare(node):
                return
        if in_fstring(ctx):
            return
        what = cuda_gate_on_npu_path(ctx, node)
        if what is None:
            return
        test = ctx.source.segment(node)
        fix = None
        edit = bool_operand_removal(ctx, node)
        if edit is not None:
            fix = make_fix(
                f"Remove `{test}` from the condition",
                [edit],
                Applicability.UNSAFE,
                "the guarded kernel may be CUDA-only under a generic name: check that it has an NPU row",
            )
        self.report(
            node,
            f"`{test}` is False on an Ascend NPU, so the condition around {what} switches the NPU path off; "
            "drop the CUDA test (the registry picks the kernel per device) or test a CUDA-only implementation "
            "name",
            fix,
        )
