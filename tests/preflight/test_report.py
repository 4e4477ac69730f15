"""The text report: grouped by outcome, one summary line, readable C++ names."""

from __future__ import annotations


from torch_fl_preflight.report import Finding, Status, SubjectReport, _readable_symbols, exit_code, to_text

from support.tools import require_tool


def test_grouped_by_outcome_then_one_summary_line() -> None:
    r = SubjectReport("w.whl", "host")
    r.ok("wheel.record", "fine")
    r.fail("elf.needed", "1 missing", "install it", ("a.so: libx.so not found",))
    r.warn("manifest.provenance", "not recorded", "pin")
    r.skip("host.sdk", "unknown")
    text = to_text([r]).splitlines()
    ids = [ln.split()[1].rstrip(":") for ln in text[1:] if ln.startswith("  ") and not ln.startswith("     ")]
    assert ids == ["elf.needed", "manifest.provenance", "wheel.record"]  # fail, warn, pass; skip hidden
    assert text[-1] == "FAILED: 4 checks; 1 failed, 1 warned, 1 passed, 1 skipped"
    assert exit_code([r]) == 1
    assert "host.sdk" in to_text([r], verbose=True)


def test_details_are_capped_in_text() -> None:
    r = SubjectReport("w.whl")
    r.add(Finding("elf.symbols", Status.FAIL, "many", "fix", tuple(f"a.so: s{i}" for i in range(25))))
    text = to_text([r])
    assert "a.so: s9" in text and "a.so: s10" not in text and "and 15 more" in text


def test_cxx_names_are_demangled_for_people() -> None:
    require_tool("c++filt", "binutils")
    out = _readable_symbols(("lib.so: _ZN2at6native8choleskyERKNS_6TensorEb", "lib.so: cuInit"))
    assert out[0] == ("lib.so: at::native::cholesky(at::Tensor const&, bool)  "
                      "[_ZN2at6native8choleskyERKNS_6TensorEb]")
    assert out[1] == "lib.so: cuInit"
