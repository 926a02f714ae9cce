"""`fenceline launcher`: every claimed image work item runs as one Kubernetes Pod per attempt."""
