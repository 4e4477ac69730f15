"""PyTorch's OpInfo database on flagos (cuda platform) against native CUDA and the CPU.

The reference interpreter (reference.py) computes native CUDA and the CPU on the very sample values
flagos gets (opinfo_runner.export_samples).  Where native CUDA equals the CPU within PyTorch's
cross-device tolerance (1e-3, as test_ops.py's test_compare_cpu), flagos must too; where it does not
(a kernel's documented difference), the case says so and is skipped.  Where the reference's torch is
another release than this one (the cuda wheel on stock torch+cpu, checked against the machine's own
CUDA torch), flagos is held to this torch's CPU: releases differ in autograd formulas (trace's
gradient of a tall matrix) and in how the CPU draws float16 and bfloat16 random numbers, which
would otherwise read as flagos's errors.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("expecttest", reason="PyTorch's OpInfo database needs expecttest")

OPINFO = Path(__file__).resolve().parents[1] / "opinfo"
sys.path.insert(0, str(OPINFO))

import reference  # noqa: E402  (tests/gpu)
from expected_failures import EXPECTED_ERRORS  # noqa: E402
from opinfo_runner import CROSS_DEVICE, CaseResult, case_ids, compare, native_results, op_id, parse_case, run_case  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.opinfo]


@pytest.fixture(scope="module")
def same_release() -> bool:
    """Whether the reference interpreter's torch is this torch's release (local builds such as +cpu aside)."""
    import torch

    return reference.probe(reference.interpreter())["torch"].split("+")[0] == torch.__version__.split("+")[0]


@pytest.fixture(scope="module")
def native(request: pytest.FixtureRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    # Only the cases this session runs (-k, --deselect, a shard), so a slice of the tier costs a slice of the
    # reference interpreter's time too.
    selected = [item.callspec.params["case_id"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    return native_results(selected)


@pytest.mark.parametrize("case_id", case_ids())
def test_flagos_passes_where_native_cuda_passes(case_id: str, native: tuple[dict[str, Any], dict[str, Any]],
                                                same_release: bool) -> None:
    payload, results = native
    if case_id not in payload:
        pytest.skip("its sample inputs do not load with weights_only, so they cannot reach the reference")
    if case_id not in results:
        pytest.skip("the reference interpreter's OpInfo database has no such case")
    cuda = CaseResult.from_plain(results[case_id]["cuda"])
    cpu = CaseResult.from_plain(results[case_id]["cpu"])
    try:
        compare(cuda, cpu, **CROSS_DEVICE)
    except AssertionError as e:
        pytest.skip(f"native CUDA differs from the CPU here too: {str(e).splitlines()[0][:200]}")
    if not same_release:
        cpu = run_case(case_id, "cpu", payload[case_id])
    flagos = run_case(case_id, "flagos", payload[case_id])
    rule = EXPECTED_ERRORS.get(op_id(parse_case(case_id)[0]))
    if rule is not None:  # a documented rule (sparse layouts stay on the CPU): the one-line error, not a value
        for k, sample in enumerate(cpu.samples):
            if sample.forward is not None:
                assert rule[0] in (flagos.samples[k].error or ""), f"sample {k}: {flagos.samples[k].error!r}"
        return
    compare(flagos, cpu, **CROSS_DEVICE)
