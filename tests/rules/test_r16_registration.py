"""Import-time wiring contracts (round 16): module-level state set without ``global`` (NPU235), the NPU module
chosen by "not CUDA" (NPU236), a patch applied in one device branch only (NPU237), and NPU502's reading of a
device switch written through the tree's device helper. Shapes in several regions, with other names, and the
correct variants that must stay quiet."""

from __future__ import annotations

import ast
import textwrap

import pytest

from npu_lint.veomni import registration
from tests.rules.snippets import lint_snippet

# -- NPU502: a device switch through a helper is a switch -------------------------------------------------------


def _static(text: str) -> list[str]:
    tree = ast.parse(textwrap.dedent(text))
    return [s.gpu_module for s in registration.find_static_imports(tree)]


_SWITCHED = """
from veomni.utils.device import {imp}
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("toy")
def register_toy_modeling(architecture: str):
    if {test}:
        from .generated.patched_modeling_toy_npu import ToyForCausalLM
    else:
        from .generated.patched_modeling_toy_gpu import ToyForCausalLM
    return ToyForCausalLM
"""


@pytest.mark.parametrize(
    "imp,test",
    [
        ("get_device_type", 'get_device_type() == "npu"'),
        ("get_device_type", '"npu" == get_device_type()'),
        ("is_torch_npu_available", "is_torch_npu_available()"),
        ("is_npu", "is_npu()"),
        ("device", "device.on_npu()"),
        ("get_device_type", 'get_device_type() != "npu" and False'),
        ("IS_CUDA_AVAILABLE", "not IS_CUDA_AVAILABLE"),
    ],
)
def test_npu502_helper_switch_is_a_switch(imp: str, test: str) -> None:
    assert _static(_SWITCHED.format(imp=imp, test=test)) == []


@pytest.mark.parametrize(
    "text",
    [
        """
        def register_toy_modeling(architecture):
            from .generated.patched_modeling_toy_gpu import ToyForCausalLM
            return ToyForCausalLM
        """,
        """
        def register_toy_modeling(architecture):
            if "Causal" in architecture:
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                return ToyForCausalLM
        """,
        """
        def register_toy_modeling(architecture):
            if use_npu_kernels_flag_from_config():
                pass
            from .generated import patched_modeling_toy_gpu as gen
            return gen.ToyForCausalLM
        """,
    ],
)
def test_npu502_still_sees_static_imports(text: str) -> None:
    assert _static(text) == ["patched_modeling_toy_gpu"]


# -- NPU235: module-level state assigned without ``global`` -----------------------------------------------------
_BAD_235 = [
    (
        "veomni/ops/config/singleton.py",
        """
        _ops_config = None


        def set_ops_config(config):
            _ops_config = config


        def get_ops_config():
            return _ops_config
        """,
    ),
    (
        "veomni/distributed/parallel_state.py",
        """
        from typing import Optional

        _PARALLEL_STATE: Optional[object] = None


        def init_parallel_state(dp_size, sp_size):
            state = (dp_size, sp_size)
            _PARALLEL_STATE = state
            return state


        def get_parallel_state():
            if _PARALLEL_STATE is None:
                raise RuntimeError("not initialised")
            return _PARALLEL_STATE
        """,
    ),
    (
        "veomni/data/collator_registry.py",
        """
        COLLATORS = {}


        def reset_collators(table):
            COLLATORS = {k: v for k, v in table.items()}


        def collator_for(name):
            return COLLATORS[name]
        """,
    ),
    (
        "veomni/trainer/callbacks/state.py",
        """
        try:
            _ACTIVE_TRAINER = None
        except Exception:
            pass


        async def attach(trainer):
            _ACTIVE_TRAINER, _ = trainer, None


        def active():
            return _ACTIVE_TRAINER
        """,
    ),
]


@pytest.mark.parametrize("path,text", _BAD_235)
def test_npu235_reports(path: str, text: str) -> None:
    assert [d.code for d in lint_snippet(path, text, ["NPU235"])] == ["NPU235"]


