"""Reading a configuration file: PyYAML's node tree walked against the settings'
declarations (core/config.py), every problem reported at once as
`FILE:LINE: dotted.key: what is wrong`.

The walk uses nodes rather than the plain parsed data because nodes know their line.
A section class may add rules that span several of its settings (`validate`, given the
validator). Only a file not found in the configuration cache is read here: a healthy
run served from the cache imports neither this module nor YAML.
"""
from __future__ import annotations

import os

from .config import MISSING, BesideConfig, Config, ConfigError, Sections, default_of, fields


def loads(text: bytes | str, path: str = "<string>", node: str | None = None, mount_kind=None,
          sections: Sections | None = None) -> Config:
    """Parse and validate; `node` (default: $SLURMD_NODENAME, else the file's node_name,
    else the short hostname) picks the node_groups that apply; `sections` as for load()."""
    import yaml
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        root = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        # Where the parser gave up is often the line after the mistake (an unclosed
        # bracket or quote is found out on the next line): the construct it was in
        # began at the context mark, which is where the admin must look.
        context = getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        opened = str(getattr(e, "context", "") or "")
        # Only for what is closed by a bracket or a quote: a block mapping's start says
        # nothing of a wrong indentation further down.
        if context is not None and mark is not None and context.line < mark.line and \
                ("flow" in opened or "quoted" in opened):
            what = getattr(e, "context", None) or "the construct"
            raise ConfigError([f"{path}:{context.line + 1}: not valid YAML: {what} that starts here: {problem} "
                               f"(line {mark.line + 1})"]) from None
        where = f"{path}:{mark.line + 1}" if mark else path
        raise ConfigError([f"{where}: not valid YAML: {problem}"]) from None
    v = _Validator(path, yaml, mount_kind=mount_kind, sections=sections)
    if root is None or (isinstance(root, yaml.ScalarNode) and root.value in ("", "~", "null")):
        return Config(sections=sections)
    groups = v.node_groups(_pop_key(root, "node_groups", yaml))
    cfg = v.section(root, Config, "")
    problems = list(v.problems)
    # Each group is checked merged over the base, whichever node reads the file: a
    # mistake in the group of other nodes is still a mistake.
    for _hosts, settings, _text, i in groups:
        vg = _Validator(path, yaml, group=i, mount_kind=mount_kind, sections=sections)
        vg.section(_merge_nodes(root, settings, yaml), Config, "")
        problems += [p for p in vg.problems if p not in problems]
    if problems:
        raise ConfigError(problems)
    if cfg is None:
        return Config(sections=sections)
    name = node or os.environ.get("SLURMD_NODENAME") or cfg.node_name or os.uname().nodename.split(".", 1)[0]
    applied = [i for i, g in enumerate(groups) if name in g[0]]
    if applied:
        merged = root
        for i in applied:
            merged = _merge_nodes(merged, groups[i][1], yaml)
        cfg = _Validator(path, yaml, mount_kind=mount_kind, sections=sections).section(merged, Config, "")
    cfg.node_groups = [groups[i][2] for i in applied] if applied else []
    return cfg


def _pop_key(mapping, key: str, yaml):
    """Take `key` out of a mapping node: (key node, value node) or None."""
    if not isinstance(mapping, yaml.MappingNode):
        return None
    for i, (k, val) in enumerate(mapping.value):
        if getattr(k, "value", None) == key:
            del mapping.value[i]
            return k, val
    return None


def _merge_nodes(base, over, yaml):
    """`over` laid on `base`: mappings merge key by key, anything else is replaced."""
    if not (isinstance(base, yaml.MappingNode) and isinstance(over, yaml.MappingNode)):
        return over
    out = list(base.value)
    for k, val in over.value:
        at = next((i for i, (bk, _) in enumerate(out) if getattr(bk, "value", None) == k.value), None)
        if at is None:
            out.append((k, val))
        else:
            out[at] = (out[at][0], _merge_nodes(out[at][1], val, yaml))
    return yaml.MappingNode(base.tag, out, base.start_mark, base.end_mark, flow_style=base.flow_style)


_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


