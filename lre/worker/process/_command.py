"""Turning a ``Command`` into argv, environment, working directory and outputs.

The environment is exactly the Command's variables plus the worker's
``additional_environment``; nothing of lre's own environment leaks in except
through ``from_environment``. When the result has no ``PATH`` the worker's
``default_path`` is used (Buck2 sends none).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lre.config import EnvironmentSource
from lre.errors import InvalidArgument
from lre.proto import re_pb2
from lre.worker.outputs import OutputRequest
from lre.worker.process._paths import output_path, relative_inside


@dataclass(frozen=True, slots=True)
class PreparedCommand:
    argv: list[str]
    env: dict[str, str]
    working_directory: str  # relative to the input root; "" = the root
    outputs: list[OutputRequest]

    def cwd(self, root: Path) -> Path:
        return root / self.working_directory if self.working_directory else root


def output_requests(command: re_pb2.Command, working_directory: str) -> list[OutputRequest]:
    """The outputs a Command asks for; ``output_paths`` wins over the legacy fields.

    Raises ``InvalidArgument`` naming the field and path when a path is
    absolute, empty or leaves the input root.
    """
    requests: list[OutputRequest] = []
    if command.output_paths:
        named: Sequence[tuple[str, str, Sequence[str]]] = (
            ("path", "Command.output_paths", command.output_paths),
        )
    else:
        named = (
            ("file", "Command.output_files", command.output_files),
            ("directory", "Command.output_directories", command.output_directories),
        )
    for declared, field, values in named:
        for value in values:
            relative = output_path(working_directory, value, field=field)
            requests.append(OutputRequest(value, relative, declared))
    return requests


def build_environment(
    command: re_pb2.Command,
    additional: Mapping[str, EnvironmentSource],
    *,
    platform: Mapping[str, str],
    timeout_s: float,
    action_directory: Path,
    default_path: str,
) -> dict[str, str]:
    """The environment an action runs with (see the module docstring).

    ``property`` sources whose platform property is absent and
    ``from_environment`` sources whose variable is unset are left out.
    """
    env = {variable.name: variable.value for variable in command.environment_variables}
    for name, source in additional.items():
        value: str | None
        if source.source == "value":
            value = source.value
        elif source.source == "property":
            value = platform.get(source.value)
        elif source.source == "from_environment":
            value = os.environ.get(source.value)
        elif source.source == "timeout_millis":
            value = str(round(timeout_s * 1000))
        else:  # action_directory
            value = str(action_directory)
        if value is not None:
            env[name] = value
    if "PATH" not in env and default_path:
        env["PATH"] = default_path
    return env


def prepare_command(
    command: re_pb2.Command,
    *,
    entrypoint: Sequence[str],
    additional_environment: Mapping[str, EnvironmentSource],
    platform: Mapping[str, str],
    timeout_s: float,
    input_root: Path,
    default_path: str,
) -> PreparedCommand:
    """Validate a Command and build what running it needs.

    Raises ``InvalidArgument`` when ``arguments`` is empty, an argument or
    variable contains NUL, or ``working_directory`` / an output path leaves
    the input root.
    """
    if not command.arguments:
        raise InvalidArgument("Command.arguments: empty; nothing to run")
    for index, argument in enumerate(command.arguments):
        if "\x00" in argument:
            raise InvalidArgument(f"Command.arguments[{index}]: contains NUL")
    for variable in command.environment_variables:
        if not variable.name or "=" in variable.name or "\x00" in variable.name + variable.value:
            raise InvalidArgument(
                f"Command.environment_variables: {variable.name!r} is not a valid variable"
            )
    working_directory = relative_inside(
        command.working_directory, field="Command.working_directory", allow_root=True
    )
    env = build_environment(
        command,
        additional_environment,
        platform=platform,
        timeout_s=timeout_s,
        action_directory=input_root,
        default_path=default_path,
    )
    return PreparedCommand(
        argv=[*entrypoint, *command.arguments],
        env=env,
        working_directory=working_directory,
        outputs=output_requests(command, working_directory),
    )
