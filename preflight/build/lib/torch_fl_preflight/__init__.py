"""torch-fl-preflight: check a torch_fl wheel against an environment without importing anything from it."""

__version__ = "0.1.0"
