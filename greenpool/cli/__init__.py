"""The command line: ``python -m greenpool check|server`` and the demo
(``python -m greenpool.cli.demo``). The servers they run live in :mod:`greenpool.testing`.

Layer rule: the command line may import any layer of greenpool except the PyMongo adapter;
it only calls into :mod:`greenpool.testing` for servers, and nothing in greenpool's
library layers imports it.

Which module does what: docs/architecture.rst, the module map.
"""
