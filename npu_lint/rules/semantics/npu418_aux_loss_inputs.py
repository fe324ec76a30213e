"""NPU418 aux-loss-inputs."""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

from npu_lint.core.astutil import last_name, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of, path_before
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.upstream import PatchedMethod, patched_methods, upstream_mro, upstream_path

_SWITCH = "output_router_logits"
_FIELD = "router_logits"


def _mentions(func: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr for n in _walk(func))


def _config_fallback(func: ast.AST) -> bool:
    """The switch falls back to the model config: some `...config....output_router_logits` is read."""
    return any(
        isinstance(n, ast.Attribute) and n.attr == _SWITCH and "config" in ast.unparse(n.value)
        for n in nodes_of(func, ast.Attribute)
    )


def _switch_assignment(func: ast.FunctionDef) -> ast.Assign | None:
    for node in _walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == _SWITCH for t in node.targets
        ):
            return node
    return None


def _params(func: ast.FunctionDef) -> list[str]:
    args = func.args
    return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]


def _annotated(node: ast.ClassDef) -> set[str]:
    return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def _class_fields(module: str, tree: ast.Module, name: str) -> set[str] | None:
    """The dataclass fields of output class ``name``: a class of the linted file (its bases followed upstream)
    or of the upstream module (None: not found)."""
    local = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == name), None)
    if local is not None:
        out = _annotated(local)
        for base in local.bases:
            base_name = last_name(base)
            if base_name:
                out |= {
                    f
                    for entry in upstream_mro(module, base_name)
                    if entry.node
                    for f in _annotated(entry.node)
                }
        return out
    entries = upstream_mro(module, name)
    if not entries:
        return None
    return {f for entry in entries if entry.node is not None for f in _annotated(entry.node)}


def _returned_calls(func: ast.FunctionDef) -> list[ast.Call]:
    return [
        n.value
        for n in _walk(func)
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
    ]


def _passes_field(func: ast.FunctionDef) -> bool:
    """The upstream forward hands the router logits on: a `router_logits=` keyword or `**outputs` in what it
    returns."""
    for call in _returned_calls(func):
        if any(kw.arg in (_FIELD, None) for kw in call.keywords):
            return True
    return False


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in _walk(node) if isinstance(n, ast.Name)}


def _adds_aux(func: ast.AST) -> bool:
    """Some statement adds an auxiliary loss into the loss (`loss += coef * aux_loss`, `loss = loss + ...`,
    `loss.add_(...)`, `torch.add(loss, ...)`)."""
    for node in _walk(func):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            target, value = ast.unparse(node.target), node.value
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.BinOp, ast.Call)):
            target, value = " ".join(ast.unparse(t) for t in node.targets), node.value
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            target, value = ast.unparse(node.value.func), node.value
        else:
            continue
        if "loss" in target and "aux" not in target.split(".")[0] and any("aux" in n for n in _names(value)):
            return True
    return False


def _aux_computed(func: ast.AST) -> ast.Assign | None:
    """`aux_loss = <call>(...)`: an auxiliary loss computed into a local."""
    for node in _walk(func):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and any(isinstance(t, ast.Name) and "aux" in t.id and "loss" in t.id for t in node.targets)
        ):
            return node
    return None


def _binds(node: ast.AST, name: str) -> bool:
    """`name = <not None>` somewhere in ``node``."""
    return any(
        isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
        and not (isinstance(n.value, ast.Constant) and n.value.value is None)
        for n in _walk(node)
    ) or any(
        isinstance(n, ast.Assign)
        and not (
            isinstance(n.value, ast.Tuple)
            and all(isinstance(e, ast.Constant) and e.value is None for e in n.value.elts)
        )
        and any(
            isinstance(t, ast.Tuple) and any(isinstance(e, ast.Name) and e.id == name for e in t.elts)
            for t in n.targets
        )
        for n in _walk(node)
    )


