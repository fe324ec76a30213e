"""The child side of ``npu-lint verify``: one check, run in its own interpreter.

Run by file path as ``python -I _child.py REQUEST.json RESULT.json`` (never imported by npu-lint's own
process). ``-I`` keeps the caller's working directory, ``PYTHONPATH`` and this file's directory off
``sys.path``; the request names the directories to import from (the VeOmni tree root and, when the tree
is a checkout, its ``patchgen-pkg``), which are put first on ``sys.path`` here, deliberately.

Only the standard library is imported at module level: torch, transformers, veomni and patchgen are
imported by the checks that need them. The result is a JSON object: ``status`` (pass, fail, skip,
error), ``findings`` (each ``{"what", "meaning", "fix"}``), ``details`` (free text, e.g. a diff) and
``facts`` (measured values).
"""

from __future__ import annotations

import contextlib
import difflib
import filecmp
import importlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

ATOL = 1e-5
RTOL = 1e-4
VISION_HINTS = ("visual", "vision", "multi_modal_projector", "projector", "merger", "patch_embed", "audio")


NOT_ATTAINABLE = "not attainable"  # a check the tree's generation cannot meet (isolation on OpSlot trees)


class Result:
    def __init__(self) -> None:
        self.status = "pass"
        self.findings: list[dict[str, str]] = []
        self.details: list[str] = []
        self.facts: dict[str, object] = {}

    def fail(self, what: str, meaning: str, fix: str) -> None:
        self.status = "fail"
        self.findings.append({"what": what, "meaning": meaning, "fix": fix})

    def skip(self, why: str) -> None:
        if self.status == "pass":
            self.status = "skip"
        self.details.append(why)

    def as_dict(self) -> dict[str, object]:
        return {
            "status": self.status,
            "findings": self.findings,
            "details": "\n".join(self.details),
            "facts": self.facts,
        }


class CannotRun(Exception):
    """A dependency or precondition is missing: the check cannot say pass or fail."""


# -- helpers ------------------------------------------------------------------------------------------


def _quiet():
    return contextlib.redirect_stdout(io.StringIO())


VENDOR_MODULES = ("torch_npu", "liger_kernel", "flash_attn", "flash_attn_interface", "triton", "apex", "quack",
                  "flashinfer", "mindspeed")  # fmt: skip


class VendorImport(Exception):
    """A module imports a device vendor's kernel package at import time."""


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or name
        top = missing.split(".")[0]
        if top in VENDOR_MODULES:
            raise VendorImport(top) from exc
        if top in {"torch", "transformers"}:
            raise CannotRun(f"`{top}` is not installed: pip install 'npu-lint[verify]'") from None
        if top == "veomni":
            raise
        raise CannotRun(
            f"importing {name} needs `{top}`, which is not installed: pip install {top.replace('_', '-')}"
        ) from None


def _force_npu(flag: bool) -> None:
    """Set ``IS_NPU_AVAILABLE`` in ``veomni.utils.device`` before a model package reads it."""
    try:
        device = importlib.import_module("veomni.utils.device")
    except ModuleNotFoundError:
        return
    device.IS_NPU_AVAILABLE = flag


def _generated_classes(module) -> dict[str, type]:
    import torch

    out = {}
    for name, obj in vars(module).items():
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module) and obj.__module__ == module.__name__:
            out[name] = obj
    return out


def _top_class(module, registered=(), kinds: tuple[str, ...] = ("ForConditionalGeneration", "ForCausalLM")):
    """The class to build: among those the package registers when it names them, else the generated ones."""
    classes = _generated_classes(module)
    if registered:
        classes = {k: v for k, v in classes.items() if k in registered} or classes
    for kind in kinds:
        for name in sorted(classes):
            if name.endswith(kind):
                return classes[name]
    return None


def _upstream_module(gen_path: Path) -> str:
    for line in gen_path.read_text(encoding="utf-8").splitlines()[:40]:
        m = re.match(r"^#\s+Source:\s*([\w.]+)", line)
        if m:
            return m.group(1)
    raise CannotRun(f"{gen_path.name} has no `Source:` banner naming its upstream transformers module")


# -- tiny configs --------------------------------------------------------------------------------------

_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "sliding_window": 8,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}
_VISION = {
    "depth": 2,
    "num_hidden_layers": 2,
    "hidden_size": 32,
    "embed_dim": 32,
    "intermediate_size": 64,
    "num_heads": 2,
    "num_attention_heads": 2,
    "num_position_embeddings": 64,
    "deepstack_visual_indexes": [1],
}


