"""NPU102 hardcoded-cuda-device."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, last_name, str_value
from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import (
    ACCELERATOR_NOTE,
    ACCELERATOR_TYPE,
    CPU_HOST_REASON,
    CPU_NAMESPACE,
    CUDA_INDEXED,
    DEVICE_FIRST_ARG,
    EXACT_HELPERS,
    LEGACY_TENSOR_TYPES,
    MIRRORED,
    accelerator_available,
    built_cuda_device,
    child_of,
    cuda_gate_on_npu_path,
    cuda_string,
    device_neutral_scope,
    helper_edits,
    in_annotation,
    in_cuda_dispatch,
    in_fstring,
    is_device_name,
    is_nccl,
    is_requirement_stmt,
    mentions_cuda_dispatch,
    names_kernel,
    native_api,
    npu_guard_in,
    npu_module,
    outside_veomni,
)
from npu_lint.veomni.backends import imports_device_helpers


def _names_cuda(node: ast.AST) -> bool:
    """Whether a guarded statement or expression names CUDA itself (a ``"cuda[:N]"`` string, ``.cuda(...)``)."""
    for sub in ast.walk(node):
        if cuda_string(sub) is not None:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "cuda" and not isinstance(sub.value, ast.Name):
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "cuda" and isinstance(sub.value, ast.Name):
            if sub.value.id != "torch":
                return True
    return False


def _allows_none(ann: ast.expr) -> bool:
    """An annotation that already admits None (``Optional[...]``, ``X | None``, ``None``, a string)."""
    for sub in ast.walk(ann):
        if isinstance(sub, ast.Constant) and (
            sub.value is None or isinstance(sub.value, str) and "None" in sub.value
        ):
            return True
        if isinstance(sub, (ast.Name, ast.Attribute)) and (
            (sub.id if isinstance(sub, ast.Name) else sub.attr) in ("Optional", "Any")
        ):
            return True
    return False


_PRESENCE_PROBES = frozenset({"is_available", "device_count", "default_generators", "is_initialized"})


def _is_presence_probe(ctx: Context, test: ast.AST) -> bool:
    """A CUDA-presence test: ``torch.cuda.is_available()``, ``len(torch.cuda.default_generators) > 0``,
    ``torch.cuda.device_count() > 0``, ``torch.cuda.is_initialized()``."""
    for sub in ast.walk(test):
        if (
            isinstance(sub, ast.Attribute)
            and sub.attr in _PRESENCE_PROBES
            and ctx.qualname(sub.value) == "torch.cuda"
        ):
            return True
    return False


def _names_host(block: list[ast.stmt]) -> bool:
    """A block that names a device itself (``"cpu"``, ``.cpu()``, ``"cuda"``, ``.cuda()``)."""
    for stmt in block:
        for sub in ast.walk(stmt):
            if (
                isinstance(sub, ast.Constant)
                and isinstance(sub.value, str)
                and sub.value.split(":")[0]
                in (
                    "cpu",
                    "cuda",
                )
            ):
                return True
            if (
                isinstance(sub, ast.Attribute)
                and sub.attr in ("cpu", "cuda")
                and isinstance(sub.ctx, ast.Load)
            ):
                if not (isinstance(sub.value, ast.Name) and sub.value.id == "torch"):
                    return True
    return False


def selects_npu_module(stmt: ast.If) -> bool:
    """One branch of the ``if`` imports an NPU module (``from .generated.patched_modeling_x_npu import ...``):
    the test chooses the NPU implementation, which only an NPU test (``IS_NPU_AVAILABLE``, as every sibling
    registration does) decides; a CUDA-presence probe also sends CPU-only hosts, and hosts where CUDA failed to
    initialise, to the NPU module."""
    for block in (stmt.body, stmt.orelse):
        for s in block:
            if isinstance(s, ast.ImportFrom) and s.module and npu_module(s.module.replace(".", "/")):
                return True
            if isinstance(s, ast.Import) and any(npu_module(a.name.replace(".", "/")) for a in s.names):
                return True
    return False


def _presence_guarded(ctx: Context, node: ast.AST) -> bool:
    """``node`` is in the test or the body of ``if <CUDA present>: ... else: <device-neutral code>``: on a host
    without CUDA (an NPU host) the else branch runs, and it names no device (``torch.seed()`` seeds every
    device), so neither the probe nor the CUDA calls it guards change what an NPU host does. Without such an
    else the block is skipped on NPU: the probe is reported (with the calls its fix would expose)."""
    for parent, child in child_of(ctx, node):
        if isinstance(parent, ast.If) and child is not parent.orelse and child not in parent.orelse:
            if (
                _is_presence_probe(ctx, parent.test)
                and parent.orelse
                and not _names_host(parent.orelse)
                and not selects_npu_module(parent)
            ):
                return True
        elif isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return False
    return False


def _cuda_dispatch_sites(cls: ast.ClassDef, ctx: Context) -> dict[str, bool]:
    """Method name -> every ``self.<name>(...)`` call in the class sits in a branch that selects CUDA
    (``if "cuda" in x.device.type: return self.cuda_kernels_forward(...)``)."""
    key = ("npu102-cuda-methods", id(cls))
    cached = ctx.memo.get(key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    result: dict[str, bool] = {}

    def walk(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If):
            walk(node.test, guarded)
            inner = guarded or mentions_cuda_dispatch(ctx, node.test)
            for stmt in node.body:
                walk(stmt, inner)
            for stmt in node.orelse:
                walk(stmt, guarded)
            return
        self_call = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        )
        if self_call:
            name = node.func.attr  # type: ignore[union-attr]
            result[name] = result.get(name, True) and guarded
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            result[node.attr] = False  # referenced (not called): may be passed on, reached from anywhere
        for sub in ast.iter_child_nodes(node):
            if self_call and sub is node.func:  # type: ignore[union-attr]
                continue  # the method reference itself (``self`` needs no walk)
            walk(sub, guarded)

    walk(cls, False)
    ctx.memo[key] = result
    return result


def _in_cuda_only_method(ctx: Context) -> bool:
    """Inside a method that the class only calls from branches selecting CUDA (a guarded CUDA kernel path)."""
    func = ctx.function
    if func is None:
        return False
    chain = ctx.parents
    try:
        index = next(i for i in range(len(chain) - 1, -1, -1) if chain[i] is func)
    except StopIteration:
        return False
    cls = chain[index - 1] if index > 0 else None
    if not isinstance(cls, ast.ClassDef):
        return False
    return _cuda_dispatch_sites(cls, ctx).get(func.name, False)


def cuda_only_here(ctx: Context, node: ast.AST) -> bool:
    """CUDA code that an NPU host never reaches or does not need: an explicit CUDA dispatch, a CUDA-presence
    test with a device-neutral else, or a method only called under a CUDA device-type test."""
    return in_cuda_dispatch(ctx, node) or _presence_guarded(ctx, node) or _in_cuda_only_method(ctx)


_PROBES = frozenset({"hasattr", "isinstance", "getattr"})  # probing torch.cuda for a capability, not using it
_ACCELERATOR_RENAMED = {"current_device": "current_device_index", "set_device": "set_device_index"}
_ACCELERATOR_API = frozenset(
    {
        "device_count",
        "synchronize",
        "current_stream",
        "set_stream",
        "empty_cache",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_stats",
        "reset_peak_memory_stats",
        "get_device_capability",
    }
)


def _outside_message(attr: str) -> str:
    """The message for ``torch.cuda.<attr>`` in a file outside any VeOmni tree: torch's own device-neutral API."""
    if attr in _ACCELERATOR_RENAMED or attr in _ACCELERATOR_API:
        name = _ACCELERATOR_RENAMED.get(attr, attr)
        return f"`torch.cuda.{attr}` is CUDA-only; use `torch.accelerator.{name}` (torch >= 2.6)"
    if attr in MIRRORED:
        return (
            f"`torch.cuda.{attr}` is CUDA-only; use `torch.get_device_module().{attr}` (the current "
            "accelerator's module)"
        )
    return (
        f"`torch.cuda.{attr}` is a CUDA-only API with no NPU equivalent; put it behind a CUDA test "
        f'(`{ACCELERATOR_TYPE} == "cuda"`)'
    )


