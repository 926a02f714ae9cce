"""Placing work and watching it: claims and WorkItems, agent reports, reapers, observations.

Execution hands back exactly one outcome per attempt and never reads retry policy.
"""