def _shrink(cfg, values: dict[str, object]) -> None:
    for key, value in values.items():
        if hasattr(cfg, key) and getattr(cfg, key) is not None:
            setattr(cfg, key, value)
    if getattr(cfg, "layer_types", None) is not None:
        n = cfg.num_hidden_layers
        kinds = list(cfg.layer_types)
        cfg.layer_types = (kinds * n)[:n] if kinds else kinds
        if hasattr(cfg, "sliding_window_pattern") or "sliding_attention" in kinds:
            cfg.layer_types = ["sliding_attention", "full_attention"][:n]
    if getattr(cfg, "mlp_only_layers", None) is not None:
        cfg.mlp_only_layers = []


def tiny_config(config_class):
    cfg = config_class()
    text = getattr(cfg, "text_config", None)
    vision = getattr(cfg, "vision_config", None)
    if text is not None:
        _shrink(text, _TEXT)
    else:
        _shrink(cfg, _TEXT)
    if vision is not None:
        _shrink(vision, _VISION)
        if hasattr(vision, "out_hidden_size"):
            vision.out_hidden_size = (text or cfg).hidden_size
        if hasattr(vision, "image_size") and hasattr(vision, "patch_size"):
            vision.image_size = vision.patch_size * 4
        if hasattr(cfg, "mm_tokens_per_image"):
            cfg.mm_tokens_per_image = 4
    vocab = (text or cfg).vocab_size
    special = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
               "vision_end_token_id", "boi_token_index", "eoi_token_index", "audio_token_id")  # fmt: skip
    for i, key in enumerate(special):
        for c in (cfg, text):
            if c is not None and isinstance(getattr(c, key, None), int) and getattr(c, key) >= vocab:
                setattr(c, key, vocab - 1 - i)
    for c in (cfg, text, vision):
        if c is not None:
            c._attn_implementation = "eager"
            if hasattr(c, "use_cache"):
                c.use_cache = False
    if hasattr(cfg, "tie_word_embeddings") and text is not None and hasattr(text, "tie_word_embeddings"):
        text.tie_word_embeddings = cfg.tie_word_embeddings
    return cfg


def _vocab(cfg) -> int:
    text = getattr(cfg, "text_config", None)
    return (text or cfg).vocab_size


# -- inputs ---------------------------------------------------------------------------------------------


def _text_batch(cfg, seed: int = 1, seq: int = 12):
    import torch

    g = torch.Generator().manual_seed(seed)
    vocab = _vocab(cfg)
    reserved = {getattr(cfg, k, None) for k in ("image_token_id", "video_token_id", "vision_start_token_id",
                                                 "vision_end_token_id", "image_token_index", "boi_token_index",
                                                 "eoi_token_index", "audio_token_id")}  # fmt: skip
    ids = torch.randint(3, min(vocab, 200), (2, seq), generator=g)
    for r in reserved:
        if isinstance(r, int):
            ids[ids == r] = 5
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def _media_batch(cfg, seed: int = 2, upstream: bool = False):
    """A batch with one image per sample, for the model families whose media inputs are known."""
    import torch

    g = torch.Generator().manual_seed(seed)
    vision = cfg.vision_config
    batch = _text_batch(cfg, seed)
    ids = batch["input_ids"]
    if hasattr(vision, "spatial_merge_size") and hasattr(cfg, "image_token_id"):  # Qwen2-VL family
        merge, patch = vision.spatial_merge_size, vision.patch_size
        temporal = getattr(vision, "temporal_patch_size", 1)
        grid = torch.tensor([[1, 2 * merge, 2 * merge]] * ids.shape[0])
        n_patches = int(grid[0].prod())
        n_tokens = n_patches // (merge * merge)
        pixel = torch.randn(
            ids.shape[0] * n_patches, vision.in_channels * temporal * patch * patch, generator=g
        )
        ids = torch.cat(
            [ids[:, :2], torch.full((ids.shape[0], n_tokens), cfg.image_token_id), ids[:, 2:]], dim=1
        )
        labels = ids.clone()
        labels[ids == cfg.image_token_id] = -100
        out = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels,
               "pixel_values": pixel, "image_grid_thw": grid}  # fmt: skip
        if upstream:
            out["mm_token_type_ids"] = (ids == cfg.image_token_id).long()
        return out
    token = getattr(cfg, "image_token_id", None) or getattr(cfg, "image_token_index", None)
    if token is not None and hasattr(vision, "image_size"):  # SigLIP-style towers (Gemma 3, LLaVA...)
        n_tokens = getattr(cfg, "mm_tokens_per_image", None) or (vision.image_size // vision.patch_size) ** 2
        pixel = torch.randn(ids.shape[0], getattr(vision, "num_channels", 3), vision.image_size, vision.image_size,
                            generator=g)  # fmt: skip
        ids = torch.cat([ids[:, :2], torch.full((ids.shape[0], n_tokens), token), ids[:, 2:]], dim=1)
        labels = ids.clone()
        labels[ids == token] = -100
        out = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "labels": labels,
            "pixel_values": pixel,
        }
        if "gemma3" in type(cfg).__name__.lower():
            out["token_type_ids"] = (ids == token).long()
        return out
    raise CannotRun(f"npu-lint does not know the media inputs of {type(cfg).__name__}")


