"""Recall of the model-semantics rules (NPU40x RMSNorm, NPU41x loss, NPU7xx multimodal) on bugs injected into
copies of real files of the veomni==0.1.12 wheel, one bug at a time.

Each injection is a list of exact-string edits (old -> new, on every occurrence or the first) of our own writing,
applied to one file of the wheel; the rule is credited when the injected copy has more findings of the expected
code than the original. The wheel is read from the corpus cache (tests/corpus.py); nothing of it is committed.

    .venv/bin/python bench/semantics_recall.py [--json]
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.rules.base import load_rule_modules

WHEEL = Path.home() / ".cache/npu-lint-corpus/veomni-0.1.12/veomni/models/transformers"

# (name, file under WHEEL, [(old, new, all_occurrences)], expected code)
INJECTIONS: list[tuple[str, str, list[tuple[str, str, bool]], str]] = [
    # -- RMSNorm contracts --------------------------------------------------------------------------
    (
        "gemma-style model switched to the standard variant (spec)",
        "qwen3_5/qwen3_5_gpu_patch_gen_config.py",
        [('OpSlot("rms_norm", "qwen3_5")', 'OpSlot("rms_norm", "standard")', True)],
        "NPU402",
    ),
    (
        "gemma-style model switched to the standard variant (generated)",
        "qwen3_5/generated/patched_modeling_qwen3_5_gpu.py",
        [('OpSlot("rms_norm", "qwen3_5")', 'OpSlot("rms_norm", "standard")', True)],
        "NPU402",
    ),
    (
        "standard model switched to the offset variant (spec)",
        "qwen3/qwen3_gpu_patch_gen_config.py",
        [('OpSlot("rms_norm", "standard")', 'OpSlot("rms_norm", "qwen3_5")', True)],
        "NPU403",
    ),
    (
        "standard model switched to the offset variant (generated)",
        "qwen3/generated/patched_modeling_qwen3_gpu.py",
        [('OpSlot("rms_norm", "standard")', 'OpSlot("rms_norm", "qwen3_5")', True)],
        "NPU403",
    ),
    (
        "standard model switched to the offset variant (qwen3_vl text norm)",
        "qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        [('OpSlot("rms_norm", "standard")', 'OpSlot("rms_norm", "qwen3_5")', True)],
        "NPU403",
    ),
    (
        "1.0 + weight passed to the standard slot of a standard model (spec)",
        "qwen3/qwen3_gpu_patch_gen_config.py",
        [
            (
                "veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)",
                "veomni_rms_norm(hidden_states, 1.0 + self.weight, self.variance_epsilon)",
                True,
            )
        ],
        "NPU404",
    ),
    (
        "1.0 + weight passed to the standard slot of a standard model (generated)",
        "qwen3/generated/patched_modeling_qwen3_gpu.py",
        [
            (
                "veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)",
                "veomni_rms_norm(hidden_states, 1.0 + self.weight.float(), self.variance_epsilon)",
                True,
            )
        ],
        "NPU404",
    ),
    (
        "1 + weight passed to the qwen3_5 (offset) slot (spec)",
        "qwen3_5/qwen3_5_gpu_patch_gen_config.py",
        [
            (
                "veomni_rms_norm(x, self.weight, self.eps)",
                "veomni_rms_norm(x, 1 + self.weight, self.eps)",
                True,
            )
        ],
        "NPU401",
    ),
    (
        "1 + weight passed to the qwen3_5 (offset) slot (generated)",
        "qwen3_5/generated/patched_modeling_qwen3_5_gpu.py",
        [
            (
                "veomni_rms_norm(x, self.weight, self.eps)",
                "veomni_rms_norm(x, (1.0 + self.weight).to(x.dtype), self.eps)",
                True,
            )
        ],
        "NPU401",
    ),
    (
        "Llama-style eps attribute in a Gemma-style norm (spec)",
        "qwen3_5/qwen3_5_gpu_patch_gen_config.py",
        [
            (
                "veomni_rms_norm(x, self.weight, self.eps)",
                "veomni_rms_norm(x, self.weight, self.variance_epsilon)",
                True,
            )
        ],
        "NPU405",
    ),
    (
        "Gemma-style eps attribute in a standard norm (spec)",
        "qwen3/qwen3_gpu_patch_gen_config.py",
        [
            (
                "veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)",
                "veomni_rms_norm(hidden_states, self.weight, self.eps)",
                True,
            )
        ],
        "NPU405",
    ),
    (
        "standard class replaced by an offset (Gemma) vendor RMSNorm (seed_oss spec)",
        "seed_oss/seed_oss_gpu_patch_gen_config.py",
        [('replacement_name="LigerRMSNorm"', 'replacement_name="LigerRMSNormForGemma"', True)],
        "NPU403",
    ),
    # -- loss semantics -----------------------------------------------------------------------------------
    (
        "final-logit soft-capping dropped (gemma3 spec)",
        "gemma3/gemma3_gpu_patch_gen_config.py",
        [
            (
                "            if self.config.final_logit_softcapping is not None:\n"
                "                raise ValueError(\n",
                "            if False:\n                raise ValueError(\n",
                False,
            ),
            (
                "    if self.config.final_logit_softcapping is not None:\n"
                "                logits = logits / self.config.final_logit_softcapping\n"
                "                logits = torch.tanh(logits)\n"
                "                logits = logits * self.config.final_logit_softcapping\n",
                "    pass\n",
                True,
            ),
            (
                "        if self.config.final_logit_softcapping is not None:\n"
                "            logits = logits / self.config.final_logit_softcapping\n"
                "            logits = torch.tanh(logits)\n"
                "            logits = logits * self.config.final_logit_softcapping\n",
                "",
                True,
            ),
        ],
        "NPU411",
    ),
    (
        "final-logit soft-capping applied twice (gemma3 spec)",
        "gemma3/gemma3_gpu_patch_gen_config.py",
        [
            (
                "                logits = torch.tanh(logits)\n",
                "                logits = torch.tanh(logits)\n                logits = torch.tanh(logits)\n",
                False,
            )
        ],
        "NPU411",
    ),
    (
        "labels shifted by hand, then again by the loss (qwen3_moe spec)",
        "qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
        [("                labels=labels,\n", "                labels=labels[..., 1:],\n", True)],
        "NPU412",
    ),
    (
        "loss kwargs (num_items_in_batch) dropped (qwen3_moe spec)",
        "qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
        [
            (
                "                weights=self.lm_head.weight,\n                **kwargs,\n",
                "                weights=self.lm_head.weight,\n",
                True,
            )
        ],
        "NPU413",
    ),
    (
        "loss kwargs dropped (qwen3_5_moe generated)",
        "qwen3_5_moe/generated/patched_modeling_qwen3_5_moe_gpu.py",
        [
            (
                "                    weights=self.lm_head.weight,\n                    **kwargs,\n",
                "                    weights=self.lm_head.weight,\n",
                True,
            )
        ],
        "NPU413",
    ),
    (
        "logits_to_keep ignored (qwen3_moe spec)",
        "qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
        [
            (
                "slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep",
                "slice_indices = slice(None)",
                True,
            )
        ],
        "NPU414",
    ),
    (
        "logits_to_keep ignored (qwen3_vl spec)",
        "qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        [
            (
                "slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep",
                "slice_indices = slice(None)",
                True,
            )
        ],
        "NPU414",
    ),
    (
        "VLM loss with the top-level vocab size (qwen3_vl spec)",
        "qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        [("vocab_size=self.config.text_config.vocab_size", "vocab_size=self.config.vocab_size", False)],
        "NPU415",
    ),
    (
        "VLM loss with the top-level vocab size (qwen3_vl generated)",
        "qwen3_vl/generated/patched_modeling_qwen3_vl_gpu.py",
        [("vocab_size=self.config.text_config.vocab_size", "vocab_size=self.config.vocab_size", False)],
        "NPU415",
    ),
    # -- multimodal wrappers -------------------------------------------------------------------------------
    (
        "pixel_values_videos accepted, not passed on (qwen3_vl spec)",
        "qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        [("        pixel_values_videos=pixel_values_videos,\n", "", True)],
        "NPU701",
    ),
    (
        "text-only micro-batch skips the vision tower (qwen3_vl spec)",
        "qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        [("self.visual.dummy_forward()", "None", True)],
        "NPU703",
    ),
    (
        "dummy forward without the zero-valued dependency (qwen3_vl spec)",
        "qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        [(".mean() * 0.0", ".mean()", True)],
        "NPU703",
    ),
    (
        "get_position_id_func wraps another model's rope index (qwen3_5 spec)",
        "qwen3_5/qwen3_5_gpu_patch_gen_config.py",
        [("Qwen3_5Model.get_rope_index", "Qwen3VLModel.get_rope_index", True)],
        "NPU704",
    ),
    (
        "get_position_id_func wraps another model's rope index (qwen2_vl generated)",
        "qwen2_vl/generated/patched_modeling_qwen2_vl_gpu.py",
        [("Qwen2VLModel.get_rope_index", "Qwen2_5_VLModel.get_rope_index", True)],
        "NPU704",
    ),
    (
        "Model.forward drops the 3-D position ids (qwen3_vl spec)",
        "qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        [("position_ids = self.compute_3d_position_ids(", "position_ids = plain_position_ids(", True)],
        "NPU704",
    ),
    (
        "wrapper __init__ renames a submodule without a mapping (qwen3_omni_moe spec)",
        "qwen3_omni_moe/qwen3_omni_moe_gpu_patch_gen_config.py",
        [("    self.thinker = Qwen3OmniMoeThinker", "    self.thinker_model = Qwen3OmniMoeThinker", True)],
        "NPU705",
    ),
]


def _findings(path: str, text: str, code: str) -> int:
    return sum(1 for d in lint_source(SourceFile.from_text(path, text), [code], Settings()) if d.code == code)


# the same edits, injected into every file of the wheel that holds the first edit's text ("*" as the file)
SWEEPS: list[tuple[str, list[tuple[str, str, bool]], str]] = [
    (
        "standard model switched to the offset variant",
        [('OpSlot("rms_norm", "standard")', 'OpSlot("rms_norm", "qwen3_5")', True)],
        "NPU403",
    ),
    (
        "gemma-style model switched to the standard variant",
        [('OpSlot("rms_norm", "qwen3_5")', 'OpSlot("rms_norm", "standard")', True)],
        "NPU402",
    ),
    (
        "1.0 + weight passed to the standard slot of a standard model",
        [
            (
                "veomni_rms_norm(hidden_states, self.weight,",
                "veomni_rms_norm(hidden_states, 1.0 + self.weight,",
                True,
            )
        ],
        "NPU404",
    ),
    (
        "offset applied twice through the qwen3_5 slot",
        [("veomni_rms_norm(x, self.weight,", "veomni_rms_norm(x, 1.0 + self.weight.float(),", True)],
        "NPU401",
    ),
    (
        "Gemma-style eps attribute in a standard norm",
        [
            (
                "veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)",
                "veomni_rms_norm(hidden_states, self.weight, self.eps)",
                True,
            )
        ],
        "NPU405",
    ),
    (
        "1.0 + weight passed to the vendor kernel of a standard norm",
        [
            (
                "npu_rms_norm(hidden_states.float(), self.weight.float(),",
                "npu_rms_norm(hidden_states.float(), 1.0 + self.weight.float(),",
                True,
            )
        ],
        "NPU404",
    ),
    (
        "Gemma-style eps attribute in a vendor kernel call of a standard norm",
        [
            (
                "self.weight.float(), epsilon=self.variance_epsilon)",
                "self.weight.float(), epsilon=self.eps)",
                True,
            )
        ],
        "NPU405",
    ),
    (
        "VLM loss with the top-level vocab size",
        [("vocab_size=self.config.text_config.vocab_size", "vocab_size=self.config.vocab_size", False)],
        "NPU415",
    ),
    (
        "logits_to_keep ignored",
        [
            (
                "slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep",
                "slice_indices = slice(None)",
                True,
            )
        ],
        "NPU414",
    ),
    ("text-only micro-batch skips the tower", [(".dummy_forward()", ".forward_nothing()", True)], "NPU703"),
    ("dummy forward without the zero-valued dependency", [(".mean() * 0.0", ".mean()", True)], "NPU703"),
    (
        "another model's rope index",
        [("Model.get_rope_index, fake_model", "VLModelX.get_rope_index, fake_model", True)],
        "NPU704",
    ),
]


# regex sweeps: (name, edits, code, a text the file must hold to be a candidate)
RE_SWEEPS: list[tuple[str, list[tuple[str, str, bool]], str, str]] = [
    (
        "RMSNorm eager fallback without the fp32 upcast",
        [(r"re:\n +hidden_states = hidden_states\.to\(torch\.float32\)\n", "\n", False)],
        "NPU406",
        "RMSNorm",
    ),
    (
        "final-logit soft-capping dropped",
        [
            (
                r"re:( +)if self\.config\.final_logit_softcapping is not None:\n\s+raise ValueError\(",
                r"\1if False:\n\1    raise ValueError(",
                True,
            ),
            (
                r"re:( +)if self\.config\.final_logit_softcapping is not None:\n\s+logits = logits / "
                r"self\.config\.final_logit_softcapping\n\s+logits = torch\.tanh\(logits\)\n\s+logits = logits \* "
                r"self\.config\.final_logit_softcapping\n",
                r"\1pass\n",
                True,
            ),
        ],
        "NPU411",
        "final_logit_softcapping",
    ),
    (
        "soft-capping applied twice",
        [
            (
                r"re:( +)logits = torch\.tanh\(logits\)\n",
                r"\1logits = torch.tanh(logits)\n\1logits = torch.tanh(logits)\n",
                False,
            )
        ],
        "NPU411",
        "final_logit_softcapping",
    ),
    (
        "labels shifted by hand, then again by the loss",
        [(r"re:( +)labels=labels,\n", r"\1labels=labels[..., 1:],\n", True)],
        "NPU412",
        "loss_function(",
    ),
    (
        "loss kwargs dropped from a causal-LM loss",
        [(r"re:(weights=self\.lm_head\.weight,\n)\s+\*\*kwargs,\n", r"\1", True)],
        "NPU413",
        'ForCausalLM.forward"',
    ),
    (
        "pixel_values_videos accepted, not passed on",
        [(r"re:\n +pixel_values_videos=pixel_values_videos,", "", True)],
        "NPU701",
        "pixel_values_videos=pixel_values_videos",
    ),
    (
        "image_grid_thw accepted, not passed on",
        [(r"re:\n +image_grid_thw=image_grid_thw,", "", True)],
        "NPU701",
        "image_grid_thw=image_grid_thw",
    ),
    (
        "image_grid_thw overwritten before it is read",
        [
            (
                r"re:\n( +)(if pixel_values is not None:\n\s+image_outputs)",
                r"\n\1image_grid_thw = None\n\1\2",
                False,
            )
        ],
        "NPU701",
        "image_outputs",
    ),
    (
        "audio tower skipped on text-only micro-batches",
        [("self.audio_tower.dummy_forward()", "self.audio_tower.forward_nothing()", True)],
        "NPU703",
        "audio_tower.dummy_forward",
    ),
    (
        "audio dummy forward without the zero-valued dependency",
        [(r"re:(audio_tower\.dummy_forward\(\)\.last_hidden_state\.mean\(\)) \* 0\.0", r"\1", True)],
        "NPU703",
        "audio_tower.dummy_forward",
    ),
    (
        "wrapper submodule renamed without a mapping",
        [
            (
                r"re:(\n +)self\.(thinker|model|visual|language_model) = (\w+)\(",
                r"\1self.\2_renamed = \3(",
                False,
            )
        ],
        "NPU705",
        "__init__",
    ),
]


def _files() -> list[Path]:
    return sorted(
        p for p in WHEEL.rglob("*.py") if p.name.endswith("_patch_gen_config.py") or "generated" in p.parts
    )


def _expanded() -> list[tuple[str, str, list[tuple[str, str, bool]], str]]:
    out = list(INJECTIONS)
    files = _files()
    for name, edits, code in SWEEPS:
        for path in files:
            if edits[0][0] in path.read_text(encoding="utf-8"):
                out.append((f"{name} (sweep)", str(path.relative_to(WHEEL)), edits, code))
    for name, edits, code, needle in RE_SWEEPS:
        for path in files:
            text = path.read_text(encoding="utf-8")
            if needle in text and re.search(edits[0][0][3:], text):
                out.append((f"{name} (sweep)", str(path.relative_to(WHEEL)), edits, code))
    return out


def run() -> list[dict[str, object]]:
    load_rule_modules()
    out = []
    for name, rel, edits, code in _expanded():
        path = WHEEL / rel
        original = path.read_text(encoding="utf-8")
        text = original
        applied = True
        for old, new, every in edits:
            if old.startswith("re:"):
                text, n = re.subn(old[3:], new, text, count=0 if every else 1)
                if not n:
                    applied = False
                    break
                continue
            if old not in text:
                applied = False
                break
            text = text.replace(old, new) if every else text.replace(old, new, 1)
        if not edits:  # the wheel's own bug (no injection): the rule must report the original
            before, after = 0, _findings(str(path), original, code)
        else:
            before, after = _findings(str(path), original, code), _findings(str(path), text, code)
        out.append(
            {
                "bug": name,
                "file": rel,
                "code": code,
                "applied": applied,
                "detected": applied and after > before,
            }
        )
    return out


def main() -> None:
    results = run()
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))
        return
    detected = sum(1 for r in results if r["detected"])
    by_code: dict[str, list[int]] = {}
    for r in results:
        counts = by_code.setdefault(str(r["code"]), [0, 0])
        counts[0] += bool(r["detected"])
        counts[1] += 1
    for r in results:
        mark = "yes" if r["detected"] else ("NOT APPLIED" if not r["applied"] else "no")
        print(f"{r['code']}  {mark:11}  {r['bug']}  [{r['file']}]")
    for code, (hit, total) in sorted(by_code.items()):
        print(f"{code}: {hit}/{total}")
    print(f"recall: {detected}/{len(results)}")


if __name__ == "__main__":
    main()
