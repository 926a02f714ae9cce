"""Attempt logs: one stream per epoch, and a try's log as its epochs in order."""
