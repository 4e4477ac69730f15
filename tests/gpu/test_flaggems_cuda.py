"""Provider flaggems on the GPU: with FLAGOS_USE_FLAGGEMS=1 (the shipped route table calibrated for this
flag_gems, Triton and GPU where there is one, else every operator FlagGems offers, unverified),
the suite's operator cases, their gradients, the small training loop and a small transformer's training step
match native CUDA (the reference interpreter, reference.py) within FlagGems' documented tolerances
(``flag_gems.testing``: rtol per dtype, atol 1e-4 per reduced element).  Each failure names the ops FlagGems
served in that computation and the ones it refused.  Skips without a GPU, and without flag_gems
(``pip install torch_fl[flaggems]``)."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from gpu_cases import BACKWARD_CASES, backward_grads, case_id
from op_cases import Case, dtype_params, flat

import reference

pytestmark = pytest.mark.gpu

_LOG = re.compile(r"^\[torch_fl\] aten::(\S+) -> (\S+)(.*)$")


@pytest.fixture(scope="module")
def flaggems_routing() -> Iterator[dict[str, Any]]:
    """Every op FlagGems offers routed to it, with the dispatch log on; the suite's routing restored after."""
    if importlib.util.find_spec("flag_gems") is None:
        pytest.skip("needs flag_gems: pip install torch_fl[flaggems]")
    import torch_fl
    from torch_fl import flaggems, routing

    routing.install(routing.load("cuda", environ={**os.environ, "FLAGOS_USE_FLAGGEMS": "1"}), log_dispatch=True)
    try:
        status = flaggems.status()
        assert status["available"], status.get("reason")
        if not status["table"].get("calibrated"):  # no verified table here: every op FlagGems offers goes to it
            assert torch_fl.is_flaggems_enabled() and torch_fl.route("add.Tensor").effective == "flaggems"
        yield status
    finally:
        routing.install(routing.load("cuda"), log_dispatch=os.environ.get("FLAGOS_LOG_DISPATCH") == "1")


def served(stderr: str) -> str:
    """What the dispatch log says FlagGems did: the ops it ran, and the ones it refused (they ran on cuda)."""
    ran, refused = set(), set()
    for line in stderr.splitlines():
        m = _LOG.match(line)
        if m and m.group(2) == "flaggems":
            ran.add(m.group(1))
        elif m and "flaggems refused" in m.group(3):
            refused.add(m.group(1))
    return f"FlagGems ran {sorted(ran)}, refused {sorted(refused)}"


def tolerance(dtype: torch.dtype, case_tol: dict[str, float], reduce_dim: int = 1) -> dict[str, float]:
    """FlagGems' own (flag_gems.testing.assert_close), or the case's where that is wider."""
    from flag_gems.testing import RESOLUTION

    if not (dtype.is_floating_point or dtype.is_complex):
        return {"rtol": 0.0, "atol": 0.0}
    return {"rtol": max(RESOLUTION[dtype], case_tol.get("rtol", 0.0)),
            "atol": max(1e-4 * reduce_dim, case_tol.get("atol", 0.0))}


@pytest.mark.parametrize(("case", "dtype"), dtype_params())
def test_forward_matches_native_cuda(case: Case, dtype: torch.dtype, inputs: dict, native: dict,
                                     flaggems_routing: dict, capfd: pytest.CaptureFixture[str]) -> None:
    key = case_id(case, dtype)
    actual = flat(case.fn(*[t.to("flagos") for t in inputs["forward"][key]]))
    torch.flagos.synchronize()
    log = served(capfd.readouterr().err)
    expected = native["forward"][key]
    assert len(actual) == len(expected), log
    for a, e in zip(actual, expected):
        assert a.device.type == "flagos" and a.dtype == e.dtype and a.shape == e.shape, log
        torch.testing.assert_close(a.cpu(), e, **tolerance(e.dtype, case.tol), msg=lambda m: f"{m}\n{log}")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in BACKWARD_CASES])
def test_backward_matches_native_cuda(case: Case, inputs: dict, native: dict, flaggems_routing: dict,
                                      capfd: pytest.CaptureFixture[str]) -> None:
    grads = backward_grads(case.name, inputs["backward"][case.name], "flagos")
    log = served(capfd.readouterr().err)
    for a, e in zip(grads, native["backward"][case.name]):
        assert (a is None) == (e is None), log
        if e is not None:
            torch.testing.assert_close(a, e, **tolerance(e.dtype, case.tol), msg=lambda m: f"{m}\n{log}")


@pytest.fixture(scope="module")
def transformer() -> dict[str, object]:
    from flaggems_cases import transformer_inputs

    return transformer_inputs()


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_transformer_training_step_matches_native_cuda(autocast: bool, transformer: dict, flaggems_routing: dict,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    from flaggems_cases import D_MODEL, transformer_step

    expected = reference.call("flaggems_cases:transformer_step", transformer, "cuda", autocast)
    actual = transformer_step(transformer, "flagos", autocast)
    log = served(capfd.readouterr().err)
    if not flaggems_routing["table"].get("calibrated"):
        assert "FlagGems ran []" not in log, log  # routed unverified, the step must exercise FlagGems
    # Matrix products reduce over d_model (FlagGems' reduce_dim); bf16 autocast takes bf16's resolution.
    tol = tolerance(torch.bfloat16 if autocast else torch.float32, {}, reduce_dim=D_MODEL)
    for k, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, **tol, msg=lambda m, k=k: f"result {k} (0: loss, then grads, params): "
                                                                f"{m}\n{log}")
