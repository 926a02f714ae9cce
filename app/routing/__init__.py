"""Routing: which claim may take which ready work (queues, pools, priorities, tenant turns and caps)."""
