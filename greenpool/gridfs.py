"""GridFS on :class:`greenpool.Client`, as PyMongo's :mod:`gridfs`.

::

    from greenpool.gridfs import GridFS, GridFSBucket

The same classes, methods and behaviour as PyMongo 4.20's ``gridfs``, on a
greenpool database; the errors are PyMongo's own (:mod:`gridfs.errors`), so code
ported from PyMongo keeps its ``except gridfs.errors.NoFile``.
"""

from gridfs.errors import NoFile

from greenpool.client.api.gridfile import DEFAULT_CHUNK_SIZE, GridIn, GridOut, GridOutCursor
from greenpool.client.api.gridfs import GridFS, GridFSBucket

__all__ = ["DEFAULT_CHUNK_SIZE", "GridFS", "GridFSBucket", "GridIn", "GridOut",
           "GridOutCursor", "NoFile"]