# -- model construction ---------------------------------------------------------------------------------


def _checkpoint_mapping(cls) -> dict[str, str]:
    mapping = getattr(cls, "_checkpoint_conversion_mapping", None) or {}
    return dict(mapping)


def _map_key(key: str, mapping: dict[str, str]) -> str:
    for pattern, repl in mapping.items():
        new, n = re.subn(pattern, repl, key)
        if n:
            return new
    return key


def _eager_ops_config():
    """VeOmni's ops configuration with every implementation set to eager (None when the tree has none)."""
    try:
        args = importlib.import_module("veomni.arguments.arguments_types")
        cfg_cls = args.OpsImplementationConfig
    except (ImportError, AttributeError):
        return None
    import dataclasses

    values = {}
    for f in dataclasses.fields(cfg_cls):
        if f.name.endswith("_implementation"):
            values[f.name] = "eager"
    # some fields do not accept "eager" on this machine (quantisation kernels): keep their defaults
    for _ in range(len(values) + 1):
        try:
            with _quiet():
                return cfg_cls(**values)
        except (ValueError, TypeError) as exc:
            named = [k for k in values if k.split("_implementation")[0] in str(exc)]
            if not named:
                raise
            del values[named[0]]
    return None


@contextlib.contextmanager
def veomni_eager(modules):
    """Install VeOmni's eager ops as its model builder would (loss mapping, OpSlot bindings), then undo it.

    Upstream models run outside this context: VeOmni's loss mapping returns VeOmni's own loss tuple.
    """
    from transformers.loss import loss_utils

    saved = dict(loss_utils.LOSS_MAPPING)
    cfg = _eager_ops_config()
    try:
        if cfg is not None:
            ops = importlib.import_module("veomni.ops")
            with _quiet():
                if hasattr(ops, "apply_ops_config"):
                    ops.apply_ops_config(cfg)
                try:
                    auto = importlib.import_module("veomni.models.auto")
                except ImportError:
                    auto = None
                binder = getattr(auto, "_bind_veomni_ops", None)
                for module in modules:
                    if binder is not None:
                        binder(module, cfg)
        yield cfg
    finally:
        loss_utils.LOSS_MAPPING.clear()
        loss_utils.LOSS_MAPPING.update(saved)


@contextlib.contextmanager
def simulated_fsdp():
    """Make VeOmni's parallel state report FSDP as enabled (one process), so the text-only path takes the
    branch a data-parallel rank without media takes: the towers' dummy forward."""
    try:
        ps_mod = importlib.import_module("veomni.distributed.parallel_state")
        state_cls = type(ps_mod.get_parallel_state())
    except Exception:
        yield False
        return
    saved = state_cls.__dict__.get("fsdp_enabled")
    state_cls.fsdp_enabled = property(lambda self: True)
    try:
        yield True
    finally:
        if saved is None:
            del state_cls.fsdp_enabled
        else:
            state_cls.fsdp_enabled = saved


def _build(cls, cfg, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    with _quiet():
        model = cls(cfg)
    return model.float().train()


class Trio:
    """The upstream model and the GPU- and NPU-generated models with the upstream weights."""

    def __init__(self, req: dict) -> None:
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)
        self.req = req
        self.gen_modules = {}
        for side in ("gpu", "npu"):
            name = req.get(f"{side}_module")
            if name:
                self.gen_modules[side] = _import(name)
        if not self.gen_modules:
            raise CannotRun("the package has no generated module to build a model from")
        first = next(iter(self.gen_modules.values()))
        self.upstream = _import(_upstream_module(Path(first.__file__)))
        self.gen_cls = {
            side: _top_class(m, req.get("registered") or ()) for side, m in self.gen_modules.items()
        }
        if any(c is None for c in self.gen_cls.values()):
            raise CannotRun("no *ForConditionalGeneration / *ForCausalLM class in the generated module")
        cls_name = next(iter(self.gen_cls.values())).__name__
        self.up_cls = getattr(self.upstream, cls_name, None)
        if self.up_cls is None:
            raise CannotRun(f"upstream {self.upstream.__name__} has no {cls_name}")
        try:
            self.cfg = tiny_config(self.up_cls.config_class)
        except Exception as exc:
            raise CannotRun(
                f"npu-lint cannot build a tiny {self.up_cls.config_class.__name__}: {type(exc).__name__}: {exc}"
            ) from None
        self.is_vlm = getattr(self.cfg, "vision_config", None) is not None and cls_name.endswith(
            "ForConditionalGeneration"
        )
        try:
            self.up_model = _build(self.up_cls, self.cfg)
        except Exception as exc:
            raise CannotRun(
                f"upstream {cls_name} cannot be built from npu-lint's tiny config: {type(exc).__name__}: {exc}"
            ) from None
        self.up_state = self.up_model.state_dict()
        self.models = {}
        self.load_report = {}
        for side, cls in self.gen_cls.items():
            model = _build(cls, self.cfg, seed=123)
            mapping = _checkpoint_mapping(cls)
            state = {_map_key(k, mapping): v for k, v in self.up_state.items()}
            missing, unexpected = model.load_state_dict(state, strict=False)
            self.models[side] = model
            self.load_report[side] = (list(missing), list(unexpected))


