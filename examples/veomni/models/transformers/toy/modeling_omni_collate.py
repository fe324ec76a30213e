# NPU724: an audio placeholder mask cut across sequence-parallel ranks, unlike the collator's image/video masks
class ToyOmniForConditionalGeneration:
    def get_extra_collate_infos(self):
        return {
            "audio_feature_lengths": (0, False, None, None),
            "input_features": (0, True, 0, 1),
            "audio_mask": (-1, True, 0, 1),
        }
