"""Operations: running one operation on the topology, from lease to reply.

Owns: leasing a connection for a purpose, sending, retrying and pinning
(``operations.py``), which errors are retried (``retries.py``), deadlines
(``timeouts.py``), command monitoring events (``commands.py``), read and write concerns
(``concern.py``), bulk writes cut into batches (``bulk.py``), and sessions and
transactions (``session.py``, ``sessionopts.py``).

May import: :mod:`greenpool.client.topology`, :mod:`greenpool.client.config` and the
layers below the client; never the API.
"""

from greenpool import _moved

# This package took the name of the module that is now ``operations.operations``: the old
# module's names read here warn and name the new path.
__getattr__ = _moved.package_getattr(__name__, "greenpool.client.operations.operations")
