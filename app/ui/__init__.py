"""The operator dashboard: server-rendered pages under /ui."""
