"""NPU310: a function that ends by binding locals it never returns (callers get None)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, path: str = "veomni/ops/kernels/norm/npu.py") -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU310"], Settings()) if d.code == "NPU310")


def test_npu_norm_wrapper_falls_off_the_end() -> None:
    assert _lines(
        """
        import torch_npu


        def rms_norm_npu(hidden_states, weight, eps):
            out = torch_npu.npu_rms_norm(hidden_states, weight, epsilon=eps)[0]
            result: "torch.Tensor" = out.to(hidden_states.dtype)
        """
    ) == [6]


def test_patched_method_in_a_spec() -> None:
    assert _lines(
        """
        def attention_forward_patched(self, hidden_states, position_embeddings):
            cos, sin = position_embeddings
            query, key = self.rotary(hidden_states, cos, sin)
            attn_output, attn_weights = self.attend(query, key)
        """,
        path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
    ) == [4]


def test_quiet_shapes() -> None:
    assert (
        _lines(
            """
            def returns(q, k):
                q_out, k_out = q.float(), k.float()
                return q_out, k_out


            def stores(self, x):
                self.cache = x * 2


            def rebinds_parameter(model):
                model = convert_in_place(model)


            def generator(items):
                for item in items:
                    yield item
                done = True


            def early_return(x):
                if x is None:
                    return x
                y = x + 1


            def annotated(x) -> None:
                y = log(x)
            """
        )
        == []
    )


def test_modular_and_test_files_are_not_read() -> None:
    body = """
    def forward(self, hidden_states):
        hidden_states, _ = self.attn(hidden_states)
    """
    assert _lines(body, path="transformers/models/toy/modular_toy.py") == []
    assert _lines(body, path="tests/ops/test_toy.py") == []


def test_entry_points_and_effect_only_code_outside_ops_are_quiet() -> None:
    """Found by the review of the round-12 merge: `main`, `warmup`, `__post_init__` and a helper whose only call
    is a plain model call end by binding a local on purpose."""
    text = """
    import torch


    def main(trainer):
        metrics = trainer.train()


    def warmup(model, x):
        out = model(x)


    class Cfg:
        def __post_init__(self):
            total = self.a + self.b


    def collect(model, batch):
        logits = model(batch)
    """
    assert _lines(text, path="veomni/trainer/run.py") == []
    # the same helper in the ops tree, calling a torch kernel, is an implementation that lost its result
    assert _lines(
        "import torch\n\n\ndef gelu(x):\n    y = torch.nn.functional.gelu(x)\n", path="veomni/utils/act.py"
    ) == [5]
