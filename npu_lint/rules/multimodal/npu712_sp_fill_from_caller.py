"""NPU712 sp-fill-from-caller."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Example, Rule
from npu_lint.rules.multimodal._modality import root_name
from npu_lint.rules.multimodal._shared import BACK_WORDS, gathers

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _slices(value: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Call) and any(w in call_name(node).lower() for w in BACK_WORDS)
        for node in _walk(value)
    )


def _params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = func.args
    return [a.arg for a in [*args.posonlyargs, *args.args]]


def _assigns(func: ast.AST) -> list[tuple[int, str, ast.AST]]:
    """(line, name, value) of each plain binding of a name in ``func``, in line order."""
    out = []
    for node in _walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.append((node.lineno, target.id, node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            out.append((node.lineno, node.target.id, node.value))
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and node.value.args
            and isinstance(node.value.args[0], ast.Name)
            and gathers(node.value)
        ):
            out.append((node.lineno, node.value.args[0].id, node.value))  # `dist.all_gather(parts, x)`
    out.sort(key=lambda e: e[0])
    return out


class SpFillFromCaller(Rule):
    code = "NPU712"
    name = "sp-fill-from-caller"
    summary = (
        "A function receives the sequence its caller all-gathered for sequence parallelism and scatters media "
        "features into it (`masked_scatter`, an indexed write) without gathering the features: one rank's "
        "media rows for the whole sequence's placeholders."
    )
    why = (
        "Under sequence parallelism a multimodal encoder often gathers the embedded sequence once "
        "(`inputs_embeds = gather_outputs(inputs_embeds, ...)`) and hands it to one helper per medium "
        "(`image_forward`, `audio_forward`) that scatters that medium's features at its placeholders. Each rank "
        "encodes only its shard of the media, so every helper must all-gather its features over the SP group "
        "before the scatter: the sequence and its mask cover all ranks' placeholders. A helper that skips the "
        "gather hands `masked_scatter` 1/sp of the rows (it raises, or fills the placeholders with the wrong "
        "rows). The check follows a gathered local of each function into the helpers of the same class or "
        "module it is passed to (positionally or by keyword) and looks at what the helper scatters into that "
        "parameter: a source that no gather (or a local derived from one) produced in the helper, and that is "
        "not the helper's own parameter, is reported."
    )
    bad = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


            class ToyOmniEncoder:
                def speech(self, embeds, speech_mask, speech_inputs):
                    feats = self.speech_encoder(speech_inputs).to(embeds)
                    feats = feats[: speech_mask.sum()]
                    return embeds.masked_scatter(speech_mask.unsqueeze(-1), feats)

                def pictures(self, embeds, picture_mask, picture_inputs):
                    feats = self.picture_encoder(picture_inputs)
                    if get_parallel_state().sp_enabled:
                        feats = gather_outputs(feats, gather_dim=0, group=get_parallel_state().sp_group)
                    return embeds.masked_scatter(picture_mask.unsqueeze(-1), feats)

                def forward(self, input_ids, speech_mask, speech_inputs, picture_mask, picture_inputs):
                    embeds = self.embed_tokens(input_ids)
                    if get_parallel_state().sp_enabled:
                        embeds = gather_outputs(embeds, gather_dim=1, group=get_parallel_state().sp_group)
                    embeds = self.pictures(embeds, picture_mask, picture_inputs)
                    embeds = self.speech(embeds=embeds, speech_mask=speech_mask, speech_inputs=speech_inputs)
                    if get_parallel_state().sp_enabled:
                        embeds = slice_input_tensor(embeds, dim=1, group=get_parallel_state().sp_group)
                    return embeds
            """,
            path="veomni/models/seed_omni/toy_omni/modeling_toy_omni.py",
            title="the speech helper scatters rank-local features into the gathered sequence",
        ),
        Example(
            """
            import torch.distributed as dist
            import torch


            def _fill(seq, mask, tower, pixels):
                rows = tower(pixels)
                seq[mask] = rows
                return seq


            def merge(seq, mask, tower, pixels, group):
                parts = [torch.empty_like(seq) for _ in range(dist.get_world_size(group))]
                dist.all_gather(parts, seq, group=group)
                full = torch.cat(parts, dim=1)
                return _fill(full, mask, tower, pixels)
            """,
            path="veomni/models/transformers/toy/modeling_toy_merge.py",
            title="a module-level helper gets the all-gathered sequence, the tower's rows stay local",
        ),
    )
    good = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state
            from veomni.distributed.sequence_parallel import gather_outputs


            class ToyOmniEncoder:
                def speech(self, embeds, speech_mask, speech_inputs):
                    feats = self.speech_encoder(speech_inputs)
                    if get_parallel_state().sp_enabled:
                        feats = gather_outputs(feats, gather_dim=0, group=get_parallel_state().sp_group)
                    feats = feats[: speech_mask.sum()]
                    return embeds.masked_scatter(speech_mask.unsqueeze(-1), feats)

                def given(self, embeds, mask, rows):
                    return embeds.masked_scatter(mask, rows)

                def forward(self, input_ids, speech_mask, speech_inputs, rows):
                    embeds = self.embed_tokens(input_ids)
                    if get_parallel_state().sp_enabled:
                        embeds = gather_outputs(embeds, gather_dim=1, group=get_parallel_state().sp_group)
                    embeds = self.speech(embeds, speech_mask, speech_inputs)
                    return self.given(embeds, speech_mask, rows)
            """,
            path="veomni/models/seed_omni/toy_omni/modeling_toy_omni.py",
            title="the helper gathers its features; a helper given its rows by the caller",
        ),
    )
    fix_safety = "No fix: the gather belongs under the helper's sequence-parallel guard."
    requires = ("gather", ("masked_scatter", "] = "))
    node_types = ()

    def finish(self) -> None:
        tree = self.ctx.tree
        top: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        methods: dict[int, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        owner: dict[int, ast.ClassDef] = {}
        for stmt in tree.body:
            if isinstance(stmt, _FUNCS):
                top[stmt.name] = stmt
            elif isinstance(stmt, ast.ClassDef):
                table = {s.name: s for s in stmt.body if isinstance(s, _FUNCS)}
                methods[id(stmt)] = table
                for s in table.values():
                    owner[id(s)] = stmt
        done: set[int] = set()
        for func in [*top.values(), *(f for t in methods.values() for f in t.values())]:
            if not any("gather" in call_name(n).lower() for n in nodes_of(func, ast.Call)):
                continue
            cls = owner.get(id(func))
            self._follow(func, top, methods[id(cls)] if cls is not None else {}, done)

    def _follow(
        self,
        func: ast.FunctionDef | ast.AsyncFunctionDef,
        top: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
        own_methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
        done: set[int],
    ) -> None:
        targets: list[tuple[ast.Call, ast.FunctionDef | ast.AsyncFunctionDef, int]] = []
        for node in _walk(func):
            if not isinstance(node, ast.Call):
                continue
            callee, offset = None, 0
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                callee, offset = own_methods.get(f.attr), 1
            elif isinstance(f, ast.Name):
                callee = top.get(f.id)
            if callee is not None and callee is not func:
                targets.append((node, callee, offset))
        if not targets:
            return
        targets.sort(key=lambda t: (t[0].lineno, t[0].col_offset))
        binds = _assigns(func)
        live: dict[str, int] = {}  # names holding a gathered (full) sequence, with the line of the gather
        i = 0
        for node, callee, offset in targets:
            while i < len(binds) and binds[i][0] < node.lineno:
                self._step(live, *binds[i])
                i += 1
            if not live:
                continue
            params = _params(callee)
            for k, arg in enumerate(node.args):
                if isinstance(arg, ast.Name) and arg.id in live and k + offset < len(params):
                    self._check(callee, params[k + offset], func, arg.id, live[arg.id], done)
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in live and kw.arg in params:
                    self._check(callee, kw.arg, func, kw.value.id, live[kw.value.id], done)

    @staticmethod
    def _step(live: dict[str, int], at: int, name: str, value: ast.AST) -> None:
        """Update the gathered names with one binding ``name = value`` at line ``at``."""
        if gathers(value):
            live[name] = at
        elif _slices(value):
            live.pop(name, None)
        else:
            root = root_name(value)
            if root is not None and root.id in live:
                live[name] = live[root.id]
            elif isinstance(value, ast.Call) and (
                hit := next(
                    (
                        a.id
                        for a in [*value.args, *(k.value for k in value.keywords)]
                        if isinstance(a, ast.Name) and a.id in live
                    ),
                    None,
                )
            ):
                live[name] = live[hit]  # a call on the full sequence (`torch.cat`, a helper) returns it
            else:
                live.pop(name, None)

    def _check(
        self,
        helper: ast.FunctionDef | ast.AsyncFunctionDef,
        param: str,
        caller: ast.FunctionDef | ast.AsyncFunctionDef,
        local: str,
        gathered_at: int,
        done: set[int],
    ) -> None:
        params = set(_params(helper)) | {a.arg for a in helper.args.kwonlyargs}
        binds = _assigns(helper)
        for node in _walk(helper):
            source = None
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("masked_scatter", "masked_scatter_")
                and len(node.args) == 2
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == param
            ):
                source = node.args[1]
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Subscript)
                and isinstance(node.targets[0].value, ast.Name)
                and node.targets[0].value.id == param
            ):
                source = node.value
            if source is None or id(node) in done:
                continue
            root = root_name(source)
            if root is None or root.id in params or root.id == param:
                continue
            if self._gathered_in(binds, root.id, node.lineno):
                continue
            done.add(id(node))
            self.report(
                source,
                f"`{root.id}` is scattered into `{param}`, which holds the sequence `{caller.name}` all-gathered "
                f"at line {gathered_at} (passed as `{local}`), but `{helper.name}` never gathers `{root.id}`: "
                "under sequence parallelism each rank scatters only its own shard of media rows into the whole "
                "sequence's placeholders (all-gather it over the SP group on dim 0 first)",
            )

    @staticmethod
    def _gathered_in(binds: list[tuple[int, str, ast.AST]], name: str, line: int) -> bool:
        """Whether ``name`` holds (something derived from) a gathered tensor at ``line``."""
        gathered: set[str] = set()
        for at, target, value in binds:
            if at >= line:
                break
            root = root_name(value)
            if gathers(value) or (root is not None and root.id in gathered):
                gathered.add(target)
            else:
                gathered.discard(target)
        return name in gathered
