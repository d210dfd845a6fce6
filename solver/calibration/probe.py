"""`solveplan probe`: measure the local GPU with PyTorch (the `probe` extra) and write a GPU file.

What is measured, in the kernel-file format that `kernel_fit` reads (the format of
`../shared/data/h200_kernels.json`, so both fit the same way):
- `gemm_bf16` (and `gemm_fp8` where `torch._scaled_mm` runs): the GEMMs of real layers --
  QKV, attention projection, fc1 and fc2 of the named models on one TP rank at each TP width,
  each with its data-gradient and weight-gradient shapes (`formulation.kernels.linear_s`);
- `attention`: causal `scaled_dot_product_attention` forward + backward with one backend forced
  at a time (`flash`, `cudnn`, `efficient`; a backend the build lacks is listed in
  `unavailable` with the reason torch gives); and, backend `masked`, SDPA given the explicit
  boolean causal mask transformers builds for a sliding-window layer (torch's own kernel choice,
  the whole s x s) at several head dimensions, as benchmarks/sdpa_masked_sweep.py measures it;
- `hbm`: device-to-device copies of a large buffer (bytes read + written over the time);
- `step` (optional): one training step of a small model: forward, backward, AdamW, with its
  time and peak allocated memory.

Timing: CUDA events around each repetition on a GPU (`time.perf_counter` on the CPU), after
warm-ups, repeated until `min_time_s` has passed; the median repetition is kept.

The GPU file is the base GPU's datasheet (a catalog GPU: peaks, HBM, SMs) with the efficiencies
fitted from these measurements (`kernel_fit.fit_kernels`), its `source` and `fit_notes` saying
when, where and how. The kernel file is written beside it (`<name>.kernels.json`).
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from ..errors import InputError
from ..specs import GPUSpec, ModelSpec

MISSING_EXTRA = "solveplan probe needs PyTorch: pip install 'solveplan[probe]' (torch)"
ATTENTION_BACKENDS = ("flash", "cudnn", "efficient")


def import_torch():
    """torch, or a one-line InputError naming the extra."""
    try:
        import torch
    except ImportError:
        raise InputError("probe", MISSING_EXTRA) from None
    return torch


def layer_gemm_shapes(model: ModelSpec, tp: int, tokens: int) -> list[dict]:
    """The GEMMs of one dense layer of `model` on one of `tp` ranks for `tokens` tokens: the
    (N, K) of QKV, projection, fc1, fc2 as `formulation.coefficients` has them, each forward
    (M, N, K), data gradient (M, K, N) and weight gradient (K, N, M)."""
    h, f, hq, hkv = model.hidden_size, model.ffn_hidden_size, model.q_hidden_size, model.kv_hidden_size
    linears = {"qkv": ((hq + 2 * hkv) // tp, h), "proj": (h, hq // tp),
               "fc1": (f * (model.mlp_matrices - 1) // tp, h), "fc2": (h, f // tp)}
    rows = []
    for gemm, (n, k) in linears.items():
        for pass_, (mm, nn, kk) in (("fwd", (tokens, n, k)), ("dgrad", (tokens, k, n)), ("wgrad", (k, n, tokens))):
            rows.append(dict(model=model.name, tp=tp, tokens=tokens, gemm=gemm, pass_=pass_, m=mm, n=nn, k=kk))
    return rows


class Timer:
    """Median seconds of a callable on one device (module docstring: timing)."""

    def __init__(self, torch, device: str, *, min_time_s: float, warmups: int = 2, min_reps: int = 3):
        self.torch, self.device = torch, device
        self.min_time_s, self.warmups, self.min_reps = min_time_s, warmups, min_reps

    def _once(self, fn: Callable[[], object]) -> float:
        if self.device.startswith("cuda"):
            start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmups):
            self._once(fn)
        times: list[float] = []
        while len(times) < self.min_reps or sum(times) < self.min_time_s:
            times.append(self._once(fn))
        return statistics.median(times)


def measure_gemms(torch, timer: Timer, shapes: list[dict], device: str) -> list[dict]:
    """bf16 GEMMs (float32 on a CPU, where bf16 matmul is emulated) of the given shapes."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    out = []
    for row in shapes:
        a = torch.randn(row["m"], row["k"], device=device, dtype=dtype)
        b = torch.randn(row["k"], row["n"], device=device, dtype=dtype)
        s = timer(partial(torch.matmul, a, b))
        out.append({**row, "s": s, "tflops": 2.0 * row["m"] * row["n"] * row["k"] / s / 1e12})
    return out


