"""Where connection secrets live: the private file store, the OS keyring store, and the choice
between them (``open_secret_store``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from toolgate.errors import ConfigError
from toolgate.secrets import (
    SECRET_STORE_ENV,
    ChosenSecretStore,
    SecretStoreError,
    open_secret_store,
    secrets_file,
    store_names,
    store_problem,
)
from toolgate.secrets.file_store import FileSecretStore
from toolgate.secrets.keyring_store import INDEX_NAME, KeyringSecretStore, working_keyring

keyring = pytest.importorskip("keyring")
from keyring.backends import chainer, fail, null  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "capabilities"
KEYRING_FIXTURE = FIXTURES / "keyring_backend"
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- the file store ---------------------------------------------------------------------------


def test_file_store_round_trip_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "home" / "secrets" / "secrets.json"
    store = FileSecretStore(path)
    assert store.get("notion", "accessToken") is None
    assert not path.exists()  # reading creates nothing
    store.set("notion", "accessToken", "tok-1")
    store.set("notion", "apiBaseUrl", "https://api.example")
    store.set("", "global", "g")
    assert store.get("notion", "accessToken") == "tok-1"
    assert store.get("github", "accessToken") is None  # scopes do not mix
    assert store.names("notion") == ["accessToken", "apiBaseUrl"]
    assert store.scopes() == ["", "notion"]
    assert json.loads(path.read_text()) == {
        "version": 1,
        "scopes": {
            "": {"global": "g"},
            "notion": {"accessToken": "tok-1", "apiBaseUrl": "https://api.example"},
        },
    }
    store.set("notion", "accessToken", "tok-2")
    assert store.get("notion", "accessToken") == "tok-2"
    assert store.delete("notion", "accessToken") is True
    assert store.delete("notion", "accessToken") is False
    assert store.get("notion", "accessToken") is None
    assert store.problem() is None
    assert str(path) in store.description
    # Atomic writes leave no temporary file behind.
    assert sorted(p.name for p in path.parent.iterdir()) == ["secrets.json", "secrets.json.lock"]


@posix_only
def test_file_store_creates_the_file_0600_in_a_0700_folder(tmp_path: Path) -> None:
    path = tmp_path / "home" / "secrets" / "secrets.json"
    FileSecretStore(path).set("notion", "accessToken", "tok")
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert _mode(path.parent.parent) == 0o700  # every folder it had to create


@posix_only
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_file_store_refuses_a_file_others_can_read_or_write(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "secrets" / "secrets.json"
    store = FileSecretStore(path)
    store.set("notion", "accessToken", "tok")
    path.chmod(mode)
    assert store.get("notion", "accessToken") is None  # not read: a gateway keeps serving
    problem = store.problem()
    assert problem is not None
    assert f"mode {mode:04o}" in problem and f"chmod 600 {path}" in problem
    with pytest.raises(SecretStoreError, match="chmod 600"):
        store.set("notion", "accessToken", "other")
    with pytest.raises(SecretStoreError):
        store.delete("notion", "accessToken")
    path.chmod(0o600)
    assert store.get("notion", "accessToken") == "tok"  # the value was never overwritten


@posix_only
def test_file_store_refuses_a_folder_others_can_write(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "secrets.json"
    store = FileSecretStore(path)
    store.set("notion", "accessToken", "tok")
    path.parent.chmod(0o777)
    try:
        assert store.get("notion", "accessToken") is None
        assert "chmod 700" in (store.problem() or "")
    finally:
        path.parent.chmod(0o700)


@posix_only
def test_file_store_does_not_follow_a_symlink(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"version": 1, "scopes": {"notion": {"accessToken": "x"}}}))
    elsewhere.chmod(0o600)
    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o700)
    (folder / "secrets.json").symlink_to(elsewhere)
    store = FileSecretStore(folder / "secrets.json")
    assert store.get("notion", "accessToken") is None
    assert "cannot open" in (store.problem() or "")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not valid JSON"),
        ('{"version": 2, "scopes": {}}', "version 1"),
        ('{"version": 1, "scopes": {"notion": {"accessToken": 5}}}', "/scopes must map"),
    ],
)
def test_file_store_reports_a_broken_file(tmp_path: Path, content: str, expected: str) -> None:
    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o700)
    path = folder / "secrets.json"
    path.write_text(content)
    path.chmod(0o600)
    store = FileSecretStore(path)
    assert store.get("notion", "accessToken") is None
    problem = store.problem() or ""
    assert str(path) in problem and expected in problem
    with pytest.raises(SecretStoreError, match=expected.replace("/", ".")):
        store.set("notion", "accessToken", "tok")


@pytest.mark.slow
def test_file_store_sees_writes_of_other_processes(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "secrets.json"
    reader = FileSecretStore(path)
    reader.set("notion", "accessToken", "first")
    assert reader.get("notion", "accessToken") == "first"
    code = (
        "import sys; from pathlib import Path; "
        "from toolgate.secrets.file_store import FileSecretStore; "
        "FileSecretStore(Path(sys.argv[1])).set('notion', 'accessToken', 'second')"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    assert reader.get("notion", "accessToken") == "second"


def test_file_store_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "secrets.json"
    stores = [FileSecretStore(path) for _ in range(4)]  # separate instances: the file lock
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            for n in range(10):
                stores[index % 4].set("scope", f"name-{index}-{n}", str(n))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(FileSecretStore(path).names("scope")) == 80


# --- the keyring store --------------------------------------------------------------------------


@pytest.fixture
def file_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real keyring backend (values in a JSON file), installed as keyring's choice."""
    monkeypatch.syspath_prepend(str(KEYRING_FIXTURE))
    monkeypatch.setenv("TOOLGATE_TEST_KEYRING", str(tmp_path / "keyring.json"))
    import toolgate_test_keyring

    backend = toolgate_test_keyring.FileKeyring()
    monkeypatch.setattr(keyring.core, "_keyring_backend", backend)
    return backend


