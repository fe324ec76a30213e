"""``npu-lint verify MODEL_DIR [MODEL_DIR ...]``: the opt-in dynamic validation of a migrated model.

Unlike ``check``, this runs the model: each check in a subprocess of the interpreter that has torch and
transformers (``pip install 'npu-lint[verify]'``) and imports VeOmni from the tree being verified.
Exit codes: 0 no check failed (some may have been skipped: the report counts them), 1 a check failed, 2 a check
could not run (usage, missing dependency).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from npu_lint.verify.model import NotAModel, load_model_package
from npu_lint.verify.report import exit_code, render_json, render_markdown
from npu_lint.verify.runner import (
    CHECKS,
    DEFAULT_TIMEOUT,
    MissingDependency,
    default_python,
    probe,
    run_check,
)


class _Parser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit 2 (argparse would print the whole usage first)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from npu_lint.core.process import timeout_seconds

    p = _Parser(
        prog="npu-lint verify",
        allow_abbrev=False,  # `--time` is not `--timeout` (as in `check`)
        description="Run a migrated VeOmni model for real: patchgen reproducibility, imports and registration, "
        "numerical parity with upstream transformers, handle isolation, checkpoint keys, multimodal paths.",
    )
    p.add_argument("model_dirs", nargs="+", metavar="MODEL_DIR")
    p.add_argument(
        "--checks",
        type=lambda v: [c.strip() for c in v.split(",") if c.strip()],
        default=list(CHECKS),
        help=f"comma-separated subset of: {', '.join(CHECKS)} (default: all)",
    )
    p.add_argument("--format", choices=("markdown", "json"), default="markdown")
    p.add_argument("-o", "--output-file", metavar="FILE")
    p.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=DEFAULT_TIMEOUT,
        help="seconds per check (default %(default)s)",
    )
    p.add_argument(
        "--python", default=None, help="interpreter with torch and transformers (default: this one)"
    )
    p.add_argument(
        "--patchgen", metavar="DIR", help="directory holding VeOmni's `patchgen` package (patchgen-pkg/)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def _write(path: str, text: str) -> None:
    """``-o``: the writer ``check -o`` uses (atomic for a regular file; a device, FIFO or symlink is never
    replaced)."""
    import errno
    import os

    from npu_lint.engine.write import output_refusal, write_output

    why = output_refusal(path)
    if why:
        refusing = "refusing to replace it" if os.path.lexists(path) else "refusing to write it"
        raise OSError(errno.EEXIST, f"{why}; {refusing}", path)
    write_output(path, text)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run_verify(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # the reader of stdout went away: npu_lint.cli.main exits quietly
    except Exception as exc:  # an npu-lint bug, not a model failure (those are reported by the checks)
        if args.verbose:
            import traceback

            traceback.print_exc()
        print(f"npu-lint verify: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


def run_verify(args: argparse.Namespace) -> int:
    from npu_lint import __version__

    unknown = [c for c in args.checks if c not in CHECKS]
    if unknown or not args.checks:
        print(f"npu-lint verify: unknown check {', '.join(unknown) or '(none)'}; choose from {', '.join(CHECKS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        packages = [load_model_package(d) for d in args.model_dirs]
    except NotAModel as exc:
        print(f"npu-lint verify: {exc}", file=sys.stderr)
        return 2
    if args.output_file and not Path(args.output_file).resolve().parent.is_dir():
        print(f"npu-lint verify: cannot write {args.output_file}: no such directory", file=sys.stderr)
        return 2
    python = args.python or default_python()
    try:
        probe(python)
    except MissingDependency as exc:
        print(f"npu-lint verify: {exc}", file=sys.stderr)
        return 2
    models = []
    for pkg in packages:
        results = []
        for check in [c for c in CHECKS if c in args.checks]:
            if not args.quiet:
                print(f"npu-lint verify: {pkg.name}: {check} ...", file=sys.stderr, flush=True)
            result = run_check(pkg, check, python, args.timeout, args.patchgen)
            results.append(result)
            if not args.quiet:
                print(f"npu-lint verify: {pkg.name}: {check} {result.status} ({result.duration:.1f} s)",
                      file=sys.stderr, flush=True)  # fmt: skip
                if result.status == "error":
                    print(f"npu-lint verify: {pkg.name}: {check}: {result.details}", file=sys.stderr)
        models.append({"package": pkg, "checks": results})
    render = render_json if args.format == "json" else render_markdown
    text = render(models, __version__)
    if args.output_file:
        try:
            _write(args.output_file, text)
        except OSError as exc:
            print(f"npu-lint verify: cannot write {args.output_file}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return exit_code(models)
