"""NPU503 incomplete-registration."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable

from npu_lint.core.astutil import nodes_of
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.rules._registration import LITERAL_TYPE_LOOP, REGISTRATION_FIX_SAFETY, TWO_LOADERS
from npu_lint.rules.base import Example, ProjectRule
from npu_lint.rules.packaging._shared import (
    _defines,
    _diag,
    _guarded,
    _linted,
    _top_level_names,
    packages,
)
from npu_lint.veomni import patchgen
from npu_lint.veomni.project import Project
from npu_lint.veomni.vlmtypes import (
    _registrations,
    foreign_returns,
    sibling_types,
)


def _unreturned_heads(func: ast.FunctionDef, imported: list[str]) -> tuple[ast.stmt, list[str]] | None:
    """A registered function that picks its class by ``architecture`` (``if "ForCausalLM" in architecture:``)
    but returns some imported head class (``...For<Task>``) for no architecture: (the first dispatch test, the
    heads)."""
    dispatch = [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.If)
        and any(
            isinstance(c, ast.Compare)
            and any(isinstance(x, ast.Name) and x.id == "architecture" for x in c.comparators)
            for c in ast.walk(n.test)
        )
    ]
    if not dispatch:
        return None
    returned = {
        x.id
        for n in ast.walk(func)
        if isinstance(n, ast.Return) and n.value is not None
        for x in ast.walk(n.value)
        if isinstance(x, ast.Name)
    }
    heads = [name for name in dict.fromkeys(imported) if "For" in name and name not in returned]
    if not heads:
        return None
    return min(dispatch, key=lambda n: n.lineno), heads


def _needle(test: ast.expr, arg: str) -> tuple[str, str] | None:
    """``"X" in <arg>`` / ``<arg> == "X"`` / ``<arg>.endswith("X")`` / ``.startswith``: (how, X)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and len(test.comparators) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, ast.In) and isinstance(right, ast.Name) and right.id == arg:
            if isinstance(left, ast.Constant) and isinstance(left.value, str):
                return "in", left.value
        if isinstance(op, ast.Eq):
            for a, b in ((left, right), (right, left)):
                if (
                    isinstance(a, ast.Name)
                    and a.id == arg
                    and isinstance(b, ast.Constant)
                    and isinstance(b.value, str)
                ):
                    return "==", b.value
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Attribute)
        and test.func.attr in ("endswith", "startswith")
        and isinstance(test.func.value, ast.Name)
        and test.func.value.id == arg
        and len(test.args) == 1
        and isinstance(test.args[0], ast.Constant)
        and isinstance(test.args[0].value, str)
    ):
        return test.func.attr, test.args[0].value
    return None


def _covers(earlier: tuple[str, str], later: tuple[str, str]) -> bool:
    """Every string the ``later`` test accepts is accepted by the ``earlier`` one."""
    how, needle = earlier
    later_how, later_needle = later
    if how == "in":
        return needle in later_needle
    if how == "endswith":
        return later_how in ("endswith", "==") and later_needle.endswith(needle)
    if how == "startswith":
        return later_how in ("startswith", "==") and later_needle.startswith(needle)
    return later_how == "==" and later_needle == needle


def _returns(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _shadowed_dispatch(func: ast.FunctionDef) -> list[tuple[ast.If, ast.If, str]]:
    """Tests of an ``architecture`` dispatch (an ``if``/``elif`` chain, or consecutive ``if``s that return) that
    can never be true because an earlier test that returns accepts every architecture they accept:
    (shadowed test, the earlier test, the class the shadowed branch returns)."""
    arg = func.args.args[0].arg if func.args.args else "architecture"
    chain: list[tuple[ast.If, tuple[str, str]]] = []
    out: list[tuple[ast.If, ast.If, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if not isinstance(stmt, ast.If):
                if not isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Assign, ast.Expr)):
                    chain.clear()  # control flow the dispatch does not model
                continue
            node: ast.If | None = stmt
            while node is not None:
                test = _needle(node.test, arg)
                if test is None:
                    chain.clear()
                    break
                for earlier, earlier_test in chain:
                    if _covers(earlier_test, test):
                        returned = node.body[-1].value if _returns(node.body) else None
                        names = (
                            [n.id for n in ast.walk(returned) if isinstance(n, ast.Name)] if returned else []
                        )
                        out.append((node, earlier, names[0] if names else "?"))
                        break
                if _returns(node.body):
                    chain.append((node, test))
                orelse = node.orelse
                node = orelse[0] if len(orelse) == 1 and isinstance(orelse[0], ast.If) else None

    visit(func.body)
    return out


def _returned_class(body: list[ast.stmt]) -> str | None:
    """The class name a branch ends by returning (``return Cls``, ``return gen.Cls``), or None."""
    if not _returns(body) or not isinstance(body[-1], ast.Return):
        return None
    value = body[-1].value
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute):
        return value.attr
    return None


