"""The training loops of the library tier, one per library, each runnable on any device.

Every loop builds its model on the CPU from a fixed seed (or from ``state``, the weights another interpreter
made), trains it a few steps on data made by a CPU generator, and returns plain data: the loss of each step,
the final weights on the CPU, and what the loop saw of autocast.  The tests run a loop on ``flagos`` and on
the reference device (the CPU here; native CUDA in tests/gpu/test_libraries_cuda.py, through the reference
interpreter, which imports this module without torch_fl) and compare the two.

``python tests/libraries/library_cases.py`` prints the tier's table for docs/libraries.md: each loop on
flagos against the CPU, with the largest difference of a loss and of a final weight; with
``--reference-python PY`` (the cuda platform) against native CUDA in that interpreter.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

SEED = 0
CLASSES = 10
BATCH = 4
VISION_STEPS = 3
STEPS = 4

Run = dict[str, Any]  # {"losses": [float], "weights": {name: Tensor}, "autocast": bool}


def _cpu_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu").clone() for k, v in module.state_dict().items()}


class _AutocastProbe:
    """Records whether autocast for ``device_type`` is on while a submodule runs (inside the loop's forward)."""

    def __init__(self, module: torch.nn.Module, device_type: str) -> None:
        self.seen: list[bool] = []
        module.register_forward_hook(lambda *_: self.seen.append(torch.is_autocast_enabled(device_type)))

    @property
    def active(self) -> bool:
        return bool(self.seen) and all(self.seen)


# --- vision: ResNet-18 and ViT with torch.autocast(bfloat16) and torch.amp.GradScaler --------------------------


def _unavailable(module: str) -> str | None:
    """Why ``module`` cannot be imported here, or None.  PyPI's Linux torchvision is built against CUDA torch
    (its _C needs libtorch_cuda.so), so on a CPU torch ``import torchvision`` raises RuntimeError, not
    ImportError; timm imports torchvision."""
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any failure to import means "not here", with its reason
        return f"{module} is not importable here: {type(e).__name__}: {e}".splitlines()[0]
    return None


def _hf_resnet18() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    # ResNet-18: basic blocks, two per stage, 64..512 channels.
    config = ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=[2, 2, 2, 2],
                          layer_type="basic", num_labels=CLASSES)
    return ResNetForImageClassification(config)


def _hf_vit() -> torch.nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, num_labels=CLASSES)
    return ViTForImageClassification(config)


def _torchvision_resnet18() -> torch.nn.Module:
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=CLASSES)


def _timm_vit() -> torch.nn.Module:
    import timm

    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                             num_classes=CLASSES)


# name: (library, model, builder, module whose import it needs, submodule the autocast probe hooks)
VISION: dict[str, tuple[str, str, Callable[[], torch.nn.Module], str, str]] = {
    "hf_resnet18": ("transformers", "ResNet-18 (ResNetForImageClassification)", _hf_resnet18, "transformers",
                    "resnet.embedder"),
    "hf_vit": ("transformers", "ViT, 2 layers, width 64 (ViTForImageClassification)", _hf_vit, "transformers",
               "vit.embeddings"),
    "torchvision_resnet18": ("torchvision", "resnet18", _torchvision_resnet18, "torchvision", "conv1"),
    "timm_vit": ("timm", "vit_tiny_patch16_224, 2 blocks, 32 px", _timm_vit, "timm", "patch_embed"),
}


def vision_unavailable(name: str) -> str | None:
    return _unavailable(VISION[name][3])


def vision_initial_state(name: str) -> dict[str, torch.Tensor]:
    torch.manual_seed(SEED)
    return _cpu_state(VISION[name][2]())


def run_vision(name: str, device: str, state: dict[str, torch.Tensor] | None = None) -> Run:
    """VISION_STEPS SGD steps of model ``name`` on ``device`` under bfloat16 autocast with a GradScaler."""
    _, _, build, _, probed = VISION[name]
    torch.manual_seed(SEED)
    model = build()
    if state is not None:
        model.load_state_dict(state)
    model = model.to(device).train()
    probe = _AutocastProbe(model.get_submodule(probed), device)
    gen = torch.Generator().manual_seed(SEED + 1)
    images = torch.randn(VISION_STEPS, BATCH, 3, 32, 32, generator=gen)
    labels = torch.randint(0, CLASSES, (VISION_STEPS, BATCH), generator=gen)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler(device)
    assert scaler.is_enabled(), f"GradScaler({device!r}) is disabled"
    losses = []
    for step in range(VISION_STEPS):
        x, y = images[step].to(device), labels[step].to(device)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(x)
            logits = out if isinstance(out, torch.Tensor) else out.logits
        assert logits.dtype == torch.bfloat16, f"autocast left the logits in {logits.dtype}"
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return {"losses": losses, "weights": _cpu_state(model), "autocast": probe.active}


# --- Hugging Face accelerate and Trainer ----------------------------------------------------------------------


