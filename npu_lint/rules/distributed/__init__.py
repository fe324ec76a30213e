"""NPU6xx: distributed code. Collectives that HCCL does not support, and raw process-group queries in model
code where VeOmni's parallel state (``veomni.distributed.parallel_state.get_parallel_state()``) has the value."""
