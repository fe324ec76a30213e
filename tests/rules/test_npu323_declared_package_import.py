"""NPU323: a module whose lazy import the tree guards with an ``e.name == "<package>"`` handler no longer imports
that package anywhere in its closure (the side-effect import that registers an extension's operators was
pruned), in regions other than the dev case (the AscendC gated delta rule and ``fla_npu``); correct trees stay
quiet."""

from __future__ import annotations

from tests.rules.snippets import lint_in_tree, ops_tree


def _lines(tmp_path, files: dict[str, str], target: str, code: str = "NPU323") -> list[int]:  # noqa: ANN001
    return sorted(d.line for d in lint_in_tree(ops_tree(tmp_path, files), target, [code]) if d.code == code)


# a MoE dispatcher in the distributed region: `deep_ep_npu` registers torch.ops.deep_ep.*
_DISPATCH_INIT = """
def build_dispatcher(kind):
    if kind == "deepep":
        try:
            from .deepep_npu import DeepEPDispatcher
        except ModuleNotFoundError as exc:
            if exc.name == "deep_ep_npu":
                raise RuntimeError("install deep_ep_npu or use the all-to-all dispatcher") from exc
            raise
        return DeepEPDispatcher()
    return None
"""

_DISPATCH_PRUNED = """
import torch
import torch_npu


class DeepEPDispatcher:
    def dispatch(self, x, topk_idx):
        return torch.ops.deep_ep.npu_dispatch(x, topk_idx)
"""


def test_distributed_dispatcher_registration_import_pruned(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/distributed/__init__.py": "",
        "veomni/distributed/moe/__init__.py": _DISPATCH_INIT,
        "veomni/distributed/moe/deepep_npu.py": _DISPATCH_PRUNED,
    }
    assert _lines(tmp_path, files, "veomni/distributed/moe/deepep_npu.py") == [2]
    assert _lines(tmp_path, files, "veomni/distributed/moe/__init__.py") == [6]


def test_registration_import_in_a_helper_module_of_the_closure_satisfies(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/distributed/__init__.py": "",
        "veomni/distributed/moe/__init__.py": _DISPATCH_INIT,
        "veomni/distributed/moe/_register.py": "import deep_ep_npu  # noqa: F401\n",
        "veomni/distributed/moe/deepep_npu.py": "from . import _register  # noqa: F401\n" + _DISPATCH_PRUNED,
    }
    assert _lines(tmp_path, files, "veomni/distributed/moe/deepep_npu.py") == []
    assert _lines(tmp_path, files, "veomni/distributed/moe/__init__.py") == []


def test_kernel_registry_factory_tuple_of_names_in_ops(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/kernels/__init__.py": "",
        "veomni/ops/kernels/sparse_attn/__init__.py": """
        def _npu_factory():
            try:
                from .npu_sparse import sparse_attention
            except ImportError as e:
                if e.name in ("sparse_attn_npu", "torch_npu"):
                    raise RuntimeError(f"needs {e.name}") from e
                raise
            return sparse_attention
        """,
        "veomni/ops/kernels/sparse_attn/npu_sparse.py": """
        from __future__ import annotations

        import torch
        import torch_npu

        from ._layout import to_bnsd


        def sparse_attention(q, k, v, idx):
            return torch.ops.npu.npu_sparse_flash_attention(to_bnsd(q), k, v, idx)
        """,
        "veomni/ops/kernels/sparse_attn/_layout.py": "def to_bnsd(x):\n    return x.transpose(1, 2)\n",
    }
    assert _lines(tmp_path, files, "veomni/ops/kernels/sparse_attn/npu_sparse.py") == [4]
    files["veomni/ops/kernels/sparse_attn/npu_sparse.py"] = files[
        "veomni/ops/kernels/sparse_attn/npu_sparse.py"
    ].replace("import torch_npu\n", "import torch_npu\n\nimport sparse_attn_npu  # noqa: F401\n")
    assert _lines(tmp_path, files, "veomni/ops/kernels/sparse_attn/npu_sparse.py") == []