_GOOD_235 = [
    # declared global
    """
    _state = None


    def install(s):
        global _state
        _state = s


    def state():
        return _state
    """,
    # the local is read: a shadowing local, not an install
    """
    _DEFAULT = "eager"


    def pick(name):
        _DEFAULT = name or "eager"
        return _DEFAULT.lower()


    def default():
        return _DEFAULT
    """,
    # nobody reads the module variable back
    """
    _unused = None


    def setter(v):
        _unused = v
    """,
    # a method that sets an attribute of the same name (a bare name in a method is a local: that is NPU235's bug,
    # see tests/rules/test_rev17_device_loss.py)
    """
    cache = None


    class Holder:
        def set(self, v):
            self.cache = v

        def get(self):
            return cache
    """,
    # a loop variable that happens to reuse the module name
    """
    item = None


    def scan(items):
        for item in items:
            pass


    def last():
        return item
    """,
    # the reader rebinds its own local of that name
    """
    _cfg = None


    def set_cfg(c):
        _cfg = c


    def read():
        _cfg = {}
        return _cfg
    """,
    # a closure reads the local
    """
    _hook = None


    def make(fn):
        _hook = fn

        def run():
            return _hook()

        return run


    def current():
        return _hook
    """,
]


@pytest.mark.parametrize("text", _GOOD_235)
def test_npu235_quiet(text: str) -> None:
    assert lint_snippet("veomni/utils/state.py", text, ["NPU235"]) == []


# -- NPU236: "not CUDA" choosing the NPU module -----------------------------------------------------------------
_BAD_236 = [
    (
        "veomni/models/transformers/toy_moe/__init__.py",
        """
        from ....utils.device import IS_CUDA_AVAILABLE


        def register(architecture):
            if not IS_CUDA_AVAILABLE:
                from .generated.patched_modeling_toy_moe_npu import ToyMoeForCausalLM
            else:
                from .generated.patched_modeling_toy_moe_gpu import ToyMoeForCausalLM
            return ToyMoeForCausalLM
        """,
    ),
    (
        "veomni/ops/kernels/moe/loader.py",
        """
        import torch


        def grouped_gemm():
            if torch.cuda.is_available():
                from .group_gemm_triton import group_gemm
                return group_gemm
            from .group_gemm_npu import group_gemm
            return group_gemm
        """,
    ),
    (
        "veomni/distributed/comm.py",
        """
        from veomni.utils.device import get_device_type

        if get_device_type() == "cuda":
            import veomni.distributed.nccl_backend as backend
        else:
            import veomni.distributed.hccl_npu_backend as backend
        """,
    ),
    (
        "veomni/models/seed_omni/encoder/__init__.py",
        """
        from veomni.utils.device import IS_CUDA_AVAILABLE

        Encoder = NpuEncoder if not IS_CUDA_AVAILABLE else GpuEncoder
        """,
    ),
]


@pytest.mark.parametrize("path,text", _BAD_236)
def test_npu236_reports(path: str, text: str) -> None:
    assert [d.code for d in lint_snippet(path, text, ["NPU236"])] == ["NPU236"]


