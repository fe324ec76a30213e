"""NPU702 dummy-forward-dtype."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from npu_lint.core.astutil import call_name, str_value
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import method_name, spec_target
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.veomni.upstream import file_source_module, super_inits, upstream_class, upstream_mro

_KEEP = ("_keep_in_fp32_modules_strict", "_keep_in_fp32_modules")
# layers that own no parameter: registering them does not decide which parameter comes first
_NO_PARAMS = (
    "Dropout", "Identity", "GELU", "ReLU", "SiLU", "Tanh", "Sigmoid", "Softmax", "Flatten", "Upsample",
    "RotaryEmbedding", "Rotary",
)  # fmt: skip


@dataclass(frozen=True)
class _Layer:
    attr: str
    cls: str
    cast_fp32: bool  # built as `Cls(...).float()` / `.to(torch.float32)`, or cast so later in __init__


@dataclass(frozen=True)
class _Verdict:
    first: str  # the tower attribute that holds the first floating-point parameter
    entry: str  # the layer that consumes the fake input
    first_fp32: str | None  # why `first` is float32 (None: it is in the model dtype)
    entry_fp32: str | None


def _is_fp32(node: ast.AST) -> bool:
    """`x.float()`, `x.to(torch.float32)` / `x.to(dtype=torch.float32)`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr == "float" and not node.args:
        return True
    if node.func.attr == "to":
        values = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
        return any(isinstance(v, ast.Attribute) and v.attr in ("float32", "float") for v in values)
    return False


def _ctor(value: ast.AST) -> tuple[str, bool] | None:
    """The class a `self.x = ...` value constructs (`Cls(...)`, `nn.Linear(...)`, `Cls._from_config(...)`,
    with a trailing fp32 cast), or None for anything else."""
    cast = False
    while _is_fp32(value):
        cast = True
        value = value.func.value  # type: ignore[attr-defined]
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr == "_from_config" and isinstance(func.value, ast.Name):
        return func.value.id, cast
    name = call_name(value)
    if not name or not name[:1].isupper():
        return None
    return name, cast


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _layers(inits: list[ast.FunctionDef]) -> list[_Layer]:
    """Submodules and parameters in registration order (the order of `self.parameters()`): the inherited
    `__init__`s a `super().__init__` call runs first, then the class's own."""
    out: list[_Layer] = []
    cast: set[str] = set()
    for init in inits:
        for node in _walk(init):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                attr = _self_attr(node.targets[0])
                built = _ctor(node.value) if attr else None
                if attr and built and all(layer.attr != attr for layer in out):
                    out.append(_Layer(attr, built[0], built[1]))
            elif isinstance(node, ast.Expr) and _is_fp32(node.value):
                attr = _self_attr(node.value.func.value)  # type: ignore[attr-defined]
                if attr:
                    cast.add(attr)  # `self.x.float()` later in __init__
    return [_Layer(x.attr, x.cls, x.cast_fp32 or x.attr in cast) for x in out]


def _input_layer(forward: ast.FunctionDef, attrs: set[str]) -> str | None:
    """The registered submodule ``forward`` hands its input to (``self.patch_embed(hidden_states)``): the first
    call of one that takes the first parameter after ``self`` as an argument; None when there is none."""
    params = [a.arg for a in [*forward.args.posonlyargs, *forward.args.args]][1:]
    if not params:
        return None
    calls = [
        n
        for n in _walk(forward)
        if isinstance(n, ast.Call)
        and _self_attr(n.func) in attrs
        and any(isinstance(a, ast.Name) and a.id == params[0] for a in n.args)
    ]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    return _self_attr(calls[0].func) if calls else None


def _keep_lists(bodies: list[list[ast.stmt]]) -> dict[str, list[str]] | None:
    """`_keep_in_fp32_modules(_strict)` literal lists of the class and its bases; None when one is not a
    literal (cannot be decided)."""
    out: dict[str, list[str]] = {}
    for body in bodies:
        for stmt in body:
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in _KEEP and target.id not in out:
                    value = stmt.value
                    if value is None or isinstance(value, ast.Constant) and value.value is None:
                        out[target.id] = []
                    elif isinstance(value, (ast.List, ast.Tuple, ast.Set)):
                        items = [str_value(e) for e in value.elts]
                        if any(i is None for i in items):
                            return None
                        out[target.id] = [i for i in items if i]
                    else:
                        return None
    return out


def _fp32_reason(layer: _Layer, keep: dict[str, list[str]], attrs: set[str]) -> str | None | bool:
    """Why ``layer`` is float32 (a string), None when it is in the model dtype, False when not decidable
    (a keep-in-fp32 pattern may match a parameter inside it)."""
    if layer.cast_fp32:
        return "cast to float32 in `__init__`"
    for name, entries in keep.items():
        for entry in entries:
            head = entry.split(".")[0]
            if entry == layer.attr:
                return f"kept in float32 by `{name}`"
            if head == layer.attr or head not in attrs:
                return False  # part of the layer, or a name that may match deeper inside it
    return None


