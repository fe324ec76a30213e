"""NPU730: a submodule built in __init__ and made trainable that no method applies; seed-omni encoders, a VL
wrapper, an audio tower, a diffusers model; a subclass, a helper, a Sequential, getattr, a parent-built module
and an applied module stay quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, path: str) -> list[int]:
    src = SourceFile.from_text(
        path, "import torch\nfrom torch import nn\n\n\n" + textwrap.dedent(code).lstrip("\n")
    )
    return sorted(d.line for d in lint_source(src, ["NPU730"], Settings()) if d.code == "NPU730")


BAD = [
    (
        "veomni/models/seed_omni/encoder/toy_siglip/modeling_toy_siglip.py",
        """
        class ToySigLIPEncoder(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.vision = build_vision(config)
                self.aligner = build_aligner(config)

            def set_projector_trainable_only(self):
                self.requires_grad_(False)
                self.aligner.requires_grad_(True)

            def lm_encode(self, features, **kwargs):
                return self.vision(features)
        """,
    ),
    (
        "veomni/models/transformers/toy_vl/modeling_toy_vl.py",
        """
        class ToyVLModel(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.visual = ToyVisionTower(config)
                self.multi_modal_projector = ToyProjector(config)
                self.language_model = ToyLM(config)

            def unfreeze_connector(self):
                self.multi_modal_projector.requires_grad_()

            def forward(self, pixel_values, input_ids):
                image_embeds = self.visual(pixel_values)
                return self.language_model(input_ids, image_embeds)
        """,
    ),
    (
        "veomni/models/diffusers/toy_dit/audio_tower.py",
        """
        class ToyAudioTower(nn.Module):
            def __init__(self, dim, out):
                super().__init__()
                self.conv = nn.Conv1d(dim, dim, 3)
                self.proj_out = nn.Linear(dim, out)

            def train_head(self):
                self.proj_out.requires_grad_(True)

            def forward(self, x):
                return self.conv(x)
        """,
    ),
]

GOOD = [
    (
        "veomni/models/seed_omni/encoder/toy_siglip/modeling_toy_siglip.py",
        BAD[0][1].replace("return self.vision(features)", "return self.aligner(self.vision(features))"),
    ),
    (
        "veomni/models/seed_omni/encoder/toy_siglip/modeling_toy_siglip.py",
        BAD[0][1]
        + """

        class ToySigLIPEncoderWithHead(ToySigLIPEncoder):
            def lm_encode(self, features, **kwargs):
                return self.aligner(super().lm_encode(features))
        """,
    ),
    (
        "veomni/models/transformers/toy_vl/modeling_toy_vl.py",
        BAD[1][1].replace(
            "image_embeds = self.visual(pixel_values)",
            "image_embeds = run_towers([self.visual, self.multi_modal_projector], pixel_values)",
        ),
    ),
    (
        "veomni/models/diffusers/toy_dit/audio_tower.py",
        BAD[2][1].replace("return self.conv(x)", 'return getattr(self, "proj_out")(self.conv(x))'),
    ),
    (
        # a submodule a parent class builds and applies: not this class's
        "veomni/models/seed_omni/encoder/toy_vit/modeling_toy_vit.py",
        """
        class ToyViTEncoder(ToyUpstreamViT):
            def __init__(self, config):
                super().__init__(config)
                self.projector = nn.Identity()

            def set_projector_trainable_only(self):
                self.merger.requires_grad_(True)

            def lm_encode(self, features):
                return self.projector(super().forward(features))
        """,
    ),
    (
        # frozen, not made trainable
        "veomni/models/diffusers/toy_dit/audio_tower.py",
        BAD[2][1].replace("self.proj_out.requires_grad_(True)", "self.proj_out.requires_grad_(False)"),
    ),
]


@pytest.mark.parametrize(("path", "code"), BAD)
def test_trainable_submodule_never_applied_is_reported(path: str, code: str) -> None:
    assert len(_lines(code, path)) == 1


@pytest.mark.parametrize(("path", "code"), GOOD)
def test_applied_or_not_built_here_is_quiet(path: str, code: str) -> None:
    assert _lines(code, path) == []
