"""``junit`` format: JUnit XML for CI test report viewers.

One ``<testcase>`` per file with diagnostics (named after the path relative to the project root) holding one
``<failure>`` per diagnostic; with no diagnostics, a single passing testcase named ``npu-lint``.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from npu_lint.core.diagnostics import Diagnostic, display_path
from npu_lint.report import RenderContext

SUITE_NAME = "npu-lint"

# Characters XML 1.0 does not allow anywhere in a document.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def _name(path: str, ctx: RenderContext) -> str:
    rel = ctx.relpath(path)
    return display_path((rel if rel is not None else path).replace(os.sep, "/"))


def render_junit(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> str:
    by_file: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        by_file.setdefault(_name(d.path, ctx), []).append(d)

    tests = max(len(by_file), 1)
    failures = len(by_file)  # failed testcases (one per file with diagnostics)
    counts = {"tests": str(tests), "failures": str(failures), "errors": "0", "skipped": "0"}
    suites = ET.Element("testsuites", {"name": SUITE_NAME, **counts})
    suite = ET.SubElement(suites, "testsuite", {"name": SUITE_NAME, **counts})
    if not by_file:
        ET.SubElement(suite, "testcase", {"name": SUITE_NAME, "classname": SUITE_NAME})
    for name, items in by_file.items():
        case = ET.SubElement(suite, "testcase", {"name": _clean(name), "classname": SUITE_NAME})
        for d in items:
            text = f"{d.line}:{d.col + 1}: {d.code} {d.message}"
            if d.origin is not None:
                origin = f"{_name(d.origin.path, ctx)}:{d.origin.line}"
                text += f" (origin: {origin}{' ' + d.origin.note if d.origin.note else ''})"
            failure = ET.SubElement(
                case, "failure", {"message": _clean(f"{d.code} {d.message}"), "type": d.code}
            )
            failure.text = _clean(text)
    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body + "\n"
