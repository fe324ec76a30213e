"""NPU704 position-id-function."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, int_value, last_name, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import gpu_sibling_only, method_name
from npu_lint.rules.base import Example, make_fix
from npu_lint.rules.multimodal._shared import PatchedMethod, WrapperRule, def_span, params_of, passed_on
from npu_lint.veomni.constants import tree_constant
from npu_lint.veomni.upcalls import writes_positions
from npu_lint.veomni.upstream import (
    composite_config_fields,
    file_source_module,
    patched_methods,
    upstream_class,
    upstream_class_method,
    upstream_class_names,
)

_MODALITIES = ("image", "video", "audio")
_CONVENTION = ("transformers.processing_utils", "ProcessorMixin", "create_mm_token_type_ids")


def _modality_of(node: ast.AST) -> str | None:
    """The modality a token-type mask selects: `ids == cfg.video_token_id`, `isin(ids, self.image_ids)`. A mask
    that also names another modality (`(ids == image_token_id) & is_video_segment`: GLM-4V writes its video
    frames with the image token) selects no single modality: None."""
    found: set[str] = set()
    mentioned: set[str] = set()
    for sub in _walk(node):
        name = last_name(sub)
        if name is None:
            continue
        for mod in _MODALITIES:
            if name in (f"{mod}_token_id", f"{mod}_ids", f"{mod}_token_ids", f"{mod}_token_index"):
                found.add(mod)
            elif mod in name.lower():
                mentioned.add(mod)
    if len(found) != 1 or mentioned - found:
        return None
    return found.pop()


def _typed_name(name: str) -> bool:
    return any(word in name.lower() for word in ("type", "kind", "modal"))  # token types, not labels or masks


def _where_codes(value: ast.AST, array: str) -> list[tuple[ast.expr, str, str, int]]:
    """``torch.where(<mask of a modality>, <int>, <else>)``, nested in its branches."""
    out: list[tuple[ast.expr, str, str, int]] = []
    if isinstance(value, ast.Call) and len(value.args) == 3:
        name = call_name(value)
        if name == "where":
            mod = _modality_of(value.args[0])
            code = int_value(value.args[1])
            if mod is not None and code is not None:
                out.append((value.args[1], array, mod, code))
            out.extend(_where_codes(value.args[1], array))
            out.extend(_where_codes(value.args[2], array))
    return out


def _type_codes(func: ast.AST) -> list[tuple[ast.expr, str, str, int]]:
    """The code each modality gets in a token-type array (``<types>`` names a token type) built in ``func``:
    ``types[<mask of a modality's tokens>] = <int>``, ``types = torch.where(<mask>, <int>, ...)``,
    ``types = types.masked_fill(<mask>, <int>)`` (or ``masked_fill_``): (the code's node, the array's name,
    modality, code)."""
    out: list[tuple[ast.expr, str, str, int]] = []
    for node in nodes_of(func, ast.Assign, ast.Call):  # walk order
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                if not _typed_name(target.value.id):
                    continue
                code = int_value(node.value)
                mod = _modality_of(target.slice)
                if code is not None and mod is not None:
                    out.append((node.value, target.value.id, mod, code))
            elif isinstance(target, ast.Name) and _typed_name(target.id):
                out.extend(_where_codes(node.value, target.id))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("masked_fill", "masked_fill_")
            and isinstance(node.func.value, ast.Name)
            and _typed_name(node.func.value.id)
            and len(node.args) == 2
        ):
            mod = _modality_of(node.args[0])
            code = int_value(node.args[1])
            if mod is not None and code is not None:
                out.append((node.args[1], node.func.value.id, mod, code))
    return out


def _convention() -> dict[str, int]:
    """The modality codes transformers' processors write into `mm_token_type_ids` (read from the installed
    source; text is 0): the M-RoPE index walks each code's run with that modality's grid."""
    func = upstream_class_method(*_CONVENTION)
    if func is None:
        return {}
    return {mod: code for _, _, mod, code in _type_codes(func)}


def _token_assignments(func: ast.AST) -> list[tuple[ast.Assign, str, ast.expr]]:
    """`<obj>.<modality>_token_id = value` statements: (statement, modality, value)."""
    out = []
    for node in _walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Attribute):
                for mod in _MODALITIES:
                    if target.attr == f"{mod}_token_id":
                        out.append((node, mod, node.value))
    return out


def _axis_test(test: ast.AST) -> tuple[str, int] | None:
    """`<pos>.shape[k] == 3` in a condition (an `and` of several tests allowed): (name, k)."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for part in parts:
        if (
            isinstance(part, ast.Compare)
            and len(part.ops) == 1
            and isinstance(part.ops[0], ast.Eq)
            and int_value(part.comparators[0]) == 3
            and isinstance(part.left, ast.Subscript)
            and isinstance(part.left.value, ast.Attribute)
            and part.left.value.attr == "shape"
            and isinstance(part.left.value.value, ast.Name)
            and "position" in part.left.value.value.id
        ):
            axis = int_value(part.left.slice)
            if axis is not None:
                return part.left.value.value.id, axis
    return None


