"""``npu-lint server``: the language server (pygls 2.x over stdio).

Diagnostics for open Python documents from their unsaved text, with the CLI's configuration discovery (the
nearest pyproject.toml / npu-lint.toml, ``[tool.npu-lint]``) plus the editor's settings on top. Pull
diagnostics (``textDocument/diagnostic``) when the client supports them, otherwise pushed
(``textDocument/publishDiagnostics``) after a per-document debounce; never both. Code actions: quick fixes,
"Disable NPUxxx for this line", and ``source.fixAll.npu-lint``.

A document that does not parse gets NPU001 (from the engine) and the server keeps serving; an internal error
while linting one document is logged to the client and yields no diagnostics for it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument, Workspace

from npu_lint import __version__
from npu_lint.core.config import ConfigError, Settings, find_config_file, load_config, selected_codes
from npu_lint.core.diagnostics import CreateFile, Diagnostic
from npu_lint.core.reparse import DocumentParse
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_applicable, fix_tree, lint_source
from npu_lint.lsp.actions import (
    FIX_ALL_KIND,
    ActionContext,
    diagnostic_actions,
    fix_all_edit_action,
    fix_all_placeholder,
    kind_requested,
)
from npu_lint.lsp.convert import offset_of_client_position, to_lsp_diagnostic
from npu_lint.lsp.longwork import ForkRunner
from npu_lint.lsp.settings import (
    ADAPTIVE_MIN_MS,
    DEFAULT_DEBOUNCE_MS,
    RUN_ON_SAVE,
    ServerSettings,
    merge_settings,
    settings_from_init_options,
)
from npu_lint.veomni.project import Project

logger = logging.getLogger("npu_lint.lsp")

CONFIG_NAMES = ("pyproject.toml", "npu-lint.toml")
DEPENDENCY_GLOBS = (
    "**/*_patch_gen_config.py",
    "**/generated/*.py",
    "**/__init__.py",
    # any module of the tree (the registry modules of veomni/ops and veomni/kernels, the helper modules of
    # veomni/**/utils NPU204 follows, ...): the project's facts are derived from all of them
    "**/veomni/**/*.py",
)
PYTHON_SUFFIXES = (".py", ".pyi")
SECTION = "npu-lint"
_LSP_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


class LspTextDocument(TextDocument):
    """pygls' document with lines split as the LSP specification (and Python's tokenizer) split them:
    only at ``\\n``, ``\\r\\n`` and ``\\r``. ``str.splitlines`` also splits at form feeds, ``\\x1c``-``\\x1e``,
    ``\\x85``, U+2028/U+2029, which would shift every later line of an incremental change."""

    @property
    def lines(self) -> list[str]:  # type: ignore[override]
        return _LSP_LINES.findall(self.source)

    @property
    def source(self) -> str:  # type: ignore[override]
        """A document the client did not open is read from disk only if it is a regular file under
        ``MAX_DISK_DOCUMENT`` bytes (never a FIFO or ``/dev/zero``); otherwise it is empty."""
        if self._source is None:
            return _read_disk_document(self.path)
        return self._source or ""


MAX_DISK_DOCUMENT = 16 * 1024 * 1024
LONG_TEXT = 256 * 1024  # characters: a buffer this large is linted off the event loop (about 1 s of CPU)
LONG_LINT_MS = 500.0  # so is a document whose lints took this long (moving average)


def _read_disk_document(path: str | None) -> str:
    from npu_lint.core.safeio import read_regular

    if not path:
        return ""
    try:
        data, _ = read_regular(path, limit=MAX_DISK_DOCUMENT)
    except (OSError, ValueError):
        return ""
    return data.decode("utf-8", errors="replace")


_HEADER = b"Content-Length: "
MAX_MESSAGE = 64 * 1024 * 1024  # a Content-Length beyond this is never allocated: the message is skipped


class ResyncReader:
    """pygls' stdin reader, made to recover from a wrong ``Content-Length``.

    pygls reads a header line, then exactly ``Content-Length`` bytes. A length that is a few bytes off leaves
    the rest of one message glued to the next header line, which then never matches, so every later message
    is lost. This reader (1) starts a header line at its ``Content-Length:`` when junk precedes it, and (2)
    gives back to the stream the start of the next message when a body does not end like a JSON-RPC object
    (a body too long by a few bytes swallowed ``Content-Length: ...`` or a prefix of it)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.pending = b""

    async def readline(self) -> bytes:
        while b"\n" not in self.pending:
            more = await self.inner.readline()
            if not more:
                break
            self.pending += more
            if len(self.pending) > MAX_MESSAGE:  # megabytes without a line break: junk, keep only the tail
                self.pending = self.pending[-len(_HEADER) :]
        index = self.pending.find(b"\n")
        if index < 0:
            line, self.pending = self.pending, b""
        else:
            line, self.pending = self.pending[: index + 1], self.pending[index + 1 :]
        start = line.find(_HEADER)
        if start > 0:
            line = line[start:]  # junk from a mis-sized body before a header
        return line

    async def readexactly(self, n: int) -> bytes:
        if n > MAX_MESSAGE:  # an absurd Content-Length (MemoryError in the stream's read): skip the message
            logger.error("Content-Length %d exceeds %d bytes: message skipped", n, MAX_MESSAGE)
            return b" "  # not JSON: pygls logs it and reads the next header (resynchronised by readline)
        body = self.pending[:n]
        self.pending = self.pending[n:]
        while len(body) < n:
            more = await self.inner.readexactly(n - len(body))
            if not more:
                break
            body += more
        if body.rstrip().endswith(b"}"):
            return body
        cut = body.find(_HEADER)
        if cut < 0:  # a prefix of the next header at the very end ("...}Conte")
            for size in range(min(len(_HEADER), len(body)), 0, -1):
                if body.endswith(_HEADER[:size]):
                    cut = len(body) - size
                    break
        if cut >= 0:
            self.pending = body[cut:] + self.pending
            # cut == 0: a header with no body swallowed (a prefix of) the next header: all of it goes back
            body = body[:cut] or b" "
        return body


