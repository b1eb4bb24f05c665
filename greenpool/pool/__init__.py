"""The pool core: CMAP's pool, its waits, options, events and counters.

Layer rule: modules here import only each other, ``greenpool.errors`` and
``greenpool.address``; never the wire, client, cli or adapter layers. No socket code
lives here: a connector callable supplied by the caller opens connections.
"""
