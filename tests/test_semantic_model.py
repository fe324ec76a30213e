"""The shared per-run work (issue 19): walks listed once per file, suppressions tokenized only when they may
apply, upstream config fields read once."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pytest
from corpus import VEOMNI_MAIN, shared_tree

from npu_lint.core import astutil
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.source import SourceFile
from npu_lint.engine import suppress

CODE = """\
import torch


def f(x):
    y = [a + 1 for a in x]  # noqa: E501
    return torch.zeros(3).cuda()


class C:
    def g(self):
        return {k: v for k, v in self.items()}
"""


def test_walk_keeps_ast_walk_order_and_is_listed_once_inside_a_memo_scope() -> None:
    tree = ast.parse(CODE)
    func = tree.body[1]
    assert astutil.walk(func) == list(ast.walk(func))
    assert astutil.walk(func) is not astutil.walk(func)  # no scope: a fresh list each time
    with astutil.walk_memo():
        first = astutil.walk(func)
        assert first == list(ast.walk(func))
        assert astutil.walk(func) is first  # listed once
        assert astutil.walk(tree) == list(ast.walk(tree))
        with astutil.walk_memo():  # a nested scope starts empty
            assert astutil.walk(func) is not first
    assert astutil.walk(func) is not first  # the scope's lists are dropped with it


def test_walk_memo_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(astutil, "_WALK_MEMO_MAX", 3)
    nodes = list(ast.walk(ast.parse(CODE)))[:10]
    with astutil.walk_memo():
        for node in nodes:
            astutil.walk(node)
            assert len(astutil._WALK_MEMO[-1]) <= 3


def test_helper_memos_are_owned_by_the_file_scope() -> None:
    """What the rules' helpers remember about a file's nodes lives in the file's scope: once it ends, nothing of
    the engine holds the tree (module-level memos kept the last files' trees alive for the whole process)."""
    import gc
    import weakref

    from npu_lint.rules.device._shared import used_as_tensor
    from npu_lint.rules.multimodal._shared import name_nodes
    from npu_lint.rules.semantics._shared import functions_of, loss_calls

    tree = ast.parse("def f(x, labels):\n    y = x.shape\n    return self.loss_function(x, labels)\n")
    ref = weakref.ref(tree)
    with astutil.walk_memo():
        (func,) = functions_of(tree)
        assert functions_of(tree) is functions_of(tree)  # remembered within the scope
        assert name_nodes(func) is name_nodes(func)
        assert len(loss_calls(func)) == 1 and loss_calls(func) is loss_calls(func)
        assert used_as_tensor(func, "x") and not used_as_tensor(func, "labels")
        assert astutil.scoped_memo("semantics.functions")
    assert astutil.scoped_memo("semantics.functions") == {}  # no scope: nothing remembered
    assert functions_of(tree) is not functions_of(tree)
    del tree, func
    gc.collect()
    assert ref() is None


def _diag(line: int) -> Diagnostic:
    return Diagnostic("NPU101", "x", "m", "m.py", line, 0, line, 1)


def test_suppressions_tokenize_only_when_a_directive_may_apply(monkeypatch) -> None:
    calls = []
    real = suppress.comments

    def counting(text: str, spec: bool = False) -> dict[int, str] | None:
        calls.append(spec)
        return real(text, spec)

    monkeypatch.setattr(suppress, "comments", counting)
    src = SourceFile.from_text("m.py", CODE)
    # the finding's line holds no "noqa": kept, and the file is not tokenized (another line's noqa is irrelevant)
    assert suppress.apply_suppressions(src, [_diag(6)], set()) == [_diag(6)]
    assert calls == []
    # on the noqa line (other code): kept, after tokenizing; a bare noqa on the line suppresses
    assert suppress.apply_suppressions(src, [_diag(5)], set()) == [_diag(5)]
    assert calls == [False]
    bare = SourceFile.from_text("m.py", CODE.replace(": E501", ""))
    assert suppress.apply_suppressions(bare, [_diag(5), _diag(6)], set()) == [_diag(6)]
    # the directive inside a string on the finding's line is not a comment: kept
    in_string = SourceFile.from_text(
        "m.py", CODE.replace("# noqa: E501", "").replace("(3)", "(len('# no' 'qa'))").replace("' '", "")
    )
    assert suppress.apply_suppressions(in_string, [_diag(6)], set()) == [_diag(6)]
    # a file-level directive is honoured although no finding's line says noqa
    whole = SourceFile.from_text("m.py", "# npu-lint: " + "noqa\n" + CODE)
    assert suppress.apply_suppressions(whole, [_diag(7)], set()) == []


CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


def test_generated_banner_reads_what_parse_generated_reads_without_parsing(monkeypatch) -> None:
    from npu_lint.veomni import patchgen

    files = sorted((CORPORA / "veomni-main" / "veomni" / "models").rglob("generated/*.py"))
    assert files
    parses: list[tuple] = []
    for path in files:
        text = path.read_text()
        want = patchgen.parse_generated(str(path), text[:4096], full=False)
        monkeypatch.setattr(patchgen, "_parse", lambda *a: parses.append(a))
        got = patchgen.generated_banner(str(path), text)
        monkeypatch.undo()
        assert parses == []
        assert (got.source_module, got.based_on, got.based_on_line, got.banner_patches) == (
            want.source_module,
            want.based_on,
            want.based_on_line,
            want.banner_patches,
        )


def test_section_chunks_get_the_line_numbers_increment_lineno_gives() -> None:
    from npu_lint.veomni import patchgen

    mine, theirs = ast.parse(CODE), ast.parse(CODE)
    patchgen._shift_lines(mine, 41)
    ast.increment_lineno(theirs, 41)
    assert ast.dump(mine, include_attributes=True) == ast.dump(theirs, include_attributes=True)


def test_a_run_of_files_pauses_the_collector_and_restores_it(tmp_path, monkeypatch) -> None:
    import gc

    from npu_lint.core.config import Settings
    from npu_lint.engine import pool

    for i in range(5):
        (tmp_path / f"m{i}.py").write_text(f"import torch\nx{i} = torch.zeros(3).cuda()\n")
    collected = []
    monkeypatch.setattr(pool, "COLLECT_OBJECTS", 1)
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(gc.isenabled()) or 0)
    files = sorted(str(p) for p in tmp_path.glob("*.py"))
    assert gc.isenabled()
    results = pool.lint_paths(files, ["NPU101"], Settings(root=str(tmp_path)), jobs=1)
    assert [len(r.diagnostics) for r in results] == [1] * 5
    assert collected == [False] * 5  # after every file (1 object), with the automatic collector off meanwhile
    assert gc.isenabled() and not gc.get_freeze_count()


