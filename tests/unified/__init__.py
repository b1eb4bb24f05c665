"""The project's runner for the unified test format, written against PyMongo's public API
so that the same code drives ``pymongo.MongoClient`` (the reference) and
``greenpool.Client``.

* ``files.py``: reading a test file (Extended JSON, schema versions);
* ``deployment.py``: what the test server is, and ``runOnRequirements``;
* ``runner.py``: one test: entities, operations, expectations, outcome, cleanup;
* ``arguments.py``: the spec's argument names and values in PyMongo's API;
* ``operations.py``: each entity operation as the PyMongo call it names;
* ``results.py``: PyMongo's result objects as the documents the files expect;
* ``suite.py``: a spec directory as one test per file and client, with the table of what
  is not run and why.

The matching rules (``$$`` operators, events, errors) are tests/unified_match.py's, which
the older mini runners share.
"""