def _run(model, batch):
    out = model(**batch)
    return out.logits, out.loss


def _close(a, b) -> tuple[bool, float]:
    import torch

    diff = (a.detach() - b.detach()).abs().max().item() if a.numel() else 0.0
    return bool(torch.allclose(a.detach(), b.detach(), atol=ATOL, rtol=RTOL)), diff


# -- checks ---------------------------------------------------------------------------------------------


def check_pin(req: dict, res: Result) -> None:
    from importlib import metadata

    pin = req.get("pin")
    try:
        installed = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        raise CannotRun("`transformers` is not installed: pip install 'npu-lint[verify]'") from None
    res.facts["installed"] = installed
    res.facts["pin"] = pin
    if not pin:
        res.skip(
            "the tree pins no transformers release (no `transformers==` in pyproject.toml, no generated banner)"
        )
        return
    if installed != pin:
        res.fail(
            f"installed transformers=={installed}, the tree pins transformers=={pin} ({req.get('pin_source')})",
            "generated files are copies of one transformers release; against another one patchgen reads a "
            "different upstream file and the generated classes may call upstream code that changed",
            f"pip install transformers=={pin} (NPU506 transformers-pin)",
        )


def _patchgen_settings(root: Path) -> dict:
    py = root / "pyproject.toml"
    if not py.is_file():
        return {}
    try:
        import tomllib
    except ImportError:  # pragma: no cover
        return {}
    try:
        data = tomllib.loads(py.read_text(encoding="utf-8"))
    except Exception:
        return {}
    return data.get("tool", {}).get("patchgen", {}) or {}


