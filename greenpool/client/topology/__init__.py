"""The topology: the deployment as the Client sees it, kept current by its monitors.

Owns: the topology and server selection's wait (``topology.py``), one server with its
pool and monitor (``server.py``), the SDAM rules (``discovery.py``: what a check's
outcome changes; ``sdam.py``: what an error means), the monitors (``monitor.py``,
``checker.py``, ``roundtrips.py``), the selection rules (``selection.py``), SRV polling
(``srvpoll.py``) and SDAM's log messages (``topologylog.py``).

May import: :mod:`greenpool.client.config` and the layers below the client; never the
operations or the API.
"""

from greenpool import _moved

# This package took the name of the module that is now ``topology.topology``: the old
# module's names read here warn and name the new path.
__getattr__ = _moved.package_getattr(__name__, "greenpool.client.topology.topology")
