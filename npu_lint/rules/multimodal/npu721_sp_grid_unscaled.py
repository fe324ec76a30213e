"""NPU721 sp-grid-unscaled."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import last_name, nodes_of, scoped_memo, walk
from npu_lint.rules.base import Context, Example, Rule

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SP_TEST = re.compile(r"sp_enabled|sp_size\s*>\s*1|ulysses_enabled|sequence_parallel")
_SP_SIZE = re.compile(r"sp_size|sp_world_size|ulysses_size")


def _entry(node: ast.AST) -> tuple[str, bool] | None:
    """One grid entry: (its base, scaled by the SP size?) -- `4` -> ("4", False), `4 * sp_size` -> ("4", True);
    None for anything else than an integer expression."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value), False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = ast.unparse(node.left), ast.unparse(node.right)
        if _SP_SIZE.search(right) and not _SP_SIZE.search(left):
            return left, True
        if _SP_SIZE.search(left) and not _SP_SIZE.search(right):
            return right, True
    if isinstance(node, (ast.Name, ast.Attribute, ast.BinOp)) and not _SP_SIZE.search(ast.unparse(node)):
        return ast.unparse(node), False
    return None


def _triples(stmt: ast.stmt) -> list[tuple[ast.AST, list[tuple[str, bool]]]]:
    """Three-entry grids in a simple statement: list/tuple displays (`[[1, h, w]]`) and calls with three
    positional arguments (`metadata(1, 4 * sp_size, 4)`). Once per statement and file: a nested function's
    blocks are also its enclosing functions' blocks."""
    memo = scoped_memo("npu721.triples")
    hit = memo.get(id(stmt))
    if hit is not None and hit[0] is stmt:
        return hit[1]
    out = []
    for node in walk(stmt):
        items: list[ast.AST] | None = None
        if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == 3:
            items = node.elts
        elif isinstance(node, ast.Call) and len(node.args) == 3 and not node.keywords:
            items = node.args
        if items is None:
            continue
        entries = [_entry(e) for e in items]
        if all(e is not None for e in entries):
            out.append((node, entries))  # type: ignore[arg-type]
    memo[id(stmt)] = (stmt, out)
    return out


def _sp_switch(test: ast.AST) -> bool:
    """A test on the sequence-parallel switch (`sp_enabled`, `ps.sp_size > 1`), read off its names."""
    for n in ast.walk(test):
        name = last_name(n)
        if name and (name in ("sp_enabled", "ulysses_enabled", "sequence_parallel") or name == "sp_size"):
            return bool(_SP_TEST.search(ast.unparse(test)))
    return False


def _blocks(func: ast.AST) -> list[list[ast.stmt]]:
    out = []
    for node in walk(func):
        if isinstance(node, (ast.Lambda, ast.ClassDef)):
            continue
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                out.append(block)
    return out


