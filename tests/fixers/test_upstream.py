"""The astroid reader of the installed transformers source (never imports transformers)."""

from __future__ import annotations

import subprocess
import sys

from npu_lint.veomni import upstream


def test_transformers_is_installed() -> None:
    """The tests below read the installed transformers source (make test installs transformers 5.9.0)."""
    assert upstream.transformers_root() is not None, "transformers is not installed: pip install -e '.[dev]'"


LLAMA = "transformers.models.llama.modeling_llama"


def test_module_path_finds_modeling_files() -> None:
    path = upstream.module_path(LLAMA)
    assert path is not None and path.endswith("modeling_llama.py")
    assert upstream.module_path("torch.nn") is None
    assert upstream.module_path("transformers.models.no_such_model.modeling_x") is None


def test_method_source_is_dedented_def_without_decorators() -> None:
    src = upstream.method_source(LLAMA, "LlamaRMSNorm", "__init__")
    assert src is not None
    assert src.text.startswith("def __init__(self, hidden_size")
    assert "self.variance_epsilon = eps" in src.text
    assert upstream.method_source(LLAMA, "LlamaRMSNorm", "no_such_method") is None
    assert upstream.method_source(LLAMA, "NoSuchClass", "__init__") is None


def test_class_init_own_and_inherited() -> None:
    own = upstream.class_init(LLAMA, "LlamaForCausalLM")
    assert isinstance(own, upstream.MethodSource) and "self.lm_head" in own.text
    inherited = upstream.class_init(LLAMA, "LlamaForSequenceClassification")
    assert isinstance(inherited, upstream.InheritedInit)
    assert inherited.owner == "GenericForSequenceClassification"
    assert inherited.module == "transformers.modeling_layers"
    assert inherited.params == (("config", None, "positional"),)


def test_callers_of_a_free_function() -> None:
    found = upstream.callers_of(LLAMA, "apply_rotary_pos_emb")
    assert found is not None
    methods, functions = found
    assert ("LlamaAttention", "forward") in methods
    assert functions == []


def test_resolve_name_import_follows_the_upstream_imports() -> None:
    assert upstream.resolve_name_import(LLAMA, "LlamaConfig") == (
        "from transformers.models.llama.configuration_llama import LlamaConfig"
    )
    assert upstream.resolve_name_import(LLAMA, "torch") == "import torch"
    assert upstream.resolve_name_import(LLAMA, "LlamaMLP") == f"from {LLAMA} import LlamaMLP"
    assert upstream.resolve_name_import(LLAMA, "not_bound_anywhere") is None


def test_self_attributes_of_init() -> None:
    attrs = upstream.self_attributes(LLAMA, "LlamaMLP")
    assert attrs is not None and {"gate_proj", "up_proj", "down_proj"} <= attrs


def test_reading_never_imports_transformers() -> None:
    code = (
        "import sys\n"
        "from npu_lint.veomni import upstream\n"
        f"assert upstream.class_init({LLAMA!r}, 'LlamaForSequenceClassification') is not None\n"
        f"assert upstream.callers_of({LLAMA!r}, 'apply_rotary_pos_emb')\n"
        "assert 'transformers' not in sys.modules, sorted(m for m in sys.modules if 'transformers' in m)\n"
        "assert 'torch' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