class _Validator:
    """Walks the node tree. A section class may add checks that span several of its
    settings: `validate(self, v, node, prefix)`, given this validator (`fail`, `key_node`,
    `value_node`, `item_node`, `mount_kind`)."""

    def __init__(self, path: str, yaml, group: int | None = None, mount_kind=None,
                 sections: Sections | None = None):
        self.mount_kind = mount_kind
        self.sections = sections
        self.path = path
        self.yaml = yaml
        self.group = group          # checking node_groups[group] laid over the base
        self.problems: list[str] = []

    def shaped(self, node, kind, key: str, what: str) -> bool:
        """True when `node` is a `kind` (a PyYAML node class); else the problem
        `must be WHAT, got ...`."""
        if isinstance(node, kind):
            return True
        self.fail(node, key, f"must be {what}, got {_describe(node, self.yaml)}")
        return False

    def fail(self, node, key: str, msg: str) -> None:
        if self.group is not None:
            key = f"node_groups[{self.group}].settings.{key}" if key else f"node_groups[{self.group}].settings"
        self.problems.append(f"{self.path}:{node.start_mark.line + 1}: {key or '(top level)'}: {msg}")

    def node_groups(self, item) -> list:
        """[(set of host names, settings mapping node, hostlist text, index)] of valid groups."""
        from .hostlist import HostlistError, expand
        if item is None:
            return []
        yaml, (_, node) = self.yaml, item
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, "node_groups", f"must be a list of {{nodes: HOSTLIST, settings: {{...}}}}, "
                      f"got {_describe(node, yaml)}")
            return []
        out = []
        for i, g in enumerate(node.value):
            key = f"node_groups[{i}]"
            if not isinstance(g, yaml.MappingNode):
                self.fail(g, key, f"must be a mapping with nodes and settings, got {_describe(g, yaml)}")
                continue
            parts = {}
            for k, val in g.value:
                if k.value not in ("nodes", "settings"):
                    self.fail(k, f"{key}.{k.value}", "unknown setting; known: nodes, settings")
                else:
                    parts[k.value] = (k, val)
            if "nodes" not in parts or "settings" not in parts:
                missing = " and ".join(x for x in ("nodes", "settings") if x not in parts)
                self.fail(g, key, f"needs {missing}")
                continue
            nk, nv = parts["nodes"]
            if not isinstance(nv, yaml.ScalarNode) or not nv.value.strip():
                self.fail(nv, f"{key}.nodes", f"must be a Slurm hostlist such as gpu[001-128], got {_describe(nv, yaml)}")
                continue
            try:
                hosts = set(expand(nv.value))
            except HostlistError as e:
                self.fail(nv, f"{key}.nodes", f"not a valid hostlist {nv.value!r}: {e}")
                continue
            sk, sv = parts["settings"]
            if not isinstance(sv, yaml.MappingNode):
                self.fail(sv, f"{key}.settings", f"must be a mapping of settings, got {_describe(sv, yaml)}")
                continue
            bad = [k for k, _ in sv.value if getattr(k, "value", None) in ("node_name", "node_groups")]
            for k in bad:
                self.fail(k, f"{key}.settings.{k.value}", "cannot be set per node group")
            if bad:
                continue
            out.append((hosts, sv, nv.value, i))
        return out

    def section(self, node, cls, prefix: str):
        yaml = self.yaml
        if not self.shaped(node, yaml.MappingNode, prefix, "a mapping of settings"):
            return cls() if _constructible(cls) else None
        specs = {f.name: f for f in fields(cls) if not f.metadata.get("internal")}
        extra: dict = {}
        if cls is Config and self.sections is not None:
            extra = self.sections.all()
            specs.update(extra)
        values, given = {}, set()
        for knode, vnode in node.value:
            key = knode.value
            dotted = f"{prefix}.{key}" if prefix else str(key)
            spec = specs.get(key)
            if spec is None:
                close = _close_match(str(key), specs)
                hint = f" (did you mean {close}?)" if close else ""
                self.fail(knode, dotted, f"unknown setting{hint}; known: {', '.join(sorted(specs))}")
                continue
            if key in given:
                self.fail(knode, dotted, "given twice")
                continue
            given.add(key)
            ok, value = self.value(vnode, spec.metadata, dotted)
            if ok:
                values[key] = value
        missing = [name for name, f in specs.items()
                   if f.default is MISSING and f.default_factory is MISSING and name not in given]
        for name in missing:
            self.fail(node, f"{prefix}.{name}" if prefix else name, "required setting is missing")
        if missing or len(values) != len(given):
            return None
        obj = cls(**{k: v for k, v in values.items() if k not in extra})
        if extra:
            obj.sections = self.sections
            for key, spec in extra.items():
                setattr(obj, key, values[key] if key in values else default_of(spec))
        check = getattr(self, "check_" + cls.__name__, None)
        if check:
            check(obj, node, prefix)
        own = getattr(obj, "validate", None)
        if own is not None:
            own(self, node, prefix)
        return obj

    # For the sections' own validate(): the node of a key, of its value, of a list's item.
    def key_node(self, node, key):
        return _child(node, key)

    def value_node(self, node, key):
        return _child_value(node, key)

    def item_node(self, node, i):
        return _item(node, i)

    def value(self, node, meta, key):
        yaml, kind = self.yaml, meta["kind"]
        if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") and not node.style:
            if meta.get("nullable"):
                return True, None
            if kind == "list":
                return True, []
            self.fail(node, key, "must have a value, got nothing (null)")
            return False, None
        if kind == "section":
            obj = self.section(node, meta["cls"], key)
            return obj is not None, obj
        if kind == "list":
            if not self.shaped(node, yaml.SequenceNode, key, "a list"):
                return False, None
            items: list = []
            seen: dict = {}
            unique = meta.get("unique")
            for i, item in enumerate(node.value):
                obj = self.section(item, meta["item"], f"{key}[{i}]")
                if obj is None:
                    continue
                if unique:
                    v = getattr(obj, unique)
                    if v in seen:
                        self.fail(_child(item, unique), f"{key}[{i}].{unique}",
                                  f"{v} is already given in {key}[{seen[v]}]")
                        continue
                    seen[v] = i
                items.append(obj)
            return True, items
        if kind == "strlist":
            if not self.shaped(node, yaml.SequenceNode, key, "a list of strings"):
                return False, None
            item_meta = {"kind": "enum", "choices": meta["choices"]} if meta.get("choices") else {"kind": "str"}
            out = []
            for i, item in enumerate(node.value):
                ok, v = self.value(item, item_meta, f"{key}[{i}]")
                if ok:
                    out.append(v)
            return True, out
        if kind == "map":
            if not self.shaped(node, yaml.MappingNode, key, "a mapping"):
                return False, None
            mapping: dict = {}
            for knode, vnode in node.value:
                ok_k, k = self.scalar(knode, {"kind": meta["key_kind"]}, f"{key} key")
                ok_v, v = self.value(vnode, meta["value"], f"{key}.{knode.value}")
                if ok_k and ok_v:
                    mapping[k] = v
            return True, mapping
        if not self.shaped(node, yaml.ScalarNode, key, "a single value"):
            return False, None
        return self.scalar(node, meta, key)

    def scalar(self, node, meta, key):
        kind, raw = meta["kind"], node.value
        quoted = node.style in ("'", '"')
        if kind in ("str", "path", "enum"):
            if kind == "path" and not raw.startswith("/"):
                self.fail(node, key, f"must be an absolute path, got {raw!r}")
                return False, None
            if kind == "enum" and raw not in meta["choices"]:
                self.fail(node, key, f"must be one of {', '.join(meta['choices'])}, got {raw!r}")
                return False, None
            if "\x00" in raw or "\n" in raw:
                self.fail(node, key, "must be a single line")
                return False, None
            return True, raw
        if kind == "switch":
            low = raw.lower()
            if low in ("auto", "true", "false"):
                return True, low
            if not quoted and low in _TRUE | _FALSE:
                return True, "true" if low in _TRUE else "false"
            self.fail(node, key, f"must be auto, true or false, got {raw!r}")
            return False, None
        if kind == "bool":
            low = raw.lower()
            if not quoted and low in _TRUE:
                return True, True
            if not quoted and low in _FALSE:
                return True, False
            self.fail(node, key, f"must be true or false, got {raw!r}")
            return False, None
        if kind in ("int", "seconds", "number"):
            try:
                if quoted:
                    raise ValueError
                num = int(raw, 0) if kind == "int" else float(raw)
            except ValueError:
                want = "a whole number" if kind == "int" else "a number"
                if kind == "seconds":
                    want += " of seconds"
                self.fail(node, key, f"must be {want}, got {raw!r}")
                return False, None
            if num != num or num in (float("inf"), float("-inf")):
                self.fail(node, key, f"must be a finite number, got {raw!r}")
                return False, None
            if kind == "seconds" and num <= 0:
                self.fail(node, key, f"must be > 0 seconds, got {raw}")
                return False, None
            lo, hi = meta.get("min"), meta.get("max")
            if lo is not None and num < lo:
                self.fail(node, key, f"must be >= {lo}, got {raw}")
                return False, None
            if hi is not None and num > hi:
                self.fail(node, key, f"must be <= {hi}, got {raw}")
                return False, None
            return True, num
        raise AssertionError(f"unknown setting kind {kind}")

    # --- checks that span several settings -------------------------------------------
    def check_Config(self, cfg: Config, node, prefix: str) -> None:
        if not cfg.reason_prefix.strip():
            self.fail(_child(node, "reason_prefix"), "reason_prefix", "must not be empty: it is how "
                      "slurm-hooks tells its own job comments, and older releases' drains, from an admin's")

    def check_BesideConfig(self, b: BesideConfig, node, prefix: str) -> None:
        if b.command and not b.command[0].startswith("/"):
            self.fail(_child(node, "command"), f"{prefix}.command",
                      f"the program must be an absolute path (HealthCheckProgram has no PATH), got {b.command[0]!r}")



def _child(node, key):
    for k, v in getattr(node, "value", ()):
        if getattr(k, "value", None) == key:
            return k
    return node


def _child_value(node, key):
    """The value node of `key` in a mapping node (the mapping itself when absent)."""
    for k, v in getattr(node, "value", ()):
        if getattr(k, "value", None) == key:
            return v
    return node


def _item(node, i):
    items = getattr(node, "value", None)
    return items[i] if isinstance(items, list) and i < len(items) and hasattr(items[i], "start_mark") else node


def _constructible(cls) -> bool:
    return all(f.default is not MISSING or f.default_factory is not MISSING for f in fields(cls))


def _describe(node, yaml) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return repr(node.value)


def _close_match(key: str, known) -> str | None:
    from difflib import get_close_matches
    m = get_close_matches(key, list(known), n=1, cutoff=0.75)
    return m[0] if m else None
