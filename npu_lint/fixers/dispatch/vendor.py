"""Vendor patches restated as slot dispatch before the main migration (NPU303's part of the fix).

:func:`vendor_prepass` turns ``create_patch_from_external`` of a Liger RMSNorm / SwiGLU MLP, and a replaced
``apply_rotary_pos_emb`` calling Liger, into ``OpSlot`` declarations and guarded calls, which the dispatch migration
then turns into handles; :func:`external_patch_target` reads one such call.
"""

from __future__ import annotations

import ast
import re
import textwrap

from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.core.safeio import read_text
from npu_lint.fixers.dispatch.spec import const_str, decorator_target, rename_def, snake_case

# ----------------------------------------------------------------------------------------------------
# vendor classes / functions named by a spec (create_patch_from_external, a vendor-calling replace_function)
# ----------------------------------------------------------------------------------------------------
_VENDOR_SLOT = {  # registry op -> (OpSlot op, variant, slot name) the pre-pass declares for the main migration
    ("rms_norm", "standard"): ("rms_norm", "standard", "veomni_rms_norm"),
    ("swiglu_mlp", "standard"): ("swiglu_mlp", "standard", "veomni_swiglu_mlp"),
    ("rope", "full"): ("rotary_pos_emb", "full", "veomni_apply_rotary_pos_emb"),
}
_SWIGLU_EXPR = re.compile(
    r"self\.down_proj\(\s*self\.act_fn\(\s*self\.gate_proj\((\w+)\)\s*\)\s*\*\s*self\.up_proj\(\1\)\s*\)"
)


def external_patch_target(call: ast.Call) -> tuple[str, str, str] | None:
    """``create_patch_from_external(target=..., replacement_module=..., replacement_name=...)``: the three
    strings (positional or keyword), None when any is not a literal."""
    keys = ("target", "replacement_module", "replacement_name")
    values = {k: const_str(a) for k, a in zip(keys, call.args, strict=False)}
    for kw in call.keywords:
        if kw.arg in keys:
            values[kw.arg] = const_str(kw.value)
    if all(values.get(k) for k in keys):
        return values["target"], values["replacement_module"], values["replacement_name"]  # type: ignore[return-value]
    return None


def _vendor_op(module: str, name: str) -> tuple[str, str] | None:
    from npu_lint.veomni import vendor_map

    found = vendor_map.lookup(f"{module}.{name}") or vendor_map.lookup(module)
    if found is None or found.op is None:
        return None
    return found.op, found.variant or "standard"