def _use_lsp_lines(workspace: Workspace) -> None:
    def create(
        doc_uri: str, source: str | None = None, version: int | None = None, language_id: str | None = None
    ) -> TextDocument:
        return LspTextDocument(
            doc_uri,
            source=source,
            version=version,
            language_id=language_id,
            sync_kind=workspace._sync_kind,
            position_codec=workspace.position_codec,
        )

    if hasattr(workspace, "_create_text_document") and hasattr(workspace, "_sync_kind"):
        workspace._create_text_document = create  # type: ignore[method-assign]


@dataclass
class _Config:
    settings: Settings
    config_path: str | None
    mtime_ns: int | None


@dataclass
class LintResult:
    """The diagnostics of one document text under one settings generation."""

    text: str
    generation: int
    version: int | None
    src: SourceFile
    diagnostics: list[Diagnostic]
    lsp: list[types.Diagnostic]
    codes: list[str]
    settings: Settings
    project: Project | None
    fixed: dict[bool, tuple[str, list[CreateFile]]]  # fix-all results by `unsafe`
    with_fixes: list[Diagnostic] | None = None  # the diagnostics with every fix built (fix mode), lazily
    deps: str = ""  # the project version the result was computed under (see NpuLintServer.project_version)

    @property
    def result_id(self) -> str:
        digest = hashlib.blake2b(self.text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
        return f"{self.generation}-{self.deps}-{digest}"


class _Rejected:
    """Stands for a message that could not be decoded; pygls' dispatcher ignores it (unknown version)."""

    jsonrpc = "rejected"


class NpuLintProtocol(LanguageServerProtocol):
    """pygls' protocol, except that a request whose params do not decode gets an error response (pygls
    only logs it, and the client would wait forever), and that notifications leave nothing behind.

    pygls 2.x files the future of every notification whose handler is a generator or a coroutine (its own
    ``didChange`` / ``didOpen`` handlers are generators) in ``_request_futures`` under a fresh uuid, and only a
    response ever removes an entry: about 2 KiB per edit, forever (bench/lsp_memory.py). The entry of a
    notification is dropped once its handler is done."""

    def _execute_handler(  # type: ignore[override]
        self,
        msg_id: Any,
        handler: Any,
        callback: Any,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        if callback != self._check_handler_result:
            return  # a request: its response removes the entry
        future = self._request_futures.get(msg_id)
        if future is None:
            return
        if future.done():
            self._request_futures.pop(msg_id, None)
        else:
            future.add_done_callback(lambda _f, key=msg_id: self._forget(key))

    def _forget(self, key: Any) -> None:
        """Drop a finished notification's future, after the current callback: ``concurrent.futures`` runs done
        callbacks synchronously, and pygls' shutdown cancels futures while it iterates ``_request_futures``."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._request_futures.pop(key, None)
        else:
            loop.call_soon(self._request_futures.pop, key, None)

    def handle_message(self, message: Any) -> None:
        """After ``shutdown`` a request gets an InvalidRequest error (the LSP specification's answer): pygls
        drops it silently, and a client awaiting its response would wait until it gives up."""
        if not hasattr(
            message, "jsonrpc"
        ):  # a batch, a bare value, an object without `jsonrpc`: LSP has none
            logger.warning("ignored a message that is not a JSON-RPC object (%s)", type(message).__name__)
            return
        method = getattr(message, "method", "")
        if self._shutdown and method != "exit" and getattr(message, "id", None) is not None and method:
            self._send_response(
                message.id, error=JsonRpcInvalidRequest("server is shut down").to_response_error()
            )
            return
        super().handle_message(message)

    def _known_method(self, method: Any) -> bool:
        if not isinstance(method, str):
            return False
        served = method in self.fm.features or method in self.fm.builtin_features
        return served or method in types.METHOD_TO_TYPES

    def structure_message(self, data: Any) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "id" in data and "method" in data:
                method = data.get("method")
                if isinstance(exc, JsonRpcInternalError) and not self._known_method(method):
                    # a request of a method nobody serves, sent without `params` (optional in JSON-RPC): pygls
                    # fails to read it and answered InternalError; the answer is MethodNotFound
                    exc = JsonRpcMethodNotFound(f"method not found: {method}")
                logger.warning("rejected %s request %r: %s", method, data.get("id"), exc.message)
                self._send_response(data["id"], error=exc.to_response_error())
                return _Rejected()
            if isinstance(data, dict) and "method" in data:
                logger.warning("ignored malformed %s notification", data.get("method"))
                return _Rejected()
            raise


class NpuLintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "npu-lint",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=NpuLintProtocol,
        )
        self.init_settings = ServerSettings()
        self.settings = ServerSettings()
        self.pull_mode = False
        self.generation = 0  # bumped when settings or configuration files change
        self.config_support = False
        self.refresh_support = False
        self.can_create_files = False
        self.resolve_edits = False  # the client resolves a code action's `edit` lazily (codeAction/resolve)
        self._configs: dict[str, _Config] = {}
        self._projects: dict[str, Project | None] = {}
        self._results: dict[str, LintResult] = {}
        self._parses: dict[str, DocumentParse] = {}  # per open document: its last parse (``core.reparse``)
        self._lint_text: dict[str, tuple[str, int | None]] = {}  # onSave mode: text as of open / last save
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._lint_ms: dict[
            str, float
        ] = {}  # per document: moving average of its lint time (adaptive debounce)
        self._reported: set[str] = set()
        self._excluded: dict[tuple[object, ...], bool] = {}
        self.long_work = ForkRunner()  # fix-all runs in a forked child: the event loop keeps answering

    # -- paths, configuration, project ------------------------------------------------------------------

    def path_for(self, uri: str) -> str:
        try:
            path = to_fs_path(uri)
        except Exception:  # an undecodable URI: lint it under its name
            path = None
        if path and "\x00" in path:
            path = path.replace("\x00", "%00")  # a NUL cannot reach the file system (os.stat raises)
        if path:
            return os.path.abspath(path)
        root = self.workspace.root_path or os.getcwd()
        name = uri.rsplit("/", 1)[-1] or "untitled.py"
        return os.path.join(root, name)

    def is_python(self, uri: str, language_id: str | None) -> bool:
        return language_id == "python" or uri.endswith(PYTHON_SUFFIXES)

    def show_once(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        if message in self._reported:
            return
        self._reported.add(message)
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def config_for(self, path: str) -> Settings:
        """The CLI's configuration for ``path`` (nearest config file), cached per directory and re-read
        when the file's modification time changes."""
        directory = str(Path(path).parent)
        entry = self._configs.get(directory)
        if entry is not None and entry.config_path is not None:
            try:
                mtime = os.stat(entry.config_path).st_mtime_ns
            except OSError:
                mtime = None
            if mtime != entry.mtime_ns:
                entry = None
        if entry is None:
            try:
                found = find_config_file(Path(directory))
                if found is None:
                    entry = _Config(Settings(root=directory), None, None)
                else:
                    entry = _Config(load_config(found), str(found), os.stat(found).st_mtime_ns)
            except (ConfigError, OSError) as exc:
                self.show_once(f"npu-lint: {exc} (linting with the default settings)")
                entry = _Config(Settings(root=directory), None, None)
            self._configs[directory] = entry
        return entry.settings

    def effective(self, path: str) -> tuple[Settings, list[str]]:
        """Configuration with the editor's select / extendSelect / ignore applied, and the rule codes."""
        from npu_lint.rules.base import all_rules

        base = self.config_for(path)
        editor = self.settings
        # the command line's layering (cli.cmd_check): an editor `select` resets the file's selection,
        # including its ignore / extend-select; extendSelect and ignore add to what is there
        settings = replace(base)
        if editor.select is not None:
            settings.select = list(editor.select)
            settings.ignore = []
            settings.extend_select = []
        settings.extend_select = [*settings.extend_select, *editor.extend_select]
        settings.ignore = [*settings.ignore, *editor.ignore]
        known = {code: rule.default_enabled for code, rule in all_rules().items()}
        try:
            return settings, selected_codes(settings, known)
        except ConfigError as exc:
            self.show_once(f"npu-lint: {exc} (editor settings ignored)")
            try:
                return base, selected_codes(base, known)
            except ConfigError as exc2:
                self.show_once(f"npu-lint: {exc2}")
                return Settings(root=base.root), selected_codes(Settings(), known)

    def project_for(self, path: str, settings: Settings) -> Project | None:
        from npu_lint.veomni.project import find_veomni_root, load_project

        # one index per VeOmni root; outside one, the index depends on the file's own directory
        root = find_veomni_root(Path(path))
        key = str(root) if root is not None else str(Path(path).parent)
        if key not in self._projects:
            try:
                self._projects[key] = load_project([path], settings)
            except Exception as exc:  # the index is an aid; linting goes on without it
                self.log(f"npu-lint: cannot index the project at {key}: {type(exc).__name__}: {exc}")
                self._projects[key] = None
        return self._projects[key]

    def forget_project(self, path: str) -> None:
        from npu_lint.veomni.project import find_veomni_root

        root = find_veomni_root(Path(path))
        self._projects.pop(str(root) if root is not None else str(Path(path).parent), None)

    def excluded(self, path: str, settings: Settings) -> bool:
        """Whether the configuration excludes ``path`` (as ``npu-lint check --force-exclude`` would)."""
        if settings.config_path is None:
            return False
        key = (path, settings.config_path, tuple(settings.exclude), tuple(settings.extend_exclude))
        if key not in self._excluded:
            from npu_lint.core.discovery import is_excluded

            root = Path(settings.root).resolve()
            target = Path(path)
            try:
                target.resolve().relative_to(root)
            except ValueError:
                self._excluded[key] = False
            else:
                self._excluded[key] = is_excluded(target, settings, root)
        return self._excluded[key]

    # -- linting ---------------------------------------------------------------------------------------

    def project_version(self, path: str) -> str:
        """The state of the files a document's result depends on besides its own text: the other files of its
        model package (specs, `__init__.py` registrations) and of its `generated/` directory, and every file of
        its project's listing (`Project.tree_files`, with their directories: a file added or removed): names,
        sizes and modification times. The project's facts are derived from the whole listing (its import sites,
        NPU323's import closures through any module of the tree, the operators the tree defines, NPU308's
        on-demand imports), so an edit of any of its files builds the project again. The listing covers the
        registry modules (`veomni/ops`, `veomni/kernels`) and the helper modules (`veomni/**/utils`); without a
        project (not built yet, or the document excluded) those are listed here instead."""
        from npu_lint.veomni.project import find_veomni_root

        here = Path(path)
        package = here.parent.parent if here.parent.name == "generated" else here.parent
        root = find_veomni_root(here)
        me = os.path.abspath(path)
        seen: set[str] = {me}
        lines: list[str] = []  # hashed once at the end

        def add(file: str) -> None:
            if file in seen or not file.endswith(".py"):
                return
            seen.add(file)
            try:
                st = os.stat(file)
            except OSError:
                return
            lines.append(f"{file}\0{st.st_size}\0{st.st_mtime_ns}\n")

        for directory in (package, package / "generated"):
            try:
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            for name in names:
                add(os.path.join(directory, name))
        project = self._projects.get(str(root)) if root is not None else None
        if project is not None and project.tree_files:
            directories: set[str] = set()
            for file in project.tree_files:
                add(file)
                directories.add(os.path.dirname(file))
            for directory in sorted(directories):  # an entry added or removed changes its directory
                try:
                    st = os.stat(directory)
                except OSError:
                    lines.append(f"{directory}\0-\n")
                    continue
                lines.append(f"{directory}\0{st.st_mtime_ns}\n")
        elif root is not None:
            from npu_lint.veomni.layout import shared_module_files

            trees = [root / "veomni" / "ops", root / "veomni" / "kernels"]
            for tree in trees:
                for dirpath, dirnames, filenames in os.walk(tree):
                    dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
                    for name in sorted(filenames):
                        add(os.path.join(dirpath, name))
            # the tree's helper modules (a zero-argument implementation resolver NPU204 follows)
            for file in shared_module_files(root):
                add(file)
        return hashlib.blake2b("".join(lines).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()

    def lint(self, uri: str, text: str, version: int | None) -> LintResult:
        path = self.path_for(uri)
        settings, codes = self.effective(path)
        if not self.excluded(path, settings):
            self.project_for(path, settings)  # first: its listing is part of the version
        deps = self.project_version(path)
        cached = self._results.get(uri)
        if (
            cached is not None
            and cached.generation == self.generation
            and cached.text == text
            and cached.deps == deps
        ):
            cached.version = version
            return cached
        if cached is not None and cached.deps != deps:
            self.forget_project(path)  # a file of the project changed: index it again
            if not self.excluded(path, settings):
                self.project_for(path, settings)
                deps = self.project_version(path)  # the new index's listing (a file added or removed)
        src = SourceFile.from_text(path, text)
        project: Project | None = None
        diags: list[Diagnostic] = []
        if not self.excluded(path, settings):
            project = self.project_for(path, settings)
            try:
                start = time.perf_counter()
                reuse = self._parses.get(uri)
                if reuse is None:
                    reuse = self._parses[uri] = DocumentParse()
                diags = lint_source(src, codes, settings, project, reuse=reuse)
                diags.extend(self._project_diagnostics(src, codes, settings, project))
                self.measured(uri, (time.perf_counter() - start) * 1000)
            except Exception as exc:  # keep serving; say what happened
                logger.exception("linting %s failed", path)
                self.log(
                    f"npu-lint: internal error on {path}: {type(exc).__name__}: {exc}",
                    types.MessageType.Error,
                )
                diags = list(getattr(exc, "diagnostics", None) or [])  # a rule failed: the others' findings
        codec = self.workspace.position_codec
        lsp = [to_lsp_diagnostic(src, codec, d) for d in diags]
        result = LintResult(
            text, self.generation, version, src, diags, lsp, codes, settings, project, {}, deps=deps
        )
        self._results[uri] = result
        return result

    def _project_diagnostics(
        self, src: SourceFile, codes: list[str], settings: Settings, project: Project | None
    ) -> list[Diagnostic]:
        """Whole-tree rules read files from disk: their findings for this document are shown while the
        buffer matches the file on disk (on open and after a save)."""
        from npu_lint.engine import project_diagnostics
        from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules

        load_rule_modules()
        if not any(c in PROJECT_REGISTRY for c in codes):
            return []
        try:
            from npu_lint.core.safeio import read_regular

            on_disk = read_regular(src.path, limit=MAX_DISK_DOCUMENT)[0].decode("utf-8")
        except (OSError, UnicodeDecodeError, ValueError):
            return []
        if on_disk.replace("\r\n", "\n") != src.text.replace("\r\n", "\n"):
            return []
        target = os.path.abspath(src.path)
        found = project_diagnostics(project, [src.path], codes, settings, sources={src.path: src})
        return sorted((d for d in found if os.path.abspath(d.path) == target), key=Diagnostic.sort_key)

    def document_text(self, uri: str) -> tuple[str, int | None]:
        doc = self.workspace.get_text_document(uri)
        return doc.source, doc.version

    def diagnostics_text(self, uri: str) -> tuple[str, int | None]:
        """The text diagnostics are shown for: the buffer, or in onSave mode the text as of the last save."""
        if self.settings.run == RUN_ON_SAVE and uri in self._lint_text:
            return self._lint_text[uri]
        return self.document_text(uri)

    def lint_for_diagnostics(self, uri: str) -> LintResult:
        text, version = self.diagnostics_text(uri)
        return self.lint(uri, text, version)

    def diagnostics_with_fixes(self, result: LintResult) -> list[Diagnostic]:
        """The document's diagnostics with their fixes built. A plain lint defers expensive fixes
        (``Fix.deferred``: no edits yet); code actions need the edits, so the document is linted again in
        fix mode, once per text."""
        if result.with_fixes is None:
            if not any(d.fix is not None and d.fix.deferred for d in result.diagnostics):
                result.with_fixes = result.diagnostics
            else:
                fixed = lint_source(result.src, result.codes, result.settings, result.project, fix_mode=True)
                by_place = {(d.code, d.line, d.col, d.end_line, d.end_col): d for d in fixed}
                result.with_fixes = [
                    by_place.get((d.code, d.line, d.col, d.end_line, d.end_col), d)
                    for d in result.diagnostics
                ]
        return result.with_fixes

    async def diagnostics_with_fixes_off_loop(self, uri: str, result: LintResult) -> list[Diagnostic]:
        """``diagnostics_with_fixes``; for a long document (``long_lint``) the fix-mode lint runs in a forked
        child (``lsp.longwork``), so a quick fix on a large buffer does not stop the server answering others."""
        if result.with_fixes is not None or not self.long_lint(uri, result.text):
            return self.diagnostics_with_fixes(result)
        if not any(d.fix is not None and d.fix.deferred for d in result.diagnostics):
            return self.diagnostics_with_fixes(result)
        built = await self.long_work.run(lambda: self.diagnostics_with_fixes(result))
        if result.with_fixes is None:
            result.with_fixes = built
        return built

    def fix_all(self, result: LintResult, unsafe: bool) -> tuple[str, list[CreateFile]]:
        """Every applicable fix of the document, project-rule fixes (NPU501/502/504/505) included: the same
        orchestration as `npu-lint --fix` (``engine.fix_tree``), on the buffer's text, writing nothing."""
        if unsafe not in result.fixed:
            # the one fix orchestration (engine.fix_tree), on the buffer's text, writing nothing
            path = result.src.path
            done = fix_tree(
                [d.replace(path=path) for d in result.diagnostics],
                result.codes,
                result.settings,
                result.project,
                unsafe=unsafe,
                write=False,
                sources={path: result.src},
            )
            text = next((new for p, _old, new in done.changes if p == path), result.src.text)
            creates = [CreateFile(p, new) for p, _old, new in done.changes if p != path]
            result.fixed[unsafe] = (text, creates)
        return result.fixed[unsafe]

    def current_result(self, uri: str, text: str) -> LintResult | None:
        """The result ``lint`` would return for ``text`` without linting, if any."""
        cached = self._results.get(uri)
        if cached is None or cached.generation != self.generation or cached.text != text:
            return None
        return cached if cached.deps == self.project_version(self.path_for(uri)) else None

    async def fix_all_code_action(
        self, uri: str, text: str, version: int | None, unsafe: bool
    ) -> types.CodeAction | None:
        """The fix-all action for ``text``. Linting a large buffer and fixing it take seconds: unless the result
        is known, both run in a forked child (``lsp.longwork``), and the event loop answers other requests
        meanwhile. A failure is logged and yields no action."""
        cached = self.current_result(uri, text)
        try:
            if cached is not None and unsafe in cached.fixed:
                new_text, creates = cached.fixed[unsafe]
            elif cached is not None and not any(fix_applicable(d.fix, unsafe) for d in cached.diagnostics):
                return None
            else:

                def work() -> tuple[str, list[CreateFile]]:  # in the child
                    result = self.lint(uri, text, version)
                    if not any(fix_applicable(d.fix, unsafe) for d in result.diagnostics):
                        return result.src.text, []
                    return self.fix_all(result, unsafe)

                new_text, creates = await self.long_work.run(work)
                if cached is not None:
                    cached.fixed.setdefault(unsafe, (new_text, creates))
        except Exception as exc:
            logger.exception("fix-all failed")
            self.log(f"npu-lint: fix-all failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
            return None
        src = cached.src if cached is not None else SourceFile.from_text(self.path_for(uri), text)
        ctx = ActionContext(uri, version, src, self.workspace.position_codec, [], self.can_create_files)
        return fix_all_edit_action(ctx, new_text, creates, unsafe)

    # -- push ------------------------------------------------------------------------------------------

    def long_lint(self, uri: str, text: str) -> bool:
        """Whether linting ``text`` is long work (off the event loop): a large buffer, or a document whose
        lints took long."""
        return len(text) >= LONG_TEXT or self._lint_ms.get(uri, 0.0) >= LONG_LINT_MS

    async def lint_off_loop(self, uri: str, text: str, version: int | None) -> LintResult:
        """``lint``, with the linting of a long document in a forked child (``lsp.longwork``): the event loop
        answers other requests meanwhile. The child sends back the diagnostics; the result is kept as
        ``lint`` keeps it, with this process's project index."""
        if not self.long_lint(uri, text):
            return self.lint(uri, text, version)
        cached = self.current_result(uri, text)
        if cached is not None:
            cached.version = version
            return cached
        generation, path = self.generation, self.path_for(uri)

        def work() -> tuple[list[Diagnostic], list[types.Diagnostic], list[str], Settings, str, float]:
            start = time.perf_counter()
            done = self.lint(uri, text, version)
            return (
                done.diagnostics,
                done.lsp,
                done.codes,
                done.settings,
                done.deps,
                time.perf_counter() - start,
            )

        diags, lsp, codes, settings, deps, seconds = await self.long_work.run(work)
        self.measured(uri, seconds * 1000)
        previous = self._results.get(uri)
        if previous is not None and previous.deps != deps:
            self.forget_project(path)  # as `lint` does: a spec, generated or registry file changed
        project = None if self.excluded(path, settings) else self.project_for(path, settings)
        src = SourceFile.from_text(path, text)
        result = LintResult(
            text, generation, version, src, diags, lsp, codes, settings, project, {}, deps=deps
        )
        if generation == self.generation:
            self._results[uri] = result
        return result

    def publish(self, uri: str) -> None:
        text, _version = self.diagnostics_text(uri)
        if self.long_lint(uri, text) and self.current_result(uri, text) is None:
            self.cancel_pending(uri)  # a newer change, a close or a relint cancels it (and kills its child)
            self._pending[uri] = asyncio.ensure_future(self._publish_off_loop(uri))
            return
        start = time.perf_counter()
        try:
            result = self.lint_for_diagnostics(uri)
        except Exception as exc:
            logger.exception("diagnostics for %s failed", uri)
            self.log(f"npu-lint: internal error: {type(exc).__name__}: {exc}", types.MessageType.Error)
            return
        linted = time.perf_counter()
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=result.lsp, version=result.version)
        )
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "published %d diagnostics for %s v%s: lint %.1f ms, send %.1f ms",
                len(result.lsp),
                uri,
                result.version,
                (linted - start) * 1000,
                (time.perf_counter() - linted) * 1000,
            )

    async def _publish_off_loop(self, uri: str) -> None:
        text, version = self.diagnostics_text(uri)
        try:
            result = await self.lint_off_loop(uri, text, version)
        except asyncio.CancelledError:
            return
        except Exception as exc:
            logger.exception("diagnostics for %s failed", uri)
            self.log(f"npu-lint: internal error: {type(exc).__name__}: {exc}", types.MessageType.Error)
            return
        finally:
            if self._pending.get(uri) is asyncio.current_task():
                del self._pending[uri]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=result.lsp, version=result.version)
        )

    def cancel_pending(self, uri: str) -> None:
        task = self._pending.pop(uri, None)
        if task is not None:
            task.cancel()

    def measured(self, uri: str, ms: float) -> None:
        """Record one lint of ``uri`` (an exponential moving average: one slow lint does not set the pace)."""
        last = self._lint_ms.get(uri)
        self._lint_ms[uri] = ms if last is None else 0.7 * last + 0.3 * ms
        if len(self._lint_ms) > 256:  # bounded: the oldest documents are forgotten
            del self._lint_ms[next(iter(self._lint_ms))]

    def debounce(self, uri: str) -> float:
        """Seconds to wait after a change before linting ``uri`` (push mode). A configured ``lint.debounce``
        is used as given; otherwise the delay adapts to the document's measured lint time, between
        ADAPTIVE_MIN_MS and DEFAULT_DEBOUNCE_MS: a short lint runs on the event loop, so waiting at least as
        long as one lint takes keeps a typing burst from spending more than half the time linting, while a
        cheap document is answered almost at once."""
        if self.settings.debounce_ms is not None:
            return self.settings.debounce_ms / 1000
        ms = self._lint_ms.get(uri)
        if ms is None:
            return DEFAULT_DEBOUNCE_MS / 1000
        return min(max(ms, ADAPTIVE_MIN_MS), DEFAULT_DEBOUNCE_MS) / 1000

    def schedule(self, uri: str) -> None:
        """Publish after the debounce delay; a newer change cancels the pending run."""
        self.cancel_pending(uri)
        self._pending[uri] = asyncio.ensure_future(self._publish_later(uri, self.debounce(uri)))

    async def _publish_later(self, uri: str, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            return
        if self._pending.get(uri) is asyncio.current_task():
            del self._pending[uri]
        if self.open_document(uri) is not None:
            self.publish(uri)

    def open_document(self, uri: str) -> TextDocument | None:
        """The open document ``uri`` names. pygls files documents under the percent-decoded URI
        (``file:///a%20b/m.py`` as ``file:///a b/m.py``): looked up by the client's own spelling, a document
        in a directory with a space (or any non-ASCII name) was never found again after ``didOpen``."""
        docs = self.workspace.text_documents
        return docs.get(uri) or docs.get(unquote(uri))

    def open_python_documents(self) -> list[str]:
        """The client's URIs (``doc.uri``, not pygls' decoded keys) of the open Python documents."""
        return [
            doc.uri
            for doc in self.workspace.text_documents.values()
            if self.is_python(doc.uri, doc.language_id)
        ]

    def refresh_open_documents(self, skip: str | None = None) -> None:
        """Another file changed (a spec, a generated file, a registration): show each open document's
        diagnostics again; a document whose project version did not change keeps its result (``lint``)."""
        if self.pull_mode:
            if self.refresh_support:
                self.workspace_diagnostic_refresh(None)
            return
        for uri in self.open_python_documents():
            if uri != skip and uri not in self._pending:
                self.publish(uri)

    def relint_all(self) -> None:
        self.generation += 1
        self._results.clear()
        if self.pull_mode:
            if self.refresh_support:
                self.workspace_diagnostic_refresh(None)
            return
        for uri in self.open_python_documents():
            self.cancel_pending(uri)
            self.publish(uri)

    # -- settings --------------------------------------------------------------------------------------

    def apply_settings(self, new: ServerSettings) -> None:
        for problem in new.problems:
            self.show_once(problem, types.MessageType.Warning)
        old = self.settings
        self.settings = new
        if new != old:
            self.relint_all()

    async def pull_configuration(self) -> None:
        if not self.config_support:
            return
        try:
            result = await self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
            )
        except Exception as exc:
            self.log(f"npu-lint: workspace/configuration failed: {exc}", types.MessageType.Warning)
            return
        data = result[0] if result else None
        self.apply_settings(
            merge_settings(self.init_settings, data) if isinstance(data, dict) else self.init_settings
        )

    def forget_configuration(self) -> None:
        self._configs.clear()
        self._projects.clear()


