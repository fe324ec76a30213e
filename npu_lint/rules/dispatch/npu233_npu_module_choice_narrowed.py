"""NPU233 npu-module-choice-narrowed."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import nodes_of, walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.selection import (
    HOSTS,
    DeviceChoice,
    Reached,
    device_module_ref,
    device_probe,
    host_holds,
)

_DEVICE = {"npu": "Ascend", "gpu": "GPU"}
_MODULE = {"npu": "NPU", "gpu": "GPU"}
_OTHER = {"npu": "gpu", "gpu": "npu"}


def _base(reached: Reached) -> str:
    """The module's own name without its device suffix (``patched_modeling_qwen3``), however it is imported."""
    return reached.stem.rsplit(".", 1)[-1]


def _generated(reached: Reached) -> bool:
    """A patchgen output module (``generated/patched_modeling_<m>_<device>``), not a kernel or vendor module."""
    return "generated" in reached.stem.split(".") or _base(reached).startswith("patched_")


def _condition(reached: Reached, host: str, names: dict[str, ast.expr]) -> str:
    """Where the import runs, in words: ``` `x` holds ```, ``` `x` does not hold ```, ``` `import ...` fails ```;
    of a test joining the device probe with other conditions, the operands the device does not decide."""
    node = reached.narrowed_by
    if isinstance(node, ast.expr):
        shown = node
        if isinstance(node, ast.BoolOp):
            rest = [v for v in node.values if host_holds(v, host, names) is None]
            shown = rest[0] if len(rest) == 1 else ast.BoolOp(op=node.op, values=rest)
        return f"`{ast.unparse(shown)}` {'holds' if reached.branch else 'does not hold'}"
    return f"`{ast.unparse(node).splitlines()[0]}` fails" if node is not None else ""


