"""The workload the calibration tests record (``--record-workload calibration_workload:step``): calls of the stand-in
flag_gems' three operators below and above the size where its ``sinh`` becomes the faster one.  Copied next to
the calibration's process, which imports it by name."""

import torch


def step(device: str, dtype: torch.dtype) -> None:
    for n in (64, 256, 8192, 16384):
        x = torch.rand(n, device=device, dtype=dtype) + 0.5
        torch.sqrt(x)
        torch.tanh(x)
        torch.sinh(x)
