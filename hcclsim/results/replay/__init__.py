"""`hccl-bench replay`: collectives read from real traces (formats.py, chakra_pb.py for protobuf) and timed on
a topology, each trace alone (timing.py) or several as jobs sharing it (jobs.py)."""
