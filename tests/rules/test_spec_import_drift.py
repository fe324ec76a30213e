"""NPU505's import-header comparison and NPU507 (partial GPU mirror) on small trees built in tmp_path, run through
the CLI: a spec that stops providing a name its generated file imports is reported on the spec's import line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

TOY = "veomni/models/transformers/toy"

SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.toy.modeling_toy",
    target_file="patched_modeling_toy_gpu.py",
)
config.add_import(
    "veomni.models.transformers.toy.packing",
    names=[{names}],
)
config.add_post_import_block('''
from veomni.utils.device import IS_NPU_AVAILABLE
''')


@config.override_method("ToyModel.forward")
def toy_model_forward_patched(self, input_ids):
    index = build_index(input_ids)
    return mask_index(index)
"""

GENERATED = """
# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.toy.modeling_toy
# Based on: transformers==5.9.0
# ======================================================================
from torch import nn

from veomni.models.transformers.toy.packing import build_index, mask_index
from veomni.utils.device import IS_NPU_AVAILABLE


# ======================================================================
# [MODIFIED CLASS] ToyModel
# Methods patched: forward
# ======================================================================
class ToyModel(nn.Module):
    def forward(self, input_ids):
        index = build_index(input_ids)
        return mask_index(index)
"""


def _tree(root: Path, names: str) -> None:
    for rel, text in {
        f"{TOY}/__init__.py": "",
        f"{TOY}/toy_gpu_patch_gen_config.py": SPEC.replace("{names}", names),
        f"{TOY}/generated/__init__.py": "",
        f"{TOY}/generated/patched_modeling_toy_gpu.py": GENERATED,
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def _findings(root: Path, *paths: str) -> list[dict]:
    res = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--select", "NPU505", "--exit-zero"]
        + ["--output-format", "json", *(paths or ["."])],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_spec_that_stops_importing_a_used_name_is_reported_on_its_import(tmp_path: Path) -> None:
    _tree(tmp_path, '"build_index"')
    got = [(Path(f["filename"]).name, f["location"]["row"], f["message"]) for f in _findings(tmp_path)]
    assert len(got) == 1, got
    name, row, message = got[0]
    assert (name, row) == ("toy_gpu_patch_gen_config.py", 7)
    assert "`mask_index` from `veomni.models.transformers.toy.packing`" in message


def test_generated_file_alone_reports_on_its_import_line(tmp_path: Path) -> None:
    _tree(tmp_path, '"build_index"')
    got = _findings(tmp_path, f"{TOY}/generated/patched_modeling_toy_gpu.py")
    assert [(Path(f["filename"]).name, f["location"]["row"]) for f in got] == [
        ("patched_modeling_toy_gpu.py", 8)
    ]


def test_names_from_add_import_and_post_import_blocks_are_provided(tmp_path: Path) -> None:
    _tree(tmp_path, '"build_index", "mask_index"')
    assert _findings(tmp_path) == []


def test_a_name_the_spec_no_longer_reads_is_not_reported(tmp_path: Path) -> None:
    """The generated file still imports `mask_index`, but the spec's patch no longer calls it (e.g. a fix moved
    the call away): regenerating drops the import and no copied code reads it, so nothing will be undefined."""
    _tree(tmp_path, '"build_index"')
    spec = tmp_path / TOY / "toy_gpu_patch_gen_config.py"
    spec.write_text(spec.read_text().replace("return mask_index(index)", "return index"))
    assert _findings(tmp_path, f"{TOY}/toy_gpu_patch_gen_config.py") == []
    mentioned = [f["message"] for f in _findings(tmp_path)]
    assert not any("no longer provides" in m for m in mentioned), mentioned
