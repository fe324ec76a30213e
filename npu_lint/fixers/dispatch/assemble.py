"""The migrated module: the plan applied to the whole file, and one text's migration end to end.

:func:`apply_plan` removes the slot declarations and their imports (module level or in post-import blocks), runs
the :class:`~npu_lint.fixers.dispatch.rewrite.Rewriter` over the touched functions, extends or adds the owning
classes' ``__init__``, inserts the new overrides and adds the handle API's imports (``config.add_import`` in a
spec). :func:`migrate_cached` runs pre-pass, analysis and assembly for one text (cached per process).
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any

from npu_lint.core.diagnostics import Applicability
from npu_lint.fixers.dispatch.analysis import Analyzer
from npu_lint.fixers.dispatch.plan import (
    ATTENTION_OP,
    GUARD_ATTR,
    POST_INIT,
    SLOT_CLASSES,
    HandleSpec,
    MigrationResult,
    Names,
    Plan,
)
from npu_lint.fixers.dispatch.rewrite import Rewriter, load_libcst
from npu_lint.fixers.dispatch.spec import is_spec, opslot_call
from npu_lint.fixers.dispatch.vendor import vendor_prepass


# ----------------------------------------------------------------------------------------------------
# module-level transformation
# ----------------------------------------------------------------------------------------------------
def _needed_imports(plan: Plan) -> list[tuple[str, str]]:
    handles = [h for per in plan.handles.values() for h in per.values()]
    if not handles:
        return []
    names = plan.names
    need: list[tuple[str, str]] = []
    if any(not h.is_config and h.op != ATTENTION_OP for h in handles):
        need.append((names.handle_module, names.handle))
    # the resolver builds every handle but attention (its helper) and MoE experts (their own resolver)
    own_builder = {ATTENTION_OP, "moe_experts"} if names.moe_resolver else {ATTENTION_OP}
    if any(h.op not in own_builder for h in handles):
        need.append((names.resolver_module, names.resolver))
    if any(h.op == "swiglu_mlp" for h in handles):
        need.append((names.bias_module, names.linear_bias))
    if any(h.op == ATTENTION_OP for h in handles) and names.attention_helper and names.attention_module:
        need.append((names.attention_module, names.attention_helper))
    if any(h.op == "moe_experts" for h in handles) and names.moe_resolver:
        need.append((names.resolver_module, names.moe_resolver))
    if plan.empty_bias_used and names.empty_bias:
        need.append((names.bias_module, names.empty_bias))
    losses = sorted({h.loss for h in handles if h.loss})
    if losses:
        need.append(("functools", "partial"))
        need += [(names.loss_module, loss) for loss in losses]
    return need


def _apply(plan: Plan, text: str) -> str:
    rw = Rewriter(plan, text)
    cst = rw.cst
    module = cst.parse_module(text)
    rw.prepare_templates(module)
    slots = plan.slots

    def process_fn(stmt: Any, key: str) -> Any:
        info = plan.functions.get(key)
        if info is None or key not in plan.touched:
            return stmt
        if info.kind == "free":
            if key in {f.key for f in plan.free.values()}:
                return rw.rewrite_function(stmt, key, None, free=True)
            return stmt
        owners = plan.owners.get(key) or set()
        handles: dict[str, HandleSpec] = {}
        for owner in sorted(owners):
            for attr, h in plan.handles.get(owner, {}).items():
                handles.setdefault(attr, h)
        new = rw.rewrite_function(stmt, key, handles, free=False)
        return new

    def extend_init(stmt: Any, cls: str) -> Any:
        lines = [line for h in plan.handles[cls].values() for line in h.lines(plan.names)]
        new_stmts = rw.block_stmts(lines)
        body = list(stmt.body.body)
        attrs = [f"self.{h.attr}" for h in plan.handles[cls].values()]
        index = len(body)
        for i, s in enumerate(body):
            code = module.code_for_node(s)
            if any(re.search(rf"{re.escape(a)}\b(?!\s*=[^=])", code) for a in attrs) or any(
                POST_INIT.match(line) for line in code.strip().splitlines()[-1:]
            ):
                index = i
                break
        body[index:index] = new_stmts
        return stmt.with_changes(body=stmt.body.with_changes(body=body))

    init_by_key = {key: cls for cls, key in plan.init_keys.items()}

    def new_defs(texts: list[str]) -> list[Any]:
        out = []
        for t in texts:
            for s in rw.stmts(t):
                if isinstance(s, cst.FunctionDef):
                    key = s.name.value
                    s = process_fn(s, key)
                    s = s.with_changes(
                        leading_lines=[cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)]
                    )
                out.append(s)
        return out

    new_body: list[Any] = []
    pending_blank = 0
    import_anchor: tuple[int, list[Any]] | None = None

    def drop(stmt: Any) -> None:
        nonlocal pending_blank
        blanks = 0
        for line in stmt.leading_lines:
            if line.comment is not None:
                break
            blanks += 1
        pending_blank = max(pending_blank, blanks)

    def emit(stmt: Any) -> None:
        nonlocal pending_blank
        if pending_blank and new_body and hasattr(stmt, "leading_lines"):
            lead = list(stmt.leading_lines)
            if not lead or lead[0].comment is not None:
                stmt = stmt.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * pending_blank + lead)
        pending_blank = 0
        new_body.append(stmt)

    for stmt in module.body:
        # declarations -----------------------------------------------------------------------------
        if isinstance(stmt, cst.SimpleStatementLine):
            small = stmt.body[0]
            if isinstance(small, cst.ImportFrom) and _cst_dotted(cst, small.module) == "veomni.ops.dispatch":
                if isinstance(small.names, Sequence):
                    names = [a for a in small.names if a.name.value not in SLOT_CLASSES]
                    if names:
                        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                        emit(stmt.with_changes(body=[small.with_changes(names=names)]))
                    else:
                        if import_anchor is None:
                            import_anchor = (len(new_body), list(stmt.leading_lines))
                        drop(stmt)
                else:
                    emit(stmt)
                continue
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Name) and target.value in slots:
                    value = small.value
                    if (
                        isinstance(value, cst.Call)
                        and _cst_dotted(cst, value.func)
                        in ("OpSlot", "dispatch.OpSlot", "OpsConfigSlot", "dispatch.OpsConfigSlot")
                    ) or (isinstance(value, cst.Name) and value.value == "None"):
                        drop(stmt)
                        continue
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                fname = _cst_dotted(cst, small.value.func)
                if fname == f"{plan.config_name}.add_post_import_block":
                    replaced = _rewrite_block_call(cst, stmt, small.value, plan)
                    if replaced is not None:
                        emit(replaced)
                    else:
                        drop(stmt)
                    continue
            emit(_rename_descriptions(cst, stmt, plan.names.handle))
            continue
        if isinstance(stmt, cst.FunctionDef):
            key = stmt.name.value
            if key in plan.before:
                for d in new_defs(plan.before[key]):
                    emit(d)
            new = process_fn(stmt, key)
            if key in init_by_key:
                new = extend_init(new, init_by_key[key])
            if new is not stmt:
                new = new.with_changes(
                    decorators=[_rename_descriptions(cst, d, plan.names.handle) for d in new.decorators]
                )
            emit(new)
            if key in plan.after:
                for d in new_defs(plan.after[key]):
                    emit(d)
            continue
        if isinstance(stmt, cst.ClassDef):
            emit(_process_class(cst, rw, stmt, plan, process_fn, extend_init, init_by_key))
            continue
        emit(stmt)
    if plan.tail:
        new_body.extend(new_defs(plan.tail))
    module = module.with_changes(body=new_body)
    module = _add_imports(cst, module, plan, _needed_imports(plan), import_anchor, text)
    code = module.code
    replaced = sorted({callee for _, callee in plan.moe_calls})
    return drop_unused_imports(code, replaced, plan.config_name) if replaced else code


def drop_unused_imports(code: str, names: Sequence[str], config_name: str) -> str:
    """``names`` no code reads any more leave the file's imports and its ``config.add_import(names=[...])``."""
    cst = load_libcst()
    tree = ast.parse(code)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    dead = {n for n in names if n not in read}
    if not dead:
        return code
    module = cst.parse_module(code)
    body = []
    for stmt in module.body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.ImportFrom) and isinstance(small.names, Sequence):
            kept = [a for a in small.names if not (isinstance(a.name, cst.Name) and a.name.value in dead)]
            if len(kept) != len(small.names):
                if not kept:
                    continue
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                stmt = stmt.with_changes(body=[small.with_changes(names=kept)])
        elif (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and _cst_dotted(cst, small.value.func) == f"{config_name}.add_import"
        ):
            call = small.value
            names_arg = next((a for a in call.args if a.keyword and a.keyword.value == "names"), None)
            if names_arg is not None and isinstance(names_arg.value, cst.List):
                elements = names_arg.value.elements
                kept_el = [
                    e
                    for e in elements
                    if not (isinstance(e.value, cst.SimpleString) and e.value.evaluated_value in dead)
                ]
                if len(kept_el) != len(elements):
                    if not kept_el:
                        continue
                    kept_el[-1] = kept_el[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    new_list = names_arg.value.with_changes(elements=kept_el)
                    args = [a.with_changes(value=new_list) if a is names_arg else a for a in call.args]
                    stmt = stmt.with_changes(body=[small.with_changes(value=call.with_changes(args=args))])
        body.append(stmt)
    return module.with_changes(body=body).code


def _process_class(
    cst: Any,
    rw: Rewriter,
    cls: Any,
    plan: Plan,
    process_fn: Any,
    extend_init: Any,
    init_by_key: dict[str, str],
) -> Any:
    if not isinstance(cls.body, cst.IndentedBlock):
        return cls
    body = []
    changed = False
    delegating = plan.delegating_inits.get(cls.name.value)
    for item in cls.body.body:
        if delegating and isinstance(item, cst.FunctionDef):
            init = rw.block_stmts([delegating])[0].with_changes(leading_lines=item.leading_lines)
            body.append(init)
            lead = list(item.leading_lines)
            while lead and lead[0].comment is None:
                lead = lead[1:]
            item = item.with_changes(leading_lines=[cst.EmptyLine(indent=False), *lead])
            delegating = None
            changed = True
        if isinstance(item, cst.FunctionDef):
            key = f"{cls.name.value}.{item.name.value}"
            new = process_fn(item, key)
            if key in init_by_key:
                new = extend_init(new, init_by_key[key])
            changed |= new is not item
            body.append(new)
        else:
            body.append(item)
    if delegating:
        body.append(rw.block_stmts([delegating])[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)]))
        changed = True
    if not changed:
        return cls
    return cls.with_changes(body=cls.body.with_changes(body=body))


