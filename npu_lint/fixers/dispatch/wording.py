"""Comments, banners, descriptions and docstrings that still describe the OpSlot mechanism, reworded for handles."""

from __future__ import annotations

import ast
import re

from npu_lint.fixers.dispatch.spec import const_str

# ----------------------------------------------------------------------------------------------------
# the NPU sibling that re-registers the GPU spec's patch functions
# ----------------------------------------------------------------------------------------------------
_WORDING = (
    ("via the OpSlot guard", "via its {handle} handle"),
    ("an OpSlot guard", "a {handle} dispatch"),
    ("OpSlot guards", "{handle} handles"),
    ("OpSlot-based", "{handle}-based"),
    ("OpSlot guard for", "{handle} dispatch for"),
    ("OpSlot guard", "{handle} dispatch"),
    ("via OpSlot", "via {handle}"),
    ("with OpSlot", "with {handle}"),
    ("OpSlot factory wrappers", "{handle} wrappers"),
    ("at OpSlot.bind() time", "when its {handle} is built"),  # a handle resolves its row at construction
    ("`` OpSlot;", "`` {handle} handle;"),
)
# whole sentences (in docstrings, across lines) about when the OpSlot was bound: the handle is built in __init__
_SENTENCES = (
    (
        re.compile(
            r"The OpSlot is bound by\s+``_bind_veomni_ops``\s+after\s+model\s+construction;\s+eager\s+mode\s+falls"
            r"\s+through\s+to\s+the\s+standard\s+expert\s+loop\s+below\."
        ),
        "The handle is built in ``__init__``; its eager row is the standard expert loop.",
    ),
)


def refresh_wording(text: str, handle: str) -> str:
    """Comments, section banners and the module docstring that still describe the OpSlot mechanism, reworded
    for ``handle`` (a banner ``# ── title ───`` keeps its width)."""
    import io
    import tokenize

    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    lines = text.splitlines(keepends=True)
    first_stmt = next(
        (t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)), None
    )
    significant = [t for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
    descriptions = {
        id(significant[i])
        for i in range(2, len(significant))
        if significant[i].type == tokenize.STRING
        and (
            (significant[i - 1].string == "=" and significant[i - 2].string == "description")
            or (significant[i - 1].string == "(" and significant[i - 2].string == "add_post_import_block")
        )
    }
    try:
        doc_rows = {
            node.body[0].lineno
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and const_str(node.body[0].value) is not None
        }
    except SyntaxError:
        doc_rows = set()
    for tok in tokens:
        is_doc = (
            (tok is first_stmt and tok.type == tokenize.STRING)
            or id(tok) in descriptions
            or (tok.type == tokenize.STRING and tok.start[0] in doc_rows)
        )
        if tok.type != tokenize.COMMENT and not is_doc:
            continue
        if tok.type == tokenize.STRING and any(p.search(tok.string) for p, _ in _SENTENCES):
            (srow, scol), (erow, ecol) = tok.start, tok.end
            new_tok = tok.string
            for pattern, repl in _SENTENCES:
                new_tok = pattern.sub(repl, new_tok)
            for old, repl in _WORDING:
                new_tok = new_tok.replace(old, repl.format(handle=handle))
            head, tail = lines[srow - 1][:scol], lines[erow - 1][ecol:]
            replaced = (head + new_tok + tail).splitlines(keepends=True)
            lines[srow - 1 : erow] = replaced + [""] * (erow - srow + 1 - len(replaced))
            continue
        (srow, scol), (erow, ecol) = tok.start, tok.end
        for row in range(srow, erow + 1):
            line = lines[row - 1]
            start = scol if row == srow else 0
            end = ecol if row == erow else len(line.rstrip("\r\n"))
            segment = line[start:end]
            new = segment
            for old, repl in _WORDING:
                new = new.replace(old, repl.format(handle=handle))
            if new == segment:
                continue
            banner = re.match(r"(#\s*─+ .*? )(─+)$", segment)
            if banner and tok.type == tokenize.COMMENT:
                head = re.match(r"(#\s*─+ .*? )(─+)$", new)
                if head:
                    fill = max(2, len(segment) - len(head.group(1)))
                    new = head.group(1) + "─" * fill
            lines[row - 1] = line[:start] + new + line[end:]
    return "".join(lines)
