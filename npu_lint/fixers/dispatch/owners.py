"""Which classes own the handles and where each builds them (mixed into the analysis).

:class:`HandleOwners` plans the attention handle (a forward that picks ``attention_interface`` calls the tree's
attention helper instead) and the ``__init__`` of every owning class: its own, an existing override in the spec,
a copy of the upstream ``__init__`` (read with astroid) with the handle lines appended before ``self.post_init()``,
or a delegating ``__init__`` (:func:`delegating_init`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from npu_lint.fixers.dispatch.plan import (
    ATTENTION_ATTR,
    ATTENTION_FIELD,
    ATTENTION_OP,
    ATTENTION_VAR,
    BUILTIN_NAMES,
    POST_INIT,
    FnInfo,
    HandleSpec,
    Names,
    Plan,
)
from npu_lint.fixers.dispatch.spec import (
    decorator_target,
    indent_lines,
    registered_functions,
    rename_def,
    snake_case,
)


class HandleOwners:
    """Where the handles live: the classes whose attention goes through the tree's helper, and the
    ``__init__`` each owning class builds its handles in (its own, the spec's override, a copy of the upstream
    one, or a delegating one). Mixed into :class:`Analyzer`, which sets ``tree`` and ``plan``."""

    tree: ast.Module
    plan: Plan

    # -- attention through the tree's helper ------------------------------------------------------------
    def _attention_shape(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """``attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(...)`` (or the older
        ``= eager_attention_forward; if ...: = ALL_ATTENTION_FUNCTIONS[...]``) then exactly one
        ``attention_interface(self, ...)`` call, and no other use of the name."""
        assigned = 0
        calls = 0
        loads = 0
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == ATTENTION_VAR for t in targets):
                    source = ast.unparse(node.value) if node.value is not None else ""
                    if "ALL_ATTENTION_FUNCTIONS" not in source and "eager_attention_forward" not in source:
                        return False
                    assigned += 1
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == ATTENTION_VAR
            ):
                if not (node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
                    return False
                calls += 1
            elif isinstance(node, ast.Name) and node.id == ATTENTION_VAR and isinstance(node.ctx, ast.Load):
                loads += 1
        return assigned >= 1 and calls == 1 and loads == 1

    def _plan_attention(self) -> None:
        """Each attention class's forward calls the tree's attention handle, built in its ``__init__``."""
        plan = self.plan
        names = plan.names
        if not (plan.spec and names.attention_helper and names.attention_module and plan.source_module):
            return
        forwards: dict[str, FnInfo] = {}
        for fn in plan.functions.values():
            if fn.kind != "method" or fn.owner is None:
                continue
            meth = (fn.target or "").split(".")[-1] if fn.target else fn.node.name
            if meth == "forward" and any(
                isinstance(n, ast.Name) and n.id == ATTENTION_VAR for n in ast.walk(fn.node)
            ):
                forwards[fn.owner] = fn
        from npu_lint.veomni import upstream

        found = upstream.callers_of(plan.source_module, ATTENTION_VAR)
        replaced = {fn.owner for fn in plan.functions.values() if fn.kind == "method" and fn.target is None}
        # methods this spec registers with a function of another spec (``replacement=``): that function decides
        registered = set(registered_functions(self.tree, plan.config_name).values())
        for cls, meth in found[0] if found else []:
            if meth != "forward" or cls in forwards or cls in replaced or f"{cls}.forward" in registered:
                continue
            src = upstream.method_source(plan.source_module, cls, meth)
            if src is None:
                plan.note(
                    f"cannot read upstream `{cls}.forward`: its attention stays on ALL_ATTENTION_FUNCTIONS"
                )
                continue
            node = ast.parse(src.text).body[0]
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not self._attention_shape(
                node
            ):
                plan.note(
                    f"`{cls}.forward` picks its attention function in a shape the codemod does not rewrite: it "
                    f"stays on ALL_ATTENTION_FUNCTIONS (call `{names.attention_helper}()` there by hand)"
                )
                continue
            fname = self._fresh_name(f"{snake_case(cls)}_forward_patched")
            text = rename_def(src.text, meth, fname)
            self._signature_imports(text)
            desc = f"Call the attention op through self.{ATTENTION_ATTR}"
            deco = (
                f'@{plan.config_name}.override_method(\n    "{cls}.forward",\n    description="{desc}",\n)\n'
            )
            plan.tail.append(deco + text)
            info = FnInfo(fname, ast.parse(text).body[0], cls, "method", f"{cls}.forward")  # type: ignore[arg-type]
            plan.functions[fname] = info
            forwards[cls] = info
        for cls, fn in sorted(forwards.items()):
            if not self._attention_shape(fn.node):
                plan.note(
                    f"`{fn.key}` picks its attention function in a shape the codemod does not rewrite: it stays "
                    f"on ALL_ATTENTION_FUNCTIONS (call `{names.attention_helper}()` there by hand)"
                )
                continue
            attrs = {
                n.attr
                for f in plan.functions.values()
                if f.owner == cls
                for n in ast.walk(f.node)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            if ATTENTION_ATTR in attrs:
                plan.note(
                    f"`{cls}` already has an attribute `{ATTENTION_ATTR}`: its attention is left as it is"
                )
                continue
            plan.attention[fn.key] = cls
            plan.touched.add(fn.key)
            plan.owners.setdefault(fn.key, set()).add(cls)
            plan.handles.setdefault(cls, {})[ATTENTION_ATTR] = HandleSpec(
                cls, ATTENTION_ATTR, ATTENTION_OP, "standard", ATTENTION_FIELD
            )

    def _fresh_name(self, base: str) -> str:
        taken = {
            s.name
            for s in self.tree.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        taken |= self.plan.new_fn_names
        name, i = base, 2
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        self.plan.new_fn_names.add(name)
        return name

    def _bound_names(self) -> set[str]:
        names: set[str] = set()
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    names.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(stmt.name)
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                names.add(stmt.target.id)
        return names

    def _signature_imports(self, fn_text: str) -> None:
        """Names evaluated when the spec defines a copied function (annotations, defaults) must be bound there."""
        plan = self.plan
        fn = ast.parse(fn_text).body[0]
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        evaluated: list[ast.AST] = [*fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]
        if fn.returns is not None:
            evaluated.append(fn.returns)
        for arg in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs, fn.args.vararg, fn.args.kwarg):
            if arg is not None and arg.annotation is not None:
                evaluated.append(arg.annotation)
        names = {n.id for e in evaluated for n in ast.walk(e) if isinstance(n, ast.Name)}
        bound = self._bound_names() | BUILTIN_NAMES
        added = {line.split(" import ")[-1].split(" as ")[-1] for line in plan.extra_imports}
        from npu_lint.veomni import upstream

        for name in sorted(names - bound - added):
            line = upstream.resolve_name_import(plan.source_module or "", name)
            if line is None:
                plan.fail(
                    f"a copied upstream signature uses `{name}`, which the upstream module does not bind"
                )
            else:
                plan.extra_imports.append(line)

    # -- __init__ plans -------------------------------------------------------------------------------
    def _plan_inits(self) -> None:
        plan = self.plan
        for cls in sorted(plan.handles):
            if cls in plan.gpu_inits:
                missing = sorted(set(plan.handles[cls]) - plan.gpu_inits[cls])
                if missing:
                    plan.fail(
                        f"`{cls}.__init__` is the GPU spec's, which does not build {', '.join(missing)}: "
                        "cannot build those handles here"
                    )
                continue
            if plan.spec and not self._is_spec_class(cls):
                existing = self._spec_init_key(cls)
                if existing:
                    plan.init_keys[cls] = existing
                    continue
                self._plan_upstream_init(cls)
            else:
                local = self._local_class(cls)
                if local is None:
                    plan.fail(f"class `{cls}` is not defined in this module: cannot construct its handles")
                    continue
                if f"{local.name}.__init__" in plan.functions:
                    plan.init_keys[cls] = f"{local.name}.__init__"
                else:
                    plan.delegating_inits[local.name] = _delegating_init(
                        "__init__",
                        (("args", None, "vararg"), ("kwargs", None, "kwarg")),
                        plan.handles[cls],
                        plan.names,
                    )

    def _local_class(self, cls: str) -> ast.ClassDef | None:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ClassDef):
                dec = decorator_target(stmt, self.plan.config_name) if self.plan.spec else None
                target = dec[1] if dec and dec[0] == "replace_class" and dec[1] else stmt.name
                if target == cls:
                    return stmt
        return None

    def _is_spec_class(self, cls: str) -> bool:
        return self._local_class(cls) is not None

    def _plan_upstream_init(self, cls: str) -> None:
        plan = self.plan
        if not plan.source_module:
            plan.fail(f"the spec names no source_module: cannot read `{cls}.__init__` upstream")
            return
        from npu_lint.veomni import upstream

        init = upstream.class_init(plan.source_module, cls)
        if init is None:
            plan.fail(f"upstream `{plan.source_module}` has no class `{cls}` (or it cannot be read)")
            return
        fname = self._fresh_name(f"{snake_case(cls)}_init_patched")
        handles = plan.handles[cls]
        if isinstance(init, upstream.MethodSource):
            text = rename_def(init.text, "__init__", fname)
            self._signature_imports(text)
            text = _append_lines(text, [line for h in handles.values() for line in h.lines(plan.names)])
        else:
            text = _delegating_init(fname, init.params, handles, plan.names)
        desc = f"Construct the {plan.names.handle} handles of {cls} in __init__"
        deco = f'@{plan.config_name}.override_method(\n    "{cls}.__init__",\n    description="{desc}",\n)\n'
        anchor = next(
            (
                fn.key
                for fn in self._spec_order()
                if fn.kind == "method" and (fn.target or "").startswith(cls + ".")
            ),
            None,
        )
        if anchor is not None and anchor in {
            s.name for s in self.tree.body if isinstance(s, ast.FunctionDef)
        }:
            plan.before.setdefault(anchor, []).append(deco + text)
        elif anchor is not None:
            # the anchor is itself a new override (copied from upstream): put the __init__ just before it
            for texts in (*plan.after.values(), plan.tail):
                for i, t in enumerate(texts):
                    if f"def {anchor}(" in t:
                        texts.insert(i, deco + text)
                        break
                else:
                    continue
                break
            else:
                plan.tail.append(deco + text)
        else:
            plan.tail.append(deco + text)

    def _spec_order(self) -> list[FnInfo]:
        order = {
            s.name: i
            for i, s in enumerate(self.tree.body)
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        fns = list(self.plan.functions.values())
        return sorted(fns, key=lambda f: order.get(f.key, 10**9))


def _append_lines(fn_text: str, lines: list[str]) -> str:
    """``lines`` at the end of the function's body, or just before its last ``self.post_init()``."""
    fn = ast.parse(fn_text).body[0]
    body_line = fn.body[0].lineno if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else 2
    first = fn_text.splitlines()[body_line - 1]
    indent = first[: len(first) - len(first.lstrip())] or "    "
    text_lines = fn_text.rstrip("\n").split("\n")
    last = fn.body[-1] if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if (
        last is not None
        and last.lineno == last.end_lineno
        and POST_INIT.match(text_lines[last.lineno - 1])
        and last.col_offset == len(indent)
    ):
        at = last.lineno - 1
        return (
            "\n".join(text_lines[:at])
            + "\n"
            + indent_lines(lines, indent)
            + "\n".join(text_lines[at:])
            + "\n"
        )
    return fn_text.rstrip("\n") + "\n" + indent_lines(lines, indent)


def _delegating_init(
    name: str, params: Sequence[tuple[str, str | None, str]], handles: dict[str, HandleSpec], names: Names
) -> str:
    sig = ["self"]
    call: list[str] = []
    star = False
    for pname, default, kind in params:
        if kind == "positional":
            sig.append(f"{pname}={default}" if default is not None else pname)
            call.append(pname)
        elif kind == "vararg":
            sig.append(f"*{pname}")
            call.append(f"*{pname}")
            star = True
        elif kind == "kwonly":
            if not star:
                sig.append("*")
                star = True
            sig.append(f"{pname}={default}" if default is not None else pname)
            call.append(f"{pname}={pname}")
        elif kind == "kwarg":
            sig.append(f"**{pname}")
            call.append(f"**{pname}")
    lines = [f"def {name}({', '.join(sig)}):", f"    super().__init__({', '.join(call)})"]
    return (
        "\n".join(lines)
        + "\n"
        + indent_lines([line for h in handles.values() for line in h.lines(names)], "    ")
    )
