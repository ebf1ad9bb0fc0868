"""Published nccl-tests / rccl-tests measurements and the files that map them to presets (README.md).

Installed as hcclsim.validation so `hccl-bench validate` finds them from a non-editable install.
"""