# calls whose positional "cuda" string is not a device: string and mapping methods, object lookups, messages,
# kernel and backend registrations keyed by a device type (CUDA-only on purpose), membership helpers
_NOT_DEVICE_CALLS = frozenset(
    {
        "startswith",
        "endswith",
        "replace",
        "split",
        "rsplit",
        "count",
        "find",
        "rfind",
        "index",
        "rindex",
        "strip",
        "lstrip",
        "rstrip",
        "removeprefix",
        "removesuffix",
        "format",
        "join",
        "partition",
        "get",
        "pop",
        "setdefault",
        "__getitem__",
        "__contains__",
        "remove",
        "append",
        "add",
        "discard",
        "getattr",
        "hasattr",
        "setattr",
        "delattr",
        "isinstance",
        "issubclass",
        "print",
        "str",
        "repr",
        "info",
        "debug",
        "warning",
        "warn",
        "warning_once",
        "info_once",
        "error",
        "exception",
        "critical",
        "log",
        "info_rank0",
        "warning_rank0",
        "register_kernel",
        "register_fake",
        "register_autograd",
        "impl",
        "register_backend",
        "register",
        "Library",
        "is_available",
        "skipIf",
        "skipUnless",
        "mark",
        "parametrize",
        "environ",
        "getenv",
        "import_module",
        "find_spec",
        "is_package_available",
        "version",
        "RuntimeError",
        "ValueError",
        "TypeError",
        "NotImplementedError",
        "AssertionError",
        "Exception",
    }
)


_BUILT = (ast.JoinedStr, ast.BinOp, ast.Call)  # what ``built_cuda_device`` can accept


