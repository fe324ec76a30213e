# NPU729: planted example (see examples/README.md)
def freeze_towers(self, model_config, freeze_vit):
    if model_config.model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
        self.model.disable_talker()
    is_omni = model_config.model_type == "qwen2_5_omni"  # NPU729: Qwen3-Omni-MoE takes the flat-`visual` path
    visual = self.model.thinker.visual if is_omni else self.model.visual
    if freeze_vit:
        visual.requires_grad_(False)
    if model_config.model_type not in ("qwen2_5_omni", "qwen3_omni_moe"):
        self.chat_template = None
