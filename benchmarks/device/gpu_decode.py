"""Batch-1 greedy decoding of a Hugging Face Llama on the GPU: flagos against native cuda, eager and graph-captured.

The model is built from a config in code (8 layers, hidden 1024, 16 heads, bf16, random weights made on the
CPU from one seed, so both sides hold the same model); the prompt is 32 tokens, and 64 tokens are generated
greedily.  Three ways of running the same decode loop:

* eager: the model's forward per token with Hugging Face's dynamic cache, as a plain script runs it;
* graph: a static cache, and the one-token step captured once into a graph (``torch.cuda.graph`` on cuda,
  ``torch.flagos.graph`` on flagos) and replayed per token with the token, its position and the attention
  mask written into the captured inputs; this is how CUDA users serve host-bound decoding;
* compiled: a static cache, and the one-token step compiled with ``torch.compile(mode="reduce-overhead")``
  (inductor's CUDA graphs: its graph trees on cuda, torch_fl's graph replay on flagos), called per token with
  the last token, its position and the attention mask; the compile and the captures happen in the warm-up.
  Also reported per side: inductor's count of graphs it ran without CUDA graphs (``cudagraph_skips``), and on
  flagos the number of graph replays, so that a figure without graphs on either side shows as such.

Native cuda runs in the reference interpreter (`--reference-python`, _gpu_common.py says why), flagos in a child
of this interpreter (`--flagos-in-process`: in the benchmark's own process), both pinned to the same two cores;
the two take turns, one whole generation each, `--runs` times per mode, which goes first alternating.
`--calibrate-loaded` runs native cuda in flagos's place, in a child that has loaded torch_fl: what the plugin's
mere presence in a process costs native code.  Reported per mode: the median tokens/s of each side, the median
of the per-pair ratios with its 95 % interval (_report.median_interval), and how many of the 64 tokens each side
generated alike.  Goals: eager >= 0.95 of native; graph >= 0.97 of native graph and >= 2x flagos eager; compiled
has no goal of its own yet.

    python benchmarks/device/gpu_decode.py [--out gpu_decode.json] [--runs 5] [--modes eager graph compiled]
        [--reference-python PY] [--flagos-in-process | --calibrate-loaded]
"""

from __future__ import annotations

import inspect
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _gpu_common import (FlagosChild, NativeChild, ScriptChild, device_api, emit, flagos_layout, flagos_process, parser,
                         reference_python, require_flagos, serve, share_cores, take_turns)
from _report import median_interval

LAYERS, HIDDEN, HEADS, FF, VOCAB = 8, 1024, 16, 2816, 32000
PROMPT, NEW = 32, 64
MODES = ("eager", "graph", "compiled")


def build_model(device: str) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=HIDDEN, intermediate_size=FF, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=HEADS, vocab_size=VOCAB,
                         max_position_embeddings=PROMPT + NEW, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()  # made on the CPU: the same weights on both sides
    return model.to(device=device, dtype=torch.bfloat16)


def graph_api(device: str) -> Any:
    """torch.cuda / torch.flagos: the module with CUDAGraph, graph and Stream for `device`."""
    return torch.flagos if device == "flagos" else torch.cuda


def static_cache(model: Any, device: str) -> Any:
    from transformers import StaticCache

    wanted = {"config": model.config, "max_cache_len": PROMPT + NEW, "max_batch_size": 1, "batch_size": 1,
              "device": torch.device(device), "dtype": torch.bfloat16}
    accepted = inspect.signature(StaticCache.__init__).parameters
    return StaticCache(**{k: v for k, v in wanted.items() if k in accepted})