def _cst_dotted(cst: Any, node: Any) -> str | None:
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _rename_descriptions(cst: Any, node: Any, handle: str) -> Any:
    """``description="OpSlot guard for ..."`` -> ``"<handle> dispatch for ..."`` (strings in patch calls)."""

    class Renamer(cst.CSTTransformer):  # type: ignore[misc, name-defined]
        def leave_Arg(self, original: Any, updated: Any) -> Any:
            if (
                updated.keyword is not None
                and updated.keyword.value == "description"
                and isinstance(updated.value, cst.SimpleString)
                and "OpSlot" in updated.value.value
            ):
                value = updated.value.value.replace("OpSlot guard", f"{handle} dispatch")
                value = value.replace("OpSlot-based", f"{handle}-based").replace("OpSlot", handle)
                return updated.with_changes(value=updated.value.with_changes(value=value))
            return updated

    return node.visit(Renamer())


def _rewrite_block_call(cst: Any, stmt: Any, call: Any, plan: Plan) -> Any | None:
    """Drop the OpSlot import and slot assignments from a post-import block; None when nothing is left."""
    if not call.args or not isinstance(call.args[0].value, cst.SimpleString):
        if re.search(r"\bOps?(Config)?Slot\b", cst.Module(body=[]).code_for_node(call)):
            plan.fail(
                "a post-import block with OpSlot declarations is not a plain string literal: edit it by hand"
            )
        return stmt
    literal = call.args[0].value
    value = literal.evaluated_value
    if not isinstance(value, str) or ("OpSlot" not in value and "OpsConfigSlot" not in value):
        return stmt
    raw = literal.raw_value
    if raw.count("\n") != value.count("\n"):
        plan.fail("a post-import block with OpSlot declarations uses escaped newlines: edit it by hand")
        return stmt
    tree = ast.parse(textwrap.dedent(value))
    drop: set[int] = set()
    partial_imports: dict[int, list[ast.alias]] = {}
    for node in tree.body:
        is_import = isinstance(node, ast.ImportFrom) and node.module == "veomni.ops.dispatch"
        is_slot = (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in plan.slots
            and opslot_call(node.value) is not None
        )
        if is_import and any(a.name not in SLOT_CLASSES for a in node.names):
            if node.lineno == node.end_lineno:
                partial_imports[node.lineno] = [a for a in node.names if a.name not in SLOT_CLASSES]
            else:
                plan.fail("the post-import block imports more than OpSlot from veomni.ops.dispatch")
            continue
        if is_import or is_slot:
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines = raw.splitlines(keepends=True)
    for lineno, names in partial_imports.items():
        line = lines[lineno - 1]
        indent = line[: len(line) - len(line.lstrip())]
        spelled = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in names)
        lines[lineno - 1] = f"{indent}from veomni.ops.dispatch import {spelled}\n"
    # comment lines right above a dropped statement describe it: they go too
    for lineno in sorted(drop):
        j = lineno - 1
        while j >= 1 and j not in drop and lines[j - 1].strip().startswith("#"):
            drop.add(j)
            j -= 1
    kept = [line for i, line in enumerate(lines, start=1) if i not in drop]
    remaining = "".join(kept)
    try:
        left = ast.parse(textwrap.dedent(remaining))
    except SyntaxError:
        plan.fail("the post-import block would not parse after removing the OpSlot declarations")
        return stmt
    if not left.body:
        return None
    new_literal = literal.with_changes(value=f"{literal.prefix}{literal.quote}{remaining}{literal.quote}")
    new_args = [call.args[0].with_changes(value=new_literal), *call.args[1:]]
    return stmt.with_changes(body=[stmt.body[0].with_changes(value=call.with_changes(args=new_args))])


