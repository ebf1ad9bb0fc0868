"""`hccl-bench replay`: collectives read from real traces (formats.py) and timed on a topology (timing.py)."""