def _owner_classes(tree: ast.Module) -> list[tuple[str | None, ast.FunctionDef]]:
    """Every function with the class it belongs to (a class body, or a spec's `override_method` target)."""
    out: list[tuple[str | None, ast.FunctionDef]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            out.extend((stmt.name, f) for f in stmt.body if isinstance(f, ast.FunctionDef))
        elif isinstance(stmt, ast.FunctionDef):
            cls = None
            for deco in stmt.decorator_list:
                if isinstance(deco, ast.Call) and deco.args and isinstance(deco.args[0], ast.Constant):
                    target = deco.args[0].value
                    if isinstance(target, str) and "." in target:
                        cls = target.rpartition(".")[0]
            out.append((cls, stmt))
    return out


_POSITION_HINTS = ("rope_index", "position_ids", "position_id")


def _self_calls(func: ast.AST) -> set[str]:
    out = set()
    for node in _walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        ):
            out.add(node.func.attr)
    return out


_MROPE_HINTS = ("rope_index", "3d_position", "mrope")
_MOVES = ("transpose", "permute", "movedim", "swapaxes", "swapdims", "rearrange")


def _moves_axes(node: ast.AST, name: str, helpers: dict[str, ast.FunctionDef], depth: int = 0) -> bool:
    """Whether ``node`` moves an axis of ``name`` (`name.transpose(0, 1)`, `torch.permute(name, ...)`,
    `rearrange(name, ...)`, or a module-level helper called with it that does so)."""
    for n in _walk(node):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        callee = call_name(n)
        on = [f.value] if isinstance(f, ast.Attribute) else []
        if callee in _MOVES and any(
            isinstance(x, ast.Name) and x.id == name for a in [*on, *n.args] for x in _walk(a)
        ):
            return True
        if isinstance(f, ast.Name) and f.id in helpers and depth < 2:
            args = [*n.args, *(k.value for k in n.keywords)]
            if any(isinstance(x, ast.Name) and x.id == name for a in args for x in _walk(a)):
                helper = helpers[f.id]
                params = [
                    a.arg for a in [*helper.args.posonlyargs, *helper.args.args, *helper.args.kwonlyargs]
                ]
                if any(_moves_axes(helper, p, helpers, depth + 1) for p in params):
                    return True
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "mT"
            or isinstance(n, ast.Attribute)
            and n.attr in ("mT", "T")
        ):
            return True
    return False


def _position_methods(names: set[str]) -> set[str]:
    return {n for n in names if any(h in n for h in _POSITION_HINTS)}


