def lm_head(self, hidden_states, labels=None):
    pred = self.gen_head(hidden_states)
    mse_loss = F.mse_loss(pred, labels)
    embeds, kl_loss = self.proj_head(pred)
    diff_loss = self.diffusion_loss(embeds)
    loss = mse_loss + diff_loss
    return loss
