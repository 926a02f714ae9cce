"""fenceline: an execution control plane."""
