"""Bad input: every case exits with code 2, prints exactly one line on stderr, never a
traceback, and the line names the offending field (or file / name) so the user can fix it.

Most cases run in-process through `solveplan.cli.main` (fast); a handful run as a real
subprocess, the honest check that nothing escapes as a traceback."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import DATA, run_subprocess

MODEL = {"num_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "ffn_hidden_size": 2048, "vocab_size": 32000}
CLUSTER = {"gpu": "a100-80gb", "num_nodes": 4, "nvlink_gbyte_per_s": 300, "nic_gbit_per_s": 200}
GPU = {"peak_bf16_tflops": 300, "hbm_gib": 80, "hbm_gbyte_per_s": 2000}
HF_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1000}


def _with(base: dict, **changes) -> dict:
    d = dict(base)
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


def _yaml(d) -> str:
    return yaml.safe_dump(d)


# (id, file name or None, file text or None, argv with {f} for the file path, substrings the error line must hold)
CASES = [
    # names
    ("unknown-model-name", None, None, ["show", "gpt3-13"], ["NAME", "gpt3-13", "did you mean gpt3-13b"]),
    ("unknown-cluster-name", None, None, ["show", "a100-3rack"], ["NAME", "did you mean a100-2rack-4to1"]),
    ("unknown-cluster-family", None, None, ["show", "tpux64"], ["cluster family 'tpu'"]),
    ("family-not-multiple-of-8", None, None, ["show", "a100x12"], ["a100x12", "not a multiple of 8", "a100x8 or a100x16"]),
    ("family-name-ending-in-x", None, None, ["show", "mi300x64"], ["cluster family 'mi300'", "did you mean mi300xx64"]),
    ("family-zero-gpus", None, None, ["show", "a100x0"], ["a100x0", "not a multiple of 8"]),
    ("family-not-multiple-of-16", None, None, ["show", "v100x24"], ["v100x24", "not a multiple of 16"]),
    ("nonexistent-file", None, None, ["show", "no/such/model.yaml"], ["NAME", "does not exist"]),
    ("unknown-schema-kind", None, None, ["schema", "modle"], ["KIND", "modle", "did you mean model"]),
    ("unknown-command", None, None, ["modles"], ["modles", "did you mean models"]),
    ("unknown-option", None, None, ["models", "--jsn"], ["--jsn", "--json"]),
    ("missing-argument", None, None, ["show"], ["NAME"]),
    # model files
    ("heads-not-dividing-hidden", "m.yaml", _yaml(_with(MODEL, num_attention_heads=7)), ["show", "{f}"],
     ["num_attention_heads (7) must divide hidden_size (512)"]),
    ("kv-heads-not-dividing-heads", "m.yaml", _yaml(_with(MODEL, num_kv_heads=3)), ["show", "{f}"],
     ["num_kv_heads (3) must divide num_attention_heads (8)"]),
    ("zero-layers", "m.yaml", _yaml(_with(MODEL, num_layers=0)), ["show", "{f}"], ["model.num_layers", "outside the plausible range [1, 65536]"]),
    ("negative-hidden", "m.yaml", _yaml(_with(MODEL, hidden_size=-512)), ["show", "{f}"], ["model.hidden_size", "-512"]),
    ("non-integer-layers", "m.yaml", _yaml(_with(MODEL, num_layers=1.5)), ["show", "{f}"], ["model.num_layers", "1.5"]),
    ("string-size", "m.yaml", _yaml(_with(MODEL, hidden_size="big")), ["show", "{f}"], ["model.hidden_size", "'big'"]),
    ("unknown-key", "m.yaml", _yaml(_with(MODEL, hidden_sise=512)), ["show", "{f}"], ["model.hidden_sise", "unknown key"]),
    ("missing-required-field", "m.yaml", _yaml(_with(MODEL, ffn_hidden_size=None)), ["show", "{f}"],
     ["model.ffn_hidden_size", "required"]),
    ("non-boolean-flag", "m.yaml", _yaml(_with(MODEL, tied_embeddings="maybe")), ["show", "{f}"], ["model.tied_embeddings"]),
    ("zero-kv-heads", "m.yaml", _yaml(_with(MODEL, num_kv_heads=0)), ["show", "{f}"], ["model.num_kv_heads"]),
    ("negative-nominal-params", "m.yaml", _yaml(_with(MODEL, nominal_params_b=-1)), ["show", "{f}"],
     ["model.nominal_params_b"]),
    ("malformed-yaml", "m.yaml", "num_layers: [1, 2\n", ["show", "{f}"], ["m.yaml", "not valid YAML", "line"]),
    ("malformed-json", "m.json", '{"num_layers": 4,, }', ["show", "{f}"], ["m.json", "not valid JSON", "line 1"]),
    ("yaml-list", "m.yaml", "- a\n- b\n", ["show", "{f}"], ["m.yaml", "mapping", "list"]),
    ("json-list", "m.json", "[1, 2]", ["show", "{f}"], ["m.json", "mapping", "list"]),
    ("empty-file", "m.yaml", "", ["show", "{f}"], ["m.yaml", "empty"]),
    ("not-a-spec", "m.yaml", _yaml({"foo": 1}), ["show", "{f}"], ["m.yaml", "num_layers", "peak_bf16_tflops", "gpu"]),
    # Hugging Face configs
    ("hf-unsupported-architecture", "config.json",
     json.dumps({"model_type": "falcon", "architectures": ["FalconForCausalLM"], "hidden_size": 4096}),
     ["show", "{f}"], ["unsupported architecture 'falcon'", "supported: llama"]),
    ("hf-unsupported-architecture-name-only", "config.json", json.dumps({"architectures": ["T5ForConditionalGeneration"]}),
     ["show", "{f}"], ["unsupported architecture 'T5ForConditionalGeneration'"]),
    ("hf-missing-hidden-size", "config.json", json.dumps(_with(HF_LLAMA, hidden_size=None)), ["show", "{f}"],
     ["'hidden_size'", "missing"]),
    ("hf-mixture-of-experts", "config.json",
     json.dumps(_with(HF_LLAMA, model_type="granitemoe", num_local_experts=40, num_experts_per_tok=8)),
     ["show", "{f}"], ["'granitemoe' is a mixture-of-experts model", "supported mixture-of-experts families: mixtral"]),
    ("hf-moe-missing-expert-size", "config.json",
     json.dumps(_with(HF_LLAMA, model_type="qwen2_moe", num_experts=60, num_experts_per_tok=4)),
     ["show", "{f}"], ["(qwen2_moe)", "missing 'moe_intermediate_size'"]),
    ("hf-kv-heads-not-dividing", "config.json", json.dumps(_with(HF_LLAMA, num_key_value_heads=3)), ["show", "{f}"],
     ["num_key_value_heads (3)"]),
    ("hf-tie-not-boolean", "config.json", json.dumps(_with(HF_LLAMA, tie_word_embeddings="yes")), ["show", "{f}"],
     ["'tie_word_embeddings'"]),
    ("hf-negative-layers", "config.json",
     json.dumps({"model_type": "gpt2", "n_embd": 512, "n_layer": -2, "n_head": 8, "vocab_size": 100}),
     ["show", "{f}"], ["'n_layer'", "positive integer"]),
    ("hf-string-size", "config.json", json.dumps(_with(HF_LLAMA, intermediate_size="4k")), ["show", "{f}"],
     ["'intermediate_size'"]),
    # cluster files
    ("cluster-unknown-gpu", "c.yaml", _yaml(_with(CLUSTER, gpu="a100-90gb")), ["show", "{f}"],
     ["cluster.gpu", "unknown gpu 'a100-90gb'", "did you mean a100-80gb"]),
    ("cluster-bad-link-override-node", "c.yaml",
     _yaml(_with(CLUSTER, link_overrides=[{"src": 0, "dst": 7, "gbit_per_s": 100}])), ["show", "{f}"],
     ["link_overrides[0].dst", "node 7", "0..3"]),
    ("cluster-spine-below-one", "c.yaml", _yaml(_with(CLUSTER, spine_oversubscription=0.5)), ["show", "{f}"],
     ["cluster.spine_oversubscription", "0.5"]),
    ("cluster-missing-gpu", "c.yaml", _yaml(_with(CLUSTER, gpu=None)), ["show", "{f}"], ["cluster.gpu", "missing"]),
    ("cluster-zero-nic", "c.yaml", _yaml(_with(CLUSTER, nic_gbit_per_s=0)), ["show", "{f}"], ["cluster.nic_gbit_per_s"]),
    ("cluster-string-gpus-per-node", "c.yaml", _yaml(_with(CLUSTER, gpus_per_node="eight")), ["show", "{f}"],
     ["cluster.gpus_per_node", "'eight'"]),
    ("cluster-unknown-key", "c.yaml", _yaml(_with(CLUSTER, nvlink_gbps=300)), ["show", "{f}"],
     ["cluster.nvlink_gbps", "unknown key"]),
    ("cluster-zero-nodes-per-leaf", "c.yaml", _yaml(_with(CLUSTER, nodes_per_leaf=0)), ["show", "{f}"],
     ["cluster.nodes_per_leaf"]),
    ("cluster-inline-gpu-negative-peak", "c.yaml",
     _yaml(_with(CLUSTER, gpu={"name": "x", **_with(GPU, peak_bf16_tflops=-1)})), ["show", "{f}"],
     ["cluster.gpu.peak_bf16_tflops"]),
    # GPU files
    ("gpu-negative-peak", "g.yaml", _yaml(_with(GPU, peak_bf16_tflops=-5)), ["show", "{f}"], ["gpu.peak_bf16_tflops"]),
    ("gpu-efficiency-above-one", "g.yaml", _yaml(_with(GPU, matmul_efficiency=1.5)), ["show", "{f}"],
     ["gpu.matmul_efficiency", "1.5"]),
]

# Run these as real subprocesses (one of each broad kind); the rest in-process.
SUBPROCESS = {"unknown-model-name", "family-not-multiple-of-8", "malformed-yaml", "hf-unsupported-architecture",
              "cluster-unknown-gpu", "unknown-command", "string-size"}


def test_enough_kinds():
    assert len({c[0] for c in CASES}) == len(CASES) >= 30


def _check(code: int, out: str, err: str, needles: list[str]) -> None:
    lines = err.splitlines()
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Traceback" not in out
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("case_id,fname,text,argv,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input(cli, tmp_path, case_id, fname, text, argv, needles):
    if fname is not None:
        path = tmp_path / fname
        path.write_text(text)
        argv = [a.replace("{f}", str(path)) for a in argv]
    if case_id in SUBPROCESS:
        r = run_subprocess(*argv, cwd=tmp_path)
    else:
        r = cli(*argv)
    _check(r.code, r.out, r.err, needles)


def test_directory_without_config_json(cli):
    """A directory that holds no config.json is refused with one line naming it."""
    r = cli("show", str(DATA / "hf"))
    _check(r.code, r.out, r.err, ["NAME", "directory without a config.json"])
