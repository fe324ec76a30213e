"""NPU610 parallel-state-in-worker."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, last_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule

# methods a DataLoader runs in its worker processes: a collate_fn object's __call__, a dataset's item access
_WORKER_METHODS = frozenset({"__call__", "__getitem__", "__getitems__", "__iter__", "__next__"})
_WORKER_CLASS = re.compile(r"(Collator|Collate\w*|Dataset|Sampler\w*|Transform\w*)$")
_DIST_QUERIES = frozenset(
    {"get_rank", "get_world_size", "is_initialized", "get_process_group_ranks", "get_group_rank"}
)
# a parallel-state accessor: ``get_parallel_state()``, ``get_ulysses_sequence_parallel_group()``, ``get_sp_rank()``
_STATE_ACCESSOR = re.compile(
    r"^get_(parallel_state|\w*(sequence_parallel|ulysses|data_parallel|tensor_parallel|sp|dp|tp|cp|ep|pp)"
    r"\w*_(group|rank|world_size|size))$"
)
# the cheap text pre-check: a call of a state accessor or of a torch.distributed query
_STATE_CALL = re.compile(r"get_\w*(parallel_state|rank|world_size|group|size)\(|is_initialized\(")
_MODEL_OUTPUT = re.compile(r"(^outputs?$|^model_outputs?$|^logits$)")


def _base_names(cls: ast.ClassDef) -> list[str]:
    out = []
    for base in cls.bases:
        while isinstance(base, ast.Subscript):
            base = base.value
        out.append(last_name(base) or "")
    return out


def _runs_after_model(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A ``__call__`` that takes the model's outputs (a post-processing collator) runs in the training process."""
    for arg in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]:
        if _MODEL_OUTPUT.search(arg.arg):
            return True
        ann = arg.annotation
        shown = last_name(ann) or ""
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            shown = ann.value
        if shown.endswith("Output"):
            return True
    return False


