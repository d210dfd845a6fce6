"""Megatron-LM arguments of mixture-of-experts plans: experts, router, layer pattern, expert
parallelism, multi-latent attention and MTP (pure: returns strings), added by
`megatron.megatron_args` to the dense flags. Every flag and rule is read in NVIDIA/Megatron-LM at
d98e8a6 (`moe_launch` lists them); benchmarks/megatron_args.py checks them with Megatron's own
parse_args / validate_args / core_transformer_config_from_args."""

from __future__ import annotations

from ..formulation.ep_buffers import flex_backend
from ..plan import Plan
from ..specs import JobSpec, ModelSpec
from .megatron_rope import mla_rope_flags
from .megatron_rope import num_arg as _num

# ---- mixture of experts, multi-latent attention, multi-token prediction ------------------------
# Every flag below is read in NVIDIA/Megatron-LM at d98e8a6: `--num-experts`, `--moe-layer-freq`
# (parsed by `moe_freq_type`), `--moe-router-load-balancing-type` and `--moe-aux-loss-coeff` in
# `_add_moe_args`, the MLA dimensions in `_add_mla_args` (megatron/training/arguments.py); the rest
# are TransformerConfig / ModelParallelConfig fields that `ArgumentGroupFactory` turns into
# `--field-name` flags (a bool field defaulting to False is a store_true switch).

MOE_AUX_LOSS_COEFF = 1e-2  # the help text of --moe-aux-loss-coeff: "a starting value of 1e-2 is recommended"
# DeepSeek-V3 (arXiv 2412.19437 Sec. 2.1.2, 4.2): auxiliary-loss-free balancing by expert bias plus a
# sequence-wise balance loss with alpha = 0.0001 (Megatron-LM's DeepSeek-R1 recipe: seq_aux_loss, 1e-4)
SEQ_AUX_LOSS_COEFF = 1e-4


