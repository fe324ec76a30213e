def forward(self, input_ids, labels=None, **kwargs):
    hidden_states = self.model(input_ids, **kwargs).last_hidden_state
    loss, logits = self.loss_function(
        hidden_states=hidden_states.detach(), weights=self.lm_head.weight, labels=labels
    )
    return loss, logits
