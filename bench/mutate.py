"""Mutation grading over whole real trees: which generic faults, planted anywhere in a real VeOmni tree, does
npu-lint notice?

Held-out rounds are small (about 70 bugs) and each samples new code, so rule work tuned on earlier cases does
not show whether a check transfers. This runner plants *generic* mutants, chosen by no one: every site of a
fixed operator set (a keyword dropped, two arguments swapped, an axis or constant changed, an upcast or a
device argument removed, an operand dropped, a comparison or condition negated, a reduction swapped, a
parameter or ``self`` attribute read in place of its twin, a statement removed) in every function of the
tree's ``veomni/`` package, sampled per (operator, region) with a fixed seed. A mutant is *killed* when the
mutated file has a finding of a code more often than before (``lenient``), and *strictly* when such a new
finding lies within 3 lines of the edited lines. Many mutants are harmless or undecidable statically; the
figure is a kill rate to compare between two versions of the rules on the same mutants, not a recall.

Each tree is copied once; mutants are written to the copy one at a time and linted in this process, as the
language server does (per-file rules with the tree's project index, plus the whole-tree rules' findings for
that file); the project index is loaded again after a mutant of a file it reads (spec, generated file,
``__init__``, ops config). Nothing in ``../shared`` is written.

Usage: python bench/mutate.py [--tree veomni-main] [--per 6] [--seed 15] [--region ops] [--op kwarg-drop]
                              [--json FILE] [--survivors FILE] [--limit N]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import sys
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
CORPORA = HERE.parent.parent / "shared" / "corpora"
TREES = ("veomni-main", "veomni-op-5d90dd16")
MARGIN = 3

TWINS = (
    ("image", "video"),
    ("q", "k"),
    ("query", "key"),
    ("height", "width"),
    ("input", "output"),
    ("start", "end"),
    ("cos", "sin"),
    ("src", "dst"),
    ("gate", "up"),
    ("pos", "neg"),
    ("row", "col"),
    ("weight", "bias"),
)
DTYPES = {
    "float32": "bfloat16",
    "float": "half",
    "bfloat16": "float32",
    "float16": "float32",
    "half": "float",
}
REDUCE = {"mean": "sum", "sum": "mean", "max": "min", "min": "max", "amax": "amin", "amin": "amax"}
UPCAST_METHODS = {"float", "double"}
# calls whose arguments say nothing about a migration (built-ins, logging, string and dict plumbing): their
# argument mutants would only measure whether npu-lint is a type checker
PLUMBING = {
    "isinstance",
    "issubclass",
    "getattr",
    "hasattr",
    "setattr",
    "range",
    "print",
    "len",
    "str",
    "int",
    "float",
    "bool",
    "format",
    "join",
    "startswith",
    "endswith",
    "sub",
    "match",
    "search",
    "info",
    "warning",
    "debug",
    "error",
    "warn",
    "exception",
    "info_rank0",
    "warning_rank0",
    "warning_once",
    "log",
    "get",
    "pop",
    "setdefault",
    "append",
    "extend",
    "update",
    "items",
    "keys",
    "values",
    "split",
    "rsplit",
    "replace",
    "strip",
    "open",
    "enumerate",
    "zip",
    "sorted",
    "min",
    "max",
    "any",
    "all",
    "dict",
    "list",
    "tuple",
    "set",
    "register",
    "assert_close",
    "field",
    "dataclass",
    "partial",
    "wraps",
}
BUILTIN_NAMED_METHODS = {
    "float",
    "int",
    "bool",
    "min",
    "max",
    "sum",
    "any",
    "all",
}  # tensor methods, not plumbing
CONSTRUCTORS = {
    "zeros", "ones", "empty", "full", "arange", "tensor", "randn", "rand", "randint", "zeros_like", "ones_like",
    "empty_like", "full_like", "linspace", "eye", "as_tensor",
}  # fmt: skip


@dataclass
class Mutant:
    tree: str
    file: str
    region: str
    op: str
    line: int
    end_line: int
    old: str
    new: str
    killed: bool = False
    strict: bool = False
    codes: list[str] = field(default_factory=list)
    col: int = -1  # column of ``old`` on ``line`` (-1: the first occurrence at or after the line's start)


def region_of(rel: str) -> str:
    parts = Path(rel).parts
    name = parts[-1]
    if "generated" in parts:
        return "generated"
    if name.endswith("_patch_gen_config.py"):
        return "spec"
    if "ops" in parts:
        return "ops"
    if "models" in parts or "models_kernel" in parts:
        return "registration" if name == "__init__.py" else "model"
    if "data" in parts:
        return "data"
    if "distributed" in parts:
        return "distributed"
    return "other"


def _segment(lines: list[str], node: ast.AST) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]


def _replace(text_lines: list[str], span: tuple[int, int, int, int], new: str) -> tuple[str, str]:
    """The statement-free replacement of one source span: (old span text, new span text)."""
    l1, c1, l2, c2 = span
    if l1 == l2:
        old = text_lines[l1 - 1][c1:c2]
    else:
        old = text_lines[l1 - 1][c1:] + "".join(text_lines[l1 : l2 - 1]) + text_lines[l2 - 1][:c2]
    return old, new


def _unparse_call(call: ast.Call, args: list[ast.expr], keywords: list[ast.keyword]) -> str:
    return ast.unparse(ast.Call(func=call.func, args=args, keywords=keywords))


def _last(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _twin(name: str) -> list[str]:
    out = []
    low = name.lower()
    for a, b in TWINS:
        for x, y in ((a, b), (b, a)):
            for token in low.replace("-", "_").split("_"):
                if token == x:
                    out.append("_".join(y if t == x else t for t in low.split("_")))
    return out


def sites(tree: ast.Module) -> list[tuple[str, ast.AST, str]]:
    """Every (operator, node, replacement text) of the module's functions; the node is the replaced span."""
    out: list[tuple[str, ast.AST, str]] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or _device_kernel(fn):
            continue
        params = [
            a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs) if a.arg != "self"
        ]
        self_attrs = sorted(
            {
                n.attr
                for n in ast.walk(fn)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
        )
        for node in ast.walk(fn):
            if node is not fn and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            out.extend(_node_sites(node, params, self_attrs))
        for stmt in fn.body if len(fn.body) > 1 else ():
            out.extend(_stmt_drop(stmt))
    return out


def _device_kernel(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A Triton/TileLang kernel body (``@triton.jit``, ``@tilelang.jit``, ``T.prim_func``, autotuned): GPU code
    an NPU port replaces rather than edits."""
    for dec in fn.decorator_list:
        text = ast.unparse(dec)
        if any(word in text for word in ("jit", "prim_func", "autotune", "heuristics")):
            return True
    return False


def _stmt_drop(stmt: ast.stmt) -> list[tuple[str, ast.AST, str]]:
    out = []
    for s in [stmt, *(c for c in ast.walk(stmt) if isinstance(c, ast.stmt) and c is not stmt)]:
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or (
            isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
        ):
            out.append(("stmt-drop", s, "pass"))
    return out


def _node_sites(node: ast.AST, params: list[str], self_attrs: list[str]) -> list[tuple[str, ast.AST, str]]:
    out: list[tuple[str, ast.AST, str]] = []
    if isinstance(node, ast.Call):
        plumbing = _last(node.func) in PLUMBING and not (
            isinstance(node.func, ast.Attribute) and node.func.attr in BUILTIN_NAMED_METHODS
        )
        pos = [a for a in node.args if not isinstance(a, ast.Starred)]
        named = [k for k in node.keywords if k.arg is not None and not plumbing]
        for k in named:
            op = "device-drop" if k.arg == "device" else "dtype-drop" if k.arg == "dtype" else "kwarg-drop"
            out.append((op, node, _unparse_call(node, node.args, [x for x in node.keywords if x is not k])))
            if (
                isinstance(k.value, ast.Constant)
                and isinstance(k.value.value, str)
                and k.value.value in REDUCE
            ):
                swapped = ast.keyword(arg=k.arg, value=ast.Constant(REDUCE[k.value.value]))
                kws = [swapped if x is k else x for x in node.keywords]
                out.append(("reduce-swap", node, _unparse_call(node, node.args, kws)))
        if len(pos) == len(node.args) and len(pos) >= 2 and not plumbing:
            for i in range(len(pos) - 1):
                if ast.dump(pos[i]) != ast.dump(pos[i + 1]):
                    args = list(pos)
                    args[i], args[i + 1] = args[i + 1], args[i]
                    out.append(("arg-swap", node, _unparse_call(node, args, node.keywords)))
                    break
            out.append(("arg-drop", node, _unparse_call(node, pos[:-1], node.keywords)))
        name = _last(node.func)
        if isinstance(node.func, ast.Attribute):
            recv = ast.unparse(node.func.value)
            if name in UPCAST_METHODS and not node.args and not node.keywords:
                out.append(("upcast-drop", node, recv))
            if name in {"to", "type_as", "type"} and len(node.args) + len(node.keywords) == 1:
                arg = (node.args or [k.value for k in node.keywords])[0]
                text = ast.unparse(arg)
                op = (
                    "device-drop"
                    if "device" in text
                    else "upcast-drop"
                    if name != "to" or "float" in text
                    else ""
                )
                if op:
                    out.append((op, node, recv))
            if name in REDUCE:
                out.append(("reduce-swap", node, ast.unparse(ast.Call(
                    func=ast.Attribute(value=node.func.value, attr=REDUCE[name]), args=node.args,
                    keywords=node.keywords,
                ))))  # fmt: skip
        if name in CONSTRUCTORS and not any(k.arg == "device" for k in node.keywords):
            pass  # nothing to drop
    elif (
        isinstance(node, ast.Constant)
        and type(node.value) in (int, float)
        and not isinstance(node.value, bool)
    ):
        v = node.value
        if isinstance(v, int):
            new = v - 1 if v < 0 else v + 1
        else:
            new = v * 10 if v else 1.0
        out.append(("const", node, repr(new) if new >= 0 else f"({new!r})"))
    elif (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        v = node.operand.value
        if type(v) is int:
            out.append(("const", node, "0" if v == 1 else str(-(v - 1)) if v > 1 else "1"))
    elif isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in DTYPES:
            out.append(("dtype-swap", node, f"torch.{DTYPES[node.attr]}"))
        if isinstance(node.value, ast.Name) and node.value.id == "self" and isinstance(node.ctx, ast.Load):
            for twin in _twin(node.attr):
                if twin in self_attrs:
                    out.append(("name-swap", node, f"self.{twin}"))
                    break
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in params:
        for twin in _twin(node.id):
            if twin in params:
                out.append(("name-swap", node, twin))
                break
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        out.append(("operand-drop", node, ast.unparse(node.left)))
        flip = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}[type(node.op)]()
        out.append(("binop-swap", node, ast.unparse(ast.BinOp(left=node.left, op=flip, right=node.right))))
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        neg = {
            ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
            ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
        }[type(node.ops[0])]()  # fmt: skip
        out.append(("cond-negate", node, ast.unparse(ast.Compare(node.left, [neg], node.comparators))))
    elif isinstance(node, (ast.If, ast.While, ast.IfExp)) and not isinstance(node.test, ast.Compare):
        out.append(("cond-negate", node.test, f"not ({ast.unparse(node.test)})"))
    elif isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        out.append(("cond-negate", node, f"({ast.unparse(ast.BoolOp(op=other, values=node.values))})"))
    return out


def half_of(m: Mutant) -> str:
    """``dev`` or ``held``: a fixed split of the sites (by a hash of the mutant), so that rule work can read the
    dev half's survivors and be graded on the held half's, mutants it never saw."""
    key = f"{m.tree}:{m.file}:{m.line}:{m.op}:{m.new}".encode()
    return "dev" if zlib.crc32(key) % 2 == 0 else "held"


def plan(
    root: Path, per: int, seed: int, regions: set[str], ops: set[str], tree_name: str, half: str = ""
) -> list[Mutant]:
    """Mutants of one tree copy: at most ``per`` per (operator, region), drawn with ``seed`` from ``half``
    (``dev``, ``held`` or both)."""
    pools: dict[tuple[str, str], list[Mutant]] = defaultdict(list)
    for path in sorted((root / "veomni").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        region = region_of(rel)
        if regions and region not in regions:
            continue
        text = path.read_text(encoding="utf-8")
        if not text.isascii():
            continue  # column offsets are UTF-8 byte offsets: keep to files where they are characters
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        seen: set[tuple[int, int, int, int, str]] = set()
        for op, node, new in sites(tree):
            if ops and op not in ops:
                continue
            span = _segment(lines, node)
            if (*span, new) in seen:
                continue
            seen.add((*span, new))
            old, new_text = _replace(lines, span, new)
            if old == new_text:
                continue
            m = Mutant(tree_name, rel, region, op, span[0], span[2], old, new_text, col=span[1])
            if not half or half_of(m) == half:
                pools[(op, region)].append(m)
    rng = random.Random(seed)
    chosen: list[Mutant] = []
    for key in sorted(pools):
        pool = pools[key]
        chosen.extend(rng.sample(pool, min(per, len(pool))))
    return chosen


def apply(text: str, m: Mutant) -> str | None:
    lines = text.splitlines(keepends=True)
    start = sum(len(x) for x in lines[: m.line - 1])
    if m.col >= 0:  # the exact span the site was read from (a first textual match may be another token)
        idx = start + m.col
        if text[idx : idx + len(m.old)] != m.old:
            return None
    else:
        idx = text.find(m.old, start)
        if idx < 0 or text.count("\n", 0, idx) + 1 != m.line:
            return None
    out = text[:idx] + m.new + text[idx + len(m.old) :]
    try:
        ast.parse(out)
    except SyntaxError:
        return None
    return out


class Linter:
    """Per-file lint of a tree copy in this process, as the language server lints a saved document."""

    PROJECT_FILES = ("_patch_gen_config.py", "__init__.py")

    def __init__(self, root: Path) -> None:
        from npu_lint.core.config import resolve_settings, selected_codes
        from npu_lint.rules.base import all_rules

        self.root = root
        self.settings = resolve_settings(root)
        known = {code: rule.default_enabled for code, rule in all_rules().items()}
        self.codes = selected_codes(self.settings, known)
        self.project = None
        self.baseline: dict[str, Counter] = {}
        self.base_lines: dict[str, list[tuple[str, int]]] = {}
        self._tick = 0

    def _project(self, path: str, fresh: bool) -> object:
        from npu_lint.veomni.project import load_project

        if self.project is None or fresh:
            self.project = load_project([path], self.settings)
        return self.project

    def lint(self, rel: str, fresh: bool) -> list[tuple[str, int]]:
        from npu_lint.engine import lint_source, project_diagnostics
        from npu_lint.engine.lint import read_source

        path = str(self.root / rel)
        project = self._project(path, fresh)
        src = read_source(path)
        diags = lint_source(src, self.codes, self.settings, project)
        if project is not None:
            diags.extend(
                d
                for d in project_diagnostics(project, [path], self.codes, self.settings, sources={path: src})
                if os.path.abspath(d.path) == os.path.abspath(path)
            )
        return [(d.code, d.line) for d in diags]

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.write_text(text, encoding="utf-8")
        self._tick += 1
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + self._tick * 1000))

    def judge(self, m: Mutant, original: str) -> None:
        mutated = apply(original, m)
        if mutated is None:
            raise ValueError("does not apply")
        fresh = m.file.endswith(self.PROJECT_FILES) or m.region in (
            "generated",
            "spec",
            "ops",
            "registration",
        )
        if m.file not in self.baseline:
            found = self.lint(m.file, fresh=self.project is None)
            self.baseline[m.file] = Counter(code for code, _ in found)
            self.base_lines[m.file] = found
        self.write(m.file, mutated)
        try:
            after = self.lint(m.file, fresh)
        finally:
            self.write(m.file, original)
            if fresh:
                self.project = None
        before = self.baseline[m.file]
        now = Counter(code for code, _ in after)
        grown = {code for code in now if now[code] > before[code]}
        m.killed = bool(grown)
        m.codes = sorted(grown)
        first, last = m.line, m.line + m.new.count("\n")
        near_before = Counter(
            c for c, ln in self.base_lines[m.file] if first - MARGIN <= ln <= m.end_line + MARGIN
        )
        near_after = Counter(c for c, ln in after if first - MARGIN <= ln <= last + MARGIN)
        m.strict = any(near_after[c] > near_before[c] for c in near_after)


def summarise(mutants: list[Mutant]) -> str:
    rows: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for m in mutants:
        for key in ((m.op, "ALL"), ("ALL", m.region), ("ALL", "ALL")):
            r = rows[key]
            r[0] += 1
            r[1] += m.killed
            r[2] += m.strict
    out = ["| operator | region | mutants | killed | at the lines |", "|---|---|---|---|---|"]
    for (op, region), (n, k, s) in sorted(rows.items(), key=lambda kv: (kv[0][0] == "ALL", kv[0])):
        out.append(f"| {op} | {region} | {n} | {k} ({k / n:.0%}) | {s} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", choices=TREES)
    ap.add_argument("--per", type=int, default=6, help="mutants per (operator, region)")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--region", action="append", default=[])
    ap.add_argument("--op", action="append", default=[])
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument(
        "--half", choices=("dev", "held"), default="", help="one half of the sites (default both)"
    )
    ap.add_argument("--json", help="every mutant and its verdict")
    ap.add_argument("--survivors", help="the mutants nothing noticed, as text")
    args = ap.parse_args(argv)
    mutants: list[Mutant] = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="npu-lint-mutate-") as tmp:
        for tree_name in args.tree or TREES:
            root = Path(tmp) / tree_name
            shutil.copytree(CORPORA / tree_name, root, symlinks=True)
            chosen = plan(root, args.per, args.seed, set(args.region), set(args.op), tree_name, args.half)
            if args.limit:
                chosen = chosen[: args.limit]
            linter = Linter(root)
            for m in chosen:
                original = (root / m.file).read_text(encoding="utf-8")
                try:
                    linter.judge(m, original)
                except ValueError:
                    continue
                mutants.append(m)
    took = time.perf_counter() - start
    print(summarise(mutants))
    print(f"\n{len(mutants)} mutants in {took:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(m) for m in mutants], indent=1), encoding="utf-8")
    if args.survivors:
        with open(args.survivors, "w", encoding="utf-8") as out:
            for m in mutants:
                if not m.killed:
                    out.write(f"## {m.tree} {m.file}:{m.line} [{m.region}] {m.op}\n- {m.old}\n+ {m.new}\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