def test_functions_without_lambdas_follow_statement_lists_only() -> None:
    from npu_lint.rules.base import _functions

    code = CODE + (
        "try:\n    def h(a=1): pass\nexcept E:\n    def i(b=2): pass\nelse:\n    pass\nfinally:\n"
        "    async def j(c=3): pass\nmatch x:\n    case 1:\n        def k(d=4): pass\n"
        "with m:\n    while n:\n        for o in p:\n            if q:\n                def r(e=5): pass\n"
    )
    tree = ast.parse(code)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    want = sorted(n.lineno for n in ast.walk(tree) if isinstance(n, kinds))
    assert sorted(n.lineno for n in _functions(tree, False)) == want
    assert len(want) == 7


def test_the_ops_config_fields_are_kept_in_the_index(tmp_path: Path, monkeypatch) -> None:
    """``profile.read_config_fields`` parses the tree's ops config and attention registrations on every run;
    the index keeps its result keyed by the files' stat keys (a warm run reads none of them)."""
    import shutil
    import time

    from npu_lint.engine import Cache
    from npu_lint.veomni import profile, scanstore

    tree = tmp_path / "tree"
    shutil.copytree(CORPORA / "veomni-main" / "veomni", tree / "veomni")
    time.sleep(0.2)
    monkeypatch.setattr(scanstore, "RACY_NS", 10**8)
    reads: list[Path] = []
    real = profile.read_regular
    monkeypatch.setattr(
        profile, "read_regular", lambda path, *a, **k: (reads.append(path), real(path, *a, **k))[1]
    )

    def read() -> profile.ConfigFields:
        cache = Cache(str(tmp_path / "cache"), "fp")
        scanstore.use_store(cache)
        try:
            return profile.read_config_fields(tree)
        finally:
            scanstore.use_store(None)
            cache.flush()

    plain = profile.read_config_fields(tree)
    assert plain[0] and plain[1]  # the tree has an ops config
    reads.clear()
    assert read() == plain and reads
    reads.clear()
    assert read() == plain and reads == []  # from the index
    config = tree.joinpath(*plain[1].split(".")).with_suffix(".py")
    if not config.exists():
        config = tree.joinpath(*plain[1].split("."), "__init__.py")
    text = config.read_text()
    config.write_text(text.replace("_implementation:", "_implementation :", 1))  # same fields, new stat
    time.sleep(0.2)
    assert read() == plain and reads


