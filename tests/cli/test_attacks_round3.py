"""Adversary round 3 (bench/accuracy/adversary-round3.md): one test per fixed break."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BAD = "import torch\n\n\ndef f(model):\n    return model.cuda()\n"


def run(
    *args: str, cwd: Path, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        input=stdin,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        timeout=120,
    )


# -- B1: a coding cookie naming a codec that is not a text encoding ------------------------------------------------


@pytest.mark.parametrize("codec", ["rot13", "hex", "base64", "zlib_codec", "undefined"])
def test_non_text_codec_cookie_is_a_problem_of_its_file_only(tmp_path: Path, codec: str) -> None:
    (tmp_path / "a.py").write_text(f"# coding: {codec}\nimport torch\n")
    (tmp_path / "b.py").write_text(BAD)
    res = run("check", "--no-cache", "--fix", ".", cwd=tmp_path)
    out, err = res.stdout.decode(), res.stderr.decode()
    assert "internal error" not in err and "Traceback" not in err, err
    assert res.returncode == 1, (out, err)
    assert "a.py:1:1: NPU001" in out and codec in out
    assert ".cuda()" not in (tmp_path / "b.py").read_text()


def test_non_text_codec_cookie_on_standard_input_is_a_one_line_error(tmp_path: Path) -> None:
    res = run(
        "check",
        "--no-cache",
        "--stdin-filename",
        "x.py",
        "-",
        cwd=tmp_path,
        stdin=b"# coding: rot13\nx = 1\n",
    )
    err = res.stderr.decode()
    assert res.returncode == 2 and "internal error" not in err and "rot13" in err, err


# -- B2: the cache follows the upstream source, not only its version -----------------------------------------------

WRAPPER_SPEC = """from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", target_file="x.py")


@config.override_method("Qwen2_5_VLForConditionalGeneration.forward")
def wrapper_forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None,
                    video_grid_thw=None, second_per_grid_ts=None, labels=None, **kwargs):
    outputs = self.model(
        input_ids=input_ids,
        pixel_values=pixel_values,
        pixel_values_videos=pixel_values_videos,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
        **kwargs,
    )
    return outputs
"""

# the upstream wrapper whose call passes `image_grid_thw` on: the spec above drops it (NPU701)
UPSTREAM_MODELING = """class Qwen2_5_VLModel:
    def forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None,
                video_grid_thw=None, second_per_grid_ts=None, **kwargs):
        return None


class Qwen2_5_VLForConditionalGeneration:
    def forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None,
                video_grid_thw=None, second_per_grid_ts=None, labels=None, **kwargs):
        outputs = self.model(
            input_ids=input_ids,
            pixel_values=pixel_values,
            pixel_values_videos=pixel_values_videos,
            image_grid_thw=image_grid_thw,
            video_grid_thw=video_grid_thw,
            second_per_grid_ts=second_per_grid_ts,
            **kwargs,
        )
        return outputs
