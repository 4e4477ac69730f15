"""torch_fl_packaging: the release pipeline of torch_fl (``torch-fl-build``).

Kept import-light on purpose: ``build_metadata`` and ``recipe`` run inside the
PEP 517 backend with the standard library and ``packaging`` only.
"""

__version__ = "0.1.0"
