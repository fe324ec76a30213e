"""Command line: ``npu-lint [check] [PATH ...]``, ``npu-lint rule``, ``npu-lint audit``, ``npu-lint server``.

Flags follow ruff's conventions. Exit codes: 0 nothing to report, 1 diagnostics remain, 2 usage /
configuration / internal error (one line on stderr; a traceback only with ``--verbose``).
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npu_lint import __version__

SUBCOMMANDS = ("check", "rule", "audit", "server", "verify", "migrate")
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault(
            "allow_abbrev", False
        )  # `--fi` is not `--fix` (subparsers too: they use this class)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # one line, exit code 2
        raise UsageError(f"{self.prog}: {message}")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="npu-lint", description="Lint and fix VeOmni models for Ascend NPU migration.")
    parser.add_argument("--version", action="version", version=f"npu-lint {__version__}")
    sub = parser.add_subparsers(dest="command")

    check = sub.add_parser("check", help="lint files (the default command)")
    check.add_argument("paths", nargs="*", default=None, metavar="PATH")
    check.add_argument("--fix", action="store_true", help="apply safe fixes")
    check.add_argument("--unsafe-fixes", action="store_true", help="also apply (and count) unsafe fixes")
    check.add_argument("--diff", action="store_true", help="print fixes as a unified diff; write nothing")
    check.add_argument("--show-fixes", action="store_true", help="list the fixes applied")
    check.add_argument(
        "--select", type=_csv, action="extend", help="rule codes or prefixes to enable (replaces the default)"
    )
    check.add_argument(
        "--extend-select", type=_csv, action="extend", help="rule codes or prefixes to enable in addition"
    )
    check.add_argument("--ignore", type=_csv, action="extend", help="rule codes or prefixes to disable")
    from npu_lint.report import FORMATS

    check.add_argument("--output-format", choices=FORMATS, default=None)
    check.add_argument("-o", "--output-file", metavar="FILE")
    check.add_argument("--statistics", action="store_true", help="count diagnostics per rule")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even when diagnostics remain")
    check.add_argument("--no-cache", action="store_true")
    check.add_argument("--cache-dir", metavar="DIR")
    check.add_argument("--config", metavar="FILE", help="use this pyproject.toml / npu-lint.toml")
    check.add_argument(
        "--force-exclude", action="store_true", help="apply excludes to paths named explicitly"
    )
    check.add_argument("--stdin-filename", metavar="PATH", help="lint standard input as if it were PATH")
    check.add_argument(
        "--live-registry",
        action="store_true",
        help="read OP_REGISTRY by importing veomni.ops in a subprocess (runs the tree's code)",
    )
    # adoption on a tree with existing findings (engine/adopt.py)
    check.add_argument(
        "--add-noqa", action="store_true", help="add `# noqa: CODE` to each line with findings"
    )
    check.add_argument(
        "--baseline", metavar="FILE", help="report only findings that are not in this baseline"
    )
    check.add_argument("--write-baseline", metavar="FILE", help="record the current findings as a baseline")
    check.add_argument("-q", "--quiet", action="store_true")
    check.add_argument("-v", "--verbose", action="store_true")
    check.add_argument("--jobs", type=int, default=None, help=argparse.SUPPRESS)

    rule = sub.add_parser("rule", help="print a rule's documentation")
    rule.add_argument("code", nargs="?")
    rule.add_argument("--all", action="store_true")
    rule.add_argument("--output-format", choices=("text", "json"), default="text")

    audit = sub.add_parser("audit", help="migration inventory of a model package")
    audit.add_argument("model_dir")
    audit.add_argument("--format", choices=("markdown", "json"), default="markdown")
    audit.add_argument("--base", metavar="REV")
    audit.add_argument("-o", "--output-file", metavar="FILE")
    audit.add_argument("-v", "--verbose", action="store_true")

    server = sub.add_parser("server", help="run the language server over stdio")
    server.add_argument("-v", "--verbose", action="store_true")
    # listed for --help only: `verify` has its own parser (npu_lint.verify.cli), which `check` never imports
    sub.add_parser("verify", help="run a migrated model for real (see `npu-lint verify --help`)")
    sub.add_parser(
        "migrate", help="run the migration guide for model packages (see `npu-lint migrate --help`)"
    )
    return parser


def _normalise_argv(argv: list[str]) -> list[str]:
    if not argv:
        return ["check"]
    if argv[0] in SUBCOMMANDS or argv[0] in ("-h", "--help", "--version"):
        return argv
    first = argv[0]
    if not first.startswith("-") and not os.path.lexists(first):
        close = difflib.get_close_matches(first, SUBCOMMANDS, n=1, cutoff=0.6)
        if close:  # `npu-lint chek PATH`: a mistyped subcommand, not a path to lint
            raise UsageError(
                f"npu-lint: `{first}` is neither a subcommand nor an existing path; did you mean `{close[0]}`?"
            )
    return ["check", *argv]


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool its reader stopped reading


def main(argv: Sequence[str] | None = None) -> int:
    """Every command; when the reader of stdout goes away (``npu-lint rule NPU702 | head``), exit quietly."""
    try:
        code = _main(argv)
        if sys.stdout is not None and not sys.stdout.closed:  # the server's transport closes it
            sys.stdout.flush()  # a pending buffer meets the closed pipe here, not at interpreter exit
        if argv is None:  # the program's run (not a caller's): the process exits next, and the interpreter's
            import gc  # final collection would traverse every tree the run kept (40 % of a serial check's CPU)

            gc.freeze()
        return code
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_BROKEN_PIPE


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not report the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _tolerant_streams() -> None:
    """A report never fails on a character the terminal's encoding lacks (a Windows code page, `LANG=C` on an old
    Python, PYTHONIOENCODING=ascii): a source line or path with `é` or `✓` is written escaped, as ruff writes it
    whatever the locale, instead of ending the run with an internal error and no report."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError, TypeError):
                pass