class ParallelStateInWorker(Rule):
    code = "NPU610"
    name = "parallel-state-in-worker"
    summary = (
        "Parallel state (`get_parallel_state()`, a process group, `dist.get_rank()`) is read where it is not the "
        "trainer's: in a collator's `__call__`, a collate function or a dataset's `__getitem__`/`__iter__` (run in "
        "DataLoader workers), or at import time."
    )
    why = (
        "A DataLoader with workers calls the collate function and the dataset's item access in separate worker "
        "processes. The parallel state there is not the trainer's: the process groups were created in the "
        "training process, and a spawned worker sees the default single-process state (sequence parallelism off, rank 0 "
        "of 1, `dist.is_initialized()` False). A collator that decides per batch whether sequence parallelism is "
        "on (and so whether to emit `cu_seqlens` for the unpadded batch, or how far to pad) then disagrees with "
        "the model, silently or with a shape error, only when `num_workers > 0`. Read the state once where the "
        "object is built, in the training process (`__init__` / `__post_init__`), and keep it on the instance. "
        "A `__call__` that takes the model's outputs (a post-processing collator) runs in the training process "
        "and is not reported. The same holds for state read when a module is imported (a module-level constant, "
        "a class attribute, a default argument value): that runs before the trainer initialises the process "
        "groups and freezes the default state in."
    )
    bad = (
        Example(
            """
            from dataclasses import dataclass

            from veomni.distributed.parallel_state import get_parallel_state


            @dataclass
            class ToyPackingCollator:
                pad_to: int = 8

                def __call__(self, features):
                    batch = self.pack(features)
                    if get_parallel_state().sp_enabled:
                        batch = self.pad_for_sp(batch, get_parallel_state().sp_size)
                    return batch
            """,
            path="veomni/data/toy_collator.py",
            title="a collator that asks per batch whether sequence parallelism is on",
        ),
        Example(
            """
            import torch.distributed as dist
            from torch.utils.data import IterableDataset


            class ToyShardedStream(IterableDataset):
                def __init__(self, files):
                    self.files = files

                def __iter__(self):
                    rank, world = dist.get_rank(), dist.get_world_size()
                    for path in self.files[rank::world]:
                        yield from self.read(path)
            """,
            path="veomni/data/toy_stream.py",
            title="a dataset that shards by rank inside its iterator",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_ulysses_sequence_parallel_world_size


            class ToyVideoTransform:
                def __call__(self, sample):
                    frames = sample["frames"]
                    keep = len(frames) - len(frames) % get_ulysses_sequence_parallel_world_size()
                    return {**sample, "frames": frames[:keep]}
            """,
            path="veomni/data/multimodal/toy_transform.py",
            title="a per-sample transform rounding to the sequence-parallel size",
        ),
        Example(
            """
            from veomni.data.data_collator import DataCollator
            from veomni.distributed.parallel_state import get_parallel_state


            class ToyLengthBucketer(DataCollator):
                def __call__(self, features):
                    return self._bucket(sorted(features, key=len))

                def _bucket(self, features):
                    multiple = get_parallel_state().sp_size * 64
                    return [f[: len(f) - len(f) % multiple] for f in features]
            """,
            path="veomni/data/toy_bucketing.py",
            title="through a helper method of the collator",
        ),
        Example(
            """
            import torch.distributed as dist

            from veomni.distributed.parallel_state import get_parallel_state

            SP_SIZE = get_parallel_state().sp_size


            def split_sequence(x, rank=dist.get_rank()):
                return x.chunk(SP_SIZE, dim=1)[rank]
            """,
            path="veomni/distributed/sequence_parallel/toy_split.py",
            title="read at import time: a module constant and a default value",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            def packed_collate_fn(samples):
                ids = torch.cat([s["input_ids"] for s in samples])
                if dist.is_initialized() and dist.get_world_size() > 1:
                    ids = ids[: ids.numel() - ids.numel() % dist.get_world_size()]
                return {"input_ids": ids[None]}
            """,
            path="veomni/data/toy_collate.py",
            title="a collate function",
        ),
    )
    good = (
        Example(
            """
            from dataclasses import dataclass

            from veomni.distributed.parallel_state import get_parallel_state


            @dataclass
            class ToyPackingCollator:
                pad_to: int = 8

                def __post_init__(self):
                    self.sp_enabled = get_parallel_state().sp_enabled

                def __call__(self, features):
                    batch = self.pack(features)
                    return self.pad_for_sp(batch) if self.sp_enabled else batch


            class ToyGatherLogits:
                def __call__(self, outputs, micro_batch):
                    if get_parallel_state().sp_enabled:
                        return self.gather(outputs.logits, get_parallel_state().sp_group)
                    return outputs.logits
            """,
            path="veomni/data/toy_collator.py",
            title="state read where the collator is built; a post-model collator runs in the trainer",
        ),
    )
    fix_safety = "No fix: where the value should be read (and kept) is a design decision."
    requires = (lambda text: _STATE_CALL.search(text) is not None,)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._reported: set[int] = set()

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if isinstance(self.ctx.parent, ast.Module) and "collate" in node.name.lower():
            self._scan(node, f"`{node.name}`", None)  # a collate_fn: the DataLoader calls it in its workers
            return
        if node.name not in _WORKER_METHODS:
            return
        cls = self.ctx.parent
        if not isinstance(cls, ast.ClassDef) or not self._worker_class(cls, node):
            return
        if node.name == "__call__" and _runs_after_model(node):
            return
        methods = {
            s.name: s
            for s in cls.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            and s.name not in ("__init__", "__post_init__")
        }
        bodies: list[tuple[ast.AST, str]] = [(node, "")]
        for sub in _walk(node):  # helpers of the class the worker method calls (one level)
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "self"
                and sub.func.attr in methods
                and sub.func.attr != node.name
            ):
                bodies.append((methods.pop(sub.func.attr), sub.func.attr))
        seen: set[str] = set()
        for body, helper in bodies:
            where = f"`{cls.name}.{node.name}`" + (f" (through `self.{helper}()`)" if helper else "")
            self._scan(body, where, self._builder(cls), seen)

    def _scan(self, body: ast.AST, where: str, builder: str | None, seen: set[str] | None = None) -> None:
        seen = set() if seen is None else seen
        for sub in _walk(body):
            if not isinstance(sub, ast.Call):
                continue
            what = self._state_read(sub)
            if what is None or what in seen:
                continue
            seen.add(what)
            self._report(sub, what, where, builder)

    def _report(self, sub: ast.Call, what: str, where: str, builder: str | None) -> None:
        if id(sub) in self._reported:
            return
        self._reported.add(id(sub))
        keep = (
            f"read it once in `{builder}` and keep it on the instance"
            if builder
            else "read it in the training process and pass it in (`functools.partial`, or a collator object)"
        )
        self.report(
            sub,
            f"`{what}` is read in {where}, which a DataLoader runs in its worker processes: "
            "a worker does not hold the trainer's parallel state (a spawned one has the default "
            f"single-process state: no sequence parallelism, rank 0 of 1); {keep}",
        )

    def finish(self) -> None:
        """State read when the module is imported (a module-level statement, a class attribute, a default value):
        before the trainer has initialised the process groups, so the default single-process state is frozen in."""
        todo: list[ast.AST] = []
        for stmt in self.ctx.tree.body:
            todo.extend(self._import_time(stmt))
        for node in todo:
            for sub in _walk(node):
                if isinstance(sub, ast.Call) and id(sub) not in self._reported:
                    what = self._state_read(sub)
                    if what is not None:
                        self._reported.add(id(sub))
                        self.report(
                            sub,
                            f"`{what}` is read when the module is imported, before the trainer initialises the "
                            "process groups: the default single-process state (no sequence parallelism, rank 0 "
                            "of 1) is frozen in; read it inside the function that needs it",
                        )

    @staticmethod
    def _import_time(stmt: ast.stmt) -> list[ast.AST]:
        """The parts of a top-level statement that run at import: not function bodies, not ``__main__`` blocks."""
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = stmt.args
            return [*args.defaults, *(d for d in args.kw_defaults if d is not None), *stmt.decorator_list]
        if isinstance(stmt, ast.ClassDef):
            out: list[ast.AST] = []
            for inner in stmt.body:
                out.extend(ParallelStateInWorker._import_time(inner))
            return out
        if isinstance(stmt, ast.If) and "__main__" in ast.dump(stmt.test):
            return []
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return []
        return [stmt]

    def _worker_class(self, cls: ast.ClassDef, method: ast.AST) -> bool:
        """A collator, dataset, sampler or transform: by its name or a base's name (``DataCollator``,
        ``IterableDataset``...)."""
        names = [cls.name, *_base_names(cls)]
        if method.name == "__call__":  # type: ignore[attr-defined]
            return any(re.search(r"(Collator|Collate\w*|Transform\w*)$", n) for n in names)
        return any(_WORKER_CLASS.search(n) for n in names)

    def _state_read(self, call: ast.Call) -> str | None:
        func = call.func
        name = call_name(call)
        if not name:
            return None
        if name in _DIST_QUERIES:
            qual = self.ctx.qualname(func) or ""
            if qual.startswith("torch.distributed."):
                return f"{qual.replace('torch.distributed.', 'dist.')}()"
            return None
        if _STATE_ACCESSOR.match(name):
            return f"{name}()"
        return None

    @staticmethod
    def _builder(cls: ast.ClassDef) -> str:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in (
                "__post_init__",
                "__init__",
            ):
                return stmt.name
        decorated = any(
            (
                d.id
                if isinstance(d, ast.Name)
                else getattr(d, "attr", getattr(getattr(d, "func", None), "id", ""))
            )
            == "dataclass"
            for d in cls.decorator_list
        )
        return "__post_init__" if decorated else "__init__"
