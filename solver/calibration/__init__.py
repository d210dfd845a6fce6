"""Calibration: fit the formulation to measurements, and check it against published runs."""
