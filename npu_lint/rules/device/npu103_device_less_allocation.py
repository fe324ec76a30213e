"""NPU103 device-less-allocation."""

from __future__ import annotations

import ast
import re
from pathlib import PurePath

from npu_lint.core.astutil import call_name, nodes_of, own_nodes, str_value, walk_pairs
from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import (
    FACTORIES,
    HOST_SINKS,
    MOVES,
    SCALAR_METHODS,
    bound_before,
    device_source,
    is_init_method,
    is_submodule_call,
    is_tensor_annotation,
    module_classes,
    moves_device,
    names_with_parents,
    self_parameters,
    spec_targets,
    subtree,
    to_cpu,
    used_as_tensor,
    zero_size,
)

_TENSOR_NAME = re.compile(
    r"^(hidden_states|inputs_embeds|input_ids|position_ids|attention_mask|pixel_values\w*|input_features|"
    r"\w*_embeds|\w*_lens|\w*_mask|grid_thw|query|key|value|x|q|k|v|cos|sin|logits|labels)$"
)
_HOST_SIDE_FILE = re.compile(
    r"(image_processing|processing|feature_extraction|tokenization|video_processing|convert)_\w*\.py$"
)
_COLLECTIVES = frozenset(
    {
        "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
        "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter",
    }
)  # fmt: skip
_COLLECTIVE_TENSOR_KW = frozenset(
    {"tensor", "output", "input", "output_tensor", "input_tensor", "tensor_list"}
)
_SIZED = frozenset({"empty", "zeros", "ones", "full", "rand", "randn"})
_JOINS = frozenset({"stack", "cat", "concat", "concatenate", "vstack", "hstack"})
_HOST_SIDE_DIR = re.compile(r"(^|/)(data|dataset|datasets|preprocess\w*|tools|scripts|examples)/")
_SCALAR_TYPES = frozenset({"int", "bool", "str", "float", "None"})
# tensor methods that allocate on their receiver's device (a `device=` override defeats them)
_INHERITING = frozenset({"new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided"})


_SETTINGS_NAME = re.compile(
    r"(^|_)(self|cls|config|configs|cfg|conf|args|opts?|options|hparams|settings|kwargs)$"
)
_TENSOR_ATTRS = frozenset({"weight", "bias", "data", "grad"})


def tensor_like_ref(ref: ast.expr, func: ast.AST | None) -> bool:
    """Whether ``ref`` (in ``ref.dtype``) reads as a tensor rather than a settings object (``config``, ``args``,
    ``self``) whose ``.dtype`` is only a dtype: a parameter or buffer attribute, an indexed tensor, or a name that
    is not spelt like a settings object (and, for an annotated parameter, annotated as a tensor)."""
    if isinstance(ref, ast.Attribute):
        return ref.attr in _TENSOR_ATTRS or ref.attr.endswith(("_weight", "_bias"))
    root = ref
    while isinstance(root, ast.Subscript):
        root = root.value
    if not isinstance(root, ast.Name) or _SETTINGS_NAME.search(root.id):
        return False
    if root is ref and isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = func.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if a.arg == root.id and a.annotation is not None:
                return any(w in ast.unparse(a.annotation) for w in ("Tensor", "Parameter"))
    return True


def _autograd_functions(ctx: Context) -> set[str]:
    """Top-level ``torch.autograd.Function`` subclasses: their ``forward``/``backward`` run on device data."""
    if "Function" not in ctx.source.text:
        return set()
    out: set[str] = set()
    for stmt in ctx.tree.body:
        if isinstance(stmt, ast.ClassDef):
            for base in stmt.bases:
                dotted = ctx.qualname(base) or ctx.dotted(base) or ""
                if dotted in (
                    "torch.autograd.Function",
                    "torch.autograd.function.Function",
                ) or dotted.endswith("autograd.Function"):
                    out.add(stmt.name)
    return out


def _names_cpu(device: ast.expr) -> bool:
    """``"cpu"`` or ``torch.device("cpu")`` (any ``"cpu..."`` string)."""
    if isinstance(device, ast.Call) and device.args:
        device = device.args[0]
    return (
        isinstance(device, ast.Constant) and isinstance(device.value, str) and device.value.startswith("cpu")
    )


def _scalar_annotation(ann: ast.expr | None) -> bool:
    """``int`` / ``bool`` / ``str`` / ``float`` (optionally ``Optional[...]`` or ``X | None``) annotations."""
    if ann is None:
        return False
    if isinstance(ann, ast.Name):
        return ann.id in _SCALAR_TYPES
    if isinstance(ann, ast.Constant):
        return ann.value is None
    if isinstance(ann, ast.BinOp):
        return _scalar_annotation(ann.left) and _scalar_annotation(ann.right)
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "Optional":
        return _scalar_annotation(ann.slice)
    return False


def _in_place(method: str) -> bool:
    """``add_``, ``scatter_add_``, ``copy_``...: a tensor method writing into its receiver."""
    return method.endswith("_") and not method.startswith("_")


# callables whose result is host data whatever their arguments (Python builtins)
_HOST_CALLABLES = frozenset(
    {
        "len", "int", "float", "bool", "str", "list", "tuple", "dict", "set", "range", "enumerate", "zip",
        "isinstance", "getattr", "hasattr", "print", "min", "max", "sum", "sorted", "any", "all", "id", "type",
        "repr", "round", "abs", "divmod", "map", "filter", "iter", "next", "reversed", "hash", "callable",
    }
)  # fmt: skip


