"""The client layer: ``greenpool.Client`` with its topology, operations, sessions and cursors.

Layer rule: modules here import each other and the layers below (the pool core, the wire
layer, ``greenpool.errors``, ``greenpool.address``); never the cli or the adapter.

Inside the layer imports go one way, lazy ones included, so there is no cycle:
``client`` on top (it may import any of them); ``cursor`` and ``session`` below it,
reaching the rest only through ``operations`` (never ``client``, and ``session`` never
``cursor``); ``operations`` below them (``topology``, ``commands``, ``sdam``,
``readpref``, ``timeouts``); ``uri`` beside, for the settings. No module reaches
another greenpool module's private names.

Which module does what: docs/architecture.rst, the module map.
"""