def _main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in args_list or "--verbose" in args_list
    _exit_on_sigterm()
    _tolerant_streams()
    if sys.stdout is None and args_list[:1] != ["server"]:  # `>&-`: every command reports on stdout
        print("npu-lint: error: cannot write standard output: it is closed", file=sys.stderr)
        return EXIT_ERROR
    if args_list[:1] == ["verify"]:
        from npu_lint.verify.cli import main as verify_main

        return verify_main(args_list[1:])
    if args_list[:1] == ["migrate"]:
        from npu_lint.migrate.cli import main as migrate_main

        return migrate_main(args_list[1:])
    try:
        args = build_parser().parse_args(_normalise_argv(args_list))
        # `npu-lint WORD ...` where WORD is neither a subcommand nor a path: its error says so (see cmd_check)
        implicit = args.command == "check" and (not args_list or args_list[0] != "check")
        args.implicit_word = args.paths[0] if implicit and args.paths else None
        if args.command == "rule":
            return cmd_rule(args)
        if args.command == "audit":
            from npu_lint.audit import run_audit

            return run_audit(args)
        if args.command == "server":
            try:
                from npu_lint.lsp.server import run_server
            except ImportError as exc:
                raise UsageError(
                    f"npu-lint: the language server needs the `lsp` extra (pip install 'npu-lint[lsp]'): {exc}"
                ) from None
            return run_server(args)
        return cmd_check(args)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # main exits quietly
    except SystemExit as exc:
        if exc.code == 143:  # SIGTERM: temporary files were removed on the way out
            return 143
        raise
    except Exception as exc:
        from npu_lint.core.config import ConfigError

        if isinstance(exc, ConfigError):
            print(f"npu-lint: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:  # a path given: bad input, no bug
            where = _shown(str(exc.filename)[:120] + "...") if exc.filename else "a path"
            print(f"npu-lint: error: {where}: {exc.strerror}", file=sys.stderr)
            return EXIT_ERROR
        if isinstance(exc, OSError) and exc.errno in _OUTPUT_ERRNOS:  # a full disk, /dev/full: not a bug
            where = _shown(str(exc.filename)) if exc.filename else "the output"
            print(f"npu-lint: error: cannot write {where}: {exc.strerror}", file=sys.stderr)
            return EXIT_ERROR
        if verbose:
            import traceback

            traceback.print_exc()
        print(f"npu-lint: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


_OUTPUT_ERRNOS = frozenset(
    getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EIO", "EFBIG") if hasattr(errno, name)
)


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like ^C (``SystemExit(143)``), so a write in progress removes its temporary file."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(143)

    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, stop)
    except (ValueError, OSError):
        pass


# -- rule -------------------------------------------------------------------------------------------


def cmd_rule(args: argparse.Namespace) -> int:
    from npu_lint.docs import precision_text, render_rule
    from npu_lint.rules.base import all_rules

    rules = all_rules()
    if args.all:
        chosen = list(rules.values())
    elif args.code:
        code = args.code.upper()
        if code not in rules:
            raise UsageError(f"npu-lint: unknown rule code `{args.code}`")
        chosen = [rules[code]]
    else:
        raise UsageError("npu-lint rule: give a rule CODE or --all")
    if args.output_format == "json":
        import json

        data = [
            {
                "code": r.code,
                "name": r.name,
                "summary": r.summary,
                "why": r.why,
                "fix_safety": r.fix_safety,
                "default_enabled": r.default_enabled,
                "precision": precision_text(r),
            }
            for r in chosen
        ]
        print(json.dumps(data if args.all else data[0], indent=2))
    else:
        print("\n\n".join(render_rule(r) for r in chosen))
    return EXIT_CLEAN


# -- check ------------------------------------------------------------------------------------------


NO_VEOMNI_NOTE = (
    "note: no veomni package found (none in the tree, none installed): fixes that import VeOmni's device "
    "helpers are not offered"
)
OUTSIDE_VEOMNI_NOTE = (
    "note: {n} file{s} outside any VeOmni tree (no `veomni/` package at or above {where}): their device fixes "
    "use torch's own `torch.accelerator.current_accelerator()` (torch >= 2.6), never a veomni import"
)


def _resolution_notes(project, diagnostics, args, changed=()) -> None:  # noqa: ANN001
    """Which VeOmni tree the run resolved, said once on stderr: the tree's root and generation when fixes are
    applied or shown, else the files outside any tree whose device findings get torch.accelerator fixes."""
    from npu_lint.veomni.patchgen import module_of

    device = [d for d in diagnostics if d.code.startswith("NPU1")]
    outside = sorted(
        {
            path
            for path in [*(d.path for d in device), *changed]
            if module_of(path) is None and (project.root is None or not _is_under(path, project.root))
        }
    )
    fixing = args.fix or args.diff or args.show_fixes
    if project.root is not None and fixing and (diagnostics or changed):
        generation = project.generation.value if project.generation is not None else "unknown generation"
        print(
            f"note: VeOmni tree resolved: {_shown(project.root)} ({generation}); fixes import its own helpers",
            file=sys.stderr,
        )
    if outside:
        from npu_lint.core.diagnostics import display_path

        where = display_path(os.path.dirname(outside[0]) or ".")
        n = len(outside)
        print(_shown(OUTSIDE_VEOMNI_NOTE.format(n=n, s="" if n == 1 else "s", where=where)), file=sys.stderr)
    elif not project.veomni_available and any(module_of(d.path) is None for d in device):
        print(NO_VEOMNI_NOTE, file=sys.stderr)


def _say_edits_outside(changes: list[tuple[str, str, str]], root: str) -> None:
    """``--fix`` follows the path the user names, as ruff does (a named link to a package, a linked file): the
    files it edited whose real path is outside the project root are said in one line."""
    outside = [path for path, old, _new in changes if old and not _is_under(path, root)]
    if not outside:
        return
    first = outside[0]
    real = os.path.realpath(first)
    shown = first if real == os.path.abspath(first) else f"{first} -> {real}"
    more = f" and {len(outside) - 1} more" if len(outside) > 1 else ""
    print(
        _shown(
            f"npu-lint: warning: --fix edited {len(outside)} file{'s' if len(outside) > 1 else ''} whose real "
            f"path is outside the project root {os.path.realpath(root)}: {shown}{more}"
        ),
        file=sys.stderr,
    )


def _is_under(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _known_codes() -> dict[str, bool]:
    from npu_lint.rules.index import known_codes  # without importing the rule modules (a warm run needs none)

    return known_codes()


def cmd_check(args: argparse.Namespace) -> int:
    from npu_lint.core.config import resolve_settings, selected_codes

    paths = args.paths or ["."]
    _check_adoption_flags(args)
    if args.output_file and not os.path.isdir(os.path.dirname(os.path.abspath(args.output_file))):
        parent = os.path.dirname(os.path.abspath(args.output_file))
        raise UsageError(f"npu-lint: cannot write {args.output_file}: no such directory: {parent}")
    anchor = Path(args.stdin_filename) if args.stdin_filename else Path(paths[0])
    if args.stdin_filename and not anchor.is_absolute():
        anchor = Path.cwd() / anchor
    settings = resolve_settings(anchor if anchor.exists() else anchor.parent, args.config)
    _say_config(settings, args)
    if args.cache_dir is not None:
        from npu_lint.core.config import cache_dir_setting

        settings.cache_dir = cache_dir_setting(args.cache_dir, Path.cwd(), "--cache-dir", inside=False)
    if args.select is not None:  # a later --select resets the selection made by the file (ruff's layering)
        settings.select = args.select
        settings.ignore = []
        settings.extend_select = []
    if args.extend_select:
        settings.extend_select = [*settings.extend_select, *args.extend_select]
    if args.ignore:
        settings.ignore = [*settings.ignore, *args.ignore]
    known = _known_codes()
    codes = selected_codes(settings, known)
    fmt = args.output_format or os.environ.get("NPU_LINT_OUTPUT_FORMAT") or "text"
    from npu_lint.report import FORMATS

    if fmt not in FORMATS:  # said before anything is linted or written (--fix), never an internal error after
        raise UsageError(
            f"npu-lint: error: NPU_LINT_OUTPUT_FORMAT={fmt!r} is not an output format; expected one of: "
            + ", ".join(FORMATS)
        )

    from npu_lint.veomni.project import load_project

    cache = None  # opened before the project is loaded: its one index also holds the project scan
    if not args.no_cache and not args.stdin_filename:
        from npu_lint.engine import Cache
        from npu_lint.veomni.scanstore import use_store

        cache_dir = settings.cache_dir or os.path.join(settings.root, ".npu_lint_cache")
        cache = Cache(
            cache_dir, "", follow_symlink=settings.cache_dir is not None, name=settings.fingerprint(codes)
        )
        use_store(cache)
    project = load_project([str(anchor)] if args.stdin_filename else paths, settings)
    if cache is not None:
        use_store(None)
    for note in project.notes:  # said once per run (e.g. target-api forces an API the tree lacks)
        print(f"npu-lint: note: {_shown(note)}", file=sys.stderr)
    if not args.quiet and any(c.startswith(("NPU4", "NPU7")) for c in codes):
        from npu_lint.veomni.upstream import transformers_root

        if (
            transformers_root() is None
        ):  # the semantics rules compare with the upstream model: say they cannot
            print(
                "npu-lint: note: no transformers source found (not installed; or NPU_LINT_TRANSFORMERS_SRC is not a directory): the NPU4xx/NPU7xx "
                "checks that compare a patch with the upstream model are skipped",
                file=sys.stderr,
            )
    if args.live_registry:
        note = (
            project.load_live_registry()
        )  # imports the tree's veomni.ops, in a subprocess, only with this flag
        if note and not args.quiet:
            print(f"npu-lint: {_shown(note)}", file=sys.stderr)

    if args.stdin_filename is not None:
        for ignored in args.paths or ():  # as ruff: said, never silently dropped
            print(f"npu-lint: warning: ignoring {_shown(ignored)}: linting standard input", file=sys.stderr)
        return _check_stdin(args, settings, codes, project, fmt)

    from npu_lint.core.discovery import discover
    from npu_lint.engine import ProjectJob, lint_paths

    found = discover(paths, settings, force_exclude=args.force_exclude)
    _refuse_output_over_input(args, paths, found.files)
    errors = list(found.errors)
    if found.temp_files and (args.fix or args.add_noqa):  # left by an npu-lint killed while writing; a
        # read-only run deletes nothing (a user's file may match the pattern)
        from npu_lint.engine.write import remove_stale_temps

        remove_stale_temps(found.temp_files)
    if not found.files:  # never a silent "All checks passed!" over nothing
        if errors:
            for line in errors:
                print(f"error: {_shown(line)}", file=sys.stderr)
            return EXIT_ERROR
        if args.force_exclude and found.excluded and all(Path(p).is_file() for p in paths):
            if not args.quiet:  # pre-commit passing only excluded files: nothing to do
                print("npu-lint: warning: every file named is excluded (--force-exclude)", file=sys.stderr)
            return EXIT_CLEAN
        where = f" by {settings.config_path}" if settings.config_path and found.excluded else ""
        excluded = f" ({found.excluded} excluded{where})" if found.excluded else ""
        links = f" ({found.symlinks} symbolic links not followed)" if found.symlinks else ""
        raise UsageError(
            f"npu-lint: error: no Python files to lint in {_shown(', '.join(paths))}{excluded}{links}"
        )
    if cache is not None:
        from npu_lint.core.astutil import transformers_dir, transformers_state, transformers_version

        # the upstream source the NPU4xx/NPU7xx rules read is an input too (NPU_LINT_TRANSFORMERS_SRC); a
        # checkout changes its files, not its version: key on their state too (stat only)
        upstream = transformers_state(os.path.basename(p.rstrip(os.sep)) for p in project.model_packages)
        fp = (
            settings.fingerprint(codes)
            + project.fingerprint()
            + f"|{transformers_dir()}|{transformers_version()}|{upstream}"
        )
        cache.bind(fp)
    # the project rules, run in the same pass (in the pool's workers, per package, when they can); their
    # internal errors exit 2, the other findings are kept
    job = ProjectJob(found.files, fix_mode=bool(args.fix or args.diff))
    results = lint_paths(found.files, codes, settings, project, cache, jobs=args.jobs, project_job=job)
    project_diags, project_errors = job.diagnostics, job.errors
    diagnostics = []
    args.digests = {}
    args.settings_root = str(settings.root)
    analysed = 0
    for res in results:
        if res.error:
            errors.append(res.error)
        elif res.not_analysed:
            print(f"npu-lint: warning: {_shown(res.not_analysed)}", file=sys.stderr)
        else:
            analysed += 1
        diagnostics.extend(res.diagnostics)
        args.digests[res.path] = res.digest
    diagnostics.extend(project_diags)
    if not analysed and not errors:  # never "All checks passed!" over nothing (ruff warns; npu-lint exits 2)
        raise UsageError(f"npu-lint: error: none of the {len(results)} files could be analysed")
    for note in cache.notes if cache is not None else []:
        print(f"npu-lint: note: {_shown(note)}", file=sys.stderr)
    errors.extend(project_errors)

    fixed_counts: dict[str, Counter] = {}
    dropped: list[str] = []
    created: list[str] = []
    if args.fix or args.diff:
        from npu_lint.engine import fix_tree, fix_until_stable, staged_passes

        tree_fix = fix_tree(
            diagnostics, codes, settings, project, unsafe=args.unsafe_fixes, write=not args.diff
        )
        again = {"unsafe": args.unsafe_fixes, "jobs": args.jobs, "force_exclude": args.force_exclude}
        if not args.diff:  # a project fix can enable another (a created NPU spec gets its reuses): run again
            tree_fix = fix_until_stable(tree_fix, paths, settings, codes, **again)
        else:  # the diff shows what --fix writes: the further passes run on a private copy of the tree
            tree_fix.changes, complete = staged_passes(tree_fix, paths, settings, codes, project, **again)
            if not complete:
                print(
                    "npu-lint: note: --diff shows one fix pass; --fix repeats passes while fixes enable others "
                    "and may change more",
                    file=sys.stderr,
                )
        diagnostics, fixed_counts, dropped = tree_fix.remaining, tree_fix.fixed_counts, tree_fix.dropped
        errors.extend(tree_fix.errors)  # one file's failure is reported; the others were fixed
        created = tree_fix.created
        if not args.diff:
            _say_edits_outside(tree_fix.changes, str(settings.root))
        args.changed_paths = [path for path, _old, _new in tree_fix.changes]
        args.edited_specs = sorted(
            path for path, old, _new in tree_fix.changes if old and path.endswith("_patch_gen_config.py")
        )
        diff_text = "".join(_diff(old, new, path) for path, old, new in tree_fix.changes)
        if args.diff:
            if (
                fmt != "text" and args.output_format
            ):  # the diff is the output: -o gets it, whatever the format
                print(
                    f"npu-lint: warning: --diff prints a unified diff; --output-format {fmt} is not used",
                    file=sys.stderr,
                )
            _emit(diff_text, args.output_file)
            from npu_lint.engine import build_deferred_fixes

            if not args.quiet:
                _resolution_notes(project, diagnostics, args, changed=[p for p, _o, _n in tree_fix.changes])
            fixed_texts = {path: new for path, old, new in tree_fix.changes if old}  # the findings' texts
            _print_unapplied(build_deferred_fixes(diagnostics, codes, settings, project), args, fixed_texts)
            for line in errors:
                print(f"error: {_shown(line)}", file=sys.stderr)
            if errors:
                return EXIT_ERROR
            return EXIT_FINDINGS if diff_text and not args.exit_zero else EXIT_CLEAN

    if args.show_fixes or fmt in ("json", "json-lines", "sarif"):
        # outputs that show fixes carry the built fix (edits, and a display-only proposal's reason)
        from npu_lint.engine import build_deferred_fixes

        diagnostics = build_deferred_fixes(diagnostics, codes, settings, project)
    diagnostics.sort(key=lambda d: d.sort_key())
    word = getattr(args, "implicit_word", None)
    if word and f"{word}: no such file or directory" in errors and "/" not in word and "." not in word:
        i = errors.index(f"{word}: no such file or directory")
        errors[i] += f"; `{word}` is not a subcommand either (did you mean `check`?)"
    args.input_errors = bool(errors)  # no "All checks passed!" over an error
    adopted = _adoption(args, diagnostics, errors)
    if isinstance(adopted, int):
        return adopted
    diagnostics = adopted
    if not args.quiet:
        _resolution_notes(project, diagnostics, args, getattr(args, "changed_paths", ()))
    _report(diagnostics, fmt, args, settings, codes, fixed_counts, dropped, created)
    for line in errors:
        print(f"error: {_shown(line)}", file=sys.stderr)
    if errors:
        return EXIT_ERROR
    if diagnostics and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _say_config(settings, args: argparse.Namespace) -> None:  # noqa: ANN001
    """Which configuration file applies: always with ``--verbose``; otherwise when it was found above the
    working directory (an ancestor's ``npu-lint.toml`` must not apply silently)."""
    if not settings.config_path or args.quiet:
        return
    config_dir = Path(settings.config_path).resolve().parent
    cwd = Path.cwd().resolve()
    above = config_dir != cwd and config_dir in cwd.parents
    if above:  # quiet when the file belongs to the repository the working directory is in
        between = [cwd, *(p for p in cwd.parents if config_dir in p.parents)]
        outside_repo = any((d / ".git").exists() for d in between)
        in_repo = any((d / ".git").exists() for d in (config_dir, *config_dir.parents))
        above = outside_repo or not in_repo
    if args.verbose or (above and not args.config):
        where = " (found above the working directory)" if above and not args.config else ""
        print(
            f"npu-lint: note: using configuration {_shown(str(settings.config_path))}{where}", file=sys.stderr
        )


def _print_unapplied(diagnostics, args, texts: dict[str, str] | None = None) -> None:  # noqa: ANN001
    """With ``--diff``: the fixes that were not applied (display-only proposals, unsafe fixes not enabled), with
    their reasons and proposed diffs, on stderr (stdout stays a clean diff)."""
    from npu_lint.report import RenderContext
    from npu_lint.report.proposals import render_proposals

    ctx = RenderContext(rules={}, root=os.getcwd(), unsafe_fixes=args.unsafe_fixes)
    text = render_proposals(sorted(diagnostics, key=lambda d: d.sort_key()), ctx, texts)
    if text:
        from npu_lint.core.diagnostics import terminal_text

        sys.stderr.write(terminal_text(text))


def _refuse_output_over_input(args: argparse.Namespace, named: list[str], files: list[str]) -> None:
    """``-o m.py m.py`` or ``--write-baseline m.py m.py`` would replace the source with a report: refused, as is
    any existing Python source or project file, the baseline and the configuration in use."""
    for flag, target in (("--output-file", args.output_file), ("--write-baseline", args.write_baseline)):
        if not target:
            continue
        from npu_lint.engine.write import output_refusal

        protected = [
            *named,
            *files,
            args.baseline or "",
            getattr(args, "config", None) or "",
            *(["" if flag == "--write-baseline" else args.write_baseline or ""]),
        ]
        why = output_refusal(target, protected)
        if why:
            refusing = "refusing to replace it" if os.path.lexists(target) else "refusing to write it"
            raise UsageError(f"npu-lint: {flag} {_shown(target)} {why}; {refusing}")


def _shown(text: str) -> str:
    from npu_lint.core.diagnostics import display_path

    return display_path(text)


def _check_adoption_flags(args: argparse.Namespace) -> None:
    if args.add_noqa and (args.fix or args.diff):
        raise UsageError("npu-lint: --add-noqa cannot be combined with --fix or --diff")
    if args.write_baseline and (args.diff or args.add_noqa or args.baseline):
        raise UsageError(
            "npu-lint: --write-baseline cannot be combined with --diff, --add-noqa or --baseline"
        )
    if args.stdin_filename and (args.add_noqa or args.baseline or args.write_baseline):
        raise UsageError("npu-lint: --add-noqa and baselines work on files, not on standard input")


def _adoption(args: argparse.Namespace, diagnostics: list, errors: list[str]) -> list | int:  # noqa: C901
    """--add-noqa / --write-baseline (the run ends here: an exit code) and --baseline (the findings left)."""
    if not (args.add_noqa or args.write_baseline or args.baseline):
        return diagnostics  # a plain check imports neither the adoption code nor the lint chain it reads with
    from npu_lint.engine.adopt import BaselineError, add_noqa, filter_baseline, write_baseline

    def finish() -> int:
        for line in errors:
            print(f"error: {_shown(line)}", file=sys.stderr)
        return EXIT_ERROR if errors else EXIT_CLEAN

    if args.add_noqa:
        paths = args.paths or ["."]
        roots = [args.settings_root, *paths]
        result = add_noqa(
            (d for d in diagnostics if d.code != "NPU001"),
            digests=getattr(args, "digests", None),
            roots=roots,
        )
        for line in result.skipped:
            print(f"warning: no noqa added at {_shown(line)}", file=sys.stderr)
        errors.extend(result.errors)  # one file that cannot be written is reported; the others were written
        if not args.quiet:  # ruff's wording; counts only directives in files actually written
            print(f"Added {result.added} noqa directive{'s' if result.added != 1 else ''}.")
        return finish()
    if args.write_baseline:
        try:
            n = write_baseline(args.write_baseline, diagnostics)
        except OSError as exc:  # a FIFO, a directory, a full disk: one line, not an internal error
            raise UsageError(
                f"npu-lint: --write-baseline {_shown(args.write_baseline)}: {exc.strerror or exc}"
            ) from None
        if not args.quiet:
            print(f"Wrote a baseline of {n} finding{'s' if n != 1 else ''} to {_shown(args.write_baseline)}.")
        return finish()
    if args.baseline:
        try:
            diagnostics, hidden = filter_baseline(args.baseline, diagnostics)
        except BaselineError as exc:
            raise UsageError(f"npu-lint: {exc}") from None
        args.baseline_hidden = hidden
    return diagnostics


def _diff(old: str, new: str, path: str) -> str:
    # a relative name inside the working directory as the shortest relative path (`../models/m/x.py` run from
    # `models` is `m/x.py`; `./x.py` is `x.py`): `git apply` and `patch` refuse a header with `..` in it
    if not os.path.isabs(path):
        inside = os.path.relpath(os.path.abspath(path))
        path = inside if not inside.startswith(os.pardir) else os.path.normpath(path)
    name = _shown(path.lstrip("/"))
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{name}" if old else "/dev/null",
        tofile=f"b/{name}",
    )
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    return text


def _emit(text: str, output_file: str | None) -> None:
    if output_file:
        from npu_lint.engine.write import write_output

        try:  # a regular file is replaced atomically; a device, FIFO or symlink is written in place
            write_output(output_file, text)
        except OSError as exc:
            raise UsageError(f"npu-lint: cannot write {output_file}: {exc.strerror or exc}") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def _report(diagnostics, fmt, args, settings, codes, fixed_counts, dropped, created) -> None:  # noqa: ANN001
    from npu_lint.engine import fix_applicable
    from npu_lint.report import render

    # only SARIF (rule descriptors) and --statistics (names) read the rule classes: the other formats take
    # everything from the findings, and a warm run then imports no rule module (nor ``rules.base``)
    rules: dict = {}
    if args.statistics or fmt == "sarif":
        from npu_lint.rules.base import all_rules

        rules = all_rules()
    if args.statistics:
        from npu_lint.engine.adopt import distinct

        # findings in generated files that trace to one spec line count once (+N generated copies)
        unique, _ = distinct(diagnostics)
        counts = Counter(d.code for d in unique)
        copies = Counter(d.code for d in diagnostics) - counts
        fixable = Counter(d.code for d in diagnostics if fix_applicable(d.fix, args.unsafe_fixes))
        lines = []
        if fmt in ("json", "json-lines"):  # as ruff: the counts as JSON for scripts (text was printed)
            import json

            rows = [
                {
                    "code": c,
                    "name": rules[c].name if c in rules else "",
                    "count": n,
                    "generated_copies": copies[c],
                    "fixable": bool(fixable[c]),
                }
                for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
            ]
            _emit(json.dumps(rows, indent=2) + "\n", args.output_file)
            return
        for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            mark = "[*]" if fixable[code] else "   "
            name = rules[code].name if code in rules else ""
            extra = f" (+{copies[code]} generated copies)" if copies[code] else ""
            lines.append(f"{n:5d}\t{code}\t{mark} {name}{extra}")
        text = "\n".join(lines) + ("\n" if lines else "")
        _emit(text, args.output_file)
        return
    color = fmt == "text" and not args.output_file and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    body = render(
        fmt,
        diagnostics,
        rules={c: rules[c] for c in {d.code for d in diagnostics} | set(codes) if c in rules},
        root=os.getcwd(),
        show_fixes=args.show_fixes,
        unsafe_fixes=args.unsafe_fixes,
        color=color,
    )
    if fmt in ("text", "concise") and not args.quiet:
        body += _summary(diagnostics, args, fixed_counts, dropped, created)
    elif fmt in ("text", "concise") and args.quiet:
        body = body if diagnostics else ""
    if fmt in ("text", "concise", "github"):  # names and notes from the tree never drive the terminal
        from npu_lint.core.diagnostics import terminal_text

        body = terminal_text(body)
    _emit(body, args.output_file)


def _summary(diagnostics, args, fixed_counts, dropped, created) -> str:  # noqa: ANN001
    from npu_lint.core.diagnostics import Applicability
    from npu_lint.engine import fix_applicable

    lines = []
    n_fixed = sum(sum(c.values()) for c in fixed_counts.values())
    if args.show_fixes and fixed_counts:
        lines.append(f"Fixed {n_fixed} error{'s' if n_fixed != 1 else ''}:")
        for path, counts in sorted(fixed_counts.items()):
            lines.append(f"- {_shown(path)}:")
            for code, n in sorted(counts.items()):
                lines.append(f"    {n} × {code}")
    for path in created:
        lines.append(f"Created {_shown(path)}")
    lines.extend(_shown(line) for line in _next_steps(created, getattr(args, "edited_specs", [])))
    for line in dropped:
        lines.append(_shown(line))
    fixable = sum(1 for d in diagnostics if fix_applicable(d.fix, args.unsafe_fixes))
    hidden = sum(
        1
        for d in diagnostics
        if not args.unsafe_fixes and d.fix and d.fix.applicability is Applicability.UNSAFE
    )
    if diagnostics:
        found = len(diagnostics) + n_fixed
        head = f"Found {found} error{'s' if found != 1 else ''}"
        head += f" ({n_fixed} fixed, {len(diagnostics)} remaining)." if n_fixed else "."
        lines.append(head)
        if fixable and getattr(
            args, "fix", False
        ):  # this very run tried them: saying "fixable with --fix" misleads
            lines.append(
                f"{fixable} fix{'es' if fixable != 1 else ''} could not be applied in this run (see the reasons given)."
            )
        elif fixable:
            flag = "--fix --unsafe-fixes" if args.unsafe_fixes else "--fix"
            lines.append(f"[*] {fixable} fixable with the `{flag}` option.")
        if hidden:
            lines.append(
                f"{hidden} hidden fix{'es' if hidden != 1 else ''} can be enabled with the `--unsafe-fixes` option."
            )
    elif n_fixed:
        lines.append(f"Found {n_fixed} error{'s' if n_fixed != 1 else ''} ({n_fixed} fixed, 0 remaining).")
    elif not getattr(args, "input_errors", False):
        lines.append("All checks passed!")
    hidden_known = getattr(args, "baseline_hidden", 0)
    if hidden_known:
        lines.append(
            f"{hidden_known} known finding{'s' if hidden_known != 1 else ''} in the baseline not shown."
        )
    return "\n".join(lines) + "\n"


def _next_steps(created: list[str], edited: list[str] | None = None) -> list[str]:
    """After a spec was created or edited: the tree's own patchgen command that regenerates its generated
    module (npu-lint never runs it, and never edits generated/)."""
    from npu_lint.veomni import patchgen

    out = []
    for path in [*created, *(edited or [])]:
        if not path.endswith("_patch_gen_config.py"):
            continue
        command, where, make = patchgen.tree_regen_command(path)
        what = "generate the module it describes" if path in created else "regenerate its generated module"
        place = f" from {where}" if where else ""
        also = " (`make patchgen` regenerates every spec)" if make else ""
        out.append(f"Next: run `{command}`{place} to {what} ({os.path.basename(path)}){also}")
    return out


def _stdin_excluded(name: str, settings: Any) -> bool:  # a core.config.Settings
    """Whether ``--stdin-filename NAME`` matches the configured excludes (what ``--force-exclude`` honours)."""
    from npu_lint.core.discovery import is_excluded

    return is_excluded(Path(name), settings, Path(settings.root).resolve())


def _check_stdin(args, settings, codes, project, fmt) -> int:  # noqa: ANN001
    from npu_lint.core.safeio import read_stream
    from npu_lint.core.source import DecodeError, SourceFile, decode_source
    from npu_lint.engine import fix_source, lint_source

    if sys.stdin is None:  # `<&-`: the interpreter has no stdin object at all
        raise UsageError("npu-lint: error: cannot read standard input: it is closed")
    try:
        data = read_stream(sys.stdin.buffer)  # bounded: `yes | npu-lint --stdin-filename m.py` must end
    except OSError as exc:
        raise UsageError(f"npu-lint: standard input: {exc.strerror or exc}") from None
    if args.force_exclude and _stdin_excluded(args.stdin_filename, settings):
        # as a file named on the command line: an excluded path is left alone (an editor fixing on save
        # through stdin gets its text back unchanged, and no findings)
        if args.fix and not args.diff:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        if not args.quiet:
            shown = _shown(args.stdin_filename)
            print(f"npu-lint: warning: {shown} is excluded (--force-exclude): not linted", file=sys.stderr)
        return EXIT_CLEAN
    try:
        text, encoding = decode_source(data)
    except DecodeError as exc:
        raise UsageError(f"npu-lint: standard input: {exc}") from None
    src = SourceFile.from_text(args.stdin_filename, text, encoding)
    if args.fix or args.diff:
        outcome = fix_source(src, codes, settings, project, unsafe=args.unsafe_fixes, format=True)
        if args.diff:
            sys.stdout.write(_diff(text, outcome.text, args.stdin_filename))
            return EXIT_FINDINGS if outcome.text != text and not args.exit_zero else EXIT_CLEAN
        try:  # in the input's own encoding, BOM included (``utf-8-sig``), as the file writer keeps it
            out = outcome.text.encode(encoding)
        except UnicodeEncodeError as exc:
            raise UsageError(
                f"npu-lint: standard input: the fixed text cannot be encoded as {encoding}: {exc.reason}"
            ) from None
        sys.stdout.flush()
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
        remaining = outcome.remaining
        if remaining:
            from npu_lint.report import render
            from npu_lint.rules.base import all_rules

            rules = all_rules()
            sys.stderr.write(
                render(
                    "concise",
                    remaining,
                    rules={d.code: rules[d.code] for d in remaining if d.code in rules},
                    root=os.getcwd(),
                )
            )
        return EXIT_FINDINGS if remaining and not args.exit_zero else EXIT_CLEAN
    from npu_lint.engine.lint import InternalError

    try:
        diagnostics, error = lint_source(src, codes, settings, project), ""
    except InternalError as exc:  # a rule failed: the other rules' findings are still reported (exit 2)
        diagnostics, error = exc.diagnostics, f"standard input: {exc}"
        args.input_errors = True  # no "All checks passed!" over an error
    _report(diagnostics, fmt, args, settings, codes, {}, [], [])
    if error:
        print(f"error: {_shown(error)}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_FINDINGS if diagnostics and not args.exit_zero else EXIT_CLEAN


if __name__ == "__main__":
    sys.exit(main())
