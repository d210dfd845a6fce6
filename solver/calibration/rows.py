"""Published training runs (../shared/data/published_runs*.json) as jobs the formulation can
evaluate: every row's model, cluster, configuration and measured step time, read from what
the row states, with every inference named.

What a row states wins. What it leaves unstated is filled in one of two ways, and the row's
`assumed` list says which:
- facts of the software and hardware of the row's time (`eras.py`): 2020-2022 Megatron-LM had no
  flash attention, no sequence parallelism before Korthikanti et al. 2022, no distributed
  optimizer and no overlapped gradient reduction; a fabric that is "not stated" is the GPU
  family's reference system (DGX A100: 8x HDR 200 Gb/s, DGX H100: 8x NDR 400 Gb/s);
- planning knobs (micro-batch size, interleaving, recompute, sequence parallelism, tp/pp when
  absent): published runs were tuned, so these take the value the formulation finds best
  among the legal ones (`evaluate.best_config`), the even layer split as the sources used.

Measured step time, in this order: `measured.iteration_time_s`; `derived.iteration_time_s`
(sources that give tokens/s: global batch x sequence / tokens/s); TFLOP/s per GPU converted
with the row's own convention (Narayanan et al. Eq. (3), which counts the recomputed forward,
or model FLOPs); MFU with the peak the row names (`mfu_peak_used_tflops`, else the GPU's
dense BF16 peak).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import InputError
from ..formulation.flops import megatron_eq3_flop, model_flop_per_step
from ..specs import ClusterSpec, Constraints, JobSpec
from ..specs.job import Precision
from ..specs.reading import read_data
from .eras import (
    FLASH_BY_DEFAULT,
    SOURCE_KERNEL,
    SOURCE_SETTINGS,
    GradReduceDtype,
    era_of,
    fsdp_of,
    fsdp_zero,
    optimizer_settings,
    stated_vp,
)
from .legal_rows import broken_rule_text, with_blamed_knob_freed
from .names import model_problem, row_model, with_named_key
from .offload_rows import cpu_offload_of, grace_offload_preset
from .precision_rows import fp8_attention_guard, precision_of, precision_settings, row_precision
from .stated import NO_GLOBAL_BATCH, first_yes_no, with_stated_numbers
from .tasks import task_problem, task_settings
from .unread_sources import apply_to as apply_unread_source_settings

DATA_FILES = ("published_runs.json", "published_runs_more.json", "published_runs_moe_newgpu.json")

# hardware.gpu text -> (GPU catalog entry, family template for links), first match wins. Board variants whose
# peaks, memory or NVLink differ from the SXM module (H100 PCIe: 114 SMs, 2 TB/s; H100 NVL: 94 GB; A100 PCIe:
# NVLink bridges in pairs, no NVSwitch) come first, as their own entries; one the catalog does not hold (an A100
# 40GB PCIe, a PCIe card of unstated memory) matches the None entry next ("H100 NVL", not the GB200 NVL72 rack):
# a row of it is skipped, never priced as the SXM module; so are a 16 GB V100 and GH200's 144 GB HBM3e variant,
# which the catalog does not hold either (the 96 GB GH200 is its own entry). `probe.catalog_gpu_of_device` reads
# torch's device names with the same table.
GPU_PATTERNS: tuple[tuple[str, tuple[str, str] | None], ...] = (
    (r"h100.*pcie", ("h100-pcie", "h100-pcie")),
    (r"h100[\s_-]*nvl\b", ("h100-nvl", "h100-nvl")),
    (r"a100.*(80\s*gb.*pcie|pcie.*80\s*gb)", ("a100-pcie-80gb", "a100-pcie")),
    (r"pcie|\bnvl\b|v100.*16\s*gb|gh200.*(144|hbm3e)", None),
    (r"gh200", ("gh200", "gh200")),
    (r"a100.*40\s*gb|a100 \(dgx-a100, memory size not stated\)", ("a100-40gb", "a100-40gb")),  # 2020 DGX A100: 40 GB
    (r"a100", ("a100-80gb", "a100")),
    (r"h200", ("h200", "h200")),
    (r"h800", ("h800", "h800")),
    (r"(?<![a-z0-9])h20(?![0-9])", ("h20", "h20")),
    (r"a800", ("a800-80gb", "a800")),
    (r"h100", ("h100-sxm", "h100")),
    (r"gb200", ("gb200", "gb200")),
    (r"gb300", ("gb300", "gb300")),
    (r"b200", ("b200", "b200")),
    (r"b300", ("b300", "b300")),
    (r"v100", ("v100-32gb", "v100")),
    (r"mi300x", ("mi300x", "mi300x")),
    (r"mi325x", ("mi325x", "mi325x")),
    (r"mi355x", ("mi355x", "mi355x")),
)


def gpu_of(text: str | None) -> tuple[str, str] | None:
    """(catalog GPU, cluster family) of a row's `hardware.gpu` text (`GPU_PATTERNS`, first match), or None (also
    for a board variant the catalog does not hold: a row of it is skipped, not priced as the SXM module)."""
    t = str(text or "").lower()
    return next((out for pattern, out in GPU_PATTERNS if re.search(pattern, t)), None)


def find_data(paths: list[str] | None = None) -> list[Path]:
    """The data files: `paths` when given (files, or folders), else the copies shipped in the package
    (`solveplan.catalog_published`, the repository's published/: identical to ../shared/data,
    tests/test_validation.py). A folder gives its DATA_FILES first, in that order, then every other
    `*.json` in it that holds a `measurements` list, by name (a file of runs named otherwise is read, a
    file of something else, such as h200_kernels.json, is not)."""
    if not paths:
        from ..catalog import _catalog_dir

        paths = [str(_catalog_dir("published"))]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = [p / f for f in DATA_FILES if (p / f).is_file()]
            found += [f for f in sorted(p.glob("*.json")) if f.name not in DATA_FILES and _holds_runs(f)]
            if not found:
                raise InputError("data", f"folder {str(p)!r} holds no file of runs (a JSON object with a 'measurements' "
                                         f"list, as {', '.join(DATA_FILES)})")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise InputError("data", f"file {str(p)!r} does not exist")
    return out


def _holds_runs(path: Path) -> bool:
    """Whether a JSON file of a data folder is a file of runs (an object with a `measurements` list)."""
    try:
        data = read_data(path, "data")
    except InputError:
        return False
    return isinstance(data, dict) and isinstance(data.get("measurements"), list)


def load_rows(paths: list[str] | None = None) -> tuple[list[dict], dict]:
    """All measurement rows of the data files (each with its file's `sources` entry under
    `_source_meta`), and the first file's memory data points."""
    rows: list[dict] = []
    memory: dict = {}
    for p in find_data(paths):
        data = read_data(p, "data")  # the safe reader: size cap, UTF-8, no duplicate keys or deep nesting
        if not isinstance(data, dict) or not isinstance(data.get("measurements"), list):
            raise InputError("data", f"{p.name} has no 'measurements' list")
        sources = data.get("sources") or {}
        for raw in data["measurements"]:
            if isinstance(raw, dict):
                rows.append({**raw, "_source_meta": sources.get(raw.get("source"), {})})
        memory = memory or data.get("memory_datapoints", {})
    return rows, memory