class SpGridUnscaled(Rule):
    code = "NPU721"
    name = "sp-grid-unscaled"
    summary = (
        "Under sequence parallelism a (dummy) media grid is not scaled with the SP size where its companion is: "
        "a grid literal beside a metadata call (or another grid) that multiplies the same entry by `sp_size`, or "
        "an `if sp_enabled:` branch identical to its `else`."
    )
    why = (
        "A dummy vision (or audio) forward on a text-only rank builds a fake input whose rows are this rank's "
        "shard and whose grid describes the gathered sequence: under sequence parallelism one grid axis is "
        "`sp_size` times longer, and the window/rotary metadata derived from it must say the same. A grid left at "
        "the single-rank size beside metadata (or pixels) scaled by `sp_size` makes the dummy ViT pass fail on "
        "shapes or attend over wrong segments on exactly the ranks that had no media, and nothing fails without "
        "SP. Checked per block: three-entry grids (list displays, three-argument calls) that agree entry by "
        "entry except that one multiplies an entry by the SP size and the other does not; and an `if` on the SP "
        "switch whose two branches are the same statements (the SP branch scales nothing)."
    )
    bad = (
        Example(
            """
            import torch


            def dummy_vision(self, sp_on, sp_size, meta_fn):
                if sp_on:
                    pixels = torch.zeros((8, self.row), dtype=self.dtype)
                    grid = torch.tensor([[1, 2, 4]], dtype=torch.int32)
                    meta = meta_fn(1, 2 * sp_size, 4)
                else:
                    pixels = torch.zeros((8, self.row), dtype=self.dtype)
                    grid = torch.tensor([[1, 2, 4]], dtype=torch.int32)
                    meta = meta_fn(1, 2, 4)
                return self(pixels, grid_thw=grid, metadata=meta)
            """,
            path="veomni/models/toy_vl/modeling_toy_vl.py",
            title="the SP grid left unscaled next to scaled metadata",
        ),
        Example(
            """
            def dummy_shape(self, state):
                base = 2 * self.merge
                if state.sp_enabled:
                    h = base
                else:
                    h = base
                return 1, h, 2 * self.merge
            """,
            path="veomni/models/toy_vl/modeling_toy_vl.py",
            title="an SP branch identical to the non-SP one",
        ),
    )
    good = (
        Example(
            """
            import torch


            def dummy_vision(self, sp_on, sp_size, meta_fn):
                if sp_on:
                    pixels = torch.zeros((8, self.row), dtype=self.dtype)
                    grid = torch.tensor([[1, 2 * sp_size, 4]], dtype=torch.int32)
                    meta = meta_fn(1, 2 * sp_size, 4)
                else:
                    pixels = torch.zeros((8, self.row), dtype=self.dtype)
                    grid = torch.tensor([[1, 2, 4]], dtype=torch.int32)
                    meta = meta_fn(1, 2, 4)
                return self(pixels, grid_thw=grid, metadata=meta)
            """,
            path="veomni/models/toy_vl/modeling_toy_vl.py",
        ),
    )
    fix_safety = "No fix: which side is meant is the author's call."
    requires = (("sp_enabled", "sp_size", "ulysses_enabled"), ("grid", "dummy", "h_base", "sp_size"))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        # what `_check` reports reads the function's subtree alone (messages name no line): shared with copies
        self.report_shared(self._check, node)

    def _check(self, node: ast.AST) -> None:
        for sub in nodes_of(node, ast.If):
            if (
                isinstance(sub, ast.If)
                and sub.orelse
                and len(sub.body) == len(sub.orelse)
                and _sp_switch(sub.test)
            ):
                if [ast.dump(s) for s in sub.body] == [ast.dump(s) for s in sub.orelse]:
                    self.report(
                        sub,
                        f"both branches of `if {ast.unparse(sub.test)}:` are the same statements: the "
                        "sequence-parallel branch scales nothing (a grid or shape the SP branch should multiply by "
                        "the SP size)",
                    )
        if not any(
            (isinstance(n, ast.Name) and _SP_SIZE.search(n.id))
            or (isinstance(n, ast.Attribute) and _SP_SIZE.search(n.attr))
            for n in nodes_of(node, ast.Name, ast.Attribute)
        ):
            return  # nothing here is scaled by the SP size
        for block in _blocks(node):
            simple = [
                s
                for s in block
                if not isinstance(s, (ast.If, ast.For, ast.While, ast.With, ast.Try, *_FUNCS))
            ]
            found = [t for stmt in simple for t in _triples(stmt)]
            scaled = [(n, e) for n, e in found if any(s for _, s in e)]
            if not scaled:
                continue
            for grid, entries in found:
                if any(s for _, s in entries):
                    continue
                for other, other_entries in scaled:
                    if [b for b, _ in entries] == [b for b, _ in other_entries]:
                        self.report(
                            grid,
                            f"`{ast.unparse(grid)}` keeps the single-rank size where `{ast.unparse(other)}` in the "
                            "same block scales the same entry by the SP size: under sequence parallelism the two "
                            "describe different grids",
                        )
                        break
