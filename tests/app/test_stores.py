"""build_stores: every eviction setting reaches the store it configures."""

from __future__ import annotations

from lre.app import build_stores
from lre.cas import MemoryStore
from tests._support.configs import config_of

MEMORY_CAS = """{
  stores: [
    { name: "cas", memory: { eviction_policy: { max_bytes: "8MiB", evict_bytes: "2MiB" } } },
    { name: "ac", memory: {} },
  ],
  schedulers: [{ name: "queue", simple: { ac_store: "ac", cas_store: "cas" } }],
  servers: [
    { listener: { address: "127.0.0.1:0" },
      instances: [{ instance_name: "*", cas_store: "cas", ac_store: "ac", scheduler: "queue" }] },
  ],
}"""


def test_a_memory_store_gets_its_evict_bytes() -> None:
    stores = build_stores(config_of(MEMORY_CAS))
    store = stores.blobs["cas"]
    assert isinstance(store, MemoryStore)
    assert (store.max_bytes, store.evict_bytes) == (8 << 20, 2 << 20)
