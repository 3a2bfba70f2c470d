"""Store.serve_admin: the dashboard, /metrics and `postbox --admin` from a Python application."""

from __future__ import annotations

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


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


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
        out = run("--json", "--admin", admin.url, "queues")
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
        assert read_only.token is None
        assert post(f"{read_only.url}api/resubmit?queue=jobs&id={msg_id}", "x") == 403
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
    with tmp_store.serve_admin() as first:
        with pytest.raises(postbox.IoError):
            tmp_store.serve_admin(f"127.0.0.1:{first.port}")
    tmp_store.close()
    with pytest.raises(postbox.ClosedError):
        tmp_store.serve_admin()
