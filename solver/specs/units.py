"""Unit constants. SI inside the code, the unit in every quantity's name (docs/DESIGN.md section 6);
catalog keys carry their human unit and are converted once, at the spec boundary (the specs'
properties); reports use the same constants to show bytes as GiB."""

GIB = 1024**3  # bytes per GiB (memory sizes: hbm_gib, runtime_reserve_gib, reports)
GBIT_BYTES = 1e9 / 8  # bytes per Gbit (link rates: nic_gbit_per_s, link matrices)
