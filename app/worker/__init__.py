"""`fenceline worker`: a local agent that runs claimed task attempts as processes, over HTTP only."""
