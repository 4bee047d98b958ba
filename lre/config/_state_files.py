"""Names of the files lre keeps in its state directory (``global.state_dir``),
shared by the server, which writes them, and the CLI, which reads them."""

from __future__ import annotations

#: The bearer token of the status listener's POST routes (mode 0600).
ADMIN_TOKEN_FILE = "admin.token"
#: Client-visible hit counts kept across restarts (``lre stats --zero``).
HITS_FILE = "hits.json"