@contextlib.contextmanager
def accelerate_device(device: str) -> Iterator[None]:
    """accelerate picks its device from a fixed list of device types (PartialState.default_device) and never asks
    torch.accelerator; ACCELERATE_TORCH_DEVICE names it instead.  Its state is process-wide (one shared dict),
    so each run starts and ends with a fresh one."""
    from accelerate.state import AcceleratorState

    saved = {k: os.environ.get(k) for k in ("ACCELERATE_TORCH_DEVICE", "ACCELERATE_MIXED_PRECISION")}
    AcceleratorState._reset_state(reset_partial_state=True)
    os.environ["ACCELERATE_TORCH_DEVICE"] = device
    try:
        yield
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 2))


def _mlp_data() -> torch.utils.data.TensorDataset:
    gen = torch.Generator().manual_seed(SEED + 1)
    return torch.utils.data.TensorDataset(torch.randn(STEPS * 8, 8, generator=gen),
                                          torch.randint(0, 2, (STEPS * 8,), generator=gen))


def mlp_initial_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(SEED)
    return _cpu_state(_mlp())


def run_accelerate(device: str, state: dict[str, torch.Tensor] | None = None) -> Run:
    """accelerate's Accelerator(mixed_precision="bf16") on ``device``: prepare, autocast, backward, AdamW."""
    from accelerate import Accelerator

    torch.manual_seed(SEED)
    model = _mlp()
    if state is not None:
        model.load_state_dict(state)
    probe = _AutocastProbe(model[0], device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(_mlp_data(), batch_size=8)
    with accelerate_device(device):
        accelerator = Accelerator(mixed_precision="bf16")
        assert accelerator.device.type == device, f"Accelerator chose {accelerator.device}"
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        losses = []
        for x, y in loader:
            assert x.device.type == device, f"the prepared DataLoader gave a batch on {x.device}"
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        weights = _cpu_state(accelerator.unwrap_model(model))
    return {"losses": losses, "weights": weights, "autocast": probe.active}


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def gpt2_initial_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(SEED)
    return _cpu_state(_gpt2())


def run_trainer(device: str, state: dict[str, torch.Tensor] | None = None) -> Run:
    """Hugging Face Trainer, STEPS steps of a 2-layer GPT-2 in bfloat16 mixed precision on ``device``.

    TrainingArguments(bf16=True) is refused on any device transformers does not name ("Your setup doesn't
    support bf16/gpu"); ACCELERATE_MIXED_PRECISION=bf16 asks accelerate, which runs Trainer's steps, for the
    same autocast."""
    from transformers import PrinterCallback, Trainer, TrainingArguments

    torch.manual_seed(SEED)
    model = _gpt2()
    if state is not None:
        model.load_state_dict(state)
    probe = _AutocastProbe(model.transformer.h[0].attn, device)
    gen = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, 64, (STEPS * BATCH, 16), generator=gen)
    dataset = [{"input_ids": row, "labels": row} for row in ids]
    with accelerate_device(device), tempfile.TemporaryDirectory(prefix="flagos-trainer-") as out:
        os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
        args = TrainingArguments(output_dir=out, max_steps=STEPS, per_device_train_batch_size=BATCH,
                                 learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], seed=SEED,
                                 use_cpu=device == "cpu", disable_tqdm=True, dataloader_num_workers=0)
        assert args.device.type == device, f"TrainingArguments chose {args.device}"
        trainer = Trainer(model=model, args=args, train_dataset=dataset)
        trainer.remove_callback(PrinterCallback)  # the losses are read from log_history, not printed
        trainer.train()
        assert next(trainer.model.parameters()).device.type == device
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        weights = _cpu_state(trainer.model)
    return {"losses": losses, "weights": weights, "autocast": probe.active}


# --- PyTorch Lightning ------------------------------------------------------------------------------------------


def run_lightning(device: str, state: dict[str, torch.Tensor] | None = None) -> Run:
    """Lightning's Trainer.fit, STEPS AdamW steps in bf16-mixed precision, on ``device`` (flagos through
    lightning_flagos.FlagosAccelerator)."""
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _mlp()
            self.losses: list[float] = []

        def training_step(self, batch: list[torch.Tensor], _: int) -> torch.Tensor:
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x).float(), y)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    torch.manual_seed(SEED)
    module = Module()
    if state is not None:
        module.net.load_state_dict(state)
    probe = _AutocastProbe(module.net[0], device)
    loader = torch.utils.data.DataLoader(_mlp_data(), batch_size=8)
    if device == "flagos":
        from lightning_flagos import flagos_trainer_arguments

        chosen: dict[str, Any] = flagos_trainer_arguments(precision="bf16-mixed")
    else:
        chosen = {"accelerator": device, "precision": "bf16-mixed"}
    trainer = pl.Trainer(devices=1, max_steps=STEPS, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, **chosen)
    trainer.fit(module, loader)
    assert trainer.strategy.root_device.type == device, f"Lightning trained on {trainer.strategy.root_device}"
    return {"losses": module.losses, "weights": _cpu_state(module.net), "autocast": probe.active}


# --- comparison -------------------------------------------------------------------------------------------------


