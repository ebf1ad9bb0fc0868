"""The studies `hccl-bench run NAME` runs: one TOML file each (format: docs/studies/README.md).

Installed as hcclsim.scenarios so a non-editable install finds them by name.
"""
