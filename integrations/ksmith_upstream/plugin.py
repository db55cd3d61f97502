"""ksmith plugin of the upstream integration (commands are registered here as they land)."""
