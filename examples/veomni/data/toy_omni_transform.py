# NPU725: the image grid popped out of the sample for the position-id call (the model never receives it)
# NPU726: only the temporal row of the M-RoPE position ids kept
def process_sample_omni(sample, processor, position_id_func):
    model_inputs = processor(text=sample["text"], images=sample["images"], return_tensors="pt")
    returns = position_id_func(
        input_ids=model_inputs["input_ids"],
        image_grid_thw=model_inputs.pop("image_grid_thw", None),
    )
    model_inputs["position_ids"] = returns["position_ids"][0].squeeze().clone()
    return [model_inputs]
