"""ksmith plugin of the training integration (commands are registered here as they land)."""
