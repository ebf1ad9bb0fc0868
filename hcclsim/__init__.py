"""hccl-bench: collective-communication benchmarks on a simulator (see DESIGN.md)."""

__version__ = "0.1.0"