class PositionIdFunction(WrapperRule):
    code = "NPU704"
    name = "position-id-function"
    summary = "A patched multimodal wrapper drops, or borrows from another model, the model's own position-id function."
    why = (
        "Vision-language models place text, image and video tokens with their own multimodal RoPE index "
        "(`get_rope_index`, `compute_3d_position_ids`): the spatial merge size, the temporal scaling and the "
        "token-type rules differ from one model to the next. A patched `Model.forward` that no longer calls "
        "the upstream position-id method gives image tokens plain 1-D positions; a VeOmni "
        "`get_position_id_func` that wraps another model's `<Other>Model.get_rope_index` (a copy-paste from "
        "the model it was adapted from) precomputes positions with the wrong rules. Both train, silently worse."
        " The media token ids a position-id function maps (`fake_config.image_token_id = ...`) must be the placeholders the data transform writes, the tree's `<MODALITY>_INPUT_INDEX` (read from the tree), one for each modality the model's config has; and a branch that finds the M-RoPE sections on axis k of `position_ids` (`shape[k] == 3`) must move them to axis 0. A position-id function that copies the config (`copy.copy(self.config)`) but maps no media token id at all, where the config has them and the tree defines the placeholders, is reported too."
        " A patched forward of an M-RoPE model (its upstream forward calls `get_rope_index` / "
        "`compute_3d_position_ids`) that takes `position_ids` from the caller and passes them on must move the "
        "M-RoPE axis to the front somewhere (`transpose`, `permute`, `movedim`, `rearrange`, or a local helper "
        "that does): VeOmni precomputes the ids per sample as (3, seq) and collates them as (batch, 3, seq)."
        " A remapped config copy that is never read after its token ids are mapped (the function is built from "
        "`self.config`) leaves the mapping without effect, and so does a placeholder stored on an attribute the model's config does "
        "not define (`cfg.image_token_index` where the config has `image_token_id`)."
        " Token-type ids built for the M-RoPE index (`types[ids == cfg.video_token_id] = 2`, `torch.where(...)`, "
        "`masked_fill(...)`) must give each "
        "modality its own code, the one transformers' processors write (`ProcessorMixin.create_mm_token_type_ids`, "
        "read from the installed source): the index walks a run of code k with that modality's grid."
        " An NPU generated module must keep every position-id method its GPU sibling defines (a wrapper's "
        "`get_position_id_func` that delegates to the thinker): the trainer asks the top-level model for it, and "
        "on NPU it would find none, or an inherited one with other rules."
        " A patched `get_rope_index` must hand its helpers the M-RoPE rows the upstream one hands them: where "
        "upstream passes one row of a (3, N) position block (`get_chunked_index(video_llm_pos_ids[0], ...)`, the "
        "temporal ids) and the patch passes the whole block, the helper walks the three rows instead of the tokens."
        " A `get_position_id_func` of any class (a Seed-Omni foundation, an in-tree wrapper) that returns a pipeline of stages none of which computes `position_ids` (every stage a function of the file that never writes them) has dropped the model's own position-id function."
    )
    bad = (
        Example(
            """
            from functools import partial

            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.get_position_id_func")
            def qwen3_vl_get_position_id_func_patched(self):
                fake_model = FakeModel(self.config)
                return partial(get_position_id, Qwen2VLModel.get_rope_index, fake_model)
            """,
            fixed="""
            from functools import partial

            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.get_position_id_func")
            def qwen3_vl_get_position_id_func_patched(self):
                fake_model = FakeModel(self.config)
                return partial(get_position_id, Qwen3VLModel.get_rope_index, fake_model)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="another model's rope index",
        ),
        Example(
            """
            import copy

            from veomni.patchgen.patch_spec import PatchConfig
            from veomni.utils.constants import IMAGE_INPUT_INDEX, VIDEO_INPUT_INDEX

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.get_position_id_func")
            def qwen3_vl_get_position_id_func_patched(self):
                fake_config = copy.copy(self.config)
                fake_config.image_token_id = IMAGE_INPUT_INDEX
                fake_config.video_token_id = IMAGE_INPUT_INDEX
                return partial(get_position_id, Qwen3VLModel.get_rope_index, fake_config)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
            title="a media token mapped to another modality's placeholder",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.override_method("Qwen2VLModel.forward")
            def qwen2_vl_model_forward(self, input_ids=None, position_ids=None, inputs_embeds=None, **kwargs):
                if position_ids is None:
                    position_ids, _ = self.get_rope_index(input_ids, None, None, None)
                else:
                    position_ids = position_ids.to(inputs_embeds.device)
                return self.language_model(position_ids=position_ids, inputs_embeds=inputs_embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="precomputed (batch, 3, seq) position ids handed to the text model without moving the M-RoPE axis",
        ),
        Example(
            """
            import copy
            from functools import partial

            from veomni.patchgen.patch_spec import PatchConfig
            from veomni.utils.constants import IMAGE_INPUT_INDEX, VIDEO_INPUT_INDEX

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            @config.override_method("Qwen2VLForConditionalGeneration.get_position_id_func")
            def pos_func(self):
                remapped = copy.copy(self.config)
                remapped.image_token_id = IMAGE_INPUT_INDEX
                remapped.video_token_id = VIDEO_INPUT_INDEX
                return partial(get_position_id, Qwen2VLModel.get_rope_index, Holder(self.config))
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the remapped config copy is built and never used",
        ),
        Example(
            """
            import torch


            def token_types(input_ids, cfg):
                types = torch.zeros_like(input_ids)
                types[input_ids == cfg.image_token_id] = 1
                types[input_ids == cfg.video_token_id] = 3
                return types
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
            title="video tokens typed with the audio code the M-RoPE index does not walk with the video grid",
        ),
    )
    good = (
        Example(
            """
            import torch


            def token_types(input_ids, cfg):
                types = torch.zeros_like(input_ids)
                types[input_ids == cfg.image_token_id] = 1
                types[input_ids == cfg.video_token_id] = 2
                return types
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from functools import partial

            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.get_position_id_func")
            def qwen3_vl_get_position_id_func_patched(self):
                fake_model = FakeModel(self.config)
                return partial(get_position_id, Qwen3VLModel.get_rope_index, fake_model)
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


            def sections_first(ids):
                return ids.permute(1, 0, 2) if ids.dim() == 3 else ids


            @config.override_method("Qwen2VLModel.forward")
            def qwen2_vl_model_forward(self, input_ids=None, position_ids=None, inputs_embeds=None, **kwargs):
                if position_ids is None:
                    position_ids, _ = self.get_rope_index(input_ids, None, None, None)
                else:
                    position_ids = sections_first(position_ids)
                return self.language_model(position_ids=position_ids, inputs_embeds=inputs_embeds, **kwargs)
            """,
            path="veomni/models/transformers/qwen2_vl/qwen2_vl_gpu_patch_gen_config.py",
            title="the M-RoPE axis moved to the front by a local helper",
        ),
    )
    fix_safety = (
        "Safe for a borrowed `get_rope_index`: the class becomes the upstream module's own class that defines "
        "it (the generated file defines it); offered only when exactly one class of the module defines it. "
        "A dropped call has no fix."
    )

    def finish(self) -> None:
        super().finish()
        ctx = self.ctx
        if "position_ids" in ctx.source.text and ".shape[" in ctx.source.text:
            self._mrope_layouts()
        if ("_token_id" in ctx.source.text or "position_id_func" in ctx.source.text) and (
            "INPUT_INDEX" in ctx.source.text or "position_id" in ctx.source.text
        ):
            self._token_mapping()
        if ("_token_id" in ctx.source.text or "_ids" in ctx.source.text) and (
            "] = " in ctx.source.text or "where(" in ctx.source.text or "masked_fill" in ctx.source.text
        ):
            self._type_codes()
        if ctx.source.kind.generated and ctx.source.path.endswith("_npu.py"):
            self._sibling_dropped()
        if "get_rope_index" in ctx.source.text:
            for patched in patched_methods(
                ctx.tree, ctx.source.text, "get_rope_index", ("",), path=ctx.source.path
            ):
                self._row_arguments(patched)
        if "get_position_id_func" not in ctx.source.text:
            return
        self._pipelines_without_positions()
        for patched in patched_methods(
            ctx.tree, ctx.source.text, "get_position_id_func", ("",), new_ok=True, path=ctx.source.path
        ):
            self._borrowed(patched)

    def _pipelines_without_positions(self) -> None:
        """A `get_position_id_func` that returns a pipeline of stages (`[parse_kwargs, Model.get_position_id_func(
        self)]`, composed by the caller) of which none computes position ids: every stage is a function of this
        file that never writes `position_ids`. The data transform then has no ids for the media tokens (they
        get the default 1-D positions, or none), while the model's M-RoPE expects its own index. A stage the file
        does not define (another model's position-id function, a call) counts as computing them."""
        tree = self.ctx.tree
        local = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
        for cls in nodes_of(tree, ast.ClassDef):
            assert isinstance(cls, ast.ClassDef)
            for func in cls.body:
                if not (isinstance(func, ast.FunctionDef) and func.name == "get_position_id_func"):
                    continue
                for ret in nodes_of(func, ast.Return):
                    assert isinstance(ret, ast.Return)
                    if not isinstance(ret.value, (ast.List, ast.Tuple)) or not ret.value.elts:
                        continue
                    stages = ret.value.elts
                    if all(
                        isinstance(st, ast.Name)
                        and st.id in local
                        and not writes_positions(local[st.id], local)
                        for st in stages
                    ):
                        names = ", ".join(f"`{st.id}`" for st in stages)  # type: ignore[attr-defined]
                        self.report(
                            ret,
                            f"`{cls.name}.get_position_id_func` returns a pipeline ({names}) none of whose stages "
                            "computes `position_ids`: the model's own position-id function (its M-RoPE index) "
                            "was dropped, so media tokens get no (or 1-D) positions",
                        )

    def _row_arguments(self, patched: PatchedMethod) -> None:
        """The M-RoPE index builds (3, N) position blocks (temporal, height, width rows); where the upstream
        `get_rope_index` hands a helper one row of a block (`get_chunked_index(video_llm_pos_ids[0], ...)`, the
        temporal ids) and the patch hands it the whole block, the helper iterates over the three rows instead of
        the tokens."""
        rows: dict[tuple[str, int], dict[str, str]] = {}
        whole: set[tuple[str, int, str]] = set()
        for call in _walk(patched.upstream):
            if not isinstance(call, ast.Call):
                continue
            callee = ast.unparse(call.func)
            for i, arg in enumerate(call.args):
                if (
                    isinstance(arg, ast.Subscript)
                    and isinstance(arg.value, ast.Name)
                    and isinstance(arg.slice, ast.Constant)
                    and type(arg.slice.value) is int
                ):
                    rows.setdefault((callee, i), {})[arg.value.id] = ast.unparse(arg)
                elif isinstance(arg, ast.Name):
                    whole.add((callee, i, arg.id))
        if not rows:
            return
        for call in _walk(patched.func):
            if not isinstance(call, ast.Call):
                continue
            callee = ast.unparse(call.func)
            for i, arg in enumerate(call.args):
                if not isinstance(arg, ast.Name) or arg.id not in rows.get((callee, i), {}):
                    continue
                row = rows[(callee, i)][arg.id]
                if (callee, i, arg.id) in whole:
                    continue
                self.report(
                    arg,
                    f"`{callee}(...)` gets the whole position block `{arg.id}` where the upstream `get_rope_index` "
                    f"passes one row of it (`{row}`): the helper walks the M-RoPE rows (temporal, height, "
                    "width) instead of the tokens, so the chunked positions are wrong or the call fails",
                )

    def _type_codes(self) -> None:
        """A function that builds the token-type ids the M-RoPE index reads (`mm_token_type_ids`) must give each
        modality its own code, the one transformers' processors write (image 1, video 2, audio 3): the index
        walks a run of code k with that modality's `grid_thw`."""
        convention = _convention()
        if not _type_codes(
            self.ctx.tree
        ):  # each node's code is its own: none in the file, none in a function
            return
        done: set[int] = set()
        functions = [f for f in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef)]
        for func in sorted(functions, key=lambda f: -f.lineno):  # innermost first
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            seen: dict[tuple[str, int], str] = {}
            for node, array, mod, code in _type_codes(func):
                if id(node) in done:  # a nested function's statement, checked with its own function
                    continue
                other = seen.get((array, code))
                if other is not None and other != mod:
                    done.add(id(node))
                    self.report(
                        node,
                        f"`{array}` gives {mod} tokens the code {code}, which {other} tokens already have: the "
                        f"M-RoPE index reads a run of code {code} with the {other} grid, so {mod} tokens get "
                        f"{other} positions (or the {other} grids run out)",
                    )
                    continue
                seen[(array, code)] = mod
                done.add(id(node))
                want = convention.get(mod)
                if want is not None and code != want:
                    self.report(
                        node,
                        f"`{array}` gives {mod} tokens the code {code}, but transformers' processors and the "
                        f"M-RoPE index use {want} for {mod} (`ProcessorMixin.create_mm_token_type_ids`): {mod} "
                        "tokens get another modality's positions",
                    )

    def _mrope_layouts(self) -> None:
        """`if position_ids.shape[k] == 3:` (the M-RoPE axis found at axis k of the collated batch) must move
        that axis to the front (`transpose(0, k)`): the rotary embedding indexes the three sections on axis 0."""
        lines = self.ctx.source.text.splitlines()
        wanted = {
            i + 1
            for i, line in enumerate(lines)
            if "position" in line and ".shape[" in line and "== 3" in line
        }
        if not wanted:
            return
        stack: list[ast.AST] = [self.ctx.tree]
        ifs: list[ast.If] = []
        while stack:  # statements only: an `if` is never inside an expression
            node = stack.pop()
            if isinstance(node, ast.If) and node.lineno in wanted:
                ifs.append(node)
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                stmts = getattr(node, field, None)
                if isinstance(stmts, list):
                    stack.extend(stmts)
        for node in sorted(ifs, key=lambda n: n.lineno):
            found = _axis_test(node.test)
            if found is None:
                continue
            name, axis = found
            moves = [
                c
                for stmt in node.body
                for c in _walk(stmt)
                if isinstance(c, ast.Call)
                and isinstance(c.func, ast.Attribute)
                and c.func.attr in ("transpose", "permute", "movedim", "swapaxes")
                and name in ast.unparse(c.func.value)
            ]
            if not moves:
                if axis != 0 and any(
                    isinstance(t, ast.Name) and t.id == name
                    for stmt in node.body
                    if isinstance(stmt, ast.Assign)
                    for t in stmt.targets
                ):
                    self.report(
                        node.test,
                        f"`{name}` has its 3 M-RoPE sections on axis {axis} here, but the branch does not move "
                        "them to axis 0 (`transpose(0, " + str(axis) + ")`): the rotary embedding reads "
                        "batch rows as sections",
                    )
                continue
            for move in moves:
                dims = [int_value(a) for a in move.args]
                if move.func.attr in ("transpose", "swapaxes", "movedim") and len(dims) == 2:  # type: ignore[attr-defined]
                    ok = set(dims) == {0, axis} and axis != 0
                elif move.func.attr == "permute" and dims:  # type: ignore[attr-defined]
                    ok = dims[0] == axis and axis != 0
                else:
                    continue
                if not ok:
                    self.report(
                        move,
                        f"`{name}` has its 3 M-RoPE sections on axis {axis}; `{ast.unparse(move.func)}"  # type: ignore[attr-defined]
                        f"({', '.join(ast.unparse(a) for a in move.args)})` does not bring them to axis 0",
                    )

    def _caller_layout(self, patched: PatchedMethod, methods: list[str]) -> None:
        """Position ids the caller supplies (VeOmni precomputes M-RoPE ids per sample as (3, seq) and collates
        them as (batch, 3, seq)) must have their 3 sections moved to axis 0 before the text model: a patched
        forward that passes `position_ids` on and never transposes it feeds batch rows in as t/h/w sections."""
        func = patched.func
        if "position_ids" not in params_of(func) or not passed_on(func, "position_ids"):
            return
        helpers = {s.name: s for s in self.ctx.tree.body if isinstance(s, ast.FunctionDef)}
        for stmt in func.body:
            if _moves_axes(stmt, "position_ids", helpers):
                return
        # where the layout should be fixed: a statement re-deriving the caller's ids from themselves, else the
        # `else` of `if position_ids is None:`, else where they are handed on
        at: ast.AST | None = None
        for node in _walk(func):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "position_ids" for t in node.targets)
                and any(isinstance(n, ast.Name) and n.id == "position_ids" for n in _walk(node.value))
                and not any(m in ast.unparse(node.value) for m in methods)
            ):
                if at is None or node.lineno < at.lineno:  # type: ignore[attr-defined]
                    at = node
        if at is None:
            for node in _walk(func):
                if (
                    isinstance(node, ast.If)
                    and "position_ids is None" in ast.unparse(node.test)
                    and node.orelse
                ):
                    at = node.orelse[0]
                    break
        if at is None:
            at = next(
                (
                    k
                    for n in _walk(func)
                    if isinstance(n, ast.Call)
                    for k in n.keywords
                    if k.arg == "position_ids"
                    and isinstance(k.value, ast.Name)
                    and k.value.id == "position_ids"
                ),
                None,
            )
        self.report(
            at if at is not None else def_span(self.ctx, func),
            f"`{patched.cls}.{patched.name}` passes caller-supplied `position_ids` on without moving the M-RoPE "
            "axis to the front: precomputed ids arrive collated as (batch, 3, seq), the text model reads "
            f"(3, batch, seq) (what `self.{methods[0]}` returns), so batch rows are read as t/h/w sections "
            "(`position_ids.transpose(0, 1)` when `position_ids.dim() == 3 and position_ids.shape[1] == 3`)",
        )

    def _token_mapping(self) -> None:
        """The media token ids a position-id function maps must be the placeholders the data transform writes
        into `input_ids` (the tree's `<MODALITY>_INPUT_INDEX`), one per modality the model's config has."""
        ctx = self.ctx
        root = ctx.project.root
        module = file_source_module(ctx.tree, ctx.source.text, ctx.source.path)
        lines = ctx.source.text.splitlines()
        for cls, func in _owner_classes(ctx.tree):
            if "INPUT_INDEX" in ctx.source.text:
                self._unknown_fields(cls, func, module)
            if not any("_token_id =" in line for line in lines[func.lineno - 1 : func.end_lineno]):
                self._unmapped_copy(cls, func, module)
                continue
            found = _token_assignments(func)
            if not found:
                continue
            self._mapping_unused(func, found)
            mapped: set[str] = set()
            for _stmt, mod, value in found:
                expected = f"{mod.upper()}_INPUT_INDEX"
                name = last_name(value)
                if name is not None and name.endswith("_INPUT_INDEX"):
                    mapped.add(mod)
                    if name != expected:
                        self.report(
                            value,
                            f"`{mod}_token_id` is mapped to `{name}`, but the data transform writes `{expected}` "
                            f"at {mod} positions: the {mod} tokens get text positions",
                        )
                    continue
                literal = int_value(value)
                want = tree_constant(root, expected)
                if literal is not None:
                    mapped.add(mod)
                    if want is not None and literal != want:
                        self.report(
                            value,
                            f"`{mod}_token_id` is mapped to {literal}, but the data transform writes {expected} = "
                            f"{want} at {mod} positions",
                        )
            if not mapped or cls is None or module is None or not module.startswith("transformers."):
                continue
            fields = composite_config_fields(module, cls)
            if fields is None:
                continue
            for mod in _MODALITIES:
                if (
                    mod not in mapped
                    and f"{mod}_token_id" in fields[1]
                    and tree_constant(root, f"{mod.upper()}_INPUT_INDEX") is not None
                ):
                    self.report(
                        found[0][0],
                        f"the position-id function maps {', '.join(sorted(mapped))} tokens to the data transform's "
                        f"placeholders but not `{mod}_token_id` (the data transform writes "
                        f"`{mod.upper()}_INPUT_INDEX`): {mod} tokens get text positions",
                    )

    def _unknown_fields(self, cls: str | None, func: ast.FunctionDef, module: str | None) -> None:
        """A data-transform placeholder stored on a config attribute the model's config does not define
        (`cfg.image_token_index = IMAGE_INPUT_INDEX` where the config has `image_token_id`): the rope index never
        reads it, so that medium keeps its original token id."""
        if (
            cls is None
            or module is None
            or not module.startswith("transformers.")
            or "position_id" not in (method_name(func) or "")
        ):
            return
        fields = None
        for node in _walk(func):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            target, value = node.targets[0], node.value
            name = last_name(value) or ""
            if not (name.endswith("_INPUT_INDEX") and isinstance(target, ast.Attribute)):
                continue
            if fields is None:
                fields = composite_config_fields(module, cls)
                if fields is None:
                    return
            if target.attr in fields[1] or target.attr in fields[2]:
                continue
            known = sorted(f for f in fields[1] if f in {f"{m}_token_id" for m in _MODALITIES})
            self.report(
                target,
                f"`{ast.unparse(target)}` is not a field of `{fields[0]}` (its media token ids are "
                f"{', '.join(f'`{k}`' for k in known) or 'other fields'}): the position-id function never reads it, "
                f"so the placeholder `{name}` is not mapped",
            )

    def _mapping_unused(self, func: ast.FunctionDef, found: list[tuple[ast.Assign, str, ast.expr]]) -> None:
        """The remapped config copy (`fake_config.image_token_id = IMAGE_INPUT_INDEX`) must be what the
        position-id function is built from: a local that is never read after its mapping leaves the function
        working on the original token ids (`Fake(config=self.config)`)."""
        holders: dict[str, int] = {}
        for stmt, _mod, _value in found:
            target = stmt.targets[0]
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                name = target.value.id
                holders[name] = max(holders.get(name, 0), stmt.end_lineno or stmt.lineno)
        for name, last in holders.items():
            if name == "self":
                continue
            assigned = any(
                isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in _walk(func)
            )
            if not assigned:
                continue  # a parameter or a global: the caller holds it
            read_after = any(
                isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > last
                for n in _walk(func)
            )
            if read_after:
                continue
            instead = next(
                (
                    n
                    for n in _walk(func)
                    if isinstance(n, ast.Attribute)
                    and n.attr == "config"
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "self"
                    and n.lineno > last
                ),
                None,
            )
            self.report(
                instead if instead is not None else found[-1][0],
                f"`{name}` gets the data transform's token ids but is never used after that"
                + (" (the position-id function is built from `self.config`)" if instead is not None else "")
                + ": the precomputed position ids look for the original token ids and give media tokens text "
                "positions",
            )

    def _unmapped_copy(self, cls: str | None, func: ast.FunctionDef, module: str | None) -> None:
        """A position-id function that copies the model config (`copy.copy(self.config)`: the copy exists to be
        remapped) but maps no media token id onto the data transform's placeholders."""
        if (
            cls is None
            or module is None
            or not module.startswith("transformers.")
            or "position_id" not in func.name
        ):
            return
        copies = [
            n
            for n in _walk(func)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("copy", "deepcopy")
            and n.args
            and ast.unparse(n.args[0]).endswith("config")
        ]
        if not copies:
            return
        for n in _walk(func):  # a mapping in another form (`setattr(cfg, name, IMAGE_INPUT_INDEX)`, a loop)
            word = (
                n.id
                if isinstance(n, ast.Name)
                else n.attr
                if isinstance(n, ast.Attribute)
                else n.value
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
                else ""
            )
            if "token_id" in word or "INPUT_INDEX" in word:
                return
        fields = composite_config_fields(module, cls)
        if fields is None:
            return
        root = self.ctx.project.root
        missing = [
            mod
            for mod in _MODALITIES
            if f"{mod}_token_id" in fields[1]
            and tree_constant(root, f"{mod.upper()}_INPUT_INDEX") is not None
        ]
        if missing:
            self.report(
                copies[0],
                f"the position-id function copies the config but never maps "
                f"{', '.join(f'`{m}_token_id`' for m in missing)} to the data transform's placeholders "
                f"({', '.join(f'`{m.upper()}_INPUT_INDEX`' for m in missing)}): media tokens get text positions",
            )

    def _sibling_dropped(self) -> None:
        """Position-id methods the GPU generated sibling defines on a class and this NPU module does not."""
        classes = {n.name: n for n in self.ctx.tree.body if isinstance(n, ast.ClassDef)}
        for owner, name, before in gpu_sibling_only(self.ctx.source.path, self.ctx.source.text):
            if owner is None or owner not in classes or not _position_methods({name}):
                continue
            node = classes[owner]
            prev = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == before), None)
            if prev is not None and prev.end_lineno is not None:
                line = prev.end_lineno + 1
                at: ast.AST | tuple[int, int, int, int] = (line, 0, line, 0)
            else:
                at = (node.lineno, 0, node.lineno, 6 + len(node.name))
            self.report(
                at,
                f"`{owner}.{name}` is defined by the GPU generated module and not by this NPU one: on NPU "
                f"`{owner}` falls back to an inherited `{name}` (or has none), so the data pipeline builds "
                "other position ids than on GPU",
            )

    def _borrowed(self, patched: PatchedMethod) -> None:
        own_names = set(upstream_class_names(patched.module))
        owners = []
        for name in sorted(own_names):
            found = upstream_class(patched.module, name)
            if found is not None and found[0] == patched.module:
                if any(isinstance(s, ast.FunctionDef) and s.name == "get_rope_index" for s in found[1].body):
                    owners.append(name)
        if not owners:
            return
        for node in _walk(patched.func):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "get_rope_index"
                and isinstance(node.value, ast.Name)
                and node.value.id not in own_names
                and node.value.id not in ("self", "cls")
                and node.value.id[:1].isupper()
            ):
                fix = None
                if len(owners) == 1:
                    fix = make_fix(
                        f"Use `{owners[0]}.get_rope_index`",
                        [self.ctx.replace(node.value, owners[0])],
                        Applicability.SAFE,
                    )
                self.report(
                    node.value,
                    f"`{node.value.id}.get_rope_index` is not this model's position-id function "
                    f"({patched.module} defines {', '.join(f'`{o}`' for o in owners)})",
                    fix,
                )

    def check(self, patched: PatchedMethod) -> None:
        upstream = _position_methods(_self_calls(patched.upstream))
        if upstream and any(w in m for m in upstream for w in _MROPE_HINTS):
            self._caller_layout(patched, sorted(upstream))
        if not upstream or not patched.cls.endswith("Model"):
            return
        if _position_methods(_self_calls(patched.func)):
            return
        self.report(
            def_span(self.ctx, patched.func),
            f"`{patched.cls}.forward` no longer calls the model's position-id function "
            f"({', '.join(f'`self.{m}`' for m in sorted(upstream))}): image and video tokens get 1-D text positions",
        )
