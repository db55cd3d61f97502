"""ksmith built-in plugin: ``ksmith bench``, many problems at once, summarised the way KernelBench does."""