def test_keyring_store_round_trip_with_an_index(file_keyring: Any, tmp_path: Path) -> None:
    store = KeyringSecretStore()
    assert store.works and store.problem() is None
    assert "OS keyring" in store.description
    store.set("notion", "accessToken", "tok-1")
    store.set("notion", "apiBaseUrl", "https://api.example")
    store.set("", "global", "g")
    assert store.get("notion", "accessToken") == "tok-1"
    assert store.get("github", "accessToken") is None
    assert store.names("notion") == ["accessToken", "apiBaseUrl"]
    raw = json.loads((tmp_path / "keyring.json").read_text())
    # One service per extension, so the OS keyring manager shows them grouped.
    assert raw["toolgate/notion"]["accessToken"] == "tok-1"
    assert json.loads(raw["toolgate/notion"][INDEX_NAME]) == ["accessToken", "apiBaseUrl"]
    assert raw["toolgate"]["global"] == "g"
    assert store.delete("notion", "accessToken") is True
    assert store.delete("notion", "accessToken") is False
    assert store.names("notion") == ["apiBaseUrl"]
    assert store.delete("notion", "apiBaseUrl") is True
    assert store.names("notion") == []
    # Nothing is left behind, the index included.
    assert json.loads((tmp_path / "keyring.json").read_text())["toolgate/notion"] == {}
    assert store.get("notion", INDEX_NAME) is None  # the index is not a secret anyone reads
    with pytest.raises(SecretStoreError, match="reserved"):
        store.set("notion", INDEX_NAME, "x")


@pytest.mark.parametrize(
    ("backend", "reason"),
    [
        (fail.Keyring(), "no usable backend"),
        (null.Keyring(), "null backend"),
    ],
)
def test_keyring_backends_that_do_not_work(
    monkeypatch: pytest.MonkeyPatch, backend: Any, reason: str
) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", backend)
    found, detail = working_keyring()
    assert found is None and reason in detail
    store = KeyringSecretStore()
    assert not store.works
    assert store.get("notion", "accessToken") is None
    assert "TOOLGATE_SECRET_STORE=file" in (store.problem() or "")
    with pytest.raises(SecretStoreError, match="no OS keyring works"):
        store.set("notion", "accessToken", "tok")


