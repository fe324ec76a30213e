"""A toy unified understanding/generation wrapper (demo)."""


class ToyUnified:
    def fill(self, inputs_embeds, understand_mask, generate_mask, understand_rows, generate_rows):
        understand_rows = understand_rows[: understand_mask.sum()]
        # NPU716: the understanding rows are placed at the generation mask
        mask = generate_mask.unsqueeze(-1).expand_as(inputs_embeds)
        inputs_embeds = inputs_embeds.masked_scatter(mask, understand_rows)
        generate_rows = generate_rows[: generate_mask.sum()]
        mask = generate_mask.unsqueeze(-1).expand_as(inputs_embeds)
        return inputs_embeds.masked_scatter(mask, generate_rows)