def test_quiet_when_the_handler_imports_the_package_itself_or_names_no_package(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/data/__init__.py": """
        try:
            import decord
            from .video_reader import read_frames
        except ImportError as e:
            if e.name == "decord":
                read_frames = None
        try:
            from .audio_reader import read_audio
        except ImportError as e:
            print(e)
        """,
        "veomni/data/video_reader.py": "import torch\n\n\ndef read_frames(p):\n    return torch.ops.decord.read(p)\n",
        "veomni/data/audio_reader.py": "import torch\n\n\ndef read_audio(p):\n    return torch.ops.audio.read(p)\n",
    }
    assert _lines(tmp_path, files, "veomni/data/video_reader.py") == []
    assert _lines(tmp_path, files, "veomni/data/audio_reader.py") == []


# -- NPU324: a probe switch between two calls of one name whose import lost its own switch ------------------------


def _lines324(tmp_path, files: dict[str, str], target: str) -> list[int]:  # noqa: ANN001
    return _lines(tmp_path, files, target, "NPU324")


_A2A_OLD = """
def all_to_all_tokens(x, group):
    return x
"""
_A2A_NEW = """
def all_to_all_tokens(x, group, async_op=False):
    return x
"""


def test_device_switch_in_distributed_code(tmp_path) -> None:  # noqa: ANN001
    caller = """
    from veomni.utils.device import IS_NPU_AVAILABLE

    from .comm_legacy import all_to_all_tokens


    def exchange(x, group):
        if IS_NPU_AVAILABLE:
            return all_to_all_tokens(x, group, async_op=True)
        return all_to_all_tokens(x, group)
    """
    files = {
        "veomni/ops/__init__.py": "",
        "veomni/utils/__init__.py": "",
        "veomni/utils/device.py": "IS_NPU_AVAILABLE = False\n",
        "veomni/distributed/__init__.py": "",
        "veomni/distributed/moe/__init__.py": "",
        "veomni/distributed/moe/comm_legacy.py": _A2A_OLD,
        "veomni/distributed/moe/comm_hccl.py": _A2A_NEW,
        "veomni/distributed/moe/exchange.py": caller,
    }
    assert _lines324(tmp_path, files, "veomni/distributed/moe/exchange.py") == [3]
    switched = caller.replace(
        "from .comm_legacy import all_to_all_tokens\n",
        "if IS_NPU_AVAILABLE:\n    from .comm_hccl import all_to_all_tokens\nelse:\n    from .comm_legacy import all_to_all_tokens\n",
    )
    files["veomni/distributed/moe/exchange.py"] = switched
    assert _lines324(tmp_path, files, "veomni/distributed/moe/exchange.py") == []


def test_soc_switch_in_model_helper_with_decorated_callee(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/__init__.py": "",
        "veomni/models/__init__.py": "",
        "veomni/models/toy/__init__.py": "",
        "veomni/models/toy/_kernels.py": """
        import functools


        def contiguous_inputs(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return fn(*args, **kwargs)

            return wrapper


        @contiguous_inputs
        def fused_gate(x, w, bias=None):
            return x @ w
        """,
        "veomni/models/toy/modeling_toy.py": """
        from veomni.utils.soc import is_910b

        from ._kernels import fused_gate


        class ToyGate:
            def forward(self, x):
                if not is_910b():
                    return fused_gate(x, self.w, bias=self.b, transpose_w=True)
                return fused_gate(x, self.w, bias=self.b)
        """,
    }
    assert _lines324(tmp_path, files, "veomni/models/toy/modeling_toy.py") == [3]


def test_quiet_for_data_tests_kwargs_callees_and_accepted_keywords(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/__init__.py": "",
        "veomni/data/__init__.py": "",
        "veomni/data/_decode.py": """
        def decode(path, fast=False, **options):
            return path


        def resize(img, size, antialias=True):
            return img
        """,
        "veomni/data/reader.py": """
        from ._decode import decode, resize

        USE_FAST = True


        def read(path, size, antialias):
            if USE_FAST:
                img = decode(path, fast=True, threads=4)
                return resize(img, size, antialias=False)
            img = decode(path)
            if antialias:
                return resize(img, size, antialias=antialias)
            return resize(img, size)
        """,
    }
    assert _lines324(tmp_path, files, "veomni/data/reader.py") == []
