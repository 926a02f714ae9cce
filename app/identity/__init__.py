"""Seats and executions: who may fill a worker seat, and which incarnation is current."""
