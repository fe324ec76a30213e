"""NPU626: a configuration chain on `args` resolved on the tree's argument dataclasses."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

ARGUMENTS = """
from dataclasses import dataclass, field


@dataclass
class ProfileConfig:
    enable: bool = False


@dataclass
class AcceleratorConfig:
    ulysses_size: int = 1


@dataclass
class TrainingArguments:
    accelerator: AcceleratorConfig = field(default_factory=AcceleratorConfig)
    profile: "ProfileConfig" = field(default_factory=ProfileConfig)
    seed: int = 0

    def __post_init__(self):
        acc = self.accelerator
        acc.dp_size = 8
        self.profile.this_rank = True
        self.world_size = 8


@dataclass
class ModelArguments:
    model_path: str = ""


@dataclass
class DataArguments:
    train_path: str = ""
"""

VLM = """
from dataclasses import dataclass

from veomni.arguments.arguments_types import TrainingArguments


@dataclass
class VLMTrainingArguments(TrainingArguments):
    freeze_vit: bool = False
"""


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "veomni" / "arguments").mkdir(parents=True)
    (tmp_path / "veomni" / "trainer").mkdir(parents=True)
    (tmp_path / "veomni" / "arguments" / "arguments_types.py").write_text(ARGUMENTS)
    (tmp_path / "veomni" / "trainer" / "vlm_trainer.py").write_text(VLM)
    return tmp_path


def _lines(path: Path, text: str) -> list[int]:
    src = SourceFile.from_text(str(path), textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU626"], Settings()) if d.code == "NPU626")


def test_moved_fields_read_and_set(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    text = """
        def build(self, args):
            a = args.train.enable_mixed_precision
            b = self.args.train.accelerator.fsdp_size
            args.data.drop_last = False
            c = args.data.drop_last
            return a, b, c
        """
    assert _lines(root / "veomni" / "trainer" / "toy.py", text) == [2, 3, 4]


def test_fields_post_init_and_subclasses_define_are_quiet(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    text = """
        def build(self, args, other):
            return (
                args.train.accelerator.dp_size,
                args.train.profile.this_rank,
                args.train.profile.enable,
                args.train.world_size,
                args.train.freeze_vit,
                args.model.model_path.endswith("x"),
                args.train.seed.bit_length(),
                other.train.anything,
            )
        """
    assert _lines(root / "veomni" / "trainer" / "toy.py", text) == []


def test_outside_a_tree_nothing_is_assumed(tmp_path: Path) -> None:
    assert _lines(tmp_path / "train.py", "def f(args):\n    return args.train.enable_mixed_precision\n") == []


def test_the_linted_files_own_subclasses_count(tmp_path: Path) -> None:
    # rev13a #2: a subclass defined in the linted file (or an unsaved buffer) adds its fields
    root = _tree(tmp_path)
    text = """
        from dataclasses import dataclass, field

        from veomni.arguments import DataArguments


        @dataclass
        class MyDataArguments(DataArguments):
            max_frames: int = field(default=16)


        def build(args):
            return args.data.max_frames, args.data.min_frames
        """
    assert _lines(root / "veomni" / "models" / "custom_train.py", text) == [12]


def test_buffer_replaces_the_on_disk_copy_of_the_file(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    edited = VLM.replace("freeze_vit: bool = False", "freeze_llm: bool = False")
    text = edited + "\n\ndef f(args):\n    return args.train.freeze_llm, args.train.freeze_vit\n"
    path = root / "veomni" / "trainer" / "vlm_trainer.py"
    src = SourceFile.from_text(str(path), text)
    lines = sorted(d.line for d in lint_source(src, ["NPU626"], Settings()) if d.code == "NPU626")
    assert lines == [text.splitlines().index("    return args.train.freeze_llm, args.train.freeze_vit") + 1]
    diags = [d for d in lint_source(src, ["NPU626"], Settings()) if d.code == "NPU626"]
    assert "freeze_vit" in diags[0].message


def test_only_optional_annotations_are_unwrapped(tmp_path: Path) -> None:
    # rev13a #3: `List[X]` holds a list, not an X; `Optional[X]` / `X | None` hold an X
    root = _tree(tmp_path)
    (root / "veomni" / "trainer" / "extra.py").write_text(
        "from dataclasses import dataclass, field\n"
        "from typing import List, Optional, Union\n\n"
        "from veomni.arguments.arguments_types import TrainingArguments, ProfileConfig\n\n\n"
        "@dataclass\n"
        "class ExtraTrainingArguments(TrainingArguments):\n"
        "    extra_losses: List[ProfileConfig] = field(default_factory=list)\n"
        "    maybe: Optional[ProfileConfig] = None\n"
        "    either: Union[ProfileConfig, None] = None\n"
        "    piped: 'ProfileConfig | None' = None\n"
    )
    text = """
        def f(args, c):
            args.train.extra_losses.append(c)
            return (
                args.train.maybe.enable,
                args.train.either.enable,
                args.train.piped.enable,
                args.train.maybe.gone,
                args.train.either.gone,
                args.train.piped.gone,
            )
        """
    assert _lines(root / "veomni" / "trainer" / "toy.py", text) == [7, 8, 9]
