"""NPU723: a height and a width read or passed in each other's place (shapes, layout-named grids, calls).

Shapes written here are not the dev cases' spellings: other helpers, other layouts, other call forms."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/data/multimodal/toy_media.py"


def _lines(text: str, path: str = PATH) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU723"], Settings()) if d.code == "NPU723")


def test_shape_slice_unpacked_width_first() -> None:
    assert _lines(
        """
        def crop(frames):
            img_w, img_h = frames.shape[-2:]
            return frames[..., : img_h // 2, : img_w // 2]
        """
    ) == [2]


def test_channels_last_size_call() -> None:
    assert _lines(
        """
        def patchify(pixels):
            n, width, height, c = pixels.size()
            return pixels.reshape(n, height // 14, width // 14, -1)
        """
    ) == [2]


def test_parallel_axes_read() -> None:
    assert _lines(
        """
        def bounds(clip):
            resized_width, resized_height = clip.size(-2), clip.size(-1)
            return resized_height * resized_width
        """
    ) == [2]


def test_layout_named_grid_and_alias() -> None:
    assert _lines(
        """
        def tokens(image_grid_hw, video_grid_thw, merge):
            total = 0
            for grid_w, grid_h in image_grid_hw.tolist():
                total += grid_h * grid_w
            rows = video_grid_thw[:, 1:].tolist()
            total += sum(w * h for w, h in rows)
            return total
        """
    ) == [3, 6]


def test_call_into_local_function() -> None:
    assert _lines(
        """
        class Resizer:
            def target(self, height, width, factor):
                return height // factor, width // factor

            def __call__(self, image):
                height, width = image.shape[1:3]
                return self.target(width, height, 28)
        """
    ) == [7]


def test_keywords_crossed_and_torch_size() -> None:
    assert _lines(
        """
        import torch.nn.functional as F

        def up(x, h, w, processor):
            y = processor.fit(height=w, width=h)
            return F.interpolate(y, (w, h), mode="bilinear")
        """
    ) == [4, 5]


def test_correct_orders_stay_quiet() -> None:
    assert (
        _lines(
            """
            import torch.nn.functional as F

            def fine(video, image, video_grid_thw, fit):
                _, _, height, width = video.shape
                img_w, img_h = image.size  # PIL: (width, height)
                image = image.resize((img_w, img_h))  # PIL takes (width, height)
                for t, h, w in video_grid_thw.tolist():
                    pass
                x = F.interpolate(video, size=(height, width))
                return fit(height=img_h, width=img_w), fit(height, width)
            """
        )
        == []
    )


def test_function_that_permutes_its_own_layout_is_quiet() -> None:
    # transformers' pixel (un)shuffle labels a (batch, width, height, channels) view and permutes it back
    assert (
        _lines(
            """
            def pixel_unshuffle(hidden_states, factor):
                batch_size, width, height, channels = hidden_states.size()
                hidden_states = hidden_states.reshape(batch_size, width, height // factor, channels * factor)
                return hidden_states.permute(0, 2, 1, 3)
            """
        )
        == []
    )


def test_heads_and_weights_are_not_dimensions() -> None:
    assert (
        _lines(
            """
            def attn(q, weight):
                b, s, h, d = q.shape
                w_out, hidden_h = weight.shape
                return b, s, h, d, w_out, hidden_h
            """
        )
        == []
    )


def test_call_into_an_upstream_transformers_function() -> None:
    # transformers 5.9.0's Qwen2-VL smart_resize is declared (height, width, factor, ...)
    assert _lines(
        """
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        def target_size(frame, patch):
            height, width = frame.shape[-2:]
            ok = smart_resize(height, width, factor=patch)
            return smart_resize(width, height, factor=patch), ok
        """
    ) == [6]
