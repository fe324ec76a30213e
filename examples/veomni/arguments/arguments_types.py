"""A small stand-in of VeOmni's argument dataclasses (NPU626 resolves `args.train.*` chains on them)."""

from dataclasses import dataclass, field


@dataclass
class MixedPrecisionConfig:
    enable: bool = True


@dataclass
class FSDPConfig:
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


@dataclass
class AcceleratorConfig:
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    ulysses_size: int = 1


@dataclass
class TrainingArguments:
    accelerator: AcceleratorConfig = field(default_factory=AcceleratorConfig)
    init_device: str = "cuda"
    micro_batch_size: int = 1


@dataclass
class ModelArguments:
    config_path: str = ""


@dataclass
class DataArguments:
    train_path: str = ""


@dataclass
class VeOmniArguments:
    model: ModelArguments = field(default_factory=ModelArguments)
    data: DataArguments = field(default_factory=DataArguments)
    train: TrainingArguments = field(default_factory=TrainingArguments)