def _targets(target: ast.expr) -> list[str]:
    """The names an assignment target binds (``a``, ``(a, b)``, ``(a, b), (c, _)``); attributes and subscripts
    bind nothing local."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [
            n for elt in target.elts for n in _targets(elt.value if isinstance(elt, ast.Starred) else elt)
        ]
    return []


def _never(expr: ast.AST, names: object) -> bool:
    return False


_SCALAR_CALLS = frozenset({"min", "max", "int", "float", "len", "sum", "bool", "round", "abs"})
_SCALAR_ATTRS = frozenset({"max", "min", "eps", "tiny", "item", "size", "numel", "dim"})


def _scalar_tensor(call: ast.Call) -> bool:
    """``torch.tensor(<a Python scalar>)`` / ``torch.scalar_tensor(...)``: a 0-dim tensor."""
    name = call_name(call)
    if name == "scalar_tensor":
        return True
    if name not in ("tensor", "as_tensor") or not call.args:
        return False
    arg = call.args[0]
    if isinstance(arg, ast.Constant):
        return not isinstance(arg.value, (tuple, bytes))
    if isinstance(arg, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp)):
        return not _host_sequence(arg)  # `[n] * count` is a list, not a scalar
    if isinstance(arg, ast.Call):
        last = call_name(arg)
        return last in _SCALAR_CALLS or last in _SCALAR_ATTRS
    if isinstance(arg, ast.Attribute):
        return arg.attr in _SCALAR_ATTRS or arg.attr.endswith(("_size", "_dim", "_id", "_index", "_value"))
    return False


def _device_value(node: ast.expr) -> bool:
    """A device argument that names accelerator data (``x.device``, ``device``), not None or ``"cpu"``."""
    return not isinstance(node, ast.Constant)


def _call_values(call: ast.Call) -> list[ast.expr]:
    """Positional and keyword argument values of a call, lists and tuples opened (``torch.cat([a, b])``)."""
    out: list[ast.expr] = []
    for value in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(value, ast.Starred):
            value = value.value
        if isinstance(value, (ast.List, ast.Tuple)):
            out.extend(value.elts)
        else:
            out.append(value)
    return out


def _statement(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    while not isinstance(node, ast.stmt):
        parent = parents.get(id(node))
        if parent is None:
            return node
        node = parent
    return node


def _loads_after(
    ctx: Context, func: ast.AST, name: str, stmt: ast.AST, parents: dict[int, ast.AST]
) -> list[ast.Name]:
    """Loads of ``name`` after ``stmt`` up to its next rebinding. A rebinding takes effect at the end of its
    statement, so ``x = x.unsqueeze(0)`` still reads the old value."""
    end = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)  # type: ignore[attr-defined]
    events: list[tuple[tuple[int, int], int, ast.Name]] = []
    for child, _parent in names_with_parents(ctx, func).get(name, ()):
        if isinstance(child.ctx, ast.Store):
            owner = _statement(child, parents)
            if isinstance(owner, (ast.For, ast.AsyncFor, ast.With)):
                pos = (child.lineno, child.col_offset)
            else:
                pos = (owner.end_lineno or owner.lineno, owner.end_col_offset or 0)  # type: ignore[attr-defined]
            events.append((pos, 0, child))
        elif isinstance(child.ctx, ast.Load):
            events.append(((child.lineno, child.col_offset), 1, child))
    events.sort(key=lambda e: (e[0], e[1]))
    out: list[ast.Name] = []
    for pos, kind, child in events:
        if pos <= end:
            continue
        if kind == 0:
            if _conditional(child, stmt, parents) or _other_branch(child, stmt, parents):
                continue  # rebound on one path only (or on a path the binding is not on): the value still flows
            break
        out.append(child)
    return out


_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith)


def _other_branch(store: ast.AST, binding: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """``store`` and ``binding`` sit in the two arms of one ``if`` (``if a: x = host() else: x = dev()``): the
    rebinding is not on the binding's path, so it does not end the binding's value."""
    chain: dict[int, ast.AST] = {}  # ancestor id -> its child on the way to the binding
    child: ast.AST = binding
    node = parents.get(id(binding))
    while node is not None:
        chain[id(node)] = child
        child, node = node, parents.get(id(node))
    child = store
    node = parents.get(id(store))
    while node is not None:
        if id(node) in chain:
            if not isinstance(node, ast.If):
                return False
            mine, theirs = child, chain[id(node)]
            return (mine in node.body and theirs in node.orelse) or (
                mine in node.orelse and theirs in node.body
            )
        child, node = node, parents.get(id(node))
    return False


def _conditional(store: ast.AST, binding: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """The rebinding ``store`` sits in a branch or loop that does not also hold the original ``binding``."""
    around: set[int] = set()
    node: ast.AST | None = binding
    while node is not None:
        around.add(id(node))
        node = parents.get(id(node))
    node = parents.get(id(store))
    while node is not None and id(node) not in around:
        if isinstance(node, _BRANCHES):
            return True
        node = parents.get(id(node))
    return False


_CPU_RESIDENT = "a tensor that stays on the CPU (a plain attribute or a `.cpu()` copy: `model.to(device)` does not move it)"


def _outcomes(value: ast.AST) -> list[ast.AST]:
    """The values an expression may evaluate to: both branches of a conditional, the operands of `or`/`and`."""
    if isinstance(value, ast.IfExp):
        return [*_outcomes(value.body), *_outcomes(value.orelse)]
    if isinstance(value, ast.BoolOp):
        return [o for v in value.values for o in _outcomes(v)]
    return [value]


def _host_sequence(data: ast.AST) -> bool:
    """A Python sequence (or scalar) display, or a repetition / concatenation of one: host data."""
    if isinstance(data, (ast.List, ast.Tuple, ast.ListComp, ast.Constant)):
        return True
    if isinstance(data, ast.BinOp) and isinstance(data.op, (ast.Mult, ast.Add)):
        return (
            isinstance(data.left, (ast.List, ast.Tuple, ast.ListComp))
            or isinstance(data.right, (ast.List, ast.Tuple, ast.ListComp))
            or (isinstance(data.op, ast.Add) and (_host_sequence(data.left) and _host_sequence(data.right)))
        )
    return False


_HOST_KEEPING = frozenset(
    {"float", "double", "half", "bfloat16", "long", "int", "bool", "reshape", "view", "unsqueeze", "squeeze",
     "expand", "contiguous", "clone", "flatten", "transpose", "permute", "pow", "exp", "cos", "sin", "outer",
     "repeat", "t"}
)  # fmt: skip


def _on_cpu(value: ast.AST, ctx: Context, plain: bool) -> bool:
    """A value that lives on the CPU: `x.cpu()`, `x.to("cpu")`, a factory with `device="cpu"`, or (``plain``: a
    plain module attribute, which `model.to()` does not move) a `torch.*` factory without a device, also through
    methods that keep the device (`torch.arange(d).float()`, `1.0 / (base ** (torch.arange(d) / d))`)."""
    if plain:
        while True:
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in _HOST_KEEPING
                and not isinstance(value.func.value, ast.Name)
            ):
                value = value.func.value
            elif isinstance(value, ast.Subscript):
                value = value.value
            elif isinstance(value, ast.BinOp):
                sides = [s for s in (value.left, value.right) if not isinstance(s, (ast.Constant, ast.Name))]
                if len(sides) != 1:
                    break
                value = sides[0]
            else:
                break
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr == "cpu":
            return True
        if value.func.attr == "to" and value.args and isinstance(value.args[0], ast.Constant):
            return value.args[0].value == "cpu"
    if isinstance(value, ast.Call):
        device = next((k.value for k in value.keywords if k.arg == "device"), None)
        if isinstance(device, ast.Constant) and device.value == "cpu":
            return True
        qual = ctx.qualname(value.func) or ""
        if plain and device is None and qual.startswith("torch.") and qual[6:] in FACTORIES:
            return True
    return False


def _local_on_cpu(name: str, values_of: dict[str, list[ast.expr]], ctx: Context, depth: int) -> bool:
    """Every value the function stores in local ``name`` lives on the CPU: a `.cpu()` copy (`_on_cpu`), or a
    slice or a shape-keeping view of another such local (`pos = positions_cpu[i, a:b].reshape(-1)`), followed
    ``depth`` locals deep."""
    values = values_of.get(name, [])
    if not values:
        return False
    for value in values:
        if _on_cpu(value, ctx, plain=False):
            continue
        while True:
            if isinstance(value, ast.Subscript):
                value = value.value
            elif (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in _HOST_KEEPING
            ):
                value = value.func.value
            else:
                break
        if not (isinstance(value, ast.Name) and value.id != name and depth > 0):
            return False
        if not _local_on_cpu(value.id, values_of, ctx, depth - 1):
            return False
    return True


def _moved_after(call: ast.Call, method: ast.AST) -> bool:
    """The helper's result is moved to a device at the call site (`helper(...).to(x.device)`), or the local it
    is stored in is moved (`mask = mask.to(...)`, `mask.to(...)`) or only describes shapes."""
    names: set[str] = set()
    for node in subtree(method):
        if (
            isinstance(node, ast.Attribute)
            and node.value is call
            and node.attr in ("to", "cuda", "npu", "type_as")
        ):
            return True
        if isinstance(node, ast.Assign) and _chain_root(node.value) is call:
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.Return) and node.value is not None and _chain_root(node.value) is call:
            return True  # handed on to the method's own callers, which decide where it goes
    if not names:
        return False
    for node in subtree(method):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
            and node.attr in ("to", "cuda", "npu", "type_as")
        ):
            return True
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id in names:
            return True  # returned (``mask = helper(...).expand(...); return mask``): the callers decide
    return False


def _chain_root(value: ast.AST) -> ast.AST:
    """The receiver at the root of a method chain (``helper(x).unsqueeze(0).expand(...)`` -> ``helper(x)``)."""
    while (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Call)
    ):
        value = value.func.value
    return value


class DevicelessAllocation(Rule):
    code = "NPU103"
    name = "device-less-allocation"
    summary = "A tensor factory without `device=` on the forward path allocates on the CPU, next to accelerator data."
    why = (
        "`torch.zeros(n)`, `torch.arange(n)`, `torch.tensor([...])`... without `device=` allocate on the CPU "
        "(or wherever a global default device points). In `forward` the result then meets accelerator tensors: "
        "a host-to-device copy and a synchronisation on every step, an error where an op refuses mixed "
        "devices, and code that only worked because a CUDA default device was set. Device-neutral code "
        "allocates where its data lives: `device=hidden_states.device` (`device=None` is the same as no "
        "device). The value is followed through expressions, local names, lists it is appended to and "
        "in-place writes to where it meets forward data: an operand of arithmetic, a `cat`/`stack` or other "
        "`torch.*` op, an index, a buffer that device data is written into (or `out=`), a call into a "
        "submodule, or the function's return; a device move or a host sink (`.tolist()`) ends the path, and "
        "a 0-dim tensor of a Python scalar only counts as an index or a module input (elsewhere torch treats "
        "it as a scalar). The fix names the tensor the value meets. The `*_like` and `x.new_*` families "
        "inherit a device and are fine; so are allocations in `__init__`/`_init_weights` (parameters and "
        "buffers move with the module), allocations moved at once (`.to(x.device)`), an explicit "
        '`device="cpu"`, code under `with torch.device(...)`, and values only used on the host (`.tolist()`).'
        " Also: a module-level helper without device data that returns a host allocation its forward-path caller uses unmoved; `torch.Generator()` without a device on the forward path; an allocation on the device of a tensor that stays on the CPU (a plain tensor attribute set in `__init__`, which `model.to()` does not move, or a `.cpu()` copy) or that the function itself copies to another tensor's device (host metadata: `meta.to(hidden_states.device)`), also through a local one of whose outcomes it is (`device = meta.device if use_meta else hidden_states.device`). `torch.tensor([n] * count)` is a Python list however its length is computed: host data. Beyond model files, the framework's own device-side code is checked the same way (kernels' eager code and adapters under `veomni/ops`, distributed helpers, utils: a module-level function nothing in the file calls is an entry point, and an `autograd.Function`'s `forward`/`backward` run on device data); the data pipeline (`data/`, `datasets/`, `tools/`, `scripts/`) builds host batches on purpose. A module-level helper's host result that its caller only reads on the host (`sizes.tolist()`, `.item()`, `.shape`) is not reported, nor is data from a helper of the file every `return` of which hands back a host copy (`mask.sum(-1).cpu()`); a `torch.Generator()` bound to a local whose every use seeds it or draws on the host (`generator=g` of a draw without `device=`: reproducible CPU noise, moved afterwards) is deliberate. A host value carried in a dict literal that is handed to a module (`self(x, metadata={'cu_seqlens': host})`) is a field the module reads by name (host metadata, or moved where it is read): not followed into it. A list of host tensors iterated by a comprehension yields host tensors, and `torch.stack`/`torch.cat` of it is one. A host allocation handed to a `torch.distributed` collective as its tensor is reported wherever it is (a trainer's metric reduction too): HCCL and NCCL take device tensors only; a file that names a gloo (CPU) group, or a `group=` naming a CPU group, is left out."
        " A method on `self` that returns a host allocation is reported where its forward-path caller combines "
        "the result with device data (arithmetic, a `torch.*` op, an index), not where the caller collects "
        "host metadata. Outside the model packages and the data pipeline, the methods of plain (non-module) "
        "classes (a data balancer, a metrics monitor) are read like module-level helpers; an empty result they "
        "return on the CPU on purpose is not reported. An `nn` module built with a live tensor's dtype "
        "(`dtype=ref.dtype`, or a `**factory_kwargs` dict literal with a `dtype` and no `device` key) but not "
        "its device allocates its parameters on the CPU beside that tensor."
        " Wherever a function sits (forward path or not, any region of the tree): an allocation that ignores a "
        "device the caller hands the function (a `device` / `*_device` parameter, or one annotated as a device) "
        "and is returned to that caller, and a host allocation returned in one tuple, list or dict beside a device "
        "tensor (a dummy-input builder, a loss helper), are reported; construction-time builders (called from "
        "`__init__`, their tensors become buffers) are not. A host value handed to a helper that gets no device "
        "(no device tensor, no `device=`) is followed into the helper's result; a `torch.*` op given `device=` "
        "ends the host path; a rebinding in the other arm of an `if` does not end it."
        " The `x.new_*` and `torch.*_like` families exist to take a tensor's device: told "
        '`device="cpu"` in device-side code (model, kernel, distributed code; not the data pipeline, not a pinned '
        "`pin_memory=True` staging buffer) they build a host tensor beside the device data they were modelled on "
        "(a bias sentinel handed to a kernel with the weights, a mask), wherever the function sits."
    )
    bad = (
        Example(
            """
            from torch import Tensor


            def empty_bias(weight: Tensor) -> Tensor:
                return weight.new_empty(0, device="cpu")
            """,
            path="veomni/ops/kernels/toy_swiglu/utils.py",
            title="an inherited device overridden with the host",
        ),
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


            class ToyDecoder(nn.Module):
                def forward(self, inputs_embeds: torch.Tensor, past_seen_tokens: int = 0):
                    position_ids = torch.arange(inputs_embeds.shape[1], device=None) + past_seen_tokens
                    position_ids = position_ids.unsqueeze(0)
                    return self.rotary_emb(inputs_embeds, position_ids)

                def rope_ids(self, total: int, coords: torch.Tensor):
                    ids = torch.empty((total, 2), dtype=torch.long)
                    ids[:] = coords
                    return self.rotary_emb(ids)
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyDecoder(nn.Module):
                def forward(self, inputs_embeds: torch.Tensor, past_seen_tokens: int = 0):
                    position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
                    position_ids = position_ids.unsqueeze(0)
                    return self.rotary_emb(inputs_embeds, position_ids)

                def rope_ids(self, total: int, coords: torch.Tensor):
                    ids = torch.empty((total, 2), dtype=torch.long, device=coords.device)
                    ids[:] = coords
                    return self.rotary_emb(ids)
            """,
            title="followed through names to a submodule call; a buffer device data is written into",
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
            title="no nameable device: reported without a fix",
        ),
        Example(
            """
            import torch
            from torch import nn


            def causal_mask(seq_len: int, dtype: torch.dtype) -> torch.Tensor:
                mask = torch.full((seq_len, seq_len), float("-inf"), dtype=dtype)
                return torch.triu(mask, diagonal=1)


            class ToyAttention(nn.Module):
                def forward(self, scores: torch.Tensor) -> torch.Tensor:
                    return self.softmax(scores + causal_mask(scores.shape[-1], scores.dtype))
            """,
            title="a helper without device data whose host tensor the forward uses",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyDropPath(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    gen = torch.Generator()
                    keep = torch.rand(hidden_states.shape[0], generator=gen, device=hidden_states.device)
                    return self.proj(hidden_states * keep[:, None])
            """,
            title="a random generator without a device",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyNoiser(nn.Module):
                def __init__(self, device_type: str):
                    super().__init__()
                    self.rng = torch.Generator(device=device_type)

                def drop_prompt(self, rate: float) -> bool:
                    return bool(torch.rand((), generator=self.rng) < rate)
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyNoiser(nn.Module):
                def __init__(self, device_type: str):
                    super().__init__()
                    self.rng = torch.Generator(device=device_type)

                def drop_prompt(self, rate: float) -> bool:
                    return bool(torch.rand((), generator=self.rng, device=self.rng.device) < rate)
            """,
            title="a draw on the CPU with a generator made on the accelerator",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyCache(nn.Module):
                def __init__(self, n: int):
                    super().__init__()
                    self.lengths = torch.zeros(n, dtype=torch.long)

                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    idx = torch.arange(hidden_states.shape[1], device=self.lengths.device)
                    return self.proj(hidden_states[:, idx])
            """,
            title="allocated on the device of a plain tensor attribute (`model.to()` leaves it on the CPU)",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyPatchEmbed(nn.Module):
                def forward(self, pixels: torch.Tensor, patch_table=None) -> torch.Tensor:
                    use_table = patch_table is not None
                    device = patch_table.device if use_table else pixels.device
                    rows = torch.arange(pixels.shape[0], device=device)
                    table = patch_table.to(pixels.device, non_blocking=True) if use_table else None
                    return self.proj(pixels[rows], table)
            """,
            title="allocated on the device of a tensor the forward itself copies to the data's device (host "
            "metadata), through one outcome of a local",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToySplitter(nn.Module):
                def forward(self, frames: torch.Tensor, frame_lens: torch.Tensor):
                    n_windows = torch.ceil(frame_lens / self.window).long()
                    sizes = torch.tensor([self.window] * n_windows.sum(), dtype=torch.long)
                    return frame_lens + sizes
            """,
            fixed="""
            import torch
            from torch import nn


            class ToySplitter(nn.Module):
                def forward(self, frames: torch.Tensor, frame_lens: torch.Tensor):
                    n_windows = torch.ceil(frame_lens / self.window).long()
                    sizes = torch.tensor([self.window] * n_windows.sum(), dtype=torch.long, device=frame_lens.device)
                    return frame_lens + sizes
            """,
            title="a tensor from a repeated Python list (its length from device data) is host data",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            def gather_token_ids(token_ids, group):
                world = dist.get_world_size(group)
                shards = [torch.empty(token_ids.shape, dtype=token_ids.dtype) for _ in range(world)]
                dist.all_gather(shards, token_ids, group=group)
                token_ids = torch.cat(shards, dim=-1)
                return token_ids
            """,
            fixed="""
            import torch
            import torch.distributed as dist


            def gather_token_ids(token_ids, group):
                world = dist.get_world_size(group)
                shards = [torch.empty(token_ids.shape, dtype=token_ids.dtype, device=token_ids.device) for _ in range(world)]
                dist.all_gather(shards, token_ids, group=group)
                token_ids = torch.cat(shards, dim=-1)
                return token_ids
            """,
            title="a collective's output buffers on the CPU (the gathered name is rebound only afterwards)",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            def _gather_rows(shard: torch.Tensor, group) -> torch.Tensor:
                world = dist.get_world_size(group)
                merged = torch.empty((shard.shape[0] * world, *shard.shape[1:]), dtype=shard.dtype)
                dist.all_gather_into_tensor(merged, shard, group=group)
                return merged


            class _ScatterRows(torch.autograd.Function):
                @staticmethod
                def forward(ctx, group, local):
                    ctx.group = group
                    return local.chunk(dist.get_world_size(group))[dist.get_rank(group)]

                @staticmethod
                def backward(ctx, grad):
                    return None, _gather_rows(grad, ctx.group)
            """,
            fixed="""
            import torch
            import torch.distributed as dist


            def _gather_rows(shard: torch.Tensor, group) -> torch.Tensor:
                world = dist.get_world_size(group)
                merged = torch.empty((shard.shape[0] * world, *shard.shape[1:]), dtype=shard.dtype, device=shard.device)
                dist.all_gather_into_tensor(merged, shard, group=group)
                return merged


            class _ScatterRows(torch.autograd.Function):
                @staticmethod
                def forward(ctx, group, local):
                    ctx.group = group
                    return local.chunk(dist.get_world_size(group))[dist.get_rank(group)]

                @staticmethod
                def backward(ctx, grad):
                    return None, _gather_rows(grad, ctx.group)
            """,
            path="veomni/distributed/toy_sp.py",
            title="framework code outside model files: a collective's output buffer reached from an autograd "
            "backward",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyPromptEncoder(nn.Module):
                def encode(self, token_ids: torch.Tensor, keep: torch.Tensor):
                    states = self.text_model(token_ids)
                    pieces = [row[flag] for row, flag in zip(states, keep)]
                    masks = [torch.ones(p.shape[0], dtype=torch.long) for p in pieces]
                    longest = max(p.shape[0] for p in pieces)
                    return torch.stack([torch.cat([m, m.new_zeros(longest - m.shape[0])]) for m in masks])
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyPromptEncoder(nn.Module):
                def encode(self, token_ids: torch.Tensor, keep: torch.Tensor):
                    states = self.text_model(token_ids)
                    pieces = [row[flag] for row, flag in zip(states, keep)]
                    masks = [torch.ones(p.shape[0], dtype=torch.long, device=token_ids.device) for p in pieces]
                    longest = max(p.shape[0] for p in pieces)
                    return torch.stack([torch.cat([m, m.new_zeros(longest - m.shape[0])]) for m in masks])
            """,
            title="a list of host masks iterated, padded and stacked into the returned batch",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            class ToyTrainer:
                def global_token_count(self, micro_batches):
                    local = torch.tensor([sum(int(mb["labels"].ne(-100).sum()) for mb in micro_batches)])
                    dist.all_reduce(local)
                    return int(local.item())
            """,
            path="veomni/trainer/toy_trainer.py",
            title="a host tensor handed to a collective (anywhere, not only on the forward path)",
        ),
        Example(
            """
            import torch
            from torch import nn


            class Condition(nn.Module):
                def __init__(self, seed: int):
                    super().__init__()
                    self.generator = torch.Generator()
                    self.generator.manual_seed(seed)

                def forward(self, latents: torch.Tensor) -> torch.Tensor:
                    noise = torch.randn(latents.shape, device=self.generator.device, generator=self.generator)
                    return latents + noise
            """,
            path="veomni/models/diffusers/toy/modeling_toy.py",
            title="a CPU generator (no `device=`) drawn on as if it were the compute device",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyBlock(nn.Module):
                def _positions(self, n: int) -> torch.Tensor:
                    return torch.arange(n)

                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    return hidden_states + self._positions(hidden_states.shape[1])[:, None]
            """,
            title="a device-less allocation a method on `self` returns to the forward (no fix: the device is the caller's)",
        ),
        Example(
            """
            import torch


            class LengthBalancer:
                def exchange(self, lengths: torch.Tensor, ranks: int) -> list:
                    table = self.sort(lengths, ranks)
                    counts = torch.zeros(ranks, dtype=table.dtype)
                    counts.index_add_(0, table[:, 0], table[:, 1])
                    return counts.tolist()
            """,
            fixed="""
            import torch


            class LengthBalancer:
                def exchange(self, lengths: torch.Tensor, ranks: int) -> list:
                    table = self.sort(lengths, ranks)
                    counts = torch.zeros(ranks, dtype=table.dtype, device=table.device)
                    counts.index_add_(0, table[:, 0], table[:, 1])
                    return counts.tolist()
            """,
            path="veomni/utils/toy_balance.py",
            title="a plain class of framework code: the allocation copies `table`'s dtype, so it takes its device",
        ),
        Example(
            """
            from torch import nn


            class ToyLoraLayer(nn.Module):
                def add_adapter(self, name: str, r: int) -> None:
                    ref = self.base_layer.weight
                    factory_kwargs = {"dtype": ref.dtype}
                    self.lora_A[name] = nn.Linear(self.in_features, r, bias=False, **factory_kwargs)
            """,
            fixed="""
            from torch import nn


            class ToyLoraLayer(nn.Module):
                def add_adapter(self, name: str, r: int) -> None:
                    ref = self.base_layer.weight
                    factory_kwargs = {"dtype": ref.dtype, "device": ref.device}
                    self.lora_A[name] = nn.Linear(self.in_features, r, bias=False, **factory_kwargs)
            """,
            path="veomni/lora/toy_layers.py",
            title="a module built to match a live tensor's dtype but not its device",
        ),
        Example(
            """
            import torch
            from dataclasses import dataclass


            @dataclass(frozen=True)
            class ToyGuidance:
                skips: list

                def mask(self, block: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
                    mask = torch.ones((len(self.skips),), dtype=dtype)
                    for i, skipped in enumerate(self.skips):
                        if block in skipped:
                            mask[i] = 0
                    return mask
            """,
            fixed="""
            import torch
            from dataclasses import dataclass


            @dataclass(frozen=True)
            class ToyGuidance:
                skips: list

                def mask(self, block: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
                    mask = torch.ones((len(self.skips),), dtype=dtype, device=device)
                    for i, skipped in enumerate(self.skips):
                        if block in skipped:
                            mask[i] = 0
                    return mask
            """,
            path="veomni/models/diffusers/toy/guidance.py",
            title="a device handed to the function and ignored by the allocation it returns",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyVisionEncoder(nn.Module):
                def dummy_inputs(self):
                    pixels = torch.randn((4, 588), dtype=self.dtype, device=self.device)
                    grid = torch.tensor([[1, 2, 2]], dtype=torch.int32)
                    return {"pixel_values": pixels, "grid_thw": grid}
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyVisionEncoder(nn.Module):
                def dummy_inputs(self):
                    pixels = torch.randn((4, 588), dtype=self.dtype, device=self.device)
                    grid = torch.tensor([[1, 2, 2]], dtype=torch.int32, device=pixels.device)
                    return {"pixel_values": pixels, "grid_thw": grid}
            """,
            path="veomni/models/seed_omni/toy/modeling_toy.py",
            title="a host tensor returned beside a device tensor (off the forward path)",
        ),
    )
    good = (
        Example(
            """
            import torch


            def total(hidden_states: torch.Tensor, chunks: int) -> torch.Tensor:
                acc = torch.tensor(0.0)
                for part in torch.split(hidden_states, chunks):
                    acc = acc + part.sum()
                return acc
            """,
            path="veomni/ops/kernels/loss/toy.py",
            title="a 0-dim CPU scalar only combined out of place (it follows the other operand's device)",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyNoiser(nn.Module):
                def __init__(self, device_type: str):
                    super().__init__()
                    self.rng = torch.Generator(device=device_type)

                def drop_prompt(self, rate: float) -> bool:
                    return bool(torch.rand((), device=self.rng.device, generator=self.rng) < rate)
            """,
            title="the draw takes the generator's device",
        ),
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
        Example(
            """
            import torch
            from torch import nn


            class ToyDeformableAttention(nn.Module):
                def forward(self, reference_points, spatial_shapes):
                    sizes = (spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum()
                    normalizer = torch.tensor(spatial_shapes).flip([1])
                    return reference_points / normalizer, sizes
            """,
            title="`torch.tensor(x)` of a device tensor keeps its device",
        ),
        Example(
            """
            import torch


            def pad_batch(features: list, pad_id: int):
                input_ids = [f["input_ids"] for f in features]
                longest = max(len(x) for x in input_ids)
                out = torch.full((len(input_ids), longest), pad_id)
                for i, x in enumerate(input_ids):
                    out[i, : len(x)] = x
                return out
            """,
            path="veomni/data/toy_collate.py",
            title="the data pipeline builds its batches on the host on purpose",
        ),
    )
    fix_safety = (
        "Safe: `device=` is added (or `device=None` replaced) naming the tensor the value meets, when that tensor "
        "is nameable at the allocation and always a tensor (a tensor parameter, a local every binding of which is "
        "device data, `self.<parameter>`: never `n = min(t.max(), limit)`, which can be an int); else the "
        "nearest tensor in scope (a parameter annotated or used as a tensor, else a parameter the module "
        "creates in `__init__`, `self.weight.device`). The values are the same; "
        "they are created on the device they were going to meet. When npu-lint cannot name a tensor "
        "that carries the device, there is no fix and the message says so. An allocation that copies a "
        "tensor's dtype (`dtype=t.dtype`) takes `t.device` (unsafe when `t` is not the data it meets); an `nn` "
        "module or factory-kwargs dict matching a live tensor's dtype gets that tensor's device."
    )
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code, and the kernels' own Python (``veomni/ops``: eager fallbacks, adapters), whose functions run
        on the same device data."""
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if _HOST_SIDE_FILE.match(PurePath(ctx.source.path).name):
            self.node_types = ()  # preprocessing runs on the host, before data reaches the device
        self.module_classes = module_classes(ctx.tree, ctx) | _autograd_functions(ctx)
        path = ctx.source.path.replace("\\", "/")
        # files whose module-level functions nothing in the file calls are entry points other modules call on
        # device data: model code, and the framework's own device-side code (distributed helpers, kernels'
        # eager code, utils); never the data pipeline, whose tensors are built on the host on purpose
        self.model_file = "/models/" in path or PurePath(path).name.startswith("modeling_")
        self.entry_file = self.model_file or not _HOST_SIDE_DIR.search(path)
        self.spec_targets = spec_targets(ctx.tree)
        self.functions = {
            s.name for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        # plain (non-module) classes of the framework's device-side code outside the model packages (a data
        # balancer, an embedding-gradient hook holder): the trainer hands their methods device data, as it does
        # the file's module-level helpers (in model code a plain class is a host-side helper: patchifier, config)
        self.plain_classes = (
            {s.name for s in ctx.tree.body if isinstance(s, ast.ClassDef)} - self.module_classes
            if self.entry_file and not self.model_file
            else set()
        )
        # unit -> names it calls; a unit is ("", function) or (class, method)
        self.calls: dict[tuple[str, str], set[str]] = {}
        self.self_calls: dict[tuple[str, str], set[str]] = {}
        self.pending: list[tuple[tuple[str, str], ast.Call, str, str | None]] = []
        self._guessed: set[int] = set()
        # allocations handed to a collective as its tensor: wrong wherever the function runs (HCCL and NCCL take
        # device tensors only), forward path or not; a file that names a gloo (CPU) group is left out
        self._collective_met: dict[int, str] = {}
        self._collective = False
        self._gloo = (
            "gloo" in ctx.source.text
        )  # allocations whose device= names a tensor other than the data met
        # host allocations a module-level helper returns (no device data in the helper to take it from)
        self.helper_returns: list[tuple[tuple[str, str], ast.Call, str]] = []
        self._returned = False
        self._reached_return = False
        self._beside: ast.AST | None = None
        self.returned_beside: dict[int, ast.AST] = {}  # allocation -> the device tensor returned beside it
        # ``self.inv_freq[...].float().to(self.inv_freq.device)``: a value moved to its own source's device
        self.self_moves: list[tuple[tuple[str, str], ast.Call, str]] = []
        self.generators: list[tuple[tuple[str, str], ast.Call]] = []  # torch.Generator() without a device
        # random draws without device= that pass a generator: (unit, call, factory, generator expression)
        self.generator_draws: list[tuple[tuple[str, str], ast.Call, str, ast.expr]] = []
        # allocations on the device of a tensor that stays on the CPU (plain attribute, `.cpu()`, device="cpu")
        self._dtype_dicts: set[int] = set()  # factory-kwargs dicts already reported
        self.cpu_devices: list[tuple[tuple[str, str], ast.Call, str, str, str]] = []
        # uses of a plain attribute built on the host (``self.freqs = precompute(dim)`` in ``__init__``) that meet
        # device data in a forward-path method: (unit, first call on it, attribute)
        self.host_attrs: list[tuple[tuple[str, str], ast.Call, str]] = []
        self._host_attr_seen: set[tuple[tuple[str, str], str]] = set()
        self._host_attr_cache: dict[tuple[str, str], bool] = {}
        self._accel_cache: dict[int, dict[str, int]] = {}
        self._accel_sites: dict[int, dict[str, ast.AST]] = {}
        self._param_cache: dict[int, set[str]] = {}
        self._parents_cache: dict[int, dict[int, ast.AST]] = {}
        self._host_returning_cache: dict[str, bool] = {}

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
        if type(func) is ast.Attribute and func.attr == "to":
            self._self_move(unit, node, func)
        if type(func) is ast.Attribute and (func.attr in _INHERITING or func.attr.endswith("_like")):
            self._host_override(node, func)
        if (
            (
                (isinstance(func, ast.Attribute) and func.attr == "Generator")
                or (isinstance(func, ast.Name) and func.id == "Generator")
            )
            and not node.args
            and not any(k.arg in ("device", None) for k in node.keywords)
        ):
            if self.ctx.qualname(func) == "torch.Generator":
                self.generators.append((unit, node))
            return
        if type(func) is ast.Attribute and unit[0] in self.module_classes and not is_init_method(unit[1]):
            attr = self._host_resident_root(func.value)
            if attr is not None and (unit, attr) not in self._host_attr_seen:
                self._host_attr_seen.add((unit, attr))
                self._returned = self._collective = False
                if self._meets_accelerator(node) is not None:
                    self.host_attrs.append((unit, node, attr))
                return
        if type(func) is ast.Attribute and func.attr[:1].isupper() and "dtype" in self.ctx.source.text:
            self._module_matching_dtype(node, func)
            return
        if type(func) is ast.Attribute and func.attr not in FACTORIES:
            return  # the qualname below ends with the attribute
        qual = self.ctx.qualname(func) or ""
        if not qual.startswith("torch.") or qual.count(".") != 1 or qual[6:] not in FACTORIES:
            return
        if qual == "torch.normal" and len(node.args) < 3 and not any(k.arg == "size" for k in node.keywords):
            return  # tensor moments: the result follows their device
        device_kw = next((k for k in node.keywords if k.arg == "device"), None)
        off_device = self._off_device(device_kw.value) if device_kw is not None else None
        if off_device is not None:
            shown = self.ctx.source.segment(device_kw.value)  # type: ignore[union-attr]
            self.cpu_devices.append((unit, node, qual[6:], shown, off_device))
            return
        if device_kw is None:
            gen_kw = next((k for k in node.keywords if k.arg == "generator"), None)
            if gen_kw is not None and isinstance(gen_kw.value, (ast.Name, ast.Attribute)):
                self.generator_draws.append((unit, node, qual[6:], gen_kw.value))
        if any(
            k.arg is None
            or (k.arg == "device" and not (isinstance(k.value, ast.Constant) and k.value.value is None))
            for k in node.keywords
        ):
            return
        if any(isinstance(a, ast.Starred) for a in node.args) and qual[6:] not in _SIZED:
            return  # ``torch.tensor(*data)``: what is unpacked is unknown; sizes (``*x.shape[1:]``) are sizes
        if self._exempt(node) or (qual[6:] in ("empty", "zeros", "ones") and zero_size(node)):
            return
        if qual[6:] in ("tensor", "as_tensor") and self._copies_device_tensor(node):
            return  # ``torch.tensor(x)`` of a device tensor keeps that device: nothing is allocated on the CPU
        self._returned = False
        self._collective = False
        self._reached_return = False
        self._beside = None
        met = self._meets_accelerator(node)
        if isinstance(met, ast.Return) and self._beside is not None:
            self.returned_beside[id(node)] = self._beside
        if self._reached_return and (met is None or isinstance(met, ast.Return)):
            handed = self._device_parameter()
            if handed is not None and getattr(self.ctx.function, "name", "") not in self._init_builders():
                # the caller hands this function the device and it returns a tensor allocated elsewhere: wrong
                # on whatever path the function is called from
                self.report(
                    node,
                    f"`torch.{qual[6:]}(...)` without `device=` allocates on the CPU although the caller hands "
                    f"this function `{handed}`, and the result is returned to it; add `device={handed}`",
                    make_fix(f"Add `device={handed}`", [self._device_edit(node, handed)]),
                )
                return
        if met is None:
            if self._returned:
                self.helper_returns.append((unit, node, qual[6:]))
            return
        if (
            isinstance(met, ast.Return)
            and unit[0] in self.plain_classes
            and not self._collective
            and id(node) not in self.returned_beside
        ):
            return  # a plain class's caller is not known to be device code (an empty result "on CPU" on purpose)
        source = self._device_source(node, met)
        beside = self.returned_beside.get(id(node))
        if source is None and isinstance(beside, (ast.Name, ast.Attribute)):
            source = f"{self.ctx.source.segment(beside)}.device"  # the device tensor returned beside it
        if source is not None and self._combined_elsewhere(node, source.split(".")[0]):
            self._guessed.add(id(node))
        if self._collective:
            self._collective_met[id(node)] = (
                self.ctx.qualname(met.func) or "" if isinstance(met, ast.Call) else ""
            )
        self.pending.append((unit, node, qual[6:], source))

    def _host_override(self, node: ast.Call, func: ast.Attribute) -> None:
        """``weight.new_empty(0, device="cpu")`` / ``torch.zeros_like(x, device="cpu")``: an allocation whose whole
        point is to take a tensor's device, told to use the host instead, in device-side code. The result (a bias
        sentinel, a mask, a buffer) sits on the CPU next to the device data it was modelled on; a host staging
        buffer says so (``pin_memory=True``) and the data pipeline builds host tensors on purpose."""
        if not self.entry_file:
            return
        device_kw = next((k for k in node.keywords if k.arg == "device"), None)
        if device_kw is None or not _names_cpu(device_kw.value):
            return
        if any(k.arg in ("pin_memory", None) for k in node.keywords):
            return
        if func.attr in _INHERITING:
            ref = self.ctx.source.segment(func.value)
        else:
            if (self.ctx.qualname(func) or "") != f"torch.{func.attr}" or not node.args:
                return
            ref = self.ctx.source.segment(node.args[0])
        what = func.attr if func.attr in _INHERITING else f"torch.{func.attr}"
        self.report(
            device_kw.value,
            f"`{what}` exists to take `{ref}`'s device, but `device={self.ctx.source.segment(device_kw.value)}` "
            f"puts the result on the host, next to `{ref}`'s device data: the first op mixing the two fails on the "
            "NPU (or the GPU); drop the device override",
        )

    def _module_matching_dtype(self, node: ast.Call, func: ast.Attribute) -> None:
        """``nn.Linear(i, o, dtype=ref.dtype)`` (directly or through ``**factory_kwargs`` of a dict literal the
        function builds) without a device: the module is built to match a live tensor ``ref`` (an adapter beside
        a base layer's weight) yet its parameters are allocated on the CPU, while ``ref`` is on the device (or on
        the meta device, whose deferred initialisation then skips them)."""
        qual = self.ctx.qualname(func) or ""
        if not qual.startswith("torch.nn.") or qual.count(".") != 2:
            return
        func_def = self.ctx.function
        if func_def is None or any(k.arg == "device" for k in node.keywords):
            return
        dtype: ast.expr | None = next((k.value for k in node.keywords if k.arg == "dtype"), None)
        holder: ast.Dict | None = None
        unpacked: ast.expr | None = None
        for k in node.keywords:
            if k.arg is not None:
                continue
            mapping = (
                self._local_dict(func_def, k.value.id, node.lineno) if isinstance(k.value, ast.Name) else None
            )
            if mapping is None:
                return  # an unpacked mapping npu-lint cannot read may carry the device
            keys = [str_value(key) if key is not None else None for key in mapping.keys]
            if None in keys or "device" in keys:
                return
            if "dtype" in keys and dtype is None:
                dtype, holder, unpacked = mapping.values[keys.index("dtype")], mapping, k.value
        if not isinstance(dtype, ast.Attribute) or dtype.attr != "dtype":
            return
        ref = dtype.value
        root = ref
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if not isinstance(root, ast.Name) or any(isinstance(n, ast.Call) for n in subtree(ref)):
            return
        if not tensor_like_ref(ref, func_def) and not self._bound_to_tensor_attr(func_def, ref, node.lineno):
            return  # `config.dtype`, `args.dtype`, `self.dtype`: a dtype setting, not a tensor with a device
        text = self.ctx.source.segment(ref)
        if holder is not None:
            if id(holder) in self._dtype_dicts:
                return  # reported once, at the dict, for the first module built from it
            self._dtype_dicts.add(id(holder))
        shown = qual.replace("torch.nn.", "nn.")
        if holder is not None and unpacked is not None:
            what = (
                f"`{self.ctx.source.segment(unpacked)}` gives `{shown}(...)` (line {node.lineno}) the dtype of "
                f"`{text}` but no device"
            )
            end = self.ctx.source.node_range(holder.values[-1])[1]
            edit = Edit(end, end, f', "device": {text}.device')
        else:
            what = f"`{shown}(...)` copies the dtype of `{text}` but not its device"
            end = self.ctx.source.node_range(dtype)[1]
            edit = Edit(end, end, f", device={text}.device")
        self.report(
            node if holder is None else holder,
            f"{what}: the module's parameters are allocated on the CPU while `{text}` is on the accelerator (or "
            f"on the meta device); add `device={text}.device`",
            make_fix(f"Add `device={text}.device`", [edit]),
        )

    def _bound_to_tensor_attr(self, func: ast.AST, ref: ast.expr, line: int) -> bool:
        """``ref`` is a local name last bound before ``line`` to a parameter-like attribute (``ref =
        self.base_layer.weight``)."""
        if not isinstance(ref, ast.Name):
            return False
        value: ast.expr | None = None
        for stmt in nodes_of(func, ast.Assign):
            assert isinstance(stmt, ast.Assign)
            if stmt.lineno < line and any(isinstance(t, ast.Name) and t.id == ref.id for t in stmt.targets):
                value = stmt.value
        return isinstance(value, ast.Attribute) and tensor_like_ref(value, func)

    def _local_dict(self, func: ast.AST, name: str, line: int) -> ast.Dict | None:
        """The dict literal ``name`` is last bound to before ``line`` in ``func``, when that is its only kind of
        binding there."""
        found: ast.Dict | None = None
        for stmt in nodes_of(func, ast.Assign):
            assert isinstance(stmt, ast.Assign)
            if not any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                continue
            if not isinstance(stmt.value, ast.Dict):
                return None
            if stmt.lineno < line:
                found = stmt.value
        return found

    def _combined_elsewhere(self, node: ast.Call, named: str) -> bool:
        """The allocation is first combined by arithmetic with other data (``pos / torch.tensor(dims)``) that does
        not involve ``named``: the device it must match is that data's, which ``named`` only guesses."""
        func = self.ctx.function
        if func is None:
            return False
        for op in subtree(func):
            if not isinstance(op, ast.BinOp):
                continue
            for mine, other in ((op.left, op.right), (op.right, op.left)):
                if any(n is node for n in subtree(mine)):
                    names = {n.id for n in subtree(other) if isinstance(n, ast.Name)}
                    if names and named not in names and names - {"self", "torch", "math"}:
                        return True
        return False

    # -- does the allocation meet accelerator data? ---------------------------------------------------
    def _accel_names(self, func: ast.AST) -> dict[str, int]:
        """Names holding accelerator tensors in ``func``: parameters annotated, used or named as tensors, and
        locals assigned from a submodule call (``self.norm(x)``), a device move, or from such names through
        arithmetic, method chains and ``torch.*`` ops; each with the line from which it holds one (0 for a
        parameter), so a name moved to the device only later does not count before."""
        cached = self._accel_cache.get(id(func))
        if cached is not None:
            return cached
        names: dict[str, int] = {}
        sites: dict[str, ast.AST] = {}
        self._accel_sites[id(func)] = sites
        assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        args = func.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            if arg.arg in ("self", "cls") or _scalar_annotation(arg.annotation):
                continue
            if (
                is_tensor_annotation(self.ctx, arg.annotation)
                or used_as_tensor(func, arg.arg)
                or _TENSOR_NAME.search(arg.arg)
            ):
                names[arg.arg] = 0
        assigns = [n for n in subtree(func) if isinstance(n, ast.Assign) and len(n.targets) == 1]
        # a name also bound to a device-less allocation holds host data on some path: not evidence of device data
        mixed = {
            a.targets[0].id
            for a in assigns
            if isinstance(a.targets[0], ast.Name) and self._host_allocation(a.value)
        }
        for name in mixed:
            names.pop(name, None)
        changed = True
        while changed:
            changed = False
            for assign in assigns:
                target = assign.targets[0]
                if isinstance(target, (ast.Tuple, ast.List)):
                    # ``_, idx = torch.topk(x, k)``, ``(g, w), (loss, _) = grad_fn(x, w)``: every element an
                    # unpacked result of device computation is device data
                    end = assign.end_lineno or assign.lineno
                    fresh = [
                        n
                        for n in _targets(target)
                        if n not in mixed and n != "_" and (n not in names or 0 < end < names[n])
                    ]
                    nested = any(isinstance(e, (ast.Tuple, ast.List)) for e in target.elts)
                    if nested and not (
                        isinstance(assign.value, ast.Call) and isinstance(assign.value.func, ast.Call)
                    ):
                        continue  # ``x, (f, h, w) = self.patchify(x)``: a nested group is metadata (sizes)
                    if fresh and self._is_accel(assign.value, names):
                        for n in fresh:
                            names[n] = end
                            sites[n] = assign
                        changed = True
                    continue
                if (
                    isinstance(target, ast.Name)
                    and target.id not in mixed
                    and (target.id not in names or 0 < (assign.end_lineno or 0) < names[target.id])
                ):
                    if is_submodule_call(assign.value) or self._is_accel(assign.value, names):
                        names[target.id] = assign.end_lineno or assign.lineno
                        sites[target.id] = assign
                        changed = True
        self._accel_cache[id(func)] = names
        return names

    def _host_allocation(self, value: ast.AST) -> bool:
        """``torch.arange(n)[:, None]``, ``torch.tensor(xs).long()``: a device-less factory at the root."""
        node = value
        while True:
            if isinstance(node, ast.Subscript):
                node = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and not (isinstance(node.func.value, ast.Name))
            ):
                if node.func.attr in MOVES:
                    return False
                node = node.func.value
            else:
                break
        if not isinstance(node, ast.Call):
            return False
        qual = self.ctx.qualname(node.func) or ""
        return (
            qual.startswith("torch.")
            and qual[6:] in FACTORIES
            and not any(k.arg == "device" and _device_value(k.value) for k in node.keywords)
        )

    def _is_accel(self, expr: ast.AST, names: dict[str, int]) -> bool:
        """``expr`` is (a view, a method result or a ``torch.*`` op of) an accelerator tensor, with no host move
        on the way; or a value moved to a device (``.to(x.device)``)."""
        node = expr
        while True:
            if isinstance(node, ast.BinOp):
                return self._is_accel(node.left, names) or self._is_accel(node.right, names)
            if isinstance(node, ast.UnaryOp):
                node = node.operand
                continue
            if is_submodule_call(node):
                return True
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute):
                    if func.attr in HOST_SINKS or func.attr in SCALAR_METHODS or to_cpu(node):
                        return False
                    if func.attr in MOVES and moves_device(self.ctx, node):
                        return self._device_target(node, names)
                    qual = self.ctx.qualname(func) or ""
                    if qual.startswith("torch.") and not isinstance(func.value, ast.Call):
                        if qual[6:] in FACTORIES:
                            return any(k.arg == "device" and _device_value(k.value) for k in node.keywords)
                        return any(self._is_accel(a, names) for a in _call_values(node))
                    node = func.value
                    continue
                if (
                    isinstance(func, ast.Call)
                    or isinstance(func, ast.Name)
                    and func.id not in _HOST_CALLABLES
                    and not func.id[:1].isupper()
                ):
                    if isinstance(func, ast.Name) and self._host_returning(func.id):
                        return False  # a helper of this file that returns host copies (`x.sum(-1).cpu()`)
                    # ``helper(x)``, ``torch.func.grad_and_value(f)(x, w)``: computation on device data returns
                    # device data (a class, ``Foo(x)``, is not a tensor; builtins return host values)
                    return any(self._is_accel(a, names) for a in _call_values(node))
                return False
            if isinstance(node, ast.Subscript):
                node = node.value
                continue
            if isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    return node.attr in self._self_params()
                if node.attr in ("shape", "device", "dtype", "ndim"):
                    return False
                node = node.value
                continue
            if isinstance(node, ast.Name):
                line = names.get(node.id)
                if line is None or line >= node.lineno:
                    return False
                return not line or not self._exclusive(node)
            if isinstance(node, (ast.List, ast.Tuple)):
                return any(self._is_accel(e, names) for e in node.elts)
            return False

    def _host_returning(self, name: str) -> bool:
        """``name`` is a module-level function of this file every ``return`` of which hands back host data: a
        `.cpu()` / `.to("cpu")` copy or a host sink's value (`.tolist()`, `.item()`)."""
        cache = self._host_returning_cache
        if name in cache:
            return cache[name]
        func = next(
            (
                s
                for s in self.ctx.tree.body
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name
            ),
            None,
        )
        values = [r.value for r in own_nodes(func) if isinstance(r, ast.Return)] if func is not None else []
        host = bool(values) and all(
            v is not None
            and all(
                _on_cpu(o, self.ctx, plain=False)
                or (
                    isinstance(o, ast.Call)
                    and isinstance(o.func, ast.Attribute)
                    and o.func.attr in HOST_SINKS
                )
                for o in _outcomes(v)
            )
            for v in values
        )
        cache[name] = host
        return host

    def _exclusive(self, use: ast.Name) -> bool:
        """The assignment that put ``use``'s name on the device is in the other branch of an ``if`` than ``use``."""
        func = self.ctx.function
        if func is None:
            return False
        site = self._accel_sites.get(id(func), {}).get(use.id)
        if site is None:
            return False
        parents = self._parent_map(func)
        chain: dict[int, ast.AST] = {}  # ancestor id -> the child of it on the way to the site
        child: ast.AST = site
        node = parents.get(id(site))
        while node is not None:
            chain[id(node)] = child
            child, node = node, parents.get(id(node))
        child = use
        node = parents.get(id(use))
        while node is not None:
            if id(node) in chain:
                if isinstance(node, ast.If):
                    site_child = chain[id(node)]
                    return (site_child in node.body) != (child in node.body) and child is not node.test
                return False
            child, node = node, parents.get(id(node))
        return False

    def _device_target(self, move: ast.Call, names: dict[str, int]) -> bool:
        """A move whose target is accelerator data: ``.cuda()``, ``.to(x.device)``, ``.to(device)``, ``.to(x)``
        with ``x`` on the device; not ``.to(host_tensor)``."""
        func = move.func
        assert isinstance(func, ast.Attribute)
        if func.attr in ("cuda", "npu"):
            return True
        target = next((k.value for k in move.keywords if k.arg == "device"), None)
        if target is None:
            target = move.args[0] if move.args else None
        if isinstance(target, ast.Attribute) and target.attr == "device":
            return (
                not isinstance(target.value, ast.Name)
                or target.value.id == "self"
                or self._is_accel(target.value, names)
            )
        if isinstance(target, ast.Name):
            return "device" in target.id or self._is_accel(target, names)
        return target is not None and not isinstance(target, ast.Constant)

    def _self_params(self) -> set[str]:
        cls = self.ctx.class_
        if cls is None:
            return set()
        cached = self._param_cache.get(id(cls))
        if cached is None:
            cached = set(self_parameters(cls))
            self._param_cache[id(cls)] = cached
        return cached

    def _parent_map(self, func: ast.AST) -> dict[int, ast.AST]:
        cached = self._parents_cache.get(id(func))
        if cached is None:
            cached = {id(c): p for c, p in walk_pairs(func)}
            self._parents_cache[id(func)] = cached
        return cached

    def _meets_accelerator(self, node: ast.Call) -> ast.AST | None:
        """Where the allocation's value meets accelerator data: the accelerator expression it meets (an operand,
        a sibling argument of a ``torch.*`` op, an indexed tensor, a written buffer), or the call or ``return``
        that hands it to device code. The value is followed through expressions, local names (up to their next
        rebinding), lists it is appended to and in-place writes; a device move or a host sink ends a path."""
        func = self.ctx.function
        if func is None:
            return None
        names = self._accel_names(func)
        parents = self._parent_map(func)
        tainted: set[str] = set()
        # a name the host value is stored in holds it only after that statement: a load on an earlier line
        # still reads the name's device value (``bufs = [host...]; all_gather(bufs, ids); ids = torch.cat(bufs)``)
        self._taint_end: dict[str, int] = {}
        work: list[tuple[ast.AST, bool]] = [(node, False)]
        self._scalar = _scalar_tensor(node)
        self._dict_fields: set[str] = set()  # locals bound to a dict literal that carries the host value
        budget = 200
        while work and budget:
            budget -= 1
            expr, self._boxed = work.pop()
            line = getattr(expr, "lineno", 0)
            live = {
                k: v for k, v in names.items() if k not in tainted or 0 < line <= self._taint_end.get(k, 0)
            }
            met = self._follow(expr, live, parents, work, tainted, func)
            if met is not None:
                return met
        return None

    def _taint(
        self, name: str, stmt: ast.AST, work: list[ast.AST], tainted: set[str], func: ast.AST, parents: dict
    ) -> None:
        key = f"{name}@{id(stmt)}"
        if key in tainted:
            return
        tainted.add(key)
        tainted.add(name)
        end = getattr(stmt, "end_lineno", None) or getattr(stmt, "lineno", 0)
        self._taint_end[name] = min(self._taint_end.get(name, end), end)
        work.extend((use, self._boxed) for use in _loads_after(self.ctx, func, name, stmt, parents))

    def _follow(
        self,
        expr: ast.AST,
        names: dict[str, int],
        parents: dict[int, ast.AST],
        work: list[tuple[ast.AST, bool]],
        tainted: set[str],
        func: ast.AST,
    ) -> ast.AST | None:
        """Climb from one expression carrying the host value to where it meets device data (returned), or to a
        name it is stored in (queued), or to a dead end (None). A 0-dim tensor built from a Python scalar only
        counts where it is an index or a module's input: elsewhere torch treats it as a scalar (no copy)."""
        ctx = self.ctx
        real = self._is_accel
        accel = _never if self._scalar else real
        while True:
            parent = parents.get(id(expr))
            if parent is None:
                return None
            if isinstance(parent, ast.keyword):
                call = parents.get(id(parent))
                if not isinstance(call, ast.Call):
                    return None
                if parent.arg == "out":  # torch.op(..., out=buffer): device inputs written into a host buffer
                    return next((a for a in _call_values(call) if a is not expr and accel(a, names)), None)
                expr, parent = parent, call
            typ = type(parent)
            if typ is ast.Attribute:
                assert isinstance(parent, ast.Attribute)
                grand = parents.get(id(parent))
                if isinstance(grand, ast.Call) and grand.func is parent:
                    attr = parent.attr
                    if attr in HOST_SINKS or attr in SCALAR_METHODS:
                        return None
                    if attr in MOVES and moves_device(ctx, grand):
                        return None
                    if attr in ("append", "extend", "insert", "add"):
                        target = parent.value
                        if isinstance(target, ast.Name):
                            self._taint(target.id, _statement(grand, parents), work, tainted, func, parents)
                        return None
                    # an in-place write of device data into the host tensor fails whatever its size (a CPU
                    # scalar only broadcasts as an operand, never as the destination): ``acc.add_(loss)``
                    judge = real if _in_place(attr) else accel
                    other = next((a for a in _call_values(grand) if judge(a, names)), None)
                    if other is not None:  # buf.copy_(x), mask.masked_fill(x, ...), ids.index_select(0, x)
                        return other
                    expr = grand
                    continue
                if parent.attr in ("shape", "device", "dtype", "ndim", "is_cuda"):
                    return None
                expr = parent
                continue
            if typ is ast.Subscript:
                assert isinstance(parent, ast.Subscript)
                if parent.value is expr:
                    if accel(parent.slice, names):
                        return parent.slice
                    if isinstance(parent.ctx, ast.Store):  # buf[i] = device data
                        stmt = parents.get(id(parent))
                        value = getattr(stmt, "value", None)
                        if value is not None and accel(value, names):
                            return value
                        return None
                    expr = parent
                    continue
                # the value is (part of) an index
                if real(parent.value, names):
                    return parent.value
                return None
            if typ in (ast.Tuple, ast.List):
                assert isinstance(parent, (ast.Tuple, ast.List))
                if not isinstance(parent.ctx, ast.Load):
                    return None
                grand = parents.get(id(parent))
                if isinstance(grand, ast.Subscript) and grand.slice is parent:
                    if real(grand.value, names):
                        return grand.value
                    return None
                if isinstance(grand, ast.Return) and not self._scalar:
                    self._note_beside(expr, parent.elts, names)
                expr = parent
                continue
            if typ is ast.Dict:
                assert isinstance(parent, ast.Dict)
                if expr not in parent.values:
                    return None
                if isinstance(parents.get(id(parent)), ast.Return) and not self._scalar:
                    self._note_beside(expr, parent.values, names)
                expr = parent
                continue
            if typ in (ast.UnaryOp, ast.Starred, ast.IfExp, ast.ListComp, ast.GeneratorExp, ast.NamedExpr):
                if typ is ast.IfExp and parent.test is expr:  # type: ignore[attr-defined]
                    return None
                if typ in (ast.ListComp, ast.GeneratorExp):
                    if parent.elt is not expr:  # type: ignore[attr-defined]
                        return None
                    self._boxed = (
                        True  # a list of host tensors (matcher indices...) is host data when returned
                    )
                if typ is ast.NamedExpr:
                    self._taint(parent.target.id, _statement(parent, parents), work, tainted, func, parents)  # type: ignore[attr-defined]
                expr = parent
                continue
            if typ is ast.BinOp:
                assert isinstance(parent, ast.BinOp)
                other = parent.right if parent.left is expr else parent.left
                if accel(other, names):
                    return other
                if self._scalar and real(other, names):
                    return None
                expr = parent
                continue
            if typ is ast.Compare:
                assert isinstance(parent, ast.Compare)
                other = next(
                    (o for o in [parent.left, *parent.comparators] if o is not expr and accel(o, names)), None
                )
                if other is not None or self._scalar:
                    return other
                expr = parent  # ``idx[None, :] < lengths[:, None]``: an elementwise mask of the host tensor
                continue
            if typ is ast.Call:
                assert isinstance(parent, ast.Call)
                if parent.func is expr:
                    return None
                callee = parent.func
                if (
                    isinstance(callee, ast.Attribute)
                    and callee.attr in ("append", "extend", "insert")
                    and isinstance(callee.value, ast.Name)
                    and callee.value.id not in names
                ):
                    # ``bufs.append(torch.zeros(...))``: the list now holds host data (collective buffers...)
                    self._boxed = True
                    self._taint(callee.value.id, _statement(parent, parents), work, tainted, func, parents)
                    return None
                if self._calls_module(parent, func):
                    carried = expr.value if isinstance(expr, ast.keyword) else expr
                    if isinstance(carried, ast.Dict) or (
                        isinstance(carried, ast.Name) and carried.id in self._dict_fields
                    ):
                        # a field of a dict handed to a module (`self(x, metadata={'cu_seqlens': host})`): the
                        # module reads it by name, as host metadata or moved (VeOmni's ViT metadata stays on the
                        # CPU on purpose); what it does with the field is its own code's question
                        return None
                    other = next((a for a in _call_values(parent) if a is not expr and accel(a, names)), None)
                    return other if other is not None else parent
                if isinstance(callee, ast.Attribute) and accel(callee.value, names):
                    return callee.value  # x.masked_fill(mask, ...), x.index_select(0, ids)
                qual = ctx.qualname(callee) or ""
                if qual.startswith("torch."):
                    if any(k.arg == "device" and _device_value(k.value) for k in parent.keywords):
                        # ``torch.linspace(torch.tensor(lo), hi, n, device=x.device)``: placed on that device
                        return None
                    other = next((a for a in _call_values(parent) if a is not expr and accel(a, names)), None)
                    if other is not None:
                        return other
                    if self._collective_operand(qual, parent, expr):
                        self._collective = True
                        return parent
                    if qual[6:] in _JOINS and parent.args and parent.args[0] is expr:
                        self._boxed = False  # a list of host tensors joined into one host tensor
                    expr = parent
                    continue
                if (
                    isinstance(callee, ast.Name)
                    and callee.id not in _HOST_CALLABLES
                    and not callee.id[:1].isupper()
                    and isinstance(parents.get(id(parent)), ast.Assign)
                    and not self._device_handed(parent, expr, names)
                ):
                    # ``freqs = slice_for_rank(freqs, dim=0)``, ``freqs = precompute_freqs(indices_grid=grid,
                    # dim=d)``: a helper handed the host value and no device (no device tensor, no ``device=``)
                    # computes its result where that value lives
                    expr = parent
                    continue
                return None
            if typ is ast.comprehension:
                # iterating a list of host tensors: each element the loop binds is a host tensor
                assert isinstance(parent, ast.comprehension)
                owner = parents.get(id(parent))
                if parent.iter is not expr or not isinstance(parent.target, ast.Name) or owner is None:
                    return None
                loop = parent.target.id
                for part in (
                    getattr(owner, "elt", None),
                    getattr(owner, "key", None),
                    getattr(owner, "value", None),
                ):
                    if part is not None:
                        work.extend(
                            (n, False)
                            for n in subtree(part)
                            if isinstance(n, ast.Name) and n.id == loop and isinstance(n.ctx, ast.Load)
                        )
                return None
            if typ in (ast.Assign, ast.AnnAssign, ast.AugAssign):
                targets = parent.targets if typ is ast.Assign else [parent.target]  # type: ignore[attr-defined]
                if parent.value is not expr:  # type: ignore[attr-defined]
                    return None
                for target in targets:
                    if typ is ast.AugAssign and accel(target, names):
                        return target
                    if isinstance(target, ast.Name):
                        if isinstance(expr, ast.Dict):
                            self._dict_fields.add(target.id)
                        self._taint(target.id, parent, work, tainted, func, parents)
                    elif isinstance(target, ast.Subscript) and accel(target.value, names):
                        return target.value  # device[idx] = host value
                    elif isinstance(target, (ast.Subscript, ast.Attribute)):
                        written = self._written_later(target, parent, func, names)
                        if written is not None:
                            return written  # ``self.counts[k] = host``, later ``self.counts[k] += device``
                return None
            if typ is ast.Return:
                # handed back to device code: reported when the function works on device data
                if self._boxed or self._scalar:
                    return None
                self._reached_return = True
                if not names and self._returns_device_code(func):
                    self._returned = True  # a helper without device data: judged at its call sites (finish)
                return parent if names and self._returns_device_code(func) else None
            return None

    def _report_beside(self, node: ast.Call, factory: str, beside: ast.AST) -> None:
        """Off the forward path: the allocation is returned beside a device tensor, so the caller (a dummy-input
        builder's, a loss helper's) receives mixed devices, whatever path calls it."""
        shown = self.ctx.source.segment(beside)
        source = f"{shown}.device" if isinstance(beside, (ast.Name, ast.Attribute)) else None
        self.report(
            node,
            f"`torch.{factory}(...)` without `device=` allocates on the CPU and is returned beside `{shown}`, a "
            "device tensor: the caller receives mixed devices"
            + (f"; add `device={source}`" if source else "; allocate it on that tensor's device"),
            make_fix(f"Add `device={source}`", [self._device_edit(node, source)]) if source else None,
        )

    def _note_beside(self, expr: ast.AST, siblings: list, names: dict[str, int]) -> None:
        """The host value is returned in one tuple, list or dict with a device tensor (``return {"features":
        pixels_on_device, "grid_thw": host}``): remember that sibling; the caller gets mixed devices."""
        if self._beside is not None:
            return
        for sib in siblings:
            if sib is expr or sib is None or isinstance(sib, ast.Starred):
                continue
            if self._is_accel(sib, names):
                self._beside = sib
                return

    def _init_builders(self) -> set[str]:
        """Names the file's construction methods (``__init__``, ``_init_weights``...) call or refer to: a builder
        whose tensors become parameters or buffers, which move with the module."""
        cached = self.ctx.memo.get("npu103-init-builders")
        if cached is None:
            cached = set()
            for func in nodes_of(self.ctx.tree, ast.FunctionDef):
                if is_init_method(func.name):  # type: ignore[attr-defined]
                    for n in subtree(func):
                        if isinstance(n, ast.Attribute):
                            cached.add(n.attr)
                        elif isinstance(n, ast.Name):
                            cached.add(n.id)
            self.ctx.memo["npu103-init-builders"] = cached
        return cached  # type: ignore[return-value]

    def _device_parameter(self) -> str | None:
        """The parameter of the enclosing function that hands it a device (``device``, ``target_device``, or one
        annotated as a device), unless it defaults to the CPU; the innermost such function."""
        for scope in reversed(self.ctx.parents):
            if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = scope.args
            positional = [*args.posonlyargs, *args.args]
            defaults: dict[str, ast.expr] = dict(
                zip(
                    [a.arg for a in positional[len(positional) - len(args.defaults) :]],
                    args.defaults,
                    strict=True,
                )
            )
            defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d})
            for arg in [*positional, *args.kwonlyargs]:
                ann = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                named = arg.arg == "device" or arg.arg.endswith("_device")
                if not (named or "device" in ann.lower()):
                    continue
                default = defaults.get(arg.arg)
                if default is not None and _names_cpu(default):
                    continue
                return arg.arg
            return None
        return None

    def _device_handed(self, call: ast.Call, carried: ast.AST, names: dict[str, int]) -> bool:
        """Any argument of ``call`` but ``carried`` gives the callee a device: a device tensor, a ``device=``
        keyword, a ``.device`` read or a name spelt like a device (the helper may move the value there)."""
        if isinstance(carried, ast.keyword):
            carried = carried.value
        for kw in call.keywords:
            if kw.value is carried:
                continue
            if kw.arg is None or "device" in kw.arg:
                return True
        for value in _call_values(call):
            if value is carried or any(n is carried for n in subtree(value)):
                continue
            if self._is_accel(value, names):
                return True
            for n in subtree(value):
                if (isinstance(n, ast.Attribute) and n.attr == "device") or (
                    isinstance(n, ast.Name) and "device" in n.id
                ):
                    return True
        return False

    def _host_resident_root(self, expr: ast.AST) -> str | None:
        """``self.<attr>`` at the root of ``expr`` (through items, slices and method calls) when ``<attr>`` is a
        plain attribute the class's ``__init__`` builds on the host: ``model.to(device)`` moves parameters and
        buffers only, so it stays on the CPU."""
        node = expr
        while True:
            if isinstance(node, ast.Subscript):
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in MOVES or node.func.attr in HOST_SINKS:
                    return None
                node = node.func.value
            else:
                break
        if not (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
        ):
            return None
        cls = self.ctx.class_
        if cls is None:
            return None
        key = (cls.name, node.attr)
        cached = self._host_attr_cache.get(key)
        if cached is None:
            cached = self._host_attr_cache[key] = self._built_on_host(cls, node.attr)
        return node.attr if cached else None

    def _built_on_host(self, cls: ast.ClassDef, attr: str) -> bool:
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            return False
        values = [
            n.value
            for n in subtree(init)
            if isinstance(n, ast.Assign)
            and any(
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
                and t.attr == attr
                for t in n.targets
            )
        ]
        if not values:
            return False
        for value in values:
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and self._host_builder(value.func.id)
            ):
                continue
            return False
        return True

    def _host_builder(self, name: str, depth: int = 0) -> bool:
        """A module-level function of this file that can only build host tensors: every parameter is a Python
        scalar (``dim: int, theta: float``), nothing in it names or moves to a device other than its own locals'
        (``device=freqs.device``), and it creates tensors (a ``torch.*`` factory, or another such builder)."""
        func = next(
            (s for s in self.ctx.tree.body if isinstance(s, ast.FunctionDef) and s.name == name), None
        )
        if func is None or depth > 3:
            return False
        args = func.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        if (
            args.vararg
            or args.kwarg
            or not params
            or not all(_scalar_annotation(a.annotation) for a in params)
        ):
            return False
        creates = False
        for node in subtree(func):
            if isinstance(node, ast.keyword) and node.arg == "device":
                value = node.value
                if not (
                    isinstance(value, ast.Attribute)
                    and value.attr == "device"
                    and isinstance(value.value, ast.Name)
                ):
                    return False
            elif isinstance(node, ast.Attribute) and node.attr in ("to", "cuda", "npu"):
                return False
            elif isinstance(node, ast.Call):
                qual = self.ctx.qualname(node.func) or ""
                if qual.startswith("torch.") and qual[6:] in FACTORIES:
                    creates = True
                elif (
                    isinstance(node.func, ast.Name)
                    and node.func.id != name
                    and self._host_builder(node.func.id, depth + 1)
                ):
                    creates = True
        return creates

    def _hooked_methods(self, forward: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Methods of the file's other classes (monitors, hooks' state) taking a tensor-annotated parameter that a
        forward-path function calls on an object (``monitor.record(module, router_indices)`` in a forward hook):
        they are handed device data, so their allocations meet it like a forward's."""
        methods = self._tensor_methods()
        if not methods:
            return set()
        by_name = {m: (c, m) for c, m in methods}
        bodies: list[ast.AST] = []
        for stmt in self.ctx.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and ("", stmt.name) in forward:
                bodies.append(stmt)
            elif isinstance(stmt, ast.ClassDef):
                bodies.extend(
                    f
                    for f in stmt.body
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and (stmt.name, f.name) in forward
                )
        out: set[tuple[str, str]] = set()
        for body in bodies:
            for node in subtree(body):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in by_name
                    and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("self", "cls"))
                ):
                    out.add(by_name[node.func.attr])
        return out

    def _tensor_methods(self) -> set[tuple[str, str]]:
        """Methods of the file's other classes that take a parameter annotated as a tensor."""
        out: set[tuple[str, str]] = set()
        for stmt in self.ctx.tree.body:
            if not isinstance(stmt, ast.ClassDef) or stmt.name in self.module_classes:
                continue
            for method in stmt.body:
                if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or is_init_method(
                    method.name
                ):
                    continue
                args = method.args
                if any(is_tensor_annotation(self.ctx, a.annotation) for a in [*args.args, *args.kwonlyargs]):
                    out.add((stmt.name, method.name))
        return out

    def _written_later(
        self, target: ast.expr, stmt: ast.AST, func: ast.AST, names: dict[str, int]
    ) -> ast.AST | None:
        """The device value a later statement of ``func`` writes in place into the slot ``target`` names (the same
        attribute or item expression): ``slot += x`` or ``slot.add_(x)``; the slot then holds a host tensor that
        device data is accumulated into."""
        shape = ast.dump(target.value if isinstance(target, ast.Subscript) else target)
        whole = ast.dump(target)
        line = getattr(stmt, "end_lineno", 0) or 0
        for node in subtree(func):
            if getattr(node, "lineno", 0) <= line:
                continue
            if isinstance(node, ast.AugAssign) and ast.dump(node.target) in (whole, shape):
                if self._is_accel(node.value, names):
                    return node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and _in_place(node.func.attr)
                and ast.dump(node.func.value) == whole
            ):
                hit = next((a for a in _call_values(node) if self._is_accel(a, names)), None)
                if hit is not None:
                    return hit
        return None

    def _collective_operand(self, qual: str, call: ast.Call, expr: ast.AST) -> bool:
        """``expr`` is a tensor operand of a ``torch.distributed`` collective (not its group), in a file that uses
        no CPU (gloo) group."""
        if (
            self._gloo
            or not qual.startswith("torch.distributed.")
            or qual.rsplit(".", 1)[-1] not in _COLLECTIVES
        ):
            return False
        if any(k.value is expr and k.arg not in _COLLECTIVE_TENSOR_KW for k in call.keywords):
            return False
        return not any(
            "cpu" in (self.ctx.source.segment(k.value) or "").lower()
            for k in call.keywords
            if k.arg == "group"
        )

    def _returns_device_code(self, func: ast.AST) -> bool:
        """The function is a module method or a forward-path helper (not a host-side metadata builder)."""
        name = getattr(func, "name", "")
        return not name.startswith(("prepare_", "build_", "_build", "collate", "_collate"))

    def _calls_module(self, call: ast.Call, func: ast.AST) -> bool:
        """A call into a module: ``self.proj(x)``, ``self(...)``, ``self.get_input_embeddings()(ids)``, or a
        loop variable over a module list (``for block in self.blocks: block(x)``)."""
        callee = call.func
        if is_submodule_call(call):
            attr = (callee.value if isinstance(callee, ast.Subscript) else callee).attr  # type: ignore[attr-defined]
            return attr not in self._class_methods()
        if isinstance(callee, ast.Name):
            return callee.id == "self" or callee.id in self._module_loop_names(func)
        if isinstance(callee, ast.Call) and isinstance(callee.func, ast.Attribute):
            inner = callee.func
            return (
                isinstance(inner.value, ast.Name)
                and inner.value.id == "self"
                and inner.attr.startswith("get_")
            )
        return False

    def _class_methods(self) -> set[str]:
        """Methods of the enclosing class: ``self.helper(x)`` is a call into plain code, not a submodule."""
        cls = self.ctx.class_
        if cls is None:
            return set()
        return {s.name for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def _module_loop_names(self, func: ast.AST) -> set[str]:
        key = ("npu103-loop-modules", id(func))
        cached = self.ctx.memo.get(key)
        if cached is not None and cached[0] is func:  # type: ignore[index]
            return cached[1]  # type: ignore[index]
        out: set[str] = set()
        for node in subtree(func):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                it = node.iter
                if (
                    isinstance(it, ast.Call)
                    and isinstance(it.func, ast.Name)
                    and it.func.id in ("enumerate", "zip")
                ):
                    it = it.args[0] if it.args else it
                while isinstance(it, ast.Subscript):
                    it = it.value
                if isinstance(it, ast.Attribute) and isinstance(it.value, ast.Name) and it.value.id == "self":
                    target = node.target
                    if isinstance(target, ast.Tuple) and target.elts:
                        target = target.elts[-1]
                    if isinstance(target, ast.Name):
                        out.add(target.id)
        self.ctx.memo[key] = (func, out)
        return out

    def _copies_device_tensor(self, node: ast.Call) -> bool:
        """``torch.tensor(x)`` / ``torch.as_tensor(x)`` whose data ``x`` is itself accelerator data (a tensor
        parameter, or a local built from device data): the copy keeps its device. A list or tuple display is
        not (its elements are gathered on the host), nor a sequence built from one (``[n] * count``, ``a + [b]``),
        whatever tensors size or fill it."""
        data = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "data"), None)
        if data is None or _host_sequence(data):
            return False
        func = self.ctx.function
        if func is None:
            return False
        if self._is_accel(data, self._accel_names(func)):
            return True
        # indexed like a tensor (``x[:, 0]``: lists do not take a tuple index), in a file without numpy (whose
        # arrays index the same way and do land on the CPU)
        if not isinstance(data, ast.Name) or any(
            q.split(".")[0] == "numpy" for q in self.ctx.imports.values()
        ):
            return False
        return any(
            isinstance(sub, ast.Subscript)
            and isinstance(sub.value, ast.Name)
            and sub.value.id == data.id
            and isinstance(sub.slice, ast.Tuple)
            and any(isinstance(e, ast.Slice) for e in sub.slice.elts)
            for sub in ast.walk(func)
        )

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
            if attr.attr in HOST_SINKS:
                return True
            if attr.attr in MOVES and moves_device(ctx, call):
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
        parameter, a local bound before the allocation, ``self.<param>``); else ``device_source()``. An
        allocation that copies a tensor's dtype (``dtype=t.dtype``) takes that tensor's device."""
        paired = self._dtype_partner(node)
        if paired is not None:
            text, name = paired
            if name not in {n.id for n in subtree(met) if isinstance(n, ast.Name)}:
                self._guessed.add(id(node))  # the data met is another tensor: check they share a device
            return f"{text}.device"
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
            if (root.id in params or bound_before(func, root.id, node.lineno)) and self._always_tensor(
                func, root.id
            ):
                return f"{root.id}.device"
            if root.id not in params and bound_before(func, root.id, node.lineno):
                # the data met is a local that may not always be a tensor: another tensor's device is a guess
                self._guessed.add(id(node))
        return device_source(self.ctx)

    def _dtype_partner(self, node: ast.Call) -> tuple[str, str] | None:
        """``dtype=<expr>.dtype`` of a local tensor expression bound before the allocation: ``<expr>``'s text and
        its root name (None for ``self`` attributes, calls and names not bound there)."""
        value = next((k.value for k in node.keywords if k.arg == "dtype"), None)
        if not isinstance(value, ast.Attribute) or value.attr != "dtype":
            return None
        root = value.value
        while isinstance(root, (ast.Subscript, ast.Attribute)):
            root = root.value
        func = self.ctx.function
        if not isinstance(root, ast.Name) or root.id == "self" or func is None:
            return None
        params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
        if root.id not in params and not bound_before(func, root.id, node.lineno):
            return None
        if any(isinstance(n, ast.Call) for n in subtree(value.value)):
            return None
        if not tensor_like_ref(value.value, func):
            return None  # `config.dtype`: a dtype setting, whose object has no device
        return self.ctx.source.segment(value.value), root.id

    def _always_tensor(self, func: ast.AST, name: str) -> bool:
        """Every binding of ``name`` in ``func`` is a tensor (a tensor parameter, a submodule call, device data):
        ``n = min(t.max(), limit)`` can be a plain int, whose ``.device`` raises."""
        names = self._accel_names(func)
        assert isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        args = func.args
        if (
            name in {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
            and names.get(name) != 0
        ):
            return False
        for sub in ast.walk(func):
            if isinstance(sub, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in sub.targets
            ):
                if len(sub.targets) != 1 or not (
                    is_submodule_call(sub.value) or self._is_accel(sub.value, names)
                ):
                    return False
            elif isinstance(sub, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr, ast.withitem)):
                target = getattr(sub, "target", None) or getattr(sub, "optional_vars", None)
                if target is not None and any(
                    isinstance(t, ast.Name) and t.id == name for t in ast.walk(target)
                ):
                    if (
                        isinstance(sub, ast.AnnAssign)
                        and sub.value is not None
                        and self._is_accel(sub.value, names)
                    ):
                        continue
                    if isinstance(sub, ast.AugAssign):
                        continue  # ``x += 1`` keeps a tensor a tensor
                    return False
        return True

    def _self_move(self, unit: tuple[str, str], node: ast.Call, func: ast.Attribute) -> None:
        """``<expr of self.b>.to(self.b.device)``: the target is the device the value already comes from."""
        target = (
            node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "device"), None)
        )
        if not (isinstance(target, ast.Attribute) and target.attr == "device"):
            return
        source = target.value
        if not (
            isinstance(source, ast.Attribute)
            and isinstance(source.value, ast.Name)
            and source.value.id == "self"
        ):
            return
        root: ast.AST = func.value
        while True:
            if isinstance(root, ast.Call):
                root = root.func
            elif isinstance(root, ast.Subscript):
                root = root.value
            elif isinstance(root, ast.Attribute) and not (
                isinstance(root.value, ast.Name) and root.value.id == "self"
            ):
                root = root.value
            else:
                break
        if isinstance(root, ast.Attribute) and ast.dump(root) == ast.dump(source):
            self.self_moves.append((unit, node, f"self.{source.attr}"))

    def finish(self) -> None:
        if self.self_moves:
            forward = self._forward_units()
            for unit, node, attr in self.self_moves:
                if unit in forward:
                    self.report(
                        node,
                        f"`.to({attr}.device)` moves a value of `{attr}` to the device `{attr}` is already on: "
                        "it never moves; when the buffer stays on the CPU (a non-persistent buffer after meta "
                        "init or CPU offload) the result meets the forward's device data on the CPU; move it to "
                        "the device of the input data",
                    )
        if self.helper_returns:
            self._helper_allocations()
        if self.cpu_devices:
            forward = self._forward_units()
            for unit, node, factory, text, reason in self.cpu_devices:
                if unit in forward:
                    self.report(
                        node,
                        f"`torch.{factory}(..., device={text})` allocates on the device of {reason}; take the "
                        "device from the forward's input data",
                    )
        if self.host_attrs:
            forward = self._forward_units()
            for unit, node, attr in self.host_attrs:
                if unit in forward:
                    self.report(
                        node,
                        f"`self.{attr}` is a plain attribute built on the CPU in `__init__` (not a buffer or "
                        "parameter, so `model.to(device)` does not move it) and meets device data here; move it "
                        f"(`.to(x.device)`) or register it as a non-persistent buffer",
                    )
        if self.generator_draws:
            self._accelerator_generator_draws()
        if "Generator()" in self.ctx.source.text:
            self._host_generators_used_on_device()
        if self.generators:
            forward = self._forward_units()
            for unit, node in self.generators:
                if unit in forward and not self._host_draws_only(node):
                    self.report(
                        node,
                        "`torch.Generator()` without `device=` is a CPU generator on the forward path: random ops "
                        "on the accelerator reject it (or draw on the CPU and copy); create it with the data's "
                        "device (`torch.Generator(device=x.device)`)",
                    )
        if not self.pending:
            return
        forward = self._forward_units()
        for unit, node, factory, source in self.pending:
            if (
                unit not in forward
                and id(node) in self.returned_beside
                and unit[1] not in self._init_builders()
                and not is_init_method(unit[1])
            ):
                self._report_beside(node, factory, self.returned_beside[id(node)])
                continue
            if unit not in forward and id(node) not in self._collective_met:
                continue
            collective = self._collective_met.get(id(node))
            if collective and unit not in forward:
                shown = collective.replace("torch.distributed.", "dist.")
                fix = (
                    make_fix(f"Add `device={source}`", [self._device_edit(node, source)]) if source else None
                )
                self.report(
                    node,
                    f"`torch.{factory}(...)` without `device=` allocates on the CPU and is handed to `{shown}`: the "
                    "collective backends (HCCL on Ascend, NCCL) take device tensors only; "
                    + (f"add `device={source}`" if source else "create it on the current device"),
                    fix,
                )
                continue
            if source is None:
                self.report(
                    node,
                    f"`torch.{factory}(...)` without `device=` allocates on the CPU on the forward path, where it "
                    "meets device data; no fix is offered: npu-lint cannot tell which tensor here carries that "
                    "device (add `device=` from one that does)",
                )
                continue
            if id(node) in self._guessed:
                fix = make_fix(
                    f"Add `device={source}`",
                    [self._device_edit(node, source)],
                    Applicability.UNSAFE,
                    f"`{source}` is a tensor in scope, not the data the allocation meets: check they share a device",
                )
            else:
                fix = make_fix(f"Add `device={source}`", [self._device_edit(node, source)])
            self.report(
                node,
                f"`torch.{factory}(...)` without `device=` allocates on the CPU on the forward path; "
                f"add `device={source}`",
                fix,
            )

    def _off_device(self, value: ast.AST) -> str | None:
        """Why a ``device=`` value is not the compute device (the reason, for the message), or None: the device of
        a tensor that stays on the CPU, or of a tensor this function itself copies to another tensor's device
        (``meta.to(hidden_states.device)``: ``meta`` is host data), directly or as one outcome of a local
        (``device = meta.device if use_meta else hidden_states.device``)."""
        if self._cpu_resident_device(value):
            return _CPU_RESIDENT
        func = self.ctx.function
        if func is None:
            return None
        outcomes: list[ast.AST] = [value]
        if isinstance(value, ast.Name):
            values = self._local_values(func).get(value.id, [])
            if len(values) != 1:
                return None
            outcomes = _outcomes(values[0])
        for expr in outcomes:
            if not (isinstance(expr, ast.Attribute) and expr.attr == "device"):
                continue
            if expr is not value and self._cpu_resident_device(expr):
                return _CPU_RESIDENT
            if not isinstance(expr.value, ast.Name):
                continue
            moved = self._moved_elsewhere(expr.value.id, func)
            if moved is not None:
                target, line = moved
                return (
                    f"`{expr.value.id}`, which this function itself copies to `{target}` (line {line}): it is "
                    "host data, not on the compute device"
                )
        return None

    def _local_values(self, func: ast.AST) -> dict[str, list[ast.expr]]:
        key = ("npu103-local-values", id(func))
        table = self.ctx.memo.get(key)
        if table is None or table[0] is not func:  # type: ignore[index]
            values_of: dict[str, list[ast.expr]] = {}
            for n in subtree(func):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            values_of.setdefault(t.id, []).append(n.value)
            table = (func, values_of)
            self.ctx.memo[key] = table
        return table[1]  # type: ignore[index]

    def _moved_elsewhere(self, name: str, func: ast.AST) -> tuple[str, int] | None:
        """(target, line) of ``<name>.to(<data>.device, ...)`` in ``func`` whose result goes to another name, where
        ``name`` is host-side data: the copy is asynchronous (``non_blocking=True``, the host-to-device idiom) or
        ``name`` is read from a container (batch metadata). None when ``name`` is ever rebound to a moved copy
        (``x = x.to(...)``: after it, ``x.device`` is the compute device) or the target is a submodule's device
        (``self.<sub>.weight.device``: model-parallel placement, not a host copy)."""
        for values in (self._local_values(func).get(name, []),):
            for v in values:
                if any(
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MOVES
                    for n in ast.walk(v)
                ):
                    return None
        for n in subtree(func):
            if not (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "to"
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == name
            ):
                continue
            target = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "device"), None)
            if not (
                isinstance(target, ast.Attribute)
                and target.attr == "device"
                and isinstance(
                    target.value, ast.Name
                )  # the device of data (`self.<sub>.weight.device` is placement)
                and target.value.id not in (name, "self")
            ):
                continue
            asynchronous = any(
                k.arg == "non_blocking" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in n.keywords
            )
            if asynchronous or self._read_from_container(name, func):
                return self.ctx.source.segment(target), n.lineno
        return None

    def _read_from_container(self, name: str, func: ast.AST) -> bool:
        """``name`` is bound once, to an entry of a container (``meta.get("k")``, ``kwargs["k"]``, possibly under
        a conditional): side data that arrives with the batch, not the forward's own input tensor."""
        values = self._local_values(func).get(name, [])
        if len(values) != 1:
            return False
        return any(
            isinstance(o, ast.Subscript)
            or (
                isinstance(o, ast.Call)
                and isinstance(o.func, ast.Attribute)
                and o.func.attr in ("get", "pop")
            )
            for o in _outcomes(values[0])
        )

    def _cpu_resident_device(self, value: ast.AST) -> bool:
        """`<x>.device` where `<x>` is a tensor kept on the CPU: a local or `self.<attr>` (assigned in the class's
        `__init__` as a plain attribute, not a buffer or parameter) holding a `.cpu()` copy, a `device="cpu"`
        allocation, or a device-less factory result stored as a plain attribute."""
        if not (isinstance(value, ast.Attribute) and value.attr == "device"):
            return False
        base = value.value
        if isinstance(base, ast.Name):
            func = self.ctx.function
            if func is None:
                return False
            merged: dict[str, list[ast.expr]] = {}
            # the innermost function's locals, then those of the functions it is nested in (closures)
            for scope in reversed(self.ctx.parents):
                if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for name, values in self._local_values(scope).items():
                    merged.setdefault(name, values)
            return _local_on_cpu(base.id, merged, self.ctx, 3)
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "self":
            cls = self.ctx.class_
            if cls is None:
                return False
            init = next(
                (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None
            )
            if init is None:
                return False
            values = [
                n.value
                for n in subtree(init)
                if isinstance(n, ast.Assign)
                and any(
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and t.attr == base.attr
                    for t in n.targets
                )
            ]
            return bool(values) and all(_on_cpu(v, self.ctx, plain=True) for v in values)
        return False

    def _helper_allocations(self) -> None:
        """A helper that returns a host allocation, called from a module's forward-path method whose result is
        used there without a device move: the tensor reaches the forward on the CPU."""
        forward = self._forward_units()
        # ("", function) or (class, method) -> its calls from the forward-path methods (a method only from its
        # own class's methods, through ``self.<method>(...)``)
        callers: dict[tuple[str, str], list[tuple[ast.Call, ast.AST]]] = {}
        classes = self.module_classes | self.plain_classes
        for stmt in self.ctx.tree.body:
            if not isinstance(stmt, ast.ClassDef) or stmt.name not in classes:
                continue
            for method in stmt.body:
                if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if (stmt.name, method.name) not in forward:
                    continue
                for node in subtree(method):
                    if not isinstance(node, ast.Call):
                        continue
                    callee = node.func
                    if isinstance(callee, ast.Name):
                        callers.setdefault(("", callee.id), []).append((node, method))
                    elif (
                        isinstance(callee, ast.Attribute)
                        and isinstance(callee.value, ast.Name)
                        and callee.value.id == "self"
                        and callee.attr != method.name
                    ):
                        callers.setdefault((stmt.name, callee.attr), []).append((node, method))
        for unit, node, factory in self.helper_returns:
            if unit[0] and is_init_method(unit[1]):
                continue
            sites = [
                (call, method)
                for call, method in callers.get(unit, [])
                if not _moved_after(call, method)
                and (
                    self._result_meets_device(call, method) if unit[0] else not self._host_only(call, method)
                )
            ]
            if not sites:
                continue
            call, method = sites[0]
            shown = f"self.{unit[1]}" if unit[0] else unit[1]
            self.report(
                node,
                f"`torch.{factory}(...)` without `device=` allocates on the CPU in `{shown}`, whose result "
                f"`{method.name}` (line {call.lineno}) uses on the forward path; pass the device in (from the "
                "caller's data) and allocate with `device=`",
            )

    def _host_only(self, call: ast.Call, method: ast.AST) -> bool:
        """The result of ``call`` is only read on the host: each read (of the call itself, or of the one local it
        is bound to) is the receiver of a host sink or a scalar method (`sizes.tolist()`, `n.item()`) or a
        metadata attribute (`.shape`); it never reaches device code."""
        parents = self._parent_map(method)
        stmt = parents.get(id(call))
        uses: list[ast.AST] = [call]
        if isinstance(stmt, ast.Assign) and stmt.value is call:
            if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
                return False
            bound = stmt.targets[0].id
            uses = [
                n
                for n in subtree(method)
                if isinstance(n, ast.Name)
                and n.id == bound
                and isinstance(n.ctx, ast.Load)
                and n.lineno > call.lineno
            ]
        if not uses:
            return False
        for use in uses:
            attr = parents.get(id(use))
            if not (isinstance(attr, ast.Attribute) and attr.value is use):
                return False
            if attr.attr in ("shape", "dtype", "ndim"):
                continue
            grand = parents.get(id(attr))
            if not (
                isinstance(grand, ast.Call)
                and grand.func is attr
                and (attr.attr in HOST_SINKS or attr.attr in SCALAR_METHODS)
            ):
                return False
        return True

    def _result_meets_device(self, call: ast.Call, method: ast.AST) -> bool:
        """The result of ``call`` (a method on ``self``) is combined with the caller's device data: an operand
        of arithmetic or a comparison, a sibling argument of a ``torch.*`` op or of a device tensor's method, or
        an index into a device tensor; directly or through the local it is assigned to. A result collected into
        a list or handed on (``get_rope_index`` building host position ids) is not."""
        names = self._accel_names(method)
        parents = self._parent_map(method)
        uses: list[ast.AST] = [call]
        stmt = parents.get(id(call))
        if isinstance(stmt, ast.Assign) and stmt.value is call:
            bound = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            uses = [
                n
                for n in subtree(method)
                if isinstance(n, ast.Name)
                and n.id in bound
                and isinstance(n.ctx, ast.Load)
                and n.lineno > call.lineno
            ]
        for use in uses:
            expr: ast.AST = use
            for _ in range(8):
                parent = parents.get(id(expr))
                if isinstance(parent, ast.BinOp):
                    other = parent.right if parent.left is expr else parent.left
                    if self._is_accel(other, names):
                        return True
                    expr = parent
                    continue
                if isinstance(parent, ast.Compare):
                    if any(
                        o is not expr and self._is_accel(o, names) for o in [parent.left, *parent.comparators]
                    ):
                        return True
                    break
                if isinstance(parent, ast.Subscript):
                    if parent.value is not expr:
                        if self._is_accel(parent.value, names):
                            return True
                        break
                    expr = parent
                    continue
                if isinstance(parent, (ast.List, ast.Tuple)) and isinstance(
                    parents.get(id(parent)), ast.Call
                ):
                    expr = parent
                    continue
                if isinstance(parent, ast.Call) and parent.func is not expr:
                    callee = parent.func
                    if isinstance(callee, ast.Attribute) and self._is_accel(callee.value, names):
                        return True
                    qual = self.ctx.qualname(callee) or ""
                    if qual.startswith("torch.") and any(
                        a is not expr and self._is_accel(a, names) for a in _call_values(parent)
                    ):
                        return True
                break
        return False

    def _accelerator_generators(self) -> dict[str, int]:
        """Source text of each name or ``self.<attr>`` bound to ``torch.Generator(device=...)`` with a device that
        is not the CPU -> the line of that binding."""
        out: dict[str, int] = {}
        for node in nodes_of(self.ctx.tree, ast.Assign):
            if not isinstance(node.value, ast.Call):
                continue
            call = node.value
            if self.ctx.qualname(call.func) != "torch.Generator":
                continue
            device = next((k.value for k in call.keywords if k.arg == "device"), None)
            if device is None and call.args:
                device = call.args[0]
            if device is None or _names_cpu(device):
                continue
            for target in node.targets:
                if isinstance(target, (ast.Name, ast.Attribute)):
                    out[self.ctx.source.segment(target)] = node.lineno
        return out

    def _accelerator_generator_draws(self) -> None:
        """A random draw given an accelerator generator but no ``device=`` runs on the CPU, and torch rejects a
        generator of another device: the draw fails on every call, whatever path it is on."""
        generators = self._accelerator_generators()
        if not generators:
            return
        pending = {id(node) for _, node, *_ in self.pending}
        for _unit, node, factory, gen in self.generator_draws:
            text = self.ctx.source.segment(gen)
            line = generators.get(text)
            if line is None or id(node) in pending:
                continue
            source = f"{text}.device"
            self.report(
                node,
                f"`torch.{factory}(..., generator={text})` without `device=` draws on the CPU with a generator "
                f"created on the accelerator (line {line}): torch rejects the mismatch; add `device={source}`",
                make_fix(f"Add `device={source}`", [self._device_edit(node, source)]),
            )

    def _host_draws_only(self, node: ast.Call) -> bool:
        """``g = torch.Generator()`` (possibly `.manual_seed(seed)`) bound to a local whose every read draws on
        the host (`generator=g` of a `torch.*` draw without `device=` or on the CPU) or seeds it: reproducible CPU
        noise on purpose; where those samples go is the draw's own question (a device-less draw that meets
        device data unmoved is reported there)."""
        func = next(
            (
                f
                for f in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef)
                if any(n is node for n in own_nodes(f))
            ),
            None,
        )
        if func is None:
            return False
        parents = self._parent_map(func)
        expr: ast.AST = node
        while True:
            attr = parents.get(id(expr))
            call = parents.get(id(attr)) if isinstance(attr, ast.Attribute) else None
            if isinstance(call, ast.Call) and call.func is attr and attr.attr == "manual_seed":
                expr = call
                continue
            break
        stmt = parents.get(id(expr))
        if not (
            isinstance(stmt, ast.Assign)
            and stmt.value is expr
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            return False
        name = stmt.targets[0].id
        uses = [
            n
            for n in own_nodes(func)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        ]
        if not uses:
            return False
        for use in uses:
            parent = parents.get(id(use))
            if isinstance(parent, ast.Attribute) and parent.attr in ("manual_seed", "seed", "initial_seed"):
                continue
            draw = parents.get(id(parent)) if isinstance(parent, ast.keyword) else None
            if not (
                isinstance(parent, ast.keyword) and parent.arg == "generator" and isinstance(draw, ast.Call)
            ):
                return False
            qual = self.ctx.qualname(draw.func) or ""
            device = next((k.value for k in draw.keywords if k.arg == "device"), None)
            if not qual.startswith("torch.") or (device is not None and not _names_cpu(device)):
                return False
        return True

    def _host_generators_used_on_device(self) -> None:
        """``self.gen = torch.Generator()`` (no device: a CPU generator), later handed to a draw on another device
        (``torch.randn(..., device=x.device, generator=self.gen)``: torch rejects a generator of another device)
        or to a draw placed on the generator's own device as if it were the accelerator (``device=self.gen.device``:
        the noise, and what is moved next to it, stays on the CPU). Reported at the generator's creation."""
        created: dict[str, ast.Call] = {}
        for node in nodes_of(self.ctx.tree, ast.Assign):
            call = node.value
            if not isinstance(call, ast.Call) or call.args or call.keywords:
                continue
            if self.ctx.qualname(call.func) != "torch.Generator":
                continue
            for target in node.targets:
                if isinstance(target, (ast.Name, ast.Attribute)):
                    created[self.ctx.source.segment(target)] = call
        if not created:
            return
        forward = self._forward_units()
        reported = {id(node) for unit, node in self.generators if unit in forward}  # already reported
        for call in nodes_of(self.ctx.tree, ast.Call):
            gen = next((k.value for k in call.keywords if k.arg == "generator"), None)
            device = next((k.value for k in call.keywords if k.arg == "device"), None)
            if gen is None or device is None or _names_cpu(device):
                continue
            if isinstance(device, ast.Constant) and device.value is None:
                continue
            text = self.ctx.source.segment(gen)
            origin = created.get(text)
            if origin is None or id(origin) in reported:
                continue
            reported.add(id(origin))
            shown = self.ctx.source.segment(device)
            self.report(
                origin,
                f"`torch.Generator()` without `device=` is a CPU generator, but line {call.lineno} draws with it on "
                f"`device={shown}`: on the accelerator torch rejects a generator of another device (and through "
                f"`{text}.device` the draw stays on the CPU); create it with the compute device "
                "(`torch.Generator(device=...)`)",
            )

    def _device_edit(self, node: ast.Call, source: str) -> Edit:
        src = self.ctx.source
        existing = next((k for k in node.keywords if k.arg == "device"), None)
        if existing is not None:  # device=None: the value is replaced
            return self.ctx.replace(existing.value, source)
        items = [*node.args, *node.keywords]
        if items:
            last = max(items, key=lambda n: (n.end_lineno, n.end_col_offset))
            end = src.node_range(last)[1]
            return Edit(end, end, f", device={source}")
        end = src.node_range(node)[1]
        return Edit(end - 1, end - 1, f"device={source}")

    def _forward_units(self) -> set[tuple[str, str]]:
        roots: set[tuple[str, str]] = set()
        units = (
            set(self.calls)
            | set(self.self_calls)
            | {u for u, *_ in self.pending}
            | {u for u, *_ in self.cpu_devices}
            | {u for u, *_ in self.generators}
            | {u for u, *_ in self.host_attrs}
            | {u for u, *_ in self.self_moves}
        )
        init_only: set[tuple[str, str]] = set()
        for cls in self.module_classes | self.plain_classes:
            methods = {u[1] for u in units if u[0] == cls}
            called_from: dict[str, set[str]] = {}
            for (c, m), names in self.self_calls.items():
                if c == cls:
                    for name in names:
                        called_from.setdefault(name, set()).add(m)
            # methods reached only from construction/init methods are init-time too
            init_side = {m for m in methods if is_init_method(m)}
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
            if not is_init_method(target):
                roots.add(("", func))
        # module-level functions nothing in the file calls are entry points for other modules (model helpers)
        called = {name for names in self.calls.values() for name in names}
        called |= set(self.spec_targets)
        if self.entry_file:
            roots |= {("", f) for f in self.functions if f not in called and not is_init_method(f)}
        forward = set(roots)
        todo = list(roots)
        while todo:
            unit = todo.pop()
            for name in self.calls.get(unit, ()):
                if name in self.functions and ("", name) not in forward:
                    forward.add(("", name))
                    todo.append(("", name))
        forward |= self._hooked_methods(forward)
        return forward - init_only