# ----------------------------------------------------------------------------- text fields
_GBIT = r"(\d+(?:\.\d+)?)\s*(?:Gb/s|Gbit/s|Gbps|Gb|G\b)"
_TBIT = r"(\d+(?:\.\d+)?)\s*(?:Tb/s|Tbit/s|Tbps)"
FASTEST_NIC_GBIT = 800.0  # ConnectX-8 / XDR: a bare rate above it is a node's, not one GPU's NIC


def nic_gbit_per_gpu(text: str | None, gpus_per_node: int) -> float | None:
    """Per-GPU network bandwidth (Gbit/s) from a row's `inter_node` text, or None when it
    does not say: '8x 200 Gb/s HDR InfiniBand per node' -> 8*200/8; '1600 Gb/s node-node
    RoCE' -> 1600/8; '50 Gb/s per GPU' -> 50; '400 Gb/s NDR' -> 400 per NIC, one per GPU; '3.2 Tbps' or a bare
    'EFA 3200 Gbps' (more than any NIC, `FASTEST_NIC_GBIT`) -> a node's, 3200/8."""
    if not text or "not stated" in str(text).lower():
        return None
    t = re.sub(_TBIT, lambda m: f"{float(m.group(1)) * 1000:g} Gb/s", str(text).replace(",", ""), flags=re.I)
    m = re.search(r"(\d+)\s*[x×]\s*" + _GBIT, t, re.I)
    if m:
        return int(m.group(1)) * float(m.group(2)) / gpus_per_node
    m = re.search(r"(\d+(?:\.\d+)?)\s*(?:GB/s|GByte/s)", t)
    factor = 8.0 if m else 1.0
    m = m or re.search(_GBIT, t, re.I)
    if not m:
        named = {"ndr": 400.0, "hdr": 200.0, "edr": 100.0}
        for key, rate in named.items():
            if key in t.lower():
                return rate
        return None
    rate = float(m.group(1)) * factor
    if re.search(r"per\s+gpu|/\s*gpu", t, re.I):
        return rate
    if re.search(r"node-node|per\s+node|/\s*node", t, re.I):
        return rate / gpus_per_node
    if rate > FASTEST_NIC_GBIT:  # "EFA 3200 Gbps": no NIC runs that, the node's NICs together do
        return rate / gpus_per_node
    return rate  # a bare NIC rate: one NIC per GPU (rail-optimised DGX-style nodes)


