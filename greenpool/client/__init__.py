"""The client layer: ``greenpool.Client``, in four rooms whose imports point one way.

* :mod:`greenpool.client.api`: the PyMongo-shaped API (Client, Database, Collection,
  cursors);
* :mod:`greenpool.client.operations`: running an operation (leases, retries, timeouts,
  commands, concerns, bulk splitting, sessions);
* :mod:`greenpool.client.topology`: the deployment (discovery, SDAM, monitors, server
  selection, SRV polling);
* :mod:`greenpool.client.config`: what the Client is configured with (connection
  strings, settings, read preferences, codecs, TLS, DNS seedlists).

Layer rule: api imports operations, topology and config; operations imports topology
and config; topology imports config; config imports no room. Every room may import the
layers below the client (the wire layer, the pool core, the base modules); none imports
the command line, the test servers or the adapter. No module reaches another greenpool
module's private names. ``tests/test_layers.py`` enforces it.

Which module does what: docs/architecture.rst, the module map; the rooms' table:
docs/development.rst.
"""

from greenpool import _moved

# ``from greenpool.client import Client`` was once documented: public names read here
# warn and name their public path.
__getattr__ = _moved.package_getattr(__name__, "greenpool")
