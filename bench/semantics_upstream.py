"""What the model-semantics rules read from the installed transformers (5.9.0): every RMSNorm class's contract,
every causal-LM / conditional-generation forward's loss path and media parameters, and a self-check that each
upstream modeling file, linted as a generated copy of itself, yields no semantics finding.

    .venv/bin/python bench/semantics_upstream.py
"""

from __future__ import annotations

import ast
from collections import Counter

from npu_lint.core.astutil import transformers_dir
from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.rules.base import load_rule_modules
from npu_lint.veomni.norms import upstream_rms_contract
from npu_lint.veomni.upstream import upstream_class_method

CODES = [
    "NPU401", "NPU402", "NPU403", "NPU404", "NPU405", "NPU411", "NPU412", "NPU413", "NPU414", "NPU415",
    "NPU701", "NPU702", "NPU703", "NPU704", "NPU705",
]  # fmt: skip


def main() -> None:
    import transformers

    root = transformers_dir()
    assert root is not None
    print(f"transformers {transformers.__version__} at {root}")
    load_rule_modules()
    rms: Counter[str] = Counter()
    odd: list[str] = []
    loss: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    files = 0
    for path in sorted((root / "models").glob("*/modeling_*.py")):
        module = "transformers.models." + path.parent.name + "." + path.stem
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        files += 1
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            if node.name.endswith("RMSNorm"):
                c = upstream_rms_contract(module, node.name)
                if c is None:
                    rms["unread"] += 1
                    continue
                kind = "gemma-style" if c.gemma_style else "standard" if c.standard_style else "other"
                rms[kind] += 1
                if c.weight_init == "zeros" and c.offset is False or c.weight_init == "ones" and c.offset:
                    odd.append(f"{module}.{node.name}: init {c.weight_init}, offset {c.offset}")
                if c.eps_attr is None:
                    rms["no eps attribute"] += 1
            if node.name.endswith(("ForCausalLM", "ForConditionalGeneration")):
                fwd = upstream_class_method(module, node.name, "forward")
                if fwd is None:
                    continue
                src = ast.unparse(fwd)
                loss["forwards"] += 1
                loss["with loss_function"] += "loss_function(" in src
                loss["forwarding **kwargs to the loss"] += "loss_function(" in src and "**kwargs)" in src
                loss["soft-capping"] += "final_logit_softcapping" in src
                loss["text_config vocab"] += "text_config.vocab_size" in src
                loss["logits_to_keep"] += "logits_to_keep" in src
                loss["pixel_values"] += "pixel_values" in src
        copy = f"# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY\n# Source: {module}\n" + text
        fake = str(root / "models" / path.parent.name / "generated" / path.name)
        for d in lint_source(SourceFile.from_text(fake, copy), CODES, Settings()):
            findings[d.code] += 1
    print(f"modeling files: {files}")
    print("RMSNorm classes:", dict(rms))
    print("init/forward disagreements (reviewed by hand):")
    for line in odd:
        print("  ", line)
    print("loss forwards:", dict(loss))
    print("findings on the files linted as generated copies of themselves:", dict(findings) or "none")


if __name__ == "__main__":
    main()
