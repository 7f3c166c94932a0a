"""The scheduling engine: requirement algebra, pod compilation, topology and the solver."""
