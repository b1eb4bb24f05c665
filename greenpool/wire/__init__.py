"""The wire layer: MongoDB's wire protocol, the handshake, authentication and sockets.

A link is one established connection to one server: what the Client's connector gives
the pool as a connection's transport.

Layer rule: modules here import each other, the base (``greenpool.errors``,
``greenpool.address``) and the pool core (a link is the pool's connector); never the
client, cli or adapter layers.

Which module does what: docs/architecture.rst, the module map.
"""
