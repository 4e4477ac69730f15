"""Hugging Face ``transformers`` models built from small configs in code, and one training run of each.

``run_model(name, device)`` builds the model on the CPU from a fixed seed (so every
device starts from the same weights), moves it to ``device`` and runs what a
training script does: forward with labels, the loss, backward, two AdamW steps,
then greedy ``generate``.  It returns everything it computed as CPU tensors, so
that a device's run can be held to a reference device's (CPU on the host
platform, native CUDA on the GPU, possibly in another interpreter: the result
pickles with ``torch.save``).  No downloads: configs and inputs are made here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

SEED = 20261201
VOCAB = 96
BATCH, SEQ = 2, 12


def _common(**extra: Any) -> dict[str, Any]:
    return {"vocab_size": VOCAB, **extra}


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(**_common(n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                               attn_pdrop=0.0, tie_word_embeddings=True))
    return GPT2LMHeadModel(cfg)


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**_common(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False))
    return LlamaForCausalLM(cfg)


def _qwen3() -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**_common(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                                tie_word_embeddings=True))
    return Qwen3ForCausalLM(cfg)


def _bert() -> Any:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(**_common(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0))
    return BertForMaskedLM(cfg)


def _t5() -> Any:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(**_common(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                             dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    return T5ForConditionalGeneration(cfg)


def _bart() -> Any:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(**_common(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                               max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=1,
                               decoder_start_token_id=1, forced_eos_token_id=None))
    return BartForConditionalGeneration(cfg)


def _mistral() -> Any:
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(**_common(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=64, sliding_window=8))
    return MistralForCausalLM(cfg)


def _phi() -> Any:
    from transformers import PhiConfig, PhiForCausalLM

    cfg = PhiConfig(**_common(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              max_position_embeddings=64, partial_rotary_factor=0.5))
    return PhiForCausalLM(cfg)


def _gpt_neox() -> Any:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = GPTNeoXConfig(**_common(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  max_position_embeddings=64, rotary_pct=0.5))
    return GPTNeoXForCausalLM(cfg)


def _falcon() -> Any:
    from transformers import FalconConfig, FalconForCausalLM

    cfg = FalconConfig(**_common(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, alibi=True))
    return FalconForCausalLM(cfg)


def _mamba() -> Any:
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(**_common(hidden_size=32, num_hidden_layers=2, state_size=8, expand=2))
    return MambaForCausalLM(cfg)


def _distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    cfg = DistilBertConfig(**_common(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64,
                                     dropout=0.0, attention_dropout=0.0))
    return DistilBertForMaskedLM(cfg)


def _deberta_v2() -> Any:
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM

    cfg = DebertaV2Config(**_common(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    max_position_embeddings=64, relative_attention=True, position_buckets=8,
                                    pos_att_type=["p2c", "c2p"]))
    return DebertaV2ForMaskedLM(cfg)


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[[], Any]
    seq2seq: bool = False
    generates: bool = True
    # (model) -> the pairs of attribute paths that must stay one Parameter after .to(device)
    tied: tuple[tuple[str, str], ...] = ()


MODELS: dict[str, ModelSpec] = {
    "gpt2": ModelSpec(_gpt2, tied=(("lm_head.weight", "transformer.wte.weight"),)),
    "llama": ModelSpec(_llama),
    "qwen3": ModelSpec(_qwen3, tied=(("lm_head.weight", "model.embed_tokens.weight"),)),
    "bert": ModelSpec(_bert, generates=False, tied=(("cls.predictions.decoder.weight",
                                                      "bert.embeddings.word_embeddings.weight"),)),
    "t5": ModelSpec(_t5, seq2seq=True),
    # Further architectures: BART's learned offset positions, sliding-window attention, partial rotary
    # embeddings, ALiBi, a selective state-space scan (Mamba's reference implementation), disentangled
    # relative attention.
    "bart": ModelSpec(_bart, seq2seq=True),
    "mistral": ModelSpec(_mistral),
    "phi": ModelSpec(_phi),
    "gpt_neox": ModelSpec(_gpt_neox),
    "falcon": ModelSpec(_falcon),
    "mamba": ModelSpec(_mamba),
    "distilbert": ModelSpec(_distilbert, generates=False),
    "deberta_v2": ModelSpec(_deberta_v2, generates=False),
}


@dataclass
class ModelRun:
    """What one run computed, on the CPU."""

    logits: torch.Tensor
    loss: torch.Tensor
    grads: dict[str, torch.Tensor]
    params_after: dict[str, torch.Tensor]
    generated: torch.Tensor | None
    tied: dict[str, bool] = field(default_factory=dict)


def _attr(model: Any, path: str) -> Any:
    for part in path.split("."):
        model = getattr(model, part)
    return model


def _batch(spec: ModelSpec, device: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=gen)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -3:] = 0  # a padded row: attention masks are part of every real batch
    batch = {"input_ids": ids, "attention_mask": mask}
    if spec.seq2seq:
        batch["labels"] = torch.randint(2, VOCAB, (BATCH, SEQ // 2), generator=gen)
    else:
        batch["labels"] = ids.masked_fill(mask == 0, -100)
    return {k: v.to(device) for k, v in batch.items()}


def _cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu")


def initial_state(name: str) -> dict[str, torch.Tensor]:
    """The model's initial weights (CPU), to hand to a reference in another interpreter."""
    torch.manual_seed(SEED)
    return {k: v.clone() for k, v in MODELS[name].build().state_dict().items()}


