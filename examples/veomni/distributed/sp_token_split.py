"""How many media tokens each sequence-parallel rank sends and receives (a helper that lost a line)."""


def media_token_splits(image_lens: list[int], sp_size: int) -> tuple[list[int], int]:
    num_tokens = 0
    for image_len in image_lens:
        for _rank in range(sp_size):
            tokens_split.append(image_len // sp_size)  # NPU516: `tokens_split = []` was dropped
        num_tokens += image_len
    return tokens_split, num_tokens
