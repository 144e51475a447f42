"""Typed data classes that cost nothing to define.

The standard library's `@dataclass` imports `inspect` and writes and compiles an
`__init__`, `__repr__` and `__eq__` for every class when its module is imported: for
this package's classes that took longer than the rest of a healthy health check, on
every node, every interval. This module gives the same declarations the same meaning
(`@dataclass`, `@dataclass(frozen=True)`, `field(default=, default_factory=, metadata=)`,
`fields()`, `asdict()`, `MISSING`, `__post_init__`) with one shared, generic `__init__`,
`__repr__` and `__eq__`, so defining a class is a dictionary walk. An instance costs a
few microseconds more to build, which nothing here builds enough of to notice.

Type checkers see the standard library's names (they understand them natively), so a
class reads, and is checked, exactly like any other dataclass; the standard library's
own `dataclasses.fields()`, `asdict()` and `replace()` work on these classes too (at
the standard library's cost). This module's `fields()` and `asdict()` are the cheap ones.
"""
from __future__ import annotations

from .. import TYPE_CHECKING


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING = _Missing()
_SIMPLE = (str, int, float, bool, type(None), bytes)


class _FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen instance."""


class _Field:
    __slots__ = ("name", "type", "default", "default_factory", "metadata")

    def __init__(self, default=_MISSING, default_factory=_MISSING, metadata=None):
        self.name = ""
        self.type = None
        self.default = default
        self.default_factory = default_factory
        self.metadata = metadata if metadata is not None else {}

    def __repr__(self) -> str:
        return (f"Field(name={self.name!r}, default={self.default!r}, "
                f"default_factory={self.default_factory!r}, metadata={self.metadata!r})")


def _field(*, default=_MISSING, default_factory=_MISSING, metadata=None):
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, metadata)


def _fields(class_or_instance) -> tuple:
    try:
        return class_or_instance.__record_fields__
    except AttributeError:
        raise TypeError("must be called with a record class or instance") from None


def _init(self, *args, **kwargs) -> None:
    cls = type(self)
    fields = cls.__record_fields__
    if len(args) > len(fields):
        raise TypeError(f"{cls.__name__}() takes {len(fields)} positional arguments "
                        f"but {len(args)} were given")
    values = self.__dict__       # written directly: a frozen class's __setattr__ refuses
    missing = []
    for i, f in enumerate(fields):
        if i < len(args):
            if f.name in kwargs:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {f.name!r}")
            values[f.name] = args[i]
        elif f.name in kwargs:
            values[f.name] = kwargs.pop(f.name)
        elif f.default is not _MISSING:
            values[f.name] = f.default
        elif f.default_factory is not _MISSING:
            values[f.name] = f.default_factory()
        else:
            missing.append(f.name)
    if kwargs:                   # every field's keyword was taken above
        raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if missing:
        raise TypeError(f"{cls.__name__}() missing required argument"
                        f"{'s' if len(missing) > 1 else ''}: {', '.join(map(repr, missing))}")
    post = getattr(self, "__post_init__", None)
    if post is not None:
        post()


def _repr(self) -> str:
    body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.__record_fields__)
    return f"{type(self).__qualname__}({body})"


def _values(self) -> tuple:
    return tuple(getattr(self, f.name) for f in self.__record_fields__)


def _eq(self, other):
    if other.__class__ is self.__class__:
        return _values(self) == _values(other)
    return NotImplemented


def _frozen_hash(self) -> int:
    return hash(_values(self))


def _frozen_setattr(self, name, value):
    raise _FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise _FrozenInstanceError(f"cannot delete field {name!r}")


class _StdlibFields:
    """`__dataclass_fields__` on demand, made by the standard library itself from this
    class's fields, so that its `dataclasses.fields()`, `asdict()` and `replace()` (and
    tools built on them, like pytest's comparisons) work on these classes too. Only
    those import dataclasses; the hot path never asks."""

    def __get__(self, obj, cls):
        import dataclasses
        spec = []
        for f in cls.__record_fields__:
            kw = {"metadata": f.metadata}
            if f.default is not _MISSING:
                kw["default"] = f.default
            if f.default_factory is not _MISSING:
                kw["default_factory"] = f.default_factory
            spec.append((f.name, f.type, dataclasses.field(**kw)))
        made = dataclasses.make_dataclass(cls.__name__, spec).__dataclass_fields__  # type: ignore[attr-defined]
        type.__setattr__(cls, "__dataclass_fields__", made)   # once per class
        return made


def _process(cls, frozen: bool):
    fields: list[_Field] = []
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = cls.__dict__.get(name, _MISSING)
        f = value if isinstance(value, _Field) else _Field(default=value)
        if isinstance(f.default, (list, dict, set)):
            raise ValueError(f"mutable default {type(f.default)} for field {name} "
                             "is not allowed: use default_factory")
        f.name, f.type = name, annotation
        if f.default is _MISSING:
            if name in cls.__dict__:
                delattr(cls, name)            # a default_factory: no class attribute
        else:
            setattr(cls, name, f.default)
        if fields and f.default is _MISSING and f.default_factory is _MISSING and \
                (fields[-1].default is not _MISSING or fields[-1].default_factory is not _MISSING):
            raise TypeError(f"non-default argument {name!r} follows default argument")
        fields.append(f)
    cls.__record_fields__ = tuple(fields)
    cls.__dataclass_fields__ = _StdlibFields()
    own = cls.__dict__
    if "__init__" not in own:
        cls.__init__ = _init
    if "__repr__" not in own:
        cls.__repr__ = _repr
    if "__eq__" not in own:
        cls.__eq__ = _eq
        if "__hash__" not in own:
            # As the standard library does: equal by value means unhashable unless frozen.
            cls.__hash__ = _frozen_hash if frozen else None
    if frozen:
        cls.__setattr__ = _frozen_setattr
        cls.__delattr__ = _frozen_delattr
    return cls


def _dataclass(cls=None, *, frozen: bool = False):
    if cls is None:
        return lambda c: _process(c, frozen)
    return _process(cls, frozen)


def _asdict(obj) -> dict:
    if not hasattr(type(obj), "__record_fields__"):
        raise TypeError("asdict() should be called on record instances")
    return _copy(obj)


def _copy(value):
    if type(value) in _SIMPLE:
        return value
    fields = getattr(type(value), "__record_fields__", None)
    if fields is not None:
        return {f.name: _copy(getattr(value, f.name)) for f in fields}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_copy(k), _copy(v)) for k, v in value.items())
    import copy
    return copy.deepcopy(value)


if TYPE_CHECKING:
    # Type checkers understand the standard decorator natively; this one mirrors it.
    from dataclasses import MISSING, FrozenInstanceError, asdict, dataclass, field, fields
else:
    MISSING = _MISSING
    FrozenInstanceError = _FrozenInstanceError
    dataclass = _dataclass
    field = _field
    fields = _fields
    asdict = _asdict
