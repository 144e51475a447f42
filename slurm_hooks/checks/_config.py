"""The configuration with every check's section: what the loader is given, and the
view the type checker has of it.

At run time the configuration is core.config.Config itself, told the checks' sections
(checks.sections()): a check's section is built when it is first read, so a prolog
imports no check module it does not run. For the type checker, Config below adds the
built-in checks' sections to it. A check reads its own section through its module's
`settings()`, so a new check needs no line here; one is added only when a module
outside the check reads the section.

Not a check (a private module of the checks package): it imports the check modules,
which import the package, so it cannot live in checks/__init__.py.
"""
from __future__ import annotations

from ..core import config
from . import TYPE_CHECKING, sections

if TYPE_CHECKING:
    from typing import Any

    from ._gpu_config import GpuConfig
    from .fabric import FabricConfig
    from .filesystem import FilesystemConfig, FilesystemDefaults
    from .leftovers import LeftoversConfig
    from .site import SiteChecksConfig
    from .stuck_tasks import StuckTasksConfig

    class Config(config.Config):
        filesystems: list[FilesystemConfig]
        filesystem_defaults: FilesystemDefaults
        stuck_tasks: StuckTasksConfig
        leftovers: LeftoversConfig
        gpu: GpuConfig
        fabric: FabricConfig
        site_checks: SiteChecksConfig
else:
    Config = config.Config


def load_config(path: str | None, **kw: Any) -> Config:
    """core.config.load with the checks' sections; the validator is imported only when
    the file is not in the cache."""
    cfg: Any = config.load(path, sections=sections(), parse=_parse, **kw)
    return cfg


def _parse(text: bytes | str, path: str, **kw: Any) -> config.Config:
    from ..core.config_yaml import loads
    return loads(text, path, **kw)


def loads_config(text: bytes | str, path: str = "<string>", **kw: Any) -> Config:
    """core.config_yaml.loads with the checks' sections."""
    from ..core.config_yaml import loads
    cfg: Any = loads(text, path, sections=sections(), **kw)
    return cfg


def default_config(**values: Any) -> Config:
    """The built-in defaults, every check's section included; `values` replace settings
    or whole sections (`filesystems=[...]`), as Config(...) takes its own."""
    schema = sections()
    checks = {k: values.pop(k) for k in list(values) if schema.field(k) is not None}
    cfg: Any = config.Config(sections=schema, **values)
    for key, value in checks.items():
        setattr(cfg, key, value)
    return cfg


def iter_settings():
    """(dotted key, field) of every setting, the checks' included (docs, their tests)."""
    return config.iter_settings(sections=sections())
