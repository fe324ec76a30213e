"""A multimodal sample transform (demo)."""


def encode_sample(sample, processor, position_id_func):
    media_config = processor.media_layout(sample)
    input_ids, attention_mask = processor.encode(sample["conversation"], **media_config)
    # NPU711: the position-id function gets no media grids: every placeholder gets a text position
    position_ids = position_id_func(input_ids=input_ids, attention_mask=attention_mask)["position_ids"]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