class StaticStep:
    """A static cache and the one-token step's inputs (the graph and compiled modes each have their own)."""

    def __init__(self, model: Any, device: str) -> None:
        self.model, self.device = model, device
        self.cache = static_cache(model, device)
        self.token = torch.zeros(1, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        # A 4-D boolean mask is used as given (Hugging Face's mask helpers would read values on the host).
        self.mask = torch.zeros(1, 1, 1, PROMPT + NEW, dtype=torch.bool, device=device)

    def step(self, token: torch.Tensor, position: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=token, position_ids=position[None], cache_position=position,
                            attention_mask=mask, past_key_values=self.cache, use_cache=True).logits
        return logits[:, -1:].argmax(-1)

    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        # Empty the cache: its layers count the positions written so far (in a device tensor, so that the
        # captured step advances it), and the warm-up, the capture and the last generation have written some.
        self.cache.reset()
        positions = torch.arange(PROMPT, device=self.device)
        self.mask.zero_()
        self.mask[..., :PROMPT] = True
        causal = torch.ones(PROMPT, PROMPT + NEW, dtype=torch.bool, device=self.device).tril()[None, None]
        logits = self.model(input_ids=prompt, position_ids=positions[None], cache_position=positions,
                            attention_mask=causal, past_key_values=self.cache, use_cache=True).logits
        return logits[:, -1:].argmax(-1)

    def generate(self, prompt: torch.Tensor, advance: Callable[[torch.Tensor], torch.Tensor]) -> list[int]:
        """Prefill, then NEW - 1 steps: each writes its position into the step's inputs, and ``advance(token)``
        gives the next token."""
        token = self.prefill(prompt)
        tokens = [token]
        for i in range(NEW - 1):
            position = PROMPT + i
            self.position.fill_(position)
            self.mask[..., position] = True
            token = advance(token)
            tokens.append(token)
        return torch.cat(tokens, dim=1)[0].tolist()


class Decoder:
    """The model and prompt on `device`; run(mode) generates NEW tokens and returns tokens/s and the tokens."""

    def __init__(self, device: str) -> None:
        self.device, self.api = device, device_api(device)
        self.model = build_model(device)
        self.prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(1)).to(device)
        self.graph: Any = None
        self.compiled_step: Any = None

    def eager(self) -> list[int]:
        model, tokens = self.model, []
        out = model(input_ids=self.prompt, use_cache=True)
        for _ in range(NEW):
            token = out.logits[:, -1:].argmax(-1)
            tokens.append(token)
            if len(tokens) == NEW:
                break
            out = model(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
        return torch.cat(tokens, dim=1)[0].tolist()

    def _capture(self) -> None:
        """The static step's inputs and outputs, and the captured step."""
        self.static = StaticStep(self.model, self.device)
        self.static.prefill(self.prompt)
        static = self.static

        def step() -> torch.Tensor:
            return static.step(static.token, static.position, static.mask)

        api = graph_api(self.device)
        side = api.Stream()
        side.wait_stream(api.current_stream())
        with api.stream(side):
            for _ in range(3):  # warm-up on a side stream, as before any capture
                step()
        api.current_stream().wait_stream(side)
        self.graph = api.CUDAGraph()
        with api.graph(self.graph):
            self.next_token = step()

    def graphed(self) -> list[int]:
        if self.graph is None:
            self._capture()

        def replay(token: torch.Tensor) -> torch.Tensor:
            self.static.token.copy_(token)
            self.graph.replay()
            return self.next_token.clone()

        return self.static.generate(self.prompt, replay)

    def compiled(self) -> list[int]:
        if self.compiled_step is None:
            self.compiled_state = StaticStep(self.model, self.device)
            self.compiled_step = torch.compile(self.compiled_state.step, mode="reduce-overhead")
        state = self.compiled_state
        # Kept as a copy: the CUDA graph trees overwrite an output with their next replay (torch_fl's graph
        # replay hands out copies; the copy here is the same user code on both sides).
        return state.generate(self.prompt, lambda token: self.compiled_step(token, state.position, state.mask).clone())

    def run(self, mode: str) -> dict[str, Any]:
        generate = {"eager": self.eager, "graph": self.graphed, "compiled": self.compiled}[mode]
        with torch.inference_mode():
            if mode == "graph" and self.graph is None:
                generate()  # capture outside the timed run
            self.api.synchronize()
            start = time.perf_counter()
            tokens = generate()
            self.api.synchronize()
        seconds = time.perf_counter() - start
        result: dict[str, Any] = {"tokens_per_s": NEW / seconds, "tokens": tokens}
        if mode == "compiled":
            result.update(graph_counts(self.device))
        return result


def graph_counts(device: str) -> dict[str, int]:
    """Inductor's skips of CUDA graphs in this process so far, and on flagos the graph replays."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    counts = {"cudagraph_skips": inductor["cudagraph_skips"]}
    if device == "flagos":
        from torch_fl.compile.graph_replay import REPLAYS

        counts["graph_replays"] = inductor[REPLAYS]
    return counts


def failure_as_record(run: Any, mode: str) -> dict[str, Any]:
    """A child's answer: the run, or its error as a record (the child must outlive one failed mode)."""
    try:
        return run(mode)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which records it per mode
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}


