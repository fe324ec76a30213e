def training_step(self, latents, t):
    noise = torch.randn_like(latents)
    noisy = (1 - t) * latents + t * noise
    pred = self.transformer(noisy, t)
    target = latents - noise
    return F.mse_loss(pred, target)