def vendor_prepass(text: str, path: str) -> tuple[str, tuple[str, ...], bool]:
    """Spec patches that swap a model class or function for a vendor kernel, restated as OpSlot dispatch that
    the migration then turns into handles: ``create_patch_from_external`` of a vendor RMSNorm / SwiGLU MLP
    class -> a ``forward`` override calling the op through a slot (the upstream ``forward`` with its eager
    formula replaced, so the rest of it - e.g. a dropout - stays); a replaced ``apply_rotary_pos_emb`` whose
    body calls a vendor kernel -> the upstream body behind a slot guard. Returns (text, reasons, changed);
    a patch that cannot be restated exactly is left as is, with the reason."""
    if "create_patch_from_external" not in text and "replace_function" not in text:
        return text, (), False
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text, (), False
    config_name, source_module = "config", None
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and _dotted(stmt.value.func) in ("PatchConfig", "patch_spec.PatchConfig")
            and isinstance(stmt.targets[0], ast.Name)
        ):
            config_name = stmt.targets[0].id
            for kw in stmt.value.keywords:
                if kw.arg == "source_module":
                    source_module = const_str(kw.value)
    if source_module is None:
        return text, (), False
    from npu_lint.veomni import upstream
    from npu_lint.veomni.vendor_map import is_vendor

    lines = text.splitlines(keepends=True)
    replacements: list[tuple[int, int, str]] = []  # (first line, last line) 1-based inclusive -> text
    reasons: list[str] = []
    declared: set[str] = set()
    bound = {
        t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)
    }

    def declare(op: str, variant: str, slot: str) -> str:
        if slot in declared or slot in bound:
            return ""
        declared.add(slot)
        return f'{slot} = OpSlot("{op}", "{variant}")\n\n\n'

    for stmt in tree.body:
        call = next(
            (
                c
                for c in ast.walk(stmt)
                if isinstance(c, ast.Call) and (_dotted(c.func) or "").endswith("create_patch_from_external")
            ),
            None,
        )
        if isinstance(stmt, ast.Expr) and call is not None:
            found = external_patch_target(call)
            if found is None:
                continue
            target, module, name = found
            if not is_vendor(module):
                continue
            op = _vendor_op(module, name)
            slot = _VENDOR_SLOT.get(op) if op else None
            if slot is None or "." in target:
                reasons.append(
                    f"`{target}` is replaced by the vendor class {module}.{name}, which no handle migration "
                    "covers: migrate it by hand"
                )
                continue
            forward = upstream.method_source(source_module, target, "forward")
            attrs = upstream.self_attributes(source_module, target) or set()
            if forward is None:
                reasons.append(f"cannot read upstream `{target}.forward` to restate the {name} patch")
                continue
            fn_name = f"{snake_case(target)}_forward_patched"
            fn = ast.parse(forward.text).body[0]
            assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
            params = [a.arg for a in fn.args.args]
            if slot[0] == "rms_norm":
                eps = next((e for e in ("variance_epsilon", "eps") if e in attrs), None)
                src = forward.text
                standard = (
                    "rsqrt" in src
                    and "self.weight" in src
                    and not re.search(r"1(\.0)?\s*\+\s*self\.weight", src)
                )
                if eps is None or len(params) != 2 or not standard:
                    reasons.append(
                        f"upstream `{target}.forward` is not the standard RMSNorm formula: the {name} patch "
                        "cannot be restated exactly"
                    )
                    continue
                x = params[1]
                body = (
                    f"def {fn_name}(self, {x}):\n"
                    f"    if {slot[2]}.use_non_eager_impl:\n"
                    f"        return {slot[2]}({x}, self.weight, self.{eps})\n"
                    + "".join(
                        "    " + line + "\n" if line.strip() else "\n" for line in _body_lines(forward.text)
                    )
                )
            else:
                src = rename_def(forward.text, "forward", fn_name)
                match = _SWIGLU_EXPR.search(src)
                if match is None:
                    reasons.append(
                        f"upstream `{target}.forward` has no `down_proj(act_fn(gate_proj(x)) * up_proj(x))`: "
                        f"the {name} patch cannot be restated exactly"
                    )
                    continue
                body = src[: match.start()] + f"{slot[2]}(self, {match.group(1)})" + src[match.end() :]
            desc = f"{slot[0]} op in place of the vendor class {name}"
            new = (
                declare(*slot)
                + f'@{config_name}.override_method("{target}.forward", description="{desc}")\n'
                + body
            )
            replacements.append((_first_line(stmt), stmt.end_lineno or stmt.lineno, new))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            dec = decorator_target(stmt, config_name)
            if not dec or dec[0] != "replace_function" or dec[1] != "apply_rotary_pos_emb":
                continue
            vendor = [
                n
                for n in ast.walk(stmt)
                if isinstance(n, ast.ImportFrom) and n.module and is_vendor(n.module)
            ]
            if not vendor:
                continue
            slot = _VENDOR_SLOT[("rope", "full")]
            upstream_fn = _function_source(source_module, "apply_rotary_pos_emb")
            if upstream_fn is None:
                reasons.append(f"cannot read upstream `apply_rotary_pos_emb` to restate `{stmt.name}`")
                continue
            up = ast.parse(upstream_fn).body[0]
            assert isinstance(up, ast.FunctionDef)
            up_params = [a.arg for a in up.args.args]
            mine = [a.arg for a in stmt.args.args]
            if up_params[:4] != mine[:4] or not set(up_params) <= set(mine):
                reasons.append(f"`{stmt.name}` and upstream `apply_rotary_pos_emb` take different parameters")
                continue
            keyword = ", unsqueeze_dim=unsqueeze_dim" if "unsqueeze_dim" in mine else ""
            head_end = stmt.body[0].lineno - 1  # the def line(s) stay
            doc = (
                stmt.body[0] if isinstance(stmt.body[0], ast.Expr) and const_str(stmt.body[0].value) else None
            )
            keep_to = (doc.end_lineno or doc.lineno) if doc else head_end
            new_body = (
                f"    if {slot[2]}.use_non_eager_impl:\n"
                f"        return {slot[2]}({', '.join(mine[:4])}{keyword})\n"
                + "".join("    " + line + "\n" if line.strip() else "\n" for line in _body_lines(upstream_fn))
            )
            text_head = "".join(lines[_first_line(stmt) - 1 : keep_to])
            new = declare(*slot) + text_head + new_body
            new = new.replace(
                'description="Use LigerKernel rotary embedding"',
                'description="Rotary embedding through the rope op"',
            )
            replacements.append((_first_line(stmt), stmt.end_lineno or stmt.lineno, new))
    if not replacements:
        return text, tuple(reasons), False
    for first, last, new in sorted(replacements, reverse=True):
        lines[first - 1 : last] = [new]
    out = "".join(lines)
    if "create_patch_from_external(" not in out.replace("def create_patch_from_external(", ""):
        out = re.sub(r",\s*create_patch_from_external\b", "", out)
        out = re.sub(r"\bcreate_patch_from_external,\s*", "", out)
    try:
        ast.parse(out)
    except SyntaxError:
        return text, (*reasons, "restating the vendor patches did not parse"), False
    return out, tuple(reasons), True


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", [])
    return min([stmt.lineno, *(d.lineno for d in decorators)])


def _body_lines(fn_text: str) -> list[str]:
    """The body of a function's source (docstring dropped), dedented."""
    fn = ast.parse(fn_text).body[0]
    assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and const_str(body[0].value) is not None:
        body = body[1:]
    src = fn_text.splitlines()
    chunk = src[body[0].lineno - 1 : (body[-1].end_lineno or body[-1].lineno)]
    return textwrap.dedent("\n".join(chunk)).splitlines()


def _function_source(module: str, name: str) -> str | None:
    """The source of the module-level function ``name`` of the upstream (transformers) ``module``."""
    from npu_lint.veomni import upstream

    path = upstream.module_path(module)
    if path is None:
        return None
    try:
        text = read_text(path)
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return None
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return ast.get_source_segment(text, stmt)
    return None