def _capability(obj: Any, *names: str) -> Any:
    for name in names:
        if obj is None:
            return None
        obj = getattr(obj, name, None)
    return obj


def create_server() -> NpuLintServer:
    server = NpuLintServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: NpuLintServer, params: types.InitializeParams) -> None:
        caps = params.capabilities
        _use_lsp_lines(ls.workspace)
        ls.init_settings = settings_from_init_options(params.initialization_options)
        ls.settings = ls.init_settings
        ls.config_support = bool(_capability(caps, "workspace", "configuration"))
        ls.refresh_support = bool(_capability(caps, "workspace", "diagnostics", "refresh_support"))
        ops = _capability(caps, "workspace", "workspace_edit", "resource_operations") or []
        ls.can_create_files = types.ResourceOperationKind.Create in ops or "create" in ops
        resolvable = _capability(caps, "text_document", "code_action", "resolve_support", "properties") or []
        ls.resolve_edits = "edit" in resolvable
        ls.pull_mode = _capability(caps, "text_document", "diagnostic") is not None
        if ls.pull_mode:
            ls.feature(
                types.TEXT_DOCUMENT_DIAGNOSTIC,
                types.DiagnosticOptions(
                    identifier=SECTION, inter_file_dependencies=False, workspace_diagnostics=False
                ),
            )(document_diagnostic)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: NpuLintServer, params: types.InitializedParams) -> None:
        for problem in ls.init_settings.problems:
            ls.show_once(problem, types.MessageType.Warning)
        caps = ls.client_capabilities
        registrations = []
        if _capability(caps, "workspace", "did_change_watched_files", "dynamic_registration"):
            watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in CONFIG_NAMES]
            # the files other documents' results depend on: specs, generated files, registrations, registry
            watchers += [types.FileSystemWatcher(glob_pattern=g) for g in DEPENDENCY_GLOBS]
            registrations.append(
                types.Registration(
                    id="npu-lint-config-files",
                    method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                    register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=watchers),
                )
            )
        if _capability(caps, "workspace", "did_change_configuration", "dynamic_registration"):
            registrations.append(
                types.Registration(
                    id="npu-lint-configuration", method=types.WORKSPACE_DID_CHANGE_CONFIGURATION
                )
            )
        if registrations:
            try:
                await ls.client_register_capability_async(
                    types.RegistrationParams(registrations=registrations)
                )
            except Exception as exc:
                ls.log(f"npu-lint: capability registration failed: {exc}", types.MessageType.Warning)
        await ls.pull_configuration()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: NpuLintServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        if not ls.is_python(doc.uri, doc.language_id):
            return
        ls._lint_text[doc.uri] = (doc.text, doc.version)
        if not ls.pull_mode:
            ls.publish(doc.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: NpuLintServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        doc = ls.open_document(uri)
        if doc is None or not ls.is_python(uri, doc.language_id):
            return
        if ls.pull_mode or ls.settings.run == RUN_ON_SAVE:
            return
        ls.schedule(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: NpuLintServer, params: types.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri.endswith(CONFIG_NAMES):
            ls.forget_configuration()
            ls.relint_all()
            return
        doc = ls.open_document(uri)
        if doc is None or not ls.is_python(uri, doc.language_id):
            return
        ls._lint_text[uri] = (doc.source, doc.version)
        # other files' specs, registrations... may have changed: rebuild the project index lazily
        ls._projects.clear()
        ls._results.pop(uri, None)
        if ls.pull_mode:
            if ls.refresh_support:  # this document (onSave mode) and the ones that depend on it
                ls.workspace_diagnostic_refresh(None)
            return
        ls.cancel_pending(uri)
        ls.publish(uri)
        ls.refresh_open_documents(skip=uri)  # the saved file may be another document's spec or registration

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: NpuLintServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.cancel_pending(uri)
        ls._results.pop(uri, None)
        ls._parses.pop(uri, None)
        ls._lint_text.pop(uri, None)
        ls._lint_ms.pop(uri, None)
        if not ls.pull_mode:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    async def document_diagnostic(
        ls: NpuLintServer, params: types.DocumentDiagnosticParams
    ) -> types.RelatedFullDocumentDiagnosticReport | types.RelatedUnchangedDocumentDiagnosticReport:
        uri = params.text_document.uri
        doc = ls.open_document(uri)
        if doc is None or not ls.is_python(uri, doc.language_id):
            return types.RelatedFullDocumentDiagnosticReport(items=[])
        result = await ls.lint_off_loop(uri, *ls.diagnostics_text(uri))
        if params.previous_result_id is not None and params.previous_result_id == result.result_id:
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result.result_id)
        return types.RelatedFullDocumentDiagnosticReport(items=result.lsp, result_id=result.result_id)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: NpuLintServer, params: types.DidChangeConfigurationParams) -> None:
        if ls.config_support:
            await ls.pull_configuration()
            return
        data = params.settings
        if isinstance(data, dict) and isinstance(data.get(SECTION), dict):
            data = data[SECTION]
        ls.apply_settings(
            merge_settings(ls.init_settings, data) if isinstance(data, dict) else ls.init_settings
        )

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: NpuLintServer, params: types.DidChangeWatchedFilesParams) -> None:
        if any(change.uri.endswith(CONFIG_NAMES) for change in params.changes):
            ls.forget_configuration()
            ls.relint_all()
        elif any(change.uri.endswith(PYTHON_SUFFIXES) for change in params.changes):
            ls.refresh_open_documents()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND], resolve_provider=True
        ),
    )
    async def code_action(ls: NpuLintServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        uri = params.text_document.uri
        doc = ls.open_document(uri)
        if doc is None or not ls.is_python(uri, doc.language_id):
            return None
        text, version = ls.document_text(uri)
        only = params.context.only
        if only and not kind_requested(types.CodeActionKind.QuickFix, only):  # fix-all only: off the loop
            if not ls.settings.fix_all or not kind_requested(FIX_ALL_KIND, only):
                return []
            fix_all = await ls.fix_all_code_action(uri, text, version, ls.settings.unsafe_fixes)
            return [fix_all] if fix_all is not None else []
        # fixes always apply to the buffer as it is now; a long document is linted off the event loop
        result = await ls.lint_off_loop(uri, text, version)
        codec = ls.workspace.position_codec
        ctx = ActionContext(uri, version, result.src, codec, result.diagnostics, ls.can_create_files)
        actions: list[types.CodeAction] = []
        if kind_requested(types.CodeActionKind.QuickFix, only):
            start = offset_of_client_position(result.src, codec, params.range.start)
            end = offset_of_client_position(result.src, codec, params.range.end)
            wanted = {
                (d.code, d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character)
                for d in params.context.diagnostics
                if d.source == SECTION
            }
            chosen: list[int] = []
            for index, (diag, lsp_diag) in enumerate(zip(result.diagnostics, result.lsp, strict=True)):
                d_start = result.src.offset(diag.line, diag.col)
                d_end = result.src.offset(diag.end_line, diag.end_col)
                key = (
                    diag.code,
                    lsp_diag.range.start.line,
                    lsp_diag.range.start.character,
                    lsp_diag.range.end.line,
                    lsp_diag.range.end.character,
                )
                if key in wanted or (d_start <= end and start <= d_end):
                    chosen.append(index)
            diags = result.diagnostics
            if any(diags[i].fix is not None and diags[i].fix.deferred for i in chosen):
                diags = await ls.diagnostics_with_fixes_off_loop(uri, result)
            actions.extend(
                diagnostic_actions(ctx, [diags[i] for i in chosen], ls.settings.show_disable_action)
            )
        if ls.settings.fix_all and not only and result.diagnostics and ls.resolve_edits:
            # a general request (the lightbulb): the fix-all edit is built when the action is chosen
            action = fix_all_placeholder(ctx, ls.settings.unsafe_fixes)
            if action is not None:
                actions.append(action)
        elif ls.settings.fix_all and kind_requested(FIX_ALL_KIND, only) and (only or result.diagnostics):
            action = await ls.fix_all_code_action(uri, text, version, ls.settings.unsafe_fixes)
            if action is not None:
                actions.append(action)
        return actions

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve_code_action(ls: NpuLintServer, action: types.CodeAction) -> types.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        uri = data.get("uri")
        if not data.get("fixAll") or not isinstance(uri, str) or ls.open_document(uri) is None:
            return action
        text, version = ls.document_text(uri)
        full = await ls.fix_all_code_action(uri, text, version, bool(data.get("unsafe")))
        # nothing left to fix (the document changed meanwhile): an empty edit
        action.edit = full.edit if full is not None else types.WorkspaceEdit(changes={uri: []})
        return action

    return server


def run_server(args: argparse.Namespace | None = None) -> int:
    """Serve over stdio until the client exits."""
    verbose = bool(getattr(args, "verbose", False))
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    use_scan_store()
    server = create_server()
    return _start_io(server)


def use_scan_store() -> None:
    """Keep the project scans in memory for the server's life: a project index forgotten after a spec or
    registration edit is rebuilt from the files whose stat keys changed, not from a re-read of the tree."""
    from npu_lint.veomni.scanstore import MemoryStore, use_store

    use_store(MemoryStore())


class _BoundedStdin:
    """pygls' ``StdinAsyncReader`` with a bounded ``readline`` (a header line is short: a stream without line
    breaks is read 64 KiB at a time, never into one unbounded buffer)."""

    def __init__(self, stdin: Any, executor: Any) -> None:
        self.stdin = stdin
        self.executor = executor

    async def readline(self) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.stdin.readline, 1 << 16)

    async def readexactly(self, n: int) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.stdin.read, n)


def _start_io(server: NpuLintServer) -> int:
    """pygls' stdio loop with ``ResyncReader`` (recovers from a wrong ``Content-Length``)."""
    import threading

    from pygls.io_ import StdoutWriter, run_async

    server._stop_event = stop = threading.Event()  # type: ignore[attr-defined]
    server.protocol.set_writer(StdoutWriter(sys.stdout.buffer))
    reader = ResyncReader(_BoundedStdin(sys.stdin.buffer, server.thread_pool))
    code = 0
    try:
        asyncio.run(run_async(stop, reader, server.protocol, logger, server.report_server_error))
    except BrokenPipeError:
        logger.error("the client closed the connection")
    except KeyboardInterrupt:
        pass
    except SystemExit as exc:  # the `exit` notification: 1 when no `shutdown` request came first (LSP spec)
        code = (
            exc.code
            if isinstance(exc.code, int)
            else 0
            if getattr(server.protocol, "_shutdown", False)
            else 1
        )
    finally:
        server.long_work.kill_all()
        server.shutdown()
    return code
