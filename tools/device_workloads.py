"""Units of real work on a device, shared by the tools that measure or train the device layer on them.

* `decode_unit(device)`: one token of batch-1 greedy decoding of a Hugging Face Llama made from a config in
  code (8 layers, hidden 64, dynamic cache), the loop of `benchmarks/device/gpu_decode.py`'s eager mode; needs
  `transformers`;
* `train_unit(device)`: one training step of a 2-layer `nn.TransformerEncoder` (d_model 64, dropout 0.1) with
  AdamW (`foreach=True`, as CUDA and flagos default to).
* `compiled_unit(device)`: forward and backward of the same encoder without dropout under `torch.compile`
  (inductor's default mode; the first call compiles): the compiled wrapper's buffer allocations and extern
  kernels, the work a compiled step adds around its generated kernels.

Each returns a callable that runs one unit; the models are made once, seeded, on `device`.  torch is imported
when a workload is made, so that the tools' command lines can name the workloads without it.
"""

from __future__ import annotations

from collections.abc import Callable


def decode_unit(device: str) -> Callable[[], None]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=256, max_position_embeddings=256,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config).eval().to(device)
    prompt = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        state = {"out": model(input_ids=prompt, use_cache=True)}

    def token() -> None:
        with torch.no_grad():
            out = state["out"]
            state["out"] = model(input_ids=out.logits[:, -1:].argmax(-1), past_key_values=out.past_key_values,
                                 use_cache=True)

    return token


def _encoder(device: str, dropout: float):  # noqa: ANN202 - an nn.Module; torch is imported late
    """The small pre-norm encoder of the training workloads (2 layers, d_model 64), seeded, on `device`."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=dropout, batch_first=True, norm_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(device)


def train_unit(device: str) -> Callable[[], None]:
    import torch

    model = _encoder(device, dropout=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    x = torch.randn(2, 16, 64).to(device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).float().square().mean().backward()
        optimizer.step()

    return step


def compiled_unit(device: str) -> Callable[[], None]:
    import torch

    model = torch.compile(_encoder(device, dropout=0.0))
    x = torch.randn(2, 16, 64).to(device)

    def step() -> None:
        model(x).sum().backward()

    return step


WORKLOADS = {"decode": decode_unit, "train": train_unit, "compiled": compiled_unit}