def _negated_needle(test: ast.expr, arg: str) -> str | None:
    """``"X" not in <arg>`` / ``not <needle test>``: X."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        found = _needle(test.operand, arg)
        return found[1] if found is not None and found[0] != "==" else None
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.NotIn)
        and isinstance(test.comparators[0], ast.Name)
        and test.comparators[0].id == arg
        and isinstance(test.left, ast.Constant)
        and isinstance(test.left.value, str)
    ):
        return test.left.value
    return None


def _mismatched_dispatch(func: ast.FunctionDef) -> list[tuple[ast.If, str, str, bool]]:
    """Branches of an ``architecture`` dispatch whose class disagrees with the test that selects it: a test for
    architectures naming X returns a class whose name does not (``"ForTokenClassification" in architecture``
    returning ``...ForCausalLM``), or a negated test returns a class named for X (``"ForCausalLM" not in
    architecture`` returning ``...ForCausalLM``): (branch, X, class, negated)."""
    arg = func.args.args[0].arg if func.args.args else "architecture"
    out: list[tuple[ast.If, str, str, bool]] = []
    for node in nodes_of(func, ast.If):
        assert isinstance(node, ast.If)
        cls = _returned_class(node.body)
        if cls is None or ("For" not in cls and not cls.endswith("Model")):
            continue
        found = _needle(node.test, arg)
        if found is not None:
            how, needle = found
            if how in ("in", "endswith") and needle not in cls:
                out.append((node, needle, cls, False))
            continue
        negated = _negated_needle(node.test, arg)
        if negated is not None and negated in cls:
            out.append((node, negated, cls, True))
    return out


def _stock_returns(tree: ast.Module, init: str) -> list[tuple[str, ast.AST, str, str]]:
    """Registered loaders (`@<...>REGISTRY.register(...)`) that import a class from `transformers` and return it
    while a module of the package defines a class of that name (the package's subclass): (loader, import, name,
    the package module's file name)."""
    pkg_dir = os.path.dirname(init)
    local: dict[str, str] | None = None
    out: list[tuple[str, ast.AST, str, str]] = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef) or not any(
            isinstance(d, ast.Call)
            and isinstance(d.func, ast.Attribute)
            and d.func.attr == "register"
            and "REGISTRY" in ast.unparse(d.func.value)
            for d in stmt.decorator_list
        ):
            continue
        stock: dict[str, ast.AST] = {}
        for node in ast.walk(stmt):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "transformers":
                for alias in node.names:
                    stock[alias.asname or alias.name] = node
        returned = {
            n.value.id for n in ast.walk(stmt) if isinstance(n, ast.Return) and isinstance(n.value, ast.Name)
        }
        for name in sorted(returned & set(stock)):
            if local is None:
                local = {}
                for base in (pkg_dir, os.path.join(pkg_dir, "generated")):
                    try:
                        files = sorted(os.listdir(base))
                    except OSError:
                        continue
                    for fname in files:
                        if not fname.endswith(".py") or fname == "__init__.py":
                            continue
                        parsed = patchgen.load_file(os.path.join(base, fname))
                        if parsed is None or parsed.tree is None:
                            continue
                        for top in parsed.tree.body:
                            if isinstance(top, ast.ClassDef):
                                local.setdefault(top.name, fname)
            if name in local:
                out.append((stmt.name, stock[name], name, local[name]))
    return out