def recompute_of(text) -> str | None:
    """The recompute granularity a row's text names: full (also Megatron's uniform / block methods, "activation
    checkpointing", yes / true), selective (also "partial"), none (also no / off / false); None when it names none
    of them ("not stated", "n/a", anything else: the best legal value, never silently none)."""
    if isinstance(text, bool):
        return "full" if text else "none"
    t = str(text if text is not None else "").strip().lower()
    if not t or "not stated" in t:
        return None
    for granularity, starts in (("full", ("full", "uniform", "block")), ("selective", ("selective", "partial")),
                                ("none", ("none", "no", "off", "false", "disabled"))):
        if t.startswith(starts):
            return granularity
    return "full" if "checkpoint" in t or t in ("yes", "true", "on") else None


def skip_reason(raw: dict) -> str | None:
    """Why a row is not predicted at all (the one place rows are set aside before reading them)."""
    m, p = raw.get("model") or {}, raw.get("parallel") or {}
    if raw.get("category") == "A" or m.get("num_experts") or (p.get("ep") or 1) > 1 or "moe" in (raw.get("tags") or []):
        return "mixture-of-experts: read by calibration.moe_rows (not registered in this process)"
    if "mxfp4" in str(raw.get("precision", "")).lower():
        return "mxfp4: the MXFP4 training recipe is not modelled (precision bf16 / fp8 recipes / nvfp4 only)"
    if grace_offload_preset(raw) and cpu_offload_of(raw, []) is None:
        return ("a Megatron-FSDP GB200/GB300 preset of Megatron-Bridge offloads activations to the Grace CPU, but "
                "neither the row nor OFFLOAD_2509 states how many layers")
    if problem := task_problem(raw):
        return problem
    if str(m.get("arch", "")).strip().lower() == "not stated":
        return "model architecture not stated"
    if problem := model_problem(m):
        return problem
    if gpu_of((raw.get("hardware") or {}).get("gpu")) is None:
        return f"GPU {(raw.get('hardware') or {}).get('gpu')!r} is not in the catalog"
    if p.get("gbs") is None:
        return NO_GLOBAL_BATCH
    return None


# ----------------------------------------------------------------------------- rows -> jobs
@dataclass
class Row:
    """One published run as the formulation sees it."""

    id: str
    source: str
    gpu: str  # GPU catalog name
    family: str
    num_gpus: int
    job: JobSpec | None = None
    measured_s: float | None = None
    basis: str = ""
    skipped: str | None = None
    assumed: list[str] = field(default_factory=list)
    model_family: str = ""
    raw: dict = field(default_factory=dict)
    layout: str | None = None  # the pipeline layout the run states (Megatron's; space/pipeline_layout.py)

    @property
    def job_spec(self) -> JobSpec:
        """`job` of a row that was read (not skipped): the only rows the predictors see."""
        assert self.job is not None, f"row {self.id} has no job ({self.skipped})"
        return self.job

    @property
    def measured(self) -> float:
        """`measured_s` of a row that was read (not skipped): the only rows the predictors see."""
        assert self.measured_s is not None, f"row {self.id} has no measured step time ({self.skipped})"
        return self.measured_s


