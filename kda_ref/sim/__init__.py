"""Cost-model simulation of the prefix caches at any model's sizes (no model run): see
:mod:`kda_ref.sim.simulator`; the policy set and the benchmark driver are in :mod:`kda_ref.sim.policies`."""

from .simulator import ALPHA_GRID, CacheSimulator, SimResult, SimulationError, tune_alpha

__all__ = ["ALPHA_GRID", "CacheSimulator", "SimResult", "SimulationError", "tune_alpha"]
