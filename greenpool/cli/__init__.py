"""The command line: ``python -m greenpool check|server``, the demo
(``python -m greenpool.cli.demo``) and the embedded server they run, public as
``greenpool.testing.EmbeddedServer``.

Layer rule: the command line may import any layer of greenpool except the PyMongo adapter;
nothing in greenpool's library layers imports it.

Which module does what: docs/architecture.rst, the module map.
"""
