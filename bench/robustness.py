"""Re-run the adversarial attacks of issues 15 and 22 and print their table (bench/accuracy/robustness.md).

    .venv/bin/python bench/robustness.py [--measure] [--issue 22]

Each attack is a test (tests/cli/test_reliability.py, tests/cli/test_attacks.py, tests/lsp/test_robustness.py,
tests/rules/test_scaling.py, tests/fuzz/, tests/test_layout.py) run through pytest; the table says what the attack does, what npu-lint does
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
ATK = "tests/cli/test_attacks.py"
FUZZ = "tests/fuzz"

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

# -- issue 22: an independent adversary's attacks (the classes of that issue) and the fuzzer's findings ----------
ISSUE_22 = len(ATTACKS)  # `--issue 22` runs only the rows below
ATTACKS += [
    (
        "a FIFO as `--baseline`",
        f"{ATK}::test_fifo_as_baseline_is_one_line_not_a_hang",
        "'not a regular file', exit 2, no hang",
    ),
    (
        "a FIFO spec, a FIFO helper, a FIFO kernel module and symlinks to `/dev/zero` in the tree (profile scan, "
        "patchgen, registry, audit)",
        f"{ATK}::test_fifo_spec_helper_and_dev_zero_in_the_tree_do_not_hang",
        "every read through the one reader: check, --fix --diff and audit finish",
    ),
    (
        "any `open()` / `read_text()` / `read_bytes()` / `json.load` / `tomllib.load` / stdin read outside the one "
        "reader",
        "tests/test_layout.py::test_every_read_goes_through_the_one_reader",
        "none (a layout test)",
    ),
    (
        "FIFO, `/dev/zero`, a directory, an oversized file, 200,000-deep JSON through the reader",
        f"{ATK}::test_one_reader_refuses_fifos_devices_and_huge_files",
        "OSError / ValueError, one line",
    ),
    (
        "`/dev/zero` as standard input",
        f"{ATK}::test_standard_input_is_bounded",
        "'standard input: larger than 67108864 bytes', exit 2",
    ),
    (
        "server: `Content-Length: 99999999999999`, then a valid message",
        f"{ATK}::test_server_survives_an_absurd_content_length",
        "message skipped, nothing allocated; next served",
    ),
    (
        "`--add-noqa` after an editor inserted a line (stale findings)",
        f"{ATK}::test_add_noqa_never_writes_over_a_later_save",
        "file skipped ('changed since it was linted'), save kept",
    ),
    (
        "`--add-noqa` on a spec that is a symlink out of the tree",
        f"{ATK}::test_add_noqa_never_edits_through_a_symlink_out_of_the_tree",
        "not edited, said so",
    ),
    (
        "`--add-noqa` on a file with mixed CRLF / LF",
        f"{ATK}::test_add_noqa_keeps_mixed_line_endings",
        "directives added, each line keeps its ending",
    ),
    (
        "`--add-noqa` with one unwritable file",
        f"{ATK}::test_add_noqa_one_unwritable_file_does_not_stop_the_run",
        "the others written; error reported; count = written directives",
    ),
    (
        '`--add-noqa` twice on a line holding the string `"# noqa"`',
        f"{ATK}::test_add_noqa_twice_changes_nothing_and_ignores_noqa_in_strings",
        "a real comment added once",
    ),
    (
        'a model directory named `w"""+__import__("os").system(...)+"""` and `--fix --unsafe-fixes`',
        f"{ATK}::test_model_directory_with_quotes_never_becomes_code",
        "no spec created (names must be identifiers; display-only fix with the reason)",
    ),
    (
        "quotes, backslashes, newlines, escapes, lone surrogates in a created spec's string values",
        f"{ATK}::test_npu_spec_literals_cannot_end_their_string",
        "escaped literals (eval round-trips)",
    ),
    (
        "`--write-baseline m.py m.py`, `-o m.py m.py` (also through a symlink)",
        f"{ATK}::test_output_over_an_input_is_refused",
        "refused, exit 2, source kept",
    ),
    (
        "`--cache-dir .` in a git repository",
        f"{ATK}::test_cache_dir_dot_never_hides_the_repository_from_git",
        "no root `.gitignore`; only the cache's own directory is ignored",
    ),
    (
        "the cache's versioned directory is a symlink out of the project",
        f"{ATK}::test_symlink_inside_the_cache_sends_no_write_outside",
        "nothing written outside",
    ),
    (
        "`audit --base=--output=FILE`",
        f"{ATK}::test_audit_base_cannot_be_a_git_option",
        "'not a revision', exit 2, FILE untouched",
    ),
    (
        "a revision that reaches git",
        f"{ATK}::test_audit_base_is_resolved_before_git_diff_sees_it",
        "validated, resolved with `rev-parse --verify --end-of-options`, diffed by commit id",
    ),
    (
        "verify / --live-registry child: timeout with a grandchild",
        f"{ATK}::test_a_timeout_kills_the_grandchildren_too",
        "process group killed, grandchild gone",
    ),
    (
        "a grandchild left running after the child exits",
        f"{ATK}::test_a_grandchild_left_running_is_killed_when_the_child_exits",
        "killed with the group",
    ),
    (
        "a secret in the parent's environment",
        f"{ATK}::test_the_child_sees_a_minimal_environment",
        "not in the child; HOME is a temporary directory",
    ),
    (
        "model code prints a verdict and writes a fake one on the result pipe",
        f"{ATK}::test_code_under_test_cannot_forge_the_verdict",
        "'not authenticated': no verdict",
    ),
    (
        "a check interpreter that forges 'pass'",
        f"{ATK}::test_verify_runner_reports_a_forged_verdict_as_a_failure",
        "failed check: 'no trustworthy verdict'",
    ),
    (
        "`verify -o` a symlink, a FIFO",
        f"{ATK}::test_verify_output_never_replaces_a_symlink_or_fifo",
        "written through / in place (check's writer)",
    ),
    (
        "a run whose only file cannot be decoded, NPU001 not selected",
        f"{ATK}::test_a_run_that_analysed_nothing_says_so",
        "'not analysed' + 'none of the 1 files could be analysed', exit 2",
    ),
    (
        '`"# noqa"` in a string; `# npu-lint: noqa` in a docstring',
        f"{ATK}::test_noqa_in_a_string_or_docstring_suppresses_nothing",
        "still reported (comment tokens only)",
    ),
    ("a fix whose write fails", f"{ATK}::test_fix_counts_only_written_files", "not counted as fixed"),
    (
        "baselines: 100,000-deep JSON, wrong types, not UTF-8",
        f"{ATK}::test_malformed_baselines_are_one_line_errors",
        "one line, exit 2",
    ),
    (
        '`exclude = ["!"]`, a lone backslash, `[z-a]`',
        f"{ATK}::test_invalid_exclude_pattern_is_a_config_error",
        "config error, exit 2",
    ),
    (
        "the server with an invalid exclude pattern",
        f"{ATK}::test_server_with_an_invalid_exclude_still_publishes",
        "one message; diagnostics with the default settings",
    ),
    (
        "a file named `bad\\xff\\x1b[31m.py` in all 7 formats",
        f"{ATK}::test_non_utf8_and_escape_file_names_in_every_format",
        "escaped in text formats; SARIF URI percent-encoded from the bytes",
    ),
    (
        "a lone surrogate in an editor buffer",
        f"{ATK}::test_lone_surrogate_in_an_editor_buffer_keeps_the_finding",
        "read as U+FFFD; finding kept at the same position",
    ),
    (
        "an `npu-lint.toml` above the repository",
        f"{ATK}::test_ancestor_configuration_is_named",
        "'using configuration ... (found above the working directory)'",
    ),
    (
        "a user's `.m.py.npu-lint-999999.0badf00d.tmp` and read-only runs",
        f"{ATK}::test_a_read_only_run_deletes_no_user_file",
        "kept (only --fix / --add-noqa remove, beside their file)",
    ),
    (
        "server: `exit` without `shutdown`",
        f"{ATK}::test_server_exit_without_shutdown_is_exit_code_1",
        "exit code 1",
    ),
    (
        "`-o b.json --baseline b.json`, `-o npu-lint.toml`, `--write-baseline npu-lint.toml`, `-o other.py`, "
        "`audit -o <spec>`",
        f"{ATK}::test_output_over_the_baseline_config_or_a_source_is_refused",
        "refused, exit 2, files kept",
    ),
    (
        "a model directory named with an OSC escape sequence (`w\\x1b]0;owned\\x07`), check and --fix, 3 text "
        "formats",
        f"{ATK}::test_escape_sequences_in_a_model_directory_never_reach_the_terminal",
        "escaped in messages, notes, summary and next-step lines",
    ),
    (
        "a tree's `hmac.py` / `json.py` / `hashlib.py` under --live-registry",
        f"{ATK}::test_a_tree_module_cannot_shadow_what_authenticates_the_verdict",
        "imported before the tree is on sys.path: never sees the key",
    ),
    (
        "a spec's docstring line `# npu-lint: noqa`; a noqa inside its post-import code block",
        f"{ATK}::test_spec_code_blocks_carry_line_noqa_but_never_a_file_directive",
        "the code block's noqa counts for its line; the docstring suppresses nothing",
    ),
    (
        "fuzz: server fix-all vs CLI fix, with a lone surrogate in the buffer",
        f"{FUZZ}/test_lsp_fuzz.py::test_server_fix_all_equals_the_cli_fix",
        "equal; the surrogate no longer blocks every fix (found by the fuzzer)",
    ),
    (
        "fuzz: the same file with LF, CRLF, CR endings",
        f"{FUZZ}/test_fix_fuzz.py::test_the_fix_does_not_depend_on_the_newline_style",
        "the same fix; no LF line creeps in",
    ),
    (
        "fuzz: fixes on mutated real VeOmni code",
        f"{FUZZ}/test_fix_fuzz.py",
        "parse, idempotent, noqa lines kept, nothing written outside the tree, counts = written files",
    ),
    (
        "fuzz: --add-noqa on mutated real VeOmni code",
        f"{FUZZ}/test_fix_fuzz.py::test_add_noqa_is_idempotent_and_silences_what_it_can",
        "idempotent, line endings kept, every finding silenced or reported skipped",
    ),
    (
        "fuzz: JSON-RPC framing (chunking, garbage, wrong and absurd lengths)",
        f"{FUZZ}/test_lsp_fuzz.py",
        "clean frames delivered whole; a clean tail always gets through",
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
    rows = ATTACKS[ISSUE_22:] if "--issue" in sys.argv and "22" in sys.argv else ATTACKS
    if "--last" in sys.argv:
        rows = rows[-int(sys.argv[sys.argv.index("--last") + 1]) :]
    for attack, node, outcome in rows:
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
