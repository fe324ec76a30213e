"""The libcst rewrite of function bodies (libcst imported only when a fix is built).

:class:`Rewriter` turns a guarded body into the unconditional handle call, translating the call contract
(RMSNorm ``eps=``, RoPE, SwiGLU weights, cross-entropy through ``self.loss_function``, offset RMSNorm, kernel and
MoE calls), inlines a free function's slot call through ``self``, and drops locals the rewrite left dead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from npu_lint.fixers.dispatch.plan import (
    ATTENTION_ATTR,
    ATTENTION_VAR,
    CONFIG_SLOT,
    GUARD_ATTR,
    KERNEL_CONTRACTS,
    MOE_CONTRACTS,
    MOE_MODULE_CONTRACTS,
    HandleSpec,
    Plan,
    Slot,
)
from npu_lint.fixers.dispatch.spec import indent_lines


def _drop_comment_runs(lines: Sequence[Any], pattern: str) -> list[Any]:
    """Leading lines without the comment runs (consecutive comment lines) that mention ``pattern``."""
    runs: list[list[Any]] = []
    for line in lines:
        if line.comment is not None and runs and runs[-1] and runs[-1][-1].comment is not None:
            runs[-1].append(line)
        else:
            runs.append([line])
    out: list[Any] = []
    for run in runs:
        if any(line.comment is not None and re.search(pattern, line.comment.value) for line in run):
            continue
        out.extend(run)
    return out


# ----------------------------------------------------------------------------------------------------
# rewriting (libcst)
# ----------------------------------------------------------------------------------------------------
def load_libcst() -> Any:
    import libcst

    return libcst


class Rewriter:
    """Builds the libcst transformers lazily (libcst is imported only when a fix is built)."""

    def __init__(self, plan: Plan, text: str) -> None:
        self.plan = plan
        self.text = text
        self.cst = load_libcst()
        self.templates: dict[str, tuple[Any, Any]] = {}  # free fn name -> (cst Call template, cst Parameters)

    # -- small helpers ------------------------------------------------------------------------------
    def stmts(self, code: str) -> list[Any]:
        return list(self.cst.parse_module(code).body)

    def block_stmts(self, lines: Sequence[str]) -> list[Any]:
        """Statements parsed inside a function body, so continuation lines keep a relative indentation."""
        fn = self.cst.parse_module("def _npu_lint_block():\n" + indent_lines(lines, "    ")).body[0]
        return list(fn.body.body)

    def expr(self, code: str) -> Any:
        return self.cst.parse_expression(code)

    def is_slot_guard(self, test: Any) -> tuple[Slot, bool] | None:
        cst = self.cst
        negated = False
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, negated = test.expression, True
        if (
            isinstance(test, cst.Attribute)
            and test.attr.value == GUARD_ATTR
            and isinstance(test.value, cst.Name)
            and test.value.value in self.plan.slots
        ):
            return self.plan.slots[test.value.value], negated
        return None

    # -- the function-level transformer ---------------------------------------------------------------
    def rewrite_function(
        self, fn: Any, key: str, owner_handles: dict[str, HandleSpec] | None, free: bool
    ) -> Any:
        rewriter = self
        cst = self.cst
        info = self.plan.functions.get(key)
        in_init = info is not None and (
            info.node.name == "__init__" or (info.target or "").endswith(".__init__")
        )

        class Transformer(cst.CSTTransformer):  # type: ignore[misc, name-defined]
            def leave_IndentedBlock(self, original: Any, updated: Any) -> Any:
                return updated.with_changes(
                    body=rewriter.rewrite_block(list(updated.body), key, free, in_init)
                )

            def leave_Call(self, original: Any, updated: Any) -> Any:
                if free:
                    return updated
                module_call = rewriter.module_call(updated, key)
                if module_call is not None:
                    return module_call
                kernel_call = rewriter.kernel_call(updated, key)
                if kernel_call is not None:
                    return kernel_call
                return rewriter.rewrite_call(updated, key, owner_handles or {})

            def leave_Subscript(self, original: Any, updated: Any) -> Any:
                # `self.<kernel>(...)[0]` where the op returns the first item itself
                if free or not isinstance(original.value, cst.Call):
                    return updated
                slot_name = rewriter.kernel_attr(original.value.func, key)
                if slot_name is None:
                    return updated
                op = rewriter.plan.slots[slot_name].op
                index = updated.slice[0].slice if len(updated.slice) == 1 else None
                if (
                    KERNEL_CONTRACTS[op][2]
                    and isinstance(index, cst.Index)
                    and isinstance(index.value, cst.Integer)
                    and index.value.value == "0"
                ):
                    return updated.value
                return updated

            def leave_Attribute(self, original: Any, updated: Any) -> Any:
                value = updated.value
                if (
                    not free
                    and updated.attr.value == "value"
                    and isinstance(value, cst.Name)
                    and value.value in rewriter.plan.slots
                    and rewriter.plan.slots[value.value].op == CONFIG_SLOT
                ):
                    return rewriter.expr(f"self.{value.value}")
                return updated

        new = fn.visit(Transformer())
        if key in self.plan.moe_fns and not free:
            new = self._drop_dead_locals(new)
        return new

    def _drop_dead_locals(self, fn: Any) -> Any:
        """``name = <call>`` at the top of a body whose name nothing reads any more (the eager MoE loop's
        accumulator, once the handle call replaced the loop)."""
        cst = self.cst
        body = list(fn.body.body)
        kept = []
        for i, stmt in enumerate(body):
            if (
                isinstance(stmt, cst.SimpleStatementLine)
                and len(stmt.body) == 1
                and isinstance(stmt.body[0], cst.Assign)
                and len(stmt.body[0].targets) == 1
                and isinstance(stmt.body[0].targets[0].target, cst.Name)
                and isinstance(stmt.body[0].value, cst.Call)
            ):
                name = stmt.body[0].targets[0].target.value
                rest = "\n".join(self.module_code(s) for s in body[i + 1 :])
                if not re.search(rf"\b{re.escape(name)}\b", rest):
                    continue
            kept.append(stmt)
        if len(kept) == len(body) or not kept:
            return fn
        first = kept[0]
        kept[0] = first.with_changes(
            leading_lines=[ln for ln in first.leading_lines if ln.comment is not None]
        )
        return fn.with_changes(body=fn.body.with_changes(body=kept))

    def _owners(self, key: str) -> set[str]:
        return self.plan.owners.get(key) or set()

    def kernel_attr(self, node: Any, key: str) -> str | None:
        """``self.<attr>`` that aliased a slot's bound kernel in this function's class: the slot name."""
        cst = self.cst
        if (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
        ):
            for owner in self._owners(key):
                slot = self.plan.kernel_attrs.get((owner, node.attr.value))
                if slot is not None:
                    return slot
        return None

    def _kernel_test(self, test: Any, key: str) -> str | None:
        """``self.<kernel attr> is [not] <x>``: "is-not-none" / "is-none" / "is-fallback" (None: another test)."""
        cst = self.cst
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
            return None
        if self.kernel_attr(test.left, key) is None:
            return None
        target = test.comparisons[0]
        right = target.comparator
        if isinstance(target.operator, cst.IsNot) and isinstance(right, cst.Name) and right.value == "None":
            return "is-not-none"
        if isinstance(target.operator, cst.Is) and isinstance(right, cst.Name):
            return "is-none" if right.value == "None" else "is-fallback"
        return None

    def _kernel_alias_stmt(self, stmt: Any, key: str) -> bool:
        cst = self.cst
        if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign)):
            return False
        assign = stmt.body[0]
        return len(assign.targets) == 1 and self.kernel_attr(assign.targets[0].target, key) is not None

    def _attention_pick(self, stmt: Any, key: str) -> bool:
        """``attention_interface[: Callable] = ...`` or ``if ...: attention_interface = ...`` in an attention
        forward whose attention goes through the class's handle."""
        cst = self.cst
        if key not in self.plan.attention:
            return False
        if isinstance(stmt, cst.If) and stmt.orelse is None:
            return all(self._attention_pick(s, key) for s in stmt.body.body)
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return False
        small = stmt.body[0]
        if isinstance(small, cst.AnnAssign):
            target = small.target
        elif isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
        else:
            return False
        return isinstance(target, cst.Name) and target.value == ATTENTION_VAR

    def rewrite_block(self, body: list[Any], key: str, free: bool, in_init: bool = False) -> list[Any]:
        cst = self.cst
        out: list[Any] = []
        for i, stmt in enumerate(body):
            if not free and self._attention_pick(stmt, key):
                continue  # the class's attention handle replaces the pick
            if not free and self._kernel_alias_stmt(stmt, key):
                continue  # `self.<attr> = slot.bound_kernel()`: the handle replaces it
            kernel_test = self._kernel_test(stmt.test, key) if isinstance(stmt, cst.If) and not free else None
            if kernel_test is not None:
                # a handle is always callable (its eager row is the fallback): keep the kernel path only
                orelse = stmt.orelse
                else_body = list(orelse.body.body) if isinstance(orelse, cst.Else) else []
                kept = list(stmt.body.body) if kernel_test == "is-not-none" else else_body
                if kept:
                    out.extend(self._carry_comments(stmt, kept))
                    continue
            guard = self.is_slot_guard(stmt.test) if isinstance(stmt, cst.If) else None
            if guard is None:
                out.append(stmt)
                continue
            slot, negated = guard
            fused: list[Any] | None
            eager: list[Any] | None
            fused = list(stmt.body.body) if not negated else None
            orelse = stmt.orelse
            else_body = list(orelse.body.body) if isinstance(orelse, cst.Else) else None
            if negated:
                fused, eager = else_body, list(stmt.body.body)
            else:
                eager = else_body if orelse is not None else None
                if isinstance(orelse, cst.If):
                    eager = [orelse]
            if free:
                # the free function keeps its eager body; its op call moved to the callers
                if eager is not None:
                    out.extend(self._carry_comments(stmt, eager))
                    continue
                rest = body[i + 1 :]
                if rest:
                    rest = self._carry_comments(stmt, rest)
                    out.extend(rest)
                    return out
                continue
            if (
                in_init
                and eager is not None
                and any(s == slot.name for s, _, _ in self.plan.module_attrs.values())
            ):
                # a gated-norm module: the eager module stays (its weight feeds the handle)
                out.extend(self._carry_comments(stmt, eager))
                continue
            if in_init and eager is not None:
                # the slot built a module in __init__: keep the eager module, flag the manual step
                note = self.cst.EmptyLine(
                    comment=self.cst.Comment(
                        f"# npu-lint: manual step: `{slot.name}` built a module here; "
                        "call its VeomniOp handle in that module's forward"
                    )
                )
                eager = self._carry_comments(stmt, eager)
                eager[0] = eager[0].with_changes(leading_lines=[*eager[0].leading_lines, note])
                out.extend(eager)
                continue
            if fused is None:
                self.plan.fail(
                    f"`{key}`: `if not {slot.name}.{GUARD_ATTR}` without else: cannot find the op path"
                )
                out.append(stmt)
                continue
            if (
                eager is not None
                and not negated
                and fused
                and isinstance(fused[0], cst.If)
                and fused[0].orelse is None
                and len(fused[0].body.body) == 1
                and isinstance(fused[0].body.body[0], cst.SimpleStatementLine)
                and isinstance(fused[0].body.body[0].body[0], cst.Raise)
            ):
                # the fused path refused case C: C takes the eager path (with the handle-bound loss function,
                # given logits only), every other case the fused path
                case = fused[0]
                eager_body = [s.visit(_LogitsOnlyLoss(cst)) for s in eager]
                new_if = case.with_changes(
                    body=case.body.with_changes(body=eager_body),
                    orelse=cst.Else(body=cst.IndentedBlock(body=fused[1:])),
                    leading_lines=case.leading_lines,
                )
                out.extend(self._carry_comments(stmt, [new_if]))
                continue
            out.extend(self._carry_comments(stmt, fused))
            if orelse is None and fused and self._terminates(fused[-1]):
                # everything after `if slot...: return slot(...)` is the eager fallback: it goes
                return out
        return out

    def _terminates(self, stmt: Any) -> bool:
        cst = self.cst
        return isinstance(stmt, cst.SimpleStatementLine) and isinstance(
            stmt.body[-1], (cst.Return, cst.Raise)
        )

    def _carry_comments(self, guard: Any, stmts: list[Any]) -> list[Any]:
        """The guard's leading comments (minus the ones about OpSlot) go to the first new statement."""
        if not stmts:
            return stmts
        kept = _drop_comment_runs(guard.leading_lines, r"OpSlot|use_non_eager_impl|Original HF code")
        first = stmts[0]
        own = _drop_comment_runs(first.leading_lines, r"OpSlot|use_non_eager_impl|Original HF code below")
        while own and own[0].comment is None and (not kept or kept[-1].comment is None):
            own = own[1:]
        return [first.with_changes(leading_lines=[*kept, *own]), *stmts[1:]]

    def module_call(self, call: Any, key: str) -> Any | None:
        """``self.<gated norm>(x, z)`` -> ``self.<handle>(x, z, self.<gated norm>.weight, eps=E, activation=A)``."""
        cst = self.cst
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            return None
        for owner in self._owners(key):
            found = self.plan.module_attrs.get((owner, func.attr.value))
            if found is None:
                continue
            slot_name, eps, activation = found
            if len(call.args) != 2 or any(a.keyword is not None or a.star for a in call.args):
                self.plan.fail(f"`{key}` calls `self.{func.attr.value}` with other than (x, gate)")
                return None
            x, z = (a.value for a in call.args)
            args = ", ".join(
                [
                    self.module_code(x),
                    self.module_code(z),
                    f"self.{func.attr.value}.weight",
                    f"eps={eps}",
                    f"activation={activation}",
                ]
            )
            built = self.expr(f"self.{slot_name}({args})")
            return self._multiline(built, list(built.args))
        return None

    def module_code(self, node: Any) -> str:
        return self.cst.Module(body=[]).code_for_node(node)

    def kernel_call(self, call: Any, key: str) -> Any | None:
        """``self.<kernel attr>(...)`` -> the handle with the op's call contract: the contract's keywords passed
        positionally (in order; a missing one is None), the other keywords kept."""
        slot_name = self.kernel_attr(call.func, key)
        if slot_name is None:
            return None
        op = self.plan.slots[slot_name].op
        names, _, _ = KERNEL_CONTRACTS[op]
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in call.args) or len(positional) > len(names):
            self.plan.fail(f"`{key}`: the `{op}` kernel call has arguments its handle contract cannot bind")
            return None
        bound: dict[str, str] = {
            n: self.module_code(a.value) for n, a in zip(names, positional, strict=False)
        }
        rest: list[str] = []
        for a in call.args:
            if a.keyword is None:
                continue
            name = a.keyword.value
            if name in names:
                bound[name] = self.module_code(a.value)
            else:
                rest.append(f"{name}={self.module_code(a.value)}")
        last = max((i for i, n in enumerate(names) if n in bound), default=-1)
        args = [bound.get(n, "None") for n in names[: last + 1]] + rest
        built = self.expr(f"self.{slot_name}({', '.join(args)})")
        return self._multiline(built, list(built.args))

    def rewrite_call(self, call: Any, key: str, handles: dict[str, HandleSpec]) -> Any:
        cst = self.cst
        func = call.func
        if isinstance(func, cst.Name) and func.value == ATTENTION_VAR and key in self.plan.attention:
            return call.with_changes(func=self.expr(f"self.{ATTENTION_ATTR}"))
        if isinstance(func, cst.Name) and (key, func.value) in self.plan.moe_calls:
            return self.moe_keyword_call(call, self.plan.slots[self.plan.moe_calls[(key, func.value)]])
        if isinstance(func, cst.Name) and func.value in self.plan.slots:
            return self.translate(self.plan.slots[func.value], call, key, handles)
        if isinstance(func, cst.Name) and func.value in self.plan.free and func.value in self.templates:
            return self.inline(func.value, call, key, handles)
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "bound_kernel"
            and isinstance(func.value, cst.Name)
            and func.value.value in self.plan.slots
        ):
            return self.expr(f"self.{func.value.value}")
        return call

    def moe_keyword_call(self, call: Any, slot: Slot) -> Any:
        """``fused(hidden_states=h, ..., fc1_1_weight=None, ...)`` -> ``self.<slot>(h, ..., empty_bias(w), ...)``."""
        positional, keywords = MOE_CONTRACTS[slot.variant]
        given = {a.keyword.value: self.module_code(a.value) for a in call.args}
        weight = next((v for k, v in given.items() if k.endswith("_weight") and v != "None"), "hidden_states")
        last = max(i for i, n in enumerate(positional) if n in given)
        args = []
        for name in positional[: last + 1]:
            value = given.get(name, "None")
            if value == "None":
                value = f"{self.plan.names.empty_bias}({weight})"
                self.plan.empty_bias_used = True
            args.append(value)
        args += [f"{k}={given[k]}" for k in keywords if k in given]
        built = self.expr(f"self.{slot.name}({', '.join(args)})")
        return self._multiline(built, list(built.args))

    def moe_module_call(self, call: Any, slot: Slot) -> Any:
        """``slot(self, a, b, c)`` -> ``self.<slot>(<the op's arguments>, <keywords>=self.<attr>)``."""
        params, positional, keywords = MOE_MODULE_CONTRACTS[slot.variant]
        bound = {p: self.module_code(a.value) for p, a in zip(params, call.args[1:], strict=True)}
        args = []
        for p in positional:
            if p.startswith("empty:"):
                args.append(f"{self.plan.names.empty_bias}({p[len('empty:') :]})")
                self.plan.empty_bias_used = True
            else:
                args.append(bound.get(p, p))
        args += [f"{k}=self.{k}" for k in keywords]
        built = self.expr(f"self.{slot.name}({', '.join(args)})")
        return self._multiline(built, list(built.args))

    def translate(self, slot: Slot, call: Any, key: str, handles: dict[str, HandleSpec]) -> Any:
        """``slot(args)`` -> the VeomniOp call of the owner's handle, per the call contract."""
        cst = self.cst
        handle = handles.get(slot.name)
        args = list(call.args)
        positional = [a for a in args if a.keyword is None and not a.star]
        if slot.op == "cross_entropy_loss":
            return call.with_changes(func=self.expr("self.loss_function"))
        if slot.op == "load_balancing_loss" and handle is not None and handle.loss:
            return call.with_changes(func=self.expr(f"self.{handle.loss_attr}"))
        if slot.op == "moe_experts" and slot.variant in MOE_MODULE_CONTRACTS and key in self.plan.moe_fns:
            return self.moe_module_call(call, slot)
        new_func = self.expr(f"self.{slot.name}")
        if slot.op == "rms_norm":
            if len(positional) >= 2:
                weight = positional[1]
                stripped = self._strip_offset(weight.value)
                if (
                    stripped is not None
                    and handle is not None
                    and handle.variant == self.plan.names.offset_variant
                ):
                    args[args.index(weight)] = weight.with_changes(value=stripped)
            eps_index = 1 if (slot.variant == "unweighted" and len(positional) == 2) else 2
            if len(positional) == eps_index + 1:
                eps = positional[eps_index]
                args[args.index(eps)] = eps.with_changes(
                    keyword=cst.Name("eps"),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                    ),
                )
            return call.with_changes(func=new_func, args=self._fix_commas(args))
        if slot.op == "swiglu_mlp":
            rest = [a for a in args[1:]]
            if not rest:
                return call.with_changes(func=new_func)
            x = rest[0].value
            parts = [x]
            for proj in ("gate_proj", "up_proj", "down_proj"):
                parts += [
                    self.expr(f"self.{proj}.weight"),
                    self.expr(f"{self.plan.names.linear_bias}(self.{proj})"),
                ]
            return self._multiline(call.with_changes(func=new_func), [cst.Arg(p) for p in parts])
        return call.with_changes(func=new_func)

    def _multiline(self, call: Any, args: list[Any]) -> Any:
        """One argument per line, closing parenthesis on its own line (ruff-format's shape)."""
        cst = self.cst

        def ws(extra: str) -> Any:
            return cst.ParenthesizedWhitespace(
                first_line=cst.TrailingWhitespace(),
                empty_lines=[],
                indent=True,
                last_line=cst.SimpleWhitespace(extra),
            )

        new = [
            a.with_changes(comma=cst.Comma(whitespace_after=ws("    " if i < len(args) - 1 else "")))
            for i, a in enumerate(args)
        ]
        return call.with_changes(args=new, whitespace_before_args=ws("    "))

    def _fix_commas(self, args: list[Any]) -> list[Any]:
        cst = self.cst
        out = []
        for i, a in enumerate(args):
            if i < len(args) - 1 and a.comma is cst.MaybeSentinel.DEFAULT:
                a = a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            out.append(a)
        return out

    def _strip_offset(self, node: Any) -> Any | None:
        cst = self.cst
        while isinstance(node, cst.BaseExpression) and node.lpar and isinstance(node, cst.BinaryOperation):
            node = node.with_changes(lpar=[], rpar=[])
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            for const, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(const, (cst.Integer, cst.Float)) and const.evaluated_value in (1, 1.0):
                    return other.with_changes(lpar=[], rpar=[]) if hasattr(other, "lpar") else other
        return None

    def prepare_templates(self, module: Any) -> None:
        """The ``return slot(...)`` call at the top of each replaced free function, with its parameters."""
        cst = self.cst
        for stmt in module.body:
            if not isinstance(stmt, cst.FunctionDef):
                continue
            for name, free in self.plan.free.items():
                if free.key != stmt.name.value:
                    continue
                for inner in stmt.body.body:
                    if isinstance(inner, cst.If) and self.is_slot_guard(inner.test):
                        ret = inner.body.body[0].body[0]
                        self.templates[name] = (ret.value, stmt.params)
                        break

    def inline(self, name: str, call: Any, key: str, handles: dict[str, HandleSpec]) -> Any:
        cst = self.cst
        template, params = self.templates[name]
        binding: dict[str, Any] = {}
        names = [p.name.value for p in (*params.posonly_params, *params.params)]
        pos = [a for a in call.args if a.keyword is None]
        if len(pos) > len(names) or any(a.star for a in call.args):
            self.plan.fail(f"`{key}`: `{name}(...)` is called with arguments its signature cannot bind")
        for pname, arg in zip(names, pos, strict=False):
            binding[pname] = arg.value
        for a in call.args:
            if a.keyword is not None:
                binding[a.keyword.value] = a.value
        for p in (*params.posonly_params, *params.params, *params.kwonly_params):
            if p.name.value not in binding and p.default is not None:
                binding[p.name.value] = p.default
        missing = []

        class Subst(cst.CSTTransformer):  # type: ignore[misc, name-defined]
            def leave_Name(self, original: Any, updated: Any) -> Any:
                if updated.value in binding:
                    return binding[updated.value]
                if updated.value in names:
                    missing.append(updated.value)
                return updated

            def leave_Arg(self, original: Any, updated: Any) -> Any:
                return updated  # keyword names are Names too but stay (handled in leave_Name below)

        new_args = []
        for arg in template.args:
            value = arg.value.visit(Subst())
            new_args.append(arg.with_changes(value=value))
        if missing:
            self.plan.fail(f"`{key}`: `{name}(...)` does not bind {sorted(set(missing))}")
        inlined = template.with_changes(args=new_args)
        slot = self.plan.free[name].slot
        result = self.translate(slot, inlined, key, handles)
        return result.with_changes(lpar=call.lpar, rpar=call.rpar)


