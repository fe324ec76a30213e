"""
Patch spec for the toy dense model (GPU).

Regen command:
patchgen veomni.models.transformers.toy_dense.toy_dense_gpu_patch_gen_config -o veomni/models/transformers/toy_dense/generated --diff -v
"""

from veomni.patchgen.patch_spec import PatchConfig


config = PatchConfig(
    source_module="transformers.models.toy_dense.modeling_toy_dense",
    target_file="patched_modeling_toy_dense_gpu.py",
    description="Toy dense model with VeOmni patches",
)
