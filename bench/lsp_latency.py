"""Latency of ``npu-lint server``: from ``didChange`` to diagnostics, on a 2,500-line generated-style file.

Starts the server over stdio as an editor would (``python -m npu_lint server``), with a push-only client and
``lint.debounce = 0``, opens a generated modeling file of about 2,500 lines (a VeOmni patchgen banner, then
modeling classes, some with ``.cuda()`` calls), and sends small incremental edits; each sample is the wall time
from sending ``textDocument/didChange`` to receiving the ``publishDiagnostics`` of that version. A pull-mode
client (``textDocument/diagnostic`` after each change) and the in-process ``lint_source`` time are measured
for comparison. Target: median <= 150 ms.

    PYTHONPATH=. python bench/lsp_latency.py [--lines 2500] [--samples 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 150.0
REL_PATH = "veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py"

BANNER = """\
# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.toy.modeling_toy
# Based on: transformers==5.9.0
# ======================================================================

import math

import torch
from torch import nn
import torch.nn.functional as F

"""

BLOCK = '''

# ======================================================================
# [MODIFIED CLASS] ToyBlock{i}
# ======================================================================
class ToyBlock{i}Attention(nn.Module):
    """Attention of block {i}."""

    def __init__(self, hidden_size, num_heads, eps=1e-6):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def norm(self, hidden_states: torch.Tensor) -> torch.Tensor:
        variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return self.weight * hidden_states

    def forward(self, hidden_states: torch.Tensor, attention_mask=None):
        bsz, q_len, _ = hidden_states.size()
        query = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key = self.k_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        value = self.v_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(query, key.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            scores = scores + attention_mask
        causal = torch.ones(q_len, q_len).tril().cuda()
        scores = scores.masked_fill(causal == 0, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        out = torch.matmul(probs, value).transpose(1, 2).reshape(bsz, q_len, -1)
        return self.o_proj(self.norm(out))


def build_block_{i}(config):
    block = ToyBlock{i}Attention(config.hidden_size, config.num_attention_heads)
    return block.cuda()
'''


def generated_text(lines: int) -> str:
    parts = [BANNER]
    i = 0
    while sum(p.count("\n") for p in parts) < lines:
        parts.append(BLOCK.format(i=i))
        i += 1
    return "".join(parts)


class BenchClient(LanguageClient):
    def __init__(self) -> None:
        super().__init__("npu-lint-bench", "1")
        self.waiters: dict[tuple[str, int | None], asyncio.Future[float]] = {}
        self.counts: dict[int | None, int] = {}

        @self.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            now = time.perf_counter()
            self.counts[params.version] = len(params.diagnostics)
            waiter = self.waiters.pop((params.uri, params.version), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(now)

        @self.feature(types.WORKSPACE_CONFIGURATION)
        def configuration(params: types.ConfigurationParams) -> list[object]:
            return [None for _ in params.items]

        @self.feature(types.CLIENT_REGISTER_CAPABILITY)
        def register(params: types.RegistrationParams) -> None:
            return None


def _capabilities(pull: bool) -> types.ClientCapabilities:
    text = types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
        diagnostic=types.DiagnosticClientCapabilities() if pull else None,
    )
    return types.ClientCapabilities(
        text_document=text, workspace=types.WorkspaceClientCapabilities(configuration=True)
    )


def _edit(uri: str, version: int, line: int, old: str, new: str) -> types.DidChangeTextDocumentParams:
    """Replace the first len(old) characters of ``line`` (ASCII) with ``new``."""
    return types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[
            types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, 0), types.Position(line, len(old))), text=new
            )
        ],
    )


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def measure(path: Path, text: str, samples: int, pull: bool) -> tuple[list[float], int, float | None]:
    client = BenchClient()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    await client.start_io(sys.executable, "-m", "npu_lint", "server", env=env)
    root = path.parents[len(Path(REL_PATH).parts) - 1]
    await client.initialize_async(
        types.InitializeParams(
            capabilities=_capabilities(pull),
            root_uri=root.as_uri(),
            initialization_options={"settings": {"lint": {"debounce": 0}}},
        )
    )
    client.initialized(types.InitializedParams())
    uri = path.as_uri()
    loop = asyncio.get_running_loop()
    ident = types.TextDocumentIdentifier(uri=uri)
    if not pull:
        client.waiters[(uri, 1)] = loop.create_future()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    if pull:
        report = await client.text_document_diagnostic_async(
            types.DocumentDiagnosticParams(text_document=ident)
        )
        found = len(report.items)
    else:
        await asyncio.wait_for(client.waiters[(uri, 1)], 30)
        found = client.counts[1]
    # a comment line in the middle of the file is edited back and forth
    lines = text.splitlines()
    target = next(i for i in range(len(lines) // 2, len(lines)) if lines[i].startswith("# [MODIFIED CLASS]"))
    old, new = "# [MODIFIED CLASS]", "# [MODIFIED CLASS*"
    times: list[float] = []
    server = getattr(client, "_server", None)
    pid = server.pid if server is not None else None
    cpu_before = None
    for n in range(samples + 3):  # the first three warm up
        if n == 3 and pid is not None:
            cpu_before = cpu_seconds(pid)
        version = n + 2
        params = _edit(uri, version, target, old, new)
        old, new = new, old
        if pull:
            start = time.perf_counter()
            client.text_document_did_change(params)
            await client.text_document_diagnostic_async(types.DocumentDiagnosticParams(text_document=ident))
            end = time.perf_counter()
        else:
            waiter = loop.create_future()
            client.waiters[(uri, version)] = waiter
            start = time.perf_counter()
            client.text_document_did_change(params)
            end = await asyncio.wait_for(waiter, 30)
        if n >= 3:
            times.append((end - start) * 1000)
    cpu_after = cpu_seconds(pid) if pid is not None else None
    cpu_ms = None
    if cpu_before is not None and cpu_after is not None:
        cpu_ms = (cpu_after - cpu_before) * 1000 / samples
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times, found, cpu_ms


def in_process(path: Path, text: str, samples: int, edited: bool = False) -> list[float]:
    """``lint_source`` of the same text ``samples`` times; ``edited``: as the server lints the document, with
    its last parse (``core.reparse``) and the bench's comment edit alternated."""
    sys.path.insert(0, str(REPO))
    from npu_lint.core.config import Settings, selected_codes
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source
    from npu_lint.rules.base import all_rules

    known = {code: rule.default_enabled for code, rule in all_rules().items()}
    settings = Settings(root=str(path.parent))
    codes = selected_codes(settings, known)
    texts = [text, text]
    reuse = None
    if edited:
        from npu_lint.core.reparse import DocumentParse

        reuse = DocumentParse()
        lines = text.split("\n")  # the line `measure` edits
        target = next(
            i for i in range(len(lines) // 2, len(lines)) if lines[i].startswith("# [MODIFIED CLASS]")
        )
        lines[target] = lines[target].replace("# [MODIFIED CLASS]", "# [MODIFIED CLASS*")
        texts[1] = "\n".join(lines)
        lint_source(SourceFile.from_text(str(path), text), codes, settings, reuse=reuse)
    out = []
    for n in range(samples):
        start = time.perf_counter()
        lint_source(SourceFile.from_text(str(path), texts[(n + 1) % 2]), codes, settings, reuse=reuse)
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return (
        f"{name:<34} median {statistics.median(times):7.1f} ms   p90 {p90:7.1f} ms   "
        f"min {ordered[0]:7.1f} ms   max {ordered[-1]:7.1f} ms   (n={len(times)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2500)
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args()
    text = generated_text(args.lines)
    with tempfile.TemporaryDirectory(prefix="npu-lint-lsp-bench-") as tmp:
        path = Path(tmp) / REL_PATH
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
        (Path(tmp) / "pyproject.toml").write_text("[tool.npu-lint]\n", encoding="utf-8")
        push, found, push_cpu = asyncio.run(measure(path, text, args.samples, pull=False))
        pull, _, pull_cpu = asyncio.run(measure(path, text, args.samples, pull=True))
        lint = in_process(path, text, args.samples)
        edited = in_process(path, text, args.samples, edited=True)
    print(f"file: {text.count(chr(10))} lines, {len(text)} characters (generated-style), {found} diagnostics")
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(summary("push: didChange -> publish", push))
    print(summary("pull: didChange + diagnostic", pull))
    print(summary("in-process lint_source", lint))
    print(summary("in-process, edited, document parse", edited))
    for name, cpu in (("push", push_cpu), ("pull", pull_cpu)):
        if cpu is not None:
            print(f"server CPU time per change ({name}): {cpu:.1f} ms")
    verdict = "OK" if statistics.median(push) <= TARGET_MS else "OVER TARGET"
    print(f"target: median didChange -> diagnostics <= {TARGET_MS:.0f} ms: {verdict}")
    return 0 if verdict == "OK" else 1


if __name__ == "__main__":
    sys.exit(main())
