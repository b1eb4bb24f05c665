"""Tools: ``python -m greenpool check|server``, the demo and the embedded server.

Layer rule: tools may import any layer of greenpool except the PyMongo adapter; nothing in
greenpool's library layers imports a tool.
"""