def _LogitsOnlyLoss(cst: Any) -> Any:  # noqa: N802 - a transformer class built lazily (libcst)
    """``self.loss_function(logits=<x>, ..., hidden_states=..., weights=...)`` -> the logits path only: a loss
    function given computed logits gets neither the hidden states nor the head weight (upstream's shape)."""

    class Transformer(cst.CSTTransformer):  # type: ignore[misc, name-defined]
        def leave_Call(self, original: Any, updated: Any) -> Any:
            func = updated.func
            if not (
                isinstance(func, cst.Attribute)
                and func.attr.value == "loss_function"
                and isinstance(func.value, cst.Name)
                and func.value.value == "self"
            ):
                return updated
            keywords = {a.keyword.value: a for a in updated.args if a.keyword is not None}
            logits = keywords.get("logits")
            if logits is None or (isinstance(logits.value, cst.Name) and logits.value.value == "None"):
                return updated
            args = [
                a
                for a in updated.args
                if a.keyword is None or a.keyword.value not in ("hidden_states", "weights")
            ]
            if len(args) == len(updated.args):
                return updated
            last = args[-1]
            if updated.args[-1] is not last:
                args[-1] = last.with_changes(comma=updated.args[-1].comma)
            return updated.with_changes(args=args)

    return Transformer()
