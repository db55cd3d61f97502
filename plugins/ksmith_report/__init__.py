"""ksmith built-in plugin: ``ksmith report``, one self-contained HTML file per run."""