"""


@pytest.mark.parametrize("change", ["edited in place", "model directory added"])
def test_cache_follows_the_upstream_source_when_its_version_stays(tmp_path: Path, change: str) -> None:
    proj, tf = tmp_path / "proj", tmp_path / "tf"
    package = proj / "veomni" / "models" / "transformers" / "qwen2_5_vl"
    package.mkdir(parents=True)
    (proj / "veomni" / "__init__.py").write_text("")
    (package / "qwen2_5_vl_gpu_patch_gen_config.py").write_text(WRAPPER_SPEC)
    (tf / "models").mkdir(parents=True)
    (tf / "__init__.py").write_text('__version__ = "9.9.9"\n')
    modeling = tf / "models" / "qwen2_5_vl" / "modeling_qwen2_5_vl.py"
    if change == "edited in place":
        modeling.parent.mkdir()
        modeling.write_text("x = 1\n")
    env = {"NPU_LINT_TRANSFORMERS_SRC": str(tf)}
    args = ("check", "--select", "NPU701", ".")
    first = run(*args, "--cache-dir", str(tmp_path / "cache"), cwd=proj, env=env)
    assert first.returncode == 0, (first.stdout, first.stderr)
    modeling.parent.mkdir(exist_ok=True)
    with open(modeling, "w") as f:  # in place: the directory's mtime does not change
        f.write(UPSTREAM_MODELING)
    fresh = run(*args, "--no-cache", cwd=proj, env=env)
    assert fresh.returncode == 1 and b"NPU701" in fresh.stdout, (fresh.stdout, fresh.stderr)
    cached = run(*args, "--cache-dir", str(tmp_path / "cache"), cwd=proj, env=env)
    assert cached.stdout == fresh.stdout, cached.stderr


# -- B3: `--fix` on standard input keeps the input's encoding and BOM ---------------------------------------------


@pytest.mark.parametrize(
    ("head", "encoding", "tail"),
    [
        (b"# coding: latin-1\n", "latin-1", 's = "\u00e9"\n'),
        (b"\xef\xbb\xbf", "utf-8-sig", 's = "\u00e9\u20ac"\n'),
        (b"# -*- coding: cp1252 -*-\r\n", "cp1252", 's = "\u00e9\u20ac"\r\n'),
    ],
)
@pytest.mark.parametrize("body", [BAD, "import torch\n"])
def test_stdin_fix_keeps_the_encoding_and_bom(
    tmp_path: Path, head: bytes, encoding: str, tail: str, body: str
) -> None:
    newline = "\r\n" if head.endswith(b"\r\n") else "\n"
    data = head + (body.replace("\n", newline) + tail).encode(encoding.removesuffix("-sig"))
    res = run("check", "--no-cache", "--fix", "--stdin-filename", "x.py", "-", cwd=tmp_path, stdin=data)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(head) and res.stdout.endswith(tail.encode(encoding.removesuffix("-sig")))
    assert b".cuda()" not in res.stdout
    if body != BAD:
        assert res.stdout == data  # nothing to fix: byte for byte


# -- B4: `--fix` never creates a file through a package directory linked out of the project ------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "packaging" / "tree"
WIDGET = Path("veomni/models/transformers/widget")


@pytest.mark.parametrize("named", [".", str(WIDGET)])
def test_fix_creates_no_file_through_a_linked_package(tmp_path: Path, named: str) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside_widget"
    shutil.copytree(FIXTURES, tree)
    (tree / WIDGET).rename(outside)
    (tree / WIDGET).symlink_to(outside, target_is_directory=True)
    before = sorted(p.name for p in outside.iterdir())
    res = run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU501", named + "/", cwd=tree)
    err = res.stderr.decode()
    assert sorted(p.name for p in outside.iterdir()) == before, err
    assert "internal error" not in err, err
    if named == ".":  # a directory walk does not follow the link: the package is not linted
        return
    assert res.returncode == 2 and "is a symbolic link" in err, err
    assert b"NPU501" in res.stdout  # not fixed: the finding remains


def test_fix_still_creates_the_spec_in_a_real_package(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    res = run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU501", ".", cwd=tree)
    assert (tree / WIDGET / "widget_npu_patch_gen_config.py").is_file(), res.stderr.decode()


# -- B10: a report never becomes a project file; a configuration that is not a file is named -----------------------


@pytest.mark.parametrize("flag", ["--write-baseline", "-o"])
@pytest.mark.parametrize("name", ["pyproject.toml", "npu-lint.toml", "new_module.py"])
def test_report_never_creates_a_project_or_source_file(tmp_path: Path, flag: str, name: str) -> None:
    (tmp_path / "m.py").write_text(BAD)
    res = run("check", "--no-cache", flag, name, "m.py", cwd=tmp_path)
    err = res.stderr.decode()
    assert res.returncode == 2 and "names a source or project file" in err, err
    assert not (tmp_path / name).exists()
    assert run("check", "--no-cache", "m.py", cwd=tmp_path).returncode == 1  # later runs still work


def test_write_baseline_to_a_fifo_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    os.mkfifo(tmp_path / "base.json")
    res = run("check", "--no-cache", "--write-baseline", "base.json", "m.py", cwd=tmp_path)
    err = res.stderr.decode()
    assert res.returncode == 2 and "internal error" not in err and "base.json" in err, err


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop", "dangling"])
@pytest.mark.parametrize("name", ["pyproject.toml", "npu-lint.toml"])
def test_a_configuration_that_is_not_a_file_is_an_error(tmp_path: Path, kind: str, name: str) -> None:
    (tmp_path / "m.py").write_text(BAD)
    config = tmp_path / name
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "directory":
        config.mkdir()
    elif kind == "loop":
        config.symlink_to(name)
    else:
        config.symlink_to("nowhere.toml")
    res = run("check", "--no-cache", "m.py", cwd=tmp_path)
    err = res.stderr.decode()
    assert res.returncode == 2 and f"{name}: not a regular file" in err and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1, err


# -- B8: a noqa where ruff reads it, at the end of a statement that ends in a multi-line string --------------------

NOQA_AFTER_STRING = (
    "import torch\n"
    'x = torch.zeros(1).cuda() if True else """\n'
    '"""  # noqa: NPU101\n'
    'y = torch.zeros(1).cuda() if True else """\n'
    '"""  # noqa: NPU999\n'
    'z = torch.zeros(1).cuda() if True else f"""\n'
    "{x}\n"
    '"""  # noqa\n'
    'w = torch.zeros(1).cuda() if True else """\n'
    '"""\n'
    "v = 1  # noqa\n"
)