def test_the_program_freezes_what_it_kept_before_exiting_but_a_caller_keeps_its_collector(
    tmp_path: Path, monkeypatch
) -> None:
    import gc
    import sys

    from npu_lint import cli

    (tmp_path / "m.py").write_text("x = 1\n")
    gc.unfreeze()
    assert cli.main(["check", "--no-cache", "-q", str(tmp_path)]) == 0
    assert not gc.get_freeze_count()  # an in-process caller (tests, the audit) keeps its objects collectable
    monkeypatch.setattr(sys, "argv", ["npu-lint", "check", "--no-cache", "-q", str(tmp_path)])
    try:
        assert cli.main() == 0
        assert gc.get_freeze_count()  # the program: the interpreter's final collection is skipped
    finally:
        gc.unfreeze()


PACKAGES = (
    "qwen3",
    "qwen3_moe",
    "deepseek_v3",
)  # veomni-main packages with GPU + NPU specs and generated files

DRIVER = """\
import ast, os, sys
from npu_lint.engine import pool
from npu_lint.veomni import patchgen
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
real_parse, real_sections = ast.parse, patchgen._section_nodes
def counting_parse(source, filename="<unknown>", *args, **kwargs):
    os.write(fd, f"{filename}\\n".encode())
    return real_parse(source, filename, *args, **kwargs)
def counting_sections(*args, **kwargs):
    os.write(fd, b"<sections parsed apart>\\n")
    return real_sections(*args, **kwargs)
ast.parse, patchgen._section_nodes = counting_parse, counting_sections
pool.POOL_THRESHOLD = 2
from npu_lint import cli
sys.exit(cli.main(["check", "--no-cache", "--exit-zero", "-q", *sys.argv[2:]]))
"""


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_cold_check_parses_each_file_once(tmp_path: Path, jobs: str) -> None:
    """Every linted file is parsed once per run, in whichever process lints it (a pool's worker also runs the
    per-package project rules on the trees it parsed); generated-file sections are located in that tree, never
    parsed apart. Counted across processes (a fresh interpreter; every ``ast.parse`` appends its file name to
    one log)."""
    import os
    import subprocess
    import sys

    root = shared_tree(VEOMNI_MAIN)
    dirs = [root / "veomni" / "models" / "transformers" / name for name in PACKAGES]
    log, driver = tmp_path / "parses.log", tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, str(driver), str(log), "--jobs", jobs, *map(str, dirs)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    # counted by the file, whatever spelling of its path parsed it (a symlinked corpus must not hide a second parse)
    counts = collections.Counter(
        os.path.realpath(line) if line.startswith("/") else line for line in log.read_text().splitlines()
    )
    linted = sorted(os.path.realpath(p) for d in dirs for p in d.rglob("*.py"))
    generated = [p for p in linted if "/generated/" in p and os.path.basename(p).startswith("patched_")]
    specs = [p for p in linted if p.endswith("_patch_gen_config.py")]
    assert len(generated) >= 6 and len(specs) >= 6
    assert {p: counts[p] for p in linted if counts[p] != 1} == {}
    assert counts["<sections parsed apart>"] == 0
    if jobs == "1":  # one process: every file the run reads is parsed once, linted or not (the registry and
        # ops-config scans, the module index, the upstream transformers reads share the one store)
        assert {p: n for p, n in counts.items() if p.startswith("/") and n > 1} == {}