class DummyForwardDtype(Rule):
    code = "NPU702"
    name = "dummy-forward-dtype"
    summary = (
        "A modality tower's `dummy_forward` builds its fake input with `self.dtype` where the tower's first "
        "parameter and its input layer are in different dtypes."
    )
    why = (
        "`dummy_forward` runs a tower on a fake input so that text-only ranks join the tower's FSDP collectives. "
        "In transformers `self.dtype` is the dtype of the model's first floating-point parameter (5.9.0: "
        "`next(p.dtype for p in self.parameters() if p.is_floating_point())`). That is the dtype the input "
        "layer consumes, unless the first registered layer and the input layer can hold different dtypes: one "
        "of them kept in float32 (`_keep_in_fp32_modules_strict` for bf16/fp16 loads, `_keep_in_fp32_modules` "
        "for fp16 loads, or a `.float()` cast in `__init__`) and not the other. Then the fake input has the "
        "wrong dtype and the first matmul fails (or silently upcasts). Only that case is reported: the layers "
        "are read from the tower's `__init__` (with what its `super().__init__` chain builds, through the "
        "class's MRO in the transformers source) and `forward`; a case that cannot be decided statically is not "
        "reported. Where the file's other towers read their dummy input's dtype from a live layer "
        "(`self.conv1.weight.dtype`, `next(self.patch_embed.parameters()).dtype`), a tower that reads the "
        "model-level dtype (`self.dtype`, `next(self.parameters()).dtype`, `self.config.torch_dtype`) breaks the "
        "file's own convention, which VeOmni's omni models state: under FSDP2 mixed precision the model-level "
        "dtype can be the sharded fp32 master dtype while the layers compute in bf16."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn


            class ToyVisionModel(nn.Module):
                _keep_in_fp32_modules_strict = ["pos_embed"]

                def __init__(self, config):
                    super().__init__()
                    self.pos_embed = nn.Embedding(config.num_positions, config.hidden_size)
                    self.patch_embed = nn.Linear(1176, config.hidden_size)

                def forward(self, pixel_values):
                    return self.patch_embed(pixel_values) + self.pos_embed.weight[0]

                def dummy_forward(self):
                    pixel_values = torch.zeros((16, 1176), dtype=self.dtype, device=self.device)
                    return self(pixel_values)
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyVisionModel(nn.Module):
                _keep_in_fp32_modules_strict = ["pos_embed"]

                def __init__(self, config):
                    super().__init__()
                    self.pos_embed = nn.Embedding(config.num_positions, config.hidden_size)
                    self.patch_embed = nn.Linear(1176, config.hidden_size)

                def forward(self, pixel_values):
                    return self.patch_embed(pixel_values) + self.pos_embed.weight[0]

                def dummy_forward(self):
                    pixel_values = torch.zeros((16, 1176), dtype=next(self.patch_embed.parameters()).dtype, device=self.device)
                    return self(pixel_values)
            """,
            title="the first parameter is kept in float32, the patch embedding is not",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyImageTower(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.stem = nn.Linear(588, 64)

                def forward(self, patches):
                    return self.stem(patches)

                def dummy_forward(self):
                    stem = self.stem
                    return self(torch.zeros((4, 588), dtype=stem.weight.dtype, device=stem.weight.device))


            class ToySpeechTower(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.frontend = nn.Conv1d(80, 64, 3)

                def forward(self, mel):
                    return self.frontend(mel)

                def dummy_forward(self):
                    mel = torch.zeros((1, 80, 16), dtype=next(self.parameters()).dtype, device=self.frontend.weight.device)
                    return self(mel)
            """,
            title="one tower's dummy input takes the model-level dtype where the file's other tower reads a live layer",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch import nn


            class ToyVisionModel(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.patch_embed = nn.Linear(1176, config.hidden_size)
                    self.pos_embed = nn.Embedding(config.num_positions, config.hidden_size)

                def forward(self, pixel_values):
                    return self.patch_embed(pixel_values)

                def dummy_forward(self):
                    pixel_values = torch.zeros((16, 1176), dtype=self.dtype, device=self.device)
                    return self(pixel_values)
            """,
            title="the first parameter belongs to the input layer: `self.dtype` is what it consumes",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLVisionModel.dummy_forward")
            def qwen3_vl_vision_dummy_forward(self):
                pixel_values = torch.zeros((16, 1536), dtype=self.dtype, device=self.device)
                grid_thw = torch.tensor([[1, 4, 4]], dtype=torch.int32, device=self.device)
                return self(pixel_values, grid_thw=grid_thw)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="upstream `Qwen3VLVisionModel` registers `patch_embed` first and keeps nothing in float32",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyImageTower(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.stem = nn.Linear(588, 64)

                def forward(self, patches):
                    return self.stem(patches)

                def dummy_forward(self):
                    return self(torch.zeros((4, 588), dtype=next(self.stem.parameters()).dtype))


            class ToySpeechTower(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.frontend = nn.Conv1d(80, 64, 3)

                def forward(self, mel):
                    return self.frontend(mel)

                def dummy_forward(self):
                    return self(torch.zeros((1, 80, 16), dtype=self.frontend.weight.dtype))
            """,
            title="every tower of the file reads its dummy input's dtype from a live layer",
        ),
    )
    fix_safety = (
        "Safe: `self.dtype` becomes `next(self.<input layer>.parameters()).dtype`, the dtype of the layer the "
        "fake input enters first (reported only where it differs from `self.dtype`)."
    )

    node_types = (ast.Attribute,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Attribute)
        if node.attr not in ("dtype", "torch_dtype") or not isinstance(node.ctx, ast.Load):
            return
        model_level = _model_dtype(node)
        if model_level is None:
            return
        func = self.ctx.function
        name = method_name(func)
        if func is None or name is None or "dummy_forward" not in name:
            return
        key = ("npu702", id(func))
        if key not in self.ctx.memo:
            self.ctx.memo[key] = _verdict(self.ctx, func) if model_level == "self.dtype" else None
        verdict = self.ctx.memo[key]
        if verdict is None:
            self._against_siblings(node, func, model_level)
            return
        assert isinstance(verdict, _Verdict)
        fp32, other = (verdict.first, verdict.entry) if verdict.first_fp32 else (verdict.entry, verdict.first)
        why = verdict.first_fp32 or verdict.entry_fp32
        fix = make_fix(
            f"Read the dtype from the input layer `self.{verdict.entry}`",
            [self.ctx.replace(node, f"next(self.{verdict.entry}.parameters()).dtype")],
            Applicability.SAFE,
        )
        self.report(
            node,
            f"`dummy_forward` builds its fake input with `self.dtype`, the dtype of the tower's first parameter "
            f"(in `self.{verdict.first}`), but the input layer is `self.{verdict.entry}`: `self.{fp32}` is {why} "
            f"and `self.{other}` is not, so the fake input can have another dtype than the input layer consumes; "
            f"read it from `self.{verdict.entry}`",
            fix,
        )

    def _against_siblings(self, node: ast.Attribute, func: ast.AST, text: str) -> None:
        """The file's other towers read their dummy input's dtype from a live layer (`self.conv1.weight.dtype`):
        this one reads the model-level dtype, which under FSDP2 mixed precision can report the sharded fp32
        master dtype while the layer computes in bf16 (the convention the sibling dummy forwards follow)."""
        if _live_dtype(func) is not None:
            return  # this dummy forward also reads a live layer's dtype
        key = "npu702_live"
        if key not in self.ctx.memo:
            self.ctx.memo[key] = [
                (owner, live)
                for owner, f in _dummy_definitions(self.ctx.tree)
                if (live := _live_dtype(f)) is not None
            ]
        siblings = [(o, live) for o, live in self.ctx.memo[key] if live]  # type: ignore[union-attr]
        if not siblings:
            return
        owner, live = siblings[0]
        self.report(
            node,
            f"`dummy_forward` builds its fake input with `{text}`, while `{owner}.dummy_forward` in this file reads "
            f"the dtype from a live layer (`{live}`): under FSDP2 mixed precision the model-level dtype can be the "
            "sharded fp32 master dtype while the layers compute in bf16, so this tower's dummy input can mismatch "
            "its input layer; read the dtype from the layer the fake input enters",
        )


