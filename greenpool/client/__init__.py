"""The client layer: ``greenpool.Client`` with its topology, operations, sessions and cursors.

Layer rule: modules here import each other and the layers below (the pool core, the wire
layer, ``greenpool.errors``, ``greenpool.address``); never the tools or the adapter.
"""