def _may_name_cuda(call: ast.Call) -> bool:
    """Whether an argument of ``call`` can be what ``_visit_call`` reports: a ``"cuda"``/``"cuda:N"`` or
    ``"nccl"`` constant (any string starting so: a superset), or a device name built on CUDA's."""
    for value in [*call.args, *[kw.value for kw in call.keywords]]:
        typ = type(value)
        if typ is ast.Constant:
            text = value.value  # type: ignore[attr-defined]
            if isinstance(text, str) and text.startswith(("cuda", "nccl")):
                return True
        elif typ in _BUILT and built_cuda_device(value):
            return True
    return False


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
        "x.is_cuda`) are legitimate and not reported. A configured device (`init_device`, `device_type`, "
        '`kwargs.get("init_device")`) compared with `"cuda"` alone (`!=`, or `not in` a list without `"npu"`), '
        'or a collective backend (`dist.get_backend(group)`) with `"nccl"` alone, is '
        "reported where the branch an Ascend host takes only rejects the run (raises): a requirement on the "
        "backend is written with VeOmni's device API (`IS_CUDA_AVAILABLE`, `get_device_type()`, "
        "`get_dist_comm_backend()`) or lists "
        '`"npu"` where NPU is supported.'
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
            from veomni.utils.device import get_device_id, get_device_type, synchronize


            def load(model, path, init_device=None):
                if init_device is None:
                    init_device = get_device_type()
                model.to_empty(device=init_device)
                synchronize()
                return torch.device(get_device_type(), get_device_id())
            """,
            title="device defaults (taken in the body: never a call in a default) and runtime calls",
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
            from veomni.utils.device import get_device_type, synchronize


            def maybe_sync():
                if get_device_type() != "cpu":
                    synchronize()
            """,
            title="an availability guard (unsafe fix: the guarded code then also runs on NPU)",
        ),
        Example(
            """
            def build_parallel_model(model, fsdp_enabled, **kwargs):
                if not fsdp_enabled:
                    if kwargs.get("init_device") not in ("cuda", "cpu"):
                        raise ValueError("meta init needs FSDP")
                return model
            """,
            title="a configured device tested against CUDA alone, where NPU falls into the rejection",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.utils.device import get_device_id


            def make_inv_freq(config, device):
                return 1.0 / (config.base ** (torch.arange(0, config.dim, 2, device=device).float() / config.dim))


            class ToyRotary(nn.Module):
                def __init__(self, config, rank):
                    super().__init__()
                    self.register_buffer("inv_freq", make_inv_freq(config, "cuda"), persistent=False)
                    self.gate_norm = ToyGatedNorm(config.hidden_size, device=f"cuda:{get_device_id()}")
                    self.device = "cuda:" + str(rank)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.utils.device import get_device_id, get_device_type


            def make_inv_freq(config, device):
                return 1.0 / (config.base ** (torch.arange(0, config.dim, 2, device=device).float() / config.dim))


            class ToyRotary(nn.Module):
                def __init__(self, config, rank):
                    super().__init__()
                    self.register_buffer("inv_freq", make_inv_freq(config, get_device_type()), persistent=False)
                    self.gate_norm = ToyGatedNorm(config.hidden_size, device=f"{get_device_type()}:{get_device_id()}")
                    self.device = get_device_type() + ":" + str(rank)
            """,
            title="a device passed positionally to any function, and device names built on `cuda:` at run time",
        ),
        Example(
            """
            import torch
            from veomni.utils.device import get_device_type


            def stash_rng(saved: dict) -> None:
                accel = torch.cuda
                if getattr(accel, "_initialized", False):
                    saved["rng"] = accel.get_rng_state()


            def reseed(seed: int, backend=torch.cuda) -> None:
                backend.manual_seed(seed)
            """,
            fixed="""
            import torch
            from veomni.utils.device import get_device_type, get_torch_device


            def stash_rng(saved: dict) -> None:
                accel = get_torch_device()
                if getattr(accel, "_initialized", False):
                    saved["rng"] = accel.get_rng_state()


            def reseed(seed: int, backend=torch.cuda) -> None:
                backend.manual_seed(seed)
            """,
            title="`torch.cuda` itself as the device module (bound, or a default): its RNG state is never set up "
            "on NPU (unsafe fix; none for a default, which would call at import time)",
        ),
        Example(
            """
            import torch
            import torch_npu


            def combine(hidden_states, indices, probs):
                torch.cuda.current_stream().wait_stream(torch.cuda.default_stream())
                return torch_npu.npu_moe_token_unpermute(hidden_states, indices, probs=probs)
            """,
            fixed="""
            import torch_npu
            from veomni.utils.device import get_current_stream, get_torch_device


            def combine(hidden_states, indices, probs):
                get_current_stream().wait_stream(get_torch_device().default_stream())
                return torch_npu.npu_moe_token_unpermute(hidden_states, indices, probs=probs)
            """,
            path="veomni/ops/kernels/moe/npu_combine.py",
            title="kernel code that is not a CUDA kernel (an Ascend adapter under `veomni/ops`, `veomni.backends`)",
        ),
    )
    good = (
        Example(
            """
            import torch
            import triton


            def launch(x):
                with torch.cuda.device(x.device):
                    return x
            """,
            path="veomni/ops/kernels/moe/triton_launch.py",
            title="a CUDA kernel file (`veomni.backends`: Triton, TileLang, QuACK...): CUDA code by construction",
        ),
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE


            def quack_unavailable(grad):
                if not IS_CUDA_AVAILABLE or grad.device.type != "cuda":
                    return "needs CUDA"
                return None
            """,
            title="a CUDA test evaluated only on CUDA hosts (`not IS_CUDA_AVAILABLE or ...` short-circuits)",
        ),
        Example(
            """
            import torch

            try:
                import flash_attn_interface

                FA3_READY = True
            except ImportError:
                FA3_READY = False


            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                if FA3_READY:
                    assert q.is_cuda, "FlashAttention 3 runs on CUDA tensors"
                    return flash_attn_interface.flash_attn_func(q, k, v)[0]
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)
            """,
            title="a branch only a CUDA-only attention library's import enables",
        ),
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
        Example(
            """
            import sys

            import torch


            def init_seed(self):
                if len(torch.cuda.default_generators) > 0:
                    device_idx = torch.cuda.current_device()
                    self.seed = torch.cuda.default_generators[device_idx].seed()
                else:
                    self.seed = int(torch.seed() % sys.maxsize)  # seeds every device, NPU included
            """,
            title="a CUDA-presence test whose else branch is device-neutral",
        ),
        Example(
            """
            import torch


            class Mixer:
                def cuda_kernels_forward(self, hidden_states):
                    with torch.cuda.device(hidden_states.device):
                        return self.kernel(hidden_states)

                def forward(self, hidden_states):
                    if "cuda" in hidden_states.device.type:
                        return self.cuda_kernels_forward(hidden_states)
                    return self.slow_forward(hidden_states)
            """,
            title="a method only called under a CUDA device-type test (a guarded CUDA kernel path)",
        ),
        Example(
            """
            def pick_scan_kernel(device_type, fused_scan, generic_scan):
                # an explicit dispatch: NPU takes the generic path
                if device_type == "cuda":
                    return fused_scan
                return generic_scan
            """,
            title="a configured device selecting a CUDA path, with a generic path for the rest",
        ),
        Example(
            """
            import logging

            import torch

            logger = logging.getLogger(__name__)


            @torch.library.register_kernel("toy::scan", "cuda")
            def toy_scan_cuda(x):
                return x.cumsum(-1)


            def describe(device_name: str, backends: dict) -> str:
                if device_name.startswith("cuda"):
                    logger.info("cuda")
                return backends.get("cuda", device_name.replace("cuda", "gpu"))
            """,
            title='`"cuda"` as a kernel registration key, a string method\'s argument, a message, a mapping key',
        ),
        Example(
            """
            import torch
            from veomni.utils.device import get_device_type


            def device_module():
                return torch.cuda if get_device_type() == "cuda" else getattr(torch, get_device_type())


            def has_graphs() -> bool:
                return hasattr(torch.cuda, "CUDAGraph")


            def accelerator_module(name: str):
                try:
                    return getattr(torch, name)
                except AttributeError:
                    return torch.cuda
            """,
            title="`torch.cuda` chosen by a device-type dispatch, probed for a capability, or a resolver's last "
            "resort",
        ),
    )
    fix_safety = (
        'Safe where the replacement is exact on a GPU host: a `"cuda"` device becomes `get_device_type()` '
        '(`"cuda:N"` becomes `f"{get_device_type()}:N"`), `"nccl"` becomes `get_dist_comm_backend()`, '
        "`torch.cuda.synchronize()` / `current_device()` / `empty_cache()` / `set_device(d)` / "
        "`current_stream()` / `stream(s)` / `Stream(...)` / `Event(...)` become `synchronize()` / "
        "`get_device_id()` / `empty_cache()` / `set_device(d)` / `get_current_stream()` / "
        "`switch_to_specified_stream(s)` / `create_stream(...)` / `create_event(...)`, other runtime calls "
        "that torch_npu mirrors become `get_torch_device().<name>(...)` (unsafe unless `torch.cpu` has the "
        "function too: on a CPU-only host `get_torch_device()` is `torch.cpu`, and `manual_seed`, "
        "`empty_cache`... would raise AttributeError there), and `torch.cuda.amp.autocast(...)` "
        "becomes `torch.autocast(get_device_type(), ...)`. The import from `veomni.utils.device` is added (and "
        "`config.add_import(...)` in a patch spec). Unsafe: `torch.cuda.is_available()` becomes "
        '`get_device_type() != "cpu"`, which also runs the guarded code on NPU hosts (keep `IS_CUDA_AVAILABLE` '
        'when that code is CUDA-only); no fix when the guarded code itself names CUDA (`"cuda:0" if '
        "torch.cuda.is_available() else ...` would pick `cuda:0` on NPU). Any fix that would make a default value or "
        "module-level expression call a helper at import time is unsafe; a call is never put into a default "
        'argument (ruff B008): `def f(device="cuda")` becomes `def f(device=None)` with `if device is None: '
        "device = get_device_type()` at the top of the body (unsafe: the signature changes; an annotation gets "
        "`| None`). Outside any VeOmni tree a `'cuda'` string becomes torch's own "
        '`(torch.accelerator.current_accelerator() or torch.device("cpu")).type` (torch >= 2.6; a string for '
        'a string), never a veomni import (no fix there for `"cuda:N"`, `"nccl"` or `torch.cuda.*`). '
        "No fix for `.is_cuda` / "
        '`device.type == "cuda"` branches and '
        "CUDA-only APIs (`get_device_capability`, `nvtx`...): what the NPU path needs is a judgement."
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code, and kernel code that is not a CUDA kernel (``veomni.backends``: Ascend adapters, eager
        fallbacks, registries and helpers under ``veomni/ops`` run on NPU hosts too); and a kernel file that imports
        the tree's device module helpers (``get_torch_device``): its author launches through them, so a
        ``torch.cuda.*`` runtime call beside them breaks the file on triton-ascend (only those are checked there)."""
        return device_neutral_scope(ctx) or (not ctx.source.kind.test and imports_device_helpers(ctx.tree))

    requires = (
        ("cuda", "nccl"),
    )  # every finding is a "cuda"/"nccl" literal, a torch.cuda name or `.is_cuda`
    node_types = (
        ast.Call,
        ast.Attribute,
        ast.Compare,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.Lambda,
        ast.Assign,
        ast.AnnAssign,
        ast.Dict,
        ast.Return,
    )

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._seen: set[int] = set()
        # a CUDA kernel file written against the tree's device helpers: only its torch.cuda.* runtime calls
        self._helpers_only = not device_neutral_scope(ctx)

    # -- reporting helpers ----------------------------------------------------------------------------
    def _report_string(self, node: ast.expr, what: str) -> None:
        """Report a ``"cuda"`` / ``"nccl"`` literal in a device or backend position, with its fix."""
        if id(node) in self._seen or in_cuda_dispatch(self.ctx, node):
            return
        self._seen.add(id(node))
        ctx = self.ctx
        if is_nccl(node) and native_api(ctx, "get_dist_comm_backend"):
            self.report(
                node,
                f'`"nccl"` ({what}) is the CUDA collective backend (NPU uses HCCL); use '
                f"`torch.distributed.get_default_backend_for_device({ACCELERATOR_TYPE})`",
            )
            return
        if is_nccl(node):
            helper, text = "get_dist_comm_backend", "get_dist_comm_backend()"
            message = f'`"nccl"` ({what}) is the CUDA collective backend (NPU uses HCCL); use `get_dist_comm_backend()`'
        else:
            value = cuda_string(node)
            assert value is not None
            helper = "get_device_type"
            match = CUDA_INDEXED.fullmatch(value)
            if native_api(ctx, helper) and not match:
                # outside VeOmni: torch's accelerator type (a string for a string), no import
                text = ACCELERATOR_TYPE
                message = f'`"{value}"` ({what}) names the CUDA backend; use `{text}` ({ACCELERATOR_NOTE})'
                fix = None
                if accelerator_available(ctx):
                    fix = make_fix(f"Replace with `{text}` ({ACCELERATOR_NOTE})", [ctx.replace(node, text)])
                self.report(node, message, fix)
                return
            if native_api(ctx, helper):
                shown = f'f"{{{ACCELERATOR_TYPE}}}:{match.group(1)}"'
                self.report(
                    node, f'`"{value}"` ({what}) names the CUDA backend; use `{shown}` ({ACCELERATOR_NOTE})'
                )
                return
            text = f'f"{{get_device_type()}}:{match.group(1)}"' if match else "get_device_type()"
            message = f'`"{value}"` ({what}) names the CUDA backend; use `{text}` (veomni.utils.device)'
        edits = helper_edits(ctx, helper)
        fix = None
        if edits is not None:
            fix = make_fix(f"Replace with `{text}`", [*edits, ctx.replace(node, text)])
        self.report(node, message, fix)

    def _report_device(self, node: ast.expr, what: str) -> None:
        """Report a device value naming CUDA: a ``"cuda[:N]"`` constant or a name built on ``"cuda:"``."""
        if cuda_string(node) is not None:
            self._report_string(node, what)
        elif built_cuda_device(node):
            self._report_built(node, what)

    def _report_built(self, node: ast.expr, what: str) -> None:
        """``f"cuda:{rank}"`` (or ``"cuda:" + str(i)``...) in a device position: CUDA's name with a run-time
        index. The f-string and ``+`` forms get the current backend's name in place of ``cuda``."""
        if id(node) in self._seen or in_cuda_dispatch(self.ctx, node):
            return
        self._seen.add(id(node))
        ctx = self.ctx
        shown = ctx.source.segment(node)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        if outside_veomni(ctx):
            self.report(
                node,
                f"`{shown}` ({what}) builds a CUDA device name; build it on `{ACCELERATOR_TYPE}` ({ACCELERATOR_NOTE})",
            )
            return
        fix = None
        edits = helper_edits(ctx, "get_device_type")
        text = ctx.source.segment(node)
        if edits is not None and isinstance(node, ast.JoinedStr):
            # the prefix and quote of the f-string, then ``cuda``: the backend's name is formatted in instead
            head = 0
            while head < len(text) and text[head] in "fFrR":
                head += 1
            while head < len(text) and text[head] in "'\"":
                head += 1
            if text[head : head + 5] == "cuda:":
                start = ctx.source.node_range(node)[0] + head
                fix = make_fix(
                    "Format `get_device_type()` in place of `cuda`",
                    [*edits, Edit(start, start + 4, "{get_device_type()}")],
                )
        elif edits is not None and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = node.left
            while isinstance(left, ast.BinOp):
                left = left.left
            assert isinstance(left, ast.Constant)
            rest = left.value[len("cuda") :]
            quoted = f'"{rest}"' if '"' not in rest and "\\" not in rest else repr(rest)
            text = f"get_device_type() + {quoted}" if rest else "get_device_type()"
            fix = make_fix("Build the name on `get_device_type()`", [*edits, ctx.replace(left, text)])
        self.report(
            node,
            f"`{shown}` ({what}) builds a CUDA device name, which does not exist on an Ascend host; build it on "
            "`get_device_type()` (veomni.utils.device), or pass `get_device_id()` / a tensor's `.device`",
            fix,
        )

    def visit(self, node: ast.AST) -> None:
        typ = type(node)
        if self._helpers_only:
            if typ is ast.Attribute and node.attr != "is_cuda":  # type: ignore[attr-defined]
                self._visit_attribute(node)  # type: ignore[arg-type]
            return
        if typ is ast.Call:
            self._visit_call(node)  # type: ignore[arg-type]
        elif typ is ast.Attribute:
            self._visit_attribute(node)  # type: ignore[arg-type]
        elif isinstance(node, ast.Compare):
            self._visit_compare(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            self._visit_defaults(node.args, node)
        elif typ is ast.Dict:
            for key, value in zip(node.keys, node.values, strict=False):  # type: ignore[attr-defined]
                name = str_value(key) if key is not None else None
                if (
                    name is not None
                    and is_device_name(name)
                    and (cuda_string(value) or built_cuda_device(value))
                ):
                    self._report_device(value, f'`"{name}"` entry')
        elif typ is ast.Return:
            value = node.value  # type: ignore[attr-defined]
            func = self.ctx.function
            if (
                value is not None
                and func is not None
                and not isinstance(func, ast.Lambda)
                and is_device_name(func.name)
                and (cuda_string(value) or built_cuda_device(value))
            ):
                self._report_device(value, f"returned by `{func.name}()`")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None or len(targets) != 1:
                return
            if (cuda_string(node.value) or is_nccl(node.value)) and in_cuda_dispatch(self.ctx, node):
                return  # the statement itself is CUDA-only (after `if not IS_CUDA_AVAILABLE: return`): the
                # value's own path skips the statement, so the check is made on it
            name = last_name(targets[0])
            if is_device_name(name) and (cuda_string(node.value) or built_cuda_device(node.value)):
                if self._overridden_next(node, targets[0]):
                    return  # a fallback replaced right away: ``device = "cuda"; if <accelerator>: device = ...``
                self._report_device(node.value, f"assigned to `{name}`")
            elif name and "backend" in name.lower() and is_nccl(node.value):
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

    def _visit_defaults(self, args: ast.arguments, func: ast.AST) -> None:
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=False))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is not None]
        for arg, default in pairs:
            if is_device_name(arg.arg) and cuda_string(default):
                self._report_default(arg, default, func, f"default of `{arg.arg}`")
            elif "backend" in arg.arg.lower() and is_nccl(default):
                self._report_default(arg, default, func, f"default of `{arg.arg}`")

    def _report_default(self, arg: ast.arg, default: ast.expr, func: ast.AST, what: str) -> None:
        """A ``"cuda"`` / ``"nccl"`` default: never a call in the default (ruff B008, evaluated at import);
        the default becomes ``None`` and the body resolves it (``if device is None: device = ...``)."""
        if id(default) in self._seen or in_cuda_dispatch(self.ctx, default):
            return
        fix = self._body_default_fix(arg, default, func)
        if fix is None:
            self._report_string(default, what)  # shown; the engine keeps a call out of the default
            return
        self._seen.add(id(default))
        value = self.ctx.source.segment(default)
        if is_nccl(default) and native_api(self.ctx, "get_dist_comm_backend"):
            helper = f"`torch.distributed.get_default_backend_for_device({ACCELERATOR_TYPE})`"
        elif is_nccl(default):
            helper = "`get_dist_comm_backend()` (veomni.utils.device)"
        elif native_api(self.ctx, "get_device_type"):
            helper = f"`{ACCELERATOR_TYPE}` ({ACCELERATOR_NOTE})"
        else:
            helper = "`get_device_type()` (veomni.utils.device)"
        self.report(
            default,
            f"`{value}` ({what}) names the CUDA backend; take {helper} in the body, "
            f"not in the default (evaluated once, at import)",
            fix,
        )

    def _body_default_fix(self, arg: ast.arg, default: ast.expr, func: ast.AST):  # noqa: ANN202
        """``def f(device="cuda"):`` -> ``def f(device=None):`` + ``if device is None: device = get_device_type()``
        at the top of the body (after the docstring). None when that is not possible here."""
        ctx = self.ctx
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or not func.body:
            return None
        helper: str | None
        if is_nccl(default):
            helper, value = "get_dist_comm_backend", "get_dist_comm_backend()"
        elif outside_veomni(ctx):
            if not accelerator_available(ctx) or CUDA_INDEXED.fullmatch(cuda_string(default) or ""):
                return None
            helper, value = None, ACCELERATOR_TYPE
        else:
            helper = "get_device_type"
            match = CUDA_INDEXED.fullmatch(cuda_string(default) or "")
            value = f'f"{{get_device_type()}}:{match.group(1)}"' if match else "get_device_type()"
        body = func.body
        first = body[0]
        if (
            len(body) > 1
            and isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            first = body[1]  # after the docstring
        src = ctx.source
        line = src.line_text(first.lineno)
        before = (func.body[0].end_lineno or func.body[0].lineno) if first is not func.body[0] else None
        if (
            first.lineno == func.lineno
            or (before is not None and first.lineno <= before)
            or line[: src.char_col(first.lineno, first.col_offset)].strip()
        ):
            return None  # ``def f(d="cuda"): return d`` or ``x = 1; y = 2``: no statement line of its own
        edits = helper_edits(ctx, helper) if helper is not None else []
        if edits is None:
            return None
        indent = line[: len(line) - len(line.lstrip())]
        name = arg.arg
        insert = src.offset(first.lineno, 0)
        block = f"{indent}if {name} is None:\n{indent}    {name} = {value}\n"
        edits = [*edits, ctx.replace(default, "None"), Edit(insert, insert, block)]
        ann = arg.annotation
        if ann is not None and not _allows_none(ann):
            if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                if '"' in ann.value or "\\" in ann.value:
                    return None
                edits.append(ctx.replace(ann, f'"{ann.value} | None"'))  # a string annotation stays a string
            else:
                end = src.node_range(ann)[1]
                edits.append(Edit(end, end, " | None"))
        return make_fix(
            f"Default `{name}` to None and take `{value}` in the body",
            edits,
            Applicability.UNSAFE,
            f"the signature changes: `{name}` defaults to None, so a caller that passes None explicitly now "
            f"gets `{value}`",
        )

    def _visit_call(self, node: ast.Call) -> None:
        if not _may_name_cuda(node):
            return  # nothing below can report: every report is of an argument that names CUDA or NCCL
        ctx = self.ctx
        qual = ctx.qualname(node.func) or ""
        func_attr = node.func.attr if isinstance(node.func, ast.Attribute) else qual
        for kw in node.keywords:
            if kw.arg == "type" and qual == "torch.device" and cuda_string(kw.value):
                self._report_string(kw.value, "`type=` argument of `torch.device(...)`")
            elif is_device_name(kw.arg) and (cuda_string(kw.value) or built_cuda_device(kw.value)):
                self._report_device(kw.value, f"`{kw.arg}=` argument")
            elif kw.arg == "backend" and is_nccl(kw.value):
                self._report_string(kw.value, "`backend=` argument")
        if not node.args:
            return
        first = node.args[0]
        if cuda_string(first) or built_cuda_device(first):
            if qual in DEVICE_FIRST_ARG or qual.endswith(("init_device_mesh", "DeviceMesh")):
                if (
                    qual == "torch.device"
                    and len(node.args) == 1
                    and cuda_string(first)
                    and CUDA_INDEXED.fullmatch(first.value)  # type: ignore[attr-defined]
                ):
                    self._report_torch_device_index(node, first)  # type: ignore[arg-type]
                else:
                    self._report_device(first, f"argument of `{qual.split('.')[-1]}(...)`")
            elif func_attr in ("to", "pin_memory") and isinstance(node.func, ast.Attribute):
                self._report_device(first, f"argument of `.{func_attr}(...)`")
        elif is_nccl(first) and qual.endswith(("init_process_group", "new_group")):
            self._report_string(first, f"argument of `{qual.split('.')[-1]}(...)`")
        if (
            len(node.args) >= 2
            and func_attr in ("pop", "get", "getattr")
            and (cuda_string(node.args[-1]) or is_nccl(node.args[-1]))
        ):
            key = node.args[-2]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                if is_device_name(key.value) or ("backend" in key.value and is_nccl(node.args[-1])):
                    self._report_string(node.args[-1], f"default of `{key.value}`")
        self._positional_devices(node, qual, func_attr)

    def _positional_devices(self, node: ast.Call, qual: str, func_attr: str) -> None:
        """A ``"cuda"`` / ``"cuda:N"`` constant passed positionally to any other call (``rope_init_fn(config,
        "cuda")``, ``build_cache(n, "cuda:0")``): the only thing such a string names is a device. Not string and
        mapping methods (``name.startswith("cuda")``, ``table.get("cuda")``), object lookups (``getattr(torch,
        "cuda")``), messages, or kernel registrations keyed by a device type."""
        if func_attr in _NOT_DEVICE_CALLS or qual.split(".")[-1] in _NOT_DEVICE_CALLS:
            return
        if qual.startswith(("logging.", "warnings.", "torch.library.")):
            return
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in ("logger", "logging", "log", "warnings", "os", "sys", "re", "str"):
                return
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Constant):
            return  # ``"cuda".join(...)``
        for index, arg in enumerate(node.args):
            if id(arg) in self._seen or cuda_string(arg) is None:
                continue
            if index == 0 and (qual in DEVICE_FIRST_ARG or func_attr in ("to", "pin_memory")):
                continue  # reported above
            name = ctx_name = self.ctx.source.segment(func)
            if len(name) > 40:
                ctx_name = name[:37] + "..."
            self._report_string(arg, f"argument {index + 1} of `{ctx_name}(...)`")

    def _report_torch_device_index(self, node: ast.Call, first: ast.Constant) -> None:
        if id(first) in self._seen or in_cuda_dispatch(self.ctx, first):
            return
        self._seen.add(id(first))
        match = CUDA_INDEXED.fullmatch(first.value)
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
        if node.attr == "cuda" and type(value) is ast.Name and isinstance(node.ctx, ast.Load):
            self._visit_cuda_module(node)
            return
        if type(value) is ast.Attribute and value.attr != "cuda":
            return  # the qualname below ends with the attribute
        if ctx.qualname(value) != "torch.cuda":
            return
        if node.attr in LEGACY_TENSOR_TYPES or in_annotation(ctx, node) or cuda_only_here(ctx, node):
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
        if native_api(ctx, EXACT_HELPERS[node.attr][0] if node.attr in EXACT_HELPERS else "get_torch_device"):
            self.report(node, _outside_message(node.attr))  # no helper to import: torch's own API, no fix
            return
        if call is not None and node.attr in EXACT_HELPERS:
            helper, n_pos, kws = EXACT_HELPERS[node.attr]
            if len(call.args) <= n_pos and all(k.arg in kws for k in call.keywords):
                edits = helper_edits(ctx, helper)
                if edits is not None:
                    start = ctx.source.node_range(node)[0]
                    end = ctx.source.node_range(node)[1]
                    fix = make_fix(f"Replace with `{helper}(...)`", [*edits, Edit(start, end, helper)])
                    if node.attr not in CPU_NAMESPACE:
                        fix = make_fix(
                            fix.title, fix.edits, Applicability.UNSAFE, CPU_HOST_REASON.format(name=node.attr)
                        )
                    self.report(
                        node,
                        f"`torch.cuda.{node.attr}()` is CUDA-only; use `{helper}()` (veomni.utils.device)",
                        fix,
                    )
                    return
        if node.attr in MIRRORED:
            edits = helper_edits(ctx, "get_torch_device")
            fix = None
            if edits is not None:
                text = f"get_torch_device().{node.attr}"
                applicability, reason = Applicability.SAFE, ""
                if node.attr not in CPU_NAMESPACE:
                    applicability, reason = Applicability.UNSAFE, CPU_HOST_REASON.format(name=node.attr)
                fix = make_fix(
                    f"Replace with `{text}`", [*edits, ctx.replace(node, text)], applicability, reason
                )
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

    def _visit_cuda_module(self, node: ast.Attribute) -> None:
        """``torch.cuda`` itself as a value (bound to a name, passed, returned, a conditional's outcome): the code
        then works on the CUDA device module whatever the host; on an Ascend host its state (RNG, streams,
        ``_initialized``) is never set up, so the work silently does nothing or fails."""
        ctx = self.ctx
        parent = ctx.parent
        if isinstance(parent, ast.Attribute) or ctx.qualname(node) != "torch.cuda":
            return  # ``torch.cuda.<attr>``: the attribute visit reports it
        if in_annotation(ctx, node) or cuda_only_here(ctx, node) or in_fstring(ctx):
            return
        if any(isinstance(p, ast.ExceptHandler) for p in ctx.parents):
            return  # the last resort of a device-module resolver (``except AttributeError: return torch.cuda``)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _PROBES:
            return  # a capability probe
        if (
            isinstance(parent, ast.IfExp)
            and parent.test is not node
            and mentions_cuda_dispatch(ctx, parent.test)
        ):
            return  # ``torch.cuda if device_type == "cuda" else torch.npu``: dispatched
        if outside_veomni(ctx):
            self.report(
                node,
                "`torch.cuda` as the device module is CUDA-only (an Ascend host never initialises it); use "
                "`torch.get_device_module()` (the current accelerator's module)",
            )
            return
        edits = None if isinstance(parent, ast.arguments) else helper_edits(ctx, "get_torch_device")
        fix = None
        if edits is not None:
            fix = make_fix(
                "Replace with `get_torch_device()`",
                [*edits, ctx.replace(node, "get_torch_device()")],
                Applicability.UNSAFE,
                "on a CPU-only host `get_torch_device()` is `torch.cpu`, which lacks most of `torch.cuda`'s "
                "attributes",
            )
        self.report(
            node,
            "`torch.cuda` as the device module is CUDA-only: on an Ascend host it is never initialised, so RNG "
            "state, streams or memory calls made through it act on nothing; use `get_torch_device()` "
            "(veomni.utils.device)",
            fix,
        )

    def _visit_is_available(self, call: ast.Call) -> None:
        ctx = self.ctx
        parent = ctx.parents[-2] if len(ctx.parents) >= 2 else None
        if isinstance(parent, ast.Assign) and any("CUDA" in (last_name(t) or "") for t in parent.targets):
            return  # defines a CUDA flag (IS_CUDA_AVAILABLE = torch.cuda.is_available())
        if self._kernel_gate(call) or cuda_gate_on_npu_path(ctx, call):
            return  # availability of a CUDA-only kernel (triton...); a guard of an NPU path is NPU105's
        if in_fstring(ctx):
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
        if isinstance(parent, (ast.If, ast.IfExp)) and _names_cuda(parent):
            # ``"cuda:0" if torch.cuda.is_available() else "cpu"``: on NPU the new test would pick "cuda:0"
            edits = None
        if edits is not None and not call.args and not call.keywords:
            fix = make_fix(
                f"Replace with `{text}`",
                [*edits, ctx.replace(target, text)],
                Applicability.UNSAFE,
                "the guarded code then also runs on NPU hosts; keep `IS_CUDA_AVAILABLE` if it is CUDA-only",
            )
        test_if = next(
            (p for p, c in child_of(ctx, call) if isinstance(p, ast.If) and c is p.test),
            None,
        )
        chooses = test_if is not None and selects_npu_module(test_if)
        if chooses and test_if is not None:
            whole = test_if.test is call or (
                isinstance(test_if.test, ast.UnaryOp) and test_if.test.operand is call
            )
            if not whole:
                if npu_guard_in(test_if.test) is not None:
                    return  # ``not torch.cuda.is_available() and is_torch_npu_available()``: the NPU test decides
                chooses = False
        if chooses:
            self.report(
                call,
                "`torch.cuda.is_available()` chooses between the NPU and the GPU module: CUDA's absence is not an "
                "NPU (a CPU-only host, or one where CUDA failed to initialise, imports the NPU module); test "
                "`IS_NPU_AVAILABLE` (veomni.utils.device) as the sibling registrations do",
            )
            return
        if outside_veomni(ctx):
            self.report(
                call,
                "`torch.cuda.is_available()` is False on an NPU host; use `torch.accelerator.is_available()` "
                'for "any accelerator" (torch >= 2.6), or keep it for CUDA-only code',
            )
            return
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
        where = (
            f"`{ACCELERATOR_TYPE}` ({ACCELERATOR_NOTE})"
            if native_api(ctx, "get_device_type")
            else "`get_device_type()` (veomni.utils.device)"
        )
        self.report(
            node, f"`torch.cuda.amp.{node.attr}` is CUDA-only; use `torch.amp.{node.attr}` with {where}", fix
        )

    def _visit_is_cuda(self, node: ast.Attribute) -> None:
        ctx = self.ctx
        if in_fstring(ctx) or self._kernel_gate(node) or cuda_gate_on_npu_path(ctx, node):
            return  # (a CUDA gate on a dispatch or NPU path is NPU105's)
        if in_cuda_dispatch(ctx, node):
            return
        what = ctx.source.segment(node)
        self.report(
            node,
            f"`{what}` is False for NPU tensors, so this branch treats them like CPU tensors; compare "
            f'`.device.type` with {self._device_type_api()}, or with `"cpu"`',
        )

    def _visit_compare(self, node: ast.Compare) -> None:
        ctx = self.ctx
        if len(node.comparators) != 1:
            return
        if isinstance(node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            self._configured_device_gate(node)
        if not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            return
        left, right = node.left, node.comparators[0]
        side = left if cuda_string(right) else right if cuda_string(left) else None
        if not (isinstance(side, ast.Attribute) and side.attr == "type"):
            return
        owner = last_name(side.value) if not isinstance(side.value, ast.Call) else None
        if not is_device_name(owner):
            return
        if in_fstring(ctx) or self._kernel_gate(node) or in_cuda_dispatch(ctx, node):
            return
        if cuda_gate_on_npu_path(ctx, node):
            return  # NPU105
        if self._decided_before_on_npu(node):
            return
        what = ctx.source.segment(node)
        self.report(
            node,
            f"`{what}` is False for NPU tensors, so this branch treats them like CPU tensors; compare with "
            f'{self._device_type_api()}, or with `"cpu"`',
        )

    def _decided_before_on_npu(self, node: ast.Compare) -> bool:
        """The comparison is an operand of ``and`` / ``or`` whose earlier operand an NPU host already decides to
        the short-circuit value (``not IS_CUDA_AVAILABLE or x.device.type != "cuda"``): on Ascend the comparison
        is never evaluated, so it cannot misroute NPU tensors (a CUDA-only kernel's availability check)."""
        from npu_lint.veomni.resolution import NpuHost

        parent = self.ctx.parent
        if not isinstance(parent, ast.BoolOp) or node not in parent.values:
            return False
        short = isinstance(parent.op, ast.Or)
        host = NpuHost()
        for value in parent.values[: parent.values.index(node)]:
            decided, dep = host.test(value, {})
            if dep and decided is short:
                return True
        return False

    def _configured_device_gate(self, node: ast.Compare) -> None:
        """``if init_device != "cuda": raise ...`` (or ``not in ("cuda", "xpu")``; ``dist.get_backend(group) !=
        "nccl"``): a configured device (a name, attribute or option key naming a device, not a tensor's
        ``.device.type``) or a collective backend tested against CUDA's alone, where the branch an Ascend host
        takes only rejects the run. An explicit dispatch (``if device_type == "cuda": <CUDA path> else: <generic
        path>``) is not reported."""
        ctx = self.ctx
        op, right = node.ops[0], node.comparators[0]
        for literal, npu, is_value in (
            (cuda_string, "npu", _configured_device),
            (lambda n: "nccl" if is_nccl(n) else None, "hccl", _backend_value),
        ):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                side = node.left if literal(right) else right if literal(node.left) else None
                cuda_only = side is not None
            else:
                side = node.left
                elts = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else []
                values = [str_value(e) for e in elts]
                cuda_only = (
                    any(literal(e) for e in elts) and npu not in values and all(v is not None for v in values)
                )
            if cuda_only and side is not None and is_value(side):
                break
        else:
            return
        # the `if` this comparison decides, and whether the comparison is true on an NPU host
        stmt: ast.AST = node
        npu_true = isinstance(op, (ast.NotEq, ast.NotIn))
        parent = ctx.parent
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            stmt, npu_true = parent, not npu_true
            parent = ctx.parents[-2] if len(ctx.parents) >= 2 else None
        if not isinstance(parent, ast.If) or parent.test is not stmt:
            return
        taken = parent.body if npu_true else parent.orelse
        if not taken or not all(is_requirement_stmt(s) for s in taken):
            return
        if in_fstring(ctx) or in_cuda_dispatch(ctx, node) or cuda_gate_on_npu_path(ctx, node):
            return  # (a CUDA gate on a dispatch or NPU path is NPU105's)
        what = ctx.source.segment(node)
        if npu == "hccl":
            api = (
                "`torch.distributed.get_default_backend_for_device(...)`"
                if native_api(ctx, "get_dist_comm_backend")
                else "`get_dist_comm_backend()` (veomni.utils.device)"
            )
            self.report(
                node,
                f'`{what}` accepts the collective backend `"nccl"` but not `"hccl"` (Ascend\'s), so on an Ascend '
                f'host this branch rejects the run; compare with {api}, or accept `"hccl"` where it works',
            )
            return
        if native_api(ctx, "get_device_type"):
            api = f"`{ACCELERATOR_TYPE}` ({ACCELERATOR_NOTE})"
        else:
            api = "`get_device_type()` or `IS_CUDA_AVAILABLE` (veomni.utils.device)"
        self.report(
            node,
            f'`{what}` accepts the configured device as `"cuda"` but not as `"npu"`, so on an Ascend host this '
            f"branch rejects the run; test the backend with {api} if the feature is CUDA-only, or accept "
            '`"npu"` where it is supported',
        )

    def _device_type_api(self) -> str:
        if native_api(self.ctx, "get_device_type"):
            return f"`{ACCELERATOR_TYPE}` ({ACCELERATOR_NOTE})"
        return "`get_device_type()` (veomni.utils.device)"

    def _kernel_gate(self, node: ast.AST) -> bool:
        """A guard of a CUDA-only kernel: ``impl == "triton" and x.is_cuda``, or ``if not x.is_cuda:`` whose
        body only raises or records an unsupported reason."""
        ctx = self.ctx
        for parent, child in child_of(ctx, node):
            if isinstance(parent, (ast.Assign, ast.AnnAssign)):
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                # ``use_cuda = x.is_cuda`` names a flag that selects a CUDA kernel
                return any("cuda" in (last_name(t) or "").lower() for t in targets)
            if isinstance(parent, ast.BoolOp):
                for value in parent.values:
                    if value is not child and names_kernel(ctx, value):
                        return True
            elif isinstance(parent, ast.If) and child is parent.test:
                return all(is_requirement_stmt(s) for s in parent.body) and not _rejects_cuda(
                    node, parent.test
                )
            elif isinstance(parent, (ast.stmt, ast.Lambda)):
                return False
        return False


def _rejects_cuda(node: ast.AST, test: ast.AST) -> bool:
    """The ``if`` whose test is ``test`` enters its (raising) body when the tensor IS on CUDA: ``if x.is_cuda:
    raise`` / ``if x.device.type == "cuda": raise`` is a host-residency check (the input must still be on the
    CPU), not a CUDA kernel's requirement. It is written against the one accelerator its author had: an NPU
    tensor passes it. Only a test that is the CUDA test itself or its negation is read (an ``and``/``or`` is not)."""
    positive = True
    if isinstance(node, ast.Compare):
        positive = isinstance(node.ops[0], (ast.Eq, ast.In))
    cur = test
    while isinstance(cur, ast.UnaryOp) and isinstance(cur.op, ast.Not):
        positive = not positive
        cur = cur.operand
    return cur is node and positive


def _configured_device(node: ast.AST) -> bool:
    """A configured device value: a name or attribute naming a device (``init_device``, ``self.device_type``),
    or an option read by a device-naming key (``kwargs.get("init_device")``, ``cfg["device"]``); not a
    tensor's device type (``x.device.type``, NPU102's own comparison) and not a call of VeOmni's device API."""
    if isinstance(node, ast.Attribute) and node.attr == "type":
        return False
    if isinstance(node, (ast.Name, ast.Attribute)):
        return is_device_name(last_name(node))
    key: ast.AST | None = None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("get", "pop")
        and node.args
    ):
        key = node.args[0]
    elif isinstance(node, ast.Subscript):
        key = node.slice
    value = str_value(key) if key is not None else None
    return value is not None and is_device_name(value)


def _backend_value(node: ast.AST) -> bool:
    """A collective backend: ``dist.get_backend(...)`` (any receiver), or a name / attribute naming a backend."""
    if isinstance(node, ast.Call):
        name = call_name(node)
        return name == "get_backend"
    name = last_name(node)
    return bool(name) and "backend" in name.lower()  # type: ignore[union-attr]
