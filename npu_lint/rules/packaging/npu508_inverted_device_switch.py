"""NPU508 inverted-device-switch."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import dotted_name, following_statements
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.registration import branch_device_kinds
from npu_lint.veomni.selection import DeviceChoice

_NPU_FLAG = re.compile(
    r"(?i)^(is_)?(torch_)?npu(_is)?_available$|^is_npu$|^use_npu$|^on_npu$|^npu_available$"
)
_CUDA_FLAG = re.compile(r"(?i)^(is_)?(torch_)?cuda(_is)?_available$|^is_cuda$|^use_cuda$|^on_cuda$")
_NAME_LIKE = re.compile(r"^\.*[A-Za-z_][\w.]*$")


def _flag_sense(node: ast.expr) -> bool | None:
    """True when ``node`` is true exactly on NPU hosts, False when exactly on CUDA hosts, else None."""
    if isinstance(node, ast.Call) and not node.args and not node.keywords:
        node = node.func
    name = dotted_name(node)
    if name is None:
        return None
    leaf = name.rsplit(".", 1)[-1]
    if _NPU_FLAG.match(leaf):
        return True
    if name in ("torch.cuda.is_available",) or _CUDA_FLAG.match(leaf):
        return False
    return None


def _device_literal(node: ast.expr) -> str | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in ("npu", "cuda", "gpu")
    ):
        return node.value
    return None


def npu_sense(test: ast.expr) -> bool | None:
    """Whether the test holds on NPU hosts (True), on CUDA hosts (False), or cannot be told (None)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = npu_sense(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        literal = _device_literal(test.comparators[0]) or _device_literal(test.left)
        if literal is None or not isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            return None
        other = test.left if _device_literal(test.comparators[0]) else test.comparators[0]
        text = (dotted_name(other.func if isinstance(other, ast.Call) else other) or "").lower()
        if "device" not in text and "backend" not in text and "platform" not in text:
            return None
        sense = literal == "npu"
        return sense if isinstance(op, (ast.Eq, ast.Is)) else not sense
    return _flag_sense(test)


_GPU_WORDS = frozenset({"gpu", "cuda", "nccl"})


def _selected(stmts: list[ast.stmt] | ast.expr) -> tuple[set[str], str | None]:
    """The device kinds a branch selects (``registration.branch_device_kinds``; string literals anywhere that
    look like a module path or a device/backend name), and the first name that decided."""
    return branch_device_kinds(stmts, _GPU_WORDS, literal=_NAME_LIKE, literals_in_statements=True)


class InvertedDeviceSwitch(Rule):
    code = "NPU508"
    name = "inverted-device-switch"
    summary = (
        'A device switch (`if IS_NPU_AVAILABLE:`, `get_device_type() == "npu"`, a conditional expression) '
        "selects the GPU/CUDA module on NPU hosts and the NPU one elsewhere."
    )
    why = (
        "Packages choose their generated modeling module, kernel module or backend at import time by a device "
        "test. With the test negated (or the branches swapped), an Ascend host imports the `_gpu` module "
        "(Triton/Liger/CUDA kernel dispatch, no NPU patches) and a CUDA host the `_npu` one: nothing fails at "
        "import, the NPU patches are simply never used. The rule reads which branch runs on NPU hosts from the "
        "test and which device each branch selects from the names it imports; it reports when the NPU branch "
        "selects only GPU names while the other branch selects NPU ones."
    )
    bad = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE


            def load_toy():
                if not IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
            title="the condition negated",
        ),
        Example(
            """
            import importlib

            from veomni.utils.device import get_device_type


            def kernels():
                name = "toy_kernels_cuda" if get_device_type() == "npu" else "toy_kernels_npu"
                return importlib.import_module(name)
            """,
            title="a conditional expression with its arms swapped",
        ),
        Example(
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE

            if IS_CUDA_AVAILABLE:
                from .npu_fused_ops import fused_rope
            else:
                from .gpu_fused_ops import fused_rope
            """,
            title="a CUDA test selecting the NPU module",
        ),
    )
    good = (
        Example(
            """
            from ....utils.device import IS_NPU_AVAILABLE


            def load_toy():
                if IS_NPU_AVAILABLE:
                    from .generated.patched_modeling_toy_npu import ToyForCausalLM
                else:
                    from .generated.patched_modeling_toy_gpu import ToyForCausalLM
                return ToyForCausalLM
            """,
            path="veomni/models/transformers/toy/__init__.py",
        ),
    )
    node_types = (ast.If, ast.IfExp)
    requires = (("npu", "NPU", "Npu"), ("gpu", "cuda", "GPU", "CUDA", "Gpu", "Cuda"))

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.If, ast.IfExp))
        sense = npu_sense(node.test)
        if sense is None:
            sense = self._resolved(node.test)
        if sense is None:
            return
        body: list[ast.stmt] | ast.expr = node.body
        orelse: list[ast.stmt] | ast.expr = node.orelse
        if isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            if npu_sense(node.orelse[0].test) is not None:
                return  # an elif chain over devices: each test decides its own branch
        if (
            isinstance(node, ast.If)
            and not node.orelse
            and isinstance(node.body[-1], (ast.Return, ast.Raise))
        ):
            orelse = following_statements(
                self.ctx.parent, node
            )  # ``if test: return a`` then ``return b``: the rest is the else branch
        on_npu, elsewhere = (body, orelse) if sense else (orelse, body)
        npu_kinds, npu_first = _selected(on_npu)
        other_kinds, other_first = _selected(elsewhere)
        if npu_kinds != {"gpu"} or "npu" not in other_kinds or "gpu" in other_kinds:
            return
        test = ast.unparse(node.test)
        self.report(
            node.test,
            f"on NPU hosts `{test}` selects `{npu_first}` (GPU) and on other hosts `{other_first}` (NPU): the "
            "device switch is inverted; swap the branches or the test",
        )

    def _resolved(self, test: ast.expr) -> bool | None:
        """The sense of a test the shared selection resolver reads (an alias ``on_gpu = not IS_NPU_AVAILABLE``, a
        helper returning the flag): True when it holds exactly on Ascend hosts, False exactly on GPU hosts."""
        if not any(isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(test)):
            return None
        choice = getattr(self, "_choice", None)
        if choice is None or choice.tree is not self.ctx.tree:
            choice = self._choice = DeviceChoice.of(self.ctx.tree)
        func = self.ctx.function
        on_npu, on_gpu = choice.holds(test, "npu", func), choice.holds(test, "gpu", func)
        return on_npu if on_npu is not None and on_gpu is not None and on_npu != on_gpu else None