def _model_dtype(node: ast.Attribute) -> str | None:
    """A model-level dtype read: `self.dtype`, `next(self.parameters()).dtype`, `self.config.torch_dtype` /
    `self.config.dtype` (the text for the message), None for anything else."""
    value = node.value
    if node.attr in ("dtype", "torch_dtype") and isinstance(value, ast.Attribute) and value.attr == "config":
        if isinstance(value.value, ast.Name) and value.value.id == "self":
            return ast.unparse(node)
    if node.attr != "dtype":
        return None
    if isinstance(value, ast.Name) and value.id == "self":
        return "self.dtype"
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "next"
        and len(value.args) == 1
        and ast.unparse(value.args[0]) == "self.parameters()"
    ):
        return ast.unparse(node)
    return None


def _live_dtype(func: ast.AST) -> str | None:
    """A dtype read from one of the tower's own layers (`self.conv1.weight.dtype`,
    `next(self.patch_embed.parameters()).dtype`, through a local bound to `self.<layer>`), as written."""
    bound = {
        t.id
        for n in _walk(func)
        if isinstance(n, ast.Assign) and _self_attr(_root_attr(n.value)) is not None
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for n in _walk(func):
        if not (isinstance(n, ast.Attribute) and n.attr == "dtype" and isinstance(n.ctx, ast.Load)):
            continue
        value = n.value
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "next"
            and value.args
        ):
            inner = value.args[0]
            if (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and inner.func.attr == "parameters"
                and _self_attr(_root_attr(inner.func.value)) is not None
            ):
                return ast.unparse(n)
            continue
        if isinstance(value, ast.Attribute) and value.attr in ("weight", "bias"):
            root = _root_attr(value.value)
            if _self_attr(root) is not None or isinstance(root, ast.Name) and root.id in bound:
                return ast.unparse(n)
    return None


