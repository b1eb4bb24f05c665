"""The wire layer: MongoDB's wire protocol, the handshake, authentication and sockets.

Layer rule: modules here import each other, ``greenpool.errors``, ``greenpool.address``
and the pool core (a link is the pool's connector); never the client, tools or adapter
layers.
"""
