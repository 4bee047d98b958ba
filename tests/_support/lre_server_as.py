"""A whole lre (``Application``) in a process of its own, for attack tests
that run lre as another user (see lre_as.py).

argv[1] is the path of a config file. Prints one JSON line once lre listens
(``{"grpc": "127.0.0.1:PORT", "status": "127.0.0.1:PORT"}``) and stops lre
when its stdin reaches end of file.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from tests._support.configs import config_of
from tests._support.servers import ServerThread


def main() -> None:
    text = Path(sys.argv[1]).read_text()
    config_of(text)  # a clear error for a bad config before anything starts
    server = ServerThread(Path(sys.argv[1]).parent, text)
    ready = server.start()
    print(json.dumps({"grpc": ready.grpc_addresses[0], "status": ready.status_address}), flush=True)
    stop = threading.Event()

    def wait_for_end_of_input() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_end_of_input, daemon=True).start()
    stop.wait()
    server.stop()


if __name__ == "__main__":
    os.umask(0o077)
    main()