_AUXILIARY = re.compile(r"aux|balanc|z_loss", re.IGNORECASE)
_SCALE = re.compile(r"coef|weight|scale|alpha|factor|torch|math", re.IGNORECASE)


def _aux_only(value: ast.AST) -> tuple[str, set[str]] | None:
    """The auxiliary loss a value is built from, when it is built from nothing else (scales and `self` aside),
    and the names it reads (`loss.device` / `.dtype` / `.shape` not counted: where the value goes). An attribute
    naming an auxiliary loss (`outputs.aux_loss`) counts as one, its receiver with it."""
    nodes = _walk(value)
    meta = {
        id(n.value) for n in nodes if isinstance(n, ast.Attribute) and n.attr in ("device", "dtype", "shape")
    }
    inside: set[int] = set()
    aux: list[str] = []
    for n in nodes:
        if isinstance(n, ast.Attribute) and _AUXILIARY.search(n.attr) and "coef" not in n.attr.lower():
            if id(n) not in inside:
                aux.append(ast.unparse(n))
            inside.update(id(m) for m in _walk(n.value))
    names = {n.id for n in nodes if isinstance(n, ast.Name) and id(n) not in meta}
    free = {n.id for n in nodes if isinstance(n, ast.Name) and id(n) not in meta and id(n) not in inside}
    aux.extend(sorted(n for n in free if _AUXILIARY.search(n) and "coef" not in n.lower()))
    if not aux:
        return None
    if any(n not in aux and n != "self" and not _SCALE.search(n) for n in free):
        return None  # built from other inputs too (a loss dict, a sum of heads): not the auxiliary loss alone
    return aux[0], names


def _main_loss_before(func: ast.AST, node: ast.AST, target: str) -> bool:
    """`target` holds a loss on the path to ``node`` (bound to something else than None, and not only tested)."""
    before = path_before(func, node)
    if any(isinstance(b, ast.expr) and target in _names(b) for b in before):
        return False  # `if loss is None: loss = aux_loss`: no main loss on this path
    return any(isinstance(b, ast.stmt) and _binds(b, target) for b in before)


def aux_substitutions(func: ast.AST) -> list[tuple[ast.AST, str, str]]:
    """`loss = coef * aux_loss` where `loss` already holds the main loss on the path: the auxiliary loss replaces
    it instead of being added (`loss = loss + ...`, `loss += ...`); likewise an output built with
    `loss=<the auxiliary loss alone>` that leaves the main loss out. (node, loss name, auxiliary name)."""
    out: list[tuple[ast.AST, str, str]] = []
    for node in _walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            if "loss" not in target.lower() or "aux" in target.lower():
                continue
            found = _aux_only(node.value)
            if found is None or target in found[1]:
                continue
            if _main_loss_before(func, node, target):
                out.append((node, target, found[0]))
        elif isinstance(node, ast.Call) and any(kw.arg == "loss" for kw in node.keywords):
            value = next(kw.value for kw in node.keywords if kw.arg == "loss")
            found = _aux_only(value)
            if found is None:
                continue
            used = _names(node)
            stmts = [s for s in _walk(func) if isinstance(s, ast.stmt) and s is not func and node in _walk(s)]
            if not stmts:
                continue
            stmt = stmts[-1]  # the innermost (breadth-first order)
            for local in sorted({n.id for n in _walk(func) if isinstance(n, ast.Name)}):
                if (
                    "loss" in local.lower()
                    and not _AUXILIARY.search(local)
                    and local not in used
                    and _main_loss_before(func, stmt, local)
                ):
                    out.append((value, local, found[0]))
                    break
    return out


def _calls_by_name(func: ast.AST) -> dict[str, list[ast.Call]]:
    out: dict[str, list[ast.Call]] = {}
    for node in _walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and "loss" in node.func.id:
            out.setdefault(node.func.id, []).append(node)
    return out


# -- loss functions' definitions ----------------------------------------------------------------------------


