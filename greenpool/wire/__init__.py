"""The wire layer: MongoDB's wire protocol, the handshake, authentication and sockets.

Its modules, by job: ``messages`` (message framing), ``compression`` (the
compressors), ``replies`` (what a reply means), ``handshake`` (the hello),
``auth`` (SCRAM), ``sockets`` (opening TCP/TLS/Unix sockets), ``link`` (the
transport: one command at a time) and ``connector`` (establishing a link
within its deadline; the pool connector).

Layer rule: modules here import each other, ``greenpool.errors``, ``greenpool.address``
and the pool core (a link is the pool's connector); never the client, cli or adapter
layers.
"""
