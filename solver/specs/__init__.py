"""Frozen pydantic specs at the edge: model, GPU, cluster, job (`hf` reads Hugging Face
configs). Units live in field names; values are converted to SI once, in the `*_bytes`,
`*_s`, `*_flop_per_s` properties (`units` holds the constants). `request` is the schema of a
job as a mapping; `base.build` makes a spec from a mapping, naming bad fields by their path."""

from .cluster import ClusterSpec, LinkOverride, PoolSpec, require_uniform
from .gpu import GPUSpec
from .job import (
           FP4_RECIPES,
           FP8_RECIPES,
           PRECISIONS,
           QUANTIZED_RECIPES,
           RECOMPUTE_MODES,
           Constraints,
           JobSpec,
           Precision,
           precision_problem,
)
from .model import ModelSpec

__all__ = ["ModelSpec", "GPUSpec", "ClusterSpec", "LinkOverride", "PoolSpec", "require_uniform", "JobSpec", "Constraints", "RECOMPUTE_MODES",
           "FP4_RECIPES", "FP8_RECIPES", "PRECISIONS", "QUANTIZED_RECIPES", "Precision", "precision_problem"]
