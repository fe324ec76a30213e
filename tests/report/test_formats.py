"""Tests of the output formats in ``npu_lint.report``, on hand-built diagnostics."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for

from npu_lint import DOCS_URL, INFO_URL, __version__
from npu_lint.core.diagnostics import (
    SEVERITY_ERROR,
    Applicability,
    CreateFile,
    Diagnostic,
    Edit,
    Fix,
    Origin,
)
from npu_lint.report import FORMATS, render, utf16_column

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "data" / "sarif-schema-2.1.0.json"

LINE1 = "import torch"
LINE2 = 'x = "héllo😀"; y.cuda()'  # é is one code point, 😀 is one code point but two UTF-16 units
LINE3 = 'z = "ü😀"; w.cuda(non_blocking=True)'
SOURCE = f"{LINE1}\n{LINE2}\n{LINE3}\n"

# `.cuda()` on line 2: code-point columns 15..22 (0-based, end exclusive)
CUDA_COL = LINE2.index(".cuda()")
CUDA_END = CUDA_COL + len(".cuda()")


class CudaCall:
    code = "NPU001"
    name = "cuda-device-call"
    summary = "Tensor moved to a CUDA device"
    why = "Ascend NPUs have no CUDA runtime; use the `device` helper so the code runs on both."
    fix_safety = "safe"


class SpecDrift:
    code = "NPU101"
    name = "spec-drift"
    summary = "Generated file differs from its patch spec"
    why = "The **spec** is the source of truth."
    fix_safety = "unsafe"
    severity = "error"


RULES: dict[str, Any] = {"NPU001": CudaCall, "NPU101": SpecDrift}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "model.py").write_text(SOURCE, encoding="utf-8")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "model.yaml").write_text("patches: []\n", encoding="utf-8")
    return tmp_path


def offset_of(line_no: int, col: int) -> int:
    lines = SOURCE.split("\n")
    return sum(len(line) + 1 for line in lines[: line_no - 1]) + col


def make_diagnostics(root: Path) -> list[Diagnostic]:
    model = str(root / "pkg" / "model.py")
    start = offset_of(2, CUDA_COL)
    safe_fix = Fix("Replace with `.to(device)`", (Edit(start, start + len(".cuda()"), ".to(device)"),))
    cuda = Diagnostic(
        code="NPU001",
        name="cuda-device-call",
        message="`.cuda()` moves the tensor to a CUDA device",
        path=model,
        line=2,
        col=CUDA_COL,
        end_line=2,
        end_col=CUDA_END,
        fix=safe_fix,
        source_line=LINE2,
    )
    # A range over lines 2-3 with an unsafe fix and an origin in the patch spec.
    w_col = LINE3.index("w.cuda")
    unsafe_fix = Fix(
        "Regenerate from the spec",
        (Edit(offset_of(3, w_col), offset_of(3, len(LINE3)), "w.to(device)"),),
        Applicability.UNSAFE,
        creates=(CreateFile(str(root / "specs" / "model.npu.yaml"), "patches: []\n"),),
        reason="drops non_blocking",
    )
    drift = Diagnostic(
        code="NPU101",
        name="spec-drift",
        message="generated code differs from the spec",
        path=model,
        line=2,
        col=2,
        end_line=3,
        end_col=len(LINE3),
        fix=unsafe_fix,
        origin=Origin(str(root / "specs" / "model.yaml"), 7, "patch `cuda-to-npu`"),
        severity=SEVERITY_ERROR,
        source_line=LINE2,
    )
    return [drift, cuda]  # deliberately unsorted


def do_render(fmt: str, diagnostics: list[Diagnostic], root: Path, **kwargs: Any) -> str:
    return render(fmt, diagnostics, rules=RULES, root=str(root), **kwargs)


# ---------------------------------------------------------------------------------------------------------
# generic


def test_formats_listed() -> None:
    assert FORMATS == ("text", "concise", "json", "json-lines", "sarif", "github", "junit")


def test_unknown_format(project: Path) -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        do_render("xml", [], project)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_handles_no_diagnostics(fmt: str, project: Path) -> None:
    out = do_render(fmt, [], project)
    assert isinstance(out, str)


def test_utf16_column() -> None:
    assert utf16_column(LINE2, CUDA_COL) == CUDA_COL + 1
    assert utf16_column(LINE2, 10) == 10  # before the emoji
    assert utf16_column(LINE2, 11) == 12  # after it
    assert utf16_column("ab", 5) == 5  # past the end keeps the overhang


# ---------------------------------------------------------------------------------------------------------
# text / concise


def test_concise(project: Path) -> None:
    out = do_render("concise", make_diagnostics(project), project)
    lines = out.splitlines()
    model = str(Path("pkg") / "model.py")
    assert lines == [
        (
            f"{model}:2:3: NPU101 generated code differs from the spec "
            f"(origin: {Path('specs') / 'model.yaml'}:7 patch `cuda-to-npu`)"
        ),
        f"{model}:2:{CUDA_COL + 1}: NPU001 [*] `.cuda()` moves the tensor to a CUDA device",
    ]
    assert "\x1b[" not in out


def test_concise_unsafe_fixes_marks_unsafe_fix(project: Path) -> None:
    out = do_render("concise", make_diagnostics(project), project, unsafe_fixes=True)
    assert out.splitlines()[0].split(": ", 1)[1].startswith("NPU101 [*] ")


def test_path_outside_root_is_shown_as_given(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("elsewhere") / "x.py"
    d = make_diagnostics(project)[1].replace(path=str(other))
    out = do_render("concise", [d], project)
    assert out.startswith(f"{other}:2:")


def test_text_excerpt_and_notes(project: Path) -> None:
    out = do_render("text", make_diagnostics(project), project)
    blocks = out.split("\n\n")
    assert len(blocks) == 2
    cuda = blocks[1].splitlines()
    assert cuda[0] == (
        f"{Path('pkg') / 'model.py'}:2:{CUDA_COL + 1}: NPU001 [*] `.cuda()` moves the tensor to a CUDA device"
    )
    source_row = next(line for line in cuda if line.lstrip().startswith("2 |"))
    caret_row = next(line for line in cuda if "^" in line)
    text_start = source_row.index("|") + 2
    assert source_row[text_start:] == LINE2
    # the emoji is two cells wide in a terminal, so the carets start one cell after the code-point column
    assert caret_row.index("^") - text_start == CUDA_COL + 1
    assert caret_row.count("^") == len(".cuda()")
    assert "= help: Replace with `.to(device)`" in blocks[1]
    assert "= origin:" not in blocks[1]

    drift = blocks[0]
    assert "NPU101 generated code" in drift  # unsafe fix: no [*] without unsafe_fixes
    assert "= help: Regenerate from the spec" in drift
    assert "= note: unsafe fix (drops non_blocking); enable with `--unsafe-fixes`" in drift
    assert f"= origin: {Path('specs') / 'model.yaml'}:7 patch `cuda-to-npu`" in drift
    drift_carets = next(line for line in drift.splitlines() if "^" in line)
    assert drift_carets.strip() == "|" + " " * 3 + "^" * (len(LINE2) + 1 - 2)  # multi-line: to end of line


def test_text_reads_line_when_source_line_missing(project: Path) -> None:
    d = make_diagnostics(project)[1].replace(source_line="")
    out = do_render("text", [d], project)
    assert f" 2 | {LINE2}" in out


def test_text_show_fixes_preview(project: Path) -> None:
    out = do_render("text", make_diagnostics(project), project, show_fixes=True)
    assert f"- {LINE2}" in out
    assert "+ " + LINE2.replace(".cuda()", ".to(device)") in out
    assert f"= creates: {Path('specs') / 'model.npu.yaml'}" in out


def test_text_color(project: Path) -> None:
    plain = do_render("text", make_diagnostics(project), project)
    colored = do_render("text", make_diagnostics(project), project, color=True)
    assert "\x1b[" not in plain
    assert "\x1b[" in colored
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored) == plain


# ---------------------------------------------------------------------------------------------------------
# json / json-lines


def test_json(project: Path) -> None:
    data = json.loads(do_render("json", make_diagnostics(project), project))
    assert isinstance(data, list) and len(data) == 2
    drift, cuda = data
    expected_keys = {
        "code",
        "name",
        "message",
        "severity",
        "filename",
        "location",
        "end_location",
        "fix",
        "url",
        "origin",
    }
    assert set(cuda) == expected_keys
    assert cuda["code"] == "NPU001"
    assert cuda["name"] == "cuda-device-call"
    assert cuda["filename"] == str(project / "pkg" / "model.py")
    assert cuda["location"] == {"row": 2, "column": CUDA_COL + 1}
    assert cuda["end_location"] == {"row": 2, "column": CUDA_END + 1}
    assert cuda["url"] == f"{DOCS_URL}/NPU001.md"
    assert cuda["origin"] is None
    assert cuda["severity"] == "warning"
    assert cuda["fix"] == {
        "applicability": "safe",
        "message": "Replace with `.to(device)`",
        "edits": [
            {
                "content": ".to(device)",
                "location": {"row": 2, "column": CUDA_COL + 1},
                "end_location": {"row": 2, "column": CUDA_END + 1},
            }
        ],
    }
    assert drift["severity"] == "error"
    assert drift["origin"] == {
        "filename": str(project / "specs" / "model.yaml"),
        "row": 7,
        "note": "patch `cuda-to-npu`",
    }
    assert drift["fix"]["applicability"] == "unsafe"
    assert drift["fix"]["edits"][0]["location"] == {"row": 3, "column": LINE3.index("w.cuda") + 1}
    assert drift["fix"]["edits"][0]["end_location"] == {"row": 3, "column": len(LINE3) + 1}
    assert drift["fix"]["creates"] == [
        {"filename": str(project / "specs" / "model.npu.yaml"), "content": "patches: []\n"}
    ]


def test_json_edit_offsets_when_file_unreadable(project: Path) -> None:
    d = make_diagnostics(project)[1]
    d = d.replace(path=str(project / "missing.py"))
    (obj,) = json.loads(do_render("json", [d], project))
    (edit,) = obj["fix"]["edits"]
    assert edit == {"content": ".to(device)", "start": offset_of(2, CUDA_COL), "end": offset_of(2, CUDA_END)}


def test_json_edit_locations_with_bom_and_crlf(project: Path) -> None:
    path = project / "crlf.py"
    path.write_bytes(("\ufeff" + SOURCE.replace("\n", "\r\n")).encode("utf-8"))
    text = SOURCE.replace("\n", "\r\n")  # decoded text: BOM dropped, line breaks kept
    start = text.index(".cuda()")
    d = make_diagnostics(project)[1].replace(
        path=str(path), fix=Fix("t", (Edit(start, start + 7, ".to(device)"),))
    )
    (obj,) = json.loads(do_render("json", [d], project))
    (edit,) = obj["fix"]["edits"]
    assert edit["location"] == {"row": 2, "column": CUDA_COL + 1}
    assert edit["end_location"] == {"row": 2, "column": CUDA_END + 1}


def test_json_latin1_fallback(project: Path) -> None:
    path = project / "latin.py"
    path.write_bytes("# caf\xe9\ny.cuda()\n".encode("latin-1"))
    d = make_diagnostics(project)[1].replace(
        path=str(path), line=2, col=1, end_line=2, end_col=8, fix=Fix("t", (Edit(8, 15, ".to()"),))
    )
    (obj,) = json.loads(do_render("json", [d], project))
    assert obj["fix"]["edits"][0]["location"] == {"row": 2, "column": 2}


def test_json_lines(project: Path) -> None:
    out = do_render("json-lines", make_diagnostics(project), project)
    lines = out.splitlines()
    assert len(lines) == 2
    objs = [json.loads(line) for line in lines]
    assert [o["code"] for o in objs] == ["NPU101", "NPU001"]
    assert objs == json.loads(do_render("json", make_diagnostics(project), project))
    assert do_render("json-lines", [], project) == ""


# ---------------------------------------------------------------------------------------------------------
# SARIF


def sarif_validator() -> Any:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = validator_for(schema)  # chooses the draft from the schema's own "$schema"
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("unsafe", [False, True])
def test_sarif_is_valid(project: Path, unsafe: bool) -> None:
    log = json.loads(do_render("sarif", make_diagnostics(project), project, unsafe_fixes=unsafe))
    errors = sorted(sarif_validator().iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_sarif_empty_is_valid(project: Path) -> None:
    log = json.loads(do_render("sarif", [], project))
    sarif_validator().validate(log)
    assert log["runs"][0]["results"] == []
    assert [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]] == ["NPU001", "NPU101"]


def test_sarif_content(project: Path) -> None:
    log = json.loads(do_render("sarif", make_diagnostics(project), project))
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "npu-lint"
    assert driver["version"] == __version__
    assert driver["informationUri"] == INFO_URL
    rules = driver["rules"]
    assert [r["id"] for r in rules] == ["NPU001", "NPU101"]
    for rule in rules:
        assert rule["name"] != rule["id"]
        assert rule["helpUri"] == f"{DOCS_URL}/{rule['id']}.md"
        assert rule["help"]["text"] and rule["help"]["markdown"]
    assert rules[0]["name"] == "cuda-device-call"
    assert rules[0]["shortDescription"]["text"] == CudaCall.summary
    assert rules[0]["fullDescription"]["text"] == CudaCall.why
    assert rules[0]["defaultConfiguration"]["level"] == "warning"
    assert rules[1]["defaultConfiguration"]["level"] == "error"

    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.as_uri() + "/"
    assert run["columnKind"] == "utf16CodeUnits"

    drift, cuda = run["results"]
    assert cuda["ruleId"] == "NPU001" and rules[cuda["ruleIndex"]]["id"] == "NPU001"
    assert drift["ruleId"] == "NPU101" and rules[drift["ruleIndex"]]["id"] == "NPU101"
    assert cuda["level"] == "warning" and drift["level"] == "error"
    assert cuda["message"]["text"] == "`.cuda()` moves the tensor to a CUDA device"

    loc = cuda["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "pkg/model.py", "uriBaseId": "%SRCROOT%"}
    # after the emoji every column is one UTF-16 unit further than the code-point column
    assert loc["region"] == {
        "startLine": 2,
        "startColumn": CUDA_COL + 2,
        "endLine": 2,
        "endColumn": CUDA_END + 2,
        "snippet": {"text": ".cuda()"},
    }
    # a safe fix is exported, with its deleted region in UTF-16 columns too
    (fix,) = cuda["fixes"]
    (change,) = fix["artifactChanges"]
    (replacement,) = change["replacements"]
    assert replacement["deletedRegion"] == {k: v for k, v in loc["region"].items() if k != "snippet"}
    assert replacement["insertedContent"] == {"text": ".to(device)"}

    # multi-line range: the end column comes from line 3, read from the file (ü + emoji before the end)
    region = drift["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 2, "startColumn": 3, "endLine": 3, "endColumn": len(LINE3) + 2}
    assert "fixes" not in drift  # unsafe fix without unsafe_fixes
    (related,) = drift["relatedLocations"]
    assert related["physicalLocation"]["artifactLocation"] == {
        "uri": "specs/model.yaml",
        "uriBaseId": "%SRCROOT%",
    }
    assert related["physicalLocation"]["region"] == {"startLine": 7}


def test_sarif_unsafe_fix_with_unsafe_fixes(project: Path) -> None:
    log = json.loads(do_render("sarif", make_diagnostics(project), project, unsafe_fixes=True))
    drift = log["runs"][0]["results"][0]
    (fix,) = drift["fixes"]
    uris = [c["artifactLocation"]["uri"] for c in fix["artifactChanges"]]
    assert uris == ["pkg/model.py", "specs/model.npu.yaml"]


def test_sarif_unknown_rule_and_outside_root(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("elsewhere") / "a b.py"
    d = make_diagnostics(project)[1].replace(code="NPU999", name="mystery", path=str(other), fix=None)
    log = json.loads(render("sarif", [d], rules={}, root=str(project)))
    sarif_validator().validate(log)
    (rule,) = log["runs"][0]["tool"]["driver"]["rules"]
    assert rule["id"] == "NPU999" and rule["name"] == "mystery"
    art = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert art == {"uri": other.as_uri()}
    assert "%20" in art["uri"]


# ---------------------------------------------------------------------------------------------------------
# GitHub


def test_github(project: Path) -> None:
    out = do_render("github", make_diagnostics(project), project)
    lines = out.splitlines()
    assert lines[1] == (
        f"::warning title=npu-lint (NPU001),file=pkg/model.py,line=2,col={CUDA_COL + 1},"
        f"endLine=2,endColumn={CUDA_END + 1}::NPU001 `.cuda()` moves the tensor to a CUDA device"
    )
    assert lines[0].startswith("::error title=npu-lint (NPU101),file=pkg/model.py,line=2,col=3,endLine=3,")
    assert lines[0].endswith(
        "::NPU101 generated code differs from the spec (origin: specs/model.yaml:7 patch `cuda-to-npu`)"
    )


def test_github_escaping(project: Path) -> None:
    weird = project / "we,ird:dir" / "a%b.py"
    d = make_diagnostics(project)[1].replace(path=str(weird), message="100% sure\r\nsecond line: a, b")
    (line,) = do_render("github", [d], project).splitlines()
    props, message = line[len("::warning ") :].split("::", 1)
    assert message == "NPU001 100%25 sure%0D%0Asecond line: a, b"
    assert "file=we%2Cird%3Adir/a%25b.py," in props
    assert props.count(",") == 5  # only the property separators remain
    assert "\n" not in line and "\r" not in line


# ---------------------------------------------------------------------------------------------------------
# JUnit


def test_junit(project: Path) -> None:
    diags = make_diagnostics(project)
    other = diags[1].replace(path=str(project / "pkg" / "other.py"), line=5, col=0, end_col=3)
    out = do_render("junit", [*diags, other], project)
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    suites = ET.fromstring(out.encode("utf-8"))
    assert suites.tag == "testsuites"
    assert suites.get("name") == "npu-lint"
    assert suites.get("tests") == "2" and suites.get("failures") == "2"
    (suite,) = suites.findall("testsuite")
    assert suite.get("name") == "npu-lint"
    assert suite.get("tests") == "2" and suite.get("failures") == "2"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["pkg/model.py", "pkg/other.py"]
    assert all(c.get("classname") == "npu-lint" for c in cases)
    failures = cases[0].findall("failure")
    assert len(failures) == 2
    assert failures[1].text == f"2:{CUDA_COL + 1}: NPU001 `.cuda()` moves the tensor to a CUDA device"
    assert failures[1].get("message") == "NPU001 `.cuda()` moves the tensor to a CUDA device"
    assert failures[0].text is not None and "origin: specs/model.yaml:7" in failures[0].text
    assert [f.text for f in cases[1].findall("failure")] == [
        "5:1: NPU001 `.cuda()` moves the tensor to a CUDA device"
    ]


def test_junit_no_diagnostics(project: Path) -> None:
    suites = ET.fromstring(do_render("junit", [], project).encode("utf-8"))
    assert suites.get("tests") == "1" and suites.get("failures") == "0"
    (case,) = suites.iter("testcase")
    assert case.get("name") == "npu-lint"
    assert case.find("failure") is None


def test_junit_strips_invalid_xml_characters(project: Path) -> None:
    d = make_diagnostics(project)[1].replace(message="bad \x00\x1b char")
    suites = ET.fromstring(do_render("junit", [d], project).encode("utf-8"))
    failure = next(suites.iter("failure"))
    assert failure.text is not None and "\x00" not in failure.text
