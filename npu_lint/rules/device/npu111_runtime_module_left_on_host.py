"""NPU111 runtime-module-left-on-host."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, dotted_name, last_name, nodes_of, resolve_relative
from npu_lint.rules._calls import _index, _resolve_dotted
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.device._shared import is_init_method, module_classes
from npu_lint.veomni.patchgen import load_file

# libraries whose classes called from a function build modules with parameters or buffers
_MODULE_LIBRARIES = ("torch.nn.", "torchaudio.transforms.")
# `torchaudio.transforms` classes that own no parameter or buffer (plain arithmetic on their input)
_STATELESS_AUDIO = frozenset(
    {
        "AmplitudeToDB",
        "MuLawEncoding",
        "MuLawDecoding",
        "ComputeDeltas",
        "Fade",
        "Vol",
        "FrequencyMasking",
        "TimeMasking",
        "SlidingWindowCmn",
        "AddNoise",
        "Preemphasis",
        "Deemphasis",
        "Convolve",
        "FFTConvolve",
    }
)
_MOVES = frozenset({"to", "cuda", "npu", "to_empty"})


# `torch.nn` classes that own parameters or buffers (losses, activations, dropout own none unless given a tensor)
_STATEFUL_NN = re.compile(
    r"^(Linear|Bilinear|Lazy\w+|Conv\w*|Embedding\w*|\w*Norm\w*|MultiheadAttention|LSTM|GRU|RNN|\w+RNN\w*|PReLU|"
    r"Transformer\w*|Sequential|ModuleList|ModuleDict|ParameterList|ParameterDict)$"
)


def _stateful(cls: ast.ClassDef) -> bool:
    """A module class that owns state: it registers a buffer or a parameter, or assigns a submodule
    (`self.proj = nn.Linear(...)`, `self.mel = MelSpectrogram(...)`)."""
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and (
            call_name(node) in ("register_buffer", "register_parameter", "Parameter")
        ):
            return True
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Attribute) for t in node.targets)
            and isinstance(node.value, ast.Call)
            and (last_name(node.value.func) or "")[:1].isupper()
            and not _stateless_nn(node.value.func)
        ):
            return True
    return False


def _stateless_nn(func: ast.expr) -> bool:
    """``nn.GELU`` / ``torch.nn.Dropout``: a `torch.nn` layer that owns no state (an activation, dropout, a loss)."""
    dotted = dotted_name(func) or ""
    head, _dot, last = dotted.rpartition(".")
    return head in ("nn", "torch.nn") and _STATEFUL_NN.match(last) is None


def _on_device(call: ast.Call, function: ast.AST) -> bool:
    """A constructor that builds the module on a device already: ``nn.Linear(..., device=device)``,
    ``nn.Linear(..., **factory_kwargs)`` whose dict names a device, or a call inside ``with torch.device(d):``."""
    for kw in call.keywords:
        if kw.arg == "device":
            return not (isinstance(kw.value, ast.Constant) and str(kw.value.value).startswith("cpu"))
        if kw.arg is None and isinstance(kw.value, ast.Name):
            for assign in nodes_of(function, ast.Assign):
                assert isinstance(assign, ast.Assign)
                if not any(isinstance(t, ast.Name) and t.id == kw.value.id for t in assign.targets):
                    continue
                value = assign.value
                if isinstance(value, ast.Dict) and any(
                    isinstance(k, ast.Constant) and k.value == "device" for k in value.keys
                ):
                    return True
                if isinstance(value, ast.Call) and any(k.arg == "device" for k in value.keywords):
                    return True
    for with_ in nodes_of(function, ast.With):
        assert isinstance(with_, ast.With)
        if any(
            isinstance(item.context_expr, ast.Call)
            and call_name(item.context_expr) == "device"
            and not any(
                isinstance(a, ast.Constant) and str(a.value).startswith("cpu") for a in item.context_expr.args
            )
            for item in with_.items
        ) and any(n is call for stmt in with_.body for n in ast.walk(stmt)):
            return True
    return False


def _stateless_container(call: ast.Call) -> bool:
    """``nn.Sequential(nn.GELU(), nn.Dropout(p))``: a container built only of stateless `torch.nn` layers."""
    last = (dotted_name(call.func) or "").rsplit(".", 1)[-1]
    return (
        last in ("Sequential", "ModuleList")
        and bool(call.args)
        and all(isinstance(a, ast.Call) and _stateless_nn(a.func) for a in call.args)
    )


# `nn.Module` methods that return the module itself (a chain through them still holds the module)
_RETURNS_SELF = (
    frozenset(
        {
            "eval",
            "train",
            "requires_grad_",
            "float",
            "half",
            "bfloat16",
            "double",
            "apply",
            "type",
            "zero_grad",
        }
    )
    | _MOVES
)


def _root_name(node: ast.expr) -> ast.Name | None:
    """The module a chain of its self-returning methods starts from: ``m`` of ``m.eval().requires_grad_(False)``
    (never of ``m.features(x)``, whose result is data)."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _RETURNS_SELF
    ):
        node = node.func.value
    return node if isinstance(node, ast.Name) else None


