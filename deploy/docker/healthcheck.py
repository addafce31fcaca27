"""Container health check, with nothing but the standard library.

    python healthcheck.py tcp PORT            a TCP connect to 127.0.0.1:PORT (the collector's gRPC port)
    python healthcheck.py http PORT PATH      GET PATH on 127.0.0.1:PORT, over HTTPS first then HTTP (the
                                              dashboard's /_stcore/health; the certificate is not checked:
                                              this is the container asking itself)

Exit 0 when healthy, 1 otherwise (Docker's HEALTHCHECK contract).
"""

import socket
import ssl
import sys
import urllib.request


def main(argv):
    kind, port = argv[1], int(argv[2])
    if kind == "tcp":
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        return 0
    path = argv[3] if len(argv) > 3 else "/"
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for scheme in ("https", "http"):
        try:
            with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}{path}", timeout=3, context=ctx) as r:
                return 0 if r.status == 200 else 1
        except (OSError, ssl.SSLError):
            continue
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (OSError, ValueError, IndexError) as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        sys.exit(1)
