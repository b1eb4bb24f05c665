"""What of PyMongo's public API greenpool.Client does not have, and why.

The one list of it: ``tests/test_pymongo_surface.py`` walks PyMongo's
MongoClient, Database, Collection, Cursor and CommandCursor and requires every
public name to be on greenpool's counterpart, with a signature that takes the
same arguments, or to be here; the porting guide (docs/guides/porting.rst)
prints each entry, and the test holds it to that.

Rules. Data only.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NOT_HERE"]

#: PyMongo's public names the Client's classes lack, as ``Class.name``, and why.
NOT_HERE: Final[dict[str, str]] = {}
