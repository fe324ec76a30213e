"""Re-run the adversarial attacks of issue 15 and print their table (bench/accuracy/robustness.md).

    .venv/bin/python bench/robustness.py [--measure]

Each attack is a test (tests/cli/test_reliability.py, tests/lsp/test_robustness.py,
tests/rules/test_scaling.py) run through pytest; the table says what the attack does, what npu-lint does
now, and whether the run confirmed it. ``--measure`` adds the NPU101 scaling and server memory figures.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = "tests/cli/test_reliability.py"
LSP = "tests/lsp/test_robustness.py"

ATTACKS: list[tuple[str, str, str]] = [
    (
        "a `ruff/`, `pathspec/`, `libcst/`, `astroid/` package and a `veomni/__init__.py` / `veomni/ops` that "
        "write a marker, in the linted tree; `python -m npu_lint` run from it: check, cache, --diff, --fix "
        "(NPU501 creates and formats a spec), audit, rule",
        f"{CLI}::test_no_command_runs_the_linted_tree",
        "no marker; the spec is formatted by npu-lint's own ruff (absolute path, neutral cwd)",
    ),
    (
        "the same trapped tree served by `npu-lint server`: open every file, fix-all and quick-fix actions",
        f"{CLI}::test_server_and_its_code_actions_do_not_run_the_linted_tree",
        "actions built (libcst included), no marker",
    ),
    (
        "`audit --base HEAD` in a repository whose `.git/config` sets `core.fsmonitor` to a command",
        f"{CLI}::test_audit_base_does_not_run_the_repository_config",
        "git run with `core.fsmonitor=false`, no hooks, no external diff: no marker",
    ),
    (
        "`--live-registry`",
        f"{CLI}::test_live_registry_says_it_imports_the_tree",
        "imports `veomni.ops` only in a child process, and says so on stderr",
    ),
    (
        "`-o` a symlink, a FIFO",
        f"{CLI}::test_output_file_never_replaces_symlink_or_fifo",
        "written in place / through",
    ),
    ("`-o /dev/null` (run as root)", f"{CLI}::test_output_file_dev_null_stays_a_device", "stays a device"),
    (
        "`-o /dev/stdout` (a symlink)",
        f"{CLI}::test_output_file_dev_stdout_is_written_through",
        "written through",
    ),
    (
        "`-o` in a missing directory",
        f"{CLI}::test_output_file_in_missing_directory_is_one_line",
        "one line, exit 2",
    ),
    (
        "a blank line added to `__init__.py` between lint and fix (NPU502 stale offsets)",
        f"{CLI}::test_project_fix_is_skipped_when_the_file_changed_after_lint",
        "fix skipped with a message; the user's text kept",
    ),
    (
        "the editor saves between the fix-time read and the write",
        f"{CLI}::test_concurrent_write_wins_over_the_fix",
        "not written; 'a concurrent write won'",
    ),
    (
        "an editor saving every 20 ms during 2 s of fixes",
        f"{CLI}::test_editor_save_loop_loses_nothing",
        "no save lost, the last save on disk",
    ),
    (
        "`npu-lint check --fix` run 4 times while an editor saves every 20 ms",
        f"{CLI}::test_cli_fix_runs_during_an_editor_save_loop",
        "no save lost, no internal error",
    ),
    (
        "cache entry set to `[]`, a symlink to `/dev/zero`, wrong types",
        f"{CLI}::test_crafted_cache_entries_are_ignored",
        "ignored with a note (signature, regular files, size cap, schema); findings reported",
    ),
    (
        "a validly signed cache entry carrying an `os.system` edit",
        f"{CLI}::test_cached_fix_edits_are_never_applied",
        "never applied: --fix re-lints every file it fixes",
    ),
    (
        "`.npu_lint_cache` planted as a symlink to a directory outside the project",
        f"{CLI}::test_symlinked_default_cache_directory_is_not_used",
        "the cache is not used (a note); nothing written outside",
    ),
    (
        '`cache-dir = "../x"`, `""`, `"~/x"`',
        f"{CLI}::test_cache_dir_must_stay_inside_the_project",
        "outside / empty: config error; `~` expanded",
    ),
    (
        "everything excluded by a config",
        f"{CLI}::test_nothing_linted_is_an_error",
        "'no Python files to lint', exit 2",
    ),
    (
        '`select = [""]`, a selection emptied by `ignore`',
        f"{CLI}::test_no_rule_selected_is_an_error",
        "exit 2",
    ),
    (
        "an unreadable subdirectory (EACCES from scandir, also under root)",
        f"{CLI}::test_unreadable_directory_is_reported",
        "'cannot read directory', exit 2",
    ),
    (
        "a FIFO named `pipe.py` in the tree and named",
        f"{CLI}::test_fifo_named_py_does_not_hang",
        "reported, no hang",
    ),
    (
        "SIGKILL of the main process during a pool run",
        f"{CLI}::test_pool_workers_die_with_the_parent",
        "workers gone (PR_SET_PDEATHSIG + parent watch); the pipe closes",
    ),
    (
        "SIGTERM while a fix is being written",
        f"{CLI}::test_sigterm_during_a_write_leaves_no_temporary_file",
        "exit 143, no temporary file, file unchanged",
    ),
    (
        "a stale `.name.npu-lint-<dead pid>.*.tmp` and a foreign `.name.*.tmp`",
        f"{CLI}::test_stale_temp_files_are_removed",
        "ours removed, the foreign one kept",
    ),
    (
        "--fix with a read-only directory and a 251-character name",
        f"{CLI}::test_one_failing_file_does_not_stop_the_fix",
        "the failing file reported, the others fixed",
    ),
    (
        "symlinked and hard-linked files under --fix",
        f"{CLI}::test_links_keep_their_identity",
        "link kept, inode kept",
    ),
    (
        "a symlink loop named and in the tree",
        f"{CLI}::test_symlink_loop_is_reported_per_path",
        "reported per path",
    ),
    (
        '`tool = "npu-lint"`, `npu-lint = 3`, 100k-deep TOML arrays',
        f"{CLI}::test_pathological_config_is_a_config_error",
        "config error, exit 2",
    ),
    ("`npu-lint audit /`", f"{CLI}::test_audit_of_root_is_a_clean_error", "'not a model package', exit 2"),
    (
        "NPU101: 500 vs 2000 findings in one block",
        "tests/rules/test_scaling.py",
        "work (function calls) ratio < 5.5 (linear: ~3-4; the old rescan: ~9+)",
    ),
    (
        "server: Content-Length off by +3, -3, +40, then a valid message",
        f"{LSP}::test_recovers_from_a_wrong_content_length",
        "the valid message gets its diagnostics",
    ),
    (
        "server: `%00` in a URI, `untitled:`, non-ASCII",
        f"{LSP}::test_odd_uris_get_diagnostics",
        "diagnostics published",
    ),
    (
        "server: a FIFO and `/dev/zero` as documents (opened and never opened)",
        f"{LSP}::test_fifo_and_device_documents_do_not_hang",
        "served; disk reads only of regular files under 16 MiB",
    ),
    (
        "server: 500 didChange notifications",
        f"{LSP}::test_notifications_leave_no_futures_behind",
        "no future left behind (pygls keeps one per notification)",
    ),
]


def run_one(node: str) -> tuple[str, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - start
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode == 0 and "skipped" in tail and "passed" not in tail:
        return "skipped", took
    return ("pass" if proc.returncode == 0 else "FAIL"), took


def main() -> int:
    failed = 0
    print("| attack | npu-lint now | result | s |")
    print("|---|---|---|---:|")
    for attack, node, outcome in ATTACKS:
        result, took = run_one(node)
        failed += result == "FAIL"
        print(f"| {attack} | {outcome} | {result} | {took:.1f} |", flush=True)
    if "--measure" in sys.argv:
        for script in ("npu101_scaling.py", "lsp_memory.py"):
            print()
            subprocess.run([sys.executable, str(REPO / "bench" / script)], cwd=REPO, check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