def test_noqa_at_the_end_of_a_multi_line_string_statement() -> None:
    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source

    src = SourceFile.from_text("n.py", NOQA_AFTER_STRING)
    lines = sorted(d.line for d in lint_source(src, ["NPU101"], Settings(), None) if d.code == "NPU101")
    assert lines == [4, 9]  # another code's noqa, and none on the string's last line: still reported


# -- B5: `--diff`'s proposed diff for an unsafe fix after an applied safe one -------------------------------------


def test_diff_proposal_after_an_applied_fix_replaces_the_right_text(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        'import torch\n\ndef f(x):\n    return x.cuda()\n\ny = torch.zeros(3, device="cuda")\n'
    )
    res = run("check", "--no-cache", "--diff", "a.py", cwd=tmp_path)
    err = res.stderr.decode()
    proposed = err[err.index("(proposed)") :]
    removed = [line for line in proposed.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in proposed.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == ['-y = torch.zeros(3, device="cuda")'], err
    assert len(added) == 1 and added[0].startswith("+y = torch.zeros(3, device=") and '"cuda"' not in added[0]


# -- B7: a CR-only file is range-formatted like LF and CRLF ones ------------------------------------------------


def _ruff_format_check(cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "cr.py"],
        cwd=cwd,
        capture_output=True,
    )