def check_patchgen(req: dict, res: Result) -> None:
    try:
        from patchgen.run_codegen import run_codegen
    except ModuleNotFoundError:
        raise CannotRun(
            "VeOmni's patchgen is not importable (the veomni wheel ships only the `veomni.patchgen` shim; "
            "the package is `patchgen-pkg/` of a VeOmni checkout): pip install ./patchgen-pkg in the checkout, "
            "or pass --patchgen DIR"
        ) from None
    root = Path(req["root"])
    settings = _patchgen_settings(root)
    extra = tuple(settings.get("ruff_extra_ignore", ()))
    isolated = bool(settings.get("ruff_isolated", False))
    gen_dir = Path(req["model_dir"]) / "generated"
    outputs = []
    base = Path(tempfile.mkdtemp(prefix="npu-lint-patchgen-"))
    try:
        # ruff (run by patchgen) reads its settings from the nearest pyproject.toml: give the temporary
        # output the tree's own, so the output is formatted as the committed files were
        for run in ("a", "b"):
            out = base / run / "generated"
            out.mkdir(parents=True)
            for name in ("pyproject.toml", "ruff.toml", ".ruff.toml"):
                if (root / name).is_file():
                    shutil.copy(root / name, base / run / name)
            outputs.append(out)
            for spec in req["specs"]:
                log = io.StringIO()
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    text = run_codegen(
                        spec, out, save_diff=True, ruff_extra_ignore=extra, ruff_isolated=isolated
                    )
                if text is None:
                    res.fail(
                        f"patchgen failed on {spec}",
                        "the spec cannot produce a generated module: " + log.getvalue().strip()[-600:],
                        "fix the spec (npu-lint check reports spec errors; NPU5xx)",
                    )
                    return
        a, b = outputs
        names = sorted(p.name for p in a.iterdir())
        res.facts["files"] = names
        for name in names:
            if not (b / name).is_file() or not filecmp.cmp(a / name, b / name, shallow=False):
                res.fail(
                    f"patchgen is not reproducible: two runs wrote different {name}",
                    "the spec depends on something other than its text (ordering of a set, time, environment)",
                    "make the spec deterministic, then regenerate (guide: regenerate and check drift)",
                )
        spec_of = {v.split("|")[1]: v.split("|")[0] for v in (req.get("generated_missing") or {}).values()}
        for name in names:
            committed = gen_dir / name
            fresh = (a / name).read_text(encoding="utf-8")
            if not committed.is_file():
                if name.endswith(".diff"):
                    res.details.append(f"{name}: not committed, compared the .py only")
                    continue
                res.fail(
                    f"generated/{name} is missing",
                    "the spec exists but its generated module was never produced, so the package cannot import it",
                    f"run patchgen: patchgen {spec_of.get(name, 'SPEC_MODULE')}",
                )
                continue
            old = committed.read_text(encoding="utf-8")
            if old != fresh:
                diff = "".join(
                    difflib.unified_diff(
                        old.splitlines(True),
                        fresh.splitlines(True),
                        f"committed/{name}",
                        f"patchgen/{name}",
                        n=2,
                    )
                )
                res.details.append(diff[:20000])
                res.fail(
                    f"generated/{name} differs from what its spec produces",
                    "the generated file was edited by hand or not regenerated after a spec change; the next "
                    "regeneration silently discards or adds code",
                    "move the edit into the spec and regenerate (NPU505 generated-drift)",
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _registry():
    for name in ("veomni.models.loader", "veomni.models.registry"):
        try:
            return getattr(importlib.import_module(name), "MODELING_REGISTRY", None)
        except ModuleNotFoundError:
            continue
    return None


def _entries(registry, package: str) -> dict:
    entries = {}
    for attr in ("_local_mapping", "_global_mapping"):
        for key, fn in (getattr(registry, attr, None) or {}).items():
            if getattr(fn, "__module__", "") == package:
                entries[key] = fn
    return entries


def check_import(req: dict, res: Result) -> None:
    force = bool(req.get("force_npu"))
    side = "npu" if force else "gpu"
    for s in ("gpu", "npu"):
        name = req.get(f"{s}_module")
        if not name and s in (req.get("generated_missing") or {}):
            spec, filename = req["generated_missing"][s].split("|")
            res.fail(
                f"generated/{filename} does not exist",
                f"the {s.upper()} spec was never run through patchgen, so the package has nothing to import",
                f"run patchgen: patchgen {spec} (then verify again)",
            )
            continue
        if not name:
            res.fail(
                f"no {s.upper()} generated module",
                "the package cannot select a module for this device",
                "create the NPU sibling spec and regenerate (NPU501 missing-npu-spec)",
            )
            continue
        try:
            with _quiet():
                _import(name)
        except CannotRun:
            raise
        except VendorImport as exc:
            res.fail(
                f"{name} imports `{exc}` at import time, which this machine does not have",
                "the generated module only imports where that vendor's kernels are installed: a GPU-only kernel "
                "breaks the NPU module, torch_npu breaks every other device",
                "import vendor kernels lazily, behind a registry row (NPU301 vendor-kernel-import)",
            )
        except Exception as exc:
            res.fail(
                f"{name} does not import: {type(exc).__name__}: {exc}",
                "the package cannot be used on this device; the traceback is in the details",
                "fix the spec's imports (NPU3xx vendor kernels, NPU5xx packaging) and regenerate",
            )
            res.details.append(traceback.format_exc()[-3000:])
    if res.status == "fail":
        return
    with _quiet():
        pkg = _import(req["package"])
    registry = _registry()
    if registry is None:
        res.skip("no MODELING_REGISTRY in the tree: registration not checked")
        return
    # force the device flag after the generated modules imported (forcing it earlier makes VeOmni import
    # torch_npu), then re-run the package's __init__ so a choice made at import time sees it too
    _force_npu(force)
    for key in _entries(registry, pkg.__name__):
        for attr in ("_local_mapping", "_global_mapping"):
            (getattr(registry, attr, None) or {}).pop(key, None)
    with _quiet():
        pkg = importlib.reload(pkg)
    if hasattr(pkg, "IS_NPU_AVAILABLE"):
        pkg.IS_NPU_AVAILABLE = force
    entries = _entries(registry, pkg.__name__)
    if not entries:
        res.fail(
            f"{req['package']} registers no model type",
            "VeOmni cannot build this model by its config's model_type",
            "register each model type with MODELING_REGISTRY (NPU503 incomplete-registration)",
        )
        return
    want = req[f"{side}_module"]
    other = req[f"{'gpu' if side == 'npu' else 'npu'}_module"]
    seen = {}
    for key, fn in sorted(entries.items()):
        for arch in ("ForCausalLM", "ForConditionalGeneration", "Model", None):
            try:
                with _quiet():
                    cls = fn(f"X{arch}" if arch else "X")
            except Exception as exc:
                res.fail(
                    f"registration {key!r}({arch}) raised {type(exc).__name__}: {exc}",
                    "the registered function cannot return a class",
                    "fix the registration in __init__.py (NPU503)",
                )
                continue
            mod = getattr(cls, "__module__", "")
            seen[f"{key}:{arch}"] = f"{mod}.{getattr(cls, '__name__', cls)}"
            if mod == other or (mod != want and mod.startswith(req["package"])):
                res.fail(
                    f"with IS_NPU_AVAILABLE={force}, {key!r} returns {mod}.{cls.__name__} for {arch}",
                    f"on {'an NPU' if force else 'a GPU'} the {'GPU' if force else 'NPU'} module would be trained",
                    "choose the generated module with `if IS_NPU_AVAILABLE:` in __init__.py "
                    "(NPU502 static-generated-import)",
                )
    res.facts[f"registration_{side}"] = seen


def _trio(req: dict) -> Trio:
    return Trio(req)


def check_parity(req: dict, res: Result) -> None:
    import torch

    trio = _trio(req)
    res.facts["config"] = type(trio.cfg).__name__
    res.facts["model"] = trio.up_cls.__name__
    batch = _media_batch(trio.cfg) if trio.is_vlm else _text_batch(trio.cfg)
    up_batch = _media_batch(trio.cfg, upstream=True) if trio.is_vlm else batch
    for side, (missing, unexpected) in trio.load_report.items():
        if missing or unexpected:
            res.fail(
                f"{side} model does not take the upstream weights: missing {missing[:5]}, unexpected {unexpected[:5]}",
                "the comparison would not use the same weights (the checkpoint check says why)",
                "see the checkpoint check",
            )
    if res.status == "fail":
        return
    torch.manual_seed(7)
    try:
        up_logits, up_loss = _run(trio.up_model, up_batch)
    except Exception as exc:
        raise CannotRun(
            f"upstream {trio.up_cls.__name__} does not run on npu-lint's inputs: {type(exc).__name__}: {exc}"
        ) from None
    res.facts["upstream_loss"] = float(up_loss)
    for side, model in trio.models.items():
        torch.manual_seed(7)
        try:
            with veomni_eager(trio.gen_modules.values()):
                logits, loss = _run(model, batch)
        except Exception as exc:
            res.fail(
                f"{side}-generated forward raised {type(exc).__name__}: {exc}",
                "the generated model cannot run eagerly on CPU",
                "fix the spec's patched forward (npu-lint check lists the static causes)",
            )
            res.details.append(traceback.format_exc()[-3000:])
            continue
        ok_logits, d_logits = _close(logits, up_logits)
        ok_loss, d_loss = _close(loss.reshape(1), up_loss.reshape(1))
        res.facts[f"{side}_max_abs_logits_diff"] = d_logits
        res.facts[f"{side}_loss"] = float(loss)
        if not (ok_logits and ok_loss):
            res.fail(
                f"{side}-generated logits/loss differ from upstream (max |dlogits| {d_logits:.3g}, |dloss| "
                f"{d_loss:.3g}; tolerance atol {ATOL}, rtol {RTOL})",
                "with eager ops and the same weights the patched model computes something else: a patch changed "
                "the maths (RMSNorm offset, RoPE, loss shift...)",
                "compare the patched method with upstream (NPU401/NPU402 RMSNorm, NPU41x loss)",
            )
        if not torch.isfinite(logits).all() or not torch.isfinite(loss):
            res.fail(f"{side}-generated forward is not finite", "NaN/inf in logits or loss", "see NPU4xx")
        loss.backward()
        bad = [
            n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()
        ]
        none = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
        if bad:
            res.fail(f"{side}: non-finite gradients in {bad[:10]}", "backward is not finite", "see NPU4xx")
        if none:
            res.fail(
                f"{side}: {len(none)} trainable parameters get no gradient: {', '.join(none[:20])}",
                "these parameters never reach the loss; under FSDP a rank without a gradient for them hangs the "
                "reduce-scatter, and they never train",
                "run every trainable tower on every microbatch (guide: multimodal dummy_forward; NPU7xx)",
            )


def check_isolation(req: dict, res: Result) -> None:
    import torch

    handle_types = []
    for mod, cls in (
        ("veomni.ops.dispatch", "OpSlot"),
        ("veomni.ops", "VeomniOp"),
        ("veomni.kernels", "VeomniKernel"),
    ):
        try:
            handle_types.append(getattr(importlib.import_module(mod), cls))
        except (ImportError, AttributeError):
            continue
    handle_types = tuple(handle_types)
    res.facts["handle_types"] = [t.__name__ for t in handle_types]
    if not handle_types:
        res.skip("the tree has no OpSlot / VeomniOp / VeomniKernel: nothing to isolate")
        return
    # the OpSlot generation has no instance-local handle API: its module-scope slots are its design, and
    # isolation is not attainable there (not a failure of the model) until the tree moves to VeomniOp/VeomniKernel
    instance_api = [t for t in handle_types if t.__name__ != "OpSlot"]
    for side in ("gpu", "npu"):
        name = req.get(f"{side}_module")
        if not name:
            continue
        with _quiet():
            module = _import(name)
        globals_ = sorted(k for k, v in vars(module).items() if isinstance(v, handle_types))
        if globals_ and not instance_api:
            if res.status == "pass":
                res.status = NOT_ATTAINABLE
            res.details.append(
                f"{side} module binds {len(globals_)} OpSlots at module scope ({', '.join(globals_)}): this tree is "
                "of the OpSlot generation, which has no instance-local handle API (no VeomniOp / VeomniKernel), so "
                "every model built from the module shares them by design; isolation is attainable once the tree "
                "moves to VeomniOp or VeomniKernel (NPU201)"
            )
        elif globals_:
            res.fail(
                f"{side} module binds {len(globals_)} dispatch handles at module scope: {', '.join(globals_)}",
                "a module-global handle is shared by every model built from this module: building model B with "
                "another ops configuration rebinds it under model A (NPU201 module-global-dispatch)",
                "build the handles in the model's __init__ and store them on self, with the implementation "
                "from the ops config (NPU201; guide: instance-local handles)",
            )
    # instance handles: model A with ops config X, then model B with config Y
    setter = None
    for mod, fn in (("veomni.ops.config", "set_ops_config"), ("veomni.kernels.config", "set_kernel_config")):
        try:
            setter = getattr(importlib.import_module(mod), fn)
            break
        except (ImportError, AttributeError):
            continue
    if setter is None:
        res.details.append("no ops-config setter (OpSlot generation): instance handles not exercised")
        return
    from types import SimpleNamespace

    trio_req = dict(req)
    setter(SimpleNamespace(attn_implementation="eager"))
    a = Trio(trio_req).models

    def snapshot(model):
        out = {}
        for mname, sub in model.named_modules():
            for attr, value in vars(sub).items():
                if isinstance(value, handle_types):
                    out[f"{mname}.{attr}"] = (id(value), repr(value))
        return out

    before = {s: snapshot(m) for s, m in a.items()}
    setter(SimpleNamespace(attn_implementation="sdpa"))
    b = Trio(trio_req).models
    after = {s: snapshot(m) for s, m in a.items()}
    for side in before:
        changed = [k for k in before[side] if before[side][k] != after[side].get(k)]
        res.facts[f"{side}_instance_handles"] = len(before[side])
        res.facts[f"{side}_model_b_handles_differ"] = snapshot(b[side]) != before[side]
        if changed:
            res.fail(
                f"{side}: building model B with another ops config retargeted model A's handles: "
                f"{', '.join(changed[:10])}",
                "handles are shared across model instances",
                "store per-instance handles built in __init__ (NPU201, NPU202)",
            )
    with contextlib.suppress(Exception):
        setter(None)
    del torch


def check_checkpoint(req: dict, res: Result) -> None:
    import torch

    trio = _trio(req)
    up_keys = list(trio.up_state)
    tied = bool(getattr(trio.cfg, "tie_word_embeddings", False))
    for side, model in trio.models.items():
        cls = trio.gen_cls[side]
        mapping = _checkpoint_mapping(cls)
        mapped = {_map_key(k, mapping): k for k in up_keys}
        params = dict(model.named_parameters(remove_duplicate=False))
        buffers = {n for n, _ in model.named_buffers()}
        missing = sorted(k for k in params if k not in mapped)
        unexpected = sorted(k for k in mapped if k not in params and k not in buffers)
        allowed = [k for k in missing + unexpected if k.endswith("lm_head.weight") and tied]
        missing = [k for k in missing if k not in allowed]
        unexpected = [k for k in unexpected if k not in allowed]
        res.facts[f"{side}_parameters"] = len(params)
        res.facts[f"{side}_mapping"] = mapping
        if unexpected:
            res.fail(
                f"{side}: {len(unexpected)} upstream checkpoint keys match no parameter: {', '.join(unexpected[:10])}",
                "loading a Hugging Face checkpoint silently drops these weights",
                "keep upstream module names or add a `_checkpoint_conversion_mapping` entry (guide: checkpoint "
                "conversion; NPU7xx wrappers)",
            )
        if missing:
            res.fail(
                f"{side}: {len(missing)} parameters are not in the upstream checkpoint: {', '.join(missing[:10])}",
                "these parameters keep their random initialisation after loading a checkpoint",
                "rename back to upstream names or map them in `_checkpoint_conversion_mapping`",
            )
        loaded = _build(cls, trio.cfg, seed=99)
        state = {_map_key(k, mapping): v for k, v in trio.up_state.items()}
        miss, _unexp = loaded.load_state_dict(state, strict=False)
        uninit = [k for k in miss if any(h in k for h in VISION_HINTS) and k not in allowed]
        for name, p in loaded.named_parameters():
            if not torch.isfinite(p).all() and name not in uninit:
                uninit.append(name)
        if uninit:
            res.fail(
                f"{side}: vision/projector parameters left uninitialised after loading: {', '.join(uninit[:10])}",
                "the media tower trains from garbage (or NaN) weights while the text model looks fine",
                "map the tower's legacy keys in `_checkpoint_conversion_mapping` (for Gemma 3: "
                "vision_tower.vision_model.* and multi_modal_projector.* -> model.*)",
            )


def check_multimodal(req: dict, res: Result) -> None:
    import torch

    trio = _trio(req)
    if not trio.is_vlm:
        res.skip("not a vision-language model (it registers no *ForConditionalGeneration)")
        return
    media = _media_batch(trio.cfg)
    text = _text_batch(trio.cfg, seed=3)
    trainable_names = None
    with torch.no_grad():
        up_text_logits = trio.up_model(**{k: v for k, v in text.items() if k != "labels"}).logits
    for side, model in trio.models.items():
        grads = {}
        for label, batch in (("media", media), ("text-only", text)):
            model.zero_grad(set_to_none=True)
            try:
                with veomni_eager(trio.gen_modules.values()), simulated_fsdp():
                    out = model(**batch)
            except Exception as exc:
                res.fail(
                    f"{side}: the {label} forward raised {type(exc).__name__}: {exc}",
                    "the model does not accept this microbatch",
                    "keep the upstream media inputs in the patched forward (guide: multimodal inputs)",
                )
                res.details.append(traceback.format_exc()[-3000:])
                break
            out.loss.backward()
            grads[label] = {n for n, p in model.named_parameters() if p.grad is not None}
            if label == "text-only":
                ok, diff = _close(out.logits, up_text_logits)
                res.facts[f"{side}_text_only_max_abs_logits_diff"] = diff
                if not ok:
                    res.fail(
                        f"{side}: the text-only logits differ from upstream by {diff:.3g}",
                        "the dummy media path changes the text result; it must add exactly zero "
                        "(`fake.mean() * 0.0`)",
                        "make dummy_forward's contribution zero (guide: multimodal dummy path)",
                    )
        trainable_names = {n for n, p in model.named_parameters() if p.requires_grad}
        if len(grads) == 2 and grads["media"] != grads["text-only"]:
            only_media = sorted(grads["media"] - grads["text-only"])
            only_text = sorted(grads["text-only"] - grads["media"])
            res.fail(
                f"{side}: text-only and media microbatches put gradients on different parameters "
                f"(only with media: {', '.join(only_media[:8])}{' ...' if len(only_media) > 8 else ''}"
                f"{'; only text-only: ' + ', '.join(only_text[:8]) if only_text else ''})",
                "a text-only rank skips the vision tower: under FSDP the ranks disagree on which gradients "
                "to reduce and training hangs",
                "run the tower's dummy_forward on text-only microbatches and add `fake.mean() * 0.0` "
                "(guide: multimodal dummy path; NPU7xx)",
            )
        res.facts[f"{side}_trainable"] = len(trainable_names)


CHECKS = {
    "pin": check_pin,
    "patchgen": check_patchgen,
    "import": check_import,
    "parity": check_parity,
    "isolation": check_isolation,
    "checkpoint": check_checkpoint,
    "multimodal": check_multimodal,
}


def main(argv: list[str]) -> int:
    request_path, result_path = argv[1], argv[2]
    req = json.loads(Path(request_path).read_text(encoding="utf-8"))
    for p in reversed(req.get("sys_path", [])):
        sys.path.insert(0, p)
    res = Result()
    try:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        CHECKS[req["check"]](req, res)
        out = res.as_dict()
    except VendorImport as exc:
        out = res.as_dict()
        out["status"] = "fail"
        out["findings"].append(
            {
                "what": f"the model imports `{exc}` at import time, which this machine does not have",
                "meaning": "the model cannot be built where that vendor's kernels are missing",
                "fix": "import vendor kernels lazily, behind a registry row (NPU301 vendor-kernel-import)",
            }
        )
    except CannotRun as exc:
        out = {
            "status": "error",
            "findings": [],
            "details": str(exc),
            "facts": res.facts,
            "cannot_run": str(exc),
        }
    except Exception as exc:
        out = res.as_dict()
        out["status"] = "fail"
        out["findings"].append(
            {
                "what": f"the check crashed in model code: {type(exc).__name__}: {exc}",
                "meaning": "the model could not be built or run; the traceback is in the details",
                "fix": "read the traceback; npu-lint check lists static causes",
            }
        )
        out["details"] = (out.get("details") or "") + "\n" + traceback.format_exc()[-4000:]
    Path(result_path).write_text(json.dumps(out, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