def test_a_rule_whose_text_precheck_fails_is_never_entered(monkeypatch) -> None:
    """``Rule.requires`` is applied by the engine before the walk: the rule is not even instantiated."""
    from npu_lint.engine import check_source
    from npu_lint.rules.base import DEFAULT_EXAMPLE_PATH, REGISTRY, Rule, load_rule_modules

    load_rule_modules()
    cls = REGISTRY["NPU601"]
    assert cls.requires == ("AVG",)
    entered: list[object] = []

    def init(self: Rule, ctx: object) -> None:
        entered.append(ctx)
        Rule.__init__(self, ctx)  # type: ignore[arg-type]

    monkeypatch.setattr(cls, "__init__", init)
    code = "import torch.distributed as dist\n\n\ndef f(x):\n    dist.all_reduce(x, op=dist.ReduceOp.{})\n"
    assert check_source(SourceFile.from_text(DEFAULT_EXAMPLE_PATH, code.format("SUM")), ["NPU601"]) == []
    assert entered == []
    found = check_source(SourceFile.from_text(DEFAULT_EXAMPLE_PATH, code.format("AVG")), ["NPU601"])
    assert len(entered) == 1 and [d.code for d in found] == ["NPU601"]


def test_every_text_precheck_admits_its_rules_bad_examples() -> None:
    """A pre-check may only skip files that cannot hold a finding: each rule's documented findings pass it."""
    from npu_lint.rules.base import REGISTRY, load_rule_modules

    load_rule_modules()
    declared = [cls for cls in REGISTRY.values() if cls.requires]
    assert len(declared) >= 10
    for cls in declared:
        for example in cls.bad:
            assert cls.may_fire(example.source), (cls.code, example.source[:80])
        assert not cls.may_fire(""), cls.code


def test_the_shared_file_store_is_bounded_and_keeps_the_most_recently_used() -> None:
    from npu_lint.core.memo import Bounded

    store: Bounded[str, int] = Bounded(3)
    for i, key in enumerate("abcd"):
        store[key] = i
    assert "a" not in store and len(store) == 3
    assert store.get("b") == 1  # a use: "c" is now the oldest
    store["e"] = 4
    assert "c" not in store and store["b"] == 1 and store.get("zz") is None


def test_the_rule_index_matches_the_imported_rules() -> None:
    """The selection and the project rules' cache key are resolved without importing the rule modules (a warm
    run imports none): the index read from the modules' names and text must be what importing them registers."""
    from npu_lint.rules.base import PROJECT_REGISTRY, all_rules
    from npu_lint.rules.index import known_codes, project_codes, rule_index

    imported = {code: (rule.default_enabled, code in PROJECT_REGISTRY) for code, rule in all_rules().items()}
    assert rule_index() == imported
    assert known_codes() == {code: on for code, (on, _) in imported.items()}
    assert project_codes(["NPU506", "NPU101", "NPU501"]) == ["NPU506", "NPU501"]


