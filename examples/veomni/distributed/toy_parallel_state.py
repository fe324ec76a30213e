# NPU627: the FSDP group accessor hands out the data-parallel group (FSDP shards over the dp x sp ranks)
class ToyParallelState:
    def __init__(self, device_mesh):
        self.device_mesh = device_mesh

    @property
    def dp_group(self):
        return self.device_mesh.get_group("dp")

    @property
    def fsdp_group(self):
        return self.device_mesh.get_group("dp")