def run_model(name: str, device: str, state: dict[str, torch.Tensor] | None = None) -> ModelRun:
    """One training run of model ``name`` on ``device``, from ``state`` (initial_state) or the seeded weights."""
    spec = MODELS[name]
    torch.manual_seed(SEED)
    cpu_model = spec.build().eval()  # eval: no dropout anywhere, so runs are comparable
    if state is not None:
        cpu_model.load_state_dict(state)
    model = copy.deepcopy(cpu_model).to(device)
    tied = {f"{a}={b}": _attr(model, a) is _attr(model, b) for a, b in spec.tied}
    batch = _batch(spec, device)
    out = model(**batch)
    out.loss.backward()
    grads = {n: _cpu(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    logits, loss = _cpu(out.logits), _cpu(out.loss)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    optimizer.step()
    optimizer.zero_grad()
    model(**batch).loss.backward()
    optimizer.step()
    params_after = {n: _cpu(p) for n, p in model.named_parameters()}
    generated = None
    if spec.generates:
        with torch.no_grad():
            prompt = batch["input_ids"][:, :4]
            generated = _cpu(model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6,
                                            do_sample=False, pad_token_id=0))
    return ModelRun(logits, loss, grads, params_after, generated, tied)


def run_model_plain(name: str, device: str, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """run_model as plain data (torch.load(weights_only=True)): the reference interpreter's entry point."""
    return dataclasses.asdict(run_model(name, device, state))


def from_plain(plain: dict[str, Any]) -> ModelRun:
    return ModelRun(**plain)


def compare(actual: ModelRun, expected: ModelRun, *, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Float32 within ``rtol``/``atol``; every gradient and parameter by name; generated ids exactly."""

    def close(a: torch.Tensor, e: torch.Tensor, what: str) -> None:
        torch.testing.assert_close(a, e, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")

    assert actual.tied == expected.tied, f"tied parameters: {actual.tied} != {expected.tied}"
    close(actual.logits, expected.logits, "logits")
    close(actual.loss, expected.loss, "loss")
    assert actual.grads.keys() == expected.grads.keys(), "parameters with a gradient differ"
    for n in expected.grads:
        close(actual.grads[n], expected.grads[n], f"grad of {n}")
    for n in expected.params_after:
        close(actual.params_after[n], expected.params_after[n], f"{n} after two AdamW steps")
    if expected.generated is not None:
        assert actual.generated is not None and torch.equal(actual.generated, expected.generated), "generate"
