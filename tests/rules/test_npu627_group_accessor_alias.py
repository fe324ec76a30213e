"""NPU627: a group accessor aliasing the mesh dimension a sibling accessor is named for."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/distributed/parallel_state.py"


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU627"], Settings()) if d.code == "NPU627")


def test_ulysses_accessor_aliasing_sp() -> None:
    assert _lines(
        """
        class State:
            def sp_group(self):
                if self.mesh is not None:
                    return self.mesh.get_group("sp")
                return None

            def ulysses_group(self):
                return self.mesh.get_group("sp")
        """
    ) == [8]


def test_distinct_dims_and_no_named_owner_are_quiet() -> None:
    assert (
        _lines(
            """
        class State:
            def dp_group(self):
                return self.mesh.get_group("dp")

            def fsdp_group(self):
                return self.mesh.get_group("dp_sp")

            def outer_group(self):
                return self.mesh.get_group("cp")

            def inner_group(self):
                return self.mesh.get_group("cp")
        """
        )
        == []
    )


def test_synonym_of_the_fsdp_group_is_quiet() -> None:
    # rev13a #12: VeOmni's fsdp_group is the dp_sp group; a dp_sp_group accessor next to it is a synonym
    assert _lines(
        """
        class ParallelState:
            @property
            def dp_sp_group(self):
                return self.device_mesh.get_group("dp_sp")

            @property
            def fsdp_group(self):
                return self.device_mesh.get_group("dp_sp")

            @property
            def sp_group(self):
                return self.device_mesh.get_group("sp")

            @property
            def ulysses_group(self):
                return self.device_mesh.get_group("sp")
        """
    ) == [16]
