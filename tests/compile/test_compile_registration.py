"""How torch_fl registers flagos with dynamo and inductor: lazily, with no user step, in compile workers too."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch_fl
from compile_support import COMPILE_IN_THE_POOL, TORCH_OWN_WARNINGS
from torch_fl.compile import post_import

pytestmark = TORCH_OWN_WARNINGS


def _run(code: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 240) -> str:
    # Run from `cwd`, not the repository root, so that the installed torch_fl is imported, not its source tree.
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_import_torch_registers_flagos_without_importing_dynamo(tmp_path: Path) -> None:
    out = _run("""
        import sys, torch
        assert "torch._dynamo" not in sys.modules and "torch._inductor" not in sys.modules
        from torch._dynamo.device_interface import get_interface_for_device
        iface = get_interface_for_device("flagos")
        print(iface.__name__, get_interface_for_device("flagos:0") is iface)
    """, tmp_path)
    assert out.split() == ["FlagosInterface", "True"]


def test_device_interface_answers_for_the_device() -> None:
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("flagos")
    assert iface.is_available() and iface.device_count() == torch.flagos.device_count()
    assert iface.current_device() == torch.flagos.current_device()
    assert iface.get_device_properties("flagos:0").multi_processor_count >= 1
    s = iface.Stream()
    with iface.stream(s):
        assert iface.current_stream() == s
        assert iface.get_raw_stream(0) == s.native_handle != torch.flagos.default_stream().native_handle
    with pytest.raises(RuntimeError, match="invalid flagos device index 64"):
        iface.get_raw_stream(64)
    iface.synchronize()
    assert iface.Worker.current_device() == torch.flagos.current_device()


def test_inductor_finds_the_backend_through_the_device_module() -> None:
    from torch._inductor.codegen.common import get_scheduling_for_device, init_backend_registration
    from torch._inductor.codegen.cpp import CppScheduling

    init_backend_registration()
    assert get_scheduling_for_device("flagos") is CppScheduling
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        torch.flagos.NoSuchThing  # noqa: B018


@pytest.mark.compile
def test_cpp_wrapper_is_refused_with_the_fix() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x.sin() + 1, backend="inductor", options={"cpp_wrapper": True})
    with pytest.raises(Exception, match="C\\+\\+ wrapper does not support the flagos device"):
        compiled(torch.randn(4, device="flagos"))


def test_after_import_runs_once_the_module_has_executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "flagos_post_import_probe.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    post_import.after_import("flagos_post_import_probe", lambda m: seen.append(m.VALUE))
    assert seen == []
    module = __import__("flagos_post_import_probe")
    assert seen == [42]
    assert module.__loader__.get_source("flagos_post_import_probe") == "VALUE = 42\n"  # the original loader's
    post_import.after_import("flagos_post_import_probe", lambda m: seen.append(-m.VALUE))  # already imported
    assert seen == [42, -42]
    sys.modules.pop("flagos_post_import_probe")


@pytest.mark.compile
def test_compile_workers_compile_flagos_kernels(tmp_path: Path) -> None:
    # A fresh cache makes inductor compile the C++ kernels, and two threads with the subprocess start method
    # send them to its worker pool: interpreters that start from `import torch` like any other.
    out = _run(COMPILE_IN_THE_POOL + 'assert out.device.type == "flagos"\nprint("ok")\n', tmp_path, env={"TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_WORKER_START": "subprocess",
              "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    assert out.split()[-1] == "ok"
    assert list((tmp_path / "inductor").rglob("*.so")), "no kernel was compiled"


def test_device_module_hook_refuses_to_replace_another_getattr() -> None:
    from torch_fl.compile import install

    module = types.ModuleType("other_device")
    module.__getattr__ = lambda name: None  # type: ignore[attr-defined]
    with pytest.raises(ImportError, match="already defines __getattr__"):
        install(module)


@pytest.mark.compile
def test_inductor_caches_key_compiled_graphs_by_the_flagos_codegen(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # A graph compiled by another torch_fl (another platform, version or code generator) must not be reused.
    from torch._dynamo.utils import counters
    from torch_fl.compile import cache_identity

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def compile_once() -> str:
        torch._dynamo.reset()
        counters.clear()
        torch.compile(lambda x: x.tan() * 3)(torch.randn(8, 4, device="flagos"))
        (outcome,) = [k for k in counters["inductor"] if k.startswith("fxgraph_cache_")]
        return outcome

    assert compile_once() == "fxgraph_cache_miss"
    assert compile_once() == "fxgraph_cache_hit"
    assert cache_identity.identity().split()[2] == torch_fl.build_config.PLATFORM
    monkeypatch.setattr(cache_identity, "identity", lambda: "torch_fl another-version host 0")
    assert compile_once() == "fxgraph_cache_miss"


@pytest.mark.compile
def test_a_platform_without_kernel_backend_fails_with_the_fix(tmp_path: Path) -> None:
    # Stands for a vendor platform inductor cannot generate kernels for yet: the refusal must reach the user
    # as inductor's own error with the fix, not as "Unsupported device type" (inductor ignores RuntimeErrors
    # raised while it registers a device module's code generators).
    out = _run("""
        import torch, torch_fl
        # A recipe whose [device] compile is "none" (the build config's COMPILE).
        torch_fl._build_config.PLATFORM, torch_fl._build_config.COMPILE = "metax", "none"
        x = torch.randn(4, device="flagos")
        try:
            torch.compile(lambda t: t.sin() + 1)(x)
        except Exception as e:
            print(type(e).__module__, str(e).splitlines()[0])
        out = torch.compile(lambda t: t.sin() + 1, backend="aot_eager")(x)
        print("aot_eager", out.device.type)
    """, tmp_path, env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    first, second = out.strip().splitlines()[-2:]
    assert first.startswith("torch._inductor.exc ") and "no kernel backend for the flagos metax platform" in first
    assert "backend='aot_eager'" in first
    assert second == "aot_eager flagos"


def test_cuda_platform_wiring_that_needs_no_gpu(tmp_path: Path) -> None:
    # The cuda platform's planning switches (in a subprocess: they change inductor for the whole process) and
    # the wrapper's stream lookup, which must give the stream the user made current.  The Triton side runs in
    # tests/gpu/test_compile_cuda.py.
    out = _run("""
        import torch, torch_fl
        import torch._inductor.fx_passes.post_grad as post_grad
        from torch._inductor import utils
        from torch_fl.compile import cuda_codegen
        cuda_codegen.treat_as_cuda()
        print(utils.is_gpu("flagos"), utils.device_need_guard("flagos"), post_grad.get_gpu_type())
        wrapper = {"torch": torch}
        exec(cuda_codegen.CudaDeviceOpOverrides().import_get_raw_stream_as("get_raw_stream"), wrapper)
        side = torch.flagos.Stream()
        with torch.flagos.stream(side):
            print(wrapper["get_raw_stream"](0) == side.native_handle != torch.flagos.default_stream().native_handle)
    """, tmp_path, env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    assert out.split()[-4:] == ["True", "True", "flagos", "True"]


@pytest.mark.parametrize(("compile_backend", "granted"), [("triton", True), ("cpp", False)])
def test_online_softmax_is_granted_to_flagos_graphs_where_kernels_are_triton(tmp_path: Path, compile_backend: str,
                                                                            granted: bool) -> None:
    # Inductor's check for its online-softmax rewrite names "cuda" and "xpu"; torch_fl answers it for flagos graphs
    # as for cuda where flagos's kernels are Triton's (the cuda platform), and no on the host platform (C++
    # kernels).  In a subprocess: the build config is changed for the whole process.  That the rewritten kernels
    # appear in flagos graphs is tested on the GPU (tests/gpu/test_compile_cuda.py).
    out = _run(f"""
        import torch, torch_fl
        import torch._inductor.fx_passes.post_grad as post_grad
        from torch._inductor.pattern_matcher import Match
        torch_fl._build_config.COMPILE = {compile_backend!r}
        graph = torch.fx.Graph()
        x, y = graph.placeholder("x"), graph.placeholder("y")
        x.meta["val"], y.meta["val"] = torch.empty(4, 8, device="flagos"), torch.empty(4, 8, device="meta")
        print(post_grad.prepare_softmax_extra_check(Match(None, None, kwargs={{"x": x}})),
              post_grad.prepare_softmax_extra_check(Match(None, None, kwargs={{"x": y}})))
    """, tmp_path, env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    assert out.split()[-2:] == [str(granted), "False"]


@pytest.mark.parametrize(("compile_backend", "granted"), [("triton", True), ("cpp", False)])
def test_the_static_launcher_takes_flagos_kernels_where_they_are_triton(tmp_path: Path, compile_backend: str,
                                                                       granted: bool) -> None:
    # Inductor launches Triton kernels through its own C++ launcher only for the device types it names; torch_fl
    # presents a flagos kernel as CUDA's where flagos's kernels are Triton's.  Inductor's own check runs here:
    # with the C++ wrapper on it refuses every kernel, and the reason it gives shows whether it got past the
    # device type (a real kernel is launched on the GPU, by tests/gpu/test_compile_cuda.py's compiled graphs).
    out = _run(f"""
        import torch, torch_fl
        torch_fl._build_config.COMPILE = {compile_backend!r}
        from torch._inductor import config
        from torch._inductor.runtime import triton_heuristics as heuristics
        config.cpp_wrapper = True
        config.strict_static_triton_launcher = True
        for device_type in ("flagos", "cpu"):
            try:
                heuristics.StaticTritonCompileResult.can_statically_launch(
                    None, {{}}, {{"device_type": device_type, "device": 0}}, heuristics.HeuristicType.POINTWISE)
            except heuristics.CannotStaticallyLaunchKernel as refusal:
                print(str(refusal).replace(" ", "_"))
        print(heuristics.GPU_KERNEL_BIN_EXTS.get("flagos"))
    """, tmp_path, env={"PYTHONWARNINGS": "ignore::DeprecationWarning"})
    device_refusal = "Non-cuda/XPU/ROCm_device"
    expected = ["Cpp_wrapper_enabled", device_refusal, ".cubin"] if granted else [device_refusal, device_refusal, "None"]
    assert out.split()[-3:] == expected