_GOOD_236 = [
    # the NPU test itself
    """
    from ....utils.device import IS_NPU_AVAILABLE

    if IS_NPU_AVAILABLE:
        from .generated.patched_modeling_t_npu import T
    else:
        from .generated.patched_modeling_t_gpu import T
    """,
    # an elif chain that tests for the NPU
    """
    import torch

    from veomni.utils.device import IS_NPU_AVAILABLE

    if torch.cuda.is_available():
        from .rope_triton import rope
    elif IS_NPU_AVAILABLE:
        from .rope_npu import rope
    else:
        from .rope_eager import rope
    """,
    # CUDA against eager: no NPU module involved
    """
    import torch

    if torch.cuda.is_available():
        from .rope_triton import rope
    else:
        from .rope_eager import rope
    """,
    # a device string, not a module
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "npu"
    """,
    # the else branch checks the NPU again before importing it
    """
    from veomni.utils.device import IS_CUDA_AVAILABLE, is_torch_npu_available

    if IS_CUDA_AVAILABLE:
        from .kernels_cuda import k
    else:
        if is_torch_npu_available():
            from .kernels_npu import k
        else:
            k = None
    """,
]


@pytest.mark.parametrize("text", _GOOD_236)
def test_npu236_quiet(text: str) -> None:
    assert lint_snippet("veomni/ops/kernels/x/__init__.py", text, ["NPU236"]) == []


# -- NPU237: a patch in one device branch only ------------------------------------------------------------------
_BAD_237 = [
    (
        "veomni/models/transformers/toy/__init__.py",
        """
        from ....utils.device import IS_NPU_AVAILABLE


        def register(architecture):
            if IS_NPU_AVAILABLE:
                from .generated import patched_modeling_toy_npu as gen
            else:
                from .generated import patched_modeling_toy_gpu as gen

                apply_per_model_patches(gen, "toy")
            return gen.ToyForCausalLM
        """,
    ),
    (
        "veomni/models/transformers/vlm/__init__.py",
        """
        from veomni.utils.device import get_device_type


        def register(architecture):
            if get_device_type() == "npu":
                from .generated.patched_modeling_vlm_npu import VlmForConditionalGeneration, VlmModel

                VlmModel._convert_lora_targets_to_parameters = staticmethod(convert_lora)
            else:
                from .generated.patched_modeling_vlm_gpu import VlmForConditionalGeneration, VlmModel
            return VlmModel if "Model" == architecture else VlmForConditionalGeneration
        """,
    ),
    (
        "veomni/models/seed_omni/decoder/__init__.py",
        """
        from veomni.utils.device import IS_NPU_AVAILABLE

        if not IS_NPU_AVAILABLE:
            from .generated import patched_modeling_dec_gpu as impl

            impl.bind_ops()
        else:
            from .generated import patched_modeling_dec_npu as impl
        """,
    ),
]


@pytest.mark.parametrize("path,text", _BAD_237)
def test_npu237_reports(path: str, text: str) -> None:
    assert [d.code for d in lint_snippet(path, text, ["NPU237"])] == ["NPU237"]


_GOOD_237 = [
    # the patch after the switch
    """
    from ....utils.device import IS_NPU_AVAILABLE

    if IS_NPU_AVAILABLE:
        from .generated import patched_modeling_t_npu as gen
    else:
        from .generated import patched_modeling_t_gpu as gen
    apply_per_model_patches(gen)
    """,
    # the same patch in both branches
    """
    from ....utils.device import IS_NPU_AVAILABLE

    if IS_NPU_AVAILABLE:
        from .generated import patched_modeling_t_npu as gen
        apply_per_model_patches(gen)
    else:
        from .generated import patched_modeling_t_gpu as gen
        apply_per_model_patches(gen)
    """,
    # a device-specific counterpart in each branch
    """
    from ....utils.device import IS_NPU_AVAILABLE

    if IS_NPU_AVAILABLE:
        from .generated import patched_modeling_t_npu as gen
        install_npu(gen)
    else:
        from .generated import patched_modeling_t_gpu as gen
        install_cuda(gen)
    """,
    # a call that does not touch what the import bound
    """
    from ....utils.device import IS_NPU_AVAILABLE

    if IS_NPU_AVAILABLE:
        from .generated import patched_modeling_t_npu as gen
    else:
        from .generated import patched_modeling_t_gpu as gen
        logger.info("gpu path")
    """,
    # not a device switch
    """
    if "Moe" in architecture:
        from .generated import patched_modeling_t_npu as gen
    else:
        from .generated import patched_modeling_t_gpu as gen
        apply_per_model_patches(gen)
    """,
]


@pytest.mark.parametrize("text", _GOOD_237)
def test_npu237_quiet(text: str) -> None:
    assert lint_snippet("veomni/models/transformers/t/__init__.py", text, ["NPU237"]) == []


# -- NPU234: an installer imported and never called -------------------------------------------------------------
def _tree_lint(tmp_path, files: dict[str, str], target: str, code: str) -> list:  # noqa: ANN001
    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source
    from npu_lint.veomni.project import load_project

    files = {"pyproject.toml": "[project]\nname = 'veomni'\n", "veomni/__init__.py": "", **files}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    path = tmp_path / target
    project = load_project([str(tmp_path)])
    return [
        d
        for d in lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project)
        if d.code == code
    ]


_INSTALLERS = {
    "veomni/ops/install.py": "def apply_ops_patch():\n    pass\n",
    "veomni/loss/mapping.py": "def install_loss_mapping():\n    pass\n",
    "veomni/models/transformers/wan/patch.py": "def apply_veomni_wan_transformer_patch(mod):\n    pass\n",
}


@pytest.mark.parametrize(
    "target,text",
    [
        ("veomni/ops/__init__.py", "from .install import apply_ops_patch\n\n__all__ = ['apply_ops_patch']\n"),
        ("veomni/loss/__init__.py", "from .mapping import install_loss_mapping as _install\n"),
        (
            "veomni/models/transformers/wan/__init__.py",
            "from .patch import apply_veomni_wan_transformer_patch\n\n\ndef register():\n    return 1\n",
        ),
    ],
)
def test_npu234_reports(tmp_path, target: str, text: str) -> None:  # noqa: ANN001
    got = _tree_lint(tmp_path, {**_INSTALLERS, target: text}, target, "NPU234")
    assert [d.code for d in got] == ["NPU234"]


@pytest.mark.parametrize(
    "target,text,extra",
    [
        ("veomni/ops/__init__.py", "from .install import apply_ops_patch\n\napply_ops_patch()\n", {}),
        (
            "veomni/ops/__init__.py",
            "from .install import apply_ops_patch\n",
            {
                "veomni/trainer/base.py": "from veomni.ops import apply_ops_patch\n\n\ndef f():\n    apply_ops_patch()\n"
            },
        ),
        (
            "veomni/models/transformers/wan/__init__.py",
            "from .patch import apply_veomni_wan_transformer_patch\n\nHOOKS = [apply_veomni_wan_transformer_patch]\n",
            {},
        ),
        ("veomni/ops/__init__.py", "from .install import apply_rotary_pos_emb_npu\n", {}),
    ],
)
def test_npu234_quiet(tmp_path, target: str, text: str, extra: dict) -> None:  # noqa: ANN001
    assert _tree_lint(tmp_path, {**_INSTALLERS, **extra, target: text}, target, "NPU234") == []


# -- NPU209: a catalog row a row table dropped ------------------------------------------------------------------
_ROWS = """
from ...registry import register_op

_IMPLS = ({impls})

for _impl in _IMPLS:
    register_op("attention", "standard", _impl, wrapper=lookup(_impl))
"""


def test_npu209_catalog_row_dropped(tmp_path) -> None:  # noqa: ANN001
    impls = '"eager", "sdpa", "flash_attention_2", "flex_attention"'
    target = "veomni/ops/kernels/attention/__init__.py"
    got = _tree_lint(tmp_path, {target: _ROWS.format(impls=impls)}, target, "NPU209")
    assert len(got) == 1 and "veomni_flash_attention_2" in got[0].message


def test_npu209_catalog_rows_all_there(tmp_path) -> None:  # noqa: ANN001
    impls = '"eager", "sdpa", "flash_attention_2", "flex_attention", "veomni_flash_attention_2"'
    target = "veomni/ops/kernels/attention/__init__.py"
    assert _tree_lint(tmp_path, {target: _ROWS.format(impls=impls)}, target, "NPU209") == []


def test_npu209_catalog_row_in_another_module(tmp_path) -> None:  # noqa: ANN001
    impls = '"eager", "sdpa", "flash_attention_2", "flex_attention"'
    target = "veomni/ops/kernels/attention/__init__.py"
    other = 'from ...registry import register_op\n\nregister_op("attention", "standard", "veomni_flash_attention_2", w)\n'
    files = {target: _ROWS.format(impls=impls), "veomni/ops/kernels/attention/sp.py": other}
    assert _tree_lint(tmp_path, files, target, "NPU209") == []


# -- NPU705: a registered loader treats the classes it returns alike --------------------------------------------
_LOADER = """
from ...loader import MODELING_REGISTRY
from ....utils.device import IS_NPU_AVAILABLE


def _convert_toy_wrapped_targets(m, a, b):
    return "model.layers"


def _convert_toy_model_targets(m, a, b):
    return "layers"


@MODELING_REGISTRY.register("toy_vl")
def register_toy_vl_modeling(architecture: str):
    if {test}:
{npu_import}
    else:
        from .generated.patched_modeling_toy_vl_gpu import ToyVLForConditionalGeneration, ToyVLModel, ToyVLText
{body}
    if "ForConditionalGeneration" in architecture:
        return ToyVLForConditionalGeneration
    return ToyVLModel
"""
_NPU_ALL = "        from .generated.patched_modeling_toy_vl_npu import ToyVLForConditionalGeneration, ToyVLModel, ToyVLText"
_NPU_MIXED = (
    "        from .generated.patched_modeling_toy_vl_gpu import ToyVLModel\n"
    "        from .generated.patched_modeling_toy_vl_npu import ToyVLForConditionalGeneration, ToyVLText"
)
_HOOKS = (
    "    for cls in ({classes}):\n        cls._create_checkpoint_tensor_converter = staticmethod(conv)\n"
    "    ToyVLForConditionalGeneration._lora = staticmethod(_convert_toy_wrapped_targets)\n"
    "    ToyVLModel._lora = staticmethod({model_fn})\n    ToyVLText._lora = staticmethod(text_fn)\n"
)


def _loader(test="IS_NPU_AVAILABLE", npu=_NPU_ALL, classes="ToyVLForConditionalGeneration, ToyVLModel, ToyVLText",
            model_fn="_convert_toy_model_targets") -> str:  # fmt: skip
    body = _HOOKS.format(classes=classes, model_fn=model_fn)
    return _LOADER.format(test=test, npu_import=npu, body=body)


@pytest.mark.parametrize(
    "text,needle",
    [
        (_loader(npu=_NPU_MIXED), "GPU generated module"),
        (_loader(test='get_device_type() == "npu"', npu=_NPU_MIXED), "GPU generated module"),
        (_loader(classes="ToyVLForConditionalGeneration, ToyVLText"), "not to `ToyVLModel`"),
        (_loader(model_fn="_convert_toy_wrapped_targets"), "_convert_toy_model_targets"),
    ],
)
def test_npu705_loader_treats_classes_alike(text: str, needle: str) -> None:
    got = lint_snippet("veomni/models/transformers/toy_vl/__init__.py", text, ["NPU705"])
    assert len(got) == 1 and needle in got[0].message


def test_npu705_loader_quiet() -> None:
    assert lint_snippet("veomni/models/transformers/toy_vl/__init__.py", _loader(), ["NPU705"]) == []


# -- NPU202: an OpSlot built inside a function is never bound ---------------------------------------------------
@pytest.mark.parametrize(
    "path,text",
    [
        (
            "veomni/models/transformers/qwen3/generated/patched_modeling_qwen3_npu.py",
            """
            from veomni.ops.dispatch import OpSlot


            class Qwen3RMSNorm:
                def forward(self, hidden_states):
                    slot = OpSlot("rms_norm", "standard")
                    if slot.use_non_eager_impl:
                        return slot(hidden_states, self.weight, 1e-6)
                    return hidden_states
            """,
        ),
        (
            "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            """
            from veomni.ops import dispatch


            def toy_mlp_init_patched(self, config):
                self.swiglu = dispatch.OpSlot("swiglu_mlp", "standard")
            """,
        ),
        (
            "veomni/models/seed_omni/decoder/loss_helpers.py",
            """
            from veomni.ops.dispatch import OpSlot


            def causal_loss(logits, labels):
                return OpSlot("cross_entropy_loss", "causal")(logits, labels)
            """,
        ),
    ],
)
def test_npu202_slot_in_function(path: str, text: str) -> None:
    got = lint_snippet(path, text, ["NPU202"])
    assert [d.code for d in got] == ["NPU202"] and "never bound" in got[0].message


def test_npu202_module_slot_quiet() -> None:
    text = """
    from veomni.ops.dispatch import OpSlot

    veomni_rms_norm = OpSlot("rms_norm", "standard")


    class Norm:
        def forward(self, x):
            if veomni_rms_norm.use_non_eager_impl:
                return veomni_rms_norm(x)
            return x
    """
    assert (
        lint_snippet("veomni/models/transformers/t/generated/patched_modeling_t_npu.py", text, ["NPU202"])
        == []
    )


# -- NPU219: a handle built in __init__ that its class never reads ----------------------------------------------
_SPEC_HEAD = """
from functools import partial

from veomni.ops import VeomniOp
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
"""


@pytest.mark.parametrize(
    "path,text",
    [
        (
            "veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py",
            _SPEC_HEAD
            + """

@config.override_method("ToyForCausalLM.__init__")
def toy_causal_init(self, config):
    self.veomni_ce = VeomniOp("cross_entropy_loss", "standard", resolve_op_impl("cross_entropy_loss_implementation"))
    self.loss_function = partial(ForCausalLMLoss, op=self.veomni_ce)


@config.override_method("ToyForTokenClassification.__init__")
def toy_tok_init(self, config):
    self.veomni_ce = VeomniOp("cross_entropy_loss", "standard", resolve_op_impl("cross_entropy_loss_implementation"))
    self.loss_function = partial(ForTokenClassification)


@config.override_method("ToyForTokenClassification.forward")
def toy_tok_forward(self, input_ids, labels=None):
    return self.loss_function(self.score(input_ids), labels)
""",
        ),
        (
            "veomni/models/transformers/toy/modeling_toy.py",
            """
from veomni.ops import VeomniOp


class ToyRMSNorm:
    def __init__(self, hidden_size):
        self.weight = hidden_size
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

    def forward(self, hidden_states):
        return rms_norm_eager(hidden_states, self.weight)
""",
        ),
        (
            "veomni/models/seed_omni/encoder/rotary.py",
            """
from veomni.ops import VeomniKernel


class VisionRotary:
    def __init__(self, dim):
        self.dim = dim
        self.rope = VeomniKernel("rope", "full", pick_impl())

    def forward(self, q, k, cos, sin):
        return apply_rotary_eager(q, k, cos, sin)
""",
        ),
    ],
)
def test_npu219_handle_never_read(path: str, text: str) -> None:
    got = lint_snippet(path, text, ["NPU219"])
    assert [d.code for d in got] == ["NPU219"] and "never called" in got[0].message


@pytest.mark.parametrize(
    "text",
    [
        # read in forward
        """
from veomni.ops import VeomniOp


class Norm:
    def __init__(self):
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "npu")

    def forward(self, x):
        return self.veomni_rms_norm(x)
