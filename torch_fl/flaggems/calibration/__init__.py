"""``python -m torch_fl.flaggems calibrate``: FlagGems' kernels against the kernel device's own, per op, dtype and size.

One module per job, in the order the data flows:

* ``cases``: the calls to measure: each call of an operator FlagGems offers that PyTorch's OpInfo samples
  (forward and backward) and a recorded workload step make on the kernel device, captured with a
  ``TorchDispatchMode``;
* ``measure``: one call on both sides: correctness (PyTorch's tolerances per dtype, or FlagGems' own) and
  the median time of each side;
* ``state``: results appended to a JSONL file as each case finishes (a rerun skips what is done; shards
  merge);
* ``decide``: per op, dtype and size bucket: flaggems where it is correct and faster; the route table and
  its evidence;
* ``command``: the command line (argparse), its progress bar and summary table (rich).
"""
