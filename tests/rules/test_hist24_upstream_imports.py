"""NPU509 on imports from the transformers release the tree pins (hist24, VeOmni afe8324a).

transformers 5 moved `no_init_weights` from `transformers.modeling_utils` to `transformers.initialization`; a tree
that pins that release and still imports the old location fails at import. Judged only when the installed source is
the pinned release, and only for plain modules (packages export through a lazy import structure).
"""

from __future__ import annotations

from pathlib import Path

from npu_lint.core.astutil import use_transformers_root
from tests.rules.snippets import lint_in_tree, write_file


def _tree(tmp_path: Path, pin: str) -> tuple[Path, Path]:
    tf = tmp_path / "site" / "transformers"
    (tf / "models" / "toy").mkdir(parents=True)
    (tf / "__init__.py").write_text('__version__ = "5.9.0"\n_import_structure = {}\n')
    (tf / "initialization.py").write_text("def no_init_weights():\n    pass\n")
    (tf / "modeling_utils.py").write_text("class PreTrainedModel:\n    pass\n")
    (tf / "models" / "__init__.py").write_text("")
    (tf / "models" / "toy" / "__init__.py").write_text("def __getattr__(name):\n    return name\n")
    root = tmp_path / "repo"
    (root / "veomni" / "models").mkdir(parents=True)
    (root / "veomni" / "ops").mkdir()
    (root / "veomni" / "ops" / "__init__.py").write_text("")
    (root / "veomni" / "__init__.py").write_text("")
    (root / "veomni" / "models" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(
        f'[project]\nname = "veomni"\ndependencies = ["transformers=={pin}"]\n'
    )
    return root, tf


SNIPPET = """
from transformers.modeling_utils import PreTrainedModel, {name}
from transformers.models.toy import anything
from transformers.{module} import no_init_weights
"""


def _lines(tmp_path: Path, pin: str, name: str, module: str = "initialization") -> list[int]:
    root, tf = _tree(tmp_path, pin)
    write_file(root, "veomni/models/auto.py", SNIPPET.format(name=name, module=module))
    with use_transformers_root(str(tf)):
        return [d.line for d in lint_in_tree(root, "veomni/models/auto.py", ["NPU509"])]


def test_a_name_the_pinned_release_moved_is_reported(tmp_path: Path) -> None:
    assert _lines(tmp_path, "5.9.0", "no_init_weights", module="removed_module") == [1, 3]


def test_names_the_release_defines_and_lazy_packages_are_quiet(tmp_path: Path) -> None:
    assert _lines(tmp_path, "5.9.0", "PreTrainedModel") == []


def test_another_installed_release_than_the_pin_is_not_judged(tmp_path: Path) -> None:
    assert _lines(tmp_path, "4.57.1", "no_init_weights", module="removed_module") == []


def test_an_optional_import_is_quiet(tmp_path: Path) -> None:
    root, tf = _tree(tmp_path, "5.9.0")
    text = """
        try:
            from transformers import AutoModelForVision2Seq
            from transformers.modeling_utils import no_init_weights
        except ImportError:
            no_init_weights = None
        """
    write_file(root, "veomni/models/loader.py", text)
    with use_transformers_root(str(tf)):
        assert lint_in_tree(root, "veomni/models/loader.py", ["NPU509"]) == []