""",
        # the class has no other function here: its readers are elsewhere
        """
from veomni.ops import VeomniOp


class Norm:
    def __init__(self):
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "npu")
""",
        # read by the base class's forward
        """
from veomni.ops import VeomniOp


class Base:
    def forward(self, x):
        return self.veomni_rms_norm(x)


class Norm(Base):
    def __init__(self):
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "npu")

    def extra_repr(self):
        return "norm"
""",
        # read through getattr
        """
from veomni.ops import VeomniOp


class Norm:
    def __init__(self):
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "npu")

    def forward(self, x):
        return getattr(self, "veomni_rms_norm")(x)
""",
    ],
)
def test_npu219_handle_read_quiet(text: str) -> None:
    assert lint_snippet("veomni/models/transformers/t/modeling_t.py", text, ["NPU219"]) == []


@pytest.mark.parametrize(
    "text",
    [
        """
        from ....utils.device import IS_NPU_AVAILABLE

        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_t_gpu import TForTokenClassification
            from .generated.patched_modeling_t_npu import TForCausalLM
        else:
            from .generated.patched_modeling_t_gpu import TForCausalLM, TForTokenClassification
        """,
        """
        from veomni.utils.device import get_device_type


        def load():
            if get_device_type() != "npu":
                from .generated.patched_modeling_t_gpu import TModel
                from .generated.patched_modeling_t_npu import TForCausalLM
            else:
                from .generated.patched_modeling_t_npu import TForCausalLM, TModel
            return TForCausalLM, TModel
        """,
        """
        from veomni.utils.device import is_torch_npu_available

        if is_torch_npu_available():
            from .generated.patched_modeling_t_npu import TModel
            from .generated.patched_modeling_t_gpu import TVisionTower
        """,
    ],
)
def test_npu237_branch_mixes_device_modules(text: str) -> None:
    got = lint_snippet("veomni/models/transformers/t/__init__.py", text, ["NPU237"])
    assert [d.code for d in got] == ["NPU237"]
    assert "module and its other classes" in got[0].message


# -- NPU234: a child module registering rows that nothing imports at import time --------------------------------
_FAMILY = 'from ...registry import register_op\n\nregister_op("{op}", "standard", "eager", wrapper=None)\n'


@pytest.mark.parametrize(
    "target,parent,extra",
    [
        # the families package dropped from the ops package
        ("veomni/ops/__init__.py", "from .registry import register_op\n", {}),
        # one family dropped from the families package; another module imports it inside a function only
        (
            "veomni/ops/kernels/__init__.py",
            "from . import rms_norm\n",
            {"veomni/models/x.py": "def f():\n    from veomni.ops.kernels.rope import npu\n    return npu\n"},
        ),
        # a loss table module next to its package __init__
        (
            "veomni/ops/kernels/__init__.py",
            "from . import rms_norm, rope\n",
            {
                "veomni/ops/kernels/loss_rows.py": 'from ..registry import register_op\n\nregister_op("ce", "s", "eager")\n'
            },
        ),
    ],
)
def test_npu234_registering_child_not_imported(tmp_path, target: str, parent: str, extra: dict) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/registry.py": "def register_op(*a, **k):\n    pass\n",
        "veomni/ops/__init__.py": "from . import kernels\n",
        "veomni/ops/kernels/__init__.py": "from . import rms_norm, rope\n",
        "veomni/ops/kernels/rms_norm/__init__.py": _FAMILY.format(op="rms_norm"),
        "veomni/ops/kernels/rope/__init__.py": "from .full import npu\n",
        "veomni/ops/kernels/rope/full/__init__.py": "",
        "veomni/ops/kernels/rope/full/npu.py": 'from ....registry import register_op\n\nregister_op("rope", "full", "npu")\n',
        **extra,
        target: parent,
    }
    got = _tree_lint(tmp_path, files, target, "NPU234")
    assert [d.code for d in got] == ["NPU234"] and "at import time" in got[0].message


def test_npu234_registering_children_imported(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/registry.py": "def register_op(*a, **k):\n    pass\n",
        "veomni/ops/__init__.py": "from . import kernels\n",
        "veomni/ops/kernels/__init__.py": "from . import rms_norm\n",
        "veomni/ops/kernels/rms_norm/__init__.py": _FAMILY.format(op="rms_norm"),
        # imported at module level by another module of the tree
        "veomni/ops/kernels/rope/__init__.py": _FAMILY.format(op="rope"),
        "veomni/models/rope_user.py": "from veomni.ops.kernels.rope import something\n",
        # registers only inside a function: not an import-time registration
        "veomni/ops/kernels/lazy.py": "from ..registry import register_op\n\n\ndef setup():\n    register_op('a', 'b', 'c')\n",
    }
    for target in ("veomni/ops/__init__.py", "veomni/ops/kernels/__init__.py"):
        assert _tree_lint(tmp_path, files, target, "NPU234") == []


# -- NPU229: a table of attention names skipping one of a numbered family ---------------------------------------
@pytest.mark.parametrize(
    "path,text",
    [
        (
            "veomni/models/transformers/attention_utils.py",
            """
            VARLEN_ATTENTION_TYPES = (
                "flash_attention_2",
                "flash_attention_3",
                "flash_attention_4",
                "veomni_flash_attention_3_with_sp",
                "veomni_flash_attention_4_with_sp",
            )
            """,
        ),
        (
            "veomni/data/packing.py",
            """
            def needs_cu_seqlens(impl):
                varlen = ["veomni_flash_attention_3", "veomni_flash_attention_4", "flash_attention_2", "flash_attention_3", "flash_attention_4"]
                return impl in varlen
            """,
        ),
        (
            "veomni/models/diffusers/toy/modeling_toy.py",
            """
            _SP_ATTENTION = ["flash_attention_3", "flash_attention_4", "veomni_flash_attention_4_with_sp", "veomni_flash_attention_3_with_sp", "flash_attention_2"]
            """,
        ),
    ],
)
def test_npu229_attention_table_gap(path: str, text: str) -> None:
    got = lint_snippet(path, text, ["NPU229"])
    assert [d.code for d in got] == ["NPU229"] and "table of attention implementations" in got[0].message


@pytest.mark.parametrize(
    "text",
    [
        # complete families
        """
        VARLEN = ("flash_attention_2", "flash_attention_3", "veomni_flash_attention_2_with_sp", "veomni_flash_attention_3_with_sp")
        """,
        # one member of a family only: no family to compare
        """
        NAMES = ("flash_attention_2", "flash_attention_3", "flash_attention_4", "veomni_flash_attention_2_with_sp")
        """,
        # not attention names
        """
        VERSIONS = ("python3_9", "python3_10", "torch2_1", "torch2_2", "torch2_3")
        """,
    ],
)
def test_npu229_attention_table_quiet(text: str) -> None:
    assert lint_snippet("veomni/models/transformers/attention_utils.py", text, ["NPU229"]) == []


# -- NPU227: a binding named after one op binding another -------------------------------------------------------
@pytest.mark.parametrize(
    "path,text",
    [
        (
            "veomni/models/transformers/t/modeling_t.py",
            """
            from veomni.ops import VeomniOp


            class Norm:
                def __init__(self):
                    self.veomni_rms_norm = VeomniOp("rope", "full", "npu")
            """,
        ),
        (
            "veomni/models/seed_omni/decoder/moe.py",
            """
            from veomni.ops import VeomniOp


            class Moe:
                def __init__(self):
                    self.load_balancing_loss_op = VeomniOp("moe_experts", "standard", "fused_npu")
            """,
        ),
        (
            "veomni/models/transformers/t/generated/patched_modeling_t_npu.py",
            """
            from veomni.ops import VeomniOp

            veomni_swiglu_mlp = VeomniOp("rms_norm", "standard", "npu")
            """,
        ),
    ],
)
def test_npu227_binding_names_another_op(path: str, text: str) -> None:
    got = lint_snippet(path, text, ["NPU227"])
    assert [d.code for d in got] == ["NPU227"] and "op but binds" in got[0].message


def test_npu227_binding_names_its_own_op_quiet() -> None:
    text = """
    from veomni.ops import VeomniOp


    class M:
        def __init__(self):
            self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "npu")
            self.veomni_moe_experts_forward = VeomniOp("moe_experts", "standard", "fused_npu")
            self.veomni_ce = VeomniOp("cross_entropy_loss", "standard", "eager")
            self.rope = VeomniOp("rope", "full", "npu")
    """
    assert lint_snippet("veomni/models/transformers/t/modeling_t.py", text, ["NPU227"]) == []
