"""Store.serve_admin: the dashboard, /metrics and `postbox --admin` from a Python application."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import postbox

ROOT = Path(__file__).resolve().parents[2]


def postbox_bin() -> str:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    path = Path(os.environ.get("POSTBOX_BIN", target / "debug" / "postbox"))
    if not path.exists():
        pytest.fail(f"the postbox command is not built at {path}: cargo build -p postbox-cli")
    return str(path)


def get(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("X-Postbox-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def request(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (Host included), as a browser could send it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        if body:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def post(url: str, token: str | None) -> int:
    req = urllib.request.Request(url, method="POST", data=b"")
    if token is not None:
        req.add_header("X-Postbox-Token", token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([postbox_bin(), *args], input=stdin, capture_output=True, timeout=60)


def test_the_command_reaches_the_store_this_process_holds(tmp_store: postbox.Store) -> None:
    jobs = tmp_store.queue("jobs")
    jobs.send(b"one")
    jobs.send(b"two")
    with tmp_store.serve_admin("127.0.0.1:0", allow_actions=True, token="s3cret") as admin:
        assert admin.url == f"http://127.0.0.1:{admin.port}/"
        assert admin.token == "s3cret"
        assert "actions=True" in repr(admin)

        # Opened by path the store is busy; through the endpoint it answers.
        busy = run("queues", str(tmp_store.path))
        assert busy.returncode == 3 and b"--admin" in busy.stderr
        # Every command needs the token, reading ones too.
        no_token = run("--json", "--admin", admin.url, "queues")
        assert no_token.returncode == 1 and b"token" in no_token.stderr
        out = run("--json", "--admin", admin.url, "--token", "s3cret", "queues")
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["queues"][0]["name"] == "jobs"
        assert doc["queues"][0]["counts"]["active"] == 2

        refused = run("--admin", admin.url, "send", "jobs", stdin=b"no token")
        assert refused.returncode == 1 and b"token" in refused.stderr
        sent = run("--admin", admin.url, "--token", "s3cret", "send", "jobs", stdin=b"three")
        assert sent.returncode == 0, sent.stderr
        assert jobs.stats().active == 3

        status, text = get(admin.url + "metrics")
        assert status == 200
        assert 'postbox_queue_messages{queue="jobs",state="active"} 3' in text
        assert 'postbox_queue_sent_total{queue="jobs"} 3' in text

        status, text = get(admin.url + "api/overview")
        assert json.loads(text)["queues"][0]["sent_total"] == 3
    # Stopped: nobody listens any more (refused, or reset by the closing listener), and the
    # store is still open.
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        get(admin.url + "metrics")
    assert jobs.stats().active == 3


def test_resubmit_needs_actions_and_the_token(tmp_store: postbox.Store) -> None:
    jobs = tmp_store.queue("jobs")
    jobs.send(b"poison")
    with jobs.receive(timeout=0) as m:
        m.dead_letter("Poison", "cannot parse")
    msg_id = jobs.dead_letters.peek().id
    with tmp_store.serve_admin() as read_only:
        # A token even without actions: dead letters and commands need it.
        assert isinstance(read_only.token, str) and len(read_only.token) == 32
        assert "actions=False" in repr(read_only)
        url = f"{read_only.url}api/resubmit?queue=jobs&id={msg_id}"
        assert post(url, "x") == 403
        assert post(url, read_only.token) == 403
        assert get(f"{read_only.url}api/dead-letters?queue=jobs")[0] == 403
        status, text = get(f"{read_only.url}api/dead-letters?queue=jobs", read_only.token)
        assert status == 200 and json.loads(text)["dead_letters"][0]["body"] == "poison"
    with tmp_store.serve_admin(allow_actions=True) as admin:
        assert admin.token is not None and len(admin.token) == 32
        url = f"{admin.url}api/resubmit?queue=jobs&id={msg_id}"
        assert post(url, "wrong") == 403
        assert post(url, admin.token) == 200
    s = jobs.stats()
    assert (s.active, s.dead_lettered) == (1, 0)


def test_bad_addresses_and_a_closed_store(tmp_store: postbox.Store) -> None:
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.serve_admin("not an address")
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.serve_admin(allow_actions=True, token="")
    with pytest.raises(postbox.InvalidArgumentError):
        tmp_store.serve_admin(token="has space")
    with tmp_store.serve_admin() as first:
        with pytest.raises(postbox.IoError):
            tmp_store.serve_admin(f"127.0.0.1:{first.port}")
    tmp_store.close()
    with pytest.raises(postbox.ClosedError):
        tmp_store.serve_admin()


def test_pages_of_other_sites_read_and_change_nothing(tmp_store: postbox.Store) -> None:
    """Issue 26: DNS rebinding and simple cross-site requests are refused."""
    orders = tmp_store.queue("orders")
    orders.send(b"card 4111")
    browse = json.dumps({"args": ["postbox", "browse", "(admin)", "orders"]}).encode()
    with tmp_store.serve_admin(allow_actions=True, token="t0ken") as admin:
        port = admin.port
        # A rebinding page names its own host: refused, on every route, token or not.
        for method, path in [
            ("GET", "/"),
            ("GET", "/metrics"),
            ("GET", "/api/overview"),
            ("GET", "/api/dead-letters?queue=orders"),
            ("POST", "/api/command"),
        ]:
            status, headers, body = request(
                port,
                method,
                path,
                {"Host": f"rebind.example:{port}", "X-Postbox-Token": "t0ken"},
                browse if method == "POST" else b"",
            )
            assert status == 421, (path, body)
            assert b"4111" not in body
        # A simple cross-site POST: text/plain, no custom header.
        status, headers, body = request(
            port,
            "POST",
            "/api/command",
            {
                "Host": f"127.0.0.1:{port}",
                "Origin": "http://evil.example",
                "Content-Type": "text/plain",
            },
            browse,
        )
        assert status == 403 and b"4111" not in body
        assert not any(k.startswith("access-control-") for k in headers)
        # The preflight for a fetch with the token header gets no permission.
        status, headers, _ = request(
            port,
            "OPTIONS",
            "/api/command",
            {
                "Host": f"127.0.0.1:{port}",
                "Origin": "http://evil.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-postbox-token",
            },
        )
        assert status == 405
        assert not any(k.startswith("access-control-") for k in headers)
        # localhost and the token: served.
        status, headers, body = request(
            port,
            "GET",
            "/api/overview",
            {"Host": f"localhost:{port}", "Origin": "http://evil.example"},
        )
        assert status == 200 and json.loads(body)["queues"][0]["name"] == "orders"
        assert not any(k.startswith("access-control-") for k in headers)
    assert orders.stats().active == 1
