"""What several test areas share: the repository root (`paths`), tools a test needs and how a
missing one is treated (`tools`), C fixtures compiled into real ELF files and read back with an
independent reader (`elf`), wheels with a correct RECORD (`wheels`).

Imported as `support` (pytest puts `tests/` on sys.path for tests/conftest.py, a rootdir
conftest in a folder without `__init__.py`); never import helpers from a conftest.
"""
