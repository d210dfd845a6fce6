"""Sliding-window attention under Megatron-LM and torchtitan: the fused kernels skip the blocks
outside the band (kernels.flash_attention_s), the layers that attend through the window are read from
the Hugging Face files (sliding_window_pattern, layer_types), and the launch builds the same window
(--window-size, --window-attn-skip-freq; context parallelism gathers K and V on windowed layers)."""

import json

import numpy as np
import pytest

from conftest import DATA
from solveplan.catalog import load_gpu, load_model
from solveplan.formulation.kernels import S_HALF, flash_attention_s
from solveplan.render.megatron import cp_comm_flags, window_flags
from solveplan.specs import ModelSpec
from solveplan.specs.hf import model_from_hf_config


def _attn(window=None, seq=4096.0, s_q=None):
    kw = dict(batch=1.0, heads=8.0, s_q=s_q or seq, s_k=seq, head_dim=64.0, causal=True, flop_per_s=1e15,
              efficiency=0.5, exp_per_s=4e12, overlap_exp=True)
    fwd, bwd = flash_attention_s(**kw, window=window)
    return float(fwd), float(bwd)


def test_a_window_as_long_as_the_sequence_is_the_causal_mask():
    assert _attn(window=4096.0) == _attn() == _attn(window=10_000.0)
    assert _attn(window=4096.0, s_q=1024.0) == _attn(s_q=1024.0)  # context parallel: s/4 queries per rank


def test_the_band_costs_its_keys_and_its_edge_blocks():
    """A 128-token window at 4096 tokens: each query sees 128 (1 - 128/8192) keys, and its 128-query tile
    computes two 128-key tiles (useful fraction keys / (keys + S_HALF)): about 2 x 128 of the causal 2048."""
    w, s = 128.0, 4096.0
    keys = w * (1 - w / (2 * s))
    expected = (keys / (keys / (keys + S_HALF))) / ((s / 2) / (s / (s + S_HALF)))
    assert _attn(window=w)[0] / _attn()[0] == pytest.approx(expected, rel=1e-9)
    assert 0.1 < expected < 0.13
    times = [_attn(window=x)[0] for x in (128.0, 512.0, 2048.0, 4096.0)]
    assert times == sorted(times)


def test_hf_patterns_become_megatron_skip_frequencies():
    """GPT-OSS (layer_types alternating from a sliding layer) and Gemma 3 (sliding_window_pattern 6) map to
    Megatron's window_attn_skip_freq n: layer_number % n != 0 attends through the window."""
    oss = load_model(str(DATA / "hf" / "gpt-oss-120b" / "config.json"))
    assert (oss.sliding_window, oss.sliding_window_pattern, oss.windowed_layers) == (128, 2, 18)
    assert oss.window_mask[:4] == (True, False, True, False)
    assert window_flags(oss) == ["--window-size", "127,0", "--window-attn-skip-freq", "2"]
    gemma = load_model(str(DATA / "hf" / "gemma-3-1b-it" / "config.json"))
    assert gemma.sliding_window_pattern == 6 and sum(not w for w in gemma.window_mask) == 4
    mistral = load_model(str(DATA / "hf" / "mistral-7b" / "config.json"))
    assert window_flags(mistral) == (["--window-size", "4095,0"] if mistral.sliding_window else [])


def test_qwen_max_window_layers_leave_the_first_layers_full():
    data = json.loads((DATA / "hf" / "Qwen3-4B" / "config.json").read_text())
    m = model_from_hf_config({**data, "use_sliding_window": True, "sliding_window": 1024, "max_window_layers": 30},
                             "q")
    assert m.sliding_window_pattern is None and m.windowed_layers == m.num_layers - 30
    assert m.window_mask == (False,) * 30 + (True,) * (m.num_layers - 30)
    assert window_flags(m)[-1] == "[" + ",".join(["0"] * 30 + ["1"] * (m.num_layers - 30)) + "]"


def test_context_parallel_gathers_k_and_v_on_windowed_layers():
    oss = load_model(str(DATA / "hf" / "gpt-oss-120b" / "config.json"))
    plain = oss.model_copy(update=dict(softmax_type="vanilla"))  # GPT-OSS's window without its sinks
    assert cp_comm_flags(plain, 1) == []
    flags = cp_comm_flags(plain, 2)
    assert flags[0] == "--cp-comm-type" and flags[1:3] == ["all_gather", "p2p"] and len(flags) == 1 + oss.num_layers
    every = plain.model_copy(update=dict(sliding_window_pattern=None, sliding_window_layers=None))
    assert cp_comm_flags(every, 2) == ["--cp-comm-type", "all_gather"]
    # with its sinks, Transformer Engine runs CP by all-to-all only, which holds whole sequences: the window too
    assert cp_comm_flags(oss, 2) == ["--cp-comm-type", "a2a"] and cp_comm_flags(oss, 1) == []


def test_a_pattern_must_agree_with_the_count():
    base = dict(name="w", num_layers=12, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024, vocab_size=1000,
                sliding_window=64)
    assert ModelSpec(**base, sliding_window_pattern=3).windowed_layers == 8
    assert ModelSpec(**base, sliding_window_pattern=3, sliding_window_layers=8).windowed_layers == 8
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        ModelSpec(**base, sliding_window_pattern=3, sliding_window_layers=6)
    with pytest.raises(ValueError, match="sliding_window_pattern"):
        ModelSpec(**{**base, "sliding_window": None}, sliding_window_pattern=3)


