"""Who may connect: bearer tokens, TLS (also mutual), Unix sockets, config refusals.

Every case runs a real ``GrpcServer`` (or a whole ``Application``) and a
real grpc client; certificates are made by the ``openssl`` command in the
test's tmp directory.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import trio

from lre.app import Application
from lre.cas import MemoryStore
from lre.config import ConfigError, ListenerSpec, TlsServerSpec
from lre.config._loader import load_config_text
from lre.digest import digest_of
from lre.proto import bs_grpc, bs_pb2, re_grpc, re_pb2
from lre.service import (
    AuthTokenError,
    BearerToken,
    GrpcServer,
    InstanceBackends,
    Instances,
    ServerOptions,
    TrioBridge,
    bearer_token,
    cache_servicers,
    read_token_file,
)
from tests._support.configs import app_config_text, config_of

TOKEN = "s3cr3t-token-0123456789abcdef"


def token_file(tmp_path: Path, text: str = TOKEN + "\n", mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(text)
    os.chmod(path, mode)
    return path


# ------------------------------------------------------------ token file


def test_token_file_is_stripped(tmp_path: Path) -> None:
    assert read_token_file(str(token_file(tmp_path, f"  {TOKEN}\n\n"))) == TOKEN


def test_group_readable_token_file_is_accepted(tmp_path: Path) -> None:
    assert read_token_file(str(token_file(tmp_path, mode=0o640))) == TOKEN


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o602, 0o601, 0o666])
def test_token_file_open_to_other_users_is_refused(tmp_path: Path, mode: int) -> None:
    path = token_file(tmp_path, mode=mode)
    with pytest.raises(AuthTokenError) as caught:
        read_token_file(str(path))
    message = str(caught.value)
    assert "listener.auth_token_file" in message and str(path) in message
    assert f"{mode:04o}" in message and "chmod 600" in message
    assert TOKEN not in message


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty_token_file_is_refused(tmp_path: Path, text: str) -> None:
    path = token_file(tmp_path, text)
    with pytest.raises(AuthTokenError, match=r"auth_token_file: .* is empty"):
        read_token_file(str(path))


@pytest.mark.parametrize("text", ["tok en", "t\u00f6ken", "tok\x00en"])
def test_token_a_header_cannot_carry_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(AuthTokenError, match="cannot carry"):
        read_token_file(str(token_file(tmp_path, text)))


def test_missing_token_file_and_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(AuthTokenError, match=r"cannot read .*absent"):
        read_token_file(str(tmp_path / "absent"))
    folder = tmp_path / "dir"
    folder.mkdir(mode=0o700)
    with pytest.raises(AuthTokenError, match=r"not a regular file|cannot read"):
        read_token_file(str(folder))


def test_no_token_file_means_no_token_check() -> None:
    assert bearer_token(ListenerSpec()) is None


# ------------------------------------------------------------ a real server


async def start(
    nursery: trio.Nursery,
    *,
    address: str = "127.0.0.1:0",
    token: BearerToken | None = None,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[str, MemoryStore]:
    store = MemoryStore(max_bytes=64 << 20)
    bridge = TrioBridge()
    servicers = cache_servicers(bridge, Instances({"": InstanceBackends(cas=store)}))
    options = ServerOptions(
        address=address,
        grace_seconds=0.2,
        bearer_token=token,
        server_credentials=credentials,
    )
    bound: str = await nursery.start(GrpcServer(options, servicers, bridge).serve)
    return bound, store


def capabilities(channel: grpc.Channel, metadata: Sequence[tuple[str, str]] = ()) -> Any:
    stub = re_grpc.CapabilitiesStub(channel)
    return stub.GetCapabilities(re_pb2.GetCapabilitiesRequest(), metadata=metadata, timeout=10)


def code_of(fn: Any, *args: Any, **kwargs: Any) -> tuple[grpc.StatusCode, str]:
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))


async def test_bearer_token_guards_every_kind_of_call(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    token = BearerToken(TOKEN)
    address, store = await start(nursery, token=token)
    good = [("authorization", f"Bearer {TOKEN}")]
    blob = b"guarded blob"
    digest = digest_of(blob)
    caplog.set_level(logging.INFO)
    with grpc.insecure_channel(address) as channel:
        cas = re_grpc.ContentAddressableStorageStub(channel)
        bytestream = bs_grpc.ByteStreamStub(channel)
        write = [
            bs_pb2.WriteRequest(
                resource_name=f"uploads/u/blobs/{digest.hash}/{digest.size_bytes}",
                data=blob,
                finish_write=True,
            )
        ]
        read = bs_pb2.ReadRequest(resource_name=f"blobs/{digest.hash}/{digest.size_bytes}")
        bad_headers: list[list[tuple[str, str]]] = [
            [],
            [("authorization", f"Bearer {TOKEN}x")],
            [("authorization", f"Bearer {TOKEN[:-1]}")],
            [("authorization", TOKEN)],
            [("authorization", f"Basic {TOKEN}")],
            [("x-token", TOKEN)],
        ]
        for headers in bad_headers:
            for call in (
                lambda h: capabilities(channel, h),
                lambda h: bytestream.Write(iter(write), metadata=h, timeout=10),
                lambda h: list(bytestream.Read(read, metadata=h, timeout=10)),
                lambda h: cas.FindMissingBlobs(
                    re_pb2.FindMissingBlobsRequest(blob_digests=[digest.to_proto()]),
                    metadata=h,
                    timeout=10,
                ),
            ):
                code, details = await in_thread(code_of, call, headers)
                assert code == grpc.StatusCode.UNAUTHENTICATED, (headers, details)
                assert "authorization: Bearer" in details
                assert TOKEN not in details
        assert (await store.has_many([digest]))[0] is None  # the rejected write stored nothing
        # The right token passes, for unary, client-streaming and server-streaming calls,
        # and the scheme is case-insensitive.
        assert (await in_thread(capabilities, channel, good)).cache_capabilities
        response = await in_thread(bytestream.Write, iter(write), metadata=good, timeout=10)
        assert response.committed_size == len(blob)
        lower = [("authorization", f"bearer {TOKEN}")]
        chunks = await in_thread(lambda: list(bytestream.Read(read, metadata=lower, timeout=10)))
        assert b"".join(c.data for c in chunks) == blob
        # An unknown method: UNAUTHENTICATED without the token, UNIMPLEMENTED with it.
        raw = channel.unary_unary("/no.such.Service/Method")
        assert (await in_thread(code_of, raw, b"", timeout=10))[0] == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        assert (await in_thread(code_of, raw, b"", metadata=good, timeout=10))[0] == (
            grpc.StatusCode.UNIMPLEMENTED
        )
    statistics = token.statistics()
    assert statistics.rejected == len(bad_headers) * 4 + 1
    assert statistics.admitted >= 4
    assert statistics.rejected_peers == 1
    rejections = [r for r in caplog.records if r.name == "lre.service.auth"]
    assert len(rejections) == 1, [r.getMessage() for r in rejections]
    assert "UNAUTHENTICATED" in rejections[0].getMessage()
    assert "ipv4:127.0.0.1" in rejections[0].getMessage()
    assert TOKEN not in caplog.text


async def test_token_is_compared_in_constant_time_by_hash() -> None:
    """The comparison never short-cuts on length: both sides are hashed first."""
    token = BearerToken(TOKEN)
    assert token._problem([("authorization", f"Bearer {TOKEN}")]) is None
    assert token._problem([("authorization", "Bearer " + "x" * 10_000)]) is not None
    assert token._problem([("authorization", "Bearer ")]) is not None
    with pytest.raises(AuthTokenError):
        BearerToken("")


# ------------------------------------------------------------ TLS


def openssl(*args: str, cwd: Path) -> None:
    tool = shutil.which("openssl")
    assert tool is not None, "the openssl command is needed to make test certificates"
    subprocess.run([tool, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip


def make_cert(folder: Path, name: str, ca: str, *, server: bool) -> None:
    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
        "-out", f"{name}.csr", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip
    ext = folder / f"{name}.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else "extendedKeyUsage=clientAuth\n"
    )
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", ext.name,
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pki")
    make_ca(folder, "ca")
    make_ca(folder, "other-ca")
    make_cert(folder, "server", "ca", server=True)
    make_cert(folder, "client", "ca", server=False)
    make_cert(folder, "stranger", "other-ca", server=False)
    return folder


def credentials(pki: Path, client: str | None = None) -> grpc.ChannelCredentials:
    key = (pki / f"{client}.key").read_bytes() if client else None
    cert = (pki / f"{client}.pem").read_bytes() if client else None
    return grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.pem").read_bytes(), private_key=key, certificate_chain=cert
    )


async def test_tls_listener_serves_tls_clients_only(nursery: trio.Nursery, pki: Path) -> None:
    listener = ListenerSpec(
        address="127.0.0.1:0",
        tls=TlsServerSpec(cert_file=str(pki / "server.pem"), key_file=str(pki / "server.key")),
    )
    options = ServerOptions.from_listener(listener)
    address, _ = await start(nursery, credentials=options.server_credentials)
    with grpc.secure_channel(address, credentials(pki)) as channel:
        assert (await in_thread(capabilities, channel)).cache_capabilities
    with grpc.insecure_channel(address) as plain:
        code, _ = await in_thread(code_of, capabilities, plain)
        assert code == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_requires_a_client_certificate_of_the_ca(
    nursery: trio.Nursery, pki: Path
) -> None:
    listener = ListenerSpec(
        address="127.0.0.1:0",
        tls=TlsServerSpec(
            cert_file=str(pki / "server.pem"),
            key_file=str(pki / "server.key"),
            client_ca_file=str(pki / "ca.pem"),
        ),
    )
    options = ServerOptions.from_listener(listener)
    address, _ = await start(nursery, credentials=options.server_credentials)
    with grpc.secure_channel(address, credentials(pki, "client")) as channel:
        assert (await in_thread(capabilities, channel)).cache_capabilities
    for who in (None, "stranger"):
        with grpc.secure_channel(address, credentials(pki, who)) as channel:
            code, _ = await in_thread(code_of, capabilities, channel)
            assert code == grpc.StatusCode.UNAVAILABLE, who


def test_unreadable_tls_file_is_refused_at_start(tmp_path: Path) -> None:
    listener = ListenerSpec(
        tls=TlsServerSpec(cert_file=str(tmp_path / "none.pem"), key_file=str(tmp_path / "k"))
    )
    with pytest.raises(OSError):
        ServerOptions.from_listener(listener)


# ------------------------------------------------------------ Unix socket


async def test_unix_socket_listener_is_private(nursery: trio.Nursery, tmp_path: Path) -> None:
    path = tmp_path / "lre.sock"
    address, _ = await start(nursery, address=f"unix:{path}")
    assert address == f"unix:{path}"
    mode = os.stat(path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    with grpc.insecure_channel(f"unix:{path}") as channel:
        assert (await in_thread(capabilities, channel)).cache_capabilities


# ------------------------------------------------------------ config and app


def test_config_refuses_open_listener_without_tls_or_token(tmp_path: Path) -> None:
    for address in ("0.0.0.0:0", "[::]:0", "192.168.1.20:0", "example.com:0"):
        text = app_config_text(tmp_path, listener=f'address: "{address}"')
        with pytest.raises(ConfigError) as caught:
            load_config_text(text, source="t.json5")
        assert any(
            "reachable from other machines" in m and address in m for m in caught.value.messages
        )
    text = app_config_text(tmp_path, listener='address: "0.0.0.0:0", auth_token_file: "/t"')
    load_config_text(text, source="t.json5")
    text = app_config_text(
        tmp_path, listener='address: "0.0.0.0:0", tls: { cert_file: "/c", key_file: "/k" }'
    )
    load_config_text(text, source="t.json5")
    for loopback in ("127.0.0.1:0", "localhost:0", "[::1]:0"):
        load_config_text(app_config_text(tmp_path, listener=f'address: "{loopback}"'), source="t")


def test_app_refuses_world_readable_token_file(tmp_path: Path) -> None:
    path = token_file(tmp_path, mode=0o644)
    text = app_config_text(tmp_path, listener=f'address: "127.0.0.1:0", auth_token_file: "{path}"')
    with pytest.raises(AuthTokenError, match="accessible to other users"):
        Application(config_of(text, source="t.json5"))


async def test_app_with_token_private_dirs_and_root_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = token_file(tmp_path)
    text = app_config_text(tmp_path, listener=f'address: "127.0.0.1:0", auth_token_file: "{path}"')
    app = Application(config_of(text, source="t.json5"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    caplog.set_level(logging.INFO)
    async with trio.open_nursery() as nursery:
        ready = await nursery.start(app.serve)
        address = ready.grpc_addresses[0]
        with grpc.insecure_channel(address) as channel:
            code, _ = await in_thread(code_of, capabilities, channel)
            assert code == grpc.StatusCode.UNAUTHENTICATED
            good = [("authorization", f"Bearer {TOKEN}")]
            assert (await in_thread(capabilities, channel, good)).cache_capabilities
        for private in ("state", "cas", "tmp/cas", "work", "work/local"):
            mode = stat.S_IMODE(os.stat(tmp_path / private).st_mode)
            assert mode & 0o077 == 0, f"{private} has mode {mode:04o}"
        app.request_stop()
    roots = [r for r in caplog.records if "running as root" in r.getMessage()]
    assert len(roots) == 1 and roots[0].levelno == logging.WARNING
    assert TOKEN not in caplog.text


async def test_no_root_warning_for_a_normal_user(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    app = Application(config_of(app_config_text(tmp_path), source="t.json5"))
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        app.request_stop()
    assert "running as root" not in caplog.text