def measure_fp8_gemms(torch, timer: Timer, shapes: list[dict], device: str) -> tuple[list[dict], str | None]:
    """FP8 (e4m3) forward GEMMs through `torch._scaled_mm`, or the reason they cannot run."""
    if not device.startswith("cuda") or not hasattr(torch, "_scaled_mm"):
        return [], "torch._scaled_mm needs a CUDA GPU with FP8 tensor cores"
    out = []
    one = torch.tensor(1.0, device=device)
    try:
        for row in (r for r in shapes if r["pass_"] == "fwd"):
            a = torch.randn(row["m"], row["k"], device=device).to(torch.float8_e4m3fn)
            b = torch.randn(row["n"], row["k"], device=device).to(torch.float8_e4m3fn).t()
            s = timer(partial(torch._scaled_mm, a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
            out.append({k: v for k, v in row.items() if k != "pass_"} | {"s": s, "tflops": 2.0 * row["m"] * row["n"] * row["k"] / s / 1e12})
    except (RuntimeError, TypeError) as exc:
        return out, f"torch._scaled_mm failed: {str(exc).splitlines()[0][:200]}"
    return out, None


def measure_attention(torch, timer: Timer, cases: list[dict], device: str) -> tuple[list[dict], dict]:
    """Causal SDPA forward + backward per backend; (rows, {backend: why unavailable})."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION}
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    rows, unavailable = [], {}
    for name, backend in backends.items():
        for case in cases:
            b, heads, seq, d = case["b"], case["heads"], case["seq"], case["head_dim"]
            q, k, v = (torch.randn(b, heads, seq, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
            grad = torch.randn(b, heads, seq, d, device=device, dtype=dtype)

            def fwd(q=q, k=k, v=v):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd(grad=grad):
                fwd().backward(grad)

            try:
                with sdpa_kernel(backend):
                    fwd_s, fwd_bwd_s = timer(fwd), timer(fwd_bwd)
            except RuntimeError as exc:
                unavailable[name] = str(exc).splitlines()[0][:200]
                break
            flops = 4.0 * b * heads * seq * seq * d / 2  # causal half, two matmuls (h200_kernels.json's convention)
            rows.append(dict(backend=name, b=b, heads=heads, kv_heads=heads, seq=seq, head_dim=d, fwd_s=fwd_s,
                             fwd_bwd_s=fwd_bwd_s, fwd_tflops=flops / fwd_s / 1e12,
                             fwd_bwd_tflops=3.5 * flops / fwd_bwd_s / 1e12))
    return rows, unavailable


def measure_masked_attention(torch, timer: Timer, cases: list[dict], device: str) -> list[dict]:
    """SDPA forward + backward given an explicit (b, 1, s, s) boolean causal mask, K and V at every
    head (what transformers passes for a sliding-window layer: module docstring)."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    rows = []
    for case in cases:
        b, heads, seq, d = case["b"], case["heads"], case["seq"], case["head_dim"]
        q, k, v = (torch.randn(b, heads, seq, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(b, heads, seq, d, device=device, dtype=dtype)
        index = torch.arange(seq, device=device)
        mask = (index[None] <= index[:, None])[None, None]

        def fwd(q=q, k=k, v=v, mask=mask):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

        def fwd_bwd(grad=grad):
            fwd().backward(grad)

        rows.append(dict(backend="masked", masked=True, b=b, heads=heads, kv_heads=heads, seq=seq, head_dim=d,
                         fwd_s=timer(fwd), fwd_bwd_s=timer(fwd_bwd)))
    return rows


def measure_hbm(torch, timer: Timer, device: str, size_bytes: int) -> list[dict]:
    """Device-to-device copies of `size_bytes`: bytes read + written per second."""
    src = torch.empty(size_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    s = timer(lambda: dst.copy_(src))
    return [{"bytes": 2 * size_bytes, "s": s, "gbyte_per_s": 2 * size_bytes / s / 1e9}]


def measure_step(torch, timer: Timer, model: ModelSpec, device: str, *, tokens: int) -> dict:
    """One training step (forward, backward, AdamW) of `model`'s layers built from torch.nn
    (pre-norm decoder blocks, causal SDPA), one sequence of `tokens`: median time and the peak
    allocated memory."""
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    h = model.hidden_size
    layers = torch.nn.ModuleList(
        torch.nn.TransformerEncoderLayer(h, model.num_attention_heads, model.ffn_hidden_size, dropout=0.0,
                                         batch_first=True, norm_first=True)
        for _ in range(model.num_layers)).to(device=device, dtype=dtype)
    optimizer = torch.optim.AdamW(layers.parameters(), lr=1e-4)
    x = torch.randn(1, tokens, h, device=device, dtype=dtype)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens, device=device, dtype=dtype)

    def step():
        y = x
        for layer in layers:
            y = layer(y, src_mask=mask, is_causal=True)
        y.float().square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    s = timer(step)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else None
    return dict(model=model.name, layers=model.num_layers, hidden=h, tokens=tokens, s=s, peak_allocated_bytes=peak)


def environment(torch, device: str, tiny: bool) -> dict:
    env = {"torch": torch.__version__, "tiny": tiny, "device": device, "python": platform.python_version(),
           "when": datetime.now(UTC).isoformat(timespec="seconds")}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        env |= {"device": props.name, "sms": props.multi_processor_count, "mem_gib": props.total_memory / 1024**3,
                "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    return env


def run_probe(*, models: list[ModelSpec], tps: list[int], tokens: int, attention_cases: list[dict],
              masked_cases: list[dict], device: str, min_time_s: float, hbm_bytes: int, tiny: bool,
              step_model: ModelSpec | None) -> dict:
    """Every measurement of the module docstring, as a kernel file (a dict)."""
    torch = import_torch()
    timer = Timer(torch, device, min_time_s=min_time_s)
    shapes = [row for m in models for tp in tps for row in layer_gemm_shapes(m, tp, tokens)]
    fp8, fp8_missing = measure_fp8_gemms(torch, timer, shapes, device)
    attention, unavailable = measure_attention(torch, timer, attention_cases, device)
    attention += measure_masked_attention(torch, timer, masked_cases, device)
    if fp8_missing:
        unavailable["fp8_gemm"] = fp8_missing
    out = {"what": "kernel throughput measured by solveplan probe", "how": __doc__.split("Timing:")[1].strip(),
           "env": environment(torch, device, tiny), "gemm_bf16": measure_gemms(torch, timer, shapes, device),
           "gemm_fp8": fp8, "attention": attention, "hbm": measure_hbm(torch, timer, device, hbm_bytes),
           "unavailable": unavailable}
    if step_model is not None:
        out["step"] = measure_step(torch, timer, step_model, device, tokens=min(tokens, step_model.seq_length))
    return out


def catalog_gpu_of_device(device: str) -> str | None:
    """The catalog GPU a device is (torch's device name), by the GPU-name table published rows are read with
    (`rows.gpu_of`: `NVIDIA A100-SXM4-80GB` -> a100-80gb, `NVIDIA H100 80GB HBM3` -> h100-sxm, `NVIDIA H100 NVL`
    -> h100-nvl); None for a board the catalog lacks (`NVIDIA A100-PCIE-40GB`: the caller asks for --base-gpu)."""
    from .rows import gpu_of

    found = gpu_of(device)
    return found[0] if found else None


def probed_gpu(base: GPUSpec, measurements: dict, name: str) -> dict:
    """The GPU file's mapping: the base GPU's datasheet and defaults with every efficiency
    the measurements identify replaced by its fit (`kernel_fit.fit_kernels`)."""
    from .kernel_fit import fit_kernels, fit_masked_attention

    fits = fit_kernels(measurements, base)
    masked = fit_masked_attention(measurements.get("attention") or [], base)
    env = measurements.get("env", {})
    data = base.model_dump(exclude={"name", "fit_notes", "source"})
    data |= {f.field: round(f.value, 4) for f in fits if f.value is not None}  # fit_kernels keeps only these
    if masked:
        data["masked_attention_efficiency_by_head_dim"] = {dim: round(f.value or 0.0, 4) for dim, f in masked.items()}
    fits += list(masked.values())
    data["source"] = (f"{base.name}'s datasheet ({base.source.strip()}); efficiencies measured by solveplan probe on "
                      f"{env.get('device', '?')} (torch {env.get('torch', '?')}, {env.get('when', '?')})")
    data["fit_notes"] = "; ".join(f"{f.field} {f.value:.4f} from {f.count} kernels, model/measured MAPE "
                                  f"{100 * (f.mape or 0):.1f}%" for f in fits) or "no efficiency identified"
    return {"name": name, **data}
