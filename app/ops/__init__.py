"""Operating the server: health and /metrics routes, start-up checks, migrations."""
