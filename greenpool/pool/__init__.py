"""The pool core: CMAP's pool, its waits, options, events and counters.

Layer rule: modules here import only each other and the base (``greenpool.errors``,
``greenpool.address``); never the wire, client, cli or adapter layers. No socket code
lives here: a connector callable supplied by the caller opens connections.

Which module does what: docs/architecture.rst, the module map.
"""
