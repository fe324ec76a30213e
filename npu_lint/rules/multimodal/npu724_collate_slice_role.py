"""NPU724 collate-slice-role."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Example, Rule
from npu_lint.veomni.collateinfo import collate_entries, default_table, role_of

_ROLE_TEXT = {
    "mask": (
        "a placeholder mask, which the model uses on the all-gathered full sequence",
        "the model then indexes the full sequence with a rank-local mask (wrong positions or a shape error)",
    ),
    "payload": (
        "a media payload, which the collator cuts across ranks and the encoder all-gathers back",
        "each rank then gathers sp_size copies of the whole input (or the encoder sees a share it never "
        "gathers back)",
    ),
    "metadata": (
        "per-item metadata (sizes, grids), which every rank needs whole",
        "each rank then sees only a share of the per-item sizes",
    ),
}


class CollateSliceRole(Rule):
    code = "NPU724"
    name = "collate-slice-role"
    summary = (
        "A model's extra collate info cuts a field across sequence-parallel ranks (`sp_slice`) where the "
        "collator's own table treats every field of that role the other way (masks whole, media payloads cut)."
    )
    why = (
        "`get_extra_collate_infos()` extends the collator's `DEFAULT_DATA_COLLATE_INFO` with `(pack_dim, "
        "sp_slice, sp_pad_value, sp_pad_scale)` per field. Whether a field is cut to the rank's share is a "
        "contract with the model code: media payloads (`pixel_values`, packed on dim 0 and padded) are cut and "
        "all-gathered again by the encoder; placeholder masks (`image_mask`, `video_mask`) stay whole because "
        "the model scatters the gathered features into the all-gathered sequence with them; per-item metadata "
        "(`image_grid_thw`) is never padded nor cut. A model field of the same role (an audio mask, audio "
        "features, audio lengths) with the other answer breaks that contract silently: the encoder gathers "
        "sp_size copies of the audio, or a rank-local mask indexes the full sequence. The reference is the "
        "tree's own `veomni/data/data_collator.py` table (the shipped contract outside a tree): a field it "
        "names is the model's override (the collator applies the model's rows over its defaults) and is not "
        "compared; any other is compared with the rows of its role when they all agree."
        " An override of a row the table names is the model's choice, except one that cuts across ranks (sp_slice=True) a mask or per-item metadata the table keeps whole: the model scatters into the gathered sequence with the mask and splits the gathered media per item with the grid, so neither can be a rank's share."
    )
    bad = (
        Example(
            """
            class ToyOmniForConditionalGeneration:
                def get_extra_collate_infos(self):
                    return {
                        "audio_feature_lengths": (0, False, None, None),
                        "input_features": (0, False, 0, 1),
                        "audio_mask": (-1, False, 0, 1),
                    }
            """,
            path="veomni/models/transformers/toy_omni/modeling_toy_omni.py",
            title="audio features left whole while the audio encoder all-gathers them",
        ),
        Example(
            """
            from veomni.data.data_collator import DataCollateInfo


            def toy_omni_get_extra_collate_infos_patched(self):
                return {
                    "input_features": DataCollateInfo(0, True, 0, 1),
                    "audio_mask": DataCollateInfo(-1, True, 0, 1),
                }
            """,
            path="veomni/models/transformers/toy_omni/toy_omni_gpu_patch_gen_config.py",
            title="an audio placeholder mask cut to the rank's share",
        ),
    )
    good = (
        Example(
            """
            class ToyOmniForConditionalGeneration:
                def get_extra_collate_infos(self):
                    return {
                        "audio_feature_lengths": (0, False, None, None),
                        "input_features": (0, True, 0, 1),
                        "audio_mask": (-1, False, 0, 1),
                    }
            """,
            path="veomni/models/transformers/toy_omni/modeling_toy_omni.py",
        ),
    )
    fix_safety = "No fix: which side (the table or the model code) is wrong is for the author to decide."

    requires = ("collate_info",)
    node_types = (ast.FunctionDef,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.FunctionDef)
        if "collate_info" not in node.name:
            return
        table: dict | None = None
        for stmt in node.body:
            if not isinstance(stmt, (ast.Return, ast.Assign)) or not isinstance(stmt.value, ast.Dict):
                continue
            rows = collate_entries(stmt.value)
            if not rows:
                continue
            if table is None:
                table = default_table(self.ctx.source.path)
            for key, entry, value in rows:
                self._check(key, entry, value, table)

    def _check(self, key: str, entry: tuple, value: ast.expr, table: dict) -> None:
        sp_slice = entry[1]
        if not isinstance(sp_slice, bool):
            return
        own = table.get(key)
        if own is not None:
            # The model's override of the collator's row (MainCollator applies it over the defaults): kept as
            # the model's choice, except a cut of what the model consumes whole on every rank. A mask scatters
            # the gathered features into the all-gathered sequence; a grid or length row splits the gathered
            # media per item and builds the M-RoPE index: neither can be a rank's share. (A payload left whole
            # is an encoder that does not all-gather: a choice, not a contract break.)
            own_role = role_of(key, own)
            if sp_slice and own[1] is False and own_role in ("mask", "metadata"):
                what, effect = _ROLE_TEXT[own_role]
                self.report(
                    value,
                    f"`{key}` is {what}; the collator's table keeps it whole (sp_slice=False) and this row "
                    f"cuts it across ranks (sp_slice=True): {effect}",
                )
            return
        role = role_of(key, entry)
        if role is None:
            return
        peers = {k: e for k, e in table.items() if role_of(k, e) == role and isinstance(e[1], bool)}
        answers = {e[1] for e in peers.values()}
        if len(peers) < 2 or len(answers) != 1 or sp_slice in answers:
            return
        what, effect = _ROLE_TEXT[role]
        names = ", ".join(f"`{k}`" for k in sorted(peers)[:3])
        self.report(
            value,
            f"`{key}` is {what}, yet it is declared with sp_slice={sp_slice} where every field of that role in "
            f"the collator's table ({names}) has sp_slice={not sp_slice}: {effect}",
        )
