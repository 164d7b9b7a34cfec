"""The ``tether`` commands, one module per command group; ``tether.cli.main`` registers
them on the root group."""