class ChildDecoder:
    """Parent side: a Decoder in a child process (`run MODE`), its failures raised here."""

    def __init__(self, child: ScriptChild, side: str) -> None:
        self.child, self.side = child, side

    def run(self, mode: str) -> dict[str, Any]:
        answer = self.child.ask("run", mode)
        if "error" in answer:
            raise RuntimeError(f"{self.side}: {answer['error']}")
        return answer


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {k: runs[-1][k] for k in ("cudagraph_skips", "graph_replays") if k in runs[-1]}  # after the last run
    return {"tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in runs), 1),
            "runs": [round(r["tokens_per_s"], 1) for r in runs], **counts}


def compare(mode: str, native: ChildDecoder, flagos: Decoder | ChildDecoder, runs: int) -> dict[str, Any]:
    native.run(mode)  # warm-up: for graph the capture, for compiled the compile and the captures
    flagos.run(mode)
    done = take_turns({"native": lambda: native.run(mode), "flagos": lambda: flagos.run(mode)}, runs)
    native_runs, flagos_runs = done["native"], done["flagos"]
    ratios = [f["tokens_per_s"] / n["tokens_per_s"] for n, f in zip(native_runs, flagos_runs)]
    same = sum(a == b for a, b in zip(native_runs[-1]["tokens"], flagos_runs[-1]["tokens"]))
    return {"native": summary(native_runs), "flagos": summary(flagos_runs),
            "ratio": round(statistics.median(ratios), 3), "ratios": [round(r, 3) for r in ratios],
            "ratio_interval_95": median_interval(ratios, digits=3),
            "tokens_alike": f"{same}/{NEW}"}


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    # Separated by commas or spaces: tools/gpu-perf-round.sh passes a benchmark's arguments with commas as spaces.
    p.add_argument("--modes", nargs="+", default=list(MODES), help="eager, graph, compiled (commas or spaces)")
    flagos_layout(p)
    p.add_argument("--calibrate-loaded", action="store_true", help="native cuda in flagos's place, in a child that "
                   "has loaded torch_fl: what the plugin's presence costs native code")
    args = p.parse_args()
    if args.calibrate_loaded and args.flagos_in_process:
        print("--calibrate-loaded puts a child in flagos's place: it takes no --flagos-in-process", file=sys.stderr)
        return 2
    modes = [m for given in args.modes for m in given.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        print(f"--modes {' '.join(args.modes)}: give a subset of {', '.join(MODES)}", file=sys.stderr)
        return 2
    if args.native_child:
        decoder = Decoder("cuda")
        serve({"run": lambda mode: failure_as_record(decoder.run, mode)})
        return 0
    require_flagos()
    if args.flagos_child:
        decoder = Decoder("cuda" if args.calibrate_loaded else "flagos")
        serve({"run": lambda mode: failure_as_record(decoder.run, mode)}, native=False)
        return 0
    cores = share_cores()
    native_child = NativeChild(reference_python(args.reference_python), __file__)
    flagos_child = None if args.flagos_in_process else FlagosChild(
        __file__, *(["--calibrate-loaded"] if args.calibrate_loaded else []))
    results: dict[str, Any] = {}
    try:
        native = ChildDecoder(native_child, "native")
        flagos = Decoder("flagos") if flagos_child is None else ChildDecoder(flagos_child, "flagos")
        for mode in modes:
            try:
                results[mode] = compare(mode, native, flagos, args.runs)
            except Exception as error:  # noqa: BLE001 - one mode failing must not lose the others' figures
                results[mode] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
        native_env = native_child.ask("environment")
    finally:
        native_child.close()
        if flagos_child is not None:
            flagos_child.close()
    report: dict[str, Any] = {"benchmark": "gpu_decode", "model": f"Llama {LAYERS}x{HIDDEN} bf16",
                              "prompt_tokens": PROMPT, "new_tokens": NEW, "cores": cores, "modes": results,
                              "flagos_process": "native child with torch_fl loaded (calibration)"
                              if args.calibrate_loaded else flagos_process(args),
                              "goals": {"eager": 0.95, "graph": 0.97, "graph_over_flagos_eager": 2.0}}
    for mode in ("graph", "compiled"):
        if "tokens_per_s" in results.get(mode, {}).get("flagos", {}) and "flagos" in results.get("eager", {}):
            report[f"flagos_{mode}_over_eager"] = round(
                results[mode]["flagos"]["tokens_per_s"] / results["eager"]["flagos"]["tokens_per_s"], 2)
    return emit(report, args.out, native_env)


if __name__ == "__main__":
    sys.exit(main())
