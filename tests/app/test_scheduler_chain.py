"""The one walk over scheduler references, and the builders that use it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from lre.app import AppBuildError, build_stores
from lre.app._build_schedulers import build_forwarders, build_schedulers, front_scheduler
from lre.app._scheduler_chain import scheduler_chain
from lre.config import Config, PropertyModifierSpec
from tests._support.configs import config_of, config_text, filesystem_store


def _config(root: Path, schedulers: str, instance_scheduler: str = "front") -> Config:
    return config_of(
        config_text(
            root,
            stores=[filesystem_store(root, "cas")],
            schedulers=[schedulers],
            workers=[],
            front=instance_scheduler,
            ac_store=None,
        )
    )


def _modifier(name: str, value: str, then: str) -> str:
    return f"""{{ name: "{name}", property_modifier: {{
        modifications: [{{ add: {{ name: "{name}", value: "{value}" }} }}],
        scheduler: "{then}" }} }}"""


def _forward(name: str, local: str) -> str:
    return f"""{{ name: "{name}", forward: {{ local: "{local}",
        endpoint: {{ address: "grpc://127.0.0.1:1" }}, instance_name: "up" }} }}"""


_QUEUE = '{ name: "queue", simple: { cas_store: "cas" } }'


def test_chain_collects_modifications_and_the_first_forward(tmp_path: Path) -> None:
    # front -> fwd1 -> mid -> fwd2 -> queue
    config = _config(
        tmp_path,
        ", ".join(
            [
                _modifier("front", "1", "fwd1"),
                _forward("fwd1", "mid"),
                _modifier("mid", "2", "fwd2"),
                _forward("fwd2", "queue"),
                _QUEUE,
            ]
        ),
    )
    chain = scheduler_chain(config, "front")
    assert chain.simple_name == "queue"
    assert chain.simple.cas_store == "cas"
    assert [(m.add.name, m.add.value) for m in chain.modifications if m.add] == [
        ("front", "1"),
        ("mid", "2"),
    ]
    assert chain.forward is not None and chain.forward[0] == "fwd1"
    # past the first forward, the next one is the first
    mid = scheduler_chain(config, "mid").forward
    assert mid is not None and mid[0] == "fwd2"
    assert scheduler_chain(config, "queue").forward is None
    assert scheduler_chain(config, "queue").modifications == ()


def test_chain_that_loops_names_the_scheduler(tmp_path: Path) -> None:
    # config validation refuses a cycle; the walk still stops on one built by hand
    config = _config(tmp_path, ", ".join([_modifier("front", "1", "queue"), _QUEUE]))
    back = PropertyModifierSpec(modifications=(), scheduler="front")
    looped = replace(
        config,
        schedulers=tuple(
            replace(s, simple=None, property_modifier=back) if s.name == "queue" else s
            for s in config.schedulers
        ),
    )
    with pytest.raises(AppBuildError, match=r"schedulers\[front\]: property_modifier chain loops"):
        scheduler_chain(looped, "front")


def test_names_sharing_a_simple_scheduler_share_one_and_clients_get_the_forwarder(
    tmp_path: Path,
) -> None:
    config = _config(
        tmp_path,
        ", ".join(
            [
                _modifier("front", "1", "fwd"),
                _forward("fwd", "queue"),
                _forward("spare", "queue"),
                _QUEUE,
            ]
        ),
    )
    stores = build_stores(config)
    schedulers = build_schedulers(
        config, stores, learner=None, pressure={}, on_event=lambda _: None, on_record=None
    )
    assert set(schedulers) == {"front", "fwd", "spare", "queue"}
    assert len(set(map(id, schedulers.values()))) == 1
    forwarders = build_forwarders(config, stores, schedulers, on_upstream_change=lambda _: None)
    # only the forward a server instance reaches is built
    assert list(forwarders) == ["fwd"]
    assert front_scheduler(config, "front", schedulers, forwarders) is forwarders["fwd"]
    assert front_scheduler(config, "queue", schedulers, forwarders) is schedulers["queue"]