def test_a_window_makes_gpt_oss_attention_cheaper_in_megatron():
    """GPT-OSS 120B at 32k tokens on H100: half its layers attend through 128 tokens, so the plan's attention
    time drops to about half the full-causal one; the transformers stack prices its own explicit masks instead."""
    from solveplan.formulation.coefficients import stage_coefficients
    from solveplan.space.shapes import Shapes
    from solveplan.catalog import load_cluster
    oss = load_model("gpt-oss-120b")
    full = oss.model_copy(update=dict(sliding_window=None, sliding_window_layers=None, sliding_window_pattern=None))
    one = np.ones(1, dtype=np.int64)
    shapes = Shapes(tp=one, pp=one, dp=one * 8, cp=one, vp=one, micro_batch_size=one, recompute=one * 0,
                    sequence_parallel=np.zeros(1, bool), zero=one, ep=one * 8, etp=one)
    cl = load_cluster("h100x8")
    a, b = (stage_coefficients(m, cl, shapes, global_batch_size=8, seq_length=32768) for m in (oss, full))
    assert float(a.layer_compute_s[0]) < 0.85 * float(b.layer_compute_s[0])
    assert load_gpu("h100-sxm") is not None


def test_show_and_the_launch_state_the_window(cli):
    assert "sliding window 128 on 18 of 36 layers" in cli("show", "gpt-oss-120b").out
    assert "sliding window" not in cli("show", "llama3.1-8b").out
    out = cli("optimize", "--model", "gpt-oss-20b", "--cluster", "h100x16", "--tp", "1", "--pp", "1", "--cp", "2",
              "--ep", "8", "--etp", "1", "--format", "megatron")
    assert out.code == 0, out.err
    assert "--window-size '127,0'" in out.out and "--window-attn-skip-freq 2" in out.out
    assert "--cp-comm-type a2a" in out.out  # its attention sinks: all-to-all CP (test above)


def test_torchtitan_runs_the_decoder_without_a_window():
    """torchtitan builds Mistral or Gemma as its Llama, with full causal attention: the window is not
    priced there, nor counted in its reported FLOPs (Megatron's are the band's)."""
    from solveplan.catalog import load_cluster
    from solveplan.formulation.coefficients import stage_coefficients
    from solveplan.formulation.flops import reported_flop_per_step
    from solveplan.space.shapes import Shapes
    mistral = load_model("mistral-7b")
    full = mistral.model_copy(update=dict(sliding_window=None))
    one = np.ones(1, dtype=np.int64)
    shapes = Shapes(tp=one, pp=one, dp=one * 8, cp=one, vp=one, micro_batch_size=one, recompute=one * 0,
                    sequence_parallel=np.zeros(1, bool), zero=one * 2)
    cl = load_cluster("h100x8")
    kw = dict(global_batch_size=8, seq_length=16384)
    tt = [stage_coefficients(m, cl, shapes, framework="torchtitan", **kw) for m in (mistral, full)]
    assert np.array_equal(tt[0].layer_compute_s, tt[1].layer_compute_s)
    mg = [stage_coefficients(m, cl, shapes, **kw) for m in (mistral, full)]
    assert float(mg[0].layer_compute_s[0]) < float(mg[1].layer_compute_s[0])
    assert reported_flop_per_step(mistral, 8, 16384, 0, "torchtitan") == reported_flop_per_step(full, 8, 16384, 0)
    assert reported_flop_per_step(mistral, 8, 16384, 0)[0] < reported_flop_per_step(full, 8, 16384, 0)[0]


def test_torchtitan_job_says_the_window_is_not_built(cli):
    out = cli("optimize", "--model", "mistral-7b", "--cluster", "h100x8", "--framework", "torchtitan", "--json")
    assert out.code == 0, out.err
    import json as _json
    notes = _json.loads(out.out)["torchtitan_notes"]
    assert any("no sliding window" in n for n in notes)


def test_layer_types_of_another_order_are_kept_layer_by_layer():
    """A file whose full-attention layers are not every n-th (Step-3.7-Flash's layer_types: the first of every
    four full) keeps its layers as Megatron's list form, so the launch windows the same layers."""
    data = json.loads((DATA / "hf" / "Qwen3-4B" / "config.json").read_text())
    L = data["num_hidden_layers"]
    types = ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(L)]
    m = model_from_hf_config({**data, "model_type": "mistral", "sliding_window": 512, "layer_types": types}, "s")
    assert m.sliding_window_pattern == tuple(int(i % 4 != 0) for i in range(L))
    assert m.window_mask[:5] == (False, True, True, True, False) and m.windowed_layers == L - (L + 3) // 4
    flag = window_flags(m)
    assert flag[2] == "--window-attn-skip-freq" and flag[3].startswith("[0,1,1,1,0,") and flag[3].count(",") == L - 1
    with pytest.raises(ValueError, match="0 or 1 for each of the"):
        ModelSpec(name="w", num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024,
                  vocab_size=1000, sliding_window=64, sliding_window_pattern=(1, 0, 1))
