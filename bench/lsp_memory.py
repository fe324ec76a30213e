"""Server memory under many edits: RSS of `npu-lint server` after 0 / 5k / 10k / 15k `didChange`s.

    .venv/bin/python bench/lsp_memory.py [EDITS]

One document, incremental one-character edits (an editor typing), debounce 0. A request after each batch
makes sure the server has handled every edit before RSS is read. Prints a Markdown table.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

_spec = importlib.util.spec_from_file_location("lsp_raw", Path(__file__).with_name("lsp_raw.py"))
lsp_raw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lsp_raw)  # type: ignore[union-attr]

TEXT = "import torch\n\n\ndef f(model):\n    return model.cuda()\n\n# notes: \n"


def measure(edits: int = 15000, steps: int = 3) -> list[tuple[int, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "npu-lint.toml").write_text("")
        client = lsp_raw.RawClient(root)
        client.initialize()
        uri = (root / "m.py").as_uri()
        client.open(uri, TEXT)
        client.diagnostics_for(uri)
        rows = []
        version = 1
        col = len("# notes: ")
        per_step = edits // steps
        sync = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 0}}
        for step in range(steps + 1):
            client.request("textDocument/hover", sync, timeout=300)
            rows.append((step * per_step, client.rss_kib()))
            if step == steps:
                break
            for _ in range(per_step):
                version += 1
                line, char = 6, col
                col += 1
                if col > 200:  # a new line now and then, as when typing
                    change = {"range": _range(line, char), "text": "\n# notes: "}
                    col = len("# notes: ")
                    line += 1
                else:
                    change = {"range": _range(line, char), "text": "x"}
                client.notify(
                    "textDocument/didChange",
                    {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]},
                )
                if col == len("# notes: "):  # keep the document small: drop the line typed
                    version += 1
                    client.notify(
                        "textDocument/didChange",
                        {
                            "textDocument": {"uri": uri, "version": version},
                            "contentChanges": [
                                {
                                    "range": {
                                        "start": {"line": 6, "character": 0},
                                        "end": {"line": 7, "character": 0},
                                    },
                                    "text": "",
                                }
                            ],
                        },
                    )
            # drain pushed diagnostics so the client side does not grow
            while not client.messages.empty():
                client.messages.get_nowait()
        client.close()
        return rows


def _range(line: int, char: int) -> dict:
    return {"start": {"line": line, "character": char}, "end": {"line": line, "character": char}}


def main() -> None:
    edits = int(sys.argv[1]) if len(sys.argv) > 1 else 15000
    rows = measure(edits)
    base = rows[0][1]
    print("| didChange | RSS (MiB) | growth (KiB) | KiB / edit |")
    print("|---:|---:|---:|---:|")
    for n, rss in rows:
        per = (rss - base) / n if n else 0.0
        print(f"| {n} | {rss / 1024:.1f} | {rss - base} | {per:.2f} |")


if __name__ == "__main__":
    main()
