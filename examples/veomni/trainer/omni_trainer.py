# NPU710: planted example (see examples/README.md)
def unfreeze_audio_projector(self, model_type):
    if model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
        self.model.thinker.audio_tower.proj.requires_grad_(True)
