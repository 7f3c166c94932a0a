"""Disruption: deciding which nodes to remove or replace (consolidation, drift), within budgets."""
