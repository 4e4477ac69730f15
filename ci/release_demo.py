"""The release demonstration: `import torch` alone, then real work on the flagos device.

Run by ci/release-demo.sh in a fresh stock torch+cpu environment with only the
built wheel added; exits non-zero when the device does not compute what the CPU does.
"""

import sys

import torch


def main() -> int:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    on_device = x.to("flagos")
    got = ((on_device * 2 + 1).sum(dim=1)).cpu()
    want = (x * 2 + 1).sum(dim=1)
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2)
    expected = layer(x)
    layer = layer.to("flagos")
    out = layer(on_device).cpu()
    ok = torch.equal(got, want) and torch.allclose(out, expected, atol=1e-5)
    print(f"torch {torch.__version__}, device flagos: elementwise+sum {got.tolist()}, linear ok={ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
