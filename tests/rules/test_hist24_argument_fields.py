"""NPU626 inside the argument dataclasses themselves (hist24, VeOmni ec13f608).

A method of an argument class reads a nested field through one of its own annotated fields
(`VeOmniArguments.compute_train_steps`: `self.data.dataloader_batch_size`, a field of `TrainingArguments`): the
chain is walked from the class the field is annotated with, as `args.data...` is.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.rules.snippets import lint_snippet

ARGS = """
from dataclasses import dataclass, field


@dataclass
class AcceleratorConfig:
    ulysses_size: int = 1


@dataclass
class TrainingArguments:
    accelerator: AcceleratorConfig = field(default_factory=AcceleratorConfig)
    dataloader_batch_size: int = 8
    dyn_bsz: bool = False

    def __post_init__(self):
        self.accelerator.dp_size = 4
        if self.accelerator.{acc_field} > 1:
            self.dyn_bsz = True


@dataclass
class ModelArguments:
    model_path: str = ""


@dataclass
class DataArguments:
    train_sample: int = 0


@dataclass
class VeOmniArguments:
    model: ModelArguments = field(default_factory=ModelArguments)
    data: DataArguments = field(default_factory=DataArguments)
    train: TrainingArguments = field(default_factory=TrainingArguments)

    def compute_train_steps(self, dataset_length=None):
        if dataset_length is not None:
            return dataset_length // self.{group}.dataloader_batch_size
        return self.data.train_sample // self.train.dataloader_batch_size + self.train.accelerator.dp_size
"""


def _lines(tmp_path: Path, group: str, acc_field: str = "ulysses_size") -> list[int]:
    path = tmp_path / "veomni" / "arguments" / "arguments_types.py"
    path.parent.mkdir(parents=True)
    (tmp_path / "veomni" / "trainer").mkdir()
    text = ARGS.format(group=group, acc_field=acc_field)
    return [d.line for d in lint_snippet(str(path), text, ["NPU626"])]


def _line(marker: str) -> int:
    lines = textwrap.dedent(ARGS).lstrip("\n").splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)


def test_a_field_read_through_the_wrong_group_is_reported(tmp_path: Path) -> None:
    assert _lines(tmp_path, "data") == [_line("dataset_length // self.")]


def test_the_group_that_defines_the_field_is_quiet(tmp_path: Path) -> None:
    assert _lines(tmp_path, "train") == []


def test_a_nested_field_a_method_of_another_class_does_not_define(tmp_path: Path) -> None:
    assert _lines(tmp_path, "train", acc_field="sp_size") == [_line("if self.accelerator.")]


def test_self_chains_follow_the_annotation_of_the_field(tmp_path: Path) -> None:
    """A class of the linted file holding an argument group is walked too; a field of another type is not."""
    args = tmp_path / "veomni" / "arguments" / "arguments_types.py"
    args.parent.mkdir(parents=True)
    args.write_text(ARGS.format(group="train", acc_field="ulysses_size"))
    path = tmp_path / "veomni" / "trainer" / "toy.py"
    path.parent.mkdir()
    text = """
        from dataclasses import dataclass

        from veomni.arguments.arguments_types import DataArguments


        @dataclass
        class Holder:
            data: {annotation} = None

            def f(self):
                return self.data.dataloader_batch_size
        """
    assert [d.line for d in lint_snippet(str(path), text.format(annotation="DataArguments"), ["NPU626"])] == [
        11
    ]
    assert lint_snippet(str(path), text.format(annotation="object"), ["NPU626"]) == []


DPO_TRAINER = """
from dataclasses import dataclass, field

from veomni.arguments.arguments_types import VeOmniArguments


@dataclass
class DPOConfig:
    average_log_prob: bool = False


@dataclass
class VeOmniDPOArguments(VeOmniArguments):
    dpo_config: DPOConfig = field(default_factory=DPOConfig)


class DPOTrainer:
    def __init__(self, base):
        self.base = base

    def loss(self, args):
        average = getattr(self.base.args, "{field}", None) and self.base.args.{field}.average_log_prob
        namespace_field = args.config_file  # a bare `args` may be an argparse namespace
        return average, namespace_field
"""


def _trainer(tmp_path: Path, field: str) -> list[int]:
    args = tmp_path / "veomni" / "arguments" / "arguments_types.py"
    args.parent.mkdir(parents=True)
    args.write_text(ARGS.format(group="train", acc_field="ulysses_size"))
    path = tmp_path / "veomni" / "trainer" / "text_dpo_trainer.py"
    path.parent.mkdir()
    return [d.line for d in lint_snippet(str(path), DPO_TRAINER.format(field=field), ["NPU626"])]


def test_a_trainer_reading_a_renamed_top_level_field_is_reported(tmp_path: Path) -> None:
    # VeOmni ac864380: `dpo` renamed `dpo_config`; the getattr default hides it, so the flag is always off
    assert _trainer(tmp_path, "dpo") == [21]


def test_the_field_a_root_subclass_defines_is_quiet(tmp_path: Path) -> None:
    assert _trainer(tmp_path, "dpo_config") == []
