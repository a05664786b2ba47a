"""The broker options shared by every command that talks MQTT (``appliance ota push``, fleet tools): where the
broker is, TLS, and credentials, turned into the same MqttConfig the appliance reads, so a command configures
its client as the appliance does (appliance.mqtt.connection.configure_security).

    add_mqtt_client_arguments(parser)           # --mqtt --config --ca --cert --key --tls --username --password-file
    config = mqtt_config_from_args(args)         # MqttOptionsError: print it, exit BAD_INPUT

A password never goes on the command line, where every user of the machine can read it in the process list:
``--password`` fails with a message saying where to put it (``--password-file`` or ``APPLIANCE_MQTT_PASSWORD``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from appliance.errors import ApplianceError

if TYPE_CHECKING:
    from appliance.mqtt.config import MqttConfig

PASSWORD_ENV = "APPLIANCE_MQTT_PASSWORD"
PASSWORD_IN_ARGV = (f"a password on the command line is visible to every user of this machine (ps, "
                    f"/proc/PID/cmdline); give it in a file (--password-file FILE, mode 0600) or in the "
                    f"environment ({PASSWORD_ENV})")
# Not a topic level the appliance uses: the CLI's MqttConfig needs a device_id, but a CLI publishes for others.
CLI_DEVICE_ID = "cli"


class MqttOptionsError(ApplianceError, ValueError):
    """The broker options cannot work as given (a password in argv, a bad HOST:PORT, an invalid config file)."""


class _RefusePassword(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        parser.error(f"{option_string} is not accepted: {PASSWORD_IN_ARGV}")  # exits 2, ExitCode.BAD_INPUT


def add_mqtt_client_arguments(parser: argparse.ArgumentParser, *, broker_group: Any = None,
                              config_flag: str = "--config") -> None:
    """Add the broker options to ``parser``. ``broker_group``: where ``--mqtt HOST[:PORT]`` goes (a mutually
    exclusive group such as ``ota push``'s --inbox/--mqtt); ``config_flag``: the name of the option that reads
    an appliance config file, for a command that uses --config for something else."""
    (broker_group or parser).add_argument("--mqtt", metavar="HOST[:PORT]",
                                          help="the broker (port default: 8883 with TLS, else 1883)")
    g = parser.add_argument_group("broker TLS and credentials (as in the appliance config's mqtt section)")
    g.add_argument(config_flag, dest="mqtt_config_file", type=Path, metavar="APPLIANCE_YAML",
                   help="take broker, TLS, credentials and topic prefix from this appliance config's mqtt "
                        "section; the options here override it")
    g.add_argument("--ca", type=Path, help="CA bundle (PEM) that signed the broker certificate (turns TLS on)")
    g.add_argument("--cert", type=Path, help="client certificate (PEM) for mutual TLS; needs --key")
    g.add_argument("--key", type=Path, help="private key (PEM) of the client certificate")
    g.add_argument("--tls", action="store_true", help="TLS, verifying the broker against the system CA store")
    g.add_argument("--username", help="broker user")
    g.add_argument("--password-file", type=Path, help=f"file holding the password (or set {PASSWORD_ENV})")
    g.add_argument("--password", nargs="?", action=_RefusePassword, help=argparse.SUPPRESS)


def mqtt_config_from_args(args: argparse.Namespace, env: Optional[Mapping[str, str]] = None) -> "MqttConfig":
    """The MqttConfig the options describe: the config file's mqtt section (if given), overridden by the options,
    the password from --password-file, else $APPLIANCE_MQTT_PASSWORD, else the file's. Raises MqttOptionsError."""
    # Lazy: main.py declares these options for every parse, and the config models cost 0.3 s to import.
    from pydantic import ValidationError

    from appliance.mqtt.config import MqttConfig

    env = os.environ if env is None else env
    settings: dict[str, Any] = {"device_id": CLI_DEVICE_ID}
    if args.mqtt_config_file is not None:
        settings = _mqtt_section(args.mqtt_config_file)
    elif args.mqtt is None:
        raise MqttOptionsError("give the broker: --mqtt HOST[:PORT], or --config APPLIANCE_YAML")
    tls_wanted = args.tls or any(p is not None for p in (args.ca, args.cert, args.key))
    if tls_wanted:
        tls = dict(settings.get("tls") or {})
        tls.update({k: v for k, v in (("ca", args.ca), ("cert", args.cert), ("key", args.key)) if v is not None})
        settings["tls"] = tls
    if args.mqtt is not None:
        settings.pop("hosts", None)  # --mqtt names the one broker to use
        settings["host"], settings["port"] = _host_port(args.mqtt, settings.get("tls") is not None)
    if args.username is not None:
        settings["username"] = args.username
    if args.password_file is not None:
        settings.pop("password", None)
        settings["password_file"] = args.password_file
    elif env.get(PASSWORD_ENV):
        settings.pop("password_file", None)
        settings["password"] = env[PASSWORD_ENV]
    try:
        return MqttConfig.model_validate(settings)
    except ValidationError as exc:
        raise MqttOptionsError("; ".join(_problem(e) for e in exc.errors())) from None


def _mqtt_section(path: Path) -> dict[str, Any]:
    from appliance.commands.configload import load_and_report  # lazy, as in mqtt_config_from_args

    config = load_and_report(path, machine=False, quiet_when_ok=True)  # prints each problem with its line
    if config is None:
        raise MqttOptionsError(f"{path}: not a valid appliance config (problems above)")
    # Only what the file sets: a dump of the defaults too would give both `host` and `hosts` for a failover list.
    section = config.mqtt.model_dump(exclude_unset=True)
    section.pop("client_id", None)  # the appliance's own id: the broker would disconnect the device for us
    return section


def _host_port(text: str, tls: bool) -> tuple[str, int]:
    host, sep, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if not sep:
        return text, 8883 if tls else 1883
    if not host or not port.isdigit():
        raise MqttOptionsError(f"--mqtt {text!r}: expected HOST or HOST:PORT")
    return host, int(port)


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error.get("loc", ()))
    message = str(error.get("msg", "")).removeprefix("Value error, ")
    return f"mqtt.{where}: {message}" if where else message