def _group(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for mod, name in pairs:
        if name not in grouped.setdefault(mod, []):
            grouped[mod].append(name)
    return grouped


def _add_imports(
    cst: Any,
    module: Any,
    plan: Plan,
    need: list[tuple[str, str]],
    anchor_at: tuple[int, list[Any]] | None,
    original: str,
) -> Any:
    body = list(module.body)
    code = original  # the statements these checks look for are never removed by the migration
    plain_lines: list[str] = []
    if plan.spec:
        missing = [
            (mod, name)
            for mod, name in need
            if not re.search(rf'add_import\(\s*"{re.escape(mod)}"[^)]*"{re.escape(name)}"', code)
        ]
        lines = [
            f'{plan.config_name}.add_import("{mod}", names=[{", ".join(repr(n).replace(chr(39), chr(34)) for n in names)}])'
            for mod, names in _group(missing).items()
        ]
        anchor = None
        after_config = False
        for i, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine):
                small = stmt.body[0]
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    if _cst_dotted(cst, small.value.func) == f"{plan.config_name}.add_import":
                        anchor, after_config = i, False
                elif isinstance(small, cst.Assign) and anchor is None:
                    if isinstance(small.value, cst.Call) and _cst_dotted(cst, small.value.func) in (
                        "PatchConfig",
                        "deepcopy",
                        "copy.deepcopy",
                    ):
                        anchor, after_config = i, True
        if lines:
            new = list(cst.parse_module("\n".join(lines) + "\n").body)
            if after_config:
                new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            at = (anchor + 1) if anchor is not None else len(body)
            body[at:at] = new
            if anchor_at is not None and anchor_at[0] >= at:
                anchor_at = (anchor_at[0] + len(new), anchor_at[1])
        # the copied signatures' imports (`from transformers... import XConfig`) go where the file's isort puts
        # them: placed on the final text by `place_spec_imports`, never appended after the first-party block
        plain_lines = sorted({line for line in plan.extra_imports if line not in code})
        plan.deferred_imports = [line for line in plain_lines if _plain_from(line) is not None]
        plain_lines = [line for line in plain_lines if line not in plan.deferred_imports]
    else:
        missing = [
            (mod, name)
            for mod, name in need
            if not re.search(rf"^from {re.escape(mod)} import .*\b{name}\b", code, re.M)
        ]
        plain_lines = [
            f"from {mod} import {', '.join(sorted(names))}" for mod, names in _group(missing).items()
        ]
        plain_lines += sorted({line for line in plan.extra_imports if line not in code})
    if plain_lines:
        new = list(cst.parse_module("\n".join(dict.fromkeys(plain_lines)) + "\n").body)
        if anchor_at is not None and not plan.spec:
            at = anchor_at[0]
            new[0] = new[0].with_changes(leading_lines=anchor_at[1])
        else:
            last_import = None
            for i, stmt in enumerate(body):
                if isinstance(stmt, cst.SimpleStatementLine) and isinstance(
                    stmt.body[0], (cst.Import, cst.ImportFrom)
                ):
                    last_import = i
                elif last_import is not None and not _is_docstring(cst, stmt):
                    break
            at = (last_import + 1) if last_import is not None else _after_docstring(cst, body)
            if last_import is None and at < len(body):
                new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        body[at:at] = new
    return module.with_changes(body=body)


