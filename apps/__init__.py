"""Applications on top of the library: the ``evolve`` CLI, the demo and reports. Nothing imports ``apps``."""
