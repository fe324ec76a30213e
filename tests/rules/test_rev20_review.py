"""Review round 20 (precision): correct variants of NPU111, NPU323, NPU324, NPU474, NPU728, NPU729 and NPU730 in
VeOmni's shapes that the rules must not report, each paired with a still-reported true positive of the same shape
(so no test passes by silencing the rule)."""

from __future__ import annotations

import textwrap

import pytest

from tests.rules.snippets import lint_snippet


def _lines(code: str, path: str, text: str) -> list[int]:
    return [d.line for d in lint_snippet(path, text, [code])]


# -- NPU111: a module built at run time, fed device data, never moved ---------------------------------------------

_MEL = """
import torch
import torchaudio
from torch import nn


class MelFrontend(nn.Module):
    def __init__(self, n_mels):
        super().__init__()
        self.register_buffer("filters", torch.ones(n_mels, 201))

    def features(self, wave):
        return self.filters @ wave


class GeluDrop(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.act = nn.GELU()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return self.drop(self.act(x))


"""

# (quiet variant, its true-positive twin): the twin builds on / moves to the host, or keeps a stateful module
_NPU111_PAIRS = {
    "device_keyword": (
        """
        def encode(wave, device):
            conv = nn.Conv1d(1, 8, 3, device=device)
            return conv(wave.to(device=device))
        """,
        """
        def encode(wave, device):
            conv = nn.Conv1d(1, 8, 3, device="cpu")
            return conv(wave.to(device=device))
        """,
    ),
    "factory_kwargs": (
        """
        def encode(wave, device):
            factory_kwargs = {"device": device, "dtype": torch.float32}
            proj = nn.Linear(16, 16, **factory_kwargs)
            return proj(wave.to(device=device))
        """,
        """
        def encode(wave, device):
            factory_kwargs = {"dtype": torch.float32}
            proj = nn.Linear(16, 16, **factory_kwargs)
            return proj(wave.to(device=device))
        """,
    ),
    "with_torch_device": (
        """
        def encode(wave, device):
            with torch.device(device):
                proj = nn.Linear(16, 16)
            return proj(wave.to(device=device))
        """,
        """
        def encode(wave, device):
            with torch.device("cpu"):
                proj = nn.Linear(16, 16)
            return proj(wave.to(device=device))
        """,
    ),
    "chained_move": (
        """
        def encode(wave, device):
            frontend = MelFrontend(80)
            frontend.requires_grad_(False).eval().to(device)
            return frontend.features(wave.to(device=device))
        """,
        """
        def encode(wave, device):
            frontend = MelFrontend(80)
            frontend.requires_grad_(False).eval()
            return frontend.features(wave.to(device=device))
        """,
    ),
    "rebound_by_wrapper": (
        """
        def encode(wave, device, build_parallelize_model):
            teacher = MelFrontend(80)
            teacher = build_parallelize_model(teacher, init_device="npu")
            return teacher.features(wave.to(device=device))
        """,
        """
        def encode(wave, device, build_parallelize_model):
            teacher = MelFrontend(80)
            student = build_parallelize_model(teacher, init_device="npu")
            return teacher.features(wave.to(device=device))
        """,
    ),
    "data_to_the_module_device": (
        """
        def encode(wave):
            proj = nn.Linear(16, 16)
            return proj(wave.to(next(proj.parameters()).device))
        """,
        """
        def encode(wave, encoder):
            proj = nn.Linear(16, 16)
            return proj(wave.to(next(encoder.parameters()).device))
        """,
    ),
    "host_device": (
        """
        def convert(wave, state):
            device = torch.device("cpu")
            proj = nn.Linear(16, 16)
            return proj(wave.to(device)), proj(state.to(torch.device("cpu")))
        """,
        """
        def convert(wave, state):
            device = torch.device("npu")
            proj = nn.Linear(16, 16)
            return proj(wave.to(device)), proj(state.to(torch.device("cpu")))
        """,
    ),
    "stateless_own_class": (
        """
        def encode(wave, device):
            act = GeluDrop(0.1)
            return act(wave.to(device=device))
        """,
        """
        def encode(wave, device):
            act = MelFrontend(80)
            return act.features(wave.to(device=device))
        """,
    ),
    "stateless_sequential": (
        """
        def encode(wave, device):
            head = nn.Sequential(nn.GELU(), nn.Dropout(0.1))
            return head(wave.to(device))
        """,
        """
        def encode(wave, device):
            head = nn.Sequential(nn.GELU(), nn.Linear(16, 16))
            return head(wave.to(device))
        """,
    ),
    "stateless_torchaudio": (
        """
        def features(mel, device):
            to_db = torchaudio.transforms.AmplitudeToDB(top_db=80)
            return to_db(mel.to(device))
        """,
        """
        def features(wave, device):
            to_mel = torchaudio.transforms.MelSpectrogram(sample_rate=16000)
            return to_mel(wave.to(device))
        """,
    ),
    "handed_to_a_mover": (
        """
        def encode(wave, device, move_to_device):
            frontend = MelFrontend(80)
            move_to_device(frontend, device)
            return frontend.features(wave.to(device=device))
        """,
        """
        def encode(wave, device, log_module):
            frontend = MelFrontend(80)
            log_module(frontend)
            return frontend.features(wave.to(device=device))
        """,
    ),
    "handed_to_self": (
        """
        class Holder(nn.Module):
            def build(self, wave, device):
                frontend = MelFrontend(80)
                self.add_module("frontend", frontend)
                self.frontends.append(frontend)
                return frontend.features(wave.to(device=device))
        """,
        """
        class Holder(nn.Module):
            def build(self, wave, device):
                frontend = MelFrontend(80)
                self.names.append("frontend")
                return frontend.features(wave.to(device=device))
        """,
    ),
}


@pytest.mark.parametrize("case", sorted(_NPU111_PAIRS))
def test_npu111_quiet_variant_and_its_true_twin(case: str) -> None:
    good, bad = _NPU111_PAIRS[case]
    path = "veomni/models/diffusers/toy_audio/audio_vae.py"
    assert _lines("NPU111", path, _MEL + textwrap.dedent(good)) == []
    assert len(_lines("NPU111", path, _MEL + textwrap.dedent(bad))) == 1


def test_npu111_torchvision_v2_transforms_own_no_state() -> None:
    text = """
    from torchvision.transforms import v2


    def augment(images, device):
        resize = v2.Resize((224, 224), antialias=True)
        return resize(images.to(device))
    """
    assert _lines("NPU111", "veomni/data/multimodal/toy_aug.py", text) == []
    stateful = text.replace("from torchvision.transforms import v2", "import torchaudio").replace(
        "v2.Resize((224, 224), antialias=True)", "torchaudio.transforms.Resample(16000, 8000)"
    )
    assert _lines("NPU111", "veomni/data/multimodal/toy_aug.py", stateful) == [5]
