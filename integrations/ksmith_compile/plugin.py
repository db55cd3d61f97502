"""ksmith plugin of the torch.compile integration (commands are registered here as they land)."""
