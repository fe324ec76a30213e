"""
Patch spec for the toy dense model (Ascend NPU): a copy of the GPU config that keeps its target (NPU513).

Regen command:
patchgen veomni.models.transformers.toy_dense.toy_dense_npu_patch_gen_config -o veomni/models/transformers/toy_dense/generated --diff -v
"""

from copy import deepcopy

from veomni.models.transformers.toy_dense.toy_dense_gpu_patch_gen_config import config as gpu_config


config = deepcopy(gpu_config)  # NPU513: no target_file of its own: it regenerates the GPU module
config.description = "Toy dense model for Ascend NPU"