def _module_base(base: ast.expr) -> bool:
    last = (dotted_name(base) or "").rsplit(".", 1)[-1]
    return last in ("Module", "Sequential", "ModuleList", "ModuleDict") or last.endswith(
        ("Module", "PreTrainedModel")
    )


def _device_move(
    node: ast.AST, built: frozenset[str] = frozenset(), host: frozenset[str] = frozenset()
) -> bool:
    """``x.to(device)``, ``x.to(device=d)``, ``x.cuda()``, ``x.npu()`` (a move that names no host device; a move
    to a built module's own device, ``x.to(m.weight.device)``, or to a name bound to the host, is none)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if node.func.attr in ("cuda", "npu"):
        return True
    if node.func.attr != "to":
        return False
    targets = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "device")]
    for target in targets:
        if isinstance(target, ast.Constant):
            return isinstance(target.value, str) and not target.value.startswith("cpu")
        if _host(target) or any(isinstance(n, ast.Name) and n.id in built | host for n in ast.walk(target)):
            return False
        text = ast.unparse(target)
        if "device" in text or "cuda" in text or "npu" in text:
            return True
    return False


def _host(node: ast.expr) -> bool:
    """``"cpu"`` / ``torch.device("cpu")``."""
    if isinstance(node, ast.Call) and call_name(node) == "device" and node.args:
        node = node.args[0]
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("cpu")


class RuntimeModuleLeftOnHost(Rule):
    code = "NPU111"
    name = "runtime-module-left-on-host"
    summary = (
        "A function builds an `nn.Module` at run time (outside `__init__`), moves the data it feeds it to the "
        "device, and never moves the module: its parameters and buffers stay on the CPU."
    )
    why = (
        "Modules built in `__init__` move with their parent (`model.to(device)`, FSDP's materialisation). A "
        "module built later inside a function (a mel-spectrogram processor created on demand, a helper "
        "convolution, a teacher copy) is nobody's submodule: it is born on the CPU and stays there unless the "
        "function moves it (`Processor(...).to(device=device)`). When the same function moves the data it hands "
        "that module to the device (`processor.waveform_to_mel(audio.to(device=device))`), the module's weights "
        "or buffers (a mel filter bank, a window) meet device data: a device-mismatch error on the first call on "
        "an NPU (and a GPU). The module class is the file's own `nn.Module` subclass, one of the tree's (resolved "
        "through the shared resolver and read for its bases) that owns state (a buffer, a parameter, a submodule), "
        "a stateful `torch.nn` layer (not a loss, an activation or dropout), or a `torchaudio.transforms` class "
        "with a buffer. Construction-time builders (`__init__`, `_init_*`) are not checked, nor a module built on "
        "the device (`device=`, `with torch.device(d):`), nor one the function moves, returns, rebinds through a "
        "wrapper or hands to `self` (the caller or the parent moves it)."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn


            class MelFrontend(nn.Module):
                def __init__(self, n_mels):
                    super().__init__()
                    self.register_buffer("filters", torch.ones(n_mels, 201))

                def features(self, wave):
                    return self.filters @ wave


            def encode(wave, encoder):
                device = next(encoder.parameters()).device
                frontend = MelFrontend(80)
                return encoder(frontend.features(wave.to(device=device)))
            """,
            path="veomni/models/diffusers/toy_audio/audio_vae.py",
            title="the on-demand frontend's filter bank left on the CPU",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch import nn


            class MelFrontend(nn.Module):
                def __init__(self, n_mels):
                    super().__init__()
                    self.register_buffer("filters", torch.ones(n_mels, 201))

                def features(self, wave):
                    return self.filters @ wave


            def encode(wave, encoder):
                device = next(encoder.parameters()).device
                frontend = MelFrontend(80).to(device=device)
                return encoder(frontend.features(wave.to(device=device)))
            """,
            path="veomni/models/diffusers/toy_audio/audio_vae.py",
        ),
    )
    fix_safety = "No fix: move the module where its data goes (`.to(device=...)`), or build it in `__init__`."
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)
    requires = ((".to(", ".cuda(", ".npu("),)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._modules: set[str] | None = None
        self._resolved: dict[str, bool] = {}
        self._local: dict[str, list[ast.ClassDef]] | None = None

    def _is_module_class(self, func: ast.expr) -> bool:
        if self._modules is None:
            self._modules = module_classes(self.ctx.tree, self.ctx)
        if isinstance(func, ast.Name) and func.id in self._modules and func.id not in self.ctx.imports:
            if self._local is None:  # the module's classes by name, in order: one pass over the body
                self._local = {}
                for stmt in self.ctx.tree.body:
                    if isinstance(stmt, ast.ClassDef):
                        self._local.setdefault(stmt.name, []).append(stmt)
            return any(_stateful(s) for s in self._local.get(func.id, ()))
        qual = self.ctx.qualname(func) or ""
        if qual.startswith("torch.nn."):
            return qual.count(".") == 2 and _STATEFUL_NN.match(qual.rsplit(".", 1)[-1]) is not None
        if qual.startswith(_MODULE_LIBRARIES):
            last = qual.rsplit(".", 1)[-1]
            return last[:1].isupper() and last not in _STATELESS_AUDIO
        if not isinstance(func, ast.Name) or func.id not in self.ctx.imports:
            return False
        qual = self.ctx.imports[func.id]
        if qual in self._resolved:
            return self._resolved[qual]
        self._resolved[qual] = False
        key = qual
        if qual.startswith("."):
            qual = resolve_relative(self.ctx.source.path, qual)
        module, _dot, name = qual.rpartition(".")
        file: str | None = None
        index = _index(self.ctx)
        resolved = _resolve_dotted(index, qual) if index is not None else None
        if resolved is not None and resolved[1].kind == "class":
            located = index.module_path(resolved[0])  # type: ignore[union-attr]
            file, name = (str(located[0]) if located else None), resolved[1].name
        elif resolved is None and module:
            file = self._vendored(module)
        parsed = load_file(file) if file else None
        tree = parsed.tree if parsed is not None else None
        for stmt in tree.body if tree is not None else ():
            if isinstance(stmt, ast.ClassDef) and stmt.name == name:
                self._resolved[key] = any(_module_base(b) for b in stmt.bases) and _stateful(stmt)
        return self._resolved[key]

    def _vendored(self, module: str) -> str | None:
        """The one tree file a module of a package vendored inside the tree (put on `sys.path`, imported by its
        own name: `ltx_core.model.ops`) is."""
        tail = "/" + module.replace(".", "/") + ".py"
        found = [f for f in self.ctx.project.tree_files if f.replace("\\", "/").endswith(tail)]
        return found[0] if len(found) == 1 else None

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if is_init_method(node.name) or self.ctx.function is not None:
            return
        built: dict[str, ast.Call] = {}
        for assign in nodes_of(node, ast.Assign):
            assert isinstance(assign, ast.Assign)
            value = assign.value
            if (
                len(assign.targets) == 1
                and isinstance(assign.targets[0], ast.Name)
                and isinstance(value, ast.Call)
                and self._is_module_class(value.func)
                and not _on_device(value, node)
                and not _stateless_container(value)
            ):
                built[assign.targets[0].id] = value
        if not built:
            return
        names = frozenset(built)
        host = frozenset(
            t.id
            for a in nodes_of(node, ast.Assign)
            if isinstance(a, ast.Assign) and _host(a.value)
            for t in a.targets
            if isinstance(t, ast.Name)
        )
        moved: set[str] = set()
        fed: dict[str, ast.AST] = {}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                root = _root_name(sub.func.value)  # `m.to(d)`, `m.eval().to(d)`
                if root is not None and root.id in built and sub.func.attr in _MOVES:
                    moved.add(root.id)
                if sub.func.attr in ("append", "add_module", "insert", "extend", "register_module") and any(
                    isinstance(a, ast.Name) and a.id in built for a in sub.args
                ):
                    # handed to an owner (`self.heads.append(m)`, `self.add_module("m", m)`): its owner moves it
                    moved.update(a.id for a in sub.args if isinstance(a, ast.Name) and a.id in built)
            if isinstance(sub, ast.Return) and sub.value is not None:
                values = sub.value.elts if isinstance(sub.value, (ast.Tuple, ast.List)) else [sub.value]
                moved.update(v.id for v in values if isinstance(v, ast.Name) and v.id in built)
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    if isinstance(target, ast.Attribute) and isinstance(sub.value, ast.Name):
                        moved.add(sub.value.id)  # stored on self / another object: its owner moves it
                    if (
                        isinstance(target, ast.Name)
                        and target.id in built
                        and sub.value is not built[target.id]
                        and any(isinstance(n, ast.Name) and n.id == target.id for n in ast.walk(sub.value))
                        and _root_name(sub.value) is None  # `m = m.eval()` is the same module, unmoved
                    ):
                        moved.add(target.id)  # rebound to what a wrapper made of it (`m = wrap(m, ...)`)
            if isinstance(sub, ast.Call):
                callee = sub.func
                if any(isinstance(a, ast.Name) and a.id in built for a in sub.args) and any(
                    isinstance(a, (ast.Name, ast.Attribute)) and "device" in (last_name(a) or "")
                    for a in (*sub.args, *(k.value for k in sub.keywords))
                ):
                    # handed whole, with a device, to a helper (`move_to_device(m, device)`): the helper moves it
                    moved.update(a.id for a in sub.args if isinstance(a, ast.Name) and a.id in built)
                owner = (
                    callee.id
                    if isinstance(callee, ast.Name)
                    else callee.value.id
                    if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name)
                    else None
                )
                if owner in built and not (isinstance(callee, ast.Attribute) and callee.attr in _MOVES):
                    if any(
                        _device_move(a, names, host)
                        for arg in (*sub.args, *(k.value for k in sub.keywords))
                        for a in ast.walk(arg)
                    ):
                        fed.setdefault(owner, sub)
        for name, use in fed.items():
            if name in moved:
                continue
            call = built[name]
            parts = [*call.args, *(k.value for k in call.keywords)]
            last = (
                max(parts, key=lambda a: (a.end_lineno or a.lineno, a.end_col_offset or 0)) if parts else call
            )
            self.report(
                last,  # the end of the constructor, where the move belongs
                f"`{name}` is built here, at run time, on the CPU, and never moved, yet line {use.lineno} hands it "
                "data moved to the device: its parameters and buffers meet device tensors (a device-mismatch "
                f"error on the NPU); move it too (`{ast.unparse(call.func)}(...).to(device=...)`)",
            )
