"""An Ascend scan kernel (stand-in)."""


def scan_npu(x):
    return x.cumsum(-1)
