"""torch-fl-publish: upload release wheels to an index lane exactly once, verified by sha256.

The flow, one module each: ``wheels`` (inspect the local files) -> ``release``
(tag and preflight gate) -> ``index`` (read what the index already has) ->
``upload`` (legacy upload protocol, retried) -> ``verify`` (re-read the index)
-> ``report`` (table or JSON).
"""

__version__ = "0.1.0"
