"""``npu-lint migrate MODEL_DIR... [--apply] [--format markdown|json] [-o FILE]`` (its own parser; the main CLI
forwards ``migrate ...`` here). Exit codes: 0 every step done (or nothing to do), 1 a step failed or a check
failed, 2 usage error."""

from __future__ import annotations

import argparse
import sys

EXIT_OK, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (argparse would print the whole usage first)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def build_parser() -> argparse.ArgumentParser:
    from npu_lint.core.process import timeout_seconds

    p = _Parser(
        prog="npu-lint migrate",
        description="Run the NPU migration guide for model packages: audit, device and semantic fixes, dispatch "
        "migration, NPU spec, __init__ switch and registration, patchgen (twice), ruff, a model test, verify. "
        "Without --apply nothing is written: the plan and the diff are shown.",
        allow_abbrev=False,
    )
    p.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR")
    p.add_argument("--apply", action="store_true", help="write the result into the tree")
    p.add_argument("--format", choices=("markdown", "json"), default="markdown")
    p.add_argument("-o", "--output-file", metavar="FILE", help="write the report there")
    p.add_argument(
        "--no-verify", action="store_true", help="skip the verify step (and the generated test run)"
    )
    p.add_argument(
        "--timeout", type=timeout_seconds, default=900.0, help="seconds per subprocess (default %(default)s)"
    )
    p.add_argument("--python", help="interpreter for patchgen and verify (default: this one)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    from npu_lint.migrate import MigrateError, migrate
    from npu_lint.migrate.report import render_json, render_markdown

    if args.output_file:  # checked before any step runs: a report never replaces a source or project file
        refusal = _output_refusal(args.output_file, args.model_dirs)
        if refusal:
            print(f"npu-lint migrate: {refusal}", file=sys.stderr)
            return EXIT_ERROR

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"npu-lint migrate: {line}", file=sys.stderr, flush=True)

    try:
        result = migrate(
            args.model_dirs,
            apply=args.apply,
            python=args.python,
            timeout=args.timeout,
            run_verify=not args.no_verify,
            progress=progress,
        )
    except MigrateError as exc:
        print(f"npu-lint migrate: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"npu-lint migrate: nothing written: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # an npu-lint bug: nothing was written (the staging copy is removed)
        if args.verbose:
            import traceback

            traceback.print_exc()
        print(f"npu-lint migrate: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    text = render_json(result) if args.format == "json" else render_markdown(result)
    if args.output_file:
        from npu_lint.engine.write import write_output

        refusal = _output_refusal(args.output_file, args.model_dirs)  # again: the run may have created it
        if refusal:
            print(f"npu-lint migrate: {refusal}", file=sys.stderr)
            return EXIT_ERROR
        try:
            write_output(args.output_file, text)
        except OSError as exc:
            print(
                f"npu-lint migrate: cannot write {args.output_file}: {exc.strerror or exc}", file=sys.stderr
            )
            return EXIT_ERROR
    else:
        sys.stdout.write(text)
    if result.failed or any(r.status == "failed-check" for r in result.run.results):
        return EXIT_FAIL
    return EXIT_OK


def _output_refusal(path: str, model_dirs: list[str]) -> str:
    """Why ``-o path`` must not be written ("" when it may): a source or project file (``output_refusal``, as
    ``check -o``), one of the model packages' files, or a directory that does not exist."""
    import os

    from npu_lint.engine.write import output_refusal

    why = output_refusal(path, [str(p) for d in model_dirs for p in _files(d)])
    if why:
        done = "refusing to replace it" if os.path.lexists(path) else "refusing to write it"
        return f"-o {path} {why}; {done}"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"cannot write {path}: no such directory {parent}"
    return ""


def _files(directory: str) -> list[str]:
    import os

    try:
        return [e.path for e in os.scandir(directory) if e.is_file(follow_symlinks=False)]
    except OSError:
        return []
