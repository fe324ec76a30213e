"""The migration plan of one model package: the per-op table, the GPU-only dependencies, the ordered steps.

:func:`build_op_table` lists every operator the package dispatches or implements eagerly with its registry rows
(GPU and NPU implementations, in the tree's own names) and the action it needs; :func:`dependencies` classifies
vendor kernels, attention implementations and CUDA APIs; :func:`build_steps` orders the implementation steps
from the findings, the inventory and the checklist.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_lint.audit.checklist import FAIL, NOT_ATTAINABLE, AuditFacts
from npu_lint.audit.inventory import (
    Lint,
    Package,
    dispatch_decls,
    embedded_trees,
    parse_file,
    str_const,
)
from npu_lint.core.astutil import call_name, keyword_arg
from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.veomni import catalog, vendor_map
from npu_lint.veomni.project import Project

_ATTN_IMPLS = {
    "flash_attention_2": "has an NPU row (flash_attention_2 / veomni_flash_attention_2)",
    "veomni_flash_attention_2": "has an NPU row",
    "flash_attention_3": "GPU only",
    "flash_attention_4": "GPU only",
    "sdpa": "device-agnostic",
    "flex_attention": "device-agnostic",
}


_ATTN_SUPPORTS = re.compile(r"^_supports_(flash_attn\w*|sdpa|flex_attn)$")


@dataclass
class _Row:
    op: str
    variant: str
    impl: str
    requirement: str


def _registry_rows(project: Project) -> tuple[list[_Row], str]:
    """The registry rows of the tree (an OpSlot tree's ``KernelSpec`` rows, whose eager implementation is
    implicit; else its register rows), else the rows the rules check against (the built-in catalog)."""
    if project.root is not None and project.live_rows is None:
        if project.registered:
            rows = [_Row(r.op, r.variant, r.impl, r.requirement) for r in project.registered]
            return rows, f"the tree's `{project.api.register_function or 'register_op'}` rows"
        if project.slot_rows:
            pairs = sorted({(r.op, r.variant) for r in project.slot_rows})
            rows = [_Row(r.op, r.variant, r.impl, r.requirement) for r in project.slot_rows]
            rows += [_Row(op, variant, "eager", catalog.ANY) for op, variant in pairs]
            return rows, "the tree's `KernelSpec` rows (eager is implicit for every slot)"
    rows = [_Row(r.op, r.variant, r.impl, r.requirement) for r in project.rows]
    return rows, project.rows_origin


def _in_tree(project: Project, op: str, variant: str) -> tuple[str, str]:
    """A catalog ``op/variant`` in the tree's own names (``rope/full`` is an OpSlot tree's
    ``rotary_pos_emb/full``; the offset RMSNorm the tree's variant); variant "" when the tree registers no such
    op (outside any tree: unchanged)."""
    if project.root is None:
        return op, variant
    found = project.api.tree_op(op, variant)
    if found is None:
        return op, ""
    return found[0], found[1] or ""


def _impls(rows: list[_Row], op: str, variant: str) -> tuple[list[str], list[str], bool]:
    """(GPU implementations, NPU implementations, row exists). NPU: npu rows, else device-agnostic non-eager."""
    mine = [r for r in rows if r.op == op and r.variant == variant]
    gpu = [
        r.impl
        for r in mine
        if r.requirement in (catalog.GPU, "cuda")
        or (r.requirement == catalog.ANY and r.impl not in ("eager",))
    ]
    npu = [r.impl for r in mine if r.requirement == catalog.NPU]
    return gpu, npu, bool(mine)


def dependencies(files: list[Path], model_dir: Path, project: Project | None = None) -> list[dict[str, Any]]:
    """Vendor kernels, attention implementations and CUDA APIs named in the package, classified."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add(kind: str, name: str, classification: str, path: Path, line: int) -> None:
        rel = path.relative_to(model_dir).as_posix()
        entry = found.setdefault(
            (kind, name, rel),
            {"kind": kind, "name": name, "classification": classification, "file": rel, "lines": []},
        )
        if line not in entry["lines"]:
            entry["lines"].append(line)
            entry["lines"].sort()

    for path in files:
        tree = parse_file(path)
        if tree is None:
            continue
        from npu_lint.core.astutil import resolve_relative

        for t in [tree, *embedded_trees(tree)]:
            for node in ast.walk(t):
                line = getattr(node, "lineno", 0) if t is tree else 0
                modules: list[str] = []
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    mod = resolve_relative(str(path), "." * node.level + (node.module or ""))
                    modules = [f"{mod}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Call) and call_name(node) in (
                    "add_import",
                    "create_patch_from_external",
                ):
                    mod = (
                        str_const(node.args[0])
                        if node.args
                        else str_const(keyword_arg(node, "replacement_module"))
                    )
                    mod = mod or str_const(keyword_arg(node, "replacement_module"))
                    if mod:
                        modules = [mod]
                for mod in modules:
                    kernel = vendor_map.lookup(mod)
                    if kernel is None:
                        continue
                    family = kernel.family
                    label = {
                        vendor_map.NPU_VENDOR: "Ascend vendor package: only inside veomni/ops kernels",
                        vendor_map.GPU_KERNEL: "GPU-only kernel library",
                        vendor_map.GPU_ATTENTION: "GPU-only attention kernel",
                        vendor_map.VEOMNI_KERNEL: "VeOmni kernel module: reach through the registry",
                    }[family]
                    repl = kernel.replacement()
                    if repl and project is not None and project.root is not None and kernel.op:
                        found_op = project.api.tree_op(kernel.op, kernel.variant)  # the tree's own names
                        repl = (
                            "/".join(p for p in found_op if p)
                            if found_op
                            else f"none: this tree registers no `{kernel.op}` op"
                        )
                    add("vendor import", mod, label + (f" (registry op {repl})" if repl else ""), path, line)
                if t is not tree:
                    continue
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and node.value in _ATTN_IMPLS
                ):
                    add("attention implementation", node.value, _ATTN_IMPLS[node.value], path, line)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Name) and _ATTN_SUPPORTS.match(target.id):
                            add(
                                "attention support flag",
                                target.id,
                                "declares an attention backend",
                                path,
                                line,
                            )
                elif isinstance(node, ast.Attribute):
                    dotted = _dotted(node)
                    if dotted and (
                        dotted.startswith("torch.cuda.") or dotted.startswith("torch.backends.cudnn")
                    ):
                        add("CUDA API", dotted, "CUDA-only: use veomni.utils.device helpers", path, line)
                    elif node.attr in ("cuda", "is_cuda") and not (dotted or "").startswith("torch."):
                        add("CUDA API", f".{node.attr}", "CUDA-only: device from data in scope", path, line)
                elif isinstance(node, ast.Call) and re.search(r"flash_att(n|ention)", call_name(node)):
                    add(
                        "attention implementation check",
                        f"{call_name(node)}()",
                        "branches on FlashAttention: flash_attention_2 has an NPU row, 3/4 are GPU only",
                        path,
                        line,
                    )
                elif isinstance(node, ast.Constant) and node.value in ("cuda", "nccl"):
                    add(
                        "CUDA API",
                        repr(node.value),
                        "CUDA literal: get_device_type()/get_dist_comm_backend()",
                        path,
                        line,
                    )
    return sorted(found.values(), key=lambda e: (e["kind"], e["name"], e["file"]))


