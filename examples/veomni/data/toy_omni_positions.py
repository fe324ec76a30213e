"""An omni sample transform (demo)."""


class _Registry(dict):
    def register(self, key):
        def wrap(fn):
            self[key] = fn
            return fn

        return wrap


DATA_TRANSFORM_REGISTRY = _Registry()


@DATA_TRANSFORM_REGISTRY.register("qwen3_omni_moe")
def encode_omni_sample(sample, processor, position_id_func):
    batch = processor(text=sample["text"], videos=sample.get("videos"), return_tensors="pt").data
    # NPU731: the videos' seconds per grid never reach get_rope_index, which indexes them unguarded
    positions = position_id_func(
        input_ids=batch["input_ids"],
        video_grid_thw=batch.get("video_grid_thw"),
        attention_mask=batch["attention_mask"],
        audio_seqlens=batch.get("audio_feature_lengths"),
    )
    batch["position_ids"] = positions["position_ids"]
    return [batch]