class IncompleteRegistration(ProjectRule):
    code = "NPU503"
    per_package = True  # findings of one model package at a time (the engine may run it per package)
    name = "incomplete-registration"
    summary = (
        "A package's registration is inconsistent with its modules: a registered loader imports a class the "
        "generated module lacks, picks no class for an architecture it imports a head for, or resolves a model type "
        "to a class built for an unrelated one (the model types of one VLM are NPU732's)."
    )
    why = (
        "Registration is keyed by `config.json`'s `model_type`. A registered function that imports a class the "
        "generated module does not define fails only when that model is built. A loader registered for one type "
        "that returns, whatever the architecture, a class whose config is of another, unrelated type cannot build "
        "that type's checkpoints (the wrapper and the sub-model types of one vision-language model, `gemma3` and "
        "`gemma3_text`, are NPU732's, with the types such a package must register)."
        " Registration is read however it is written: `@MODELING_REGISTRY.register(...)`, the call "
        '`MODELING_REGISTRY.register("t")(fn)` or `register("t", fn)`, `MODELING_REGISTRY["t"] = fn`, or a loop '
        "over literal model types. A registered function that picks its class by `architecture` and imports a head "
        "class (`...ForTokenClassification`) it returns for no architecture sends that checkpoint to another "
        "class; so does a dispatch test that no architecture reaches because an earlier, broader test returns "
        'first (`"ForConditionalGeneration" in architecture` before `"ThinkerForConditionalGeneration" in '
        "architecture`): a substring, suffix, prefix or equality test is compared with the tests before it. A "
        'branch whose class disagrees with its own test (`"ForCausalLM" not in architecture` returning '
        "`...ForCausalLM`, a `ForTokenClassification` test returning the causal-LM head) is reported too."
        " A registered loader (any registry: modeling, config, processor) that imports a class from `transformers` "
        "and returns it while a module of the package defines its own class of that name (the package's processor "
        "subclass) hands out the stock class: the package's changes never run."
    )
    bad = (
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            @MODELING_REGISTRY.register("toy_text")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyForConditionalGeneration, ToyModel

                if "CausalLM" in architecture:
                    return ToyForCausalLM
                return ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the multimodal head is imported but no architecture returns it",
        ),
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            @MODELING_REGISTRY.register("toy_text")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import (
                    ToyForCausalLM,
                    ToyForConditionalGeneration,
                    ToyForTokenClassification,
                    ToyModel,
                )

                if architecture.endswith("Generation"):
                    return ToyForConditionalGeneration
                if "For" in architecture:
                    return ToyForCausalLM
                if "ForTokenClassification" in architecture:
                    return ToyForTokenClassification
                return ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="a broad architecture test returns before a narrower one (the token-classification head is "
            "never built)",
        ),
    )
    good = (
        Example(
            """
            from ...loader import MODELING_REGISTRY


            @MODELING_REGISTRY.register("toy")
            @MODELING_REGISTRY.register("toy_text")
            def register_toy_modeling(architecture: str):
                from .generated.patched_modeling_toy_gpu import (
                    ToyForCausalLM,
                    ToyForConditionalGeneration,
                    ToyForTokenClassification,
                    ToyModel,
                )

                if "ForTokenClassification" in architecture:
                    return ToyForTokenClassification
                if architecture.endswith("Generation"):
                    return ToyForConditionalGeneration
                if "For" in architecture:
                    return ToyForCausalLM
                return ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the narrower tests first",
        ),
        TWO_LOADERS,
        Example(
            """
            from ...loader import MODELING_REGISTRY


            def load_toy(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForConditionalGeneration

                return ToyForConditionalGeneration


            def load_toy_text(architecture: str):
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM

                return ToyForCausalLM


            MODELING_REGISTRY.register("toy")(load_toy)
            MODELING_REGISTRY.register("toy_text", load_toy_text)
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="registered by calls at import time instead of decorators",
        ),
        LITERAL_TYPE_LOOP,
    )
    fix_safety = REGISTRATION_FIX_SAFETY

    @_guarded
    def check(self, project: Project, paths: list[str]) -> Iterable[Diagnostic]:
        linted = _linted(paths)
        for pkg in packages(paths):
            if pkg.init is None or os.path.normpath(pkg.init) not in linted:
                continue
            parsed = patchgen.load_file(pkg.init)
            if parsed is None or parsed.tree is None:
                continue
            # a loader that hands out the stock transformers class the package subclasses
            for func, node, name, local in _stock_returns(parsed.tree, pkg.init):
                yield _diag(
                    self,
                    pkg.init,
                    node.lineno,
                    f"`{func}` returns the stock transformers `{name}`, but this package defines its own `{name}` in "
                    f"`{local}`: the registry hands out the upstream class and the package's changes (its call "
                    "signature, its media handling) never run",
                    col=node.col_offset,
                    end_line=node.end_lineno,
                    end_col=node.end_col_offset,
                )
            regs = _registrations(parsed.tree)
            if not regs:
                continue
            by_module = {os.path.basename(g)[:-3]: g for g in pkg.generated}
            # reverse check: imported names the generated module lacks
            for reg in regs:
                for module, name, node in reg.imports:
                    gen_path = by_module.get(module)
                    if gen_path is None or name == "*":
                        continue
                    names = _top_level_names(gen_path)
                    if names is None or _defines(gen_path, name, names):
                        continue
                    yield _diag(
                        self,
                        pkg.init,
                        node.lineno,
                        f"`{reg.function.name}` imports `{name}` from `{module}`, which does not define it",
                        col=node.col_offset,
                        end_line=node.end_lineno,
                        end_col=node.end_col_offset,
                    )
            # a loader that returns, for every architecture, a class built for another model type
            for reg in regs:
                for node, name, own_type in foreign_returns(reg, by_module):
                    if any(sibling_types(own_type, t) for t in reg.types):
                        continue  # two model types of one VLM: NPU732
                    yield _diag(
                        self,
                        pkg.init,
                        node.lineno,
                        f"`{reg.function.name}` is registered for {', '.join(f'`{t}`' for t in reg.types)} but "
                        f"returns `{name}`, whose config is of model type `{own_type}`: a "
                        f"{' or '.join(f'`{t}`' for t in reg.types)} checkpoint is built with a class that expects "
                        "another config (a text-only checkpoint given the multimodal wrapper has no vision_config)",
                        col=node.col_offset,
                        end_line=node.end_lineno,
                        end_col=node.end_col_offset,
                    )
            # head classes imported by an architecture dispatch and returned for no architecture
            for reg in regs:
                found = _unreturned_heads(reg.function, [name for _, name, _ in reg.imports])
                if found is None:
                    continue
                at, heads = found
                yield _diag(
                    self,
                    pkg.init,
                    at.lineno,
                    f"`{reg.function.name}` imports {', '.join(f'`{h}`' for h in heads)} from the generated module "
                    "but returns it for no `architecture`: such a checkpoint falls through to another class (the "
                    "wrong head, or the stock one)",
                    col=at.col_offset,
                    end_line=at.lineno,
                    end_col=at.col_offset + 2,
                )
            # an architecture test no architecture can reach (an earlier, broader test returns first)
            for reg in regs:
                for test, earlier, cls in _shadowed_dispatch(reg.function):
                    yield _diag(
                        self,
                        pkg.init,
                        test.lineno,
                        f"`{reg.function.name}` never reaches this architecture test: the test at line "
                        f"{earlier.lineno} accepts every architecture it accepts and returns first, so `{cls}` "
                        "is built for no checkpoint (those checkpoints get the earlier branch's class)",
                        col=test.test.col_offset,
                        end_line=test.test.end_lineno,
                        end_col=test.test.end_col_offset,
                    )
            # a dispatch branch whose class is not the one its architecture test names
            for reg in regs:
                unreachable = {id(test) for test, _, _ in _shadowed_dispatch(reg.function)}  # reported above
                for test, needle, cls, negated in _mismatched_dispatch(reg.function):
                    if id(test) in unreachable:
                        continue
                    said = "do not name" if negated else "name"
                    yield _diag(
                        self,
                        pkg.init,
                        test.lineno,
                        f"`{reg.function.name}` returns `{cls}` for the architectures that {said} `{needle}`: "
                        "the test and the class it selects disagree, so those checkpoints are built with another "
                        "head",
                        col=test.test.col_offset,
                        end_line=test.test.end_lineno,
                        end_col=test.test.end_col_offset,
                    )
