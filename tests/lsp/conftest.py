"""Fixtures: the npu-lint language server over stdio, driven by pytest-lsp clients.

``push_client`` has VS Code 1.65's capabilities (no pull diagnostics, UTF-16 positions); ``pull_client`` has
Neovim 0.11's (pull diagnostics, UTF-8 positions negotiated).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from tests.lsp.helpers import SERVER_COMMAND, server_env

CONFIG = ClientServerConfig(server_command=SERVER_COMMAND, server_env=server_env())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "toy"\n\n[tool.npu-lint]\n', encoding="utf-8")
    return root


def _params(spec: str, root: Path, settings: dict) -> types.InitializeParams:
    return types.InitializeParams(
        capabilities=client_capabilities(spec),
        root_uri=root.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="proj")],
        initialization_options={"settings": settings},
    )


def _accept_registrations(client: LanguageClient) -> None:
    """The test client has no handler for dynamic registration (the server registers file watchers)."""
    client.registrations = []  # type: ignore[attr-defined]

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: types.RegistrationParams) -> None:
        client.registrations.extend(params.registrations)  # type: ignore[attr-defined]


@pytest_lsp.fixture(config=CONFIG)
async def push_client(lsp_client: LanguageClient, project: Path, request: pytest.FixtureRequest):
    settings = getattr(request, "param", {"lint": {"debounce": 0}})
    _accept_registrations(lsp_client)
    result = await lsp_client.initialize_session(_params("visual-studio-code@v1.65.2", project, settings))
    lsp_client.init_result = result  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=CONFIG)
async def pull_client(lsp_client: LanguageClient, project: Path):
    _accept_registrations(lsp_client)
    result = await lsp_client.initialize_session(_params("neovim@v0.11.0", project, {}))
    lsp_client.init_result = result  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()