@pytest.mark.parametrize("newline", ["\r", "\r\n", "\n"])
def test_fix_keeps_the_trees_ruff_format_clean_whatever_the_line_ending(tmp_path: Path, newline: str) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 60\n")
    text = "import torch\n\n\ndef f(xxxxxxxxxxxxxxxxxxx):\n    return xxxxxxxxxxxxxxxxxxx.cuda()\n"
    (tmp_path / "cr.py").write_bytes(text.replace("\n", newline).encode())
    assert _ruff_format_check(tmp_path).returncode == 0
    res = run("check", "--no-cache", "--fix", "cr.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = (tmp_path / "cr.py").read_bytes()
    assert b".cuda()" not in data
    assert (
        data.replace(newline.encode(), b"").count(b"\r") + data.replace(newline.encode(), b"").count(b"\n")
        == 0
    )
    check = _ruff_format_check(tmp_path)
    assert check.returncode == 0, check.stdout


# -- A22 (wording): a full standard output is an error of the output, not an internal error ------------------------


def test_standard_output_on_a_full_device_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    with open("/dev/full", "wb") as full:
        res = subprocess.run(
            [sys.executable, "-m", "npu_lint", "check", "--no-cache", "m.py"],
            cwd=tmp_path,
            stdout=full,
            stderr=subprocess.PIPE,
            env={**os.environ, "NO_COLOR": "1"},
            timeout=120,
        )
    err = res.stderr.decode()
    assert res.returncode == 2 and "internal error" not in err and "No space left on device" in err, err


def test_add_noqa_writes_where_the_multi_line_string_ends(tmp_path: Path) -> None:
    (tmp_path / "n.py").write_text(
        'import torch\nx = torch.zeros(1).cuda() if True else """\n"""\n'
        'y = torch.zeros(1).cuda() if True else """\n"""  # noqa: NPU999\n'
    )
    res = run("check", "--no-cache", "--add-noqa", "n.py", cwd=tmp_path)
    assert res.returncode == 0 and b"the line continues" not in res.stderr, res.stderr
    text = (tmp_path / "n.py").read_text()
    assert '"""  # noqa: NPU101\n' in text and '"""  # noqa: NPU999, NPU101\n' in text, text
    assert run("check", "--no-cache", "n.py", cwd=tmp_path).returncode == 0
    assert run("check", "--no-cache", "--add-noqa", "n.py", cwd=tmp_path).stdout.startswith(b"Added 0")


# -- B9: one pass over thousands of fixes compares each edit with its neighbours, not with every taken edit --------


def test_fix_pass_overlap_checks_grow_linearly(monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import fix as fixmod

    calls = 0
    real = fixmod._overlaps

    def counting(a, b):  # noqa: ANN001, ANN202
        nonlocal calls
        calls += 1
        return real(a, b)

    monkeypatch.setattr(fixmod, "_overlaps", counting)
    n = 600
    src = SourceFile.from_text("c.py", "import torch\n\n\ndef f(x):\n" + "    x = x.cuda()\n" * n)
    outcome = fixmod.fix_source(src, ["NPU101"], Settings(), None)
    assert outcome.text.count(".cuda()") == 0 and outcome.applied == n
    assert calls < 10 * n, calls  # every taken edit against every new one: n * n / 2


# -- B6: a fix never makes a line ruff format leaves alone longer than the tree's E501 limit ----------------------

FMT_PROTECTED = (
    "import torch\n\n\ndef g(m):\n    return torch.relu(m.cuda())  # fmt: skip\n\n\n"
    "# fmt: off\ndef h(m):\n    return torch.relu(m.cuda())\n# fmt: on\n\n\n"
    "def k(m):\n    return m.cuda()  # fmt: skip\n"
)


@pytest.mark.parametrize(
    ("select", "enforced"),
    [
        ('["E"]', True),
        ('["E501"]', True),
        ('["E4", "E7", "E9", "F"]', False),
        ('["E"]\nignore = ["E501"]', False),
    ],
)
def test_fix_under_fmt_skip_keeps_the_trees_ruff_check_clean(
    tmp_path: Path, select: str, enforced: bool
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.ruff]\nline-length = 80\n[tool.ruff.lint]\nselect = {select}\n"
    )
    (tmp_path / "t.py").write_text(FMT_PROTECTED)
    ruff = [sys.executable, "-m", "ruff", "check", "--no-cache", "t.py"]
    assert subprocess.run(ruff, cwd=tmp_path, capture_output=True).returncode == 0
    res = run("check", "--no-cache", "--fix", "t.py", cwd=tmp_path)
    text = (tmp_path / "t.py").read_text()
    check = subprocess.run(ruff, cwd=tmp_path, capture_output=True)
    assert check.returncode == 0, (check.stdout, text)
    # g's line would be 90 columns: kept (with the reason) only where E501 is enforced; h's and k's fit
    assert text.count(".cuda()") == (1 if enforced else 0), (res.stdout, res.stderr, text)
    assert (b"fmt: skip" in res.stdout + res.stderr) == enforced