def _root_attr(node: ast.AST) -> ast.AST:
    """`self.a.b.c` -> `self.a` (the first attribute off a name); anything else unchanged."""
    while isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
        node = node.value
    return node


def _dummy_definitions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef]]:
    """Every `dummy_forward` the file defines: (owner class, function), class methods and spec overrides."""
    out: list[tuple[str, ast.FunctionDef]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            out.extend(
                (stmt.name, f)
                for f in stmt.body
                if isinstance(f, ast.FunctionDef) and f.name == "dummy_forward"
            )
        elif isinstance(stmt, ast.FunctionDef) and method_name(stmt) == "dummy_forward":
            out.append((spec_target(stmt)[0] or stmt.name, stmt))
    return out


def _tower(ctx: Context, func: ast.AST) -> tuple[str, str | None, ast.ClassDef | None] | None:
    """(class name, upstream module or None, the class as the linted file defines it or None)."""
    module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
    cls = ctx.class_
    if cls is not None:
        return cls.name, module, cls
    target = spec_target(func)[0]
    if target is None:
        return None
    return target, module, None


def _local_class(ctx: Context, name: str) -> ast.ClassDef | None:
    return next((n for n in ctx.tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _spec_override(ctx: Context, cls: str, method: str) -> ast.FunctionDef | None:
    for stmt in ctx.tree.body:
        if isinstance(stmt, ast.FunctionDef) and spec_target(stmt) == (cls, method):
            return stmt
    return None


def _own(node: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if node is None:
        return None
    return next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == name), None)


def _verdict(ctx: Context, func: ast.AST) -> _Verdict | None:
    """What the tower's `__init__` and `forward` prove about `self.dtype` (None: same dtype, or undecidable)."""
    tower = _tower(ctx, func)
    if tower is None:
        return None
    name, module, local = tower
    upstream = upstream_class(module, name) if module and module.startswith("transformers.") else None
    mro = upstream_mro(module, name) if upstream is not None and module else []
    # the class's bodies, nearest first: the file's own class (a generated or modeling file), its local bases,
    # then the upstream MRO
    bodies: list[ast.ClassDef] = []
    seen: set[str] = set()
    todo = [local] if local is not None else []
    while todo:
        node = todo.pop(0)
        if node.name in seen:
            continue
        seen.add(node.name)
        bodies.append(node)
        for base in node.bases:
            found = _local_class(ctx, base.id) if isinstance(base, ast.Name) else None
            if found is not None:
                todo.append(found)
    bodies += [e.node for e in mro if e.node is not None and e.name not in seen]

    init = _spec_override(ctx, name, "__init__") or next(
        (m for b in bodies if (m := _own(b, "__init__"))), None
    )
    forward = _spec_override(ctx, name, "forward") or next(
        (m for b in bodies if (m := _own(b, "forward"))), None
    )
    if init is None or forward is None:
        return None
    inits = [init]
    if module and upstream is not None:
        owner = next((b.name for b in bodies if _own(b, "__init__") is init), name)
        inits = [*reversed(super_inits(module, name, init, owner)), init]
    layers = _layers(inits)
    holding = [x for x in layers if not any(word in x.cls for word in _NO_PARAMS)]
    if not holding:
        return None
    attrs = {x.attr for x in layers}
    entry_attr = _input_layer(forward, attrs)
    first = holding[0]
    if entry_attr is None or entry_attr == first.attr:
        return None
    entry = next(x for x in layers if x.attr == entry_attr)
    keep = _keep_lists([b.body for b in bodies])
    if keep is None:
        return None
    first_fp32 = _fp32_reason(first, keep, attrs)
    entry_fp32 = _fp32_reason(entry, keep, attrs)
    if first_fp32 is False or entry_fp32 is False or bool(first_fp32) == bool(entry_fp32):
        return None
    return _Verdict(first.attr, entry.attr, first_fp32 or None, entry_fp32 or None)  # type: ignore[arg-type]
