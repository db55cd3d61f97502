"""ksmith built-in plugin: the ``ray`` executor, evaluations on the actors of a Ray cluster.

Ray is an optional extra (``pip install 'kernel-smith[ray]'``): importing this package never imports ray, so
ksmith works where it is not installed; ``--executor ray`` there is one line saying what to install.
"""
