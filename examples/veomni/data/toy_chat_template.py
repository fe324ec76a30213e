"""A toy chat template: encodes a conversation and labels the turns the loss trains on (planted bug for NPU439)."""

IGNORE_INDEX = -100


def encode_conversation(tokenizer, messages):
    input_ids, labels = [], []
    for message in messages:
        ids = tokenizer.encode(message["content"], add_special_tokens=False)
        # NPU439: without an explicit `loss_mask` every turn but the system prompt is supervised, user turns included
        supervised = message.get("loss_mask", 0 if message["role"] == "system" else 1)
        input_ids += ids
        labels += ids if supervised == 1 else [IGNORE_INDEX] * len(ids)
    return {"input_ids": input_ids, "labels": labels}