def test_a_warm_check_imports_no_rule_module(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    root = shared_tree(VEOMNI_MAIN)
    target = str(root / "veomni" / "models" / "transformers" / "qwen3")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [
        sys.executable,
        "-m",
        "npu_lint",
        "check",
        "-q",
        "--exit-zero",
        "--cache-dir",
        str(tmp_path),
        target,
    ]
    assert subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode == 0  # fills the cache
    probe = (
        "import sys\nfrom npu_lint import cli\n"
        f"try:\n    cli.main({cmd[3:]!r})\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('npu_lint.rules.') and '.npu' in m))\n"
        # nor the file pass and what it imports (engine.pool builds cache hits from engine.result alone)
        "print(sorted(m for m in sys.modules if m in {'npu_lint.engine.lint', 'npu_lint.engine.walk',\n"
        "    'npu_lint.rules.base', 'npu_lint.engine.guard', 'npu_lint.engine.adopt', 'npu_lint.veomni.norms'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600)
    assert proc.stdout.strip().splitlines()[-2:] == ["[]", "[]"], proc.stderr


def test_own_nodes_are_a_functions_nodes_outside_nested_scopes_in_stack_order() -> None:
    from npu_lint.core.astutil import own_nodes, walk_memo

    def reference(func: ast.AST) -> list[ast.AST]:
        out, stack = [], list(ast.iter_child_nodes(func))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            out.append(node)
            stack.extend(ast.iter_child_nodes(node))
        return out

    code = (
        "def f(a, *, b=1, c):\n    x = {**a, 'k': lambda y: y + b}\n    class C:\n        z = 1\n"
        "    def g(q):\n        return q\n    global G\n    return [i for i in a if i], f'{x!r:>{c}}'\n"
    )
    tree = ast.parse(code)
    func = tree.body[0]
    with walk_memo():
        mine = own_nodes(func)
        assert own_nodes(func) is mine  # remembered within the scope
        assert [id(n) for n in mine] == [id(n) for n in reference(func)]
        assert not any(isinstance(n, (ast.Lambda, ast.ClassDef)) for n in mine)
        assert any(isinstance(n, ast.Dict) for n in mine) and len(mine) > 30


def _corpus_trees() -> list[ast.Module]:
    files = sorted((CORPORA / "veomni-main" / "veomni" / "models").rglob("*.py"))
    assert len(files) > 100
    return [ast.parse(f.read_text(encoding="utf-8")) for f in files[::4]]


def test_child_nodes_are_iter_child_nodes() -> None:
    from npu_lint.core.astutil import child_nodes

    for tree in _corpus_trees():
        for node in ast.walk(tree):
            assert [id(n) for n in child_nodes(node)] == [id(n) for n in ast.iter_child_nodes(node)]


def test_nodes_of_is_the_isinstance_filter_of_walk_in_walk_order() -> None:
    from npu_lint.core.astutil import nodes_of, walk, walk_memo

    queries = [
        (ast.Call,),
        (ast.FunctionDef, ast.AsyncFunctionDef),
        (ast.Name, ast.Attribute),
        (ast.ClassDef,),
        (ast.Dict,),
        (ast.Assign,),
    ]
    trees = _corpus_trees()
    with walk_memo():
        for tree in trees:
            for types in queries:
                mine = nodes_of(tree, *types)
                assert [id(n) for n in mine] == [id(n) for n in walk(tree) if isinstance(n, types)]
                assert nodes_of(tree, *types) is mine or not mine  # indexed once per scope
    tree = trees[0]
    assert nodes_of(tree, ast.Call) == [
        n for n in ast.walk(tree) if isinstance(n, ast.Call)
    ]  # outside a scope


def test_the_rmsnorm_rules_find_every_class_in_walk_order_through_statement_lists() -> None:
    from npu_lint.rules.semantics._shared import _classes

    code = (
        "class A:\n    class B: pass\n"
        "def f():\n    class C: pass\n    try:\n        pass\n    except E:\n        class D: pass\n"
        "    else:\n        class F: pass\n"
        "match x:\n    case 1:\n        class G: pass\n"
        "if y:\n    class H: pass\nelse:\n    class I: pass\n"
    )
    for tree in [ast.parse(code), *_corpus_trees()]:
        assert [id(c) for c in _classes(tree)] == [
            id(n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
        ]


def test_functions_of_keeps_the_functions_whose_lines_hold_a_word() -> None:
    import re

    from npu_lint.core.astutil import walk_memo
    from npu_lint.rules.semantics._shared import functions_of

    files = sorted((CORPORA / "veomni-main" / "veomni" / "models").rglob("*.py"))[::3]
    for path in files:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        lines = text.split("\n")
        for words in (("loss",), ("1:]",), ("None", "aux", "balanc"), ("pad(", "+="), ("zz_absent_word",)):
            with walk_memo():
                mine = functions_of(tree, text, *words)
                every = functions_of(tree)
            pattern = re.compile("|".join(re.escape(w) for w in words))
            marked = {i + 1 for i, line in enumerate(lines) if pattern.search(line)}
            want = [f for f in every if any(f.lineno <= n <= f.end_lineno for n in marked)]
            assert [id(f) for f in mine] == [id(f) for f in want], (path, words)
