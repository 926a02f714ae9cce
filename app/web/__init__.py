"""The HTTP kit every router stands on: routes, problem responses, dependencies, body limits, docs pages."""
