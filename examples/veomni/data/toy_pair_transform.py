"""A toy preference-pair transform (planted bug for NPU436)."""

IGNORE_INDEX = -100


def build_pair(tokenizer, prompt, chosen, rejected):
    prompt_len = len(tokenizer.encode(prompt))
    chosen_ids = tokenizer.encode(prompt + chosen)
    rejected_ids = tokenizer.encode(prompt + rejected)
    chosen_record = {"input_ids": chosen_ids, "labels": [IGNORE_INDEX] * prompt_len + chosen_ids[prompt_len:]}
    # NPU436: the rejected record's prompt is supervised, the chosen one's is masked
    rejected_record = {"input_ids": rejected_ids, "labels": rejected_ids}
    return chosen_record, rejected_record
