"""Entry point of the moto engine process: `python -m zae_limiter.local._moto_main`.

Runs moto's threaded server (the server that `moto.server.ThreadedMotoServer` wraps) in this
process's main thread, bound to 127.0.0.1, until SIGTERM or SIGINT. Binding in the main thread
makes a port that is already taken an immediate exit with a clear message, where
`ThreadedMotoServer.start()` would wait forever.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zae_limiter.local._moto_main")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    try:
        server = make_server(
            args.host,
            args.port,
            DomainDispatcherApplication(create_backend_app),
            threaded=True,
            request_handler=MotoRequestHandler,
        )
    except OSError as exc:
        print(f"moto: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        print("Address already in use" if exc.errno in (98, 48) else "", file=sys.stderr)
        return 3

    def stop(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"moto server listening on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
