"""The optional parts of the module (cargo features ``admin`` and ``bridge``): a module built
without one raises ``UnsupportedError`` naming the build option, and does nothing else."""

from __future__ import annotations

import pytest

import postbox

CONFIG = """
broker = "amqp://guest:guest@127.0.0.1:1/%2f"
[[link]]
direction = "outgoing"
local = "out"
queue = "remote-out"
"""


def test_features_are_a_frozenset_of_known_names() -> None:
    assert isinstance(postbox.FEATURES, frozenset)
    assert postbox.FEATURES <= {"admin", "bridge"}


@pytest.mark.skipif("admin" in postbox.FEATURES, reason="this module has the admin endpoint")
def test_serve_admin_without_the_feature_names_the_build_option(tmp_store: postbox.Store) -> None:
    with pytest.raises(postbox.UnsupportedError) as info:
        tmp_store.serve_admin("127.0.0.1:0")
    assert info.value.feature == "admin"
    assert info.value.code == 22
    assert isinstance(info.value, NotImplementedError)
    assert "--features admin" in str(info.value)
    assert "MATURIN_PEP517_ARGS" in str(info.value)
    # Nothing was done: the store works on.
    tmp_store.queue("q").send(b"x")


@pytest.mark.skipif("bridge" in postbox.FEATURES, reason="this module has the bridge")
def test_bridge_without_the_feature_names_the_build_option(tmp_store: postbox.Store) -> None:
    with pytest.raises(postbox.UnsupportedError) as info:
        tmp_store.bridge(CONFIG)
    assert info.value.feature == "bridge"
    assert "--features bridge" in str(info.value)
    # The local queue of the link was not created: nothing was started.
    assert "out" not in tmp_store.queues()


@pytest.mark.skipif("admin" not in postbox.FEATURES, reason="built without the admin endpoint")
def test_serve_admin_with_the_feature_serves(tmp_store: postbox.Store) -> None:
    with tmp_store.serve_admin("127.0.0.1:0") as admin:
        assert admin.port > 0