def published_row_cluster(hw: dict, num_gpus: int, assumed: list[str]) -> ClusterSpec:
    """The cluster a published row ran on, from what it states (`hw`) and its family: the one
    rule for the dense rows and the MoE rows (`moe_rows`); `assumed` gains what was not stated."""
    from ..catalog import catalog_families, load_gpu, rack_share

    gpu = gpu_of(hw["gpu"])
    assert gpu is not None, f"GPU {hw['gpu']!r} is not in the catalog"  # callers skip such rows first
    gpu_name, fam_name = gpu
    fam = dict(catalog_families()[fam_name])
    fam.pop("description", None)
    fam.pop("gpu", None)
    per_node = int(hw.get("gpus_per_node") or fam.get("gpus_per_node", 8))
    if fam.get("nvlink_domain_gpus") and per_node > int(fam["gpus_per_node"]):
        # a rack described as one "node" of up to 72 GPUs: its trays are the family's, one NVLink domain
        assumed.append(f"{per_node} GPUs per node read as one NVLink domain of {fam['gpus_per_node']}-GPU trays")
        fam["nvlink_domain_gpus"] = min(per_node, int(fam["nvlink_domain_gpus"]))
        per_node = int(fam["gpus_per_node"])
    nic = nic_gbit_per_gpu(hw.get("inter_node"), per_node)
    if nic is None:
        if num_gpus > per_node:
            assumed.append(f"fabric not stated: {fam['nic_gbit_per_s']:g} Gb/s per GPU ({fam_name} reference node)")
    else:
        fam["nic_gbit_per_s"] = nic
    fam["source"] = f"published row: {hw.get('cluster') or 'cluster not named'}; {hw.get('inter_node') or ''}".strip()
    fam.update(gpus_per_node=min(per_node, num_gpus), num_nodes=max(1, -(-num_gpus // per_node)), name=f"{fam_name}-row")
    if fam.get("nvlink_domain_gpus"):  # NVL72 racks: the job's GPUs in equal parts of racks
        fam["nvlink_domain_gpus"] = domain = rack_share(num_gpus, int(fam["nvlink_domain_gpus"]), per_node)
        if num_gpus > domain:
            assumed.append(f"{num_gpus} GPUs over NVL72 racks: {domain} per rack (one NVLink domain each)")
    return ClusterSpec(gpu=load_gpu(gpu_name), **fam)


def model_family(name: str) -> str:
    n = name.lower()
    for key in ("llama", "nemotron", "mpt", "gpt"):
        if key in n:
            return key
    return "gpt"  # Megatron's GPT-style models of Narayanan / Korthikanti / 2020 README


# (accepts(raw), read(raw) -> Row) of data files read by a module of their own, registered on import
ROW_READERS: list = []


def row_job(raw: dict) -> Row:
    """Map one measurement row to a job whose constraints hold what the row states."""
    for accepts, read in ROW_READERS:  # a file with a reader of its own (moe_rows registers one)
        if accepts(raw):
            return read(raw)
    row = Row(id=raw["id"], source=raw["source"], gpu="", family="", num_gpus=int(raw["parallel"]["num_gpus"]),
              model_family=model_family(str(raw["model"].get("name", ""))), raw=raw)
    if raw["model"].get("vocab") is None:  # the shape from the catalog: a row stating no key, the one its name spells
        row.raw = raw = with_named_key(raw, row.assumed)
    hw, p, m = raw["hardware"], raw["parallel"], raw["model"]
    row.skipped = skip_reason(raw)
    if row.skipped:
        return row
    gpu = gpu_of(hw["gpu"])
    assert gpu is not None  # skip_reason
    row.gpu, row.family = gpu
    meta = raw.get("_source_meta") or {}
    text = " ".join(str(x) for x in (meta.get("title"), meta.get("read_via"), raw.get("notes"), m.get("arch"),
                                     p.get("overlap"), hw.get("cluster")))
    era = era_of(raw["source"], text)
    assumed = row.assumed
    cluster = published_row_cluster(hw, row.num_gpus, assumed)
    zero = p.get("zero_stage")
    fsdp = str(p.get("fsdp") or "") if fsdp_of(p) == "pytorch" else ""
    if fsdp:
        assumed.append("FlashAttention-2 (PyTorch FSDP stacks call the flash-attn package)")
    zero = fsdp_zero(p, assumed) or zero
    if zero is None and (p.get("distributed_optimizer") is True or "implied" in str(p.get("distributed_optimizer", ""))):
        zero = 1
    sp = first_yes_no(p.get("sequence_parallel"))
    knobs: dict[str, Any] = dict(
        tp=(p["tp"],) if p.get("tp") else None, pp=(p["pp"],) if p.get("pp") else None,
        cp=(p.get("cp") or 1,),
        micro_batch_size=(p["mbs"],) if p.get("mbs") else None,
        vp=stated_vp(raw, assumed),
        recompute=(recompute_of(p.get("recompute")),) if recompute_of(p.get("recompute")) else None,
        sequence_parallel=(bool(sp),) if sp is not None else None,
        zero=(zero,) if zero is not None else ddp_zero(p, assumed),
    )
    precision, offload = precision_and_offload(raw, knobs, assumed)
    for k in ("sequence_parallel", "recompute", "zero"):
        if knobs[k] is None and k in era:
            knobs[k] = era[k]
            assumed.append(f"{k} = {era[k][0]} (software of the time)")
    if knobs["zero"] == (3,) and "zero3_gathers" in era:
        assumed.append("ZeRO-3 as DeepSpeed ran it before v0.5.5: each weight gathered alone, nothing overlapped")
    free = [k for k, v in knobs.items() if v is None]
    if free:
        assumed.append("unstated, best legal value: " + ", ".join(free))
    overlap, flash = str(p.get("overlap") or "").lower(), era.get("flash", FLASH_BY_DEFAULT)
    kernel = attention_kernel_of(raw, flash, bool(fsdp), assumed)
    model, reduce_dtype = row_model(m, assumed), grad_reduce_dtype(raw, assumed)
    settings = precision_settings(raw, precision, assumed, megatron_fsdp=fsdp_of(p) == "megatron")
    fp8_attention_guard(settings, assumed, model=model, cluster=cluster, precision=precision, flash_attention=flash,
                        attention_kernel=kernel)
    row.job = JobSpec(
        model=model, cluster=cluster, global_batch_size=int(p["gbs"]), seq_length=int(m["seq_len"]),
        precision=precision, flash_attention=flash, attention_kernel=kernel, **offload,
        tp_comm_overlap="tp-comm-overlap" in overlap or "tp comm overlap" in overlap,
        overlap_grad_reduce=era.get("overlap_grad_reduce", True), zero3_gathers=era.get("zero3_gathers", "prefetched"),
        grad_reduce_dtype=reduce_dtype, **settings, **optimizer_settings(raw, assumed), **task_settings(raw, assumed),
        constraints=Constraints(**{k: v for k, v in knobs.items() if v is not None}, uneven_split=False,
                                **pipeline_accounting(p, int(m["layers"]), assumed)),
    )
    row.job = _legal(row.job, row)
    if row.job is None:
        return row
    apply_unread_source_settings(row, era)
    row.measured_s, row.basis = measured_step_s(raw, row.job)
    if row.measured_s is None:
        row.skipped = "no time measure (iteration time, tokens/s, TFLOP/s or MFU)"
    return row


def _legal(job: JobSpec, row: Row) -> JobSpec | None:
    """`job` if some configuration is legal under what the row states; else the job with the knob that breaks
    Megatron's rules freed (`legal_rows`, said in the row), or None with `row.skipped` naming the rule."""
    from ..space.enumeration import enumerate_shapes

    if len(enumerate_shapes(job).shapes):
        return job
    said: list[str] = []
    freed = with_blamed_knob_freed(job, said)
    if freed is not None and len(enumerate_shapes(freed).shapes):
        row.assumed.extend(said)
        return freed
    row.skipped = ("no legal configuration matches what the row states (Megatron's rules as the space enforces "
                   "them)" + broken_rule_text(job))
    return None


def precision_and_offload(raw: dict, knobs: dict, assumed: list) -> tuple[Precision, dict]:
    """The row's precision and CPU activation offloading (`offload_rows.cpu_offload_of`): an offloading row
    fixes recompute none (Megatron's rule; specs.job.SETTING_RULES fix pp 1) and takes the FP8 recipe
    of its matched preset where the row names none."""
    offload = cpu_offload_of(raw, assumed) or {}
    if offload and knobs["recompute"] is None:
        knobs["recompute"] = ("none",)
    preset_fp8 = offload.pop("fp8_recipe", None)
    if preset_fp8 and precision_of(raw.get("precision")) == "fp8":
        assumed.append(f"FP8 recipe {preset_fp8}: the matched perf_matrix entry's")
        return preset_fp8, offload
    return row_precision(raw.get("precision"), assumed, raw["source"]), offload


def ddp_zero(p: dict, assumed: list) -> tuple[int, ...] | None:
    """(0, 1) for a row whose FSDP column says it ran data-parallel without FSDP ("no (DDP)", Megatron-Bridge's
    performance summary): with or without the distributed optimizer, never Megatron-FSDP's ZeRO-2/3; else None."""
    if not re.match(r"no\b", str(p.get("fsdp") or "").lower()):  # "no (DDP)", not "not stated"
        return None
    assumed.append("no FSDP (the source's column): zero 0 or 1, the faster")
    return (0, 1)


def attention_kernel_of(raw: dict, flash: bool, fsdp: bool, assumed: list) -> Literal["cudnn", "flash2", "flash1"]:
    """The row's flash-attention kernel: the source's own (`SOURCE_KERNEL`); else FlashAttention-2 for
    PyTorch FSDP stacks and rows that name FlashAttention; else Megatron-Core/NeMo's default, Transformer
    Engine's cuDNN fused attention (a kernel is named only when flash attention is on)."""
    if flash and raw["source"] in SOURCE_KERNEL:
        assumed.append(f"attention kernel {SOURCE_KERNEL[raw['source']]} (the source's launch scripts: attn_impl triton)")
        return SOURCE_KERNEL[raw["source"]]
    named = "flashattention" in str(raw["model"].get("arch", "")).lower()
    return "flash2" if flash and (fsdp or named) else "cudnn"


def pipeline_accounting(p: dict, num_layers: int, assumed: list) -> dict:
    """The embedding / loss accounting constraints of a row (`space.pipeline_split`): off, Megatron's
    default, unless the row's pp x vp exceeds its layers -- then its recipe counts them as layers
    (Megatron-Bridge's llama31_405b_pretrain_config sets account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split), and the space takes the accounting that makes it legal."""
    if not (p.get("pp") and p.get("vp") and p["pp"] * p["vp"] > num_layers):
        return dict(account_for_embedding=(False,), account_for_loss=(False,))
    assumed.append(f"pp x vp = {p['pp'] * p['vp']} virtual stages for {num_layers} layers: the embedding and/or "
                   f"the loss count as layers of the split (Megatron's --account-for-*-in-pipeline-split)")
    return {}


def grad_reduce_dtype(raw: dict, assumed: list) -> GradReduceDtype:
    if str(raw["parallel"].get("fsdp_mixed_precision_mode", "")).upper() == "PURE":
        return "bf16"
    fixed = SOURCE_SETTINGS.get(raw["source"], {}).get("grad_reduce_dtype")
    if fixed:
        dtype, evidence = fixed
        assumed.append(f"gradients reduced in {dtype} ({evidence})")
        return dtype
    return "fp32"


def measured_step_s(raw: dict, job: JobSpec) -> tuple[float | None, str]:
    me, n = raw["measured"], int(raw["parallel"]["num_gpus"])
    if me.get("iteration_time_s"):
        return float(me["iteration_time_s"]), "iteration time"
    derived = raw.get("derived") or {}
    if isinstance(derived.get("iteration_time_s"), (int, float)):
        return float(derived["iteration_time_s"]), "tokens/s"
    conv = str(me.get("tflops_convention", ""))
    B, s = job.global_batch_size, job.seq_length
    tokens_per_s = _positive(me.get("tokens_per_s_total")) or n * (_positive(me.get("tokens_per_s_per_gpu")) or 0.0)
    if tokens_per_s:
        return B * s / tokens_per_s, "tokens/s"
    tflops = _positive(me.get("tflops_per_gpu")) or _positive(me.get("model_tflops_per_gpu"))  # the MoE file's name
    if tflops:
        if "Eq" in conv or "counts recompute" in conv:
            return megatron_eq3_flop(job.model, B, s) / (n * tflops * 1e12), "TFLOP/s by Eq. (3)"
        return model_flop_per_step(job.model, B, s) / (n * tflops * 1e12), "TFLOP/s as model FLOPs"
    if me.get("mfu"):
        peak = float(me.get("mfu_peak_used_tflops") or job.cluster.gpu.peak_bf16_tflops) * 1e12
        return model_flop_per_step(job.model, B, s) / (n * peak * me["mfu"]), "MFU"
    return None, ""


def _positive(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 else None


def published_rows(paths: list[str] | None = None) -> list[Row]:
    """Every row of the data files; a row that cannot be read is kept, skipped with the reason."""
    out = []
    for raw in load_rows(paths)[0]:
        try:
            raw, read_as = with_stated_numbers(raw)  # "4", 4.0, "n/a", "not stated": integers or None, said
            out.append(row_job(raw))
            out[-1].assumed[:0] = read_as
        except (KeyError, TypeError, ValueError, AttributeError, InputError) as exc:  # ValidationError: a ValueError
            reason = (exc.message if isinstance(exc, InputError) else f"it states no {exc} field" if isinstance(exc, KeyError)
                      else f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
            out.append(Row(id=str(raw.get("id", "?")), source=str(raw.get("source", "?")), gpu="", family="",
                           num_gpus=0, skipped=f"row cannot be read: {reason}", raw=raw))
    return out