def _plain_from(line: str) -> ast.ImportFrom | None:
    """``line`` as a ``from M import a, b`` statement without aliases or a star (else None)."""
    try:
        body = ast.parse(line).body
    except SyntaxError:
        return None
    stmt = body[0] if len(body) == 1 else None
    if not isinstance(stmt, ast.ImportFrom) or any(a.asname or a.name == "*" for a in stmt.names):
        return None
    return stmt


def place_spec_imports(code: str, path: str, lines: Sequence[str]) -> str:
    """``code`` with each plain ``from M import a[, b]`` line added in its isort section of the leading import
    block, as the tree's ruff (I001) orders it (``core.imports.add_import_edit``)."""
    from npu_lint.core.imports import add_import_edit
    from npu_lint.core.source import SourceFile

    for line in lines:
        parsed = _plain_from(line)
        if parsed is None:
            continue
        module = "." * parsed.level + (parsed.module or "")
        for alias in parsed.names:
            source = SourceFile.from_text(path, code)
            edit = add_import_edit(source, ast.parse(code), module, alias.name)
            code = code[: edit.start] + edit.content + code[edit.end :]
    return code


def _is_docstring(cst: Any, stmt: Any) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _after_docstring(cst: Any, body: list[Any]) -> int:
    return 1 if body and _is_docstring(cst, body[0]) else 0


