"""solveplan: provably optimal parallel training plans for LLMs on GPU clusters.

Flow (one direction): specs -> space -> formulation -> encoding / baselines -> plan
-> renderers and front ends. See ../shared/DESIGN.md and README.md.
"""

__version__ = "0.1.0"
