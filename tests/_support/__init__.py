"""Plumbing shared by the test folders, one job a module.

- ``actions``: digests computed by the test itself, input trees, Actions and
  Commands as a client would build them, and putting their blobs into a store.
- ``reapi``: the blocking REAPI client the tests talk to lre with, and readers
  of what Execute returns.
- ``configs``: small complete lre configs and turning a config text into a
  ``Config``.
- ``servers``: starting the real servers: the cache services on loopback in
  the test's Trio run, a whole ``Application`` in the test's Trio run or in a
  thread of its own.
- ``processes``: external tools a test needs, processes found by command
  line, polling until something holds.

Fixtures stay in each folder's ``conftest.py``, built from these modules; no
test module imports another folder's ``conftest``.
"""