def _undispatched_ops(path: Path) -> list[tuple[str, str, str]]:
    """Operators an upstream-shaped modeling file implements eagerly: (op, variant, where)."""
    tree = parse_file(path)
    out: list[tuple[str, str, str]] = []
    if tree is None:
        return out
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            text = ast.unparse(stmt)
            if stmt.name.endswith("RMSNorm"):
                offset = "torch.zeros(" in text or re.search(r"1(\.0)?\s*\+\s*self\.weight", text) is not None
                out.append(("rms_norm", "offset" if offset else "standard", stmt.name))
            elif stmt.name.endswith("MLP") and all(p in text for p in ("gate_proj", "up_proj", "down_proj")):
                geglu = "hidden_activation" in text or "gelu" in text
                out.append(("swiglu_mlp", "geglu" if geglu else "standard", stmt.name))
            elif stmt.name.endswith("ForCausalLM") or stmt.name.endswith("ForConditionalGeneration"):
                if "loss_function" in text or "ForCausalLMLoss" in text:
                    out.append(("cross_entropy_loss", "standard", stmt.name))
            if "ALL_ATTENTION_FUNCTIONS" in text:
                out.append(("attention", "standard", stmt.name))
        elif isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("apply_rotary_pos_emb"):
            out.append(("rope", "full", stmt.name))
    return out