def _module_functions(path: str) -> dict[str, tuple[str, ...]]:
    """Positional parameter names of a module's functions, re-read when the file changes (a language server
    outlives edits of the module)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return {}
    return _module_functions_at(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _module_functions_at(path: str, mtime_ns: int, size: int) -> dict[str, tuple[str, ...]]:
    parsed = load_file(path)  # the run's one tree of the file (shared with the file pass)
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return {}
    return {
        s.name: tuple(a.arg for a in [*s.args.posonlyargs, *s.args.args])
        for s in tree.body
        if isinstance(s, ast.FunctionDef)
    }


def _module_file(module: str, root: str | None) -> str | None:
    if module.startswith("transformers."):
        path = upstream_path(module)
        return str(path) if path is not None else None
    if root is None or not module.startswith("veomni"):
        return None
    base = Path(root, *module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return str(candidate)
    return None


def _relative_file(here: str | None, module: str | None, level: int) -> str | None:
    """The file a relative import (`from .eager import f`) names, from the importing file's own path."""
    if here is None or level < 1:
        return None
    base = Path(here).resolve().parent
    for _ in range(level - 1):
        base = base.parent
    target = base.joinpath(*(module or "").split(".")) if module else base
    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
        if candidate.is_file():
            return str(candidate)
    return None


def _definitions(
    tree: ast.Module, root: str | None, here: str | None = None
) -> dict[str, tuple[tuple[str, ...], str]]:
    """Positional parameters of the loss functions a file can call by name: its own module-level functions,
    those it imports from transformers or from the tree (relative imports included), and module-level aliases
    of those (`_impl = load_balancing_loss_pytorch`) (``name -> (params, where)``)."""
    out: dict[str, tuple[tuple[str, ...], str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or stmt.level):
            wanted = [(a.name, a.asname or a.name) for a in stmt.names if "loss" in (a.asname or a.name)]
            if not wanted:
                continue
            if stmt.level:
                path = _relative_file(here, stmt.module, stmt.level)
            else:
                path = _module_file(stmt.module or "", root)
            if path is None:
                continue
            funcs = _module_functions(path)
            for name, local in wanted:
                if name in funcs:
                    out[local] = (funcs[name], "." * stmt.level + (stmt.module or ""))
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and "loss" in stmt.name:
            out[stmt.name] = (tuple(a.arg for a in [*stmt.args.posonlyargs, *stmt.args.args]), "this file")
    for stmt in tree.body:  # `_impl = imported_loss_function`: the alias takes the same arguments
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Name)
            and stmt.value.id in out
            and stmt.targets[0].id not in out
        ):
            params, where = out[stmt.value.id]
            out[stmt.targets[0].id] = (params, f"{where}, as `{stmt.value.id}`")
    return out


def _partial_bindings(tree: ast.Module) -> dict[str, str]:
    """`self.<attr> = partial(<function>, <keywords only>)`: the attribute calls the function with its positional
    parameters unchanged."""
    out: dict[str, str] = {}
    for node in nodes_of(tree, ast.Assign):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and isinstance(node.targets[0].value, ast.Name)
            and node.targets[0].value.id == "self"
            and isinstance(node.value, ast.Call)
            and last_name(node.value.func) == "partial"
            and len(node.value.args) == 1
            and isinstance(node.value.args[0], ast.Name)
        ):
            continue
        out[node.targets[0].attr] = node.value.args[0].id
    return out