class NpuModuleChoiceNarrowed(Rule):
    code = "NPU233"
    name = "npu-module-choice-narrowed"
    summary = (
        "On an Ascend host a model package does not always import its NPU module (its generated `_npu` file): "
        "the device test is joined with another condition (in the test, a nested test, an early return, a name "
        "holding it, a `try` falling back), or the branch that runs on Ascend imports the `_gpu` module while the "
        "package has the `_npu` one (or a GPU host gets the NPU module)."
    )
    why = (
        "A model package chooses between its two generated modules by the device alone: `if IS_NPU_AVAILABLE:` "
        "imports `patched_modeling_<model>_npu`, else `_gpu`, in every package of the tree and for every model "
        "type it registers. The GPU module reaches CUDA-only kernels (Liger, flash-attn, Triton) and the GPU "
        "ops-config names; the NPU module reaches the Ascend ones. A test such as `IS_NPU_AVAILABLE and "
        '"ForCausalLM" in architecture` sends every other architecture on an Ascend host to the GPU module, which '
        "fails at its first CUDA kernel or silently runs eager paths; `IS_NPU_AVAILABLE or flag` sends GPU hosts "
        "to the NPU module; an NPU branch that imports `_gpu` (a second model type's registration, say) never "
        "uses the NPU patches at all. The rule evaluates every test on the way to each device-module import as "
        "an Ascend host and as a GPU host (the device probes decided, other conditions open) and reports an "
        "import of the other device's module that a host runs. Choose the module by the device probe alone and "
        "decide the rest after the import, as the other packages do."
    )
    bad = (
        Example(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE and "ForCausalLM" in architecture:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM, ToyModel
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel
                return ToyForCausalLM if "ForCausalLM" in architecture else ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="only the causal LM gets the NPU module on Ascend",
        ),
        Example(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def register_toy_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyModel
                else:
                    from .generated.patched_modeling_toy_gpu import ToyModel
                return ToyModel


            def register_toy_text_modeling(architecture: str):
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the text model type's NPU branch imports the GPU module",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def register_toy_modeling(architecture: str):
                if not IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyModel
                else:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM, ToyModel
                return ToyForCausalLM if "ForCausalLM" in architecture else ToyModel
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
    )
    fix_safety = "No fix: test the device alone and move the other condition after the import."
    requires = (("_npu", "_gpu", "_cuda"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def finish(self) -> None:
        tree = self.ctx.tree
        if not any(isinstance(n, ast.ImportFrom) and device_module_ref(n) for n in walk(tree)):
            return
        choice = DeviceChoice.of(tree)
        self._present = {
            (ref[0], ref[1].rsplit(".", 1)[-1])
            for n in walk(tree)
            if isinstance(n, ast.ImportFrom) and (ref := device_module_ref(n))
        }
        self._said: set[tuple[int, str]] = set()
        self._shadowed(tree)
        for func, body in choice.scopes():
            self._scope(choice, body, func)

    def _scope(
        self,
        choice: DeviceChoice,
        stmts: list[ast.stmt],
        func: ast.FunctionDef | ast.AsyncFunctionDef | None,
    ) -> None:
        """What each host imports in one scope, model module by model module: the Ascend host must import the
        NPU module and only it, the GPU host the GPU module."""
        names = choice.names(func)
        reach = {host: choice.reach(host, stmts, func) for host in HOSTS}
        switched = {_base(r) for host in HOSTS for r in reach[host] if r.switched}
        for reached in reach["npu"]:
            if (
                _base(reached) not in switched
                and reached.kind == "gpu"
                and ("npu", _base(reached)) in self._present
            ):
                self._unswitched(reached)
        self._names = names
        self._other_model(reach)
        for stem in sorted(switched):
            per = {host: [r for r in reach[host] if _base(r) == stem] for host in HOSTS}
            kinds = {host: {r.kind for r in per[host]} for host in HOSTS}
            if (
                kinds["npu"] == {"gpu"}
                and kinds["gpu"] == {"npu"}
                and all(r.narrowed_by is None for host in HOSTS for r in per[host])
            ):
                continue  # the switch inverted: NPU508
            for host in HOSTS:
                for reached in per[host]:
                    if reached.kind == _OTHER[host]:
                        self._wrong(host, reached)

    def _wrong(self, host: str, reached: Reached) -> None:
        wrong = _MODULE[reached.kind]
        module = f"{reached.stem.rsplit('.', 1)[-1]}_{reached.kind}"
        if reached.narrowed_by is not None:
            at = reached.narrowed_by
            key = (id(at), host)
            if key in self._said:
                return
            self._said.add(key)
            chosen = (
                f"chosen by `{ast.unparse(at)}`"
                if isinstance(at, ast.expr)
                else "chosen by more than the device"
            )
            self.report(
                at,
                f"the model's NPU/GPU module is {chosen}: {_DEVICE[host]} runs where "
                f"{_condition(reached, host, self._names)} import the {wrong} module (its kernels and ops-config "
                "names belong to the other device); choose the module by the device probe alone and decide the "
                "rest after the import",
            )
            return
        if not reached.switched or not self._exists(reached, host):
            return
        key = (id(reached.node), host)
        if key in self._said:
            return
        self._said.add(key)
        self.report(
            reached.node,
            f"on {_DEVICE[host]} hosts the device switch imports the {wrong} module `{module}` although the "
            f"package has its {_MODULE[host]} module `{reached.stem.rsplit('.', 1)[-1]}_{host}`: the "
            f"{_MODULE[host]} patches are never used there; import the `_{host}` module in this branch",
        )

    def _shadowed(self, tree: ast.Module) -> None:
        """A device flag that a switch over the model's modules tests, rebound in this file to something that is
        not that probe: ``IS_NPU_AVAILABLE = False``, ``from veomni.utils.device import IS_CUDA_AVAILABLE as
        IS_NPU_AVAILABLE``. Every switch on it then chooses the module by something other than the device."""
        tested: set[str] = set()
        for node in nodes_of(tree, ast.If):
            assert isinstance(node, ast.If)
            if any(
                isinstance(n, ast.ImportFrom) and device_module_ref(n) for b in node.body for n in walk(b)
            ):
                tested.update(n.id for n in ast.walk(node.test) if isinstance(n, ast.Name))
        flags = {name for name in tested if device_probe(ast.Name(id=name)) is not None}
        if not flags:
            return
        scopes = [tree.body] + [f.body for f in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef)]  # type: ignore[attr-defined]
        for stmts in scopes:
            for stmt in stmts:
                if isinstance(stmt, ast.ImportFrom):
                    for alias in stmt.names:
                        if alias.asname in flags and alias.name != alias.asname:
                            if device_probe(ast.Name(id=alias.name)) != device_probe(
                                ast.Name(id=alias.asname)
                            ):
                                self._report_shadow(stmt, alias.asname, alias.name)
                    continue
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
                if isinstance(stmt, ast.AnnAssign):
                    target = stmt.target
                if not isinstance(target, ast.Name) or target.id not in flags or stmt.value is None:  # type: ignore[union-attr]
                    continue
                on_npu = device_probe(target)
                value = stmt.value  # type: ignore[union-attr]
                if host_holds(value, "npu") == on_npu and host_holds(value, "gpu") == (not on_npu):
                    continue  # the probe itself, spelled another way
                self._report_shadow(stmt, target.id, ast.unparse(value))

    def _report_shadow(self, node: ast.stmt, flag: str, value: str) -> None:
        self.report(
            node,
            f"`{flag}` is bound here to `{value}`, not to the device probe its name promises: the switch on it "
            "that chooses the model's NPU or GPU module no longer follows the device; import the flag from the "
            "tree's device module",
        )

    def _other_model(self, reach: dict[str, list[Reached]]) -> None:
        """A switch whose two branches import different models' modules: the NPU branch of a ``qwen3_moe``
        package importing ``patched_modeling_qwen3_npu`` gives Ascend the dense model's classes."""
        chosen = {
            host: {
                _base(r)
                for r in reach[host]
                if r.switched and r.kind == host and r.narrowed_by is None and _generated(r)
            }
            for host in HOSTS
        }
        if len(chosen["npu"]) != 1 or len(chosen["gpu"]) != 1 or chosen["npu"] == chosen["gpu"]:
            return
        npu_stem, gpu_stem = next(iter(chosen["npu"])), next(iter(chosen["gpu"]))
        node = next(r.node for r in reach["npu"] if _base(r) == npu_stem)
        self._said.add((id(node), "npu"))
        self.report(
            node,
            f"on Ascend hosts the switch imports `{npu_stem.rsplit('.', 1)[-1]}_npu` and on GPU hosts "
            f"`{gpu_stem.rsplit('.', 1)[-1]}_gpu`: the two branches load different models' modules; import the "
            "NPU module of the model the GPU branch loads",
        )

    def _unswitched(self, reached: Reached) -> None:
        """A path with no device test that imports the GPU module in a file that imports the NPU module of the same
        model elsewhere (a second model type's registration left out of the switch)."""
        if id(reached.node) in {k for k, _ in self._said}:
            return
        self._said.add((id(reached.node), "npu"))
        name = reached.stem.rsplit(".", 1)[-1]
        self.report(
            reached.node,
            f"this path imports the GPU module `{name}_gpu` on every host, Ascend included, while this file "
            f"imports `{name}_npu` for the package's other registrations: choose the module by "
            "`IS_NPU_AVAILABLE` here too",
        )

    def _exists(self, reached: Reached, host: str) -> bool:
        """Whether the package has the module ``host`` should import: this file imports it somewhere, or it is
        on disk next to the one imported."""
        if (host, _base(reached)) in self._present:
            return True
        node = reached.node
        path = self.ctx.source.path
        if not node.level or not os.path.isfile(path):
            return False
        base = os.path.dirname(os.path.abspath(path))
        for _ in range(node.level - 1):
            base = os.path.dirname(base)
        return os.path.isfile(os.path.join(base, *reached.stem.split(".")) + f"_{host}.py")