def build_op_table(pkg: Package, lint: Lint) -> tuple[list[dict[str, Any]], str]:
    """(the per-op table, where its registry rows come from)."""
    rel, py_files, gen_dir, gpu_target = pkg.rel, pkg.py_files, pkg.gen_dir, pkg.gpu_target
    gpu_spec, npu_spec = pkg.gpu_spec, pkg.npu_spec
    diags, project, opslot_tree = lint.diags, lint.project, lint.opslot_tree
    rows, rows_source = _registry_rows(project)
    api = project.api
    field_of = {}
    for fld, op in catalog.CONFIG_FIELD_TO_OP.items():
        field_of.setdefault(op, fld)
    ops: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add_op(op: str, variant: str, source: str, decl: str, fld: str | None = None) -> None:
        if project.root is not None:
            fld = fld or api.config_field(op) or ""
        fld = fld or field_of.get(op, "")
        entry = ops.setdefault(
            (op, variant, fld),
            {"op": op, "variant": variant, "field": fld, "sources": [], "decls": [], "declared_variants": []},
        )
        declared = re.search(r"OpSlot\('[^']*', '([^']*)'\)", decl or "")
        if declared and declared.group(1) not in entry["declared_variants"]:
            entry["declared_variants"].append(declared.group(1))
        if source not in entry["sources"]:
            entry["sources"].append(source)
        if decl and decl not in entry["decls"]:
            entry["decls"].append(decl)

    for spec in (gpu_spec, npu_spec):
        for kind, op, variant, name in (spec or {}).get("dispatch", []):
            if kind == "OpSlot" and opslot_tree:  # the tree's own slot names and ops-config field
                known = any(r.op == op and r.variant == variant for r in rows)
                add_op(
                    op,
                    variant,
                    "OpSlot" if known else "OpSlot (unmapped)",
                    f"{name} = OpSlot({op!r}, {variant!r})",
                )
            elif kind == "OpSlot":
                mapped = catalog.OPSLOT_TO_VEOMNIOP.get((op, variant))
                if mapped:
                    mapped = (
                        _in_tree(project, *mapped)
                        if project.root is not None and _in_tree(project, *mapped)[1]
                        else mapped
                    )
                    slot_field = f"{op}_implementation"
                    add_op(
                        mapped[0],
                        mapped[1],
                        "OpSlot",
                        f"{name} = OpSlot({op!r}, {variant!r})",
                        slot_field if slot_field in catalog.CONFIG_FIELD_TO_OP else None,
                    )
                else:
                    # no renaming known: the op keeps its name when the registry has it
                    known = any(r.op == op and r.variant == variant for r in rows)
                    add_op(
                        op,
                        variant,
                        "OpSlot" if known else "OpSlot (unmapped)",
                        f"{name} = OpSlot({op!r}, {variant!r})",
                        f"{op}_implementation"
                        if f"{op}_implementation" in catalog.CONFIG_FIELD_TO_OP
                        else None,
                    )
            else:
                add_op(op, variant, "VeomniOp", f"{name} = VeomniOp({op!r}, {variant!r}, ...)")
    for p in py_files:
        if p.parent == gen_dir or p.name.endswith("_patch_gen_config.py"):
            continue
        tree = parse_file(p)
        for kind, op, variant, name in dispatch_decls(tree) if tree else []:
            add_op(op, variant, kind, f"{name} ({rel(p)})")
    for d in diags:
        if d.code == "NPU302":
            m = re.search(r"registry op `(\w+)(?:/(\w+))?`", d.message) or re.search(
                r"`OpSlot\(\"(\w+)\", \"(\w+)\"\)` slot", d.message
            )
            if m:
                add_op(
                    m.group(1),
                    m.group(2) or "standard",
                    "vendor kernel call",
                    f"{rel(Path(d.path).resolve())}:{d.line}",
                )
    gen_gpu = gen_dir / gpu_target
    if gen_gpu.is_file():
        for op, variant, where in _undispatched_ops(gen_gpu):
            op, variant = _in_tree(project, op, variant)
            covered = [k for k in ops if k[0] == op]
            if op == "rms_norm" and covered:
                continue
            source = "transformers attention interface" if op == "attention" else "eager (not dispatched)"
            if not covered:
                add_op(op, variant, source, where)
            elif any(
                k[:2] == (op, variant) and "eager (not dispatched)" in v["sources"] for k, v in ops.items()
            ):
                add_op(op, variant, "eager (not dispatched)", where)
    op_table = []
    for (op, variant, _field), entry in sorted(ops.items()):
        gpu, npu, exists = _impls(rows, op, variant)
        sources = entry["sources"]
        handle = api.handle if api.instance_local else None
        dispatch = f"an instance-local `{handle}`" if handle else f"this tree's `{api.handle}` dispatch"
        if "transformers attention interface" in sources and not variant:
            registered = ", ".join(api.attention_functions[:4]) + (
                ", ..." if len(api.attention_functions) > 4 else ""
            )
            action = (
                "follows `config._attn_implementation` through transformers' `ALL_ATTENTION_FUNCTIONS`"
                + (f" (this tree registers {registered})" if registered else "")
                + "; this tree registers no `attention` op"
            )
        elif not exists and "OpSlot (unmapped)" in sources:
            action = (
                f"the {rows_source} have no `{op}/{variant}` row: check the slot's variant"
                if opslot_tree
                else f"migrate the OpSlot to {dispatch}; the {rows_source} has no `{op}/{variant}` row: "
                "check the registry for the variant's name"
            )
        elif not exists:
            shown_name = f"{op}/{variant}" if variant else op
            action = f"no `{shown_name}` row in the {rows_source}: check the variant"
        elif "vendor kernel call" in sources:
            action = f"replace the vendor call with {dispatch} (NPU302)"
        elif "OpSlot" in sources and opslot_tree:
            action = (
                "not attainable on this generation: the slot is bound from the ops config by the tree's binder and "
                "shared by every model (NPU201); instance-local once the tree moves to VeomniOp or VeomniKernel"
            )
        elif "OpSlot" in sources:
            action = f"migrate the module-global OpSlot to {dispatch} built in `__init__` (NPU2xx)"
        elif {"VeomniOp", "VeomniKernel"} & set(sources):
            action = "none: already an instance-local handle"
        elif "transformers attention interface" in sources:
            action = "follows `config._attn_implementation` (see the NPU implementations)" + (
                f'; {handle} generation: `{handle}("{op}", "{variant}", ...)` in `__init__`' if handle else ""
            )
        else:
            action = (
                f"optional: dispatch through {dispatch} to use the NPU row"
                if npu
                else "none: eager runs on NPU"
            )
        if not npu:
            npu = [
                f"{r.impl} (device-agnostic)"
                for r in rows
                if r.op == op and r.variant == variant and r.requirement == catalog.ANY and r.impl != "eager"
            ]
            if exists and {"OpSlot", "VeomniOp", "VeomniKernel", "vendor kernel call"} & set(sources):
                agnostic = [x.split(" ")[0] for x in npu]
                action += f"; no NPU row: NPU uses {', '.join(agnostic) or 'eager'}"
        shown = [v for v in entry["declared_variants"] if v != variant]
        op_table.append(
            {
                "op": op,
                # ``OpSlot("cross_entropy_loss", "causal")`` is the causal variant, looked up as the registry's
                # ``standard`` row: both are named
                "variant": f"{'/'.join(shown)} (registry row: {variant})" if shown else variant,
                "config_field": entry["field"],
                "source": ", ".join(sources),
                "declared": entry["decls"][:4],
                "gpu": gpu,
                "npu": npu,
                "action": action,
            }
        )
    return op_table, rows_source


