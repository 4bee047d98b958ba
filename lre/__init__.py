"""lre: local remote execution.

One process that is a Remote Execution API v2 server, content-addressable
store, action cache, scheduler and worker for Bazel and Buck2 on a laptop.
See docs/architecture.md for the package map.
"""

__version__ = "0.1.0"