def largest_differences(actual: Run, expected: Run) -> tuple[float, float]:
    """The largest absolute difference of a step's loss and of a final weight (floating-point entries)."""
    assert len(actual["losses"]) == len(expected["losses"]), "the runs took different numbers of steps"
    loss = max(abs(a - e) for a, e in zip(actual["losses"], expected["losses"], strict=True))
    assert actual["weights"].keys() == expected["weights"].keys(), "the runs' weights have different names"
    weight = max(((a.double() - e.double()).abs().max().item() if a.numel() else 0.0)
                 for n, e in expected["weights"].items() if e.is_floating_point()
                 for a in [actual["weights"][n]])
    return loss, weight


def compare(actual: Run, expected: Run, *, rtol: float = 1e-2, atol: float = 5e-3) -> None:
    """Losses and every final weight within bfloat16 autocast's tolerance; autocast on for both devices.

    The CPU's autocast policy is its own and flagos's is CUDA's (docs/semantics.md), so bfloat16 rounding lands
    on different ops; AdamW's normalised step turns a near-zero gradient's rounding into as much as the learning
    rate per step (1e-3 for 4 steps in run_trainer), hence ``atol``."""
    assert actual["autocast"] and expected["autocast"], "autocast was not on for the run's device"
    torch.testing.assert_close(torch.tensor(actual["losses"]), torch.tensor(expected["losses"]), rtol=rtol,
                               atol=atol, msg=lambda m: f"losses: {m}")
    for name, e in expected["weights"].items():
        torch.testing.assert_close(actual["weights"][name], e, rtol=rtol, atol=atol,
                                   msg=lambda m, name=name: f"final {name}: {m}")


def check(name: str, actual: Run, expected: Run) -> None:
    """compare() the two runs, then print their largest differences (the tier's table reads them)."""
    compare(actual, expected)
    loss, weight = largest_differences(actual, expected)
    print(f"{name}: largest loss difference {loss:.3g}, largest weight difference {weight:.3g}")


# name: (library, model, steps, run)
LOOPS: dict[str, tuple[str, str, int, Callable[..., Run]]] = {
    **{name: (lib, model, VISION_STEPS, lambda device, state=None, name=name: run_vision(name, device, state))
       for name, (lib, model, _, _, _) in VISION.items()},
    "accelerate": ("accelerate", "MLP 8-32-2, Accelerator(mixed_precision=\"bf16\")", STEPS, run_accelerate),
    "trainer": ("transformers", "GPT-2, 2 layers, width 32, Trainer (ACCELERATE_MIXED_PRECISION=bf16)", STEPS, run_trainer),
    "lightning": ("lightning", "MLP 8-32-2, Trainer.fit (bf16-mixed)", STEPS, run_lightning),
}
NEEDS = {"accelerate": "accelerate", "trainer": "accelerate", "lightning": "lightning",
         **{name: spec[3] for name, spec in VISION.items()}}


# name: how to make the loop's initial weights on the CPU, and the loop's function (with its leading arguments)
# for the reference interpreter, which runs it as library_cases:function
NATIVE: dict[str, tuple[Callable[[], dict[str, torch.Tensor]], str, tuple[str, ...]]] = {
    **{name: (lambda name=name: vision_initial_state(name), "run_vision", (name,)) for name in VISION},
    "accelerate": (mlp_initial_state, "run_accelerate", ()),
    "trainer": (gpt2_initial_state, "run_trainer", ()),
    "lightning": (mlp_initial_state, "run_lightning", ()),
}


def table(reference_python: str | None = None) -> str:
    """The tier's table: each loop on flagos against the same loop on the CPU or, with ``reference_python`` (an
    interpreter whose torch is a CUDA build), on native CUDA there, from the same initial weights."""
    import platform

    if reference_python is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
        import reference
    against = "native CUDA (the reference interpreter)" if reference_python else "the CPU"
    lines = [f"torch {torch.__version__}, {platform.machine()}; flagos against {against}, same seed and data.", "",
             "| library | model | steps | largest loss difference | largest weight difference |",
             "|---|---|---|---|---|"]
    for name, (library, model, steps, run) in LOOPS.items():
        why = _unavailable(NEEDS[name])
        if reference_python is not None and name == "trainer" and torch.cuda.is_available():
            why = "with a CUDA build of torch in the process, TrainingArguments selects cuda (docs/libraries.md)"
        if why:
            lines.append(f"| {library} | {model} | {steps} | not run: {why} | |")
            continue
        if reference_python is None:
            actual, expected = run("flagos"), run("cpu")
        else:
            make_state, function, leading = NATIVE[name]
            state = make_state()
            actual = run("flagos", state)
            expected = reference.call(f"library_cases:{function}", *leading, "cuda", state, python=reference_python,
                                      paths=[Path(__file__).resolve().parent])
        compare(actual, expected)
        loss, weight = largest_differences(actual, expected)
        lines.append(f"| {library} | {model} | {steps} | {loss:.3g} | {weight:.3g} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    parser = argparse.ArgumentParser(description="The library tier's table for docs/libraries.md.")
    parser.add_argument("--reference-python", help="against native CUDA in this interpreter (its torch a CUDA build)")
    print(table(parser.parse_args().reference_python))