def _repo_relative(root: Path, vroot: Path | None) -> str:
    return root.relative_to(vroot).as_posix() if vroot and root.is_relative_to(vroot) else root.as_posix()


def build_steps(facts: AuditFacts, checklist: list[dict[str, Any]]) -> list[str]:
    """The implementation steps, in order."""
    pkg = facts.package
    model, root, repo_rel = pkg.model, Path(pkg.model_dir), _repo_relative(pkg.root, pkg.vroot)
    npu_spec, gpu_spec, init = pkg.npu_spec, pkg.gpu_spec, pkg.init
    by_code, inventory, op_table = facts.lint.by_code, facts.inventory, facts.op_table
    present = {i["role"]: i["present"] for i in inventory}
    status = {c["key"]: c["status"] for c in checklist}
    steps: list[str] = []
    if status.get("pin") == FAIL:
        steps.append("Align the installed transformers with the repository pin (NPU506) before regenerating.")
    dev = sum(n for c, n in by_code.items() if c.startswith(("NPU1", "NPU6")))
    if dev:
        steps.append(
            f"Make the code device-neutral: `npu-lint check --fix {root}` ({dev} NPU1xx/NPU6xx findings; "
            "fixes in generated/ are made in the specs)."
        )
    vendor = sum(n for c, n in by_code.items() if c.startswith("NPU3"))
    opslot_tree = status.get("veomniop") == NOT_ATTAINABLE
    if vendor:
        steps.append(
            f"Take vendor kernels out of model code ({vendor} NPU3xx findings): "
            + (
                "each call goes through the tree's registry (its `OpSlot` slots; each finding names the slot)."
                if opslot_tree
                else "each call becomes an instance-local handle (`npu-lint check --fix --unsafe-fixes` does the "
                "exact RMSNorm case)."
            )
        )
    migrate = [o for o in op_table if "OpSlot" in o["source"]]
    if migrate and not opslot_tree:
        names = ", ".join(f"`{o['op']}/{o['variant']}`" for o in migrate)
        steps.append(
            f"Migrate module-global OpSlots to instance-local VeomniOps built in `__init__`: {names} "
            "(NPU2xx; `npu-lint check --fix`)."
        )
    semantics = sum(n for c, n in by_code.items() if c in ("NPU401", "NPU402"))
    if semantics:
        steps.append(
            f"Check normalisation/loss semantics ({semantics} NPU401/402 findings: offset vs standard "
            "RMSNorm, loss helpers)."
        )
    if not present.get("NPU patch spec"):
        gpu_name = Path(gpu_spec["path"]).stem if gpu_spec else f"{model}_gpu_patch_gen_config"
        steps.append(
            f"Create `{model}_npu_patch_gen_config.py`: `config = deepcopy(gpu_config)` from `{gpu_name}`, "
            "set `target_file`/`description`, add only NPU-specific patches (NPU504)."
        )
    dotted = _dotted_module(Path(repo_rel))
    specs = [s for s in (gpu_spec, npu_spec) if s] or []
    names = [Path(s["path"]).stem for s in specs]
    if not present.get("NPU patch spec"):
        names.append(f"{model}_npu_patch_gen_config")
    regen = "; ".join(f"`patchgen {dotted}.{n} -o {repo_rel}/generated --diff -v`" for n in names)
    steps.append(f"Regenerate the generated files and diffs: {regen} (then `patchgen --check`).")
    if not (init and init.get("npu_switch")):
        steps.append(
            "Add the `__init__` switch: `if IS_NPU_AVAILABLE:` import the `_npu` generated module, else the "
            "`_gpu` one (NPU502)."
        )
    if status.get("registration") == FAIL:
        steps.append(
            "Register every model type (the multimodal wrapper and its text backbone) (NPU732, NPU503)."
        )
    if not present.get("tests"):
        steps.append(
            "Add tests: the package imports on a CPU host and both generated modules build a tiny model."
        )
    steps.append(
        f"Re-run `npu-lint audit {root}` until every checklist item passes"
        + (" (or is not attainable on this generation)." if opslot_tree else ".")
    )
    return steps


def _dotted_module(root: Path) -> str:
    parts = root.parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "veomni":
            return ".".join(parts[i:])
    return root.name
