"""Configuration: what a Client is configured with, decided before it talks to a server.

Owns: the Client's constructor arguments (``arguments.py``, PyMongo's MongoClient's),
connection strings (``uri.py``: parsing, validation, the seedlist rules, redaction), what
they configure (``settings.py``), the SRV and TXT lookups of ``mongodb+srv://``
(``dns.py``), read preferences (``readpref.py``), codec options (``codecs.py``), the TLS
context (``tlscontext.py``) and the URI options accepted without acting (``inert.py``).
Every other room reads these; read preferences, codecs and the seedlist lookups live here
because the connection string's own parsing needs them.

May import: the layers below the client (wire, pool, base); no other room of the client.
"""