@functools.lru_cache(maxsize=64)
def migrate_cached(text: str, path: str, names: Names, upstream_root: str | None) -> MigrationResult:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return MigrationResult(text, Applicability.DISPLAY, ("the file does not parse",))
    spec = is_spec(text, path)
    original = text
    vendor_notes: tuple[str, ...] = ()
    if spec:
        try:
            text, vendor_notes, restated = vendor_prepass(text, path)
        except Exception as exc:  # noqa: BLE001 - a codemod failure must never take the linter down
            text, vendor_notes, restated = original, (f"restating the vendor patches failed: {exc!r}",), False
        if restated:
            tree = ast.parse(text)
    analyzer = Analyzer(tree, text, path, spec, names)
    try:
        plan = analyzer.run()
    except Exception as exc:  # noqa: BLE001 - a codemod failure must never take the linter down
        return MigrationResult(original, Applicability.DISPLAY, (f"the codemod's analysis failed: {exc!r}",))
    for note in vendor_notes:
        plan.note(note)
    if not plan.slots:  # nothing to migrate; a vendor patch that could not be restated says why
        applicability = Applicability.DISPLAY if plan.reasons else Applicability.SAFE
        return MigrationResult(original, applicability, tuple(plan.reasons))
    try:
        new_text = place_spec_imports(_apply(plan, text), path, plan.deferred_imports)
    except Exception as exc:  # noqa: BLE001 - a codemod failure must never take the linter down
        return MigrationResult(
            original, Applicability.DISPLAY, (*plan.reasons, f"the codemod failed: {exc!r}")
        )
    # verify: parses, no slot left
    try:
        out_tree = ast.parse(new_text)
    except SyntaxError as exc:
        return MigrationResult(
            original, Applicability.DISPLAY, (*plan.reasons, f"the migrated text does not parse: {exc}")
        )
    left = sorted(
        {n.id for n in ast.walk(out_tree) if isinstance(n, ast.Name) and n.id in plan.slots}
        | {n.attr for n in ast.walk(out_tree) if isinstance(n, ast.Attribute) and n.attr == GUARD_ATTR}
    )
    if left:
        plan.fail(f"left untranslated: {', '.join(left)}")
    if any(h.loss for per in plan.handles.values() for h in per.values()) and not names.loss_keyword:
        plan.fail(
            f"the loss helpers of {names.loss_module} take no {names.handle} keyword: cannot bind the "
            "cross-entropy handle to them"
        )
    handles = tuple(h for cls in sorted(plan.handles) for h in plan.handles[cls].values())
    applicability = Applicability.DISPLAY if plan.display else Applicability.SAFE
    imports = tuple(_needed_imports(plan))
    return MigrationResult(new_text, applicability, tuple(plan.reasons), handles, imports)
