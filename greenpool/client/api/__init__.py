"""The PyMongo-shaped API: what an application calls.

Owns: :class:`greenpool.Client` (``client.py``: checks each call's arguments and
delegates), :class:`greenpool.Database` (``database.py``), :class:`greenpool.Collection`
(``collection.py``), the cursors (``cursor.py``, ``findcursor.py``).

May import: every other room of the client (operations, topology, config) and the layers
below the client.
"""
