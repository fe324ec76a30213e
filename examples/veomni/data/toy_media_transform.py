"""A toy image/video sample transform (planted bug for NPU719)."""

IMAGE_TOKEN_INDEX = -200
VIDEO_TOKEN_INDEX = -201


def pack_media(input_ids, image_inputs, video_inputs):
    sample = {"image_mask": input_ids == IMAGE_TOKEN_INDEX, "video_mask": input_ids == VIDEO_TOKEN_INDEX}
    # NPU719: only the image placeholders are reset; the video ones stay negative ids
    input_ids[sample["image_mask"]] = 0
    sample["input_ids"] = input_ids
    sample.update(image_inputs)
    sample.update(video_inputs)
    return sample