class AuxLossInputs(Rule):
    code = "NPU418"
    name = "aux-loss-inputs"
    summary = "The MoE load-balancing loss loses its inputs or its effect: the router-logits switch no longer falls back to the config, `router_logits` is dropped from an output upstream fills, the loss gets fewer arguments than upstream passes or its arguments in another order than its parameters (or than the other branch), or it is computed and never added."
    why = (
        "The auxiliary (load-balancing) loss of an MoE model is computed from the router logits the decoder "
        "layers record, and only when `output_router_logits` is on. VeOmni's trainers never pass that switch per "
        "call: upstream causal-LM forwards fall back to `self.config.output_router_logits`, so a patched forward "
        "whose fallback is a constant (or that drops the fallback) trains without any load-balancing term even "
        "when the run configures it. A patched model forward that spells out the fields of its output but leaves "
        "out `router_logits` (where the upstream one passes them, or `**outputs`) hands the head `None`, and the "
        "auxiliary loss silently vanishes (the router collapses). Positional arguments of a loss function whose "
        "definition the linter can read (a function of the same file, or one imported from transformers or from "
        "the tree) are compared with its parameters: an argument named after another parameter of that function "
        "(`num_experts` passed where `top_k` is expected) is reported; keyword arguments are never judged. A switch handed on to the inner model as a false constant (`output_router_logits=False`) where upstream hands on the variable is reported too. Two loss calls of one function (the fused handle and the eager fallback) given the same values in another order are reported at the later one (or at the one the definition shows wrong). Compared with the upstream forward: a loss function it calls by name called with fewer arguments (no `**`; a dropped `attention_mask` counts padding tokens in the router statistics), and an auxiliary loss computed into a local but never added to the loss where upstream adds it."
    )
    bad = (
        Example(
            """
            class ToyMoeForCausalLM(ToyMoePreTrainedModel):
                def forward(self, input_ids=None, labels=None, **kwargs):
                    outputs = self.model(input_ids=input_ids, output_router_logits=True, **kwargs)
                    logits = self.lm_head(outputs.last_hidden_state)
                    lm_loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                    aux_loss = self.router_balance(outputs.router_logits)
                    return MoeCausalLMOutputWithPast(
                        loss=self.router_aux_loss_coef * aux_loss, aux_loss=aux_loss, logits=logits
                    )
            """,
            path="veomni/models/transformers/toy_moe/modeling_toy_moe.py",
            title="the output's loss is the auxiliary term alone, the LM loss left out",
        ),
        Example(
            """
            def moe_lm_forward(self, input_ids=None, labels=None, output_router_logits=None, **kwargs):
                outputs = self.model(input_ids=input_ids, output_router_logits=True, **kwargs)
                logits = self.lm_head(outputs.last_hidden_state)
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                if output_router_logits:
                    router_aux = self.balance(outputs.router_logits)
                    if labels is not None:
                        loss = router_aux.to(loss.device) * self.config.router_aux_loss_coef
                return loss, logits
            """,
            path="veomni/models/transformers/toy_moe/modeling_toy_moe.py",
            title="the main loss replaced by the scaled auxiliary loss",
        ),
        Example(
            """
            def moe_step_loss(model, batch, balance_weight):
                out = model(**batch)
                step_loss = out.loss
                if out.router_logits is not None:
                    balancing = switch_balance(out.router_logits)
                    step_loss = balance_weight * balancing
                return step_loss
            """,
            path="veomni/trainer/moe_loss.py",
            title="a trainer helper whose step loss becomes the balancing term alone",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="x.py")


            @config.override_method("Qwen3MoeForCausalLM.forward")
            def moe_lm_forward(self, input_ids=None, labels=None, output_router_logits=None, **kwargs):
                want_router = output_router_logits if output_router_logits is not None else False
                outputs = self.model(input_ids=input_ids, output_router_logits=want_router, **kwargs)
                logits = self.lm_head(outputs.last_hidden_state)
                loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs)
                if want_router:
                    loss = loss + self.router_aux_loss_coef * outputs.aux_loss
                return loss, logits
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
            title="the switch no longer falls back to the config",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", target_file="x.py")


            @config.override_method("Qwen3VLMoeModel.forward")
            def vl_moe_model_forward(self, input_ids=None, attention_mask=None, pixel_values=None, **kwargs):
                embeds = self.embed_with_media(input_ids, pixel_values)
                text_out = self.language_model(inputs_embeds=embeds, attention_mask=attention_mask, **kwargs)
                return Qwen3VLMoeModelOutputWithPast(
                    last_hidden_state=text_out.last_hidden_state,
                    past_key_values=text_out.past_key_values,
                    rope_deltas=self.rope_deltas,
                )
            """,
            path="veomni/models/transformers/qwen3_vl_moe/qwen3_vl_moe_gpu_patch_gen_config.py",
            title="the model output spelled out without its router logits",
        ),
        Example(
            """
            def balance_loss(logits_per_layer, n_routed, k, mask=None):
                return sum(x.softmax(-1).mean() for x in logits_per_layer) * n_routed / k


            def moe_aux(self, outputs, mask):
                return balance_loss(outputs.router_logits, self.k, self.n_routed, mask)
            """,
            path="veomni/models/transformers/toy_moe/modeling_toy_moe.py",
            title="the expert count and the top-k swapped against the function's own parameters",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mixtral.modeling_mixtral", target_file="x.py")


            @config.override_method("MixtralForCausalLM.forward")
            def mixtral_lm_forward(self, input_ids=None, attention_mask=None, labels=None, output_router_logits=None, **kwargs):
                if output_router_logits is None:
                    output_router_logits = self.config.output_router_logits
                outputs = self.model(input_ids=input_ids, output_router_logits=output_router_logits, **kwargs)
                logits = self.lm_head(outputs.last_hidden_state)
                loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                aux_loss = None
                if output_router_logits:
                    aux_loss = load_balancing_loss_func(outputs.router_logits, self.num_experts, self.num_experts_per_tok)
                return loss, aux_loss, logits
            """,
            path="veomni/models/transformers/mixtral/generated/patched_modeling_mixtral_gpu.py",
            title="the auxiliary loss computed without the attention mask, and never added to the loss",
        ),
        Example(
            """
            def routed_penalty(self, outputs, attention_mask):
                if self.fused_balance.use_non_eager_impl:
                    return self.fused_balance_loss(outputs.router_logits, self.top_k, self.n_experts, attention_mask)
                return eager_balance_loss(outputs.router_logits, self.n_experts, self.top_k, attention_mask)
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_npu_patch_gen_config.py",
            title="the fused and eager branches pass the same values in another order",
        ),
        Example(
            """
            import torch


            def _balance_loss_reference(router_logits, num_experts, top_k=2, attention_mask=None):
                probs = torch.softmax(torch.cat(router_logits, dim=0).float(), dim=-1)
                _, chosen = torch.topk(probs, top_k, dim=-1)
                frac = torch.nn.functional.one_hot(chosen, num_experts).float().mean(dim=0)
                return num_experts * torch.sum(frac * probs.mean(dim=0))


            _balance_loss_impl = _balance_loss_reference


            def balance_loss(router_logits, num_experts=None, top_k=2, attention_mask=None):
                return _balance_loss_impl(router_logits, top_k, num_experts, attention_mask)
            """,
            path="veomni/ops/kernels/balance_loss/__init__.py",
            title="a kernel wrapper hands its arguments to the implementation (an alias) out of order",
        ),
    )
    good = (
        Example(
            """
            def moe_step_loss(model, batch, balance_weight):
                out = model(**batch)
                step_loss = out.loss
                if out.router_logits is not None:
                    balancing = switch_balance(out.router_logits)
                    if step_loss is None:
                        step_loss = balance_weight * balancing
                    else:
                        step_loss = step_loss + balance_weight * balancing.to(step_loss.device)
                return step_loss
            """,
            path="veomni/trainer/moe_loss.py",
            title="the balancing term added, or alone only where there is no main loss",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="x.py")


            @config.override_method("Qwen3MoeForCausalLM.forward")
            def moe_lm_forward(self, input_ids=None, labels=None, output_router_logits=None, **kwargs):
                if output_router_logits is None:
                    output_router_logits = self.config.output_router_logits
                outputs = self.model(input_ids=input_ids, output_router_logits=output_router_logits, **kwargs)
                logits = self.lm_head(outputs.last_hidden_state)
                loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs)
                if output_router_logits:
                    loss = loss + self.router_aux_loss_coef * outputs.aux_loss
                return loss, logits
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe", target_file="x.py")


            @config.override_method("Qwen3VLMoeModel.forward")
            def vl_moe_model_forward(self, input_ids=None, attention_mask=None, pixel_values=None, **kwargs):
                embeds = self.embed_with_media(input_ids, pixel_values)
                text_out = self.language_model(inputs_embeds=embeds, attention_mask=attention_mask, **kwargs)
                return Qwen3VLMoeModelOutputWithPast(
                    last_hidden_state=text_out.last_hidden_state,
                    router_logits=getattr(text_out, "router_logits", None),
                    rope_deltas=self.rope_deltas,
                )
            """,
            path="veomni/models/transformers/qwen3_vl_moe/qwen3_vl_moe_gpu_patch_gen_config.py",
        ),
        Example(
            """
            def balance_loss(logits_per_layer, n_routed, k, mask=None):
                return sum(x.softmax(-1).mean() for x in logits_per_layer) * n_routed / k


            def moe_aux(self, outputs, mask):
                return balance_loss(outputs.router_logits, k=self.k, n_routed=self.n_routed, mask=mask)
            """,
            path="veomni/models/transformers/toy_moe/modeling_toy_moe.py",
            title="keyword arguments in another order",
        ),
        Example(
            """
            def routed_penalty(self, outputs, attention_mask):
                if self.fused_balance.use_non_eager_impl:
                    return self.fused_balance_loss(outputs.router_logits, self.n_experts, self.top_k, attention_mask)
                return eager_balance_loss(outputs.router_logits, self.n_experts, self.top_k, attention_mask)
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_npu_patch_gen_config.py",
            title="both branches in one order",
        ),
    )
    fix_safety = "No fix: which value belongs where is the author's decision."

    node_types = ()

    @classmethod
    def applies_to(
        cls, ctx: Context
    ) -> bool:  # model code and the tree's loss kernels (their wrappers delegate)
        return not ctx.source.kind.test

    def finish(self) -> None:
        ctx = self.ctx
        text = ctx.source.text
        if ctx.source.kind.test:
            return
        if ctx.source.kind.kernel:  # kernels: only the argument order of the loss functions they call
            if "loss" in text and "(" in text:
                self._swapped_arguments()
            return
        if "loss" in text and "(" in text:
            self._swapped_arguments()
        if "aux" in text or "balanc" in text or "z_loss" in text:
            seen: set[int] = set()  # a nested function is walked with its enclosing one too
            for func in functions_of(ctx.tree, text, "aux", "balanc", "z_loss"):
                for stmt, loss, aux in aux_substitutions(func):
                    if id(stmt) in seen:
                        continue
                    seen.add(id(stmt))
                    self.report(
                        stmt,
                        f"`{loss}` holds the main loss on this path, but this takes a loss built from `{aux}` alone "
                        f"in its place: the auxiliary loss must be added to the main loss (`{loss} + ...`), or the "
                        "model trains only the auxiliary term",
                    )
        if _FIELD not in text and "forward" not in text:
            return
        if "forward" in text and ("Moe" in text or "MoE" in text or _FIELD in text or _SWITCH in text):
            for patched in patched_methods(ctx.tree, text, "forward", ("",), path=ctx.source.path):
                self._switch(patched)
                self._dropped_field(patched)
                self._aux_not_added(patched)
                self._missing_arguments(patched)

    def _switch(self, patched: PatchedMethod) -> None:
        func, upstream = patched.func, patched.upstream
        # the switch handed on as a constant where upstream hands on the variable (`self.model(..., output_router_logits=False)`)
        upstream_passes = any(
            isinstance(n, ast.keyword) and n.arg == _SWITCH and not isinstance(n.value, ast.Constant)
            for n in _walk(upstream)
        )
        if upstream_passes:
            for n in _walk(func):
                if (
                    isinstance(n, ast.keyword)
                    and n.arg == _SWITCH
                    and isinstance(n.value, ast.Constant)
                    and not n.value.value
                ):
                    self.report(
                        n.value,
                        f"`{_SWITCH}={n.value.value!r}` is handed on where upstream hands on the caller's (or the "
                        "config's) switch: the layers never record their router logits and the load-balancing loss "
                        "is never computed",
                    )
        if not _config_fallback(upstream) or _SWITCH not in _params(upstream) or _config_fallback(func):
            return
        if _mentions(func, _SWITCH):  # read from somewhere else the patch chose (a sub-config attribute)
            return
        where: ast.AST | tuple[int, int, int, int]
        assign = _switch_assignment(func)
        if assign is not None:
            where = assign.value
        elif _SWITCH in _params(func):
            where = next(a for a in [*func.args.args, *func.args.kwonlyargs] if a.arg == _SWITCH)
        else:
            where = (func.lineno, func.col_offset, func.lineno, func.col_offset + 3)
        self.report(
            where,
            f"`{patched.cls}.forward` no longer falls back to `self.config.{_SWITCH}` when the caller passes none "
            "(upstream does): a caller that passes none, such as a trainer, trains without the load-balancing "
            "loss even when the config turns router logits on",
        )

    def _dropped_field(self, patched: PatchedMethod) -> None:
        if not _passes_field(patched.upstream):
            return
        for call in _returned_calls(patched.func):
            if not call.keywords or any(kw.arg in (_FIELD, None) for kw in call.keywords):
                continue
            name = call.func.id  # type: ignore[attr-defined]
            fields = _class_fields(patched.module, self.ctx.tree, name)
            if not fields or _FIELD not in fields:
                continue
            # at the end of the field list, where the missing field belongs
            self.report(
                call.keywords[-1].value,
                f"`{patched.cls}.forward` returns `{name}` without `{_FIELD}=` (upstream hands them on): the "
                "auxiliary loss reads `None` and silently vanishes, so the routers are never balanced",
            )

    def _aux_not_added(self, patched: PatchedMethod) -> None:
        if not _adds_aux(patched.upstream) or _adds_aux(patched.func):
            return
        computed = _aux_computed(patched.func)
        if computed is None:
            return
        name = next(t.id for t in computed.targets if isinstance(t, ast.Name) and "aux" in t.id)
        self.report(
            computed.targets[0],
            f"`{name}` is computed but never added to the loss in `{patched.cls}.forward` (upstream adds it, scaled "
            "by `router_aux_loss_coef`): training runs without the load-balancing term",
        )

    def _missing_arguments(self, patched: PatchedMethod) -> None:
        """A loss function the upstream forward calls by name, called with fewer arguments (no `**`)."""
        theirs = _calls_by_name(patched.upstream)
        for name, calls in _calls_by_name(patched.func).items():
            if name not in theirs:
                continue
            reference = max(theirs[name], key=lambda c: len(c.args) + len(c.keywords))
            if any(kw.arg is None for kw in reference.keywords):
                continue
            wanted = len(reference.args) + len(reference.keywords)
            for call in calls:
                if any(kw.arg is None for kw in call.keywords) or any(
                    isinstance(a, ast.Starred) for a in call.args
                ):
                    continue
                given = len(call.args) + len(call.keywords)
                if given >= wanted:
                    continue
                passed = {ast.unparse(a) for a in call.args} | {ast.unparse(k.value) for k in call.keywords}
                missing = [
                    ast.unparse(a)
                    for a in [*reference.args, *(k.value for k in reference.keywords)]
                    if ast.unparse(a) not in passed
                ]
                shown = ", ".join(f"`{m}`" for m in missing) if missing else f"{wanted - given} argument(s)"
                effect = (
                    ": without the attention mask, padding tokens count in the router statistics"
                    if any("mask" in m for m in missing)
                    else ""
                )
                self.report(
                    call,
                    f"`{name}(...)` gets {given} argument(s) where the upstream `{patched.cls}.forward` passes "
                    f"{wanted} (missing {shown}): the parameter falls back to its default{effect}",
                )

    def _branch_orders(self, reported: set[int], trusted: set[int]) -> None:
        """Two loss calls of one function (the fused handle and the eager fallback, say) given the same
        positional values in another order: one branch has them swapped."""
        for func in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef):
            calls = []
            for node in nodes_of(func, ast.Call):
                if not isinstance(node, ast.Call) or len(node.args) < 3:
                    continue
                callee = last_name(node.func) or ""
                if "loss" not in callee or callee == "loss_function":
                    continue
                if any(isinstance(a, ast.Starred) for a in node.args):
                    continue
                calls.append((node, [ast.unparse(a) for a in node.args]))
            calls.sort(key=lambda c: (c[0].lineno, c[0].col_offset))
            for i, (call, order) in enumerate(calls):
                if id(call) in reported:
                    continue
                for other, other_order in calls[:i]:
                    if (
                        other_order != order
                        and sorted(other_order) == sorted(order)
                        and len(set(order)) == len(order)
                    ):
                        if id(other) in reported:
                            continue  # the other one is the swapped call
                        # the call whose order its known definition confirms is the right one
                        if id(call) in trusted and id(other) not in trusted:
                            wrong, right = other, call
                        else:
                            wrong, right = call, other
                        moved = [a for a, b in zip(order, other_order) if a != b]
                        reported.add(id(wrong))
                        verdict = (
                            f" (its order matches the parameters of `{last_name(right.func)}`): this branch computes "
                            "the loss with its arguments swapped"
                            if id(right) in trusted
                            else ": one of the two branches computes the loss with its arguments swapped"
                        )
                        self.report(
                            wrong,
                            f"`{last_name(wrong.func)}(...)` passes {', '.join(f'`{m}`' for m in moved)} in another "
                            f"order than `{last_name(right.func)}(...)` on line {right.lineno} with the same values"
                            + verdict,
                        )
                        break

    def _swapped_arguments(self) -> None:
        ctx = self.ctx
        reported: set[int] = set()
        trusted: set[int] = set()  # calls whose definition is known and whose order matches it
        defs: dict[str, tuple[tuple[str, ...], str]] | None = None
        # `self.lb = partial(load_balancing_loss, op=...)`: attribute -> function
        bound = _partial_bindings(ctx.tree) if "partial" in ctx.source.text else {}
        for node in nodes_of(ctx.tree, ast.Call):
            callee = last_name(node.func) or ""
            if isinstance(node.func, ast.Name):
                target = callee
            elif isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                target = bound.get(callee, "") if node.func.value.id == "self" else ""
            else:
                continue
            if "loss" not in target:
                continue
            if len(node.args) < 2 or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            if defs is None:
                defs = _definitions(ctx.tree, ctx.project.root if ctx.project else None, ctx.source.path)
            found = defs.get(target)
            if found is None:
                continue
            params, where = found
            names = [last_name(a) for a in node.args[: len(params)]]
            if all(n is None or n == params[i] or n not in params for i, n in enumerate(names)) and any(
                n == params[i] for i, n in enumerate(names)
            ):
                trusted.add(id(node))
            for i, arg in enumerate(node.args[: len(params)]):
                named = last_name(arg)
                if named is None or named == params[i] or named not in params:
                    continue
                j = params.index(named)
                reported.add(id(node))
                self.report(
                    arg,
                    f"`{ast.unparse(arg)}` is passed as parameter `{params[i]}` of `{target}` "
                    f"({where}), but it is named after its parameter `{named}` (position {j + 1}): the "
                    "arguments are out of order",
                )
        self._branch_orders(reported, trusted)
