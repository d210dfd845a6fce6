"""A batch of parallel configurations as a struct of numpy arrays (one entry per shape)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

RECOMPUTE_CODES = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAMES = {v: k for k, v in RECOMPUTE_CODES.items()}
BOOL_FIELDS = ("sequence_parallel", "account_for_embedding", "account_for_loss")
# The fields a caller may leave out, and what they then hold for every shape.
OPTIONAL_DEFAULTS = {"ep": 1, "etp": 1, "account_for_embedding": False, "account_for_loss": False}


@dataclass(frozen=True, init=False)
class Shapes:
    """Parallel degrees and knobs; `dp` is derived by the space (tp*cp*pp*dp = GPUs)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    vp: np.ndarray
    micro_batch_size: np.ndarray
    recompute: np.ndarray  # RECOMPUTE_CODES
    sequence_parallel: np.ndarray  # bool
    zero: np.ndarray  # 0 plain DP, 1 distributed optimizer / ZeRO-1, 2, 3
    # expert parallelism of the MoE layers (Megatron-Core's MoE parallel folding: the experts'
    # etp x ep x expert-dp spans the same tp x cp x dp GPUs as attention); 1 for a dense model
    ep: np.ndarray
    etp: np.ndarray
    # Megatron's --account-for-embedding/loss-in-pipeline-split: the embedding / the loss count as
    # a layer and the layers are split as Megatron splits them (space/pipeline_split.py); False
    # for a shape whose split the planner chooses
    account_for_embedding: np.ndarray
    account_for_loss: np.ndarray

    def __init__(self, tp, pp, dp, cp, vp, micro_batch_size, recompute, sequence_parallel, zero,
                 ep=None, etp=None, account_for_embedding=None, account_for_loss=None):
        """Every field becomes an array of one length (int64; bool for BOOL_FIELDS); the last four,
        left out, default to ep = etp = 1 and neither accounted (`OPTIONAL_DEFAULTS`), so that
        after construction no field is None."""
        given = dict(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=micro_batch_size, recompute=recompute,
                     sequence_parallel=sequence_parallel, zero=zero, ep=ep, etp=etp,
                     account_for_embedding=account_for_embedding, account_for_loss=account_for_loss)
        n = len(tp)
        for f in fields(self):
            dtype = bool if f.name in BOOL_FIELDS else np.int64
            value = given[f.name]
            if value is None and f.name in OPTIONAL_DEFAULTS:
                value = np.full(n, OPTIONAL_DEFAULTS[f.name], dtype=dtype)
            arr = np.asarray(value)
            if arr.shape != (n,):
                raise ValueError(f"Shapes.{f.name} has shape {arr.shape}, expected ({n},)")
            object.__setattr__(self, f.name, arr.astype(dtype))

    def __len__(self) -> int:
        return len(self.tp)

    @classmethod
    def single(cls, *, tp=1, pp=1, dp=1, cp=1, vp=1, micro_batch_size=1, recompute="none",
               sequence_parallel=False, zero=0, ep=1, etp=1, account_for_embedding=False,
               account_for_loss=False) -> Shapes:
        code = RECOMPUTE_CODES[recompute] if isinstance(recompute, str) else int(recompute)
        return cls(*(np.array([v]) for v in (tp, pp, dp, cp, vp, micro_batch_size, code, sequence_parallel, zero,
                                             ep, etp, account_for_embedding, account_for_loss)))

    @classmethod
    def concat(cls, parts: list[Shapes]) -> Shapes:
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))

    def take(self, idx) -> Shapes:
        idx = np.atleast_1d(idx)
        return Shapes(*(getattr(self, f.name)[idx] for f in fields(self)))

    def row(self, i: int) -> dict:
        """One shape as plain Python values (Megatron-LM knob names)."""
        d = {f.name: getattr(self, f.name)[i].item() for f in fields(self)}
        d["recompute"] = RECOMPUTE_NAMES[d["recompute"]]
        for name in BOOL_FIELDS:
            d[name] = bool(d[name])
        return d

    @property
    def accounted(self) -> np.ndarray:
        """Per shape: the embedding or the loss counts as a layer (its split is Megatron's)."""
        return self.account_for_embedding | self.account_for_loss

    def num_microbatches(self, global_batch_size: int) -> np.ndarray:
        return global_batch_size // (self.dp * self.micro_batch_size)