def moe_layer_freq_arg(model: ModelSpec) -> str:
    """`--moe-layer-freq` for `model`: the integer N (layer i is MoE when i % N == 0, Megatron's
    `get_gpt_decoder_block_spec`) when the layer pattern is that, else the list expression that
    `moe_freq_type` evaluates (only digits, `[]()+*,` are allowed: `_eval_pattern`), the pattern's
    shortest period repeated, each period run-length coded: DeepSeek-V3 `[0]*3+[1]*58`, Llama 4
    Maverick `([0]*1+[1]*1)*24`."""
    mask = [int(v) for v in model.moe_layer_mask]
    n = len(mask)
    for freq in range(1, n + 1):
        if mask == [int(i % freq == 0) for i in range(n)]:
            return str(freq)
    period = next(p for p in range(1, n + 1) if n % p == 0 and mask == mask[:p] * (n // p))
    runs: list[list[int]] = []
    for v in mask[:period]:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    body = "+".join(f"[{v}]*{k}" for v, k in runs)
    return body if period == n else f"({body})*{n // period}"


def _with_mtp(layout: str, mtp: int) -> str:
    """The layout with the MTP modules (`m`) in the last virtual stage, after the decoder layers and
    before the loss: PipelineParallelLayerLayout.validate_layer_layout asserts the count equals
    --mtp-num-layers, that no decoder layer follows them, and that they sit in one last virtual stage."""
    head, _, last = layout.rpartition("|")
    parts = [x for x in last.split(",") if x and x != "L"] + (["m" if mtp == 1 else f"m*{mtp}", "L"])
    return (head + "|" if head else "") + ",".join(parts)


def _expert_parallel(plan: Plan) -> tuple[int, int]:
    par = plan.parallel
    return int(getattr(par, "ep", 1) or 1), int(getattr(par, "etp", 1) or 1)


def moe_launch(job: JobSpec, plan: Plan, args: list[str], notes: list[str], layout: str | None,
               arch: int) -> tuple[list[str], str | None]:
    """`args` with the flags that build `job.model`'s experts, router, layer pattern, multi-latent
    attention and MTP modules, and the plan's expert parallelism (EP, ETP); `notes` gains what the
    launch cannot say. The rules enforced on them, each read in Megatron-LM at d98e8a6:

    - `--expert-tensor-parallel-size` always: validate_args defaults it to the TP size, the
      planner's default is 1.
    - `num_experts % ep == 0` (validate_args); world size divisible by etp x ep x pp
      (parallel_state.initialize_model_parallel builds the expert grid etp-ep-dp-pp over the same
      ranks: MoE parallel folding). The planner's space guarantees both.
    - MoE with TP > 1 in training needs `--sequence-parallel` (MoELayer.forward raises otherwise).
    - linear biases in MoE only with ETP 1 (TransformerConfig.__post_init__).
    - `--moe-grouped-gemm` needs compute capability >= 8 (validate_args).
    - `--moe-router-pre-softmax` where the model's softmax top-k is not renormalised, and always when top-1 with
      softmax scores (TransformerConfig raises otherwise); `--moe-router-topk-scaling-factor` where it is scaled.
    - `--moe-router-enable-expert-bias` only with sigmoid scores (TransformerConfig).
    - `--moe-expert-capacity-factor` only with aux_loss / seq_aux_loss / global_aux_loss / none
      balancing (TransformerConfig).
    - `--moe-token-dispatcher-type alltoall` with EP (what the formulation prices), `allgather`
      (Megatron's default) without; `--moe-shared-expert-overlap` only with alltoall or flex
      (TransformerConfig).
    - MLA excludes `--group-query-attention` (validate_args); MLATransformerConfig defaults to YaRN
      RoPE (factor 40), so the model's plain RoPE is `--rope-type rope`.
    - `--mtp-num-layers` in a pipeline layout: `m` in the last virtual stage (validate_layer_layout).
    """
    model = job.model
    a = list(args)
    if model.is_moe:
        a = _router_flags(model, _expert_flags(job, plan, a, notes, arch), notes)
        a = _with_sequence_parallel(job, plan, a, notes)
    if model.multi_latent_attention:
        a = _mla_flags(model, a, notes)
    if model.notes and "Not modelled:" in model.notes:  # the catalog entry says what its spec leaves out
        missing = model.notes.split("Not modelled:", 1)[1].strip().split(". ")[0]
        if len(missing) > 160:
            missing = missing[:160].rsplit(",", 1)[0] + ", ..."
        notes.append(f"not launched, as not modelled ({model.name}'s catalog notes): {missing}")
    if model.mtp_num_layers:
        a += ["--mtp-num-layers", str(model.mtp_num_layers)]
        if layout is not None and getattr(plan.parallel, "pipeline_layout", None) is None:  # a given layout has its m
            i = a.index("--pipeline-model-parallel-layout") + 1
            layout = a[i] = _with_mtp(layout, model.mtp_num_layers)
        notes.append(f"the {model.mtp_num_layers} MTP module(s) run on the last pipeline stage")
    return a, layout


def _expert_flags(job: JobSpec, plan: Plan, a: list[str], notes: list[str], arch: int) -> list[str]:
    """Experts, expert parallelism, the token dispatcher, all-to-all and shared-expert overlap,
    grouped GEMMs (`moe_launch`'s rules)."""
    model = job.model
    ep, etp = _expert_parallel(plan)
    # with EP the job's dispatcher (alltoall: NCCL; flex: DeepEP/HybridEP, as the formulation prices
    # them); without EP, Megatron's default allgather dispatcher
    dispatcher = (getattr(job, "moe_token_dispatcher", None) or "alltoall") if ep > 1 else "allgather"
    a += ["--num-experts", str(model.num_experts), "--moe-ffn-hidden-size", str(model.moe_ffn_hidden_size),
          "--moe-router-topk", str(model.moe_router_topk), "--moe-layer-freq", moe_layer_freq_arg(model),
          "--expert-model-parallel-size", str(ep), "--expert-tensor-parallel-size", str(etp),
          "--moe-token-dispatcher-type", dispatcher]
    if model.moe_latent_size:  # Megatron-LM arguments.py --moe-latent-size (LatentMoE)
        a += ["--moe-latent-size", str(model.moe_latent_size)]
    if dispatcher == "flex":
        # HybridEP on a multi-node NVLink domain and where DeepEP has no config for the TP x EP group's size,
        # DeepEP (the default backend) elsewhere: the backend whose buffer the plan's memory counts
        backend = flex_backend(job.cluster, ep * etp)
        a += ["--moe-flex-dispatcher-backend", backend]
        notes.append(f"the flex dispatcher needs the {'HybridEP' if backend == 'hybridep' else 'DeepEP'} "
                     f"library installed")
        if backend == "hybridep" and ep * etp > job.cluster.domain_gpus:  # DeepEP hybrid-ep branch setup.py
            notes.append("its TP x EP group spans NVLink domains: build HybridEP with HYBRID_EP_MULTINODE=1")
    if getattr(job, "moe_a2a_overlap", False):
        # TransformerConfig: ep > 1, alltoall/flex, no full recompute, vp with pp > 1, bf16/fp16, no
        # shared-expert overlap, at most one MTP module (the space and the job enforce these);
        # --delay-wgrad-compute asserts overlap_moe_expert_parallel_comm (and, with
        # --overlap-grad-reduce, Transformer Engine >= 2.8: validate_args)
        a += ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
        notes.append("--overlap-moe-expert-parallel-comm --delay-wgrad-compute need Transformer Engine 2.8 or "
                     "newer with --overlap-grad-reduce")
    if model.moe_shared_expert_intermediate_size is not None:
        a += ["--moe-shared-expert-intermediate-size", str(model.moe_shared_expert_intermediate_size)]
        if model.moe_shared_expert_gate:
            a.append("--moe-shared-expert-gate")
        # off unless the job asks: the formulation prices the shared experts on the critical path
        # (formulation/moe.py: overlap is a stated default, off, as the Megatron-Bridge recipes)
        if (getattr(job, "moe_shared_expert_overlap", False) and dispatcher in ("alltoall", "flex")
                and not getattr(job, "moe_a2a_overlap", False)):
            a.append("--moe-shared-expert-overlap")
    if arch >= 8:
        a.append("--moe-grouped-gemm")
    else:
        notes.append("grouped GEMM kernels need compute capability 8 or newer: the experts run one GEMM each")
    return a


def _router_flags(model, a: list[str], notes: list[str]) -> list[str]:
    """The router: score function, expert bias, pre-softmax (the model's, or top-1 softmax's), the top-k scaling,
    group-limited routing, load balancing and token dropping (`moe_launch`'s rules)."""
    if model.moe_router_score_function != "softmax":
        a += ["--moe-router-score-function", model.moe_router_score_function]
    if model.moe_router_enable_expert_bias:
        a.append("--moe-router-enable-expert-bias")
    if model.moe_router_pre_softmax or (model.moe_router_topk == 1 and model.moe_router_score_function == "softmax"):
        a.append("--moe-router-pre-softmax")
    if model.moe_router_topk_scaling_factor is not None:
        a += ["--moe-router-topk-scaling-factor", _num(model.moe_router_topk_scaling_factor)]
    if model.moe_router_num_groups is not None:
        a += ["--moe-router-num-groups", str(model.moe_router_num_groups),
              "--moe-router-group-topk", str(model.moe_router_group_topk)]
    balance, coeff = (("seq_aux_loss", SEQ_AUX_LOSS_COEFF) if model.moe_router_enable_expert_bias
                      else ("aux_loss", MOE_AUX_LOSS_COEFF))
    a += ["--moe-router-load-balancing-type", balance, "--moe-aux-loss-coeff", _num(coeff)]
    notes.append(f"router balancing {balance} with coefficient {_num(coeff)} is a training choice, not the "
                 f"plan's: set your own")
    if model.moe_expert_capacity_factor is not None:
        a += ["--moe-expert-capacity-factor", _num(model.moe_expert_capacity_factor),
              "--moe-token-drop-policy", "probs"]
    return a


def _with_sequence_parallel(job: JobSpec, plan: Plan, a: list[str], notes: list[str]) -> list[str]:
    """Sequence parallelism added where Megatron needs it with MoE, and notes on the rules a plan
    from outside the planner's space may break (`moe_launch`'s rules)."""
    model, par = job.model, plan.parallel
    ep, etp = _expert_parallel(plan)
    if par.tp > 1 and "--sequence-parallel" not in a:
        a.append("--sequence-parallel")
        notes.append("MoE with tp > 1 trains only with --sequence-parallel (Megatron-LM's MoELayer refuses "
                     "otherwise): added")
    if model.add_bias_linear and etp > 1:
        notes.append(f"Megatron-LM builds MoE biases only with expert tensor parallelism 1; this plan has "
                     f"etp={etp}: it will refuse to start")
    world = job.cluster.num_gpus
    if model.moe_dims[0] % ep or world % (etp * ep * par.pp):
        notes.append(f"ep={ep} must divide the {model.num_experts} experts and etp x ep x pp must divide the "
                     f"{world} GPUs: Megatron-LM will refuse this plan")
    return a


def _mla_flags(model, a: list[str], notes: list[str]) -> list[str]:
    """Multi-latent attention: its ranks and head dimensions, no GQA flags, its Q/KV norms, plain RoPE."""
    a = _drop_flag(a, "--group-query-attention", 0)
    a = _drop_flag(a, "--num-query-groups", 1)
    a += ["--multi-latent-attention", "--kv-lora-rank", str(model.kv_lora_rank),
          "--qk-head-dim", str(model.qk_head_dim), "--qk-pos-emb-head-dim", str(model.qk_pos_emb_head_dim),
          "--v-head-dim", str(model.v_head_dim)]
    if model.q_lora_rank is not None:
        a += ["--q-lora-rank", str(model.q_lora_rank)]
    if "--qk-layernorm" not in a:
        a.append("--qk-layernorm")  # MLA's norms of the compressed Q and KV (DeepSeek-V2 Sec. 2.1)
    if model.is_dsa:
        a = _dsa_flags(model, a, notes)
    if model.is_dsv4:
        a = _dsv4_flags(model, a, notes)
    if model.position_embedding == "rope":
        a += mla_rope_flags(model, notes, dev=model.is_dsv4)
        if model.rope_scaling_factor is not None:
            notes.append("multi-latent attention takes YaRN scaling (--rope-type yarn --rotary-scaling-factor), "
                         "not Llama 3's: the plan trains with plain RoPE")
            a = _drop_flag(_drop_flag(a, "--use-rope-scaling", 0), "--rope-scaling-factor", 1)
    return a


# Megatron-Bridge's GLM-5 bridge (glm_moe_dsa/glm5_bridge.py at 067f987, ~138-141): the indexer's KL loss at
# this coefficient, on the selected keys only (the loss `formulation/dsa.py` prices)
DSA_INDEXER_LOSS_COEFF = 0.001


def _dsa_flags(model, a: list[str], notes: list[str]) -> list[str]:
    """DeepSeek Sparse Attention (Megatron-LM d98e8a6: flags derived from TransformerConfig's dsa_* fields):
    the indexer's shape, the fused cuDNN / FlashMLA kernels (`--dsa-kernel-backend cudnn`; the default
    `none` is a dense masked reference path), the indexer's sparse KL loss as Megatron-Bridge trains GLM-5,
    the indexer's RoPE layout and Hadamard rotation; RoPE fusion off ("RoPE fusion is not supported for
    DSAttention")."""
    n, d, k = model.dsa_dims
    a += ["--experimental-attention-variant", "dsa", "--dsa-indexer-n-heads", str(n), "--dsa-indexer-head-dim",
          str(d), "--dsa-indexer-topk", str(k), "--dsa-kernel-backend", "cudnn",
          "--dsa-indexer-loss-coeff", str(DSA_INDEXER_LOSS_COEFF), "--dsa-indexer-use-sparse-loss"]
    if model.dsa_index_sharing:  # every n-th layer computes the top-k (dsa.py `is_dsa_skip_topk_layer`)
        a += ["--dsa-indexer-topk-freq", str(model.dsa_indexer_topk_freq),
              "--dsa-indexer-skip-topk-offset", str(model.dsa_indexer_skip_topk_offset)]
    if model.dsa_indexer_rope_interleaved:
        a.append("--dsa-indexer-rope-interleaved")
    if not model.dsa_indexer_rotate_activation:
        a.append("--no-dsa-indexer-rotate-activation")
    if "--no-rope-fusion" not in a:
        a.append("--no-rope-fusion")
    notes.append("DeepSeek Sparse Attention runs on Transformer Engine with the cuDNN frontend's DSA kernels and "
                 "FlashMLA (flash_mla_sparse_fwd) installed; the indexer's loss coefficient "
                 f"{DSA_INDEXER_LOSS_COEFF} is Megatron-Bridge's GLM-5 setting, a training choice: set your own")
    return a


# DeepSeek-V4's recipes train the indexer's KL loss at this coefficient on the selected entries (Megatron-LM dev
# examples/moe_recipes/deepseek_v4_flash/gb200/mxfp8_SL4K_128GPU_TP1PP1EP64.yaml: dsa_indexer_loss_coeff 1e-2)
DSV4_INDEXER_LOSS_COEFF = 0.01


def _dsv4_flags(model, a: list[str], notes: list[str]) -> list[str]:
    """DeepSeek-V4 (Megatron-LM dev d48bd6be0a; flags derived from TransformerConfig's fields, as its recipes set
    them): `--experimental-attention-variant dsv4_hybrid`, the per-layer compression ratios and window, the
    indexer of the ratio-4 layers with its sparse loss, the grouped output projection, mHC's residual streams
    and Sinkhorn iterations, the hash-routed layers; the KV head's width as --kv-channels (qk_head_dim and
    kv_lora_rank are derived by Megatron from v_head_dim and the rope part)."""
    n_i, d_i, k = model.dsa_dims
    ratios = model.csa_compress_ratios
    a = _drop_flag(_drop_flag(a, "--kv-channels", 1), "--kv-lora-rank", 1)
    a += ["--kv-channels", str(model.v_head_dim), "--experimental-attention-variant", "dsv4_hybrid",
          "--csa-compress-ratios", "[" + ",".join(str(r) for r in ratios) + "]",
          "--csa-window-size", str(model.csa_window_size), "--dsa-indexer-n-heads", str(n_i),
          "--dsa-indexer-head-dim", str(d_i), "--dsa-indexer-topk", str(k), "--dsa-kernel-backend", "cudnn",
          "--dsa-indexer-loss-coeff", str(DSV4_INDEXER_LOSS_COEFF), "--dsa-indexer-use-sparse-loss",
          "--o-groups", str(model.o_groups), "--o-lora-rank", str(model.o_lora_rank)]
    if model.num_residual_streams > 1:
        a += ["--enable-hyper-connections", "--num-residual-streams", str(model.num_residual_streams),
              "--mhc-sinkhorn-iterations", str(model.mhc_sinkhorn_iterations)]
    if model.moe_n_hash_layers:
        a += ["--moe-n-hash-layers", str(model.moe_n_hash_layers)]
    if model.csa_compress_rotary_base is not None:
        a += ["--csa-compress-rotary-base", _num(model.csa_compress_rotary_base)]
    notes.append("DeepSeek-V4 needs Megatron-LM's dev branch (dsv4_hybrid attention, mHC, hash routing) with "
                 "FlashMLA and the cuDNN frontend's DSA kernels; the hash-routed layers need the tokenizer's token "
                 "ids and a trained token-to-expert table (a checkpoint's)")
    return a


def _drop_flag(args: list[str], flag: str, nvalues: int) -> list[str]:
    if flag not in args:
        return args
    i = args.index(flag)
    return args[:i] + args[i + 1 + nvalues:]