def test_a_chainer_with_nothing_to_chain_does_not_work(monkeypatch: pytest.MonkeyPatch) -> None:
    class EmptyChainer(chainer.ChainerBackend):
        @property
        def backends(self) -> list[Any]:  # type: ignore[override]
            return []

    monkeypatch.setattr(keyring.core, "_keyring_backend", EmptyChainer())
    assert working_keyring() == (None, "keyring found no usable backend to chain")


def test_a_keyring_that_fails_reads_as_unset_and_refuses_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Locked(keyring.backend.KeyringBackend):
        priority = 1  # type: ignore[assignment]

        def get_password(self, service: str, username: str) -> str | None:
            raise keyring.errors.KeyringLocked("locked")

        def set_password(self, service: str, username: str, password: str) -> None:
            raise keyring.errors.PasswordSetError("locked")

        def delete_password(self, service: str, username: str) -> None:
            raise keyring.errors.PasswordDeleteError("locked")

    store = KeyringSecretStore(Locked())
    assert store.get("notion", "accessToken") is None
    with pytest.raises(SecretStoreError, match="refused to store notion/accessToken"):
        store.set("notion", "accessToken", "tok")


# --- the choice -------------------------------------------------------------------------------


def test_open_secret_store_rejects_an_unknown_mode(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TOOLGATE_SECRET_STORE='vault'"):
        open_secret_store(tmp_path, {SECRET_STORE_ENV: "vault"})


def test_forcing_the_file_store(tmp_path: Path, file_keyring: Any) -> None:
    store = open_secret_store(tmp_path, {SECRET_STORE_ENV: "file"})
    assert isinstance(store.store, FileSecretStore)
    assert store.reason == "TOOLGATE_SECRET_STORE=file"
    store.set("notion", "accessToken", "tok")
    assert secrets_file(tmp_path).is_file()
    assert store.names("notion") == ["accessToken"] == store_names(store, "notion")


def test_forcing_a_keyring_that_does_not_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", fail.Keyring())
    store = open_secret_store(tmp_path, {SECRET_STORE_ENV: "keyring"})
    assert isinstance(store.store, KeyringSecretStore)
    assert "no OS keyring works here" in (store_problem(store) or "")
    assert not secrets_file(tmp_path).exists()  # never falls back silently


def test_auto_prefers_a_working_keyring(tmp_path: Path, file_keyring: Any) -> None:
    store = open_secret_store(tmp_path, {})
    assert isinstance(store.store, KeyringSecretStore)
    assert "an OS keyring works here" in store.reason
    store.set("notion", "accessToken", "tok")
    assert not secrets_file(tmp_path).exists()


def test_auto_falls_back_to_the_file_without_a_keyring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", fail.Keyring())
    store = open_secret_store(tmp_path, {})
    assert isinstance(store.store, FileSecretStore)
    assert store.reason.startswith("no OS keyring works here: keyring found no usable backend")


def test_auto_keeps_using_a_file_that_holds_secrets(tmp_path: Path, file_keyring: Any) -> None:
    FileSecretStore(secrets_file(tmp_path)).set("notion", "accessToken", "tok")
    store = open_secret_store(tmp_path, {})
    assert isinstance(store.store, FileSecretStore)  # switching would lose the connection
    assert "already holds secrets" in store.reason
    assert store.get("notion", "accessToken") == "tok"


@pytest.mark.slow
def test_choosing_is_lazy(tmp_path: Path) -> None:
    """Building a gateway and listing tools never loads keyring; reading a secret does."""
    (tmp_path / "toolgate.yaml").write_text("python: []\n")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from toolgate.config import load_gateway\n"
        "gateway = load_gateway(Path('toolgate.yaml'), approver=None, audit='off')\n"
        "gateway.list_tools()\n"
        "print('keyring' in sys.modules)\n"
        "gateway.secrets.store.get('notion', 'accessToken')\n"
        "print('keyring' in sys.modules)\n"
        "gateway.close()\n"
    )
    env = {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}
    env.pop(SECRET_STORE_ENV, None)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]


def test_chosen_store_is_a_secret_store(tmp_path: Path) -> None:
    store = ChosenSecretStore(tmp_path, "file")
    store.set("s", "n", "v")
    assert store.get("s", "n") == "v"
    assert store.description.startswith("the file ")
    assert store.problem() is None
    assert store.delete("s", "n") is True
